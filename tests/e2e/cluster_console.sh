#!/bin/bash
# The console of a host in a cluster shows the cluster's automation runs,
# every host's, each with its node, beside this host's own runs (an ask
# here), as `luagent runs list` does; a run another host ran opens
# with the events it kept (GET /api/runs/ID) and streams them with its end
# (SSE); an unknown id is a 404; and an unreachable cluster database is a
# 502 that names it, not an empty list that looks like no runs.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
. "$(dirname "$0")/lib/cluster.sh"
LIB="$(cd "$(dirname "$0")/lib" && pwd)"
pg_start
cat >"$WS/automations/count.lua" <<'LUA'
return { every = "1s", run = function(ctx)
  ctx.state.n = (ctx.state.n or 0) + 1
  print("count " .. ctx.state.n .. " on " .. ctx.node)
  return ctx.state.n
end }
LUA
for i in 1 2 3 4; do
  printf 'return { every = "1s", run = function(ctx) print("t%s on " .. ctx.node) return ctx.node end }\n' "$i" \
    >"$WS/automations/t$i.lua"
done
for h in a b; do cl_host $h; done
cl_start a
cl_start b
wait_for 20 "[ \"\$(pg_sql \"SELECT count(DISTINCT node) FROM luagent_runs WHERE status = 'ok'\")\" = 2 ]" ||
  fail "both hosts did not run automations: $(pg_sql "SELECT node, status, count(*) FROM luagent_runs GROUP BY 1, 2")"
# a run of host b's own (not an automation): an ask of the scripted model
python3 - "$WS/b/luagent.lua" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read().replace("http_allow =", 'providers = { { name = "demo", kind = "script", turns = { { turns = { { text = "Hello from b." } } } } } },\n  http_allow =', 1)
open(p, "w").write(s)
PY
(cd "$WS/b" && "$LUAGENT" ask "hello" >"$WS/local.out" 2>&1) || fail "luagent ask on host b: $(cat "$WS/local.out")"
ARUN=$(pg_sql "SELECT id FROM luagent_runs WHERE node = 'a' AND status = 'ok' AND automation LIKE 't%' ORDER BY finished DESC LIMIT 1")
[ -n "$ARUN" ] || fail "no finished run of host a"

PORT=$(free_port)
(cd "$WS/b" && exec "$LUAGENT" console 127.0.0.1:$PORT) >"$WS/console.log" 2>&1 &
CPID=$!
PIDS="$PIDS $CPID"
wait_for 10 "grep -q '^console: http' '$WS/console.log'" || fail "console did not start: $(cat "$WS/console.log")"

python3 - "$LIB" "$PORT" "$(cat "$WS/b/.luagent/console.token")" "$ARUN" <<'PY' || fail "console checks"
import sys
sys.path.insert(0, sys.argv[1])
from console_client import Console
port, token, arun = int(sys.argv[2]), sys.argv[3], sys.argv[4]
fails = 0
def check(cond, what):
    global fails
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond: fails += 1
c = Console(port)
check(c.login(token)[0] == 200, "logged in to host b's console")
s, runs, _, text = c.get("/api/runs?limit=200")
check(s == 200 and isinstance(runs, list), f"runs list: {s} {text[:200]}")
autos = [r for r in runs if r["kind"] == "automation"]
nodes = {r.get("node") for r in autos}
check(nodes == {"a", "b"}, f"automation runs of both hosts, each with its node: {nodes}")
check(any(r["id"] == arun for r in runs), "host a's run is in host b's list")
local = [r for r in runs if r["kind"] != "automation"]
check(any(r["kind"] == "ask" and r["result"] == "Hello from b." and not r.get("node") for r in local),
      f"host b's own ask is there: {local}")
started = [r["started"] for r in runs]
check(started == sorted(started, reverse=True), "newest first across both sources")
check(all("finished" in r for r in runs), "every row has finished (null while running)")
s, one, _, text = c.get("/api/runs?limit=3")
check(s == 200 and len(one) == 3, f"limit holds over the merged list: {len(one or [])}")
s, j, _, text = c.get(f"/api/runs/{arun}")
check(s == 200 and j["run"]["node"] == "a" and j["run"]["status"] == "ok", f"host a's run opens: {s} {text[:300]}")
prints = [e for e in (j or {}).get("events", []) if e["type"] == "print"]
check(prints and " on a" in prints[0]["data"].get("text", ""), f"with the events it kept: {prints}")
check(all(e["run_id"] == arun for e in j["events"]) and [e["cursor"] for e in j["events"]] == list(range(1, len(j["events"]) + 1)),
      "events carry the run's id and a cursor from 1")
