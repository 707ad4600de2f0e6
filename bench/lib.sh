# bench/lib.sh - what the bench scripts that drive tests/mock_llm.py share:
# the 10-turn task, the mock's start and stop, one process under callgrind.
# Sourced, not run: `. "$ROOT/bench/lib.sh"`, once the script has set ROOT
# (the source tree) and T (a scratch folder it removes on exit). The
# functions set MOCK, PORT and URL in the caller's shell and exit it on
# failure, as the scripts did when they held this code themselves.

# bench_task FILE [keep_alive]: writes the mock's script of the 10-turn
# task (bench_react.c's: 9 streamed rounds of the model calling `echo`,
# then a streamed answer), answered by conversation turn ("by_turn", so
# every client gets the same answers); keep_alive: the mock keeps a
# connection open across requests.
bench_task() {
  python3 - "$1" "${2:-}" <<'PY'
import json, sys
steps = [{"text": "Step %d: checking." % t, "chunk": 6,
          "tool_calls": [{"id": "c%d" % t, "name": "echo",
                          "arguments": {"step": t, "note": "turn %d" % t}}]} for t in range(9)]
steps.append({"text": "All ten steps are done; the answer is 42.", "chunk": 6})
fx = {"by_turn": True}
if sys.argv[2] == "keep_alive":
    fx["keep_alive"] = True
fx["steps"] = steps
json.dump(fx, open(sys.argv[1], "w"))
PY
}

# bench_mock WHO FIXTURE: starts the mock on FIXTURE in the background,
# its requests logged to $T/requests.jsonl, and waits (10 s at most) for
# its port: MOCK is its pid, PORT its port, URL its OpenAI base. WHO names
# the script in the error when it does not start.
bench_mock() {
  python3 "$ROOT/tests/mock_llm.py" --script "$2" --port-file "$T/port" \
    --log "$T/requests.jsonl" &
  MOCK=$!
  _bm_i=0
  while [ ! -s "$T/port" ]; do
    _bm_i=$((_bm_i + 1))
    [ $_bm_i -gt 200 ] && { echo "$1: the mock did not start" >&2; exit 1; }
    sleep 0.05
  done
  PORT=$(cat "$T/port")
  URL=http://127.0.0.1:$PORT/v1
}

# bench_mock_stop: stops the mock bench_mock started, if any (for the
# scripts' exit traps; safe under set -e).
bench_mock_stop() {
  if [ -n "${MOCK:-}" ] && kill "$MOCK" 2>/dev/null; then wait "$MOCK" 2>/dev/null || :; fi
}

# bench_callgrind OUT CMD...: runs CMD under callgrind, its profile written
# to OUT (/dev/null: kept nowhere) and CMD's output discarded; prints
# valgrind's report (its stderr: "Collected : N" is the instruction count)
# and returns CMD's status.
bench_callgrind() {
  _bc_out=$1
  shift
  valgrind --tool=callgrind --callgrind-out-file="$_bc_out" "$@" 2>&1 >/dev/null
}
