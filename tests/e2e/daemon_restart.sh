#!/bin/bash
# kill -9 of the daemon, then a restart: the run it left "running" is marked
# interrupted, ctx.state is intact, the schedule continues; catch_up = true
# runs once for the missed slots, catch_up = false skips to the next slot.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
start_http

cat > "$WS/automations/tick.lua" <<'LUA'
return { every = "1s", run = function(ctx) ctx.state.n = (ctx.state.n or 0) + 1; return ctx.state.n end }
LUA
cat > "$WS/automations/slow.lua" <<LUA
return { every = "1s", run = function(ctx)
  tools.call("http.request", { url = "http://127.0.0.1:$HTTP_PORT/slow?d=20", timeout_s = 25 })
end }
LUA
cat > "$WS/automations/eager.lua" <<'LUA'
return { every = "2s", catch_up = true, run = function(ctx)
  return "missed=" .. tostring(ctx.trigger.missed)
end }
LUA
cat > "$WS/automations/lazy.lua" <<'LUA'
return { every = "2s", run = function(ctx) return "ran" end }
LUA
start_daemon
wait_for 10 '[ -n "$(q "SELECT worker_pid FROM runs WHERE name=\"slow\" AND status=\"running\"")" ] && [ "$(q "SELECT count(*) FROM runs WHERE name=\"tick\" AND status=\"ok\"")" -ge 2 ]' || fail "setup runs did not start"
wait_for 5 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"lazy\"")" -ge 1 ]'
slow_id=$(q "SELECT id FROM runs WHERE name='slow' AND status='running'")
slow_pid=$(q "SELECT worker_pid FROM runs WHERE name='slow' AND status='running'")
kill -9 "$DPID"
wait "$DPID" 2>/dev/null
wait_for 3 '! kill -0 '"$slow_pid"' 2>/dev/null' && pass "workers die with the daemon" || fail "worker $slow_pid outlived the daemon"
n_before=$(q "SELECT count(*) FROM runs WHERE name='tick' AND status='ok'")
state_before=$(q "SELECT state FROM automations WHERE name='tick'")
[ "$state_before" = "{\"n\":$n_before}" ] && pass "state consistent at the crash ($state_before)" || fail "state $state_before vs $n_before ok runs"
lazy_before=$(q "SELECT count(*) FROM runs WHERE name='lazy'")
sleep 4.5   # downtime: eager and lazy miss slots

start_daemon
wait_for 5 'grep -q "marked .* interrupted" "$DLOG"' && pass "restart reports interrupted runs"
[ "$(q "SELECT status FROM runs WHERE id='$slow_id'")" = interrupted ] && pass "the run left running is marked interrupted" || fail "slow run: $(q "SELECT status FROM runs WHERE id='$slow_id'")"
wait_for 5 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"tick\" AND status=\"ok\"")" -ge $((n_before + 2)) ]' && pass "schedule continues after restart" || fail "tick did not continue"
sleep 0.3
row=$(q "SELECT (SELECT count(*) FROM runs WHERE name='tick' AND status='ok'), (SELECT state FROM automations WHERE name='tick')")
[ "$(echo "$row" | cut -f2)" = "{\"n\":$(echo "$row" | cut -f1)}" ] && pass "ctx.state intact and continuing: $(echo "$row" | cut -f2)" || fail "state after restart: $row"

# catch_up = true: one run for the missed slots, told how many
res=$(q "SELECT result FROM runs WHERE name='eager' AND json_extract(trigger,'$.missed') IS NOT NULL")
[ "$(echo "$res" | wc -l)" = 1 ] && echo "$res" | grep -Eq '^missed=[1-9]' && pass "catch_up=true: one catch-up run ($res)" || fail "eager catch-up: '$res'"
# catch_up = false: a skipped row, no catch-up run
q "SELECT error FROM runs WHERE name='lazy' AND status='skipped'" | grep -q "missed .* slot(s) while the daemon was down" && pass "catch_up=false: missed slots skipped and journaled" || fail "lazy: $(q "SELECT status, error FROM runs WHERE name='lazy'")"
[ -z "$(q "SELECT id FROM runs WHERE name='lazy' AND json_extract(trigger,'$.missed') IS NOT NULL AND status!='skipped'")" ] && pass "catch_up=false: no catch-up run"
# next lazy run comes on its 2 s grid after the restart
wait_for 4 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"lazy\" AND status=\"ok\"")" -gt "$lazy_before" ]' && pass "catch_up=false: schedule resumes at the next slot" || fail "lazy did not resume"
stop_daemon
[ "$(q "SELECT count(*) FROM runs WHERE status='running'")" = 0 ] && pass "journal consistent: nothing running" || fail "running rows remain"
finish
