#!/bin/bash
# Two daemons with one cluster.node starting at the same moment, on a name
# the database has no row for yet: exactly one joins, the other is refused
# (exit 2, naming the holder). A SHARE lock on luagent_nodes held by psql
# stands for a slow database: both daemons reach their insert before
# either commits, the widest form of the race.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
. "$(dirname "$0")/lib/cluster.sh"
pg_start
cl_host m
cl_start m
cl_stop m # the schema exists, so neither daemon migrates
cl_host x
cp -r "$WS/x" "$WS/y" # the same luagent.lua: the same node name
"$PG_BIN/psql" -q -h 127.0.0.1 -p "$PG_PORT" -U luagent luagent \
  -c "BEGIN; LOCK TABLE luagent_nodes IN SHARE MODE; SELECT pg_sleep(2); COMMIT;" >/dev/null 2>&1 &
PIDS="$PIDS $!"
wait_for 5 "[ \"\$(pg_sql \"SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'luagent_nodes' AND l.mode = 'ShareLock' AND l.granted\")\" = 1 ]" ||
  fail "psql did not take the lock"
(cd "$WS/x" && exec "$LUAGENT" --workspace "$WS/x" daemon >"$WS/x.log" 2>&1) &
p1=$!
(cd "$WS/y" && exec "$LUAGENT" --workspace "$WS/y" daemon >"$WS/y.log" 2>&1) &
p2=$!
PIDS="$PIDS $p1 $p2"
wait_for 10 "[ \$(cat '$WS/x.log' '$WS/y.log' | grep -c -e 'cluster: node x joined' -e 'is held by a live daemon') -ge 2 ]" ||
  fail "the daemons did not both decide: $(tail -2 "$WS/x.log" "$WS/y.log")"
j=$(grep -l "cluster: node x joined" "$WS/x.log" "$WS/y.log" | wc -l)
[ "$j" = 1 ] || fail "$j daemons joined as node x"
refused=$(grep -l "cluster node 'x' is held by a live daemon" "$WS/x.log" "$WS/y.log")
[ -n "$refused" ] || fail "neither daemon was refused"
if [ "$refused" = "$WS/x.log" ]; then rp=$p1 lp=$p2; else rp=$p2 lp=$p1; fi
wait $rp
rc=$?
[ "$rc" = 2 ] || fail "the refused daemon exited $rc, wanted 2"
kill -TERM $lp
wait $lp
rc=$?
[ "$rc" = 0 ] || fail "the daemon that joined exited $rc after SIGTERM"
pass "one node name, one live daemon, even when both start at once"
finish
