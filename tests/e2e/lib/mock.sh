# Shared helpers for the ask_* end-to-end tests (sourced, not run by ctest).
# Usage: . "$(dirname "$0")/lib/mock.sh" "$1"
set -u
LUAGENT=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
SRC=${LUAGENT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
MOCK="$SRC/tests/mock_llm.py"
WS=$(mktemp -d /tmp/luagent_e2e_XXXXXX)
MOCK_PIDS=""
FAILS=0
cleanup() {
  for p in $MOCK_PIDS; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  [ -n "${KEEP_WS:-}" ] && echo "kept $WS" || rm -rf "$WS"
}
trap cleanup EXIT
mkdir -p "$WS/data"
unset LUAGENT_PROVIDER LUAGENT_MODEL LUAGENT_BASE_URL LUAGENT_API_KEY

# start_mock NAME 'FIXTURE JSON' : sets PORT_<NAME> and writes $WS/NAME.log
start_mock() {
  name=$1
  printf '%s' "$2" > "$WS/$name.fixture.json"
  rm -f "$WS/$name.port" "$WS/$name.log"
  python3 "$MOCK" --script "$WS/$name.fixture.json" --port-file "$WS/$name.port" \
    --log "$WS/$name.log" &
  MOCK_PIDS="$MOCK_PIDS $!"
  for _ in $(seq 100); do [ -s "$WS/$name.port" ] && break; sleep 0.05; done
  [ -s "$WS/$name.port" ] || { echo "mock $name did not start"; exit 1; }
  eval "PORT_$name=$(cat "$WS/$name.port")"
}

# stop_mocks: ends every mock started so far
stop_mocks() {
  for p in $MOCK_PIDS; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  MOCK_PIDS=""
}

# config 'LUA TABLE BODY' : writes luagent.lua returning { BODY }
config() { printf 'return {\n%s\n}\n' "$1" > "$WS/luagent.lua"; }

# provider KIND PORT [extra lua fields] : one provider line for config()
provider() {
  printf '{ name = "%s", kind = "%s", base_url = "http://127.0.0.1:%s/v1", model = "mock-model", max_retries = 3, backoff_s = 0.05, timeout_s = 10 %s }' \
    "${4:-p1}" "$1" "$2" "${3:-}"
}

# ask ARGS... : runs luagent ask in the workspace; sets RC, OUT, ERR
ask() {
  timeout 60 "$LUAGENT" --workspace "$WS" ask "$@" > "$WS/out" 2> "$WS/err"
  RC=$?
  OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
}

# lua ARGS... : runs luagent run
lrun() {
  timeout 60 "$LUAGENT" --workspace "$WS" run "$@" > "$WS/out" 2> "$WS/err"
  RC=$?
  OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
}

ok() { echo "ok   $1"; }
fail() { echo "FAIL $1"; echo "  rc=$RC"; echo "  stdout: $OUT" | cut -c1-400 | head -20; echo "  stderr: $ERR" | cut -c1-400 | head -20; FAILS=$((FAILS + 1)); }
expect_rc() { if [ "$RC" = "$1" ]; then ok "$2 (exit $1)"; else fail "$2: expected exit $1"; fi; }
expect_out() { case "$OUT" in *"$1"*) ok "$2";; *) fail "$2: stdout lacks '$1'";; esac; }
expect_err() { case "$ERR" in *"$1"*) ok "$2";; *) fail "$2: stderr lacks '$1'";; esac; }

# check NAME 'PYTHON EXPR' [what] : evaluates EXPR with reqs = the requests the
# mock NAME received (list of {"n","path","headers","body"}); must be true.
check() {
  if python3 - "$WS/$1.log" "$2" <<'PY'
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def msgs(i): return reqs[i]["body"].get("messages", [])
ok = eval(sys.argv[2])
if not ok:
    print("  requests:", json.dumps(reqs)[-3000:])
sys.exit(0 if ok else 1)
PY
  then ok "${3:-$2}"; else fail "${3:-$2}"; fi
}

finish() {
  if [ "$FAILS" -gt 0 ]; then echo "$FAILS check(s) failed"; exit 1; fi
  echo "all passed"
}
