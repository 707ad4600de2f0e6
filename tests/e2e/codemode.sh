# Code mode (issue 14): ask/chat --mode lua and delegate(mode = "lua") offer
# one `lua` tool (the same definition on both wire formats), the system
# prompt carries the allowed tools' API, one chunk does the 10-step task,
# the result holds the value, print output and a call summary, runs show
# lists the code and each inner call, and parallel read-only chunks, loop
# detection, reflexion, delegate schemas and the config defaults (provider,
# agent) keep working.
. "$(dirname "$0")/lib/mock.sh" "$1"
. "$(dirname "$0")/lib/codemode.sh"

ADD10='local s = 0
for i = 1, 10 do
  s = tools.call("calc.add", { a = s, b = i }).sum
end
print("total", s)
return { total = s }'

# -- the 10-step task in one chunk, both wire formats
for kind in openai anthropic; do
  start_mock $kind "{\"count_tokens\":true,\"steps\":[{\"text\":\"tools mode\"}],
    \"code_steps\":[$(lua_step "$ADD10"),{\"text\":\"The total is in: %{result}\"}]}"
  config "providers = { $(provider $kind "$(eval echo \$PORT_$kind)") }"
  ask --mode lua --tools 'calc.*' "Add the numbers 1 to 10 with calc.add"
  expect_rc 0 "$kind: code-mode ask"
  expect_out '"value":{"total":55}' "$kind: the chunk's return value comes back as JSON"
  expect_out '"print":"total\t55\n"' "$kind: print output captured"
  expect_out '"calls":"10 calls: calc.add ok x10"' "$kind: one-line call summary"
  ccheck $kind "len(reqs) == 2" "$kind: two model calls for the 10-step task"
  if [ $kind = openai ]; then
    ccheck $kind "[t['function']['name'] for t in reqs[0]['body']['tools']] == ['lua']" "openai: only the lua tool is offered"
    ccheck $kind "reqs[0]['body']['tools'][0]['function']['parameters'] == {'type':'object','required':['code'],'properties':{'code':{'type':'string','description':'Lua source; \`return\` the value you need'}},'additionalProperties':False}" "openai: lua takes one string, code"
    python3 -c "import json;print(json.dumps(json.loads(open('$WS/openai.log').readline())['body']['tools'][0]['function'],sort_keys=True))" > "$WS/def.openai"
  else
    ccheck $kind "[t['name'] for t in reqs[0]['body']['tools']] == ['lua']" "anthropic: only the lua tool is offered"
    python3 -c "import json;t=json.loads(open('$WS/anthropic.log').readline())['body']['tools'][0];print(json.dumps({'name':t['name'],'description':t['description'],'parameters':t['input_schema']},sort_keys=True))" > "$WS/def.anthropic"
    if cmp -s "$WS/def.openai" "$WS/def.anthropic"; then ok "the same lua definition on both wire formats"; else RC=-; OUT=$(cat "$WS/def.openai"); ERR=$(cat "$WS/def.anthropic"); fail "lua definitions differ"; fi
  fi
  ccheck $kind "'calc.add{a: number, b: number} -> {sum: number}  -- Add two numbers' in json.dumps(reqs[0]['body'])" "$kind: the API line of calc.add (params, returns, description) is in the system prompt"
  ccheck $kind "'fs.write' not in json.dumps(reqs[0]['body'])" "$kind: tools outside --tools are not in the API"
  ccheck $kind "'json.encode' in json.dumps(reqs[0]['body']) and 'print' in json.dumps(reqs[0]['body'])" "$kind: the rules are in the system prompt"
  stop_mocks
done

