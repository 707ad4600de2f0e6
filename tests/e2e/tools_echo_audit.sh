#!/bin/bash
# e2e: what tools.call's fast path must not lose. A plain read's audit row
# carries a copy of its arguments, hashed by the audit writer's thread,
# while a rule, a hook, a rewrite and a denial still go through the whole
# pipeline on the caller. Attacked from a Lua script (700 calls, past
# several batches of the queue, with arguments too big for the copy,
# strings holding U+0000 and non-ASCII text), from a skill tool nested
# under it, and from the model's raw JSON (the scripted provider, a
# big integer text and a rewrite included): a deny rule still denies, a
# before_tool hook still denies and still rewrites (the rewritten arguments
# run and are what the rows bind), every row is there in the order of the
# calls with args_hash = Python's BLAKE2b-256 of the canonical JSON (the
# model's parallel calls of one turn in any order), and `audit verify`
# holds.
. "$(dirname "$0")/lib/mock.sh" "$1"

mkdir -p "$WS/skills/hs"
cat > "$WS/skills/hs/skill.lua" <<'LUA'
return {
  name = "hs", description = "relays its inner arguments to echo",
  tools = { relay = { description = "calls echo with args.inner", impact = "read",
    params = { type = "object" },
    run = function(args) return tools.call("echo", args.inner) end } },
}
LUA
cat > "$WS/hooks.lua" <<'LUA'
return {
  before_tool = function(call)
    if call.tool ~= "echo" then return end
    local m = call.args.msg
    if m == "hookno" then return "deny", "the hook says no" end
    if m == "rw" then return nil, nil, { msg = "rewritten", n = call.args.n } end
  end,
}
LUA
RULES='rules = { { tool = "echo", args = { msg = "^no" }, action = "deny", reason = "the rule says no" } },'

# The script prints each call's arguments (as it sent them) and outcome,
# in order; Python rebuilds the rows they must leave.
cat > "$WS/calls.lua" <<'LUA'
local big = string.rep("0123456789abcdef", 130) -- 2080 bytes: too big for the copy
local function same(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) ~= "table" then return a == b end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end
local function log(kind, args, ok, r)
  print("CALL " .. kind .. " " .. (ok and "ok" or "err") .. " " .. json.encode(args))
end
for i = 1, 700 do
  local args
  if i % 100 == 7 then args = { i = i, big = big }
  elseif i % 50 == 3 then args = { msg = "rw", n = i }
  elseif i % 50 == 13 then args = { msg = "no" .. i }
  elseif i % 50 == 23 then args = { msg = "hookno", n = i }
  else args = { i = i, s = "x\0y\u{e9}", t = { i, "a", true } } end
  if i % 40 == 17 then
    local ok, r = pcall(tools.call, "hs.relay", { inner = args })
    log("relay", args, ok, r)
  else
    local ok, r = pcall(tools.call, "echo", args)
    if ok and args.msg == "rw" and (r.msg ~= "rewritten" or r.n ~= i) then
      error("the rewrite did not run: " .. json.encode(r))
    end
    if ok and args.msg ~= "rw" and not same(r, args) then
      error("echo changed its arguments: " .. json.encode(r))
    end
    log("echo", args, ok, r)
  end
end
LUA
config "providers = { { name = \"demo\", kind = \"script\", turns = { { text = \"x\" } } } },
$RULES"
lrun "$WS/calls.lua"
expect_rc 0 "700 calls from the script, 17 of them through a nested skill tool"
printf '%s\n' "$OUT" | grep '^CALL ' > "$WS/calls.txt"
N=$(wc -l < "$WS/calls.txt")
[ "$N" = 700 ] && ok "every call reported" || fail "calls reported: $N"
DENIED=$(grep -c '^CALL [a-z]* err ' "$WS/calls.txt")
# 14 rule denials and 14 hook denials (every 50th), some of them through the skill
[ "$DENIED" = 28 ] && ok "the rule and the hook still deny (28 calls)" || fail "denied: $DENIED"

