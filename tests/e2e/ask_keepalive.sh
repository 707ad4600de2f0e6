# One TCP connection per provider, kept alive across the turns of a task
# and across delegate() calls (issue 20), against a mock that counts the
# connections it accepted; a server that closes a kept-alive connection
# (an idle timeout) costs a new connection, never a failed turn or a
# request sent twice.
. "$(dirname "$0")/lib/mock.sh" "$1"

# fixture KEEP [CLOSE_AT]: 9 echo rounds and an answer; the step numbered
# CLOSE_AT (0-based) closes its connection after answering.
fixture() {
  python3 - "$1" "${2:--1}" <<'PY'
import json, sys
keep, close_at = sys.argv[1] == "1", int(sys.argv[2])
steps = [{"text": "step %d" % t, "tool_calls": [{"id": "c%d" % t, "name": "echo",
          "arguments": {"step": t}}]} for t in range(9)]
steps.append({"text": "All ten steps are done."})
if close_at >= 0:
    steps[close_at]["close_after"] = True
print(json.dumps({"keep_alive": keep, "steps": steps}))
PY
}
conns() { python3 -c 'import json,sys; print(len({json.loads(l)["conn"] for l in open(sys.argv[1]) if l.strip()}))' "$WS/$1.log"; }
reqs() { grep -c . "$WS/$1.log"; }

# -- a 10-turn task: 10 requests, 1 connection (both wire formats)
for kind in openai anthropic; do
  start_mock m "$(fixture 1)"
  config "providers = { $(provider $kind $PORT_m) }"
  ask --max-iterations 10 "Do the ten steps."
  expect_rc 0 "$kind: 10-turn task answered"
  expect_out "All ten steps are done." "$kind: the answer"
  [ "$(reqs m)" = 10 ] && ok "$kind: 10 model calls" || fail "$kind: $(reqs m) model calls"
  [ "$(conns m)" = 1 ] && ok "$kind: all on one TCP connection" || fail "$kind: $(conns m) connections"
  stop_mocks
done

# -- the control: a server that closes after every answer gets 10
start_mock m "$(fixture 0)"
config "providers = { $(provider openai $PORT_m) }"
ask --max-iterations 10 "Do the ten steps."
expect_rc 0 "connection: close server: answered"
[ "$(conns m)" = 10 ] && ok "the mock counts connections (10 without keep-alive)" || fail "control: $(conns m) connections"
stop_mocks

# -- the server closes the kept-alive connection after turn 4: one new
# connection, every turn answered once
start_mock m "$(fixture 1 3)"
config "providers = { $(provider openai $PORT_m) }"
ask --max-iterations 10 "Do the ten steps."
expect_rc 0 "server closed an idle connection: still answered"
expect_out "All ten steps are done." "the answer after the reconnect"
[ "$(reqs m)" = 10 ] && ok "no request sent twice" || fail "$(reqs m) requests for 10 turns"
[ "$(conns m)" = 2 ] && ok "exactly one new connection after the close" || fail "$(conns m) connections"
check m "[r['conn'] for r in reqs] == [1] * 4 + [2] * 6" "turns 1-4 on the first connection, 5-10 on the second"

# -- delegate(): two nested runs and the script share the connection
start_mock m '{"keep_alive": true, "steps": [
  {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"n": 1}}]}, {"text": "first"},
  {"tool_calls": [{"id": "c2", "name": "echo", "arguments": {"n": 2}}]}, {"text": "second"}]}'
config "providers = { $(provider openai $PORT_m) }"
cat > "$WS/two.lua" <<'LUA'
print(delegate("one", { tools = { "echo" } }), delegate("two", { tools = { "echo" } }))
LUA
lrun "$WS/two.lua"
expect_rc 0 "two delegate() calls"
expect_out "first	second" "both answers"
[ "$(reqs m)" = 4 ] && [ "$(conns m)" = 1 ] && ok "4 model calls of two delegate() runs on one connection" ||
  fail "$(reqs m) requests over $(conns m) connections"
stop_mocks

# -- a broken transfer's connection is never reused: the mock drops a
# stream half-way through a tool call (retried: nothing was shown yet);
# the retry comes on a new connection, which the rest then keeps
start_mock m '{"keep_alive": true, "steps": [
  {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"n": 1}}]},
  {"tool_calls": [{"id": "c2", "name": "echo", "arguments": {"n": 2, "pad": "xxxxxxxxxxxx"}}],
   "chunk": 3, "fault": "drop"},
  {"tool_calls": [{"id": "c2", "name": "echo", "arguments": {"n": 2}}]},
  {"text": "whole answer"}]}'
config "providers = { $(provider openai $PORT_m) }"
ask --max-iterations 5 "Go."
expect_rc 0 "dropped stream retried"
expect_out "whole answer" "the answer after the retry"
check m "[r['conn'] for r in reqs] == [1, 1, 2, 2]" "the broken connection was replaced, the new one kept"
stop_mocks

finish
