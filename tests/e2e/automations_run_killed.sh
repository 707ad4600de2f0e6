#!/bin/bash
# `luagent automations run NAME` killed with -9 takes its worker with it;
# its run must not stay `running` (with a daemon running beside it, which
# did not run it and sweeps only at its start): the next command that opens
# the journal marks it interrupted, saying the worker ended, and a daemon
# started later does not blame itself for it. A run alive in a daemon's
# worker is left alone meanwhile. (Red team 9's F8.)
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
cat > "$WS/automations/slow.lua" <<'LUA'
return { run = function(ctx) local t = os.clock() while os.clock() - t < 6 do end return "slow done" end }
LUA
cat > "$WS/automations/long.lua" <<'LUA'
return { every = "1h", timeout = "60s", run = function(ctx)
  local t = os.clock() while os.clock() - t < 8 do end return "long done" end }
LUA
printf "return { limits = { instructions = 1e11 } }\n" > "$WS/luagent.lua"
start_daemon
wait_for 10 '[ "$(q "SELECT status FROM runs WHERE name=\"long\"")" = running ]' || fail "the daemon's run did not start"
(cd "$WS" && exec "$LUAGENT" automations run slow) >"$WS/m.out" 2>&1 &
M=$!
wait_for 10 '[ "$(q "SELECT status FROM runs WHERE name=\"slow\"")" = running ]' || fail "the manual run did not start"
kill -KILL $M
wait $M 2>/dev/null
sleep 0.5
(cd "$WS" && "$LUAGENT" runs list >/dev/null 2>&1)
row=$(q "SELECT status, error FROM runs WHERE name='slow'")
case $row in
  interrupted*"worker running it ended"*) pass "the killed manual run is marked interrupted by the next command" ;;
  *) fail "the killed manual run: $row" ;;
esac
[ "$(q "SELECT status FROM runs WHERE name='long'")" = running ] && pass "the daemon's live run is left alone" ||
  fail "the daemon's run: $(q "SELECT status, error FROM runs WHERE name='long'")"
wait_for 15 '[ "$(q "SELECT status FROM runs WHERE name=\"long\"")" = ok ]' && pass "and ends ok" ||
  fail "the daemon's run: $(q "SELECT status, error FROM runs WHERE name='long'")"
stop_daemon
start_daemon
stop_daemon
case $(q "SELECT error FROM runs WHERE name='slow'") in
  *"daemon stopped"*) fail "a daemon start blamed itself for the manual run" ;;
  *) pass "a later daemon start leaves its record as it was" ;;
esac
finish
