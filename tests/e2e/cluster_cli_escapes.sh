#!/bin/bash
# What the cluster's rows say is another host's text (a hostname is any
# bytes sethostname took) or any database writer's: `cluster status`,
# `runs show ID` and `automations history` print it escaped, never a raw
# control byte to the operator's terminal.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
. "$(dirname "$0")/lib/cluster.sh"
pg_start
cat >"$WS/automations/job.lua" <<'LUA'
return { on = "go", run = function(ctx) return "fine" end }
LUA
cl_host a
cl_start a
(cd "$WS/a" && "$LUAGENT" emit go) >/dev/null 2>&1 || fail "emit failed"
wait_for 10 "[ \"\$(pg_sql \"SELECT count(*) FROM luagent_runs WHERE status = 'ok'\")\" = 1 ]" || fail "the run did not end ok"
id=$(pg_sql "SELECT id FROM luagent_runs LIMIT 1")
pg_sql "UPDATE luagent_nodes SET host = E'evil\\033]0;PWNED\\007\\033[2J'" >/dev/null
pg_sql "UPDATE luagent_runs SET status = E'ok\\033[31mRED', takeover_of = E'x\\033]0;T\\007', attempt = 2, node = E'a\\033[1m' WHERE id = '$id'" >/dev/null
pg_sql "INSERT INTO luagent_runs (id, automation, node, status, queued, started, lease_until, attempt) VALUES (E'r\\033[5m', E'job\\033[7m', E'n\\033[8m', 'running', 0, 0, extract(epoch from clock_timestamp()) + 60, 1)" >/dev/null ||
  fail "cannot insert the hostile lease row"
(cd "$WS/a" && "$LUAGENT" cluster status) >"$WS/status.out" 2>&1 || fail "cluster status failed: $(cat "$WS/status.out")"
(cd "$WS/a" && "$LUAGENT" runs show "$id") >"$WS/show.out" 2>&1 || fail "runs show failed: $(cat "$WS/show.out")"
(cd "$WS/a" && "$LUAGENT" automations history job) >"$WS/hist.out" 2>&1 || fail "history failed: $(cat "$WS/hist.out")"
for f in status show hist; do
  ! grep -q $'\033' "$WS/$f.out" || fail "raw ESC in $f: $(grep $'\033' "$WS/$f.out" | cat -v | head -3)"
done
grep -q 'evil' "$WS/status.out" || fail "cluster status lacks the host: $(cat -v "$WS/status.out")"
grep -q 'ok.*RED' "$WS/show.out" || fail "runs show lacks the status: $(cat -v "$WS/show.out")"
grep -q 'RED' "$WS/hist.out" || fail "history lacks the status: $(cat -v "$WS/hist.out")"
pg_sql "DELETE FROM luagent_runs WHERE id = E'r\\033[5m'" >/dev/null
cl_stop a
pass "the cluster's text reaches the terminal escaped"
finish
