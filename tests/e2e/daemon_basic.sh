#!/bin/bash
# The daemon: an every="1s" automation runs about once a second and keeps
# ctx.state across runs; list/history; one daemon per workspace; SIGTERM -> 0.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"

cat > "$WS/automations/tick.lua" <<'LUA'
return {
  name = "tick",
  description = "counts its runs",
  every = "1s",
  run = function(ctx)
    ctx.state.n = (ctx.state.n or 0) + 1
    assert(ctx.run_id and ctx.now > 0 and ctx.trigger.kind == "every")
    return { n = ctx.state.n, last = ctx.last_run and ctx.last_run.status or "none" }
  end,
}
LUA
AT=$(date -u -d '+2 sec' +%Y-%m-%dT%H:%M:%SZ)
cat > "$WS/automations/once.lua" <<LUA
return { at = "$AT", run = function(ctx) return ctx.trigger.kind .. " " .. ctx.trigger.name end }
LUA
cat > "$WS/automations/flaky.lua" <<'LUA'
return { every = "1s", run = function(ctx)
  ctx.state.n = (ctx.state.n or 0) + 1
  ctx.state.junk = "written by a run that fails"
  if ctx.state.n % 2 == 0 then error("boom on even") end
  ctx.state.junk = nil
  return ctx.state.n
end }
LUA
cat > "$WS/automations/cronny.lua" <<'LUA'
return { cron = "*/5 * * * *", tz = "America/New_York", run = function(ctx) end }
LUA
start_daemon
wait_for 10 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"tick\" AND status=\"ok\"")" -ge 2 ]' \
  || fail "tick did not run twice: $(tail -5 "$DLOG")"
a=$(q "SELECT count(*) FROM runs WHERE name='tick' AND status='ok'")
sleep 3
b=$(q "SELECT count(*) FROM runs WHERE name='tick' AND status='ok'")
d=$((b - a))
[ "$d" -ge 2 ] && [ "$d" -le 4 ] && pass "every=1s: $d runs in 3 s" || fail "every=1s: $d runs in 3 s"
# state persisted: the n returned by the latest run equals the number of ok runs
row=$(q "SELECT (SELECT result FROM runs WHERE name='tick' AND status='ok' ORDER BY started DESC LIMIT 1), (SELECT count(*) FROM runs WHERE name='tick' AND status='ok'), (SELECT state FROM automations WHERE name='tick')")
last=$(echo "$row" | cut -f1); cnt=$(echo "$row" | cut -f2); st=$(echo "$row" | cut -f3)
[ "$st" = "{\"n\":$cnt}" ] && pass "automations.state = $st" || fail "automations.state=$st count=$cnt"
echo "$last" | grep -q "\"n\":$cnt[,}]" && pass "ctx.state persisted across $cnt runs" || fail "state: last=$last count=$cnt"
echo "$last" | grep -q '"last":"ok"' && pass "ctx.last_run seen" || fail "ctx.last_run: $last"
# journal slots: consecutive slots 1 s apart
q "SELECT json_extract(trigger,'$.slot') FROM runs WHERE name='tick' AND status='ok' ORDER BY started" > "$WS/slots"
python3 - "$WS/slots" <<'PY' && pass "slots are 1 s apart" || fail "slots not 1 s apart"
import sys
s = [float(x) for x in open(sys.argv[1]).read().split()]
d = [b - a for a, b in zip(s, s[1:])]
sys.exit(0 if d and all(abs(x - 1) < 0.01 for x in d) else 1)
PY

# at: fired once, at its time, and never again
[ "$(q "SELECT count(*) FROM runs WHERE name='once'")" = 1 ] && [ "$(q "SELECT result FROM runs WHERE name='once'")" = "at at $AT" ] && pass "at trigger fired once" || fail "at: $(q "SELECT status, result FROM runs WHERE name='once'")"
python3 -c "import sys,datetime; s=float(sys.argv[1]); t=datetime.datetime.strptime(sys.argv[2],'%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=datetime.timezone.utc).timestamp(); sys.exit(0 if 0 <= s - t < 0.5 else 1)" "$(q "SELECT started FROM runs WHERE name='once'")" "$AT" && pass "at trigger on time" || fail "at trigger late"
[ -z "$(q "SELECT next_fire FROM automations WHERE name='once'")" ] && pass "at: no next fire" || fail "at next_fire set"

# a failed run leaves ctx.state as the last successful run saved it
wait_for 6 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"flaky\" AND status=\"failed\"")" -ge 2 ]' || fail "flaky never failed twice"
row=$(q "SELECT (SELECT state FROM automations WHERE name='flaky'), (SELECT error FROM runs WHERE name='flaky' AND status='failed' LIMIT 1)")
[ "$(echo "$row" | cut -f1)" = '{"n":1}' ] && pass "failed runs do not touch ctx.state" || fail "flaky state: $row"
echo "$row" | cut -f2 | grep -q "automations/flaky.lua:4: boom on even" && pass "failed run error has file:line" || fail "flaky error: $row"

