#!/bin/bash
# A run stuck inside one C call that no Lua hook can interrupt (a rehash of
# integer keys that all collide, O(n^2) inside the VM) is ended by the
# watchdog at deadline + grace, with a clear error and exit code 1.
. "$(dirname "$0")/lib/common.sh"

printf 'return { limits = { deadline_s = 2 } }\n' > "$WS/luagent.lua"
cat > "$WS/collide.lua" <<'LUA'
local M = (1 << 20) - 1
local t = {}
for i = 1, 600000 do t[i * M] = true end
print("finished")
LUA
start=$(date +%s)
expect_rc 1 "$LUAGENT" run collide.lua && err_has "collide.lua: wall-clock deadline of 2s exceeded inside a call that could not be interrupted; stopped by the watchdog" && pass "watchdog ends a stuck C call"
took=$(( $(date +%s) - start ))
[ "$took" -le 10 ] && pass "stopped after ${took}s (deadline 2s + grace 2s)" || fail "took ${took}s"
if grep -q finished "$WS/.out"; then fail "the script finished"; fi
# The next run starts normally.
echo 'print("next run ok")' > "$WS/next.lua"
expect_rc 0 "$LUAGENT" run next.lua && out_has "next run ok" && pass "next run works"
finish
