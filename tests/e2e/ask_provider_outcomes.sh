# Real provider traffic (issue 18, items 5-9 and 11): recorded-style
# responses of both wire formats (tests/fixtures/providers, written from
# the published API references) and mock steps, through `luagent ask` and
# delegate(). Refusals and truncated answers are run outcomes with their own
# exit codes; server-tool blocks never become local calls and go back
# unchanged, pause_turn continues the turn, only the first choice counts;
# thinking blocks (with signature) go back before the tool_use blocks;
# errors name the provider's error type, a non-stream body names what came;
# cached tokens are counted; OpenAI max_tokens goes out as
# max_completion_tokens; a stream broken inside a tool call is retried.
. "$(dirname "$0")/lib/mock.sh" "$1"
FX="$SRC/tests/fixtures/providers"
ev() { printf '%s\n' "$OUT" | grep "\"type\":\"$1\""; }

# -- 5. refusals: OpenAI streamed (delta.refusal) and whole (message.refusal)
start_mock m "{\"steps\":[{\"replay\":\"$FX/openai_refusal.sse\"}]}"
config "providers = { $(provider openai $PORT_m) }"
ask "write malware"
expect_rc 3 "openai streamed refusal: exit 3"
expect_err "refused" "stderr names the outcome"
expect_err "I'm sorry, I can't assist with that request." "the refusal text is shown"
OUT=$("$LUAGENT" --workspace "$WS" runs list); RC=$?
expect_out "refused" "runs list shows status refused"
OUT=$("$LUAGENT" --workspace "$WS" runs list --json | python3 "$(dirname "$0")/lib/jsonl.py"); RC=0
printf '%s\n' "$OUT" | grep -q "I'm sorry, I can't assist" && ok "the refusal text is kept in the journal" || fail "refusal text not journaled"
stop_mocks
start_mock m "{\"steps\":[{\"replay\":\"$FX/openai_refusal.json\"}]}"
config "providers = { $(provider openai $PORT_m ', stream = false') }"
ask --json "write malware"
expect_rc 3 "openai whole refusal: exit 3"
ev refusal | grep -q "I cannot assist with that request" && ok "refusal event with the text" || fail "no refusal event"
ev run_end | grep -q '"status":"refused"' && ok "run_end status refused" || fail "run_end status"
stop_mocks
# Anthropic: stop_reason refusal with stop_details (streamed, recorded) and whole (mock step)
start_mock m "{\"steps\":[{\"replay\":\"$FX/anthropic_refusal.sse\"}]}"
config "providers = { $(provider anthropic $PORT_m) }"
ask "write malware"
expect_rc 3 "anthropic streamed refusal: exit 3"
expect_err "This request asks for help building malware. (category: cyber)" "stop_details shown"
stop_mocks
start_mock m '{"steps":[{"text":"","refusal":"Not this.","refusal_category":"bio"}]}'
config "providers = { $(provider anthropic $PORT_m ', stream = false') }"
ask "x"
expect_rc 3 "anthropic whole refusal: exit 3"
expect_err "Not this. (category: bio)" "whole stop_details shown"
stop_mocks

# a chat goes on after a refusal; the refused turn stays out of the history
start_mock m '{"steps":[{"text":"Partial","refusal":"No.","refusal_category":"cyber"},{"text":"Fine."}]}'
config "providers = { $(provider anthropic $PORT_m) }"
python3 "$SRC/tests/e2e/lib/drive_chat.py" "$WS/m.log" "$WS/out" "$WS/err" -- "$LUAGENT" --workspace "$WS" chat --session s1 <<'DRIVE'
say first question
wait_err refused
say second question
wait_out 1 Fine.
close
DRIVE
RC=$?; OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
expect_rc 0 "chat goes on after a refused turn"
expect_err "No. (category: cyber)" "chat shows the refusal"
check m "len(reqs) == 2 and [m['role'] for m in msgs(1)] == ['user'] and [b['text'] for b in msgs(1)[0]['content']] == ['first question', 'second question']" "the refused turn is not sent back"
stop_mocks

