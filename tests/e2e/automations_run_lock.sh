#!/bin/bash
# `luagent automations run NAME` beside a daemon that runs NAME too: no two
# runs of one automation start from the same ctx.state, whichever process
# runs them (review 13 F1: a manual run and the daemon's both read n, both
# saved n + 1, and one update was lost). A run holds the automation's lock
# from before it reads ctx.state until its save is committed: the manual
# run waits for the daemon's run in progress (and says so), the daemon
# skips a slot of a `single` automation while a manual run holds it
# (journaled skipped, naming it), `--wait 0` fails at once naming the
# holder, a daemon running an automation back to back lets a waiting
# manual run in, a holder killed with -9 (a manual run, the daemon)
# leaves the lock free, and a .luagent/locks removed or replaced while the
# daemon runs is the daemon's and the manual runs' alike.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
# The gates (daemon_lib's /gate) hold a run in progress until the test lets it go.
start_http
PORT=$HTTP_PORT
# Each run counts in ctx.state.n and returns its n. It waits at the gate
# ctx.args.gate (default GATE; "" none), or ctx.args.d seconds (default
# DELAY; "0" none).
mk() { # NAME EVERY MODE GATE DELAY
  cat > "$WS/automations/$1.lua" <<LUA
return { every = "$2", mode = "$3", timeout = "60s", run = function(ctx)
  local n = (ctx.state.n or 0) + 1
  ctx.state.n = n
  local g, d = ctx.args.gate or "$4", ctx.args.d or "$5"
  if g ~= "" then tools.call("http.request", { url = "http://127.0.0.1:$PORT/gate?g=" .. g, timeout_s = 150 }) end
  if d ~= "0" then tools.call("http.request", { url = "http://127.0.0.1:$PORT/slow?d=" .. d }) end
  return n
end }
LUA
}
open_gate() { : > "$WS/gate-$1"; }
mk count 1h single count 0  # the daemon runs it once at start, until gate-count
mk tick 1s single "" 0      # every second, at once
mk hold 1h single hold 0    # the daemon's run of it holds it for the rest of the test
run_in() { (cd "$WS" && exec "$LUAGENT" --workspace "$WS" automations run "$@"); }
# counts NAME: "ok-runs distinct-n max-n state.n". A run's row and its save
# are one commit, so any snapshot must add up.
counts() {
  q "SELECT (SELECT count(*) FROM runs WHERE name = '$1' AND status = 'ok'),
            (SELECT count(DISTINCT result) FROM runs WHERE name = '$1' AND status = 'ok'),
            (SELECT max(CAST(result AS INTEGER)) FROM runs WHERE name = '$1' AND status = 'ok'),
            (SELECT json_extract(state, '$.n') FROM automations WHERE name = '$1')" | tr '\t' ' '
}
# manual_running NAME: a manual run of NAME is in progress
manual_running() {
  [ -n "$(q "SELECT id FROM runs WHERE name = '$1' AND status = 'running' AND trigger LIKE '%manual%'")" ]
}
start_daemon

# 1. The daemon's run of count is in progress: the manual run waits for it
#    (saying so), then starts from the state it saved.
wait_for 10 '[ "$(q "SELECT status FROM runs WHERE name = \"count\"")" = running ]' ||
  fail "the daemon's run of count did not start"
# (exec: $! is the luagent process itself)
(cd "$WS" && exec "$LUAGENT" --workspace "$WS" automations run count --arg gate=) \
  >"$WS/c.out" 2>"$WS/c.err" &
C=$!
PIDS="$PIDS $C"
wait_for 20 "grep -qF 'count is running in the daemon (pid $DPID); waiting up to 70s' '$WS/c.err'" &&
  pass "the manual run waits for the daemon's, naming it" ||
  fail "the manual run does not say it waits: $(cat "$WS/c.err")"
sleep 0.3
manual_running count && fail "the manual run of count started beside the daemon's"
open_gate count
wait $C
[ $? = 0 ] && [ "$(cat "$WS/c.out")" = 2 ] && pass "then it ran from the daemon's state: n = 2" ||
  fail "the manual run of count: $(cat "$WS/c.out" "$WS/c.err")"
c=$(counts count)
[ "$c" = "2 2 2 2" ] && pass "count: two ok runs, n = 1 and 2, state.n = 2" ||
  fail "count: ok runs / distinct n / max n / state.n = $c (want 2 2 2 2): $(q "SELECT status, result, trigger FROM runs WHERE name = 'count'")"

