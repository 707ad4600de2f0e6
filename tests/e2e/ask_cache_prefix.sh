# Prompt caching (issue 18, item 10): over a 10-turn run each request
# repeats its predecessor's prefix byte for byte (the mock reports it, with
# the moving cache_control markers left out), in both wire formats; a skill
# tool's schema, built from a Lua table whose key order changes from one
# process to the next, goes out as the same bytes in every process; Anthropic
# gets cache_control breakpoints on system + tools and on the conversation so
# far; OpenAI gets a prompt_cache_key when caching is on.
. "$(dirname "$0")/lib/mock.sh" "$1"
mkdir -p "$WS/skills/lookup"
cat > "$WS/skills/lookup/skill.lua" <<'LUA'
return {
  name = "lookup", description = "Look a record up", keywords = { "lookup" },
  tools = {
    find = {
      description = "Find one record",
      params = { type = "object", required = { "key" }, properties = {
        key = { type = "string" }, alpha = { type = "string" }, bravo = { type = "integer" },
        charlie = { type = "boolean" }, delta = { type = "string", enum = { "x", "y" } },
        echo = { type = "number" }, foxtrot = { type = "string" }, golf = { type = "string" },
        hotel = { type = "array", items = { type = "string" } } } },
      impact = "read",
      run = function(args) return { key = args.key, found = true, size = #args.key } end,
    },
  },
}
LUA
steps='{"steps":['
for k in 1 2 3 4 5 6 7 8 9; do
  steps="$steps{\"text\":\"\",\"tool_calls\":[{\"id\":\"c$k\",\"name\":\"lookup.find\",\"arguments\":{\"key\":\"k$k\"}}]},"
done
steps="$steps{\"text\":\"Found all nine.\"}]}"
for kind in anthropic openai; do
  start_mock m "$steps"
  config "providers = { $(provider $kind $PORT_m ', prompt_cache = true') }"
  ask --tools 'lookup.*' "look up k1 to k9"
  expect_rc 0 "$kind: 10-turn run"
  check m "len(reqs) == 10" "$kind: ten model calls"
  check m "len(reqs) == 10 and all(r['cache_prefix'].get('repeats_previous') for r in reqs[1:])" "$kind: turns 2..10 repeat their predecessor's prefix byte for byte"
  check m "len(reqs) == 10 and all(r['cache_prefix']['shared_bytes'] == r['cache_prefix']['previous_bytes'] for r in reqs[1:])" "$kind: the whole previous prefix is shared"
  if [ $kind = anthropic ]; then
    check m "len(reqs) == 10 and all(r['body']['system'][0].get('cache_control') == {'type':'ephemeral'} for r in reqs)" "anthropic: breakpoint on system (+ tools)"
    check m "len(reqs) == 10 and all(r['body']['messages'][-1]['content'][-1].get('cache_control') == {'type':'ephemeral'} for r in reqs)" "anthropic: breakpoint on the conversation so far"
    check m "len(reqs) == 10 and all(sum(json.dumps(r['body']).count('cache_control') for _ in [0]) <= 4 for r in reqs)" "anthropic: at most 4 breakpoints"
  else
    check m "len(reqs) == 10 and len(set(r['body'].get('prompt_cache_key', '') for r in reqs)) == 1 and reqs[0]['body']['prompt_cache_key'].startswith('lg-')" "openai: one prompt_cache_key for the run"
  fi
  stop_mocks
done
# the same schema bytes from separate processes (Lua's table order is seeded per process)
start_mock m '{"steps":[{"text":"ok","repeat":true}]}'
config "providers = { $(provider anthropic $PORT_m) }"
for i in 1 2 3 4 5 6; do ask --tools 'lookup.*' "again"; done
check m "len(set(json.dumps(r['body']['tools']) for r in reqs)) == 1" "tool schemas are the same bytes in every process"
check m "list(reqs[0]['body']['tools'][0]['input_schema']['properties']) == sorted(reqs[0]['body']['tools'][0]['input_schema']['properties'])" "schema keys in a stable (sorted) order"
stop_mocks
# off for OpenAI-compatible servers by default (some refuse unknown fields), and on request
start_mock m '{"steps":[{"text":"ok","repeat":true}]}'
config "providers = { $(provider openai $PORT_m) }"
ask "x"
check m "'prompt_cache_key' not in reqs[-1]['body']" "openai-compatible: no prompt_cache_key by default"
config "providers = { $(provider anthropic $PORT_m ', prompt_cache = false') }"
ask "x"
check m "'cache_control' not in json.dumps(reqs[-1]['body'])" "anthropic: prompt_cache = false sends no breakpoints"
stop_mocks
finish