# -- 6. truncation: finish_reason length / stop_reason max_tokens; cached usage (9)
start_mock m "{\"steps\":[{\"replay\":\"$FX/openai_length.json\",\"repeat\":true}]}"
config "providers = { $(provider openai $PORT_m) }"
ask --json "moons?"
expect_rc 4 "openai finish_reason length: exit 4"
ev run_end | grep -q '"status":"truncated"' && ok "run_end status truncated" || fail "status not truncated"
ev run_end | grep -q 'Ganymede, Callisto and' && ok "partial answer kept" || fail "partial answer lost"
ev usage | grep -q '"cache_read_input_tokens":1920' && ok "openai cached_tokens counted" || fail "openai cached tokens"
ask "moons?"
expect_err "cut off at the model's output limit" "clear message"
stop_mocks
start_mock m "{\"steps\":[{\"replay\":\"$FX/anthropic_max_tokens.json\"}]}"
config "providers = { $(provider anthropic $PORT_m) }"
ask --json "moons?"
expect_rc 4 "anthropic max_tokens: exit 4"
ev usage | grep -q '"cache_read_input_tokens":2048,"cache_creation_input_tokens":1024' && ok "anthropic cache tokens counted" || fail "anthropic cache tokens"
stop_mocks
# streamed, from mock steps, both formats
for kind in openai anthropic; do
  start_mock m '{"steps":[{"text":"half an ans","finish_reason":"length","stop_reason":"max_tokens","usage":{"input":5,"output":3,"cache_read":7,"cache_write":2}}]}'
  config "providers = { $(provider $kind $PORT_m) }"
  ask --json "x"
  expect_rc 4 "$kind streamed truncation: exit 4"
  ev usage | grep -q '"cache_read_input_tokens":7' && ok "$kind streamed cache read tokens" || fail "$kind streamed cache tokens"
  stop_mocks
done

# -- 5/6 through delegate(): structured errors with codes refused / truncated
cat > "$WS/d.lua" <<'LUA'
local ok, err = pcall(delegate, "first")
print("code1=" .. tostring(err.code))
ok, err = pcall(delegate, "second")
print("code2=" .. tostring(err.code))
LUA
start_mock m '{"steps":[{"text":"","refusal":"No."},{"text":"cut","finish_reason":"length","stop_reason":"max_tokens"}]}'
for kind in openai anthropic; do
  start_mock m '{"steps":[{"text":"","refusal":"No."},{"text":"cut","finish_reason":"length","stop_reason":"max_tokens"}]}'
  config "providers = { $(provider $kind $PORT_m) }"
  lrun "$WS/d.lua"
  expect_out "code1=refused" "$kind: delegate raises code refused"
  expect_out "code2=truncated" "$kind: delegate raises code truncated"
  stop_mocks
done

