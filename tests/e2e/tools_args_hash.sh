#!/bin/bash
# e2e: the argument hash the audit chain binds (args_hash) is BLAKE2b-256 of
# the canonical JSON of the arguments, computed here by Python from the
# arguments alone, for calls from a Lua script (tools.call), from a skill
# tool's run() nested under it, and from the model's raw JSON arguments;
# echo hands every argument back exactly; hostile tables are refused with
# the messages of before (cycles, depth, NaN/inf, sparse and mixed tables,
# functions, invalid UTF-8, float keys) and metatables are not consulted;
# the chain verifies.
. "$(dirname "$0")/lib/mock.sh" "$1"

# The arguments, once, as JSON: the Lua script decodes the same texts.
cat > "$WS/cases.json" <<'JSON'
[
 {"a": 1},
 {},
 {"z": [1, 2.5, "x\u0000y", [], {}], "a": {"k": null, "é": true, "\u0000": false}},
 {"n": 9007199254740993, "m": -9223372036854775808, "f": 0.1, "g": 1e+300, "h": -2.5e-07},
 {"s": "\u2028\u001f\"\\/\b\f\n\r\t\u007f", "long": "wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww"},
 {"k01": 1, "k02": 2, "k03": 3, "k04": 4, "k05": 5, "k06": 6, "k07": 7, "k08": 8, "k09": 9,
  "k10": 10, "k11": 11, "k12": 12, "k13": 13, "k14": 14, "k15": 15, "k16": 16, "k17": 17,
  "K": "upper", "": "empty", "\u0001": "one", "\ud83d\ude00": "emoji"},
 {"deep": {"a": {"b": {"c": {"d": [[[{"e": "x"}]]]}}}}}
]
JSON
# the texts as Lua string literals (every byte outside printable ASCII as \ddd)
python3 - "$WS/cases.json" > "$WS/cases.lua" <<'PY'
import json, sys
def lua(b):
    return '"' + "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else "\\%03d" % c for c in b) + '"'
print("return {")
for c in json.load(open(sys.argv[1])):
    print("  %s," % lua(json.dumps(c, ensure_ascii=False).encode()))
print("}")
PY

mkdir -p "$WS/skills/hs"
cat > "$WS/skills/hs/skill.lua" <<'LUA'
return {
  name = "hs", description = "relays its inner arguments to echo",
  tools = { relay = { description = "calls echo with args.inner", impact = "read",
    params = { type = "object" },
    run = function(args) return tools.call("echo", args.inner) end } },
}
LUA

# the script: every case through tools.call from Lua and through the skill
{
  echo 'local texts = (function()'
  cat "$WS/cases.lua"
  echo 'end)()'
  cat <<'LUA'
local function same(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) ~= "table" then return a == b or (a ~= a and b ~= b) end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end
local n = 0
for _, t in ipairs(texts) do
  local args = json.decode(t)
  local r = tools.call("echo", args)
  if not same(r, args) then error("echo changed " .. t) end
  local r2 = tools.call("hs.relay", { inner = args })
  if not same(r2, args) then error("relay changed " .. t) end
  n = n + 1
end
print("echoed " .. n)
-- hostile tables: the same refusals as before, named by path
local function try(label, v)
  local ok, err = pcall(tools.call, "echo", v)
  print(label .. ": " .. (ok and "ok" or tostring(err.message)))
end
local cy = {} cy.self = cy
local deep = {} local d = deep for i = 1, 101 do d.x = {} d = d.x end
try("nan", { a = 0/0 })
try("inf", { a = { b = -1/0 } })
try("cycle", cy)
try("deep", deep)
try("sparse", { list = { 1, nil, 3 } })
try("mixed", { 1, 2, x = 3 })
try("function", { f = print })
try("badkey", { ["\255"] = 1 })
try("badval", { ok = "fine", s = "a\192\128" })
try("floatkey", { [1.5] = 1 })
try("boolkey", { [true] = 1 })
-- metatables are not consulted: what is sent is the raw contents
local mt = { __index = function() return "ghost" end,
             __pairs = function() return function() return "evil", 1 end end }
local r = tools.call("echo", setmetatable({ real = 1 }, mt))
print("meta: " .. json.encode(r))
LUA
} > "$WS/args.lua"

