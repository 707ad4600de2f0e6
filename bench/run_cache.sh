#!/bin/sh
# Prompt-cache eligibility of a 10-turn `luagent ask` (issue 18, item 10):
# for each turn, the bytes of the request's stable prefix (model, tools,
# system, messages as sent, cache_control markers left out) and how many of
# the previous turn's prefix bytes it repeats, as tests/mock_llm.py reports
# them; then whether a skill's tool schema is the same bytes in 5 separate
# processes. Usage: bench/run_cache.sh BUILD_DIR [anthropic|openai]
B=$(cd "${1:-build}" && pwd)
KIND=${2:-anthropic}
SRC=$(cd "$(dirname "$0")/.." && pwd)
WS=$(mktemp -d /tmp/luagent_cache_XXXXXX)
trap 'kill $MP 2>/dev/null; rm -rf "$WS"' EXIT
mkdir -p "$WS/skills/lookup"
cat > "$WS/skills/lookup/skill.lua" <<'LUA'
return { name = "lookup", description = "Look a record up", keywords = { "lookup" },
  tools = { find = { description = "Find one record", impact = "read",
    params = { type = "object", required = { "key" }, properties = {
      key = { type = "string" }, alpha = { type = "string" }, bravo = { type = "integer" },
      charlie = { type = "boolean" }, delta = { type = "string" }, echo = { type = "number" } } },
    run = function(args) return { key = args.key, found = true } end } } }
LUA
python3 - "$WS/fx.json" <<'PY'
import json, sys
steps = [{"text": "", "tool_calls": [{"id": "c%d" % k, "name": "lookup.find",
          "arguments": {"key": "k%d" % k}}]} for k in range(1, 10)]
steps.append({"text": "Found all nine."})
json.dump({"steps": steps}, open(sys.argv[1], "w"))
PY
python3 "$SRC/tests/mock_llm.py" --script "$WS/fx.json" --port-file "$WS/port" --log "$WS/log" &
MP=$!
while [ ! -s "$WS/port" ]; do sleep 0.05; done
printf 'return { providers = { { kind = "%s", base_url = "http://127.0.0.1:%s/v1", model = "m" } } }\n' \
  "$KIND" "$(cat "$WS/port")" > "$WS/luagent.lua"
"$B/luagent" --workspace "$WS" ask --tools 'lookup.*' "look up k1 to k9" > /dev/null 2>&1
python3 - "$WS/log" <<'PY'
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
print("turn  prefix_bytes  previous_bytes  shared_bytes  repeats_previous")
for i, r in enumerate(reqs, 1):
    c = r["cache_prefix"]
    print("%4d  %12d  %14s  %12s  %s" % (i, c["bytes"], c.get("previous_bytes", "-"),
                                         c.get("shared_bytes", "-"), c.get("repeats_previous", "-")))
ok = all(r["cache_prefix"].get("repeats_previous") for r in reqs[1:])
print("turns 2..%d repeat their predecessor's prefix byte for byte: %s" % (len(reqs), ok))
PY
: > "$WS/log"
for i in 1 2 3 4 5; do "$B/luagent" --workspace "$WS" ask --tools 'lookup.*' "x" > /dev/null 2>&1; done
python3 - "$WS/log" <<'PY'
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
n = len(set(json.dumps(r["body"]["tools"]) for r in reqs))
print("distinct tool schema serialisations in %d requests from 5 processes: %d" % (len(reqs), n))
PY
