#!/bin/bash
# ctx.now, ctx.last_run.time and ctx.trigger.slot are whole seconds, so the
# documented os.date("!%Y-%m-%d", ctx.now) works: in a manual run (no
# last_run, then one), and in a daemon run of an `every` automation (slot).
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"

cat > "$WS/automations/stamp.lua" <<'LUA'
return {
  every = "1s",
  run = function(ctx)
    local out = { day = os.date("!%Y-%m-%d", ctx.now), now_type = math.type(ctx.now) }
    if ctx.last_run then
      out.last = os.date("!%H:%M:%S", ctx.last_run.time)
      out.last_type = math.type(ctx.last_run.time)
    end
    if ctx.trigger.slot then
      out.slot = os.date("!%H:%M:%S", ctx.trigger.slot)
      out.slot_type = math.type(ctx.trigger.slot)
    end
    return out
  end,
}
LUA
today=$(date -u +%Y-%m-%d)
expect_rc 0 "$LUAGENT" automations run stamp &&
  { out_has "\"day\":\"$today\"" && out_has '"now_type":"integer"' && pass "manual run: os.date(ctx.now)"; }
expect_rc 0 "$LUAGENT" automations run stamp &&
  { out_has '"last_type":"integer"' && pass "manual run: os.date(ctx.last_run.time)"; }
start_daemon
wait_for 10 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"stamp\" AND status=\"ok\" AND result LIKE \"%slot_type%\"")" -ge 1 ]' \
  || fail "no daemon run with a slot: $(tail -5 "$DLOG")"
res=$(q "SELECT result FROM runs WHERE name='stamp' AND result LIKE '%slot_type%' LIMIT 1")
case "$res" in *'"slot_type":"integer"'*'"day":"'"$today"'"'* | *'"day":"'"$today"'"'*'"slot_type":"integer"'*) pass "daemon run: os.date(ctx.trigger.slot)" ;;
  *) fail "daemon run result: $res" ;; esac
q "SELECT count(*) FROM runs WHERE name='stamp' AND status='failed'" | grep -qx 0 || fail "a stamp run failed: $(q "SELECT error FROM runs WHERE status='failed' LIMIT 1")"
stop_daemon
finish
