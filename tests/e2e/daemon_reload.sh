#!/bin/bash
# Hot reload: a broken edit is reported (file:line) and the last good version
# keeps running; a fixed edit takes over; SIGHUP reloads. Events: an `on`
# automation fires from `luagent emit` with its payload, and from
# events.emit() inside another automation.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"

cat > "$WS/automations/hello.lua" <<'LUA'
return { every = "1s", run = function(ctx) return "v1" end }
LUA
cat > "$WS/automations/deploy.lua" <<'LUA'
return { on = "deploy.*", run = function(ctx)
  return ctx.trigger.kind .. ":" .. ctx.trigger.name .. ":" .. ctx.trigger.payload.version
end }
LUA
cat > "$WS/automations/ping.lua" <<'LUA'
return { on = "ping", run = function(ctx) events.emit("pong", { from = "ping", n = 7 }) return "sent" end }
LUA
cat > "$WS/automations/pong.lua" <<'LUA'
return { on = "pong", run = function(ctx) return "got " .. ctx.trigger.payload.from .. " " .. ctx.trigger.payload.n end }
LUA
# an event emitted while no daemon runs waits in the queue
expect_rc 0 "$LUAGENT" --workspace "$WS" emit deploy.early '{"version":"0.9"}' && out_has "no daemon is running" && pass "emit without a daemon queues"
start_daemon
wait_for 5 '[ "$(q "SELECT result FROM runs WHERE name=\"deploy\"")" = "event:deploy.early:0.9" ]' && pass "queued event delivered at startup" || fail "early event: $(q "SELECT status, result, error FROM runs WHERE name='deploy'")"
wait_for 5 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"hello\" AND result=\"v1\"")" -ge 1 ]' || fail "hello v1 did not run"

# broken edit: syntax error on line 2
printf 'return { every = "1s",\n  run = function(ctx) return "v2" end end }\n' > "$WS/automations/hello.lua"
wait_for 5 'grep -q "automations/hello.lua:2:.*keeping the last good version" "$DLOG"' && pass "broken edit reported with file:line" || fail "no report: $(tail -3 "$DLOG")"
t=$(date +%s.%N)
sleep 2.2
[ "$(q "SELECT count(*) FROM runs WHERE name='hello' AND started > $t AND result='v1'")" -ge 2 ] && pass "the old version keeps running" || fail "hello after broken edit: $(q "SELECT status, result FROM runs WHERE name='hello' AND started > $t")"
expect_rc 0 "$LUAGENT" --workspace "$WS" automations list && out_has "error: automations/hello.lua:2:" && pass "list shows the load error"
# an invalid field is reported with its line too
printf 'return {\n  every = "1s",\n  mode = "sometimes",\n  run = function(ctx) return "v2" end }\n' > "$WS/automations/hello.lua"
wait_for 5 'grep -q "automations/hello.lua:3: mode .sometimes. is unknown" "$DLOG"' && pass "bad field reported with file:line" || fail "bad mode not reported: $(tail -3 "$DLOG")"
# a good edit takes over
printf 'return { every = "1s", run = function(ctx) return "v2" end }\n' > "$WS/automations/hello.lua"
wait_for 5 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"hello\" AND result=\"v2\"")" -ge 1 ]' && pass "fixed edit runs" || fail "v2 never ran"
expect_rc 0 "$LUAGENT" --workspace "$WS" automations list --json
python3 "$(dirname "$0")/lib/jsonl.py" < "$WS/.out" | grep '"name":"hello"' | grep -q '"error"' && fail "error still listed after the fix" || pass "error cleared after the fix"

# events from the CLI, with a payload, matched by a pattern
expect_rc 0 "$LUAGENT" --workspace "$WS" emit deploy.done '{"version":"1.2"}' && out_has "picks it up" && pass "emit with a daemon"
wait_for 5 '[ "$(q "SELECT result FROM runs WHERE name=\"deploy\" AND status=\"ok\" ORDER BY started DESC LIMIT 1")" = "event:deploy.done:1.2" ]' && pass "on automation fired by luagent emit with payload" || fail "deploy: $(q "SELECT status, result, error FROM runs WHERE name='deploy'")"
# events.emit from Lua
expect_rc 0 "$LUAGENT" --workspace "$WS" emit ping
wait_for 5 '[ "$(q "SELECT result FROM runs WHERE name=\"pong\"")" = "got ping 7" ]' && pass "events.emit from an automation fires another" || fail "pong: $(q "SELECT status, result, error FROM runs WHERE name IN ('ping','pong')")"
# events.emit from a plain `luagent run` script
printf 'print(events.emit("deploy.script", { version = "2.0" }))\n' > "$WS/emit.lua"
expect_rc 0 "$LUAGENT" --workspace "$WS" run emit.lua
wait_for 5 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"deploy\" AND result=\"event:deploy.script:2.0\"")" = 1 ]' && pass "events.emit from luagent run fires the daemon" || fail "script emit: $(q "SELECT status, result, error FROM runs WHERE name='deploy'")"
expect_rc 2 "$LUAGENT" --workspace "$WS" emit deploy.bad '{nope' && err_has "not valid JSON" && pass "bad payload refused"
expect_rc 2 "$LUAGENT" --workspace "$WS" emit 'bad name' && err_has "invalid" && pass "bad event name refused"

# a config change reaches the workers: a tiny instruction budget stops a busy run
cat > "$WS/automations/busy.lua" <<'LUA'
return { every = "1s", run = function(ctx) local x = 0 for i = 1, 200000 do x = x + i end return "sum " .. x end }
LUA
wait_for 5 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"busy\" AND status=\"ok\"")" -ge 1 ]' || fail "busy never ran ok"
printf 'return { limits = { instructions = 10000 } }\n' > "$WS/luagent.lua"
wait_for 6 'q "SELECT error FROM runs WHERE name=\"busy\" AND status=\"failed\"" | grep -q "instruction limit"' && pass "luagent.lua change reloaded into the workers" || fail "config reload: $(q "SELECT status, error FROM runs WHERE name='busy' ORDER BY started DESC LIMIT 2")"
rm "$WS/luagent.lua"
rm "$WS/automations/busy.lua"

# SIGHUP reloads
kill -HUP "$DPID"
wait_for 5 'grep -q "SIGHUP: reloading" "$DLOG"' && pass "SIGHUP reloads" || fail "no SIGHUP reload"
# deleting a file stops it
rm "$WS/automations/hello.lua"
wait_for 5 'grep -q "hello: removed" "$DLOG"' && pass "deleted automation removed" || fail "hello not removed"
sleep 0.3
c1=$(q "SELECT count(*) FROM runs WHERE name='hello'")
sleep 1.5
[ "$c1" = "$(q "SELECT count(*) FROM runs WHERE name='hello'")" ] && pass "removed automation no longer runs"
stop_daemon
finish