# -- runs show: the code and each inner call under the lua call
RUN=$("$LUAGENT" --workspace "$WS" runs list --json --limit 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
"$LUAGENT" --workspace "$WS" runs show "$RUN" > "$WS/out" 2> "$WS/err"; RC=$?; OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
expect_err '-> lua' "runs show: the lua call"
expect_err '  3 |   s = tools.call("calc.add", { a = s, b = i }).sum' "runs show: the code, numbered"
expect_err '-> calc.add {"a":45,"b":10} ok: {"sum":55}' "runs show: each inner call with its result"
n=$(grep -c -- '-> calc.add' "$WS/err")
[ "$n" = 10 ] && ok "runs show: ten inner calls" || fail "runs show: $n inner calls"
"$LUAGENT" --workspace "$WS" runs list --json --limit 1 > "$WS/out"; OUT=$(cat "$WS/out")
expect_out '"tool_calls":11' "the run counts the lua call and its ten inner calls"

# -- chat --mode lua
start_mock chat "{\"steps\":[{\"text\":\"tools mode\"}],\"code_steps\":[$(lua_step 'return tools.call("calc.add", {a = 2, b = 3}).sum'),{\"text\":\"chat: %{result}\"}]}"
config "providers = { $(provider openai $PORT_chat) }"
printf 'add 2 and 3\n' | timeout 60 "$LUAGENT" --workspace "$WS" chat --mode lua --tools calc.add > "$WS/out" 2> "$WS/err"; RC=$?
OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
expect_rc 0 "chat --mode lua"
expect_out '"value":5' "chat: the chunk ran"
stop_mocks

# -- the provider's default (mode = "lua"), and --mode tools overriding it
start_mock pm "{\"steps\":[{\"text\":\"tools mode answer\"}],\"code_steps\":[{\"text\":\"code mode answer\"}]}"
config "providers = { $(provider openai $PORT_pm ', mode = "lua"') }"
ask --tools calc.add "hi"
expect_out "code mode answer" "provider mode = \"lua\" makes code mode the default"
ask --mode tools --tools calc.add "hi"
expect_out "tools mode answer" "--mode tools overrides the provider's default"
config "providers = { $(provider openai $PORT_pm ', mode = "python"') }"
ask "hi"
expect_rc 2 "a bad provider mode is a config error"
expect_err 'mode: expected "lua" (code mode) or "tools"' "the error names the key and the values"
ask --mode perl "hi"
expect_rc 2 "--mode perl refused"
expect_err "--mode needs lua (code mode) or tools, not 'perl'" "the option error says what is accepted"
stop_mocks

# -- the scripted provider (kind = "script") in code mode, offline
config 'providers = { { name = "demo", kind = "script", mode = "lua", turns = {
  { tool = "lua", args = { code = "local s = 0 for i = 1, 4 do s = tools.call(\"calc.add\", {a = s, b = i}).sum end return s" } },
  { text = "scripted: %{result}" } } } }'
ask --tools calc.add "sum"
expect_rc 0 "a scripted provider with mode = lua"
expect_out 'scripted: {"ok":true,"calls":"4 calls: calc.add ok x4","value":10,"print":""}' "the scripted lua call ran as a chunk"

# -- delegate(mode = "lua", schema = ...) from a script, and an agent profile's mode
DG="$(lua_step 'return tools.call("calc.add", {a = 20, b = 22}).sum'),{\"text\":\"{\\\"answer\\\": 42}\"}"
start_mock dg "{\"steps\":[{\"text\":\"tools mode\"}],\"code_steps\":[$DG,$DG]}"
config "providers = { $(provider anthropic $PORT_dg) }, agents = { coder = { mode = \"lua\", tools = { \"calc.*\" } } }"
cat > "$WS/dg.lua" <<'LUA'
local v = delegate("What is 20 + 22?", { mode = "lua", tools = { "calc.add" },
  schema = { type = "object", required = { "answer" }, properties = { answer = { type = "integer" } } } })
