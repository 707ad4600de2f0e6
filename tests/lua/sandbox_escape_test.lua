-- Attacks on the metatable guard, the coroutine bounds and the stock-error
-- promises (issue 10 items 2, 11, 14). Every attack must end in a clean,
-- catchable error (or be harmless) while this script keeps running.
local failures = 0
local function msg_of(err) return type(err) == "table" and tostring(err.message) or tostring(err) end
local function expect_error(name, fn, pattern)
  local ok, err = pcall(fn)
  local msg = msg_of(err)
  if ok then
    print("FAIL " .. name .. ": no error")
    failures = failures + 1
  elseif pattern and not string.find(msg, pattern, 1, true) then
    print("FAIL " .. name .. ": error '" .. msg .. "' does not mention '" .. pattern .. "'")
    failures = failures + 1
  end
end
local function expect(name, cond, extra)
  if not cond then
    print("FAIL " .. name .. (extra and (": " .. tostring(extra)) or ""))
    failures = failures + 1
  end
end
-- A metatable is "clean" when none of the forbidden keys got into it.
local function clean(mt) return rawget(mt, "__mode") == nil and rawget(mt, "__close") == nil and rawget(mt, "__gc") == nil end

-- 1. The guard cannot be removed: setmetatable(mt, nil) keeps it.
do
  local mt = {}
  local obj = setmetatable({}, mt)
  expect("guard is invisible", getmetatable(mt) == nil, getmetatable(mt))
  setmetatable(mt, nil)
  expect_error("__mode after setmetatable(mt, nil)", function() mt.__mode = "k" end, "__mode")
  expect_error("__close after setmetatable(mt, nil)", function() mt.__close = print end, "__close")
  expect_error("__gc after setmetatable(mt, nil)", function() mt.__gc = print end, "__gc")
  expect("mt stays clean", clean(mt))
  -- setmetatable(getmetatable(x), nil): the script sees its own mt only.
  setmetatable(getmetatable(obj), nil)
  expect_error("__close after setmetatable(getmetatable(obj), nil)", function() getmetatable(obj).__close = print end, "__close")
end

-- 2. Nor replaced: the script's own metatable on a metatable gets wrapped.
do
  local mt = {}
  setmetatable({}, mt)
  local M = {}
  setmetatable(mt, M)
  expect("getmetatable(mt) is the script's M", getmetatable(mt) == M)
  expect_error("__mode through replaced guard", function() mt.__mode = "v" end, "__mode")
  -- A __newindex that writes raw is refused by rawset.
  setmetatable(mt, { __newindex = function(t, k, v) rawset(t, k, v) end })
  expect_error("__close via __newindex+rawset", function() mt.__close = print end, "not allowed")
  -- A __newindex table receives the write instead of mt: mt stays clean.
  local sink = {}
  setmetatable(mt, { __newindex = sink })
  mt.__mode = "k"
  expect("__newindex table takes the write", rawget(sink, "__mode") == "k" and clean(mt))
  -- The script's M is only data: forbidden keys in M do nothing to mt.
  local M2 = {}
  setmetatable(mt, M2)
  M2.__mode = "k" -- M2 is not installed anywhere: data only
  expect("mt clean after M games", clean(mt))
  expect_error("M2 with __mode cannot become a metatable", function() setmetatable({}, M2) end, "__mode")
  expect_error("nor be given to mt again", function() setmetatable(mt, M2) end, "__mode")
  -- __newindex removed from M at runtime: the guard still holds.
  local M3 = { __newindex = function(t, k, v) end }
  setmetatable(mt, M3)
  M3.__newindex = nil
  expect_error("__mode after M3.__newindex = nil", function() mt.__mode = "k" end, "__mode")
  expect("mt clean after M3", clean(mt))
end

-- 3. Order of events: a table with its own metatable that later becomes a metatable.
do
  local M = {}
  local mt = setmetatable({}, M)      -- mt's metatable is M (plain)
  M.__index = function(t, k) return "via M" end
  setmetatable({}, mt)                -- mt becomes a metatable: wrapped
  expect("inherited lookup still works", mt.anything == "via M")
  M.__newindex = nil
  expect_error("__mode on mt (had a plain M)", function() mt.__mode = "k" end, "__mode")
  M.__index = nil
  expect("M.__index removed: plain miss", mt.anything == nil)
  expect("getmetatable(mt) == M", getmetatable(mt) == M)
end