# -- 8. server tool blocks and pause_turn (recorded web search)
start_mock m "{\"steps\":[{\"replay\":\"$FX/anthropic_web_search_pause.sse\"},{\"replay\":\"$FX/anthropic_web_search_end.json\"}]}"
config "providers = { $(provider anthropic $PORT_m) }"
ask --json "weather in NYC?"
expect_rc 0 "web search with pause_turn answered"
ev tool_call_start | grep -q . && fail "a server tool became a local call" || ok "no local tool call for server_tool_use"
ev tool_result | grep -q . && fail "a server tool ran locally" || ok "nothing ran locally"
ev run_end | grep -q "I'll search for that. It is sunny in New York today." && ok "pause_turn continued: both turns make the answer" || fail "answer after pause_turn"
check m "len(reqs) == 2" "pause_turn sent the conversation back once"
check m "msgs(1)[-1]['role'] == 'assistant' and [b['type'] for b in msgs(1)[-1]['content']] == ['text', 'server_tool_use', 'web_search_tool_result']" "the paused turn goes back as the last message, blocks in order"
check m "msgs(1)[-1]['content'][1] == {'type':'server_tool_use','id':'srvtoolu_014hJH82Qum7Td6UV8gDXThB','name':'web_search','input':{'query':'weather NYC today'}}" "server_tool_use passed back with its streamed input"
check m "msgs(1)[-1]['content'][2]['content'][0]['encrypted_content'] == 'Ev0DCioIAxgCIiQ3NmU4ZmI4OC1k'" "web_search_tool_result passed back unchanged"
check m "not any(isinstance(m['content'], list) and any(b.get('type') == 'tool_result' for b in m['content']) for m in msgs(1))" "no local tool_result for a server tool"
stop_mocks
# whole body with server blocks and an unknown block type, then a local tool round trip
start_mock m '{"steps":[{"text":"Looking.","blocks":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"q"}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]},{"type":"future_block","x":1}],"tool_calls":[{"id":"toolu_9","name":"time.now","arguments":{}}]},{"text":"done"}]}'
for stream in false true; do
  start_mock m '{"steps":[{"text":"Looking.","blocks":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"q"}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]},{"type":"future_block","x":1}],"tool_calls":[{"id":"toolu_9","name":"time.now","arguments":{}}]},{"text":"done"}]}'
  config "providers = { $(provider anthropic $PORT_m ", stream = $stream") }"
  ask --json "x"
  expect_rc 0 "stream=$stream: server blocks beside a local tool call"
  n=$(ev tool_result | wc -l)
  [ "$n" = 1 ] && ok "stream=$stream: only the local tool ran" || fail "stream=$stream: $n tool results"
  check m "[b['type'] for b in msgs(1)[1]['content']] == ['server_tool_use','web_search_tool_result','future_block','text','tool_use']" "stream=$stream: every block goes back in order"
  check m "msgs(1)[1]['content'][2] == {'type':'future_block','x':1}" "stream=$stream: unknown block unchanged"
  check m "[b['tool_use_id'] for b in msgs(1)[2]['content']] == ['toolu_9']" "stream=$stream: one tool_result, for the local call"
  stop_mocks
done
# only the first choice counts (OpenAI), streamed (recorded) and whole
start_mock m "{\"steps\":[{\"replay\":\"$FX/openai_two_choices.sse\"}]}"
config "providers = { $(provider openai $PORT_m) }"
ask "x"
expect_rc 0 "two streamed choices"
[ "$OUT" = "First choice." ] && ok "streamed: only choice 0 is the answer" || fail "streamed choices mixed: $OUT"
stop_mocks
start_mock m '{"steps":[{"text":"the first","extra_choices":["the second"]}]}'
config "providers = { $(provider openai $PORT_m ', stream = false') }"
ask "x"
[ "$OUT" = "the first" ] && ok "whole: choice index 0 wins wherever it is in the array" || fail "whole choices: $OUT"
stop_mocks

# -- 7. thinking with tools: blocks back unchanged before tool_use; not in the answer
start_mock m "{\"steps\":[{\"replay\":\"$FX/anthropic_thinking_tool.sse\"},{\"text\":\"It is noon.\"}]}"
config "providers = { $(provider anthropic $PORT_m ', thinking_budget = 2048') }"
ask --json "what time is it?"
expect_rc 0 "thinking then a tool call"
check m "reqs[0]['body']['thinking'] == {'type':'enabled','budget_tokens':2048}" "thinking_budget turns extended thinking on"
check m "msgs(1)[1]['content'][0] == {'type':'thinking','thinking':'The user wants the time. I should call time.now.','signature':'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds'}" "thinking block with its signature, unchanged, first"
check m "msgs(1)[1]['content'][1] == {'type':'redacted_thinking','data':'EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP'}" "redacted_thinking unchanged"
check m "[b['type'] for b in msgs(1)[1]['content']] == ['thinking','redacted_thinking','tool_use']" "tool_use after the thinking blocks"
ev thinking | grep -q "I should call time.now." && ok "thinking is journaled (event)" || fail "no thinking event"
ev text_delta | grep -q "I should call" && fail "thinking leaked into the answer" || ok "thinking not in the answer"
check m "'I should call' not in json.dumps(reqs[1]['body'].get('system', ''))" "thinking not in the prompt"
stop_mocks
config "providers = { $(provider openai 1 ', thinking_budget = 2048') }"
ask "x"
expect_rc 2 "thinking_budget on openai refused"
expect_err "thinking_budget" "names the key"

