#!/bin/bash
# SIGKILL one daemon mid-run. Two automations run on host a alone (it
# starts first): `rerun` says on_lost = "rerun", `plain` says nothing.
# Each run appends "begin", a tick per 0.3 s and "end" to its host's
# data/. After a is killed, another host marks both runs interrupted within
# one lease period of their expiry, runs `rerun` again (attempt 2, the same
# slot) and not `plain`. Counted side effects: one "end" of rerun (attempt
# 2), none of plain, nothing from a after its death.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
. "$(dirname "$0")/lib/cluster.sh"
start_http
pg_start
cl_noting_job rerun 'on_lost = "rerun",'
cl_noting_job plain
for h in a b c; do cl_host $h; done
cl_start a
wait_for 10 "[ \"\$(pg_sql \"SELECT count(*) FROM luagent_runs WHERE status = 'running' AND node = 'a'\")\" = 2 ]" ||
  fail "a did not start both runs: $(tail -5 "$WS/a.log")"
cl_start b
cl_start c
sleep 1
cl_kill a
killed=$(python3 -c 'import time; print(time.time())')
# the sweep: interrupted within lease (3 s) + a sweep interval (1 s), with slack
wait_for 8 "[ \"\$(pg_sql \"SELECT count(*) FROM luagent_runs WHERE status = 'interrupted' AND node = 'a'\")\" = 2 ]" ||
  fail "a's runs were not marked interrupted: $(pg_sql "SELECT automation, node, status, error FROM luagent_runs")"
marked=$(python3 -c 'import time; print(time.time())')
python3 -c "import sys; d = $marked - $killed; print('interrupted %.2fs after the kill' % d); sys.exit(0 if d < 3 + 1 + 1.5 else 1)" ||
  fail "marking took longer than one lease period plus a sweep"
pg_sql "SELECT error FROM luagent_runs WHERE node = 'a' AND status = 'interrupted' LIMIT 1" | grep -q "stopped renewing the lease" ||
  fail "the interrupted run does not say why: $(pg_sql "SELECT error FROM luagent_runs WHERE node = 'a'")"
wait_for 15 "[ \"\$(pg_sql \"SELECT count(*) FROM luagent_runs WHERE automation = 'rerun' AND attempt = 2 AND status = 'ok'\")\" = 1 ]" ||
  fail "rerun was not run again to the end: $(pg_sql "SELECT automation, node, status, attempt, error FROM luagent_runs")"
sleep 1
for h in b c; do cl_stop $h; done
cat "$WS"/[abc]/data/rerun.txt >"$WS/rerun.txt" 2>/dev/null
cat "$WS"/[abc]/data/plain.txt >"$WS/plain.txt" 2>/dev/null
[ "$(grep -c '^end ' "$WS/rerun.txt")" = 1 ] || fail "rerun: wanted exactly one end: $(grep '^end' "$WS/rerun.txt")"
grep -q '^end [bc] 2 ' "$WS/rerun.txt" || fail "rerun's end is not attempt 2 on b or c: $(cat "$WS/rerun.txt")"
grep -q '^begin a 1 ' "$WS/rerun.txt" || fail "rerun did not begin on a"
! grep -q '^end' "$WS/plain.txt" || fail "plain (on_lost not set) ran to the end: $(grep end "$WS/plain.txt")"
[ "$(grep -c '^begin' "$WS/plain.txt")" = 1 ] || fail "plain began more than once: $(grep begin "$WS/plain.txt")"
# nothing of a's after its death
python3 - "$killed" "$WS/rerun.txt" "$WS/plain.txt" <<'PY' || fail "a wrote after it was killed"
import sys
k = float(sys.argv[1])
late = [l for f in sys.argv[2:] for l in open(f) if l.split()[1] == "a" and float(l.split()[3]) > k + 0.05]
print("a's notes after the kill:", late)
sys.exit(1 if late else 0)
PY
[ "$(pg_sql "SELECT count(*) FROM luagent_runs WHERE automation = 'plain'")" = 1 ] || fail "plain has more than its one run row"
[ "$(pg_sql "SELECT takeover_of = (SELECT id FROM luagent_runs WHERE automation = 'rerun' AND attempt = 1) FROM luagent_runs WHERE automation = 'rerun' AND attempt = 2")" = t ] ||
  fail "the re-run does not name the run it took over"
[ "$(pg_sql "SELECT count(*) FROM luagent_slots WHERE automation = 'rerun'")" = 1 ] || fail "the re-run claimed a second slot"
pass "SIGKILL: interrupted by another host, re-run once where on_lost = rerun, nothing else twice"
finish