-- 4. __metatable protection as stock, and still no way to the guard.
do
  local mt = { __metatable = "locked" }
  local obj = setmetatable({}, mt)
  expect("__metatable honoured", getmetatable(obj) == "locked")
  expect_error("protected metatable", function() setmetatable(obj, {}) end, "protected")
  local M = { __metatable = "also locked" }
  local cls = {}
  setmetatable(cls, M)
  setmetatable({}, cls)
  expect("wrapped __metatable honoured", getmetatable(cls) == "also locked")
  expect_error("wrapped protected metatable", function() setmetatable(cls, nil) end, "protected")
  expect_error("__mode on cls", function() cls.__mode = "k" end, "__mode")
end

-- 5. rawset, load with an env, string metatable, read-only proxies.
do
  local mt = {}
  setmetatable({}, mt)
  expect_error("rawset __mode", function() rawset(mt, "__mode", "k") end, "not allowed")
  expect_error("rawset __close", function() rawset(mt, "__close", print) end, "not allowed")
  local chunk = load("__mode = 'k'", "=(env)", "t", mt)
  expect_error("global assignment into a metatable env", chunk, "__mode")
  expect("mt clean after load", clean(mt))
  expect(getmetatable("") == "string", "string metatable hidden")
  expect_error("string metatable", function() setmetatable(getmetatable(""), nil) end, "table expected")
  expect_error("setmetatable on _ENV", function() setmetatable(_ENV, nil) end, "protected")
  expect_error("a library proxy as a metatable", function() setmetatable({}, string) end, "read-only")
  expect_error("table.move into a metatable's string keys is integer-only", function()
    table.move({ "k" }, 1, 1, 1, mt); if clean(mt) then error("still clean") end end, "still clean")
  expect("debug is absent", not pcall(function() return debug end))
end