# 2. A manual run of tick holds it: the daemon's slots meanwhile are
#    skipped (mode single), journaled with who holds it.
wait_for 10 '[ "$(q "SELECT count(*) FROM runs WHERE name = \"tick\" AND status = \"ok\"")" -ge 1 ]' ||
  fail "the daemon does not run tick"
# manual_holds_tick GATE OUT WHAT: starts a manual run of tick that waits
# at GATE (its stdout to $WS/OUT.out, stderr OUT.err; its pid in M), and
# checks that the daemon skips tick's slots meanwhile, naming it (WHAT:
# the pass message).
manual_holds_tick() {
  (cd "$WS" && exec "$LUAGENT" --workspace "$WS" automations run tick --arg gate="$1") \
    >"$WS/$2.out" 2>"$WS/$2.err" &
  M=$!
  PIDS="$PIDS $M"
  wait_for 20 "manual_running tick" || fail "the manual run of tick at gate $1 did not start"
  local want="another process is running it (luagent automations run, pid $M) (mode single)"
  wait_for 20 "[ -n \"\$(q \"SELECT id FROM runs WHERE name = 'tick' AND status = 'skipped' AND error = '$want'\")\" ]" &&
    pass "$3" ||
    fail "no skipped slot of tick naming the manual run at gate $1: $(q "SELECT status, error FROM runs WHERE name = 'tick'" | tail -3)"
}
manual_holds_tick t1 m "the daemon skips tick's slots while the manual run holds it, naming it"
# 3. Meanwhile --wait 0 fails at once, naming the automation and the holder.
expect_rc 1 run_in tick --wait 0 &&
  err_has "automations run: tick is already running in another \`luagent automations run\` (pid $M)"
open_gate t1
wait $M
[ $? = 0 ] && pass "the manual run of tick ended ok" || fail "the manual run of tick: $(cat "$WS/m.err")"
mn=$(cat "$WS/m.out")
wait_for 10 "[ \"\$(q \"SELECT count(*) FROM runs WHERE name = 'tick' AND status = 'ok' AND CAST(result AS INTEGER) > $mn\")\" -ge 1 ]" &&
  pass "and the daemon runs tick again after it" ||
  fail "the daemon did not run tick again after the manual run"

# 4. A manual run killed with -9 while it holds tick: the lock goes with it.
(cd "$WS" && exec "$LUAGENT" --workspace "$WS" automations run tick --arg gate=never) >/dev/null 2>&1 &
K=$!
PIDS="$PIDS $K"
wait_for 20 "manual_running tick" || fail "the second manual run of tick did not start"
kill -KILL $K
wait $K 2>/dev/null
expect_rc 0 run_in tick --wait 10s && pass "after a kill -9 of the holder a manual run goes ahead"
last=$(q "SELECT max(CAST(result AS INTEGER)) FROM runs WHERE name = 'tick' AND status = 'ok'")
wait_for 10 "[ \"\$(q \"SELECT count(*) FROM runs WHERE name = 'tick' AND status = 'ok' AND CAST(result AS INTEGER) > $last\")\" -ge 1 ]" &&
  pass "and so does the daemon" || fail "the daemon did not run tick after the kill: $(grep tick "$DLOG" | tail -3)"
c=$(counts tick)
set -- $c
[ "$1" = "$2" ] && [ "$1" = "$3" ] && [ "$1" = "$4" ] &&
  pass "tick: $1 ok runs, each with its own n, state.n = $4" ||
  fail "tick: ok runs / distinct n / max n / state.n = $c: $(q "SELECT status, result FROM runs WHERE name = 'tick' ORDER BY started")"

# 5. An automation the daemon runs back to back (mode queued; each run
#    takes longer than its period, so one always waits behind the one in
#    progress): a manual run still gets in after the run in progress, as
#    the daemon lets a waiting process go first.
mk busy 1s queued "" 1.3
wait_for 20 '[ "$(q "SELECT count(*) FROM runs WHERE name = \"busy\" AND status = \"ok\"")" -ge 1 ]' ||
  fail "the daemon does not run busy"
expect_rc 0 run_in busy --arg d=0 --wait 10s && pass "a manual run gets in between the daemon's queued runs"
wait_for 10 "[ \"\$(q \"SELECT count(*) FROM runs WHERE name = 'busy' AND status = 'ok' AND CAST(result AS INTEGER) > \$(cat "$WS/.out")\")\" -ge 1 ]" ||
  fail "the daemon did not run busy after the manual run"