config 'providers = { { name = "demo", kind = "script", turns = { { text = "x" } } } },'
lrun "$WS/args.lua"
expect_rc 0 "the script runs"
expect_out "echoed 7" "every case came back from echo and from the nested skill call exactly"
expect_out "nan: tools.call: argument #2: a: NaN and infinity are not valid JSON" "NaN refused, named"
expect_out "inf: tools.call: argument #2: a.b: NaN and infinity are not valid JSON" "infinity refused at its path"
expect_out "cycle: tools.call: argument #2: self.self.self" "a cycle is refused"
expect_out "nested too deeply (or a cycle)" "the cycle and the depth are named"
expect_out "sparse: tools.call: argument #2: list: array has holes (nil items)" "a sparse array is refused"
expect_out "mixed: tools.call: argument #2: table mixes array items and named keys" "a mixed table is refused"
expect_out "function: tools.call: argument #2: f: a function cannot be converted to JSON" "a function is refused"
expect_out "badkey: tools.call: argument #2: \\xff: key is not valid UTF-8 at byte 1" "an invalid UTF-8 key is refused"
expect_out "badval: tools.call: argument #2: s: string is not valid UTF-8 at byte 2" "an invalid UTF-8 value is refused"
expect_out "floatkey: tools.call: argument #2: table keys must be strings or 1..n integers" "a float key is refused"
expect_out "boolkey: tools.call: argument #2: table keys must be strings or 1..n integers" "a boolean key is refused"
expect_out 'meta: {"real":1}' "__index and __pairs are not consulted"
DEPTH=$(printf '%s\n' "$OUT" | grep '^deep: ' | grep -c 'nested too deeply (or a cycle)')
[ "$DEPTH" = 1 ] && ok "101 levels are refused" || fail "101 levels: $DEPTH"

# the model's raw JSON arguments, through the mock (OpenAI wire)
# (the texts as the model sends them; the fixture made by Python, so each
# is one JSON string holding the raw text)
RAW1='{"z":[1,2.5,"x\u0000y"],"a":{"k":null,"\u00e9":true},"n":9007199254740993}'
RAW2='{"s":"\u2028\u001f\"\\/","e":{},"l":[]}'
FIX=$(python3 -c '
import json, sys
calls = [{"id": "c%d" % i, "name": "echo", "raw_arguments": r} for i, r in enumerate(sys.argv[1:])]
print(json.dumps({"steps": [{"text": "", "tool_calls": calls}, {"text": "done."}]}))' "$RAW1" "$RAW2" '{}')
start_mock m "$FIX"
config "providers = { $(provider openai $PORT_m) }"
ask "echo these"
expect_rc 0 "the model's calls run"
stop_mocks

# every echo row's hash, against Python's BLAKE2b of the canonical text
timeout 60 "$LUAGENT" --workspace "$WS" audit tail -n 1000 --json > "$WS/audit.json" 2> "$WS/err"
python3 - "$WS/cases.json" "$WS/audit.json" "$RAW1" "$RAW2" <<'PY' && ok "every args_hash is BLAKE2b-256 of the canonical JSON (script, nested skill, model)" || { RC=1; OUT=; ERR=$(cat "$WS/err"); fail "args_hash"; }
import collections, hashlib, json, sys
def canon(v):
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
def h(v):
    return hashlib.blake2b(canon(v), digest_size=32).hexdigest()
cases = json.load(open(sys.argv[1]))
rows = json.load(open(sys.argv[2]))
raws = [json.loads(r) for r in sys.argv[3:5]] + [{}]
echo = [r for r in rows if r["tool"] == "echo"]
by = collections.defaultdict(list)
for r in echo:
    by[r["caller_kind"]].append(r["args_hash"])
want = {
    "script": [h(c) for c in cases] + [h({"real": 1})],
    "skill": [h(c) for c in cases],
    "model": [h(c) for c in raws],
}
bad = 0
for kind, hs in want.items():
    if sorted(by[kind]) != sorted(hs):
        print("caller %s: got %s, wanted %s" % (kind, sorted(by[kind]), sorted(hs)))
        bad += 1
assert h({"a": 1}) == "10a7ff3e312baec0c356be489739b93f63af84416c40f1c13023eb96c7ed50aa"
sys.exit(1 if bad else 0)
PY
timeout 60 "$LUAGENT" --workspace "$WS" audit verify > "$WS/out" 2> "$WS/err"; RC=$?; OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
expect_rc 0 "audit verify: the chain holds"

[ "$FAILS" -eq 0 ] && echo "all checks passed" || { echo "$FAILS check(s) failed"; exit 1; }
