# The model's parallel read-only calls share the runtime's store: 40 turns
# of 8 calls each in one answer (4 memory.search, 4 calls of a skill's
# read tool that calls memory.get), all in parallel threads, against 120
# known memories. Every result must be exactly its own key's value: a
# connection or a cached statement shared between threads shows up as a
# wrong row, an error or a crash.
. "$(dirname "$0")/lib/mock.sh" "$1"
mkdir -p "$WS/skills/memget"
cat > "$WS/skills/memget/skill.lua" <<'LUA'
return {
  name = "memget",
  description = "Look up saved memories by key",
  keywords = { "memget", "lookup" },
  prompt = "Use memget.get to read a memory.",
  tools = {
    get = {
      description = "The memory saved under a key",
      params = { type = "object", required = { "key" }, properties = { key = { type = "string" } } },
      impact = "read",
      run = function(args) return { key = args.key, value = memory.get(args.key) } end,
    },
  },
}
LUA
cat > "$WS/seed.lua" <<'LUA'
for i = 0, 119 do
  memory.set(string.format("k%03d", i),
             string.format("uniq%03dx shared words about releases, number %d", i, i * 7))
end
print("seeded")
LUA
NTURNS=40
python3 - "$WS/luagent.lua" "$NTURNS" <<'PY'
import sys
path, nturns = sys.argv[1], int(sys.argv[2])
turns = []
for t in range(nturns):
    calls = []
    for j in range(8):
        i = (t * 8 + j * 13) % 120
        if j % 2 == 0:
            calls.append('{ tool = "memory.search", args = { query = "uniq%03dx", limit = 3 } }' % i)
        else:
            calls.append('{ tool = "memget.get", args = { key = "k%03d" } }' % i)
    turns.append("      { tools = { %s } }," % ", ".join(calls))
turns.append('      { text = "done" },')
open(path, "w").write("""return {
  react = { max_iterations = %d, max_tool_calls = %d, parallel_tools = true },
  providers = { { name = "demo", kind = "script", turns = {
    { turns = {
%s
    } },
  } } },
}
""" % (nturns + 5, nturns * 8 + 10, "\n".join(turns)))
PY
lrun "$WS/seed.lua"
expect_rc 0 "120 memories seeded"
for round in 1 2; do
  ask --json "memget lookup everything"
  expect_rc 0 "round $round: $NTURNS turns of 8 parallel reads answered"
  python3 - "$WS/out" "$NTURNS" <<'PY' && ok "round $round: every parallel result is exactly its key's value" || { FAILS=$((FAILS + 1)); echo "FAIL round $round: wrong results (above)"; }
import json, re, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
# The arguments of each call: its tool_args_delta pieces, by index within
# the answer (index 0 starts the next answer's calls).
args, by_index = {}, {}
for e in events:
    t, d = e.get("type"), e.get("data") or {}
    if t == "tool_call_start":
        if d["index"] == 0: by_index = {}
        by_index[d["index"]] = d["id"]
        args[d["id"]] = ""
    elif t == "tool_args_delta":
        cid = by_index[d["index"]]
        args[cid] += d["delta"]
calls = {k: {"arguments": v} for k, v in args.items()}
results = [e["data"] for e in events if e.get("type") == "tool_result"]
want_n = int(sys.argv[2]) * 8
bad = []
if len(results) != want_n:
    bad.append("%d results, wanted %d" % (len(results), want_n))
par = sum(1 for r in results if r.get("parallel"))
if par != want_n:
    bad.append("%d of %d ran in parallel threads" % (par, want_n))
def value(i):
    return "uniq%03dx shared words about releases, number %d" % (i, i * 7)
for r in results:
    c = calls.get(r["id"])
    if c is None:
        bad.append("result %s has no call" % r["id"]); continue
    args = c.get("arguments") or c.get("args")
    if isinstance(args, str): args = json.loads(args)
    if not r.get("ok"):
        bad.append("%s %s failed: %s" % (r["name"], args, r.get("content"))); continue
    got = json.loads(r["content"])
    if r["name"] == "memget.get":
        i = int(args["key"][1:])
        if got != {"key": args["key"], "value": value(i)}:
            bad.append("memget.get %s -> %s" % (args["key"], r["content"][:200]))
    else:
        i = int(re.match(r"uniq(\d+)x", args["query"]).group(1))
        items = got if isinstance(got, list) else got.get("results", got.get("items"))
        keys = [(it.get("key"), it.get("value")) for it in items]
        if keys != [("k%03d" % i, value(i))]:
            bad.append("memory.search %s -> %s" % (args["query"], r["content"][:200]))
for b in bad[:15]: print(b)
sys.exit(1 if bad else 0)
PY
done
finish
