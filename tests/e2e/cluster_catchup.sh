#!/bin/bash
# catch_up across hosts, as on one host: slots that no host claimed while
# no daemon ran are caught up once (catch_up = true: one run, whichever
# host; ctx.trigger.missed says how many) or journaled once as skipped
# (catch_up = false), even when two daemons start together.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
. "$(dirname "$0")/lib/cluster.sh"
pg_start
cat >"$WS/automations/up.lua" <<'LUA'
return { every = "2s", catch_up = true, run = function(ctx)
  return "missed " .. tostring(ctx.trigger.missed)
end }
LUA
cat >"$WS/automations/down.lua" <<'LUA'
return { every = "2s", run = function(ctx) return "ran" end }
LUA
cl_host a
cl_host b
cl_start a
wait_for 10 "[ \"\$(pg_sql \"SELECT count(*) FROM luagent_runs WHERE status = 'ok'\")\" -ge 2 ]" || fail "no runs"
cl_stop a
before=$(pg_sql "SELECT count(*) FROM luagent_runs")
sleep 7 # three or four slots of each with no daemon
cl_start a
cl_start b
sleep 3
cl_stop a
cl_stop b
pg_sql "SELECT automation, status, coalesce(result, ''), coalesce(error, '') FROM luagent_runs ORDER BY queued OFFSET $before" >"$WS/after.txt"
catchups=$(grep -c '^up|ok|missed [0-9]' "$WS/after.txt")
[ "$catchups" = 1 ] || fail "wanted one catch-up run of up: $(cat "$WS/after.txt")"
grep -Eq '^up\|ok\|missed [3-9]' "$WS/after.txt" || fail "the catch-up run does not count the missed slots: $(grep '^up' "$WS/after.txt")"
[ "$(grep -c '^down|skipped||missed [0-9]* slot(s) while no daemon ran (catch_up = false)' "$WS/after.txt")" = 1 ] ||
  fail "wanted one skipped row for down's missed slots: $(grep '^down' "$WS/after.txt")"
pass "missed slots caught up (or skipped) once across two hosts"
finish
