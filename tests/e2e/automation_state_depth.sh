#!/bin/bash
# A ctx.state nested as deep as the next run's ctx can hold is saved and
# read back; one level deeper is refused at the save (the run fails, naming
# ctx.state, and the old state stays), so the automation keeps running.
# Before (review 15 F2) the deeper state was saved and every later run
# failed with "argument 1 too deeply nested" before its code ran, for good.
. "$(dirname "$0")/lib/common.sh"

mkdir -p "$WS/automations"
# ctx.state.d: a chain of N nested tables; ctx.state.runs counts the runs
deep() {
  cat > "$WS/automations/deep.lua" <<LUA
return { on = "go", run = function(ctx)
  ctx.state.runs = (ctx.state.runs or 0) + 1
  if ctx.state.d == nil then
    local t = {}; local c = t
    for i = 1, $1 do c.a = {}; c = c.a end
    ctx.state.d = t
  end
  return ctx.state.runs
end }
LUA
}
q() { python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); r=c.execute(sys.argv[2]).fetchone(); c.commit(); print(r[0] if r else '')" "$WS/.luagent/state.db" "$1"; }

# the deepest state that fits: saved, and every later run reads it
deep 98
for i in 1 2 3; do
  expect_rc 0 "$LUAGENT" automations run deep || fail "run $i of the 98-level state: $(cat "$WS/.err")"
done
out_has "3" && pass "a state 98 levels below ctx.state.d is saved and read back by the next runs"

# one level deeper: refused at the save, the old state (98 levels) stays
deep 99
q "UPDATE automations SET state = '{}' WHERE name = 'deep'" > /dev/null
expect_rc 1 "$LUAGENT" automations run deep
err_has "state" && err_has "nested" && pass "a state one level deeper is refused at its save, naming ctx.state" ||
  fail "the deeper state's run: $(cat "$WS/.err")"
[ "$(q "SELECT state FROM automations WHERE name = 'deep'")" = "{}" ] &&
  pass "the old state stays" || fail "state now: $(q "SELECT substr(state, 1, 80) FROM automations WHERE name = 'deep'")"
# and the automation still runs (its next run starts from the old state)
deep 3
expect_rc 0 "$LUAGENT" automations run deep && pass "the automation runs again" ||
  fail "the run after the refused save: $(cat "$WS/.err")"
finish
