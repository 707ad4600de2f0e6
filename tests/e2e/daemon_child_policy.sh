#!/bin/bash
# A daemon worker runs under SCHED_BATCH (daemon_runs.c: a woken worker
# does not preempt the scheduler). The stdio MCP servers an automation's
# run starts are the user's programs: they must get the normal policy
# (SCHED_OTHER), not the worker's. The server below answers with its own
# policy and its parent's (the worker's, from /proc), so the test also
# shows the worker really was SCHED_BATCH. And outside the daemon, a
# policy the user chose (chrt -b) is what a server inherits, as usual.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"

cat > "$WS/pol_server.py" <<'PY'
import json, os, sys
def out(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def policy(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[38])  # field 41 (fields after the name start at 3)
for line in sys.stdin:
    m = json.loads(line); mid, meth = m.get("id"), m.get("method")
    if meth == "initialize":
        out({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": m["params"]["protocolVersion"],
             "capabilities": {"tools": {}}, "serverInfo": {"name": "pol", "version": "0"}}})
    elif meth == "tools/list":
        out({"jsonrpc": "2.0", "id": mid, "result": {"tools": [{"name": "policy",
             "description": "scheduling policies", "inputSchema": {"type": "object"},
             "annotations": {"readOnlyHint": True, "openWorldHint": False}}]}})
    elif meth == "tools/call":
        txt = "self=%d parent=%d" % (os.sched_getscheduler(0), policy(os.getppid()))
        out({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": txt}]}})
    elif mid is not None and meth:
        out({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + meth}})
PY
cat > "$WS/luagent.lua" <<LUA
return { mcp = { servers = { pol = { command = "python3", args = { "$WS/pol_server.py" }, timeout_s = 10 } } } }
LUA
(cd "$WS" && "$LUAGENT" mcp trust pol --yes >/dev/null 2>"$WS/trust.err") || fail "mcp trust: $(cat "$WS/trust.err")"
cat > "$WS/automations/pol.lua" <<'LUA'
return { every = "1s", run = function(ctx)
  local r = tools.call("mcp.pol.policy", {})
  return r.content and r.content[1] and r.content[1].text or r.text or tostring(r)
end }
LUA
cat > "$WS/once.lua" <<'LUA'
local r = tools.call("mcp.pol.policy", {})
print(r.content and r.content[1] and r.content[1].text or r.text or tostring(r))
LUA

start_daemon
wait_for 20 '[ -n "$(q "SELECT id FROM runs WHERE name=\"pol\" AND status=\"ok\"")" ]' ||
  fail "the automation did not run: $(q "SELECT status, error FROM runs WHERE name='pol'") $(tail -5 "$DLOG")"
stop_daemon
got=$(q "SELECT result FROM runs WHERE name='pol' AND status='ok' ORDER BY started LIMIT 1")
case $got in
  *"parent=3"*) pass "the worker runs under SCHED_BATCH ($got)" ;;
  *) fail "the worker is not SCHED_BATCH, so this test shows nothing: $got" ;;
esac
case $got in
  *"self=0 "*) pass "the MCP server its run started has the normal policy" ;;
  *) fail "the MCP server inherited the worker's policy: $got" ;;
esac

# Outside the daemon, the user's own choice is inherited.
command -v chrt >/dev/null || fail "chrt (util-linux) is needed"
out=$(cd "$WS" && chrt -b 0 "$LUAGENT" run once.lua 2>&1)
[ "$out" = "self=3 parent=3" ] && pass "luagent run under chrt -b: the server keeps the user's policy" ||
  fail "luagent run under chrt -b: $out"
