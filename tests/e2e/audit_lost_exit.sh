#!/bin/sh
# A command whose audit rows could not be written does not report success:
# with every audit insert failing (a trigger raising "database or disk is
# full", what a full disk gives), reads still run until the queue's bound,
# the rows left at the process's end are named on stderr, and the exit
# status is 1, not 0 (red team 8, F4).
. "$(dirname "$0")/lib/common.sh"
cd "$WS" || exit 1
printf 'for i = 1, 10 do tools.call("echo", { i = i }) end\nprint("ran")\n' >reads.lua
expect_rc 0 "$LUAGENT" run reads.lua && out_has ran # the database exists, the chain is fine
sqlite3 .luagent/state.db "CREATE TRIGGER full BEFORE INSERT ON audit
  BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END;" || fail "no trigger"
expect_rc 1 "$LUAGENT" run reads.lua && out_has ran &&
  err_has "10 rows could not be written" && err_has "10 audit row(s) were not written" &&
  pass "10 unwritten reads: named, and exit status 1"
sqlite3 .luagent/state.db "DROP TRIGGER full" || fail "trigger not dropped"
expect_rc 0 "$LUAGENT" run reads.lua && pass "exit status 0 once the rows can be written"
expect_rc 0 "$LUAGENT" audit verify && pass "the chain verifies"
finish
