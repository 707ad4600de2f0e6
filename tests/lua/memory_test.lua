-- The Lua memory library through `luagent run`. The working directory
-- (tests/lua) is the workspace and may be shared by concurrent runs (plain
-- and sanitizer builds), so everything happens in a namespace unique to
-- this run, plus unique keys in the default namespace, and is deleted at
-- the end.
local NS = "t" .. os.time() .. "-" .. math.random(1, 1000000000)
local U = "u" .. math.random(1, 1000000000) -- a word no other run uses

local failures = 0
local function expect(name, cond, detail)
  if not cond then
    print("FAIL " .. name .. (detail and (": " .. tostring(detail)) or ""))
    failures = failures + 1
  end
end
local function expect_error(name, fn, code, pattern)
  local ok, err = pcall(fn)
  if ok then
    print("FAIL " .. name .. ": no error")
    failures = failures + 1
    return
  end
  local msg = type(err) == "table" and tostring(err.message) or tostring(err)
  if code and (type(err) ~= "table" or err.code ~= code) then
    print("FAIL " .. name .. ": code " .. tostring(type(err) == "table" and err.code) .. ", wanted " .. code)
    failures = failures + 1
  elseif pattern and not string.find(msg, pattern, 1, true) then
    print("FAIL " .. name .. ": '" .. msg .. "' does not mention '" .. pattern .. "'")
    failures = failures + 1
  end
end
local function keys_of(results)
  local t = {}
  for i, r in ipairs(results) do t[i] = r.key end
  return table.concat(t, " ")
end

local function body()
  -- set / get / delete, text and tables
  memory.set("greeting", "hello " .. U, NS)
  expect("get text", memory.get("greeting", NS) == "hello " .. U)
  expect("absent is nil", memory.get("missing", NS) == nil)
  memory.set("profile", { name = "Ida", langs = { "lua", "c" }, age = 41, admin = true }, NS)
  local p = memory.get("profile", NS)
  expect("table back", type(p) == "table" and p.name == "Ida" and p.age == 41 and p.admin == true)
  expect("nested array back", p and p.langs and #p.langs == 2 and p.langs[2] == "c")
  memory.set("n", 42, NS)
  expect("number back", memory.get("n", NS) == 42)
  memory.set("flag", false, NS)
  expect("boolean back", memory.get("flag", NS) == false)
  memory.set("empty", json.array(), NS)
  expect("empty array stays an array", json.encode(memory.get("empty", NS)) == "[]")
  memory.set("greeting", "replaced " .. U, NS)
  expect("replace", memory.get("greeting", NS) == "replaced " .. U)
  expect("delete existing", memory.delete("n", NS) == true)
  expect("delete absent", memory.delete("n", NS) == false)
  expect("deleted is nil", memory.get("n", NS) == nil)

  -- namespaces are separate; the default namespace is "" here
  local dkey = "memtest-" .. U
  memory.set(dkey, "default namespace " .. U)
  expect("default ns get", memory.get(dkey) == "default namespace " .. U)
  expect("default ns not in NS", memory.get(dkey, NS) == nil)
  expect("NS not in default", memory.get("greeting") ~= "replaced " .. U)
  expect("search default only", keys_of(memory.search(U)) == dkey, keys_of(memory.search(U)))
  local all = memory.search(U, 10, "*")
  expect("search all namespaces", #all == 2, #all)
  for _, r in ipairs(all) do expect("ns field with *", r.ns == "" or r.ns == NS, r.ns) end
  expect("delete default", memory.delete(dkey) == true)

  -- search: ranked, bounded, shaped {key, value, score}
  memory.set("trip", "Trip to Paris in June with Anna", NS)
  memory.set("food", "Anna likes sushi and ramen", NS)
  memory.set("car", "The car is a blue Volvo", NS)
  local r = memory.search("paris anna", 10, NS)
  expect("search finds both", #r == 2, keys_of(r))
  expect("best first", r[1] and r[1].key == "trip", keys_of(r))
  expect("result shape", r[1] and r[1].value == "Trip to Paris in June with Anna" and type(r[1].score) == "number")
  expect("scores descend", r[2] and r[1].score >= r[2].score)
  expect("n bounds", #memory.search("paris anna", 1, NS) == 1)
  expect("table values searchable", keys_of(memory.search("ida", 5, NS)) == "profile")
  expect("table value decoded in results", memory.search("ida", 5, NS)[1].value.name == "Ida")
  expect("unicode", (function()
    memory.set("cafe", "Caf\u{e9} cr\u{e8}me \u{6771}\u{4eac}", NS)
    return keys_of(memory.search("CAFE", 5, NS)) == "cafe" and keys_of(memory.search("\u{6771}\u{4eac}", 5, NS)) == "cafe"
  end)())

  -- FTS syntax in user text is plain words or nothing, never an error
  for _, q in ipairs({ '"a" OR', "NEAR(", "*", '"', '""', "paris*", "^x", "col:x", "(", ")", "AND OR NOT",
                       "-", "+", "{key}: x", "\\", "", "   ", "!!!", "\u{2014}", "\u{1F642}" }) do
    local ok, res = pcall(memory.search, q, 5, NS)
    expect("query " .. q, ok and type(res) == "table", res)
  end
  expect("punctuation finds nothing", #memory.search("?!*", 5, NS) == 0)
  expect("NEAR is a word", keys_of(memory.search("NEAR(paris", 5, NS)) == "trip")

  -- list and count
  expect("count", memory.count(NS) == 8, memory.count(NS))
  expect("list sorted", table.concat(memory.list(nil, NS), " ") == "cafe car empty flag food greeting profile trip",
         table.concat(memory.list(nil, NS), " "))
  expect("list prefix", table.concat(memory.list("f", NS), " ") == "flag food")

  -- errors are structured and name the call
  expect_error("nil value", function() memory.set("k", nil, NS) end, "invalid_args", "memory.delete")
  expect_error("function value", function() memory.set("k", print, NS) end, "invalid_args")
  expect_error("big value", function() memory.set("k", string.rep("x", 70000), NS) end, "too_large",
               "over the limit of 65536")
  expect("big value not stored", memory.get("k", NS) == nil)
  expect_error("key type", function() memory.get(5) end, "invalid_args", "memory.get: argument #1 (key)")
  expect_error("empty key", function() memory.set("", "v", NS) end, "invalid_args", "key must not be empty")
  expect_error("bad ns", function() memory.get("k", "no spaces") end, "invalid_args", "namespace 'no spaces'")
  expect_error("* only for search", function() memory.set("k", "v", "*") end, "invalid_args")
  expect_error("bad n", function() memory.search("x", 0, NS) end, "invalid_args", "argument #2 (n)")
  expect_error("bad n type", function() memory.search("x", "lots") end, "invalid_args")
  expect_error("search text type", function() memory.search({}) end, "invalid_args")

  -- the library is read-only
  expect_error("read-only", function() memory.get = nil end, nil, "read-only")
end

local ok, err = pcall(body)
-- clean up whatever the body managed to write
for _, k in ipairs(memory.list(nil, NS)) do memory.delete(k, NS) end
memory.delete("memtest-" .. U)
if not ok then error(err, 0) end
expect("cleaned up", memory.count(NS) == 0)
if failures > 0 then error(failures .. " memory check(s) failed") end
print("memory_test: all checks passed")
