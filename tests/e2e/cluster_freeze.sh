#!/bin/bash
# A scheduler that cannot act: host a's daemon is stopped (SIGSTOP) while
# its worker runs `job` (on_lost = "rerun"). Nothing in a can kill the
# worker, so the worker fences itself: past the deadline the scheduler last
# shared, its next tool call is refused. Host b takes the run over. When a
# is continued (SIGCONT), what its run did is not recorded over b's: the
# journal keeps a's run interrupted and b's attempt 2 ok, and ctx.state is
# the one b's run saved. One "end" side effect in all.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
. "$(dirname "$0")/lib/cluster.sh"
start_http
pg_start
cl_noting_job job 'on_lost = "rerun",' 'ctx.state.by = ctx.node .. " " .. (ctx.trigger.attempt or 1)'
cl_host a
cl_host b
cl_start a
wait_for 10 "[ \"\$(pg_sql \"SELECT count(*) FROM luagent_runs WHERE status = 'running' AND node = 'a'\")\" = 1 ]" ||
  fail "a did not take the run: $(tail -5 "$WS/a.log")"
cl_start b
sleep 1
kill -STOP "$CLPID_a"
stopped=$(python3 -c 'import time; print(time.time())')
lease=""
for _ in $(seq 1 80); do
  l=$(pg_sql "SELECT lease_until FROM luagent_runs WHERE node = 'a' AND status = 'running'")
  [ -n "$l" ] && lease=$l
  [ "$(pg_sql "SELECT count(*) FROM luagent_runs WHERE node = 'a' AND status = 'interrupted'")" = 1 ] && break
  sleep 0.1
done
[ -n "$lease" ] || fail "never saw a's lease"
wait_for 20 "[ \"\$(pg_sql \"SELECT count(*) FROM luagent_runs WHERE attempt = 2 AND status = 'ok'\")\" = 1 ]" ||
  fail "b did not run the job again to the end: $(pg_sql "SELECT node, status, attempt, error FROM luagent_runs")"
python3 - "$WS/a/data/job.txt" "$lease" "$stopped" <<'PY' || fail "a's worker went on past its lease while a was stopped"
import sys
notes = [l.split() for l in open(sys.argv[1])]
lease, stopped = float(sys.argv[2]), float(sys.argv[3])
last = max(float(n[3]) for n in notes if n[1] == "a")
print("a stopped; its worker's last note %.2fs later, the lease ran out %.2fs later" % (last - stopped, lease - stopped))
sys.exit(0 if last < lease and not any(n[0] == "end" for n in notes) else 1)
PY
kill -CONT "$CLPID_a"
sleep 3
kill -0 "$CLPID_a" 2>/dev/null || fail "a died after SIGCONT"
[ "$(pg_sql "SELECT status FROM luagent_runs WHERE node = 'a'")" = interrupted ] ||
  fail "a's run was recorded over: $(pg_sql "SELECT status, error FROM luagent_runs WHERE node = 'a'")"
[ "$(pg_sql "SELECT state::json->>'by' FROM luagent_state WHERE automation = 'job'")" = "b 2" ] ||
  fail "ctx.state is not the re-run's: $(pg_sql "SELECT state FROM luagent_state")"
cl_stop a
cl_stop b
cat "$WS"/[ab]/data/job.txt >"$WS/job.txt"
[ "$(grep -c '^end ' "$WS/job.txt")" = 1 ] || fail "wanted one end: $(grep '^end' "$WS/job.txt")"
pass "a stopped scheduler's worker fences itself; nothing of it is recorded over the takeover"
finish
