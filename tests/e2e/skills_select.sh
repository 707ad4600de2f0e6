#!/bin/bash
# luagent skills: the repository's example skills load cleanly, sample
# messages select the right one, unrelated ones select none, --json,
# --explain and --batch formats, and the Lua tools run (notes round trip,
# webcheck against a local HTTP server).
. "$(dirname "$0")/lib/common.sh"
SRC=${LUAGENT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cp -r "$SRC/skills" "$WS/skills"

expect_rc 0 "$LUAGENT" skills check && out_has "3 skill(s) loaded with 9 tool(s); 0 problem(s)" && pass "example skills check clean"
expect_rc 0 "$LUAGENT" skills list && out_has "skills/notes/skill.lua" && out_has "skills/webcheck/skill.lua" \
  && out_has "skills/writing-style/SKILL.md" && out_has "notes.search" && pass "skills list"

# message -> the skill that must be selected first ("-" = none at all)
while IFS='|' read -r want msg; do
  [ -z "$msg" ] && continue
  (cd "$WS" && "$LUAGENT" skills select "$msg") >"$WS/.out" 2>"$WS/.err" || fail "select '$msg' failed"
  got=$(head -n1 "$WS/.out" | awk '{print $1}')
  [ -z "$got" ] && got=-
  if [ "$got" = "$want" ]; then pass "'$msg' -> $want"; else fail "'$msg' selected '$got', wanted '$want'"; fi
done <<'MSGS'
notes|write down that the deploy moved to Friday
notes|jot down the wifi password
notes|search my notes for the invoice number
notes|what did I note about the budget?
webcheck|is example.com up?
webcheck|check if our api health endpoint responds
webcheck|which of our websites are down right now
writing-style|proofread this email for me
writing-style|make this announcement shorter and clearer
writing-style|rewrite my status update in a friendlier tone
-|what's the weather in Paris
-|hello
-|book a flight to Rome for Tuesday
MSGS

expect_rc 0 "$LUAGENT" skills select "please proofread my draft" --json
python3 - "$WS/.out" <<'PY' && pass "--json output" || fail "--json output: $(head -c 400 "$WS/.out")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["selected"][0]["name"] == "writing-style", j
r = j["ranked"]
assert len(r) == 3 and r[0]["selected"] is True
for k in ("bm25", "embed", "fused", "confidence", "rank_bm25", "rank_embed", "keyword_hit", "always"):
    assert k in r[0], k
assert r[0]["fused"] >= r[1]["fused"] >= r[2]["fused"]
assert j["embeddings"] is True
PY
expect_rc 0 "$LUAGENT" skills select "jot down the door code" --explain && out_has "selected: notes" \
  && out_has "below min_confidence" && out_has "[keyword hit]" && out_has "max_skills=3" && pass "--explain"

cat > "$WS/batch.jsonl" <<'JL'
{"id": "a", "query": "write down that the printer is fixed", "gold": ["notes"]}
{"id": 7, "query": "is the status page up?"}

not json
{"id": "c", "query": "make this email friendlier"}
JL
expect_rc 1 "$LUAGENT" skills select --batch batch.jsonl --top 2 && err_has "batch.jsonl:4:" && pass "batch names a bad line and goes on"
python3 - "$WS/.out" <<'PY' && pass "--batch output format" || fail "--batch output: $(head -c 400 "$WS/.out")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["id"] for r in rows] == ["a", 7, "c"], rows
for r in rows:
    assert set(r) == {"id", "ranked"} and 1 <= len(r["ranked"]) <= 2, r
assert rows[0]["ranked"][0] == "notes" and rows[1]["ranked"][0] == "webcheck" and rows[2]["ranked"][0] == "writing-style"
PY
printf '{"id": 1, "query": "hello there"}\n' > "$WS/one.jsonl"
expect_rc 0 "$LUAGENT" skills select --batch one.jsonl && python3 -c '
import json,sys; r=json.loads(open(sys.argv[1]).read()); assert r["id"]==1 and len(r["ranked"])==3, r' "$WS/.out" \
  && pass "batch ignores the confidence cut-off (top 10 default)"
expect_rc 2 "$LUAGENT" skills select && err_has "needs a message" && pass "usage error"
expect_rc 2 "$LUAGENT" skills select x --top 0 && pass "bad --top"

# Lua tools: notes round trip through fs.*
expect_rc 0 "$LUAGENT" skills call notes.add '{"title": "Door code", "text": "4711 since March"}' && out_has '"created":	true' \
  && [ -f "$WS/data/notes/door-code.md" ] && pass "notes.add writes data/notes/door-code.md"
expect_rc 0 "$LUAGENT" skills call notes.search '{"query": "4711"}' && out_has "door-code.md" && out_has "4711 since March" && pass "notes.search finds it"
expect_rc 1 "$LUAGENT" skills call notes.add '{"title": "x"}' && err_has "missing required field 'text'" && pass "schema checked before a Lua tool runs"
expect_rc 1 "$LUAGENT" skills call notes.read '{"title": "nope"}' && err_has "notes.read" && pass "a failing Lua tool reports an error"

# skill tools from a script (`luagent run`) and in `luagent tools list`
cat > "$WS/script.lua" <<'LUA'
tools.call("notes.add", { title = "From a script", text = "composed through tools.call" })
local m = tools.call("notes.search", { query = "composed" }).matches
print("found " .. #m .. " " .. m[1].note)
LUA
expect_rc 0 "$LUAGENT" run script.lua && out_has "found 1 from-a-script.md" && pass "a script calls skill tools"
expect_rc 0 "$LUAGENT" tools list && out_has "notes.search" && out_has "webcheck.check_all" && out_has "fs.read" && pass "tools list shows skill tools"

# webcheck against a local server on the allow-list
PORT=$(free_port)
mkdir -p "$WS/site" && echo "all systems operational" > "$WS/site/status.html"
(cd "$WS/site" && exec python3 -m http.server "$PORT" --bind 127.0.0.1 >/dev/null 2>&1) &
PIDS="$PIDS $!"
for _ in $(seq 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 0.2)" 2>/dev/null && break; sleep 0.1; done
echo 'return { http_allow = { "127.0.0.1" } }' > "$WS/luagent.lua"
expect_rc 0 "$LUAGENT" skills call webcheck.check "{\"url\": \"http://127.0.0.1:$PORT/status.html\", \"contains\": \"operational\"}" \
  && out_has '"ok":	true' && out_has '"status":	200' && pass "webcheck.check up"
expect_rc 0 "$LUAGENT" skills call webcheck.add_target "{\"url\": \"http://127.0.0.1:$PORT/missing.html\"}" && pass "webcheck.add_target"
expect_rc 0 "$LUAGENT" skills call webcheck.check_all && out_has '"down":	1' && out_has "status 404, expected 200" && pass "webcheck.check_all reports the down target"
finish
