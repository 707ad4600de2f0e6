# ask with workspace skills: the selected skill's prompt joins the system
# prompt and its tools are offered (an unrelated message gets neither); a
# skill's Lua tool that calls delegate() runs a nested loop inside the
# outer one, with a child budget, journaled with its parent.
. "$(dirname "$0")/lib/mock.sh" "$1"
mkdir -p "$WS/skills/triage"
cat > "$WS/skills/triage/skill.lua" <<'LUA'
return {
  name = "triage",
  description = "Triage radar contacts and rate their threat",
  keywords = { "triage", "contact", "threat" },
  examples = { "triage contact c7" },
  prompt = "Triage rules: hostile contacts first.",
  tools = {
    assess = {
      description = "Rate one contact's threat from 0 to 5",
      params = { type = "object", required = { "contact" },
                 properties = { contact = { type = "string" } } },
      impact = "low",
      run = function(args)
        return delegate("Rate the threat of contact " .. args.contact, {
          schema = { type = "object", required = { "threat" },
                     properties = { threat = { type = "integer", minimum = 0, maximum = 5 } } } })
      end,
    },
  },
}
LUA
FIX='{"steps":[{"tool_calls":[{"id":"o1","name":"triage.assess","arguments":{"contact":"c7"}}]},
  {"text":"{\"threat\": 3}"},{"text":"Contact c7 has threat 3."}]}'
start_mock m "$FIX"
config "providers = { $(provider openai $PORT_m) }"
ask "triage contact c7 please"
expect_rc 0 "answered through a skill tool that delegates"
expect_out "Contact c7 has threat 3." "final answer"
expect_err "<- triage.assess ok" "skill tool result shown"
expect_err "[delegate]" "nested run shown"
check m "'## Skill: triage' in msgs(0)[0]['content'] and 'Triage rules' in msgs(0)[0]['content']" "skill prompt in the system prompt"
check m "'triage__assess' in [t['function']['name'] for t in reqs[0]['body']['tools']]" "skill tool offered"
check m "'tools' not in reqs[1]['body'] and 'JSON Schema' in msgs(1)[-1]['content'] and 'c7' in msgs(1)[-1]['content']" "the delegate's own request (no tools)"
check m "msgs(2)[-1]['role'] == 'tool' and msgs(2)[-1]['content'] == '{\"threat\":3}'" "decoded delegate answer as the tool result"
OUT=$("$LUAGENT" --workspace "$WS" runs list --json | python3 "$(dirname "$0")/lib/jsonl.py"); RC=0
ASK=$(printf '%s\n' "$OUT" | grep '"kind":"ask"' | sed 's/.*"id":"\([^"]*\)".*/\1/')
printf '%s\n' "$OUT" | grep '"kind":"delegate"' | grep -q "\"parent\":\"$ASK\"" && ok "delegate journaled under the ask run" || fail "delegate parent"
stop_mocks

# an unrelated message selects no skill: neither its text nor its tools
start_mock m '{"steps":[{"text":"It is noon."}]}'
config "providers = { $(provider openai $PORT_m) }"
ask "what time is it"
expect_rc 0 "unrelated message"
check m "'Skill: triage' not in msgs(0)[0]['content'] and 'triage__assess' not in [t['function']['name'] for t in reqs[0]['body']['tools']] and 'time__now' in [t['function']['name'] for t in reqs[0]['body']['tools']]" "no skill text or tool, host tools still offered"
stop_mocks

# nested budget: the loop allows 2 model calls; the delegate uses the
# second, so the loop cannot make a third
start_mock m "$FIX"
config "providers = { $(provider openai $PORT_m) }, react = { max_model_calls = 2 }"
ask --json "triage contact c7"
expect_rc 1 "the loop's budget covers the delegate's calls"
printf '%s\n' "$OUT" | grep '"type":"run_end"' | grep -v '"status":"ok"' | grep -q 'model call limit reached (2 of 2)' && ok "the loop stopped at its own limit after the delegate spent" || fail "limit"
printf '%s\n' "$OUT" | grep '"type":"tool_result"' | grep -q '"ok":true' && ok "the delegate itself finished within budget" || fail "delegate result"
check m "len(reqs) == 2" "two model calls in all"
finish
