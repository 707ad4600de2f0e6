#!/bin/bash
# A run whose worker segfaults, one stuck in a C call (curl waiting on a
# server that never answers), and one whose worker hangs outright (SIGSTOP,
# so only the supervisor's kill can end it) are each recorded, while an
# every="1s" automation keeps its schedule.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
start_http

cat > "$WS/automations/tick.lua" <<'LUA'
return { every = "1s", run = function(ctx) ctx.state.n = (ctx.state.n or 0) + 1; return ctx.state.n end }
LUA
cat > "$WS/automations/victim.lua" <<LUA
return { every = "1s", timeout = "30s", run = function(ctx)
  tools.call("http.request", { url = "http://127.0.0.1:$HTTP_PORT/slow?d=20", timeout_s = 25 })
end }
LUA
cat > "$WS/automations/stuck.lua" <<LUA
return { every = "1h", timeout = "1s", run = function(ctx)
  tools.call("http.request", { url = "http://127.0.0.1:$HTTP_PORT/hang", timeout_s = 60 })
end }
LUA
cat > "$WS/automations/frozen.lua" <<LUA
return { on = "freeze", timeout = "3s", run = function(ctx)
  tools.call("http.request", { url = "http://127.0.0.1:$HTTP_PORT/slow?d=30", timeout_s = 60 })
  return "finished"
end }
LUA
# Under ASan, let the SIGSEGV we send kill the worker as it would in a plain build.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0"
start_daemon
t0=$(date +%s.%N)

# 1. SIGSEGV the victim's worker (its pid is in the journal)
wait_for 10 '[ -n "$(q "SELECT worker_pid FROM runs WHERE name=\"victim\" AND status=\"running\"")" ]' || fail "victim not running"
vpid=$(q "SELECT worker_pid FROM runs WHERE name='victim' AND status='running'")
vid=$(q "SELECT id FROM runs WHERE name='victim' AND status='running'")
kill -SEGV "$vpid"
wait_for 5 '[ "$(q "SELECT status FROM runs WHERE id=\"$vid\"")" = crashed ]' && pass "segfaulting worker recorded as crashed" || fail "victim status: $(q "SELECT status, error FROM runs WHERE id='$vid'")"
q "SELECT error FROM runs WHERE id='$vid'" | grep -q "signal 11 " && pass "crash names signal 11" || fail "crash error: $(q "SELECT error FROM runs WHERE id='$vid'")"
kill -0 "$vpid" 2>/dev/null && fail "crashed worker still alive"
wait_for 5 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"victim\" AND status=\"running\" AND id!=\"$vid\"")" = 1 ]' && pass "victim runs again in a new worker" || fail "victim did not restart"

# 2. stuck in curl: the run's deadline ends it as a timeout
wait_for 8 '[ "$(q "SELECT status FROM runs WHERE name=\"stuck\" AND status!=\"running\"")" = timeout ]' && pass "run stuck in a C call ends as timeout" || fail "stuck: $(q "SELECT status, error FROM runs WHERE name='stuck'")"

# 3. a worker that hangs outright: the supervisor kills it after timeout + grace
expect_rc 0 "$LUAGENT" --workspace "$WS" emit freeze
wait_for 5 '[ -n "$(q "SELECT worker_pid FROM runs WHERE name=\"frozen\" AND status=\"running\"")" ]' || fail "frozen not running"
fpid=$(q "SELECT worker_pid FROM runs WHERE name='frozen' AND status='running'")
kill -STOP "$fpid"
wait_for 8 '[ "$(q "SELECT status FROM runs WHERE name=\"frozen\"")" = timeout ]' && pass "hung worker killed, run recorded as timeout" || fail "frozen: $(q "SELECT status, error FROM runs WHERE name='frozen'")"
q "SELECT error FROM runs WHERE name='frozen'" | grep -q "worker was killed" && pass "timeout says the worker was killed" || fail "frozen error: $(q "SELECT error FROM runs WHERE name='frozen'")"
wait_for 3 '! kill -0 '"$fpid"' 2>/dev/null' && pass "hung worker is gone" || fail "hung worker $fpid still alive"

# the others kept their schedule: tick ran every second throughout
sleep 1.5
q "SELECT started FROM runs WHERE name='tick' AND status='ok' AND started > $t0 ORDER BY started" > "$WS/ticks"
python3 - "$WS/ticks" <<'PY' && pass "tick kept its 1 s schedule meanwhile" || fail "tick schedule disturbed: $(cat "$WS/ticks" | tr '\n' ' ')"
import sys
s = [float(x) for x in open(sys.argv[1]).read().split()]
gaps = [b - a for a, b in zip(s, s[1:])]
print("tick runs:", len(s), "max gap: %.3f s" % max(gaps))
sys.exit(0 if len(s) >= 5 and max(gaps) < 1.9 else 1)
PY
[ "$(q "SELECT count(*) FROM runs WHERE name='tick' AND status!='ok'")" = 0 ] && pass "no tick run failed"
kill -0 "$DPID" && pass "daemon still up"
stop_daemon
[ "$(q "SELECT count(*) FROM runs WHERE status='running'")" = 0 ] && pass "nothing left running after stop" || fail "left running: $(q "SELECT name FROM runs WHERE status='running'")"
q "SELECT status FROM runs WHERE name='victim' AND status!='skipped' ORDER BY started DESC LIMIT 1" | grep -q interrupted && pass "victim in progress at stop marked interrupted after the grace period" || fail "victim at stop: $(q "SELECT status, error FROM runs WHERE name='victim' ORDER BY started DESC LIMIT 1")"
finish
