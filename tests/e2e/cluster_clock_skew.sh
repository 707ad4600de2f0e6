#!/bin/bash
# A host whose wall clock runs ahead (an LD_PRELOAD shim, lib/clock_skew.c)
# must still claim each slot when it is due by the database's clock, the
# cluster's one clock: host f runs 3 s ahead, host n is right; no run of
# an `every = "4s"` automation may start before its slot, and the fast
# host finds no slot "missed" at start.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
. "$(dirname "$0")/lib/cluster.sh"
cc -shared -fPIC -O2 -o "$WS/skew.so" "$(dirname "$0")/lib/clock_skew.c" -ldl ||
  { echo "FAIL: cannot build the clock shim" >&2; exit 1; }
pg_start
cat >"$WS/automations/tick.lua" <<'LUA'
return { every = "4s", catch_up = false, run = function(ctx) end }
LUA
cl_host n
cl_host f
cl_start n
sleep 1
# an ASan build checks that its runtime comes first; the shim does not mind
SKEW_S=3 LD_PRELOAD="$WS/skew.so" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" cl_start f
grep -q "luagent daemon" "$WS/f.log" || fail "host f did not start"
sleep 12
cl_stop f
cl_stop n
rows=$(pg_sql "SELECT node || ' ' || status || ' ' || round((started - slot)::numeric, 2) FROM luagent_runs ORDER BY slot" | tr '\n' ';')
[ "$(pg_sql "SELECT count(*) FROM luagent_runs WHERE status <> 'skipped'")" -ge 3 ] || fail "too few runs: $rows"
early=$(pg_sql "SELECT count(*) FROM luagent_runs WHERE started < slot - 0.5")
[ "$early" = 0 ] || fail "$early run(s) started before their slot by the database clock: $rows"
missed=$(pg_sql "SELECT count(*) FROM luagent_runs WHERE error LIKE 'missed%'")
[ "$missed" = 0 ] || fail "slots recorded as missed: $rows"
pass "a host whose clock runs ahead claims nothing early"
finish
