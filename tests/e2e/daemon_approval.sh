#!/bin/bash
# An escalated tool call from an automation run waits in the approval queue
# (approver = "queue"); the run records the outcome: approved -> the call
# runs and the run is ok; denied -> the run fails with the denial.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
printf 'return { approver = "queue", approval_timeout_s = 30 }\n' > "$WS/luagent.lua"
cat > "$WS/automations/cleanup.lua" <<'LUA'
return { on = "cleanup", timeout = "30s", run = function(ctx)
  tools.call("fs.write", { path = "tmp/" .. ctx.trigger.payload.f, content = "x" })
  local ok, err = pcall(tools.call, "fs.delete", { path = "tmp/" .. ctx.trigger.payload.f })   -- impact high: escalates
  if not ok then error("delete refused: " .. tostring(err.message or err.code)) end
  return "deleted " .. ctx.trigger.payload.f
end }
LUA
start_daemon
pending_id() { "$LUAGENT" --workspace "$WS" approvals list --json 2>/dev/null | python3 -c '
import sys, json
try:
    arr = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
for j in arr:
    if j.get("status") == "pending":
        print(int(j["id"])); break' 2>/dev/null; }

expect_rc 0 "$LUAGENT" --workspace "$WS" emit cleanup '{"f":"a.txt"}'
wait_for 10 '[ -n "$(pending_id)" ]' && pass "escalated call from a run waits in the approval queue" || fail "no pending approval: $(tail -3 "$DLOG")"
[ "$(q "SELECT status FROM runs WHERE name='cleanup'")" = running ] && pass "the run waits (status running)"
expect_rc 0 "$LUAGENT" --workspace "$WS" approvals approve "$(pending_id)"
wait_for 10 '[ "$(q "SELECT status FROM runs WHERE name=\"cleanup\"")" = ok ]' && pass "approved: the run completes ok" || fail "approved run: $(q "SELECT status, error FROM runs WHERE name='cleanup'")"
[ ! -e "$WS/data/tmp/a.txt" ] && pass "the approved call ran" || fail "a.txt still there"

expect_rc 0 "$LUAGENT" --workspace "$WS" emit cleanup '{"f":"b.txt"}'
wait_for 10 '[ -n "$(pending_id)" ]' || fail "no second pending approval"
expect_rc 0 "$LUAGENT" --workspace "$WS" approvals deny "$(pending_id)" --reason "not today"
wait_for 10 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"cleanup\" AND status=\"failed\"")" = 1 ]' && pass "denied: the run fails" || fail "denied run: $(q "SELECT status, error FROM runs WHERE name='cleanup'")"
q "SELECT error FROM runs WHERE name='cleanup' AND status='failed'" | grep -q "delete refused" && pass "the denial is in the journal"
[ -e "$WS/data/tmp/b.txt" ] && pass "the denied call did not run" || fail "b.txt deleted"
stop_daemon
finish
