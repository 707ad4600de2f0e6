#!/bin/bash
# Sandbox escapes that used to crash or outlive the run (issue 10 items 2, 3):
# the metatable-guard strip that reached 5.4.4's coroutine.close C-stack
# overflow (SIGSEGV), and tools that kept running in new coroutines after
# the instruction limit.
. "$(dirname "$0")/lib/common.sh"

# The proof from the issue: strip the guard with setmetatable(mt, nil), add
# __close, then nest coroutine.close 20000 deep. Old main: SIGSEGV (139).
cat > "$WS/close_bomb.lua" <<'LUA'
local mt = {}
local N = 20000
local objs = {}
for i = 1, N do objs[i] = setmetatable({}, mt) end  -- allowed: no __close yet
setmetatable(mt, nil)                                -- strip the guard
mt.__close = function(o) if o.prev then coroutine.close(o.prev) end end
local coro = false
for i = 1, N do
  local previous = coro
  local o = objs[i]; o.prev = previous
  coro = coroutine.create(function()
    local cc <close> = o
    coroutine.yield()
  end)
  coroutine.resume(coro)
end
print(coroutine.close(coro))
LUA
expect_rc 1 "$LUAGENT" run close_bomb.lua && err_has "close_bomb.lua:6: metatable field '__close' is not allowed" \
  && pass "guard strip + nested coroutine.close: clean error, no crash"

# The same attack caught by pcall: the script goes on, and the nesting
# attempts it can still make end in catchable errors.
cat > "$WS/close_pcall.lua" <<'LUA'
local mt = {}
setmetatable({}, mt)
setmetatable(mt, nil)
local ok, err = pcall(function() mt.__close = function() end end)
print("assign:", ok, err)
local function nest(n) return coroutine.wrap(function() return nest(n + 1) end)() end
print("nest:", pcall(nest, 0))
print("alive")
LUA
expect_rc 0 "$LUAGENT" run close_pcall.lua && out_has "assign:	false" && out_has "nested too deeply" \
  && out_has "alive" && pass "nesting bound is catchable"

# Tools after the kill: a kill caught by coroutine.resume used to leave the
# run going, and new coroutines got a fresh hook count (20,533 fs.write calls).
cat > "$WS/luagent.lua" <<'LUA'
return { limits = { instructions = 2e6 } }
LUA
cat > "$WS/after_kill.lua" <<'LUA'
local function write() tools.call("fs.write", { path = "after.txt", content = "x", append = true }) end
local co = coroutine.create(function() while true do end end)
coroutine.resume(co)                -- killed in co; resume returns false
while true do                       -- each generation starts a fresh hook count
  coroutine.resume(coroutine.create(function()
    while true do coroutine.resume(coroutine.create(write)) end
  end))
end
LUA
expect_rc 1 "$LUAGENT" run after_kill.lua && err_has "[limit_instructions]" && pass "kill ends the run"
if [ -e "$WS/data/after.txt" ]; then fail "fs.write ran after the kill: $(wc -c < "$WS/data/after.txt") bytes"; else pass "no tool ran after the kill"; fi
# Red team: setmetatable(t, t) once let a table replace its own guard; with
# __close back, closes nested through pcall overflowed the C stack (SIGSEGV).
printf 'return {}\n' > "$WS/luagent.lua"
cat > "$WS/self_mt.lua" <<'LUA'
local N, C = 99, 180
local function nest(n, f)
  if n == 0 then return f() end
  local ok, e = pcall(nest, n - 1, f)
  if not ok then error(e, 0) end
end
local closefn = function(o)
  local p = rawget(o, "prev")
  if p then nest(C, function() coroutine.close(p) end) end
end
local prev = false
for i = 1, N do
  local previous = prev
  prev = coroutine.create(function()
    local o = { prev = previous }
    setmetatable(o, o)
    o.__close = closefn
    local cc <close> = o
    coroutine.yield()
  end)
  assert(coroutine.resume(prev))
end
print(coroutine.close(prev))
LUA
expect_rc 1 "$LUAGENT" run self_mt.lua && err_has "metatable field '__close' is not allowed" && pass "setmetatable(t, t) keeps the guard: no crash"
# Red team: json.decode built its tree outside the memory cap (700 MB RSS
# for 16 MiB of "0," against memory_mb = 64). The tree is bounded by what
# the script has left; past it, the memory limit.
cat > "$WS/jdecode.lua" <<'LUA'
local s = "[" .. string.rep("0,", 8 * 1024 * 1024 - 4) .. "0]"
local ok, e = pcall(json.decode, s)
print(ok)
LUA
peak=$(cd "$WS" && python3 - "$LUAGENT" "$WS/.err" <<'PY'
import resource, subprocess, sys
r = subprocess.run([sys.argv[1], "run", "jdecode.lua"], capture_output=True, text=True)
open(sys.argv[2], "w").write(r.stderr)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
PY
)
set -- $peak
[ "$1" = 1 ] && err_has "memory limit of 67108864 bytes exceeded (json.decode) [limit_memory]" && pass "json.decode past the cap is the memory limit"
[ "${2:-9999}" -lt 250 ] && pass "peak RSS ${2} MB (cap 64 MB)" || fail "json.decode peak RSS ${2:-?} MB"
finish
