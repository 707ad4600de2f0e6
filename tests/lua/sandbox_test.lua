-- Escape and abuse attempts that must end in a clean, catchable error while
-- the script keeps running. Limits that end the run are in
-- tests/unit/test_sandbox.c and tests/e2e/run_limits.sh.
local failures = 0
local function expect_error(name, fn, pattern)
  local ok, err = pcall(fn)
  local msg = type(err) == "table" and tostring(err.message) or tostring(err)
  if ok then
    print("FAIL " .. name .. ": no error")
    failures = failures + 1
  elseif pattern and not string.find(msg, pattern, 1, true) then
    print("FAIL " .. name .. ": error '" .. msg .. "' does not mention '" .. pattern .. "'")
    failures = failures + 1
  end
end
-- expect(cond, name): every call below passes the condition first (this
-- used to be declared (name, cond), so no expect() could ever fail).
local function expect(cond, name)
  if not cond then
    print("FAIL " .. name)
    failures = failures + 1
  end
end

-- Removed and guarded globals
expect_error("io", function() return io.open end, "undefined global 'io'")
expect_error("os.execute", function() return os.execute("id") end, "attempt to call a nil value")
expect_error("debug", function() return debug.getinfo end, "undefined global 'debug'")
expect_error("package", function() return package.loaded end, "undefined global 'package'")
expect_error("require", function() return require("os") end, "not available")
expect_error("dofile", function() return dofile("/etc/passwd") end, "undefined global 'dofile'")
expect_error("loadfile", function() return loadfile("/etc/passwd") end, "undefined global 'loadfile'")
expect_error("collectgarbage collect", function() collectgarbage("collect") end, "not allowed")
expect(type(collectgarbage("count")) == "number", "collectgarbage count allowed")
expect(string.dump == nil, "string.dump removed")
expect(os.getenv == nil and os.remove == nil and os.exit == nil, "os reduced to time/clock/date")

-- Bytecode is refused, text chunks get their own environment
local f, err = load("\27Lua...")
expect(f == nil and err:find("binary"), "binary chunk refused")
expect_error("load mode b", function() load("return 1", "x", "b") end, "only text")
expect_error("load reader fn", function() load(function() return nil end) end, "only string chunks")
local chunk = load("x_from_chunk = 5; return x_from_chunk")
expect(chunk() == 5, "load runs text")
expect(rawget(_ENV, "x_from_chunk") == nil, "loaded chunk has its own _ENV")
local envd = load("return y", "c", "t", { y = 7 })
expect(envd() == 7, "load with explicit env")

-- Shared tables are read-only, existing keys included
expect_error("string write", function() string.upper = nil end, "read-only")
expect_error("string new key", function() string.evil = print end, "read-only")
expect_error("rawset string", function() rawset(string, "upper", nil) end, "read-only")
expect_error("setmetatable string", function() setmetatable(string, {}) end, "read-only")
expect_error("tools write", function() tools.call = print end, "read-only")
expect_error("json write", function() json.encode = nil end, "read-only")
expect_error("math write", function() math.pi = 3 end, "read-only")
local seen = 0
for k in pairs(string) do seen = seen + 1 end
expect(seen > 10, "pairs over a read-only library works")
local it, state = pairs(string)
expect_error("pairs state is not the real table", function() rawset(state, "upper", nil) end, "read-only")
expect(getmetatable("") == "string", "string metatable hidden")
expect(("abc"):upper() == "ABC", "string methods still work")

-- Metatable policy
expect_error("__gc", function() setmetatable({}, { __gc = function() end }) end, "__gc")
expect_error("__mode", function() setmetatable({}, { __mode = "k" }) end, "__mode")
expect_error("__close", function() setmetatable({}, { __close = function() end }) end, "__close")
expect_error("__call table", function() setmetatable({}, { __call = {} }) end, "__call")
expect_error("rawset __gc", function() local mt = {}; rawset(mt, "__gc", print) end, "not allowed")
expect_error("tbc without __close", function()
  local ok = load("local x <close> = {} return 1")
  return ok()
end, "closable")
expect_error("__mode added later", function() local mt = {}; setmetatable({}, mt); mt.__mode = "k" end, "__mode")
expect_error("__gc added later", function() local mt = {}; setmetatable({}, mt); mt.__gc = print end, "__gc")
expect_error("__call table later", function() local mt = {}; setmetatable({}, mt); mt.__call = {} end, "__call")
expect_error("__mode via parent mt", function()
  local M = {}; local mt = setmetatable({}, M); setmetatable({}, mt); mt.__mode = "k" end, "__mode")
local Base = {}; Base.__index = Base
function Base.new(x) return setmetatable({ x = x }, Base) end
function Base:get() return self.x end
local Derived = setmetatable({}, { __index = Base }); Derived.__index = Derived
function Derived.new(x) return setmetatable(Base.new(x), Derived) end
function Derived:twice() return self:get() * 2 end
expect(Derived.new(21):twice() == 42, "class inheritance still works")
local obj = setmetatable({}, { __index = { hi = function() return "hi" end } })
expect(obj.hi() == "hi", "ordinary metatables work")

