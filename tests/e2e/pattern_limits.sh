#!/bin/bash
# Hostile patterns under `luagent run`: the bounded matcher charges its steps,
# so a catastrophic pattern ends with the instruction-limit (or deadline)
# error and exit 1 within seconds, even inside pcall, instead of hanging.
. "$(dirname "$0")/lib/common.sh"

elapsed_ok() { # START MAX_S WHAT
  local took=$(( $(date +%s) - $1 ))
  [ "$took" -le "$2" ] && return 0
  fail "$3 took ${took}s"
  return 1
}

cat > "$WS/star.lua" <<'LUA'
print("before")
return string.find(string.rep("a", 5000), string.rep("a*", 40) .. "b")
LUA
start=$(date +%s)
expect_rc 1 "$LUAGENT" run star.lua && out_has "before" && err_has "star.lua:2: instruction limit" \
  && elapsed_ok "$start" 20 "a*...b" && pass "catastrophic a* pattern stopped"

cat > "$WS/lazy.lua" <<'LUA'
local ok, err = pcall(string.match, string.rep("a", 5000), string.rep("a-", 40) .. "b")
print("pcall swallowed the limit: " .. tostring(err))
LUA
start=$(date +%s)
expect_rc 1 "$LUAGENT" run lazy.lua && err_has "lazy.lua:1: instruction limit" \
  && elapsed_ok "$start" 20 "a-...b in pcall" && pass "limit inside pcall re-raised"
if grep -q "swallowed" "$WS/.out"; then fail "script kept running after the limit"; fi

cat > "$WS/gsubfn.lua" <<'LUA'
local r = string.gsub(string.rep("x", 50), "x", function(c)
  pcall(string.gsub, string.rep("ab", 3000), string.rep("(.-)", 20) .. "c", "")
  return c
end)
print("survived: " .. #r)
LUA
expect_rc 1 "$LUAGENT" run gsubfn.lua && err_has "instruction limit" && pass "limit inside a gsub callback"
if grep -q "survived" "$WS/.out"; then fail "gsub callback swallowed the limit"; fi

cat > "$WS/gmatch.lua" <<'LUA'
for w in string.gmatch(string.rep("a", 4000), string.rep("a*", 30) .. "b") do print(w) end
LUA
expect_rc 1 "$LUAGENT" run gmatch.lua && err_has "gmatch.lua:1: instruction limit" && pass "gmatch stopped"

# With an enormous instruction budget the deadline still stops the matcher:
# sandbox__charge checks the clock too (before the watchdog's grace runs out).
mkdir -p "$WS/dl"
cat > "$WS/dl/luagent.lua" <<'LUA'
return { limits = { instructions = 1e15, deadline_s = 2 } }
LUA
cp "$WS/star.lua" "$WS/dl/"
start=$(date +%s)
(cd "$WS/dl" && "$LUAGENT" run star.lua) >"$WS/.out" 2>"$WS/.err"
rc=$?
[ "$rc" = 1 ] && err_has "deadline" && elapsed_ok "$start" 10 "deadline run" \
  && pass "deadline stops a hostile pattern" || fail "deadline run: rc=$rc $(head -c 300 "$WS/.err")"

# The host keeps working: the next run is fine.
echo 'print((string.gsub("hello world", "o", "0")))' > "$WS/ok.lua"
expect_rc 0 "$LUAGENT" run ok.lua && out_has "hell0 w0rld" && pass "next run works"

finish