evs, ended = c.sse(f"/api/runs/{arun}/stream", lambda e: False, 15)
check(ended, f"its stream ends: {evs[-3:]}")
check(any(e["type"] == "print" and " on a" in e["data"].get("text", "") for e in evs), f"its stream carries the kept events: {evs[:3]}")
s, _, _, text = c.get("/api/runs/no-such-run")
check(s == 404 and "no-such-run" in text, f"an unknown id: {s} {text[:200]}")
sys.exit(1 if fails else 0)
PY

# a run still going when its stream opens: the stream waits (its status
# is all that is read meanwhile) and, once its row says it is over, sends
# the events it kept and its end
LIVE=r-live-sse-1
NOW="extract(epoch from clock_timestamp())"
pg_sql "INSERT INTO luagent_runs (id, automation, node, status, queued, started, lease_until)
        VALUES ('$LIVE', 'slow', 'z', 'running', $NOW, $NOW, $NOW + 3600)" >/dev/null ||
  fail "could not add a running run"
python3 - "$LIB" "$PORT" "$(cat "$WS/b/.luagent/console.token")" "$LIVE" >"$WS/live.out" 2>&1 <<'PY' &
import sys, time
sys.path.insert(0, sys.argv[1])
from console_client import Console
port, token, live = int(sys.argv[2]), sys.argv[3], sys.argv[4]
c = Console(port)
assert c.login(token)[0] == 200
t0 = time.time()
evs, ended = c.sse(f"/api/runs/{live}/stream", lambda e: False, 30)
took = time.time() - t0
print("ended", ended, "took", round(took, 1))
print("late" if any(e["type"] == "print" and e["data"].get("text") == "late print" for e in evs) else "no-late",
      evs[-3:])
PY
SSE_PID=$!
sleep 3
kill -0 $SSE_PID 2>/dev/null && pass "the stream of a running run stays open" || fail "it ended while the run ran: $(cat "$WS/live.out")"
pg_sql "UPDATE luagent_runs SET status = 'ok', finished = $NOW, result = 'done',
        events = '[{\"type\":\"print\",\"ts\":1,\"data\":{\"text\":\"late print\"}}]'
        WHERE id = '$LIVE'" >/dev/null || fail "could not end the running run"
wait $SSE_PID
grep -q "^ended True" "$WS/live.out" && pass "its stream ends once the run is over" || fail "no end: $(cat "$WS/live.out")"
grep -q "^late" "$WS/live.out" && pass "with the events the run kept" || fail "no kept events: $(cat "$WS/live.out")"
pg_sql "DELETE FROM luagent_runs WHERE id = '$LIVE'" >/dev/null

# an unreachable cluster database: named, 502
dead=$(free_port)
cl_host c "postgresql://luagent@127.0.0.1:$dead/luagent"
P2=$(free_port)
(cd "$WS/c" && exec "$LUAGENT" console 127.0.0.1:$P2) >"$WS/console2.log" 2>&1 &
PIDS="$PIDS $!"
wait_for 10 "grep -q '^console: http' '$WS/console2.log'" || fail "console c did not start: $(cat "$WS/console2.log")"
python3 - "$LIB" "$P2" "$(cat "$WS/c/.luagent/console.token" 2>/dev/null)" "$dead" <<'PY' || fail "unreachable cluster checks"
import sys
sys.path.insert(0, sys.argv[1])
from console_client import Console
port, token, dead = int(sys.argv[2]), sys.argv[3], sys.argv[4]
c = Console(port)
assert c.login(token)[0] == 200
s, _, _, text = c.get("/api/runs")
print(("ok: " if s == 502 and f"127.0.0.1:{dead}" in text else "FAIL: ") + f"runs list without its cluster: {s} {text[:200]}")
sys.exit(0 if s == 502 and f"127.0.0.1:{dead}" in text else 1)
PY
cl_stop a
cl_stop b
finish
