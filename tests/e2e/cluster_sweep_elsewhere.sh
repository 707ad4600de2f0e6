#!/bin/bash
# on_lost = "rerun" when the host that sees the lease expire lacks the
# automation (deleted or renamed there, not copied yet). Host a runs `job`
# and `solo` and is killed; host b has neither and is alone when the
# leases expire; host c (which has `job`, not `solo`) starts later.
#   - b leaves `job` to a host that has it: c reruns it (attempt 2);
#   - nobody has `solo`: it is still marked interrupted, within three
#     lease periods of its expiry, and never run again.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
. "$(dirname "$0")/lib/cluster.sh"
start_http
pg_start
for n in job solo; do
  cat >"$WS/automations/$n.lua" <<LUA
return { on = "go", on_lost = "rerun", timeout = "60s", run = function(ctx)
  for i = 1, 10 do tools.call("http.request", { url = "http://127.0.0.1:$HTTP_PORT/slow?d=0.3" }) end
  tools.call("fs.write", { path = "$n.txt", content = ctx.node .. " " .. tostring(ctx.trigger.attempt or 1) })
end }
LUA
done
cl_host a
rm "$WS/automations/solo.lua"
cl_host c
rm "$WS/automations/job.lua"
cat >"$WS/automations/other.lua" <<'LUA'
return { on = "other", run = function(ctx) end }
LUA
cl_host b
cl_start a
(cd "$WS/a" && "$LUAGENT" emit go) >/dev/null 2>&1 || fail "emit failed"
wait_for 10 "[ \"\$(pg_sql \"SELECT count(*) FROM luagent_runs WHERE status = 'running'\")\" = 2 ]" ||
  fail "a did not start both runs: $(tail -3 "$WS/a.log")"
cl_start b
cl_kill a
sleep 5 # both leases (3 s) expire with only b alive
cl_start c
wait_for 20 "[ -f '$WS/c/data/job.txt' ]" ||
  fail "job (on_lost = rerun) was not run again: $(pg_sql "SELECT automation, node, status, attempt FROM luagent_runs")"
[ "$(cat "$WS/c/data/job.txt" 2>/dev/null)" = "c 2" ] || fail "job's rerun is not attempt 2 on c: $(cat "$WS/c/data/job.txt")"
wait_for 15 "[ \"\$(pg_sql \"SELECT status FROM luagent_runs WHERE automation = 'solo'\")\" = interrupted ]" ||
  fail "solo, which no live host has, was never marked: $(pg_sql "SELECT status, lease_until FROM luagent_runs WHERE automation = 'solo'")"
[ "$(pg_sql "SELECT count(*) FROM luagent_runs WHERE automation = 'solo'")" = 1 ] || fail "solo was run again"
cl_stop b
cl_stop c
pass "a rerun waits for a host that has the automation"
finish
