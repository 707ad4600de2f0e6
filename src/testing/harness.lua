-- harness.lua - the Lua half of `luagent test` (compiled into the binary).
--
-- The runner (testrun.c) runs this chunk in each test file's sandbox; the
-- table it returns is the sandbox's module, and the runner calls into it:
--   load(source, chunkname)  runs the test file in its own environment
--                            (the test API on top of the usual globals) and
--                            returns the tests it declared, in order;
--   run(i)                   runs test i with its before_each/after_each
--                            and returns { ok, message, file, line };
--   model_turn(request)      the turn model.fn gives for a model call;
--   http(request)            the fake.http answer for an http.request;
--   approve(request)         the fake.approver verdict for an escalation.
-- What C keeps (calls, events, requests, the clock, automation runs) is
-- reached through the host library `__test`, installed by testapi.c.

-- Everything the harness uses is taken into locals here, before any test
-- code runs, and the test file never sees this chunk's environment: its
-- globals read through `base` (below), and its load() defaults to its own
-- environment. So a test that replaces pcall, error or expect (or
-- any global) changes its own world, never how the harness judges it.
local H = __test
local _ENV0 = _ENV
local pcall, error, type, tostring, tonumber, next, pairs, ipairs, select, setmetatable, rawget, rawset,
      rawequal, load =
      pcall, error, type, tostring, tonumber, next, pairs, ipairs, select, setmetatable, rawget, rawset,
      rawequal, load
local string, table, math, json, events = string, table, math, json, events
-- The test's globals read through base to the sandbox's (each miss still
-- raises "undefined global"); _G is its own, never this chunk's
-- environment. The runner removes `__test` once this chunk has run.
local base = setmetatable({ _G = false }, { __index = _ENV0, __metatable = false })
local _ENV = setmetatable({}, { __index = function(_, k) error("harness: global " .. tostring(k), 2) end,
                                __newindex = function(_, k) error("harness: global " .. tostring(k), 2) end,
                                __metatable = false })
local M = {}

local tests = {}          -- { name, fn, line, befores, afters }
local frames = { { name = nil, before = {}, after = {} } }
local per_test = {}       -- reset before every test: model_fn, http, approver

-- "tests/x_test.lua:12: " of a Lua function on the stack, or "": level 1
-- is the function calling where(), 2 its caller, and so on.
local function where(level)
  local ok, msg = pcall(error, "", level + 2)
  return (not ok and type(msg) == "string") and msg or ""
end

-- ------------------------------------------------------------ show/diff

-- Tables are walked raw (next, not pairs): a test's __pairs never runs
-- while the harness describes its values.
local function is_array(t)
  local n = 0
  for _ in next, t do n = n + 1 end
  for i = 1, n do if t[i] == nil then return false end end
  return true, n
end

local function sorted_keys(t)
  local keys = {}
  for k in next, t do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    if ta == "number" or ta == "string" then return a < b end
    return tostring(a) < tostring(b)
  end)
  return keys
end

