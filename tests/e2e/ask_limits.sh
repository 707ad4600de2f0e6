# Each limit of the loop ends the run with a clear final event and exit 1:
# iterations, model calls, tool calls, total tokens, the wall-clock
# deadline and the per-call timeout; plus max_tool_result_chars truncation.
. "$(dirname "$0")/lib/mock.sh" "$1"
# a model that never stops calling tools, with new arguments each time
steps=""
for i in $(seq 1 30); do steps="$steps{\"tool_calls\":[{\"id\":\"c$i\",\"name\":\"echo\",\"arguments\":{\"n\":$i}}],\"usage\":{\"input\":100,\"output\":10}},"; done
ENDLESS="{\"steps\":[${steps%,}]}"

run_limit() { # NAME 'react table' 'expected message' [ask args]
  start_mock m "$ENDLESS"
  config "providers = { $(provider openai $PORT_m) }, react = { $2 }"
  shift 3 2>/dev/null
  ask --json "$@" "go on forever"
}
end_line() { printf '%s\n' "$OUT" | grep '"type":"run_end"'; }

run_limit it "max_iterations = 3" x
expect_rc 1 "iterations: failed run"
end_line | grep -q '"status":"limit".*"code":"budget_exceeded".*iteration limit reached (3 of 3)' && ok "iterations: run_end says which limit" || fail "iterations: run_end"
check m "len(reqs) == 3" "iterations: exactly three model calls"
stop_mocks

start_mock m "$ENDLESS"
config "providers = { $(provider openai $PORT_m) }"
ask --max-iterations 2 "go"
expect_rc 1 "--max-iterations 2"
expect_err "iteration limit reached (2 of 2)" "reason printed on stderr"
stop_mocks

run_limit mc "max_model_calls = 2" x
expect_rc 1 "model calls"
end_line | grep -q 'model call limit reached (2 of 2)' && ok "model calls: named" || fail "model calls: run_end"
stop_mocks

run_limit tc "max_tool_calls = 4" x
expect_rc 1 "tool calls"
end_line | grep -q 'tool call limit reached (4 of 4)' && ok "tool calls: named" || fail "tool calls: run_end"
[ "$(printf '%s\n' "$OUT" | grep -c '"type":"tool_result"')" = 4 ] && ok "tool calls: four ran" || fail "tool calls: count"
stop_mocks

run_limit tok "max_tokens = 250" x
expect_rc 1 "tokens"
end_line | grep -q 'token limit reached (330 of 250)' && ok "tokens: named with the count" || fail "tokens: run_end"
check m "len(reqs) == 3" "tokens: stopped after the third call"
stop_mocks

# wall-clock deadline: the model hangs; the run ends at the deadline
start_mock m '{"steps":[{"fault":"hang","hang_s":20,"repeat":true}]}'
config "providers = { $(provider anthropic $PORT_m ', timeout_s = 30') }, react = { deadline_s = 1.5 }"
t0=$(date +%s)
ask "hang"
t1=$(date +%s)
expect_rc 1 "deadline"
[ $((t1 - t0)) -le 5 ] && ok "deadline: ended in $((t1 - t0)) s" || fail "deadline: took $((t1 - t0)) s"
expect_err "timeout" "deadline: reason names the timeout"
stop_mocks

# per-call timeout with no retries
start_mock m '{"steps":[{"fault":"hang","hang_s":20,"repeat":true}]}'
config "providers = { $(provider openai $PORT_m ', max_retries = 0') }, react = { call_timeout_s = 1 }"
t0=$(date +%s)
ask "hang"
t1=$(date +%s)
expect_rc 1 "call timeout"
expect_err "within 1.0 s" "call timeout: named"
[ $((t1 - t0)) -le 4 ] && ok "call timeout: ended in $((t1 - t0)) s" || fail "call timeout: took $((t1 - t0)) s"
stop_mocks

# tool result truncation
head -c 5000 /dev/zero | tr '\0' 'x' > "$WS/data/big.txt"
start_mock m '{"steps":[{"tool_calls":[{"id":"c1","name":"fs.read","arguments":{"path":"big.txt"}}]},{"text":"ok"}]}'
config "providers = { $(provider openai $PORT_m) }, max_tool_result_chars = 100"
ask "read big"
expect_rc 0 "truncation: run ok"
check m "msgs(1)[3]['content'].endswith('[truncated: 100 of 5026 characters shown]') and len(msgs(1)[3]['content']) < 200" "tool result cut with a marker"
finish