-- 6. Existing idioms keep working.
do
  local Base = {}; Base.__index = Base
  function Base.new(x) return setmetatable({ x = x }, Base) end
  function Base:get() return self.x end
  local Derived = setmetatable({}, { __index = Base }); Derived.__index = Derived
  function Derived.new(x) return setmetatable(Base.new(x), Derived) end
  function Derived:twice() return self:get() * 2 end
  expect("inheritance", Derived.new(21):twice() == 42)
  -- class made callable after it became a metatable
  local C = {}; C.__index = C
  local o = setmetatable({}, C)
  setmetatable(C, { __call = function(cls, v) return setmetatable({ v = v }, cls) end, __index = Base })
  expect("callable class", C(5).v == 5 and C.new == Base.new)
  local V = setmetatable({}, { __add = function(a, b) return 7 end, __tostring = function() return "V!" end })
  setmetatable({}, V)
  expect("copied __add", V + 1 == 7)
  expect("copied __tostring", tostring(V) == "V!")
  expect("pairs over a guarded metatable", (function() local n = 0 for _ in pairs(C) do n = n + 1 end return n end)() >= 1)
  local mt = { __index = function(t, k) return k .. "!" end }
  expect("plain metatable", setmetatable({}, mt).hi == "hi!")
  mt.__index = nil
  mt.__len = function() return 3 end
  expect("metatable fields changed later", #setmetatable({}, mt) == 3)
end

-- 7. __index chains through guards: deep recursion is a clean error.
do
  local a, b = {}, {}
  setmetatable(a, { __index = b })
  setmetatable(b, { __index = a })
  setmetatable({}, a); setmetatable({}, b)
  local ok, err = pcall(function() return a.missing end)
  expect("cyclic __index chain is a catchable error", not ok, err)
end

-- 8. Coroutine nesting is bounded with a clear, catchable error.
do
  local function nest_wrap(n) return coroutine.wrap(function() return nest_wrap(n + 1) end)() end
  expect_error("wrap nesting", function() nest_wrap(0) end, "nested too deeply")
  local depth = 0
  local function nest_resume()
    depth = depth + 1
    local co = coroutine.create(nest_resume)
    local ok, err = coroutine.resume(co)
    if not ok then error(err, 0) end
  end
  expect_error("resume nesting", nest_resume, "nested too deeply")
  expect("resume nesting stopped near 100", depth <= 101, depth)
  -- close of a coroutine that closes coroutines (no __close possible, but
  -- close itself counts and behaves as stock)
  local co = coroutine.create(function() coroutine.yield() end)
  coroutine.resume(co)
  expect("close suspended", coroutine.close(co) == true and coroutine.status(co) == "dead")
  expect_error("close running", function() coroutine.close(coroutine.running()) end, "cannot close a running coroutine")
  local bad = coroutine.create(function() error("boom") end)
  local ok, e = coroutine.resume(bad)
  expect("resume error", not ok and tostring(e):find("boom"))
  local okc, ec = coroutine.close(bad)
  expect("close dead with error", okc == false and tostring(ec):find("boom"))
  expect("resume dead", select(2, coroutine.resume(bad)) == "cannot resume dead coroutine")
  local gen = coroutine.wrap(function() for i = 1, 3 do coroutine.yield(i) end end)
  expect("wrap generator", gen() == 1 and gen() == 2 and gen() == 3)
  expect_error("wrap error carries position", coroutine.wrap(function() error("x") end), "x")
  expect("isyieldable/running", coroutine.isyieldable() == false and select(2, coroutine.running()) == true)
  -- pcall inside coroutines and yields across pcall
  local co2 = coroutine.wrap(function() local ok2, v = pcall(coroutine.yield, 1) return v end)
  expect("yield across pcall", co2() == 1 and co2(9) == 9)
  local tbc_ok = pcall(load("local x <close> = setmetatable({}, {}) return 1"))
  expect("tbc without __close refused", not tbc_ok)
end

-- 9. Item 14: stock errors where stock raises them, catchable.
do
  local ok, err = pcall(string.rep, "aa", 1 << 30)
  expect("string.rep too large is catchable", not ok and tostring(err):find("resulting string too large", 1, true), err)
  ok, err = pcall(table.move, {}, 0, math.maxinteger, 1)
  expect("table.move too many is catchable", not ok and tostring(err):find("too many elements to move", 1, true), err)
  expect("table.move error names move", tostring(err):find("'move'", 1, true) or tostring(err):find("'table.move'", 1, true), err)
  ok, err = pcall(table.move, {}, 1, 2, math.maxinteger)
  expect("table.move wrap around", not ok and tostring(err):find("destination wrap around", 1, true), err)
  ok, err = pcall(string.format, "%q", {})
  expect("format %q of a table raises", not ok and tostring(err):find("value has no literal form", 1, true), err)
  ok, err = pcall(function() return string.format("%d", "x") end)
  expect("format names itself", not ok and tostring(err):find("bad argument #2 to 'format'", 1, true), err)
  expect("format error has file:line", tostring(err):find("sandbox_escape_test.lua:", 1, true), err)
  ok, err = pcall(function() return ("%d"):format("x") end)
  expect("format as method counts self", not ok and tostring(err):find("bad argument #1 to 'format'", 1, true), err)
  ok, err = pcall(function() return string.format("%y", 1) end)
  expect("invalid conversion has position", not ok and tostring(err):find("sandbox_escape_test.lua:", 1, true)
    and tostring(err):find("invalid conversion", 1, true), err)
  ok, err = pcall(function() return table.move(nil, 1, 2, 3) end)
  expect("table.move names itself", not ok and tostring(err):find("bad argument #1 to 'move'", 1, true), err)
  expect("format %s of a table hides the address", string.format("%s|%5.1f|%q", {}, 1.25, "a\n") == 'table|  1.2|"a\\\n"')
  expect("string.rep still works", string.rep("ab", 3, ",") == "ab,ab,ab")
  expect("table.move still works", table.concat(table.move({ 1, 2, 3 }, 1, 3, 2), ",") == "1,1,2,3")
end

-- 10. Item 11: dofile and loadfile are absent like other removed globals.
expect_error("dofile", function() return dofile end, "undefined global 'dofile'")
expect_error("loadfile", function() return loadfile end, "undefined global 'loadfile'")

-- Red team: a table as its own metatable kept no guard (setmetatable(t, t)
-- replaced it), so __close came back and with it 5.4.4's C stack crash.
do
  local t = {}
  setmetatable(t, t)
  expect_error("self metatable: __close", function() t.__close = print end, "'__close' is not allowed")
  expect_error("self metatable: __mode", function() t.__mode = "k" end, "'__mode' is not allowed")
  expect_error("self metatable: rawset __gc", function() rawset(t, "__gc", print) end, "not allowed")
  t.__index = function(_, k) return "idx:" .. k end
  expect("self metatable still works", t.foo == "idx:foo", t.foo)
  expect("self metatable is visible as itself", getmetatable(t) == t)
  setmetatable(t, nil)
  expect_error("self metatable, then nil", function() t.__close = print end, "'__close' is not allowed")
  -- Two tables as each other's metatable: b keeps its guard (a wrapping
  -- one); a forbidden key written into a never takes effect anywhere.
  local a, b = {}, {}
  setmetatable(a, b); setmetatable(b, a)
  expect_error("b keeps its guard", function() b.__close = print end, "not allowed")
  pcall(function() a.__close = print end)
  expect_error("a's __close is never effective on a", function() local x <close> = a end, "non-closable")
  expect_error("nor on b", function() local x <close> = b end, "non-closable")
  expect_error("nor as a new metatable", function() setmetatable({}, a) end, "'__close' is not allowed")
end

if failures > 0 then error(failures .. " escape checks failed") end
print("sandbox_escape_test: all checks passed")