local function show(v, depth, seen)
  depth = depth or 0
  local t = type(v)
  if rawequal(v, json.null) then return "json.null" end
  if t == "string" then return string.format("%q", v) end
  if t ~= "table" then return tostring(v) end
  seen = seen or {}
  if seen[v] then return "{...}" end
  if depth > 6 then return "{...}" end
  seen[v] = true
  local parts = {}
  local arr, n = is_array(v)
  if arr then
    for i = 1, n do parts[#parts + 1] = show(v[i], depth + 1, seen) end
  else
    for _, k in ipairs(sorted_keys(v)) do
      local ks = (type(k) == "string" and k:match("^[%a_][%w_]*$")) and k or "[" .. show(k, 0, seen) .. "]"
      parts[#parts + 1] = ks .. " = " .. show(v[k], depth + 1, seen)
    end
  end
  seen[v] = nil
  local s = "{" .. table.concat(parts, ", ") .. "}"
  if #s > 2000 then s = s:sub(1, 2000) .. "...}" end
  return s
end

local function path_join(path, k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return path .. "." .. k end
  return path .. "[" .. show(k) .. "]"
end

-- Deep equality; on a difference, the path of the first one and both sides.
local function deep_diff(a, b, path, seen)
  if a == b then return nil end
  if type(a) ~= "table" or type(b) ~= "table" or a == json.null or b == json.null then
    return path, a, b
  end
  seen = seen or {}
  if seen[a] == b then return nil end
  seen[a] = b
  for _, k in ipairs(sorted_keys(a)) do
    local p, x, y = deep_diff(a[k], b[k], path_join(path, k), seen)
    if p then return p, x, y end
  end
  for _, k in ipairs(sorted_keys(b)) do
    if a[k] == nil then return path_join(path, k), nil, b[k] end
  end
  return nil
end

-- Every difference (up to MAX_DIFFS) as { path, want, got }, in key order.
local MAX_DIFFS = 8
local function deep_diffs(a, b, path, out, seen)
  if #out >= MAX_DIFFS or a == b then return end
  if type(a) ~= "table" or type(b) ~= "table" or a == json.null or b == json.null then
    out[#out + 1] = { path = path, got = a, want = b }
    return
  end
  seen = seen or {}
  if seen[a] == b then return end
  seen[a] = b
  local keys, have = {}, {}
  for _, k in ipairs(sorted_keys(a)) do keys[#keys + 1] = k; have[k] = true end
  for _, k in ipairs(sorted_keys(b)) do if not have[k] then keys[#keys + 1] = k end end
  table.sort(keys, function(x, y)
    local tx, ty = type(x), type(y)
    if tx ~= ty then return tx < ty end
    if tx == "number" or tx == "string" then return x < y end
    return tostring(x) < tostring(y)
  end)
  for _, k in ipairs(keys) do deep_diffs(a[k], b[k], path_join(path, k), out, seen) end
end

-- ----------------------------------------------------------------- expect

-- A failed expectation: raised as a string that starts with the test's
-- file:line (the caller of the matcher), so every failure points there.
local function fail(msg)
  error(where(3) .. msg, 0)
end

local function err_text(e)
  if type(e) == "table" then
    local m = rawget(e, "message")
    return type(m) == "string" and m or show(e)
  end
  return tostring(e)
end

local function new_expect(actual, negated)
  local x = {}
  local function check(ok, msg, negmsg)
    if negated then ok, msg = not ok, negmsg end
    if not ok then error(where(3) .. msg, 0) end
  end
  function x.to_equal(expected)
    local diffs = {}
    deep_diffs(actual, expected, "", diffs)
    if negated then
      check(#diffs == 0, "", "expected a value different from " .. show(expected))
      return
    end
    if #diffs > 0 then
      local lines = {
        "expected values to be equal",
        "  expected: " .. show(expected),
        "    actual: " .. show(actual),
      }
      for _, d in ipairs(diffs) do
        if d.path ~= "" then
          lines[#lines + 1] = "  at " .. d.path .. ": expected " .. show(d.want) .. ", got " .. show(d.got)
        end
      end
      if #diffs >= MAX_DIFFS then lines[#lines + 1] = "  (more differences not shown)" end
      error(where(2) .. table.concat(lines, "\n"), 0)
    end
  end
  function x.to_be(expected)
    check(rawequal(actual, expected), "expected " .. show(expected) .. ", got " .. show(actual),
          "expected a value other than " .. show(expected))
  end
  function x.to_be_truthy()
    check(actual ~= nil and actual ~= false, "expected a truthy value, got " .. show(actual),
          "expected a falsy value, got " .. show(actual))
  end
  function x.to_be_nil()
    check(actual == nil, "expected nil, got " .. show(actual), "expected a value, got nil")
  end
  function x.to_match(pattern)
    if type(actual) ~= "string" then
      error(where(2) .. "to_match: expected a string, got " .. show(actual), 0)
    end
    check(actual:find(pattern) ~= nil, "expected " .. show(actual) .. " to match " .. show(pattern),
          "expected " .. show(actual) .. " not to match " .. show(pattern))
  end
  function x.to_contain(item)
    local found = false
    if type(actual) == "string" and type(item) == "string" then
      found = actual:find(item, 1, true) ~= nil
    elseif type(actual) == "table" then
      for _, v in pairs(actual) do
        if deep_diff(v, item, "") == nil then found = true break end
      end
    else
      error(where(2) .. "to_contain: expected a string or a table, got " .. show(actual), 0)
    end
    check(found, "expected " .. show(actual) .. " to contain " .. show(item),
          "expected " .. show(actual) .. " not to contain " .. show(item))
  end
  function x.to_be_near(expected, eps)
    eps = eps or 1e-9
    if type(actual) ~= "number" or type(expected) ~= "number" then
      error(where(2) .. "to_be_near: expected numbers, got " .. show(actual) .. " and " .. show(expected), 0)
    end
    check(math.abs(actual - expected) <= eps,
          string.format("expected %s to be within %s of %s (off by %s)", show(actual), show(eps),
                        show(expected), show(math.abs(actual - expected))),
          string.format("expected %s not to be within %s of %s", show(actual), show(eps), show(expected)))
  end
  -- expect(fn).to_raise([code_or_pattern]) -> the error raised
  function x.to_raise(want)
    if type(actual) ~= "function" then
      error(where(2) .. "to_raise: expected a function, got " .. show(actual), 0)
    end
    local ok, e = pcall(actual)
    if negated then
      if not ok then error(where(2) .. "expected no error, got: " .. err_text(e), 0) end
      return nil
    end
    if ok then error(where(2) .. "expected an error, but none was raised", 0) end
    if want ~= nil then
      local code = type(e) == "table" and rawget(e, "code") or nil
      local msg = err_text(e)
      local hit = code == want or msg:find(want, 1, true) ~= nil
      if not hit then
        local pok, r = pcall(string.find, msg, want)
        hit = pok and r ~= nil
      end
      if not hit then
        error(where(2) .. "expected an error matching " .. show(want) .. ", got" ..
              (code and (" [" .. tostring(code) .. "]") or "") .. ": " .. msg, 0)
      end
    end
    return e
  end
  if not negated then x.never = new_expect(actual, true) end
  return setmetatable(x, { __index = function(_, k)
    error(where(2) .. "expect(...)." .. tostring(k) .. " is not a matcher (to_equal, to_be, " ..
          "to_be_truthy, to_be_nil, to_match, to_contain, to_be_near, to_raise; never.<matcher>)", 0)
  end })
end

-- --------------------------------------------------------- test and hooks

local function full_name(name)
  local parts = {}
  for i = 2, #frames do parts[#parts + 1] = frames[i].name end
  parts[#parts + 1] = name
  return table.concat(parts, " > ")
end

local function chain(key)
  local out = {}
  for i = 1, #frames do
    for _, f in ipairs(frames[i][key]) do out[#out + 1] = f end
  end
  return out
end

local api = {}
local running = false -- a test is running: the declarations are closed

local function declaring(what)
  if running then error(what .. " belongs at the top of the file or in a describe, not in a test", 3) end
end

function api.test(name, fn)
  declaring("test()")
  if type(name) ~= "string" or type(fn) ~= "function" then
    error("test(name, function) expects a name and a function", 2)
  end
  local afters = {}
  for i = #frames, 1, -1 do
    for _, f in ipairs(frames[i].after) do afters[#afters + 1] = f end
  end
  tests[#tests + 1] = { name = full_name(name), fn = fn, line = where(2),
                        befores = chain("before"), afters = afters }
end

function api.describe(name, fn)
  declaring("describe()")
  if type(name) ~= "string" or type(fn) ~= "function" then
    error("describe(name, function) expects a name and a function", 2)
  end
  frames[#frames + 1] = { name = name, before = {}, after = {} }
  local ok, e = pcall(fn)
  frames[#frames] = nil
  if not ok then error(e, 0) end
end

function api.before_each(fn)
  declaring("before_each()")
  if type(fn) ~= "function" then error("before_each expects a function", 2) end
  local b = frames[#frames].before
  b[#b + 1] = fn
end

function api.after_each(fn)
  declaring("after_each()")
  if type(fn) ~= "function" then error("after_each expects a function", 2) end
  local a = frames[#frames].after
  a[#a + 1] = fn
end

api.expect = function(v) return new_expect(v, false) end

-- ------------------------------------------------------------------ model

api.model = {
  -- model.script { turn, ... } or alternatives: the same turns as a script
  -- provider in luagent.lua.
  script = H.model_script, -- host functions raise at the test's line
  -- model.fn(function(request) return { text = "..." } end)
  fn = function(f)
    if type(f) ~= "function" then error("model.fn expects a function(request)", 2) end
    per_test.model_fn = f
    H.model_fn()
  end,
  requests = H.requests,
}

function M.model_turn(request)
  local f = per_test.model_fn
  if not f then return nil end
  local turn = f(request)
  if type(turn) == "string" then turn = { text = turn } end
  return turn
end

-- ------------------------------------------------------------------ fakes

local function glob_match(pat, s)
  if pat == s then return true end
  if not pat:find("*", 1, true) then return false end
  local lp = "^" .. pat:gsub("[%^%$%(%)%%%.%[%]%+%-%?]", "%%%0"):gsub("%*", ".*") .. "$"
  return s:match(lp) ~= nil
end

local fake = {}

-- fake.http { ["GET https://x/y"] = { status = 200, body = "ok" }, ["https://x/z"] = fn }
-- or fake.http(function(request) return response end)
function fake.http(spec)
  if type(spec) ~= "table" and type(spec) ~= "function" then
    error("fake.http expects a table of responses or a function(request)", 2)
  end
  per_test.http = spec
end

function fake.approver(spec)
  if type(spec) ~= "table" and type(spec) ~= "function" and type(spec) ~= "string" then
    error("fake.approver expects a table { [tool] = \"approve\"|\"deny\"|function }, " ..
          "a function(request) or \"approve\"/\"deny\"", 2)
  end
  per_test.approver = spec
end

fake.clock = H.clock_set

local function response_of(v, req)
  if type(v) == "function" then v = v(req) end
  if type(v) == "string" then v = { body = v } end
  if type(v) == "number" then v = { status = v } end
  if type(v) ~= "table" then return nil end
  return { status = v.status or 200, headers = v.headers or {}, body = v.body or "" }
end

function M.http(req)
  local spec = per_test.http
  if type(spec) == "function" then return response_of(spec, req) end
  if type(spec) ~= "table" then return nil end
  local v = spec[req.method .. " " .. req.url]
  if v == nil then v = spec[req.url] end
  if v == nil then
    for k, val in pairs(spec) do
      local m, u = k:match("^(%u+) (.*)$")
      if not m then m, u = nil, k end
      if (m == nil or m == req.method) and glob_match(u, req.url) then v = val break end
    end
  end
  if v == nil then return nil end
  return response_of(v, req)
end

local function verdict_of(v, req)
  if type(v) == "function" then v = v(req) end
  if v == true or v == "approve" then return { decision = "approve", by = "fake.approver" } end
  if v == nil or v == false or v == "deny" then
    return { decision = "deny", by = "fake.approver", reason = "denied by the test's fake.approver" }
  end
  if type(v) == "table" then
    if v.args ~= nil and v.decision == nil then v.decision = "edit" end
    v.by = v.by or "fake.approver"
    return v
  end
  error("fake.approver: a decision must be \"approve\", \"deny\", true/false or " ..
        "{ decision =, args =, reason = }, not " .. show(v), 0)
end

function M.approve(req)
  local spec = per_test.approver
  if spec == nil then
    return { decision = "deny", by = "test",
             reason = "needs approval and this test set no fake.approver" }
  end
  if type(spec) ~= "table" then return verdict_of(spec, req) end
  local v = spec[req.tool]
  if v == nil then
    for k, val in pairs(spec) do
      if type(k) == "string" and glob_match(k, req.tool) then v = val break end
    end
  end
  return verdict_of(v, req)
end

api.fake = fake
api.clock = { advance = H.clock_advance, now = H.clock_now }
api.automation = { run = H.automation_run }
api.ask = H.ask
api.calls = H.calls
api.audit = H.audit
-- events() lists the run events; events.emit stays the sandbox's own
-- (install_api makes the table).
api.events = true
api.approvals = H.approvals

-- ----------------------------------------------------------- load and run

-- The test file's environment: the test API on top of `base` (the usual
-- globals); a miss raises "undefined global" at the test's line (base's
-- own lookup, which the sandbox made strict).
local env, kept = nil, nil

-- The API as a fresh set of tables: a test that edits fake or model (or
-- events's metatable) edits its own copy; the next test gets new ones.
local function install_api(e)
  for k, v in next, api do
    if type(v) == "table" and k ~= "events" then
      local c = {}
      for kk, vv in next, v do c[kk] = vv end
      v = c
    end
    rawset(e, k, v)
  end
  rawset(e, "events", setmetatable({ emit = events.emit }, {
    __call = function(_, kind) return H.events(kind) end, __metatable = false }))
  rawset(e, "_G", e)
  rawset(e, "__test", false) -- the runner's own; not part of the API
end

-- load() in a test file: its chunks default to the file's environment
-- (the sandbox's would be this chunk's).
local function env_load(chunk, name, mode, ...)
  if select("#", ...) == 0 then return load(chunk, name, mode, env) end
  return load(chunk, name, mode, ...)
end

function M.load(source, chunkname)
  env = {}
  install_api(env)
  env.load = env_load
  setmetatable(env, { __index = base, __metatable = false }) -- nor is the way to it
  local f, err = load(source, "@" .. chunkname, "t", env)
  if not f then error(err, 0) end
  f()
  -- What the file's top level left under the usual globals' names: every
  -- test starts from it, whatever an earlier test assigned.
  kept = {}
  for k, v in next, env do kept[k] = v end
  local list = {}
  for i, t in ipairs(tests) do
    local line = t.line:match(":(%d+): $")
    list[i] = { name = t.name, line = tonumber(line) or 0 }
  end
  return list
end

local function index(t, k) return t[k] end

-- k names one of the sandbox's globals (pcall, error, string, ...).
local function is_global(k)
  if type(k) ~= "string" then return false end
  local ok, v = pcall(index, _ENV0, k)
  return ok and v ~= nil
end

-- The usual globals' names as the file's top level left them: a test that
-- replaced pcall, error or print did it for itself, not for the next one.
-- (The file's own globals are left as the tests leave them.)
local function restore_globals()
  for k, v in next, env do
    if not rawequal(v, kept[k]) and is_global(k) then rawset(env, k, kept[k]) end
  end
  for k, v in next, kept do
    if rawget(env, k) == nil and is_global(k) then rawset(env, k, v) end
  end
end

-- A raised value as text, without running any of the test's code (no
-- __tostring, __index or __concat of an error object it made).
local function raised_text(e)
  local t = type(e)
  if t == "string" then return e end
  if t == "number" or t == "boolean" or t == "nil" then return tostring(e) end
  if t == "table" then
    local m = rawget(e, "message")
    if type(m) == "string" then return m end
    local ok, s = pcall(show, e)
    return ok and type(s) == "string" and s or "an error object (a table)"
  end
  return "an error value (a " .. t .. ")"
end

-- Runs f; the first failure wins. Errors are strings ("file:line: msg")
-- or structured errors ({ code, message }, the message with file:line).
local function attempt(f, first)
  if first then return first end
  local ok, e = pcall(f)
  if ok then return nil end
  local m = raised_text(e)
  local code = type(e) == "table" and rawget(e, "code") or nil
  if type(code) == "string" and code ~= "error" then m = m .. " [" .. code .. "]" end
  return m
end

function M.run(i)
  local t = tests[i]
  running = true
  restore_globals()
  install_api(env)
  per_test = {}
  H.reset()
  local failure
  for _, b in ipairs(t.befores) do failure = attempt(b, failure) end
  failure = attempt(t.fn, failure)
  for _, a in ipairs(t.afters) do
    local af = attempt(a, nil)
    failure = failure or af
  end
  -- What the fakes refused (an unmatched request, a model call with no
  -- model) fails the test even when the code under test caught the error.
  local pending = H.pending()
  if not failure and pending then failure = pending end
  if not failure then return { ok = true } end
  local file, line, msg = failure:match("^([^\n]-):(%d+): (.*)$")
  if not file then
    file, line = t.line:match("^(.-):(%d+): $")
    msg = failure
  end
  return { ok = false, message = msg, file = file or "", line = tonumber(line) or 0 }
end

return M
