#!/bin/bash
# `luagent automations run NAME` beside a daemon that runs NAME too: no two
# runs of one automation start from the same ctx.state, whichever process
# runs them (review 13 F1: a manual run and the daemon's both read n, both
# saved n + 1, and one update was lost). A run holds the automation's lock
# from before it reads ctx.state until its save is committed: the manual
# run waits for the daemon's run in progress (and says so), the daemon
# skips a slot of a `single` automation while a manual run holds it
# (journaled skipped, naming it), `--wait 0` fails at once naming the
# holder, and a holder killed with -9 (a manual run, the daemon) leaves
# the lock free.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
start_http
# Each run counts in ctx.state.n and returns its n; ctx.args.d makes it
# hold on for d seconds (a slow HTTP answer: no CPU spent waiting).
mk() { # NAME EVERY DEFAULT_DELAY
  cat > "$WS/automations/$1.lua" <<LUA
return { every = "$2", timeout = "60s", run = function(ctx)
  local n = (ctx.state.n or 0) + 1
  ctx.state.n = n
  local d = ctx.args.d or "$3"
  if d ~= "0" then
    tools.call("http.request", { url = "http://127.0.0.1:$HTTP_PORT/slow?d=" .. d, timeout_s = 40 })
  end
  return n
end }
LUA
}
mk count 1h 1.5   # the daemon runs it once at start, for 1.5 s
mk tick 1s 0      # every second, quickly
mk hold 1h 30     # the daemon's run of it holds it for the rest of the test
run_in() { (cd "$WS" && exec "$LUAGENT" --workspace "$WS" automations run "$@"); }
# counts NAME: "ok-runs distinct-n max-n state.n"
counts() {
  q "SELECT (SELECT count(*) FROM runs WHERE name = '$1' AND status = 'ok'),
            (SELECT count(DISTINCT result) FROM runs WHERE name = '$1' AND status = 'ok'),
            (SELECT max(CAST(result AS INTEGER)) FROM runs WHERE name = '$1' AND status = 'ok'),
            (SELECT json_extract(state, '$.n') FROM automations WHERE name = '$1')" | tr '\t' ' '
}
start_daemon

# 1. The daemon's run of count is in progress: the manual run waits for it,
#    then starts from the state it saved.
wait_for 10 '[ "$(q "SELECT status FROM runs WHERE name = \"count\"")" = running ]' ||
  fail "the daemon's run of count did not start"
t0=$(date +%s%N)
expect_rc 0 run_in count --arg d=0 && out_has "2"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
err_has "count is running in the daemon (pid $DPID); waiting"
[ "$ms" -ge 500 ] && pass "the manual run waited for the daemon's (${ms} ms)" ||
  fail "the manual run did not wait for the daemon's run (${ms} ms)"
c=$(counts count)
[ "$c" = "2 2 2 2" ] && pass "count: two ok runs, n = 1 and 2, state.n = 2" ||
  fail "count: ok runs / distinct n / max n / state.n = $c (want 2 2 2 2): $(q "SELECT status, result, trigger FROM runs WHERE name = 'count'")"

# 2. A manual run of tick holds it for 2.5 s: the daemon's slots meanwhile
#    are skipped (mode single), journaled with who holds it.
wait_for 10 '[ "$(q "SELECT count(*) FROM runs WHERE name = \"tick\" AND status = \"ok\"")" -ge 1 ]' ||
  fail "the daemon does not run tick"
# (exec: $! is the luagent process itself)
(cd "$WS" && exec "$LUAGENT" --workspace "$WS" automations run tick --arg d=2.5) >"$WS/m.out" 2>"$WS/m.err" &
M=$!
PIDS="$PIDS $M"
wait_for 10 "[ -n \"\$(q \"SELECT id FROM runs WHERE name = 'tick' AND status = 'running' AND trigger LIKE '%manual%'\")\" ]" ||
  fail "the manual run of tick did not start"
# 3. Meanwhile --wait 0 fails at once, naming the automation and the holder.
expect_rc 1 run_in tick --wait 0 && err_has "tick is already running in another \`luagent automations run\` (pid $M)"
wait $M
[ $? = 0 ] && pass "the manual run of tick ended ok" || fail "the manual run of tick: $(cat "$WS/m.err")"
skipped=$(q "SELECT error FROM runs WHERE name = 'tick' AND status = 'skipped' LIMIT 1")
case $skipped in
  *"another process is running it (luagent automations run, pid $M) (mode single)"*)
    pass "the daemon skipped tick's slots while the manual run held it" ;;
  *) fail "no skipped slot of tick naming the manual run: '$skipped'; $(grep tick "$DLOG" | tail -5)" ;;
esac
mn=$(cat "$WS/m.out")
wait_for 10 "[ \"\$(q \"SELECT count(*) FROM runs WHERE name = 'tick' AND status = 'ok' AND CAST(result AS INTEGER) > $mn\")\" -ge 1 ]" ||
  fail "the daemon did not run tick again after the manual run"

# 4. A manual run killed with -9 while it holds tick: the lock goes with it.
(cd "$WS" && exec "$LUAGENT" --workspace "$WS" automations run tick --arg d=30) >/dev/null 2>&1 &
K=$!
PIDS="$PIDS $K"
wait_for 10 "[ -n \"\$(q \"SELECT id FROM runs WHERE name = 'tick' AND status = 'running' AND trigger LIKE '%manual%'\")\" ]" ||
  fail "the second manual run of tick did not start"
kill -KILL $K
wait $K 2>/dev/null
expect_rc 0 run_in tick --wait 5s && pass "after a kill -9 of the holder a manual run goes ahead"
last=$(q "SELECT max(CAST(result AS INTEGER)) FROM runs WHERE name = 'tick' AND status = 'ok'")
wait_for 10 "[ \"\$(q \"SELECT count(*) FROM runs WHERE name = 'tick' AND status = 'ok' AND CAST(result AS INTEGER) > $last\")\" -ge 1 ]" &&
  pass "and so does the daemon" || fail "the daemon did not run tick after the kill: $(grep tick "$DLOG" | tail -3)"
sleep 0.3 # a run of tick may be in progress: let it save
c=$(counts tick)
set -- $c
[ "$1" = "$2" ] && [ "$1" = "$3" ] && [ "$1" = "$4" ] &&
  pass "tick: $1 ok runs, each with its own n, state.n = $4" ||
  fail "tick: ok runs / distinct n / max n / state.n = $c: $(q "SELECT status, result FROM runs WHERE name = 'tick' ORDER BY started")"

# 5. The daemon holds hold (its run waits 30 s); killed with -9, it leaves
#    the lock free too.
wait_for 10 '[ "$(q "SELECT status FROM runs WHERE name = \"hold\"")" = running ]' ||
  fail "the daemon's run of hold did not start"
expect_rc 1 run_in hold --wait 0 && err_has "hold is already running in the daemon (pid $DPID)"
kill -KILL $DPID
wait $DPID 2>/dev/null
expect_rc 0 run_in hold --wait 5s --arg d=0 && out_has "1" &&
  pass "after a kill -9 of the daemon a manual run goes ahead"
expect_rc 2 run_in hold --wait soon && err_has "--wait"
finish