# cron: the persisted next fire is the next 5-minute boundary
nf=$(q "SELECT next_fire FROM automations WHERE name='cronny'")
python3 -c "import sys,time; n=float(sys.argv[1]); sys.exit(0 if n % 300 == 0 and time.time() < n <= time.time() + 300 else 1)" "$nf" && pass "cron next fire persisted ($nf)" || fail "cron next_fire $nf"

# a second daemon on the same workspace refuses
expect_rc 2 "$LUAGENT" --workspace "$WS" daemon && err_has "already running" && pass "second daemon refused"

expect_rc 0 "$LUAGENT" --workspace "$WS" automations list --json && out_has '"name":"tick"' &&
  out_has '"trigger":"every 1s"' && out_has '"last_status":"ok"' && pass "automations list --json"
expect_rc 0 "$LUAGENT" --workspace "$WS" automations list && out_has "tick" && out_has "every 1s" && pass "automations list"
expect_rc 0 "$LUAGENT" --workspace "$WS" automations history tick -n 2 --json
[ "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$WS/.out")" = 2 ] && out_has '"run_id":"' && out_has '"status":"ok"' && out_has '"started":' &&
  out_has '"finished":' && out_has '"result":"{' && out_has '"error":null' && pass "history --json" || fail "history: $(cat "$WS/.out")"

# manual run through the same path, with --arg
cat > "$WS/automations/greet.lua" <<'LUA'
return { name = "greet", run = function(ctx)
  tools.call("echo", { text = "one" }); tools.call("echo", { text = "two" })
  return "hello " .. ctx.args.who .. " via " .. ctx.trigger.kind
end }
LUA
expect_rc 0 "$LUAGENT" --workspace "$WS" automations run greet --arg who=ops && out_has "hello ops via manual" && pass "automations run --arg"
expect_rc 0 "$LUAGENT" --workspace "$WS" automations history greet --json && out_has '"tool_calls":2' && out_has '"kind":"manual"' && pass "journal counts tool calls"
# a skill's tool, called from a run in a worker
mkdir -p "$WS/skills/hello"
cat > "$WS/skills/hello/skill.lua" <<'LUA'
return { name = "hello", description = "Greets people politely", keywords = { "greet" },
  tools = { hi = { description = "Say hi", impact = "read",
    params = { type = "object", required = { "who" }, properties = { who = { type = "string" } } },
    run = function(args) return { text = "hi " .. args.who } end } } }
LUA
cat > "$WS/automations/useskill.lua" <<'LUA'
return { run = function(ctx) return tools.call("hello.hi", { who = "worker" }).text end }
LUA
expect_rc 0 "$LUAGENT" --workspace "$WS" automations run useskill && out_has "hi worker" && pass "skill tool callable from an automation"
expect_rc 2 "$LUAGENT" --workspace "$WS" automations run nosuch && err_has "no automation 'nosuch'" && pass "unknown automation named"
wait_for 5 'grep -q "greet: loaded" "$DLOG"' && pass "new file picked up by inotify" || fail "greet not loaded: $(tail -3 "$DLOG")"

# disable / enable
expect_rc 0 "$LUAGENT" --workspace "$WS" automations disable tick
wait_for 5 'grep -q "tick: disabled" "$DLOG"' || fail "disable not seen"
sleep 0.5
c1=$(q "SELECT count(*) FROM runs WHERE name='tick'")
sleep 2
c2=$(q "SELECT count(*) FROM runs WHERE name='tick'")
[ "$c1" = "$c2" ] && pass "disabled automation does not run" || fail "disabled tick ran: $c1 -> $c2"
expect_rc 0 "$LUAGENT" --workspace "$WS" automations enable tick
wait_for 5 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"tick\"")" -gt "$c2" ]' && pass "enabled again: runs resume" || fail "tick did not resume"

stop_daemon
grep -q "stopped" "$DLOG" && pass "clean stop logged"
[ "$(q "SELECT count(*) FROM runs WHERE status='running'")" = 0 ] && pass "no run left running" || fail "runs left running"

# journal retention: --keep N keeps the newest N rows per automation
before=$(q "SELECT count(*) FROM runs WHERE name='tick'")
start_daemon --keep 2
wait_for 5 'grep -q "journal: pruned" "$DLOG"' && pass "journal pruned at startup" || fail "no prune: $(tail -3 "$DLOG")"
c=$(q "SELECT count(*) FROM runs WHERE name='tick'")
[ "$before" -gt 3 ] && [ "$c" -le 3 ] && pass "tick journal $before -> $c rows" || fail "retention: $before -> $c"
stop_daemon
finish