# -- 9. errors name the provider's type; a body that is no event stream says what came
start_mock m "{\"steps\":[{\"fault\":\"http\",\"status\":529,\"body\":$(cat "$FX/anthropic_overloaded.json")}]}"
config "providers = { $(provider anthropic $PORT_m ', max_retries = 0') }"
ask "x"
expect_rc 1 "529 overloaded fails"
expect_err "HTTP 529" "status named"
expect_err "overloaded_error: Overloaded" "Anthropic error type named"
stop_mocks
start_mock m "{\"steps\":[{\"fault\":\"http\",\"status\":500,\"body\":$(tr -d '\n' < "$FX/openai_server_error.json")}]}"
config "providers = { $(provider openai $PORT_m ', max_retries = 0') }"
ask "x"
expect_err "server_error: The server had an error" "OpenAI error type named"
stop_mocks
for kind in openai anthropic; do
  start_mock m '{"steps":[{"fault":"html"}]}'
  config "providers = { $(provider $kind $PORT_m ', max_retries = 0') }"
  ask "x"
  expect_rc 1 "$kind: HTML body fails"
  expect_err "Content-Type text/html" "$kind: content type named"
  expect_err "<!DOCTYPE html>" "$kind: first bytes shown"
  stop_mocks
  start_mock m '{"steps":[{"fault":"empty"}]}'
  config "providers = { $(provider $kind $PORT_m ', max_retries = 0') }"
  ask "x"
  expect_err "HTTP 200, Content-Type text/event-stream, empty body" "$kind: empty body named"
  stop_mocks
done
# a JSON body although a stream was asked for: read whole
start_mock m "{\"steps\":[{\"replay\":\"$FX/anthropic_web_search_end.json\"}]}"
config "providers = { $(provider anthropic $PORT_m) }"
ask "x"
expect_rc 0 "a JSON body to a streamed request is read whole"
expect_out "It is sunny in New York today." "its answer"
stop_mocks

# -- 9. OpenAI max_tokens goes out as max_completion_tokens (or max_tokens when asked)
start_mock m '{"steps":[{"text":"a","repeat":true}]}'
config "providers = { $(provider openai $PORT_m ', max_tokens = 333') }"
ask "x"
check m "reqs[-1]['body'].get('max_completion_tokens') == 333 and 'max_tokens' not in reqs[-1]['body']" "max_completion_tokens sent"
config "providers = { $(provider openai $PORT_m ', max_tokens = 333, max_tokens_field = [[max_tokens]]') }"
ask "x"
check m "reqs[-1]['body'].get('max_tokens') == 333 and 'max_completion_tokens' not in reqs[-1]['body']" "max_tokens_field = max_tokens for older servers"
config "providers = { $(provider openai $PORT_m) }"
ask "x"
check m "'max_tokens' not in reqs[-1]['body'] and 'max_completion_tokens' not in reqs[-1]['body']" "nothing sent when not configured"
stop_mocks

# -- 11. a stream broken while the model writes a tool call is retried
for kind in openai anthropic; do
  start_mock m '{"steps":[{"tool_calls":[{"id":"c1","name":"time.now","arguments":{"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}],"chunk":3,"fault":"drop"},
    {"tool_calls":[{"id":"c1","name":"time.now","arguments":{}}]},{"text":"It is late."}]}'
  config "providers = { $(provider $kind $PORT_m) }"
  ask --json "time?"
  expect_rc 0 "$kind: tool-call stream broken, retried, answered"
  check m "len(reqs) == 3" "$kind: the broken attempt was retried"
  n=$(ev tool_result | wc -l)
  [ "$n" = 1 ] && ok "$kind: the tool ran once" || fail "$kind: $n tool results"
  ev retry | grep -q . && ok "$kind: the retry is reported" || fail "$kind: no retry event"
  stop_mocks
done
finish
