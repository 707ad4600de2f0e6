# Loop detection: the same tool with the same arguments and the same
# result again gets a note to the model; again, a final round without
# tools; the A-B-A-B ping-pong the same. And the last-iteration
# explanation when every tool of the previous round failed.
. "$(dirname "$0")/lib/mock.sh" "$1"

# -- same call forever; the final round (tools off) gets an answer
start_mock m '{"steps":[{"tool_calls":[{"id":"c1","name":"echo","arguments":{"q":"same"}}],
  "repeat":true,"if_no_tools":{"text":"I was going in circles; here is what I have."}}]}'
config "providers = { $(provider openai $PORT_m) }"
ask --json "loop please"
expect_rc 0 "same-call loop ends with an answer"
expect_out "I was going in circles" "final round answered"
[ "$(printf '%s\n' "$OUT" | grep -c '"type":"note"')" = 2 ] && ok "two notes: warning, then tools off" || fail "expected two notes"
check m "len(reqs) == 4" "calls: first, repeat (note), repeat (final), final round"
check m "'same results' in msgs(2)[-1]['content'] and msgs(2)[-1]['role'] == 'user'" "the note reached the model"
check m "reqs[3]['body']['tool_choice'] == 'none' and reqs[2]['body']['tool_choice'] == 'auto'" "the last round has tools off"
printf '%s\n' "$OUT" | grep '"type":"run_end"' | grep -q '"loop_strikes":2' && ok "run_end records the loop" || fail "run_end lacks loop_strikes"
stop_mocks

# -- A-B-A-B ping-pong (Anthropic): detected without an exact repeat in a row
A='{"tool_calls":[{"id":"a","name":"echo","arguments":{"x":"A"}}]}'
B='{"tool_calls":[{"id":"b","name":"echo","arguments":{"x":"B"}}]}'
AF='{"tool_calls":[{"id":"a","name":"echo","arguments":{"x":"A"}}],"if_no_tools":{"text":"ping-pong over"}}'
BF='{"tool_calls":[{"id":"b","name":"echo","arguments":{"x":"B"}}],"if_no_tools":{"text":"ping-pong over"}}'
start_mock m "{\"steps\":[$A,$B,$A,$B,$AF,$BF,$AF]}"
config "providers = { $(provider anthropic $PORT_m) }"
ask --json "ping pong"
expect_rc 0 "ping-pong ends with an answer"
expect_out "ping-pong over" "final round answered"
check m "any('same results' in str(m['content']) for m in msgs(4))" "ping-pong noted after A-B-A-B"
check m "reqs[-1]['body']['tool_choice'] == {'type': 'none'}" "then tools off (Anthropic tool_choice none)"
check m "len(reqs) <= 7" "stopped within the fixture"
stop_mocks

# -- a model that ignores the final round and keeps asking for tools: stop
start_mock m '{"steps":[{"tool_calls":[{"id":"c1","name":"echo","arguments":{"q":"same"}}],"repeat":true}]}'
config "providers = { $(provider openai $PORT_m) }"
ask "loop"
expect_rc 1 "a model that never stops is stopped"
expect_err "loop_detected" "reason: loop_detected"
check m "len(reqs) == 4" "no more calls after the final round"
stop_mocks

# -- last iteration: every tool of the previous round failed -> explain
start_mock m '{"steps":[
  {"tool_calls":[{"id":"c1","name":"fs.read","arguments":{"path":"missing.txt"}},{"id":"c2","name":"no.such","arguments":{}}]},
  {"text":"unused","tool_calls":[{"id":"c3","name":"fs.read","arguments":{"path":"x"}}],
   "if_no_tools":{"text":"I tried to read missing.txt, but it does not exist."}}]}'
config "providers = { $(provider openai $PORT_m) }, react = { max_iterations = 2 }"
ask --json "read missing.txt"
expect_rc 0 "explanation instead of a silent stop"
expect_out "it does not exist" "the model explained"
check m "reqs[1]['body']['tool_choice'] == 'none' and 'Every tool call in the previous round failed' in msgs(1)[-1]['content']" "final round asks for an explanation"
# without failures the last iteration is a normal one (no note)
stop_mocks
start_mock m '{"steps":[{"tool_calls":[{"id":"c1","name":"echo","arguments":{"a":1}}]},{"text":"fine"}]}'
config "providers = { $(provider openai $PORT_m) }, react = { max_iterations = 2 }"
ask "echo"
expect_rc 0 "normal two-round run"
check m "reqs[1]['body']['tool_choice'] == 'auto'" "no explanation round when a tool worked"
finish
