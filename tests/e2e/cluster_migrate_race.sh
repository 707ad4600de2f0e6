#!/bin/bash
# Two `luagent cluster migrate` of one workspace at once (a retry in a
# second terminal, a deploy script on two hosts): together they copy each
# queued event exactly once. Each row's "copied before?" check and its
# copy are separate statements; without one lock for the whole migrate,
# both copied the rows neither had marked yet.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/pg.sh"
pg_start
cd "$WS" || exit 1
mkdir -p automations
for i in $(seq 1 60); do "$LUAGENT" emit job.x "{\"n\": $i}" >/dev/null 2>&1 || fail "emit $i failed"; done
printf 'return { cluster = { postgres = "%s", node = "a" } }\n' "$PG_URL" >luagent.lua
"$LUAGENT" cluster status >/dev/null 2>&1 || fail "cluster status failed"
for try in 1 2 3; do
  pg_sql "DELETE FROM luagent_events; DELETE FROM luagent_imports" >/dev/null
  "$LUAGENT" cluster migrate >m1.out 2>&1 &
  p1=$!
  "$LUAGENT" cluster migrate >m2.out 2>&1 &
  p2=$!
  wait $p1 || fail "migrate 1 failed: $(cat m1.out)"
  wait $p2 || fail "migrate 2 failed: $(cat m2.out)"
  n=$(pg_sql "SELECT count(*) FROM luagent_events")
  [ "$n" = 60 ] || fail "try $try: two migrates at once queued $n events for 60"
  d=$(pg_sql "SELECT count(*) FROM (SELECT payload FROM luagent_events GROUP BY payload HAVING count(*) > 1) x")
  [ "$d" = 0 ] || fail "try $try: $d event(s) queued twice"
done
pass "concurrent migrates copy each event once"
finish
