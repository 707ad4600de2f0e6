#!/bin/bash
# Embeddings from an OpenAI-compatible endpoint (a fake one on 127.0.0.1):
# vectors are cached in .luagent/state.db so a restart embeds only the
# message; an endpoint that fails (HTTP 500, or nothing listening) degrades
# to keyword-only selection with a warning, never to no selection.
. "$(dirname "$0")/lib/common.sh"
SRC=${LUAGENT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cp -r "$SRC/skills" "$WS/skills"
python3 "$SRC/tests/e2e/skills_fake_embed.py" "$WS/port" "$WS/requests.log" &
PIDS="$PIDS $!"
for _ in $(seq 50); do [ -s "$WS/port" ] && break; sleep 0.1; done
PORT=$(cat "$WS/port")
[ -n "$PORT" ] || { fail "fake embedding server did not start"; finish; }

use() { printf 'return { embeddings = { kind = "openai", base_url = "%s", model = "fake-26", timeout_s = 5 } }\n' "$1" > "$WS/luagent.lua"; }
MSG="write down that the deploy moved to Friday"

use "http://127.0.0.1:$PORT/ok/v1"
expect_rc 0 "$LUAGENT" skills select "$MSG" --json
python3 - "$WS/.out" <<'PY' && pass "openai embeddings used" || fail "openai select: $(head -c 400 "$WS/.out")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["embeddings"] is True and "warning" not in j, j
assert j["selected"][0]["name"] == "notes"
assert any(r["embed"] != 0 for r in j["ranked"])
PY
# the skills have examples (15 in all); those are scored with the builtin
# embedding only: the endpoint sees the 3 skills and the message (15 would
# be the examples)
[ "$(grep -c '/ok/v1/embeddings 3$' "$WS/requests.log")" = 1 ] && ! grep -qvE '/ok/v1/embeddings [13]$' "$WS/requests.log" \
  && pass "first run embeds the 3 skills in one request (examples not sent)" || fail "requests: $(cat "$WS/requests.log")"
python3 - "$WS/.luagent/state.db" <<'PY' && pass "3 vectors in embed_cache" || fail "embed_cache rows"
import sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute("select model, dim from embed_cache").fetchall()
assert len(rows) == 3, rows
assert all(m.startswith("openai:http://127.0.0.1:") and m.endswith("/ok/v1:fake-26") and d == 26 for m, d in rows), rows
PY
: > "$WS/requests.log"
expect_rc 0 "$LUAGENT" skills select "$MSG" && out_has "notes" && pass "second run selects"
[ "$(cat "$WS/requests.log")" = "/ok/v1/embeddings 1" ] && pass "restart embeds only the message (cache hit)" || fail "second run requests: $(cat "$WS/requests.log")"

# commands that only run tools never build the selection index
echo 'print(tools.exists("notes.add"))' > "$WS/t.lua"
: > "$WS/requests.log"
expect_rc 0 "$LUAGENT" run t.lua && out_has "true" && expect_rc 0 "$LUAGENT" tools list \
  && [ ! -s "$WS/requests.log" ] && pass "run and tools list do not call the embedding endpoint" \
  || fail "run/tools list requests: $(cat "$WS/requests.log")"

# a changed skill is embedded again, the others come from the cache
sed -i 's/Keep workspace notes/Keep short workspace notes/' "$WS/skills/notes/skill.lua"
: > "$WS/requests.log"
expect_rc 0 "$LUAGENT" skills select "$MSG" && grep -q '/ok/v1/embeddings 1' "$WS/requests.log" \
  && [ "$(wc -l < "$WS/requests.log")" = 2 ] && pass "only the changed skill is re-embedded" || fail "after edit: $(cat "$WS/requests.log")"

# HTTP 500: warning, keyword-only, still selects
use "http://127.0.0.1:$PORT/fail/v1"
expect_rc 0 "$LUAGENT" skills select "$MSG" && out_has "notes" && err_has "warning" && err_has "HTTP 500" \
  && err_has "keywords only" && pass "HTTP 500 degrades to keyword-only with a warning"
expect_rc 0 "$LUAGENT" skills select "$MSG" --json
python3 - "$WS/.out" <<'PY' && pass "--json marks keyword-only" || fail "--json fail mode: $(head -c 300 "$WS/.out")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["embeddings"] is False and "HTTP 500" in j["warning"] and j["selected"][0]["name"] == "notes", j
PY
printf '{"id": 1, "query": "proofread my email"}\n' > "$WS/q.jsonl"
expect_rc 0 "$LUAGENT" skills select --batch q.jsonl && out_has '"ranked":["writing-style"' && pass "batch works keyword-only"

# nothing listening
DEAD=$(free_port)
use "http://127.0.0.1:$DEAD/v1"
expect_rc 0 "$LUAGENT" skills select "is example.com up?" && out_has "webcheck" && err_has "keywords only" && pass "unreachable endpoint degrades too"

# a config mistake is a configuration error (exit 2) naming the key
echo 'return { embeddings = { kind = "openai", model = "x" } }' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" skills list && err_has "base_url" && pass "openai without base_url is a config error"
echo 'return { selection = { max_skills = "three" } }' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" skills list && err_has "selection.max_skills" && pass "bad selection key type is a config error"
echo 'return { selection = { max_skills = 1, min_confidence = 0 } }' > "$WS/luagent.lua"
expect_rc 0 "$LUAGENT" skills select "notes about website writing" && [ "$(wc -l < "$WS/.out")" = 1 ] && pass "max_skills from config"
finish