print("schema answer=" .. v.answer)
local w = delegate("Again", { agent = "coder" })
print("agent answer=" .. w)
local ok, err = pcall(delegate, "x", { mode = "cobol" })
print("bad mode: " .. err.message)
local ok2, err2 = pcall(delegate, "x", { mode = "tools", tools = { "delegate" } })
print("tools mode: " .. err2.message)
LUA
lrun "$WS/dg.lua"
expect_rc 0 "delegate in code mode"
expect_out "schema answer=42" "delegate(mode = lua, schema = ...) returns the decoded table"
expect_out 'agent answer={"answer": 42}' "an agent profile's mode = lua is code mode"
expect_out 'bad mode: delegate: opts.mode must be "lua" (code mode) or "tools"' "a bad opts.mode is refused"
expect_out "tools mode: delegate: opts.tools: 'delegate' gives code-mode chunks delegate(); it needs mode = \"lua\"" "the delegate pattern outside code mode is refused"
ccheck dg "all([t['name'] for t in r['body']['tools']] == ['lua'] for r in reqs)" "every delegate request offered only lua"
stop_mocks

# -- parallel: several lua calls of one round run in threads when every tool in reach is read-only
P1=$(python3 -c 'import json; print(json.dumps({"tool_calls":[{"id":"p1","name":"lua","arguments":{"code":"return tools.call(\"calc.add\", {a=1,b=1}).sum"}},{"id":"p2","name":"lua","arguments":{"code":"return tools.call(\"calc.add\", {a=2,b=2}).sum"}}]}))')
start_mock par "{\"steps\":[{\"text\":\"x\"}],\"code_steps\":[$P1,{\"text\":\"done\"},$P1,{\"text\":\"done\"}]}"
config "providers = { $(provider openai $PORT_par) }"
ask --json --mode lua --tools calc.add "two sums"
expect_rc 0 "two lua calls in one round"
n=$(printf '%s\n' "$OUT" | grep '"type":"tool_result"' | grep -c '"parallel":true')
[ "$n" = 2 ] && ok "read-only chunks ran in parallel" || fail "parallel tool results: $n"
ccheck par "res(1, 0)['value'] == 2 and res(1, 1)['value'] == 4" "results in the order the model asked"
ask --json --mode lua --tools 'calc.add,probe.mark' "two sums"
n=$(printf '%s\n' "$OUT" | grep '"type":"tool_result"' | grep -c '"parallel":true')
[ "$n" = 0 ] && ok "a medium tool in reach: chunks run one after the other" || fail "parallel with a medium tool: $n"
stop_mocks

# -- loop detection: the same chunk with the same result again and again
SAME=$(lua_step 'return tools.call("calc.add", {a = 1, b = 1})')
start_mock loop "{\"steps\":[{\"text\":\"x\"}],\"code_steps\":[$SAME,$SAME,$SAME,{\"text\":\"gave up\"}]}"
config "providers = { $(provider openai $PORT_loop) }"
ask --mode lua --tools calc.add "loop"
expect_rc 0 "looping chunks end"
ccheck loop "any('same tools with the same arguments' in str(m.get('content')) for m in msgs(2))" "loop detection notes the repeated lua call"
ccheck loop "reqs[3]['body'].get('tool_choice') == 'none' or not reqs[3]['body'].get('tools')" "the third repeat turns tools off"
stop_mocks

# -- reflexion reviews a code-mode answer
start_mock rf "{\"steps\":[{\"text\":\"x\"}],\"code_steps\":[$(lua_step 'return tools.call("calc.add", {a = 5, b = 7}).sum'),{\"text\":\"It is 13.\"},{\"text\":\"It is 12.\"}],
  \"when_system\":{\"careful reviewer\":[{\"text\":\"{\\\"ok\\\": false, \\\"feedback\\\": \\\"the chunk returned 12\\\"}\"}]}}"
config "providers = { $(provider openai $PORT_rf) }, reflexion = { enabled = true, max_retries = 1 }"
ask --mode lua --tools calc.add "5 + 7?"
expect_rc 0 "reflexion in code mode"
expect_out "It is 12." "the reviewed answer"
ccheck rf "'the chunk returned 12' in json.dumps(reqs[3]['body'])" "the reviewer's note went back"
stop_mocks

finish