# the model: raw JSON arguments, a rewrite and a denial among them
cat > "$WS/turns.json" <<'JSON'
[{"tool": "echo", "args": "{\"z\":1,\"a\":[2.5,\"\\u0000\"],\"big\":9007199254740993}"},
 {"tool": "echo", "args": "{\"msg\":\"rw\",\"n\":-1}"},
 {"tool": "echo", "args": "{\"msg\":\"nope\"}"},
 {"tool": "echo", "args": "{\"msg\":\"hookno\"}"}]
JSON
config "providers = { { name = \"demo\", kind = \"script\", turns = {
  { tools = {
    { tool = \"echo\", args = '{\"z\":1,\"a\":[2.5,\"\\\\u0000\"],\"big\":9007199254740993}' },
    { tool = \"echo\", args = '{\"msg\":\"rw\",\"n\":-1}' },
    { tool = \"echo\", args = '{\"msg\":\"nope\"}' },
    { tool = \"echo\", args = '{\"msg\":\"hookno\"}' } } },
  { text = \"done.\" } } } },
$RULES"
ask "echo these"
expect_rc 0 "the model's calls ran (two refused)"

timeout 60 "$LUAGENT" --workspace "$WS" audit tail -n 5000 --json > "$WS/audit.json" 2> "$WS/err"
python3 - "$WS/calls.txt" "$WS/audit.json" "$WS/turns.json" <<'PY' && ok "every row is there, in call order, bound to the arguments that ran (script, nested skill, model)" || { RC=1; OUT=; ERR=$(cat "$WS/err"); fail "rows"; }
import hashlib, json, sys
def canon(v):
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
def h(v):
    return hashlib.blake2b(canon(v), digest_size=32).hexdigest()
def rows_for(args):
    """The (decision, decided_by, status, hash) rows one echo call leaves."""
    m = args.get("msg") if isinstance(args, dict) else None
    if isinstance(m, str) and m.startswith("no"):
        return [("deny", "rule 1", None, h(args))]
    if m == "hookno":
        return [("deny", "hook", None, h(args))]
    if m == "rw":
        rw = {"msg": "rewritten", "n": args["n"]}
        return [("allow", "default", None, h(rw)), ("exec", "default", "ok", h(rw))]
    return [("allow", "default", "ok", h(args))]
calls = []
for line in open(sys.argv[1]):
    _, kind, outcome, js = line.rstrip("\n").split(" ", 3)
    calls.append((kind, outcome, json.loads(js)))
rows = sorted(json.load(open(sys.argv[2])), key=lambda r: r["seq"])
got = {}
for r in rows:
    if r["tool"] == "echo":
        got.setdefault(r["caller_kind"], []).append(
            (r["decision"], r["decided_by"], r.get("status"), r["args_hash"]))
want = {"script": [], "skill": [], "model": []}
for kind, outcome, args in calls:
    want["script" if kind == "echo" else "skill"] += rows_for(args)
model = [json.loads(t["args"]) for t in json.load(open(sys.argv[3]))]
for a in model:
    want["model"] += rows_for(a)
# the model's read-only calls of one turn run in parallel threads: their
# rows in any order (a rewrite's two rows in theirs)
got["model"] = sorted(got.get("model", []), key=str)
want["model"] = sorted(want["model"], key=str)
bad = 0
for k, w in want.items():
    g = got.get(k, [])
    if g != w:
        bad += 1
        print("caller %s: %d rows, wanted %d" % (k, len(g), len(w)))
        for i, (x, y) in enumerate(zip(g, w)):
            if x != y:
                print("  first difference at %d: got %s, wanted %s" % (i, x, y))
                break
# the relay rows themselves: one per relayed call, a plain read
relay = [r for r in rows if r["tool"] == "hs.relay"]
if len(relay) != sum(1 for c in calls if c[0] == "relay"):
    bad += 1
    print("relay rows: %d" % len(relay))
assert len(want["script"]) > 600 and len(want["skill"]) >= 17 and len(want["model"]) == 5
sys.exit(1 if bad else 0)
PY
timeout 60 "$LUAGENT" --workspace "$WS" audit verify > "$WS/out" 2> "$WS/err"; RC=$?; OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
expect_rc 0 "audit verify: the chain holds"

[ "$FAILS" -eq 0 ] && echo "all checks passed" || { echo "$FAILS check(s) failed"; exit 1; }