rm "$WS/automations/busy.lua"
c=$(counts busy)
set -- $c
[ "$1" = "$2" ] && [ "$1" = "$3" ] && [ "$1" = "$4" ] &&
  pass "busy: $1 ok runs, each with its own n, state.n = $4" ||
  fail "busy: ok runs / distinct n / max n / state.n = $c: $(q "SELECT status, result FROM runs WHERE name = 'busy' ORDER BY started")"

# ... and one whose runs overlap (mode parallel, each run 1.8 s, one a
#    second): no new run joins those in progress while the manual run
#    waits, which gets in once they are done.
mk par 1s parallel "" 1.8
wait_for 20 '[ "$(q "SELECT count(*) FROM runs WHERE name = \"par\" AND status = \"running\"")" -ge 2 ]' ||
  fail "the daemon does not run par's runs side by side"
expect_rc 0 run_in par --arg d=0 --wait 10s && pass "a manual run gets in between the daemon's parallel runs"
rm "$WS/automations/par.lua"

# 6. The daemon holds hold (its run waits at a gate never opened); killed
#    with -9, it leaves the lock free too.
wait_for 10 '[ "$(q "SELECT status FROM runs WHERE name = \"hold\"")" = running ]' ||
  fail "the daemon's run of hold did not start"
expect_rc 1 run_in hold --wait 0 &&
  err_has "automations run: hold is already running in the daemon (pid $DPID); waited 0s"
kill -KILL $DPID
wait $DPID 2>/dev/null
expect_rc 0 run_in hold --wait 10s --arg gate= && out_has "1" &&
  pass "after a kill -9 of the daemon a manual run goes ahead"
expect_rc 2 run_in hold --wait soon && err_has "--wait"

# 7. .luagent/locks removed while a daemon runs (the daemon opens the
#    directory once per pass over the runs it starts): it makes it anew,
#    and its runs and a manual run still lock the same file, also when it
#    is moved away and replaced.
rm "$WS/automations/"*.lua
mk tick 1s single "" 0
start_daemon
wait_for 10 '[ "$(q "SELECT count(*) FROM runs WHERE name = \"tick\" AND status = \"ok\"")" -ge 1 ]' ||
  fail "the new daemon does not run tick"
rm -rf "$WS/.luagent/locks"
last=$(q "SELECT max(CAST(result AS INTEGER)) FROM runs WHERE name = 'tick' AND status = 'ok'")
wait_for 10 "[ \"\$(q \"SELECT count(*) FROM runs WHERE name = 'tick' AND status = 'ok' AND CAST(result AS INTEGER) > $last\")\" -ge 1 ]" &&
  [ -f "$WS/.luagent/locks/tick.lock" ] &&
  pass "with .luagent/locks removed the daemon runs tick again, its lock made anew" ||
  fail "the daemon did not run tick after .luagent/locks was removed: $(grep tick "$DLOG" | tail -3)"
# moved away and replaced: the new one is every other process's, and so
# the daemon's from its next pass (not its old one's for good)
mv "$WS/.luagent/locks" "$WS/.luagent/locks.old" && mkdir -m 700 "$WS/.luagent/locks"
manual_holds_tick t2 m2 "and a manual run holds it against the daemon there"
open_gate t2
wait $M || fail "the manual run of tick: $(cat "$WS/m2.err")"

stop_daemon

# 8. A daemon stopping while a run it holds back waits for a manual run
#    (and a run of its own still has its grace): it waits without spinning.
rm "$WS/automations/"*.lua
mk q 1s queued "" 0
mk slow 1h single never 0
start_daemon
(cd "$WS" && exec "$LUAGENT" --workspace "$WS" automations run q --arg gate=q) >/dev/null 2>&1 &
Q=$!
PIDS="$PIDS $Q"
wait_for 20 'grep -q "q: waiting: another process is running it" "$DLOG"' ||
  fail "the daemon does not hold q back: $(tail -3 "$DLOG")"
kill -TERM $DPID
c0=$(awk '{ print $14 + $15 }' /proc/$DPID/stat)
sleep 1.5
c1=$(awk '{ print $14 + $15 }' /proc/$DPID/stat)
[ $((c1 - c0)) -lt 40 ] && pass "a stopping daemon waits without spinning ($((c1 - c0)) ticks of CPU in 1.5 s)" ||
  fail "a stopping daemon spun: $((c1 - c0)) ticks of CPU in 1.5 s"
stop_daemon
open_gate q
wait $Q
if grep -Eq "AddressSanitizer|LeakSanitizer|runtime error:|ended unexpectedly" "$DLOG" "$WS"/*.err; then
  fail "sanitizer or worker trouble: $(grep -E -m3 "Sanitizer|runtime error|unexpectedly" "$DLOG" "$WS"/*.err)"
fi
finish
