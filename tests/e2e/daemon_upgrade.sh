#!/bin/bash
# An upgrade that renames a new binary over the running daemon's (what a
# package manager or `install` does) must not break the daemon: a worker
# started after it runs the daemon's own version (a worker of another
# version may not speak this scheduler's job records), runs keep
# succeeding, and the daemon says once that a restart takes the new
# binary. The "new version" here is a program that only fails, so any
# worker started from the path shows up as failed runs.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
mkdir -p "$WS/bin"
cp "$LUAGENT" "$WS/bin/luagent"
LUAGENT="$WS/bin/luagent"
cat > "$WS/automations/tick.lua" <<'LUA'
return { every = "1s", run = function(ctx) ctx.state.n = (ctx.state.n or 0) + 1; return "tick" end }
LUA
start_daemon --workers 1
wait_for 15 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"tick\" AND status=\"ok\"")" -ge 2 ]' ||
  fail "no runs before the upgrade: $(tail -5 "$DLOG")"
# the upgrade: a new file renamed into place
printf '#!/bin/sh\necho "new version: not a worker" >&2\nexit 3\n' > "$WS/bin/luagent.new"
chmod +x "$WS/bin/luagent.new"
mv -f "$WS/bin/luagent.new" "$WS/bin/luagent"
# the worker dies (as after a crash): the daemon must start another
w=$(q "SELECT worker_pid FROM runs WHERE name='tick' AND status='ok' ORDER BY started DESC LIMIT 1")
[ -n "$w" ] && kill -KILL "$w"
t0=$(python3 -c 'import time; print(time.time())')
wait_for 20 "[ \"\$(q \"SELECT count(*) FROM runs WHERE name='tick' AND status='ok' AND started > $t0\")\" -ge 3 ]" &&
  pass "runs go on after the binary was replaced and the worker died" ||
  fail "after the upgrade: $(q "SELECT status, error FROM runs WHERE name='tick' AND started > $t0 LIMIT 5") $(tail -5 "$DLOG")"
bad=$(q "SELECT count(*) FROM runs WHERE name='tick' AND started > $t0 AND status NOT IN ('ok', 'running')")
[ "$bad" = 0 ] && pass "no run failed on a worker of the new binary" ||
  fail "$bad run(s) failed: $(q "SELECT status, error FROM runs WHERE name='tick' AND started > $t0 AND status != 'ok' LIMIT 3")"
n=$(q "SELECT count(DISTINCT worker_pid) FROM runs WHERE name='tick' AND status='ok' AND started > $t0")
[ "$n" -ge 1 ] && [ "$(q "SELECT count(*) FROM runs WHERE worker_pid=$w AND started > $t0")" = 0 ] &&
  pass "a new worker ran them" || fail "no new worker ($n)"
[ "$(grep -c 'changed on disk' "$DLOG")" = 1 ] && pass "the daemon said once that a restart takes the new binary" ||
  fail "log: $(grep -c 'changed on disk' "$DLOG") notes: $(tail -5 "$DLOG")"
# (not stop_daemon: the worker we killed is in the log as ended unexpectedly)
kill -TERM "$DPID"
wait "$DPID"
rc=$?
[ "$rc" = 0 ] && pass "SIGTERM: daemon exited 0" || fail "daemon exited $rc after SIGTERM: $(tail -5 "$DLOG")"
grep -Eq "AddressSanitizer|LeakSanitizer|runtime error:" "$DLOG" && fail "sanitizer report: $(grep -E -m3 "Sanitizer|runtime error" "$DLOG")"
finish
