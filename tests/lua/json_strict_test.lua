-- json.decode is strict RFC 8259 (src/json.c): what the RFC refuses raises
-- an error naming the byte offset, and \u0000 never cuts a string. On the
-- old lenient parser `[1]x` decoded as {1}, "-01" as -1 and "a\u0000b" as "a".
local failures = 0
local function expect(name, cond)
  if not cond then
    print("FAIL " .. name)
    failures = failures + 1
  end
end
local function refuses(text, message)
  local ok, err = pcall(json.decode, text)
  local msg = tostring(err)
  if ok then
    print("FAIL json.decode accepted " .. string.format("%q", text))
    failures = failures + 1
  elseif not msg:find("json.decode: " .. message, 1, true) then
    print("FAIL json.decode " .. string.format("%q", text) .. ": '" .. msg .. "' lacks '" .. message .. "'")
    failures = failures + 1
  end
end

refuses("[1]x", "invalid JSON at byte 3: unexpected content after the value")
refuses("[][]", "invalid JSON at byte 2: unexpected content after the value")
refuses("-01", "invalid JSON at byte 2: leading zero in number")
refuses("2.", "invalid JSON at byte 2: unexpected end of input, expected a digit after the decimal point")
refuses("2.e3", "invalid JSON at byte 2: unexpected character 'e', expected a digit after the decimal point")
refuses('"\\uqqqq"', "invalid JSON at byte 1: invalid \\u escape (expected four hex digits)")
refuses('"a\tb"', "invalid JSON at byte 2: control character 0x09 in a string must be escaped")
refuses('"a\0b"', "invalid JSON at byte 2: control character 0x00 in a string must be escaped")
refuses('"\xC0\x80"', "invalid JSON at byte 1: invalid UTF-8 (overlong encoding)")
refuses('"\\ud800"', "invalid JSON at byte 1: lone UTF-16 surrogate \\uD800")
refuses("{oops", "invalid JSON at byte 1: unexpected character 'o', expected a key (a string) or '}'")
refuses("", "invalid JSON at byte 0: no value (empty input)")

-- accepted, as the RFC allows
expect("whitespace", json.decode(" \t\r\n[1] \n")[1] == 1)
expect("escapes", json.decode('"\\"\\\\\\/\\b\\f\\n\\r\\t"') == '"\\/\b\f\n\r\t')
expect("surrogate pair", json.decode('"\\ud834\\udd1e"') == "\xF0\x9D\x84\x9E")
expect("last duplicate wins", json.decode('{"a":1,"a":2}').a == 2)

-- \u0000 keeps the rest of the string: a real zero byte in Lua (the host
-- holds it as C0 80, which never reaches a script).
local s = json.decode('"a\\u0000b"')
expect("\\u0000 does not cut the string", #s == 3 and s:byte(2) == 0)
expect("\\u0000 round trip", json.encode(json.decode('"a\\u0000b"')) == '"a\\u0000b"')
local k = next(json.decode('{"k\\u0000x":1}'))
expect("\\u0000 does not cut a key", k == "k\0x")

if failures > 0 then error(failures .. " json checks failed") end
print("json_strict_test: all checks passed")
