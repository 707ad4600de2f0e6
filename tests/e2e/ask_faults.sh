# Every fault the mock can inject, through luagent ask: 429 with
# Retry-After, 500, connection reset, a stream dropped before output, a hang
# past the timeout, an Anthropic error event (all retried), a stream dropped
# after output (not retried, partial kept, exit 1), malformed JSON tool
# arguments, an unknown tool and invalid arguments (errors the model sees),
# and falling through to the next provider.
. "$(dirname "$0")/lib/mock.sh" "$1"

# -- retried faults, then an answer
for mode in "openai true" "anthropic true" "openai false" "anthropic false"; do
  set -- $mode; kind=$1; stream=$2
  start_mock m '{"steps":[{"fault":"429","retry_after":1},{"fault":"500"},{"fault":"reset"},
    {"fault":"drop","text":""},
    {"fault":"hang","hang_s":3},{"fault":"overloaded","text":"x"},{"text":"survived"}]}'
  config "providers = { $(provider $kind $PORT_m ", max_retries = 6, timeout_s = 1, stream = $stream") }"
  t0=$(date +%s.%N)
  ask --json "hello"
  t1=$(date +%s.%N)
  expect_rc 0 "$kind stream=$stream: answered after the retried faults"
  if [ $stream = true ]; then want=6; else want=5; fi
  check m "len(reqs) == $want + 1" "$kind stream=$stream: $want retries reached the mock"
  n=$(printf '%s\n' "$OUT" | grep -c '"type":"retry"')
  [ "$n" = $want ] && ok "$kind stream=$stream: $want retry events" || fail "$kind stream=$stream: expected $want retry events, got $n"
  printf '%s\n' "$OUT" | grep '"type":"retry"' | head -1 | grep -q '"delay_s":1' && ok "$kind: Retry-After honoured (1 s)" || fail "$kind: Retry-After not honoured"
  python3 -c "import sys; sys.exit(0 if float('$t1')-float('$t0') >= 1.9 else 1)" && ok "$kind: waited for Retry-After and the timeout" || fail "$kind: too fast"
  if [ $stream = true ]; then ans=survived; else ans=x; fi
  printf '%s\n' "$OUT" | grep '"type":"run_end"' | grep -q "\"answer\":\"$ans\"" && ok "$kind stream=$stream: answer in run_end" || fail "$kind: no answer in run_end"
  stop_mocks
done

# -- a stream that drops after output: no retry, partial answer kept, exit 1
start_mock m '{"steps":[{"text":"The partial answer that breaks off here","chunk":3,"fault":"drop"},{"text":"never"}]}'
config "providers = { $(provider openai $PORT_m) }"
ask "hello"
expect_rc 1 "drop after output fails the run"
expect_out "The partial" "partial output kept"
expect_err "not retried" "says it was not retried"
check m "len(reqs) == 1" "no retry after output"
stop_mocks

# -- model-side faults: malformed JSON arguments, unknown tool, invalid arguments
start_mock m '{"steps":[{"text":"","tool_calls":[
   {"id":"c1","name":"echo","raw_arguments":"{\"a\": [1, 2"},
   {"id":"c2","name":"nosuch.tool","arguments":{}},
   {"id":"c3","name":"fs.read","arguments":{"path":42}}]},
 {"text":"I could not do it."}]}'
config "providers = { $(provider anthropic $PORT_m) }"
ask "break things"
expect_rc 0 "model-side faults do not end the run"
expect_out "I could not do it." "model answered after the errors"
check m "[b['content'].split(':')[0] for b in msgs(1)[2]['content']] == ['error (invalid_args)', 'error (unknown_tool)', 'error (invalid_args)']" "three tool errors returned in order"
check m "all(b.get('is_error') for b in msgs(1)[2]['content'])" "tool_result blocks marked is_error"
check m "'not a JSON object' in msgs(1)[2]['content'][0]['content']" "malformed JSON named"
check m "'nosuch.tool' in msgs(1)[2]['content'][1]['content'] and 'fs.read' in msgs(1)[2]['content'][1]['content']" "unknown tool named with the available ones"
check m "'path' in msgs(1)[2]['content'][2]['content']" "invalid argument path named"
check m "msgs(1)[1]['content'][0]['input'] == {}" "broken arguments echoed as an empty input"
stop_mocks

# -- fallback: the first provider answers 401 (not retryable), the second answers
start_mock a '{"steps":[{"fault":"401","repeat":true}]}'
start_mock b '{"steps":[{"text":"from the backup"}]}'
config "providers = { $(provider openai $PORT_a ', priority = 1' first), $(provider anthropic $PORT_b ', priority = 2' backup) }"
ask "hello"
expect_rc 0 "fell through to the second provider"
expect_out "from the backup" "backup answered"
expect_err "trying the next one" "fallback shown"
check a "len(reqs) == 1" "401 not retried"
check b "len(reqs) == 1" "backup asked once"
# 500s exhaust the retries, then fall through
stop_mocks
start_mock a '{"steps":[{"fault":"500","repeat":true}]}'
start_mock b '{"steps":[{"text":"second again"}]}'
config "providers = { $(provider openai $PORT_a ', priority = 1, max_retries = 2' first), $(provider openai $PORT_b ', priority = 2' backup) }"
ask "hello"
expect_rc 0 "retries exhausted, then fallback"
check a "len(reqs) == 3" "first provider tried 1 + 2 retries"
# every provider failing: exit 1 with the reason
stop_mocks
start_mock a '{"steps":[{"fault":"500","repeat":true}]}'
config "providers = { $(provider openai $PORT_a ', max_retries = 1') }"
ask "hello"
expect_rc 1 "all providers failing fails the run"
expect_err "HTTP 500" "reason names the HTTP status"
finish
