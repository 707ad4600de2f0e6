#!/bin/bash
# e2e: `luagent daemon --console`: the console inside the daemon sees an
# automation's escalation live, approving it there lets the waiting run
# finish, slow clients do not stop the scheduler, and SIGTERM stops both.
set -u
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/console_ws.sh"
LIB="$(cd "$(dirname "$0")/lib" && pwd)"
console_ws "$WS"
cat > "$WS/automations/poster.lua" <<'LUA'
return { name = "poster", every = "1h", timeout = "60s",
  run = function(ctx) return tools.call("board.publish", { title = "from automation" }) end }
LUA
cat > "$WS/automations/beat.lua" <<'LUA'
return { name = "beat", every = "1s", run = function(ctx) return "beat" end }
LUA
PORT=$(free_port)
(cd "$WS" && exec "$LUAGENT" daemon --console 127.0.0.1:$PORT --quiet) >"$WS/d.log" 2>&1 &
DPID=$!
PIDS="$PIDS $DPID"
for _ in $(seq 50); do grep -q '^console: http' "$WS/d.log" && break; sleep 0.1; done
grep -q "^console: http://127.0.0.1:$PORT/#token=" "$WS/d.log" && pass "daemon --console prints the login URL" || { fail "no console: $(cat "$WS/d.log")"; finish; }

# a second daemon on the same workspace fails before it binds anything
P2=$(free_port)
expect_rc 2 "$LUAGENT" daemon --console 127.0.0.1:$P2 && err_has "already running" && pass "a second daemon --console is refused"
curl -s -o /dev/null "http://127.0.0.1:$P2/" && fail "the refused daemon still bound its console"
expect_rc 2 "$LUAGENT" daemon --allow-remote && err_has "go with --console" && pass "--allow-remote without --console is refused"

WS="$WS" python3 - "$LIB" "$PORT" "$(cat "$WS/.luagent/console.token")" <<'PY' || fail "daemon console checks"
import socket, sys, time
sys.path.insert(0, sys.argv[1])
from console_client import Console, wait_for
port, token = int(sys.argv[2]), sys.argv[3]
fails = 0
def check(cond, what):
    global fails
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond: fails += 1
c = Console(port)
check(c.login(token)[0] == 200, "logged in to the daemon's console")
# the poster automation fires at start and waits on its escalation
a = wait_for(lambda: [x for x in c.get("/api/approvals")[1] if x["tool"] == "board.publish"], 20)
check(a and a[0]["caller_kind"] == "automation" and a[0]["caller_name"] == "poster", f"the automation's escalation is queued ({a})")
run_id = a[0]["run_id"]
r = [x for x in c.get("/api/runs")[1] if x["id"] == run_id]
check(r and r[0]["status"] == "running", f"its run waits ({r})")
s, j, _, _ = c.post(f"/api/approvals/{a[0]['id']}/approve")
check(s == 200, "approved in the console")
done = wait_for(lambda: [x for x in c.get("/api/runs")[1] if x["id"] == run_id and x["status"] != "running"], 20)
check(done and done[0]["status"] == "ok" and "from automation" in done[0]["result"], f"the waiting run continued and finished ({done})")
evs, ended = c.sse(f"/api/runs/{run_id}/stream", lambda e: False, 10)
calls = [e["data"] for e in evs if e["type"] == "script_tool_call"]
check(ended and calls and calls[0]["tool"] == "board.publish" and calls[0]["ok"]
      and calls[0]["args"] == {"title": "from automation"},
      f"the finished automation run replays its tool call from the journal ({[e['type'] for e in evs]})")
s, j, _, _ = c.get("/api/audit/tail?n=50")
check(any(r.get("decision") == "approval_granted" and r.get("approver") == "console" and r.get("tool") == "board.publish" for r in j),
      "the decision is in the audit chain with the console as approver")

# slow clients hold connections; the scheduler carries on
def beats():
    h = c.get("/api/automations/beat/history?n=1000")[1]
    return len(h)
slow = []
for _ in range(24):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /api/runs HTTP/1.1\r\n")
    slow.append(s)
time.sleep(0.5)
# our own requests may be refused now (the per-address limit is full): read the journal directly
import sqlite3, os
db = sqlite3.connect(os.path.join(os.environ["WS"], ".luagent/state.db"))
n0 = db.execute("select count(*) from runs where name='beat'").fetchone()[0]
time.sleep(4)
n1 = db.execute("select count(*) from runs where name='beat'").fetchone()[0]
check(n1 - n0 >= 2, f"the scheduler keeps running while 24 slow clients hold the console ({n1 - n0} beats in 4s)")
for s in slow: s.close()
check(wait_for(lambda: c.get("/api/runs")[0] == 200, 10), "the console serves again once they leave")
sys.exit(1 if fails else 0)
PY

kill -TERM "$DPID"
for _ in $(seq 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$DPID" 2>/dev/null && fail "the daemon did not stop on SIGTERM" || pass "SIGTERM stops the daemon and its console"
wait "$DPID"; rc=$?
[ "$rc" = 0 ] && pass "clean exit" || fail "daemon exit $rc: $(tail -5 "$WS/d.log")"
curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$PORT/" && fail "the console still answers after the daemon stopped"
finish