-- No addresses leak
expect(tostring({}) == "table", "tostring table hides address")
expect(tostring(print) == "function", "tostring function hides address")
expect(tostring(coroutine.create(function() end)) == "thread", "tostring thread")
expect(string.format("%s", {}) == "table", "format %s hides address")
expect_error("format %p", function() return string.format("%p", {}) end, "%p")
expect(tostring(json.null) == "null", "json.null prints as null")

-- Error objects whose __tostring raises don't crash the host
local bad = setmetatable({}, { __tostring = function() error("nope") end })
expect_error("__tostring raising", function() error(bad) end)
local ok, e = pcall(error, bad)
expect(not ok and e == bad, "error object passes through pcall")

-- xpcall with a handler still works normally
local ok2, msg2 = xpcall(function() error("boom") end, function(m) return "handled: " .. m end)
expect(not ok2 and msg2:find("handled:", 1, true), "xpcall handler runs")

-- Coroutines work and inherit the sandbox
local co = coroutine.wrap(function(a) local b = coroutine.yield(a + 1); return b * 2 end)
expect(co(1) == 2 and co(5) == 10, "coroutines")

-- json: explicit null, arrays vs objects, errors name the path
expect(json.encode({}) == "{}", "empty table is an object")
expect(json.encode(json.array()) == "[]", "json.array() is an empty array")
expect(json.encode(json.decode("[]")) == "[]", "decoded empty array round-trips")
expect(json.encode({ 1, 2, 3 }) == "[1,2,3]", "array")
expect(json.decode('{"a":null}').a == json.null, "null decodes to json.null")
expect(json.encode({ a = json.null }) == '{"a":null}', "json.null encodes")
expect_error("mixed keys", function() json.encode({ 1, a = 2 }) end, "mixes")
expect_error("nan", function() json.encode({ x = 0 / 0 }) end, "x: NaN")
expect_error("bad json", function() json.decode("{oops") end, "invalid JSON at byte")
local deep = "[" ; for i = 1, 300 do deep = deep .. "[" end
expect_error("deep json", function() json.decode(deep .. string.rep("]", 301)) end)
local cyc = {}; cyc.self = cyc
expect_error("cycle", function() json.encode(cyc) end, "deeply")

-- tools API
expect(tools.exists("echo") and not tools.exists("nope.nope"), "tools.exists")
expect(#tools.list() >= 7, "tools.list")
local r = tools.call("echo", { a = 1, b = { "x" } })
expect(r.a == 1 and r.b[1] == "x", "echo round trip")
local okc, ce = pcall(tools.call, "no.such", {})
expect(not okc and ce.code == "unknown_tool" and ce.tool == "no.such", "unknown tool is structured")
okc, ce = pcall(tools.call, "fs.read", { path = 42 })
expect(not okc and ce.code == "invalid_args" and ce.message:find("args.path: expected string", 1, true), "schema error names path")
okc, ce = pcall(tools.call, "fs.read", {})
expect(not okc and ce.message:find("missing required field 'path'", 1, true), "required field")
okc, ce = pcall(tools.call, "fs.read", { path = "a", extra = 1 })
expect(not okc and ce.message:find("unexpected field 'extra'", 1, true), "additionalProperties")
okc, ce = pcall(tools.call, "fs.read", { path = "/etc/passwd" })
expect(not okc and ce.code == "invalid_path", "absolute path refused")
okc, ce = pcall(tools.call, "http.request", { url = "http://example.invalid/" })
expect(not okc and ce.code == "host_not_allowed", "http allow-list")
okc, ce = pcall(tools.call, "http.request", { url = "file:///etc/passwd" })
expect(not okc and (ce.message:find("scheme", 1, true) or ce.message:find("not a valid URL", 1, true)),
  "file scheme refused")

-- The Lua <-> JSON bridge keeps a zero byte (never cuts a key or a string),
-- so a key like "path\0x" can never alias "path".
local nz = tools.call("echo", { ["a\0b"] = 1, path = "secrets/k", ["path\0x"] = "ok", s = "x\0y" })
expect(nz["a\0b"] == 1 and nz.path == "secrets/k" and nz["path\0x"] == "ok", "NUL in keys round-trips")
expect(nz.s == "x\0y" and #nz.s == 3, "NUL in strings round-trips")
local nkeys = 0
for k in pairs(nz) do nkeys = nkeys + 1 end
expect(nkeys == 4, "no key merged or cut")
expect(tools.call("echo", { n = math.maxinteger }).n == math.maxinteger, "big integer exact through a tool")
okc, ce = pcall(tools.call, "echo", { p = "bad\255" })
expect(not okc and ce.code == "invalid_args" and ce.message:find("p: string is not valid UTF-8 at byte 4", 1, true),
  "invalid UTF-8 refused naming the path")
-- json.encode: a zero byte is never cut, and it is written as \u0000.
local enc = json.encode({ ["a\0b"] = "x\0y" })
expect(enc == '{"a\\u0000b":"x\\u0000y"}', "json.encode writes the zero byte as \\u0000: " .. enc)
expect(json.encode({ n = math.maxinteger }) == '{"n":9223372036854775807}', "big integers are exact")
expect(json.decode('{"n":9223372036854775807}').n == math.maxinteger, "and decode exactly")
expect(json.decode(enc)["a\0b"] == "x\0y", "json round trip keeps the zero byte")

if failures > 0 then error(failures .. " sandbox checks failed") end
print("sandbox_test: all checks passed")
