# Issue 18 item 4: a streamed (or whole) answer and a tool call's arguments
# have a size cap; past it the run ends with a clear error, keeps the
# partial answer up to the cap, and nothing is retried or run.
. "$(dirname "$0")/lib/mock.sh" "$1"
BIG=$(python3 -c "print('x' * 300000)")
printf '{"steps":[{"text":"%s","chunk":4096,"repeat":true}]}' "$BIG" > "$WS/big.json"
start_mock big "$(cat "$WS/big.json")"
for mode in stream whole; do
  extra=""; [ $mode = whole ] && extra=", stream = false"
  config "providers = { $(provider openai $PORT_big "$extra") }, react = { max_answer_bytes = 1000 }"
  ask "talk a lot"
  expect_rc 1 "$mode: an answer past the cap fails the run"
  expect_err "answer_too_large" "$mode: the error names the cap"
  n=$(wc -c < "$WS/out")
  [ "$n" -le 1001 ] && [ "$n" -ge 900 ] && ok "$mode: stdout holds the answer up to the cap ($n bytes)" || fail "$mode: stdout has $n bytes"
done
OUT=$("$LUAGENT" --workspace "$WS" runs list --json | python3 "$(dirname "$0")/lib/jsonl.py"); RC=0
python3 - "$OUT" <<'PY' && ok "the journal keeps the partial answer, not 300 KB" || fail "journal: $OUT"
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
r = rows[0]
sys.exit(0 if r["status"] != "ok" and 900 <= len(r["result"]) <= 1000 else 1)
PY
check big "len(reqs) == 2" "no retry after the cap"
stop_mocks
ARGS=$(python3 -c "import json; print(json.dumps(json.dumps({'msg': 'y' * 5000})))")
start_mock args "{\"steps\":[{\"tool_calls\":[{\"id\":\"a\",\"name\":\"fs.write\",\"raw_arguments\":$ARGS}]},{\"text\":\"done\"}]}"
config "providers = { $(provider openai $PORT_args) }, react = { max_tool_args_bytes = 1000 }"
ask "write"
expect_rc 1 "tool arguments past the cap fail the run"
expect_err "tool_args_too_large" "the error names the cap"
[ ! -e "$WS/data/x" ] && ok "nothing ran" || fail "a tool ran"
# One answer may not start more than 128 tool calls (red team 2: 800 calls of
# 1 MiB each took 1.8 GB before any limit applied).
MANY=$(python3 -c "import json; print(json.dumps({'steps':[{'tool_calls':[{'id':'c%d'%i,'name':'echo','arguments':{'msg':'x'}} for i in range(200)]},{'text':'done'}]}))")
start_mock many "$MANY"
config "providers = { $(provider openai $PORT_many) }"
ask "many"
expect_rc 1 "an answer with 200 tool calls fails the run"
expect_err "too_many_tool_calls" "the error names the cap"
config "providers = { $(provider openai $PORT_args) }, react = { max_answer_byte = 1 }"
ask "x"
expect_rc 2 "a misspelt cap is a config error"
expect_err "max_answer_bytes" "the error lists the known keys"
finish
