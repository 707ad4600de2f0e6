-- The bounded pattern matcher (src/sandbox_pattern.c) inside the real
-- sandbox: ordinary use, catchable pattern errors with file:line, and the
-- functions being the read-only bounded ones. Hostile patterns that end
-- the run are in tests/e2e/pattern_limits.sh.
local failures = 0
local function check(name, cond)
  if not cond then
    print("FAIL " .. name)
    failures = failures + 1
  end
end
local function eq(name, got, want)
  if got ~= want then
    print("FAIL " .. name .. ": got " .. tostring(got) .. ", want " .. tostring(want))
    failures = failures + 1
  end
end
-- pcall(f, ...) must fail with exactly `want` after the "file:line: " part
local function err_is(name, want, f, ...)
  local ok, msg = pcall(f, ...)
  if ok then
    print("FAIL " .. name .. ": no error")
    failures = failures + 1
    return
  end
  msg = tostring(msg)
  local tail = msg:sub(-#want)
  if tail ~= want then
    print("FAIL " .. name .. ": error '" .. msg .. "', want '" .. want .. "'")
    failures = failures + 1
  end
end

-- find
local s, e = string.find("hello world", "o w")
eq("find start", s, 5); eq("find end", e, 7)
s, e = ("hello"):find("l+")
eq("method find", s, 3); eq("method find end", e, 4)
eq("find init negative", select(1, string.find("hello", "l", -2)), 4)
eq("find past end", string.find("hello", "", 10), nil)
eq("find empty at end", select(1, string.find("hello", "", 6)), 6)
eq("plain find", select(1, string.find("a.b", ".", 1, true)), 2)
local a, b, c1, c2 = string.find("key=val", "(%w+)=(%w+)")
check("find captures", a == 1 and b == 7 and c1 == "key" and c2 == "val")

-- match
eq("match", string.match("2024-06-30", "(%d+)%-%d+%-(%d+)"), "2024")
local y, m, d = string.match("2024-06-30", "(%d+)-(%d+)-(%d+)")
check("match captures", y == "2024" and m == "06" and d == "30")
eq("position capture", string.match("hello", "()ll"), 3)
eq("trim", string.match("  padded  ", "^%s*(.-)%s*$"), "padded")
eq("balanced", string.match("f(a(b)c) x", "%b()"), "(a(b)c)")
eq("frontier", string.match("THE (quick) fox", "%f[%a]%a+", 5), "quick")
eq("back-reference", string.match([[say "hi" now]], "([\"'])(.-)%1", 1), '"')
eq("utf-8 bytes", string.match("naïve", "[\128-\255]+"), "ï")
eq("embedded zero", string.match("a\0b", "%z"), "\0")

-- gmatch
local words = {}
for w in string.gmatch("one two  three", "%a+") do words[#words + 1] = w end
eq("gmatch count", #words, 3); eq("gmatch last", words[3], "three")
local pairs_seen = {}
for k, v in ("a=1, b=2"):gmatch("(%w+)=(%w+)") do pairs_seen[k] = v end
check("gmatch pairs", pairs_seen.a == "1" and pairs_seen.b == "2")
local n = 0
for _ in string.gmatch("hello", "", 3) do n = n + 1 end
eq("gmatch init + empty matches", n, 4)
n = 0
for _ in string.gmatch("abc", "x*") do n = n + 1 end
eq("gmatch empty matches", n, 4)

-- gsub
eq("gsub string", (string.gsub("hello world", "o", "0")), "hell0 w0rld")
eq("gsub count", select(2, string.gsub("hello world", "o", "0")), 2)
eq("gsub max", (string.gsub("hello world", "o", "0", 1)), "hell0 world")
eq("gsub swap", (string.gsub("x=1, y=2", "(%w+)=(%w+)", "%2=%1")), "1=x, 2=y")
eq("gsub %0", (string.gsub("abc", "%w", "%0%0")), "aabbcc")
eq("gsub table", (string.gsub("$name is $age", "%$(%w+)", { name = "Ann", age = 30 })), "Ann is 30")
eq("gsub function", (string.gsub("hello world", "%w+", string.upper)), "HELLO WORLD")
eq("gsub keep on false", (string.gsub("a b", "%w", function(w) return w == "a" and "A" end)), "A b")
eq("gsub anchored", (string.gsub("aaa", "^a", "b")), "baa")
eq("gsub empty", (string.gsub("abc", "", "-")), "-a-b-c-")
eq("gsub number subject", (string.gsub(12321, 2, 9)), "19391")

-- errors: Lua's messages, catchable, with this file's line
err_is("ends with %", "malformed pattern (ends with '%')", string.find, "abc", "a%")
err_is("missing ]", "malformed pattern (missing ']')", string.match, "abc", "[a")
err_is("%f without [", "missing '[' after '%f' in pattern", string.find, "abc", "%fa")
err_is("%b args", "malformed pattern (missing arguments to '%b')", string.find, "abc", "%b")
err_is("bad back-reference", "invalid capture index %1", string.match, "abc", "%1")
err_is("bad close", "invalid pattern capture", string.match, "abc", "a)")
err_is("unfinished", "unfinished capture", string.match, "abc", "(a")
err_is("too many", "too many captures", string.match, "abc", string.rep("()", 33))
err_is("too complex", "pattern too complex", string.match, string.rep("a", 300), string.rep("a?", 300))
err_is("bad %x in repl", "invalid use of '%' in replacement string", string.gsub, "abc", "a", "%x")
err_is("bad capture in repl", "invalid capture index %2", string.gsub, "abc", "(a)", "%2")
err_is("bad repl value", "invalid replacement value (a table)", string.gsub, "abc", "a", { a = {} })
err_is("bad repl type", "(string/function/table expected, got boolean)", string.gsub, "abc", "a", true)
local ok, msg = pcall(function() return string.find("abc", "[") end)
check("error carries file:line", not ok and msg:find("^pattern_test%.lua:%d+: malformed pattern") ~= nil)

-- the bounded functions are in place and cannot be swapped out
ok = pcall(function() string.find = function() return 1 end end)
check("string table read-only", not ok)
check("methods use the same functions", ("x").find == string.find and ("x").gsub == string.gsub)

-- a long but linear job runs fine within the default budget
local big = string.rep("word ", 20000)
eq("big gsub", select(2, big:gsub("%a+", "%0")), 20000)
n = 0
for _ in big:gmatch("%a+") do n = n + 1 end
eq("big gmatch", n, 20000)

if failures > 0 then error(failures .. " pattern checks failed") end
print("pattern_test: all checks passed")
