#!/bin/bash
# e2e: resuming a broken Streamable HTTP event stream (MCP transports,
# "Resumability and Redelivery") against tests/mcp/sse_drop_server.py:
# a stream cut in the middle of an event after one with an id, and a
# priming event with retry that ends the stream, are both resumed with a
# GET carrying Last-Event-ID (and the session), and the answer arrives; a
# stream that keeps breaking is resumed a bounded number of times, then a
# clear error; a stream without ids, or a server that answers the GET 405,
# is a clear error at once.
set -u
. "$(dirname "$0")/lib/common.sh"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed for the test server" >&2; exit 1; }
SRC=$(cd "$(dirname "$0")/../.." && pwd)
LOG="$WS/srv.log"
python3 "$SRC/tests/mcp/sse_drop_server.py" "$WS/port" "$LOG" & PIDS="$PIDS $!"
for _ in $(seq 100); do [ -s "$WS/port" ] && break; sleep 0.05; done
[ -s "$WS/port" ] || { echo "FAIL: the test server did not start" >&2; exit 1; }
P=$(cat "$WS/port")
printf 'return { http_allow = { "http://127.0.0.1:%s" }, mcp = { servers = { drop = { url = "http://127.0.0.1:%s/mcp", timeout_s = 10 } } } }\n' "$P" "$P" > "$WS/luagent.lua"
expect_rc 0 "$LUAGENT" mcp trust drop --yes || exit 1
gets() { grep -c '"GET"' "$LOG"; }
call() {
  : > "$LOG"
  printf 'local ok, r = pcall(tools.call, "mcp.drop.%s", {})\nprint(ok and ("OK " .. r.text) or ("ERR " .. r.code .. " " .. r.message))\n' "$1" > "$WS/t.lua"
  expect_rc 0 timeout 60 "$LUAGENT" run t.lua </dev/null
}

call drop && out_has "OK resumed after drop1" && pass "a stream cut mid-event is resumed: the answer arrives" || fail "drop: $(cat "$WS/.out")"
grep -q '"last_event_id": "drop1", "session": "sess-1"' "$LOG" && [ "$(gets)" = 1 ] && pass "one GET with Last-Event-ID drop1 and the session id" || fail "drop GETs: $(cat "$LOG")"

call poll && out_has "OK resumed after p1" && pass "a priming event then a closed stream (SSE polling): resumed after the server's retry" || fail "poll: $(cat "$WS/.out")"
grep -q '"last_event_id": "p1"' "$LOG" && pass "the priming event's id is sent back" || fail "poll GETs: $(cat "$LOG")"

call always && out_has "ERR mcp_http" && out_has "broke 6 times before the answer" && pass "a stream that keeps breaking: a clear error" || fail "always: $(cat "$WS/.out")"
[ "$(gets)" = 5 ] && grep -q '"last_event_id": "always5"' "$LOG" && pass "resumed exactly 5 times, each from the newest id" || fail "always GETs: $(gets): $(cat "$LOG")"

call noid && out_has "ERR " && [ "$(gets)" = 0 ] && pass "a broken stream without event ids is an error, no GET" || fail "noid: $(cat "$WS/.out") $(cat "$LOG")"
call nogot && out_has "does not offer resuming it" && out_has "405" && pass "a server that answers the GET 405: a clear error" || fail "nogot: $(cat "$WS/.out")"
finish
