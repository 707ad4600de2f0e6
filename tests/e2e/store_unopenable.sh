#!/bin/bash
# A state database that cannot be opened: every command that needs it says
# which file and what the system said (not only SQLite's "unable to open
# database file"), with one exit code, 1, whichever command it is. (Red
# team 9's F7: `runs list` and `ask` exited 2, the usage code, and no
# message said why the file could not be opened.)
. "$(dirname "$0")/lib/common.sh"
cat > "$WS/luagent.lua" <<'LUA'
return { providers = { { name = "demo", kind = "script", turns = { { turns = { { text = "hi" } } } } } } }
LUA
mkdir -p "$WS/.luagent/state.db" # a folder where the file should be
mkdir -p "$WS/automations"
echo 'return { every = "1h", run = function() end }' > "$WS/automations/tick.lua"
for cmd in "runs list" "runs show r1" "approvals list" "audit verify" "ask hello" "automations list"; do
  # shellcheck disable=SC2086
  expect_rc 1 "$LUAGENT" $cmd && err_has ".luagent/state.db" && err_has "(Is a directory)" &&
    pass "$cmd: exit 1, names the file and the reason"
done
finish
