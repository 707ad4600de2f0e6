#!/bin/bash
# e2e: the scripted provider (kind = "script"): ask, chat-like restarts,
# alternatives, files, parallel and malformed tool calls, approvals,
# delegate(), refusals, truncation, errors and fallback - all offline.
set -u
. "$(dirname "$0")/lib/common.sh"

conf() { printf 'return {\n%s\n}\n' "$1" > "$WS/luagent.lua"; }

# 1. a tool call, then an answer quoting the tool's result; again (nothing is used up)
conf 'providers = { { name = "demo", kind = "script", turns = {
  { text = "Checking.", tool = "echo", args = { text = "hi" } },
  { text = "The tool said: %{result}" } } } },'
for n in 1 2; do
  expect_rc 0 "$LUAGENT" ask "say hi" && out_has 'The tool said: {"text":"hi"}' && pass "ask $n: tool call and answer"
done
expect_rc 0 "$LUAGENT" --json ask "say hi" &&
  python3 - "$WS/.out" <<'PY' && pass "--json: the answer and the call are reported" || fail "ask --json: $(head -c 400 "$WS/.out")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
last = lines[-1]
assert "The tool said" in json.dumps(last), last
PY

# 2. alternatives by match, a default, %{user}; no match and no default names the message
conf 'providers = { { kind = "script", turns = {
  { match = "WEATHER", turns = { { text = "sunny" } } },
  { match = "note", turns = { { text = "noted" } } } } } },'
expect_rc 0 "$LUAGENT" ask "what is the weather" && out_has "sunny" && pass "match is case-insensitive"
expect_rc 0 "$LUAGENT" ask "take a note" && out_has "noted" && pass "second alternative"
expect_rc 1 "$LUAGENT" ask "something else" && err_has 'no alternative' && err_has 'something else' && pass "no match: named"
conf 'providers = { { kind = "script", turns = { { match = "x", turns = { { text = "x" } } }, { turns = { { text = "You said: %{user}" } } } } } },'
expect_rc 0 "$LUAGENT" ask "hello there" && out_has "You said: hello there" && pass "default alternative and %{user}"

# 3. past the last turn: the error names the script and the turn
conf 'providers = { { kind = "script", turns = { { tool = "echo", args = { a = 1 } } } } },'
expect_rc 1 "$LUAGENT" ask "go" && err_has "has no turn 2" && err_has "providers[1].turns" && pass "exhausted script: named"

# 4. files: Lua data and JSON, relative to the workspace (not the current folder)
conf 'providers = { { kind = "script", file = "turns.lua" } },'
echo 'return { { text = "from a lua file" } }' > "$WS/turns.lua"
mkdir -p "$WS/sub"
(cd "$WS/sub" && "$LUAGENT" --workspace "$WS" ask "x") 2>&1 | grep -q "from a lua file" && pass "file = turns.lua, relative to the workspace" || fail "turns.lua not read from the workspace"
conf 'providers = { { kind = "script", file = "turns.json" } },'
echo '[{"text":"from json"}]' > "$WS/turns.json"
expect_rc 0 "$LUAGENT" ask "x" && out_has "from json" && pass "file = turns.json"
echo '[{"text":"a","text":"b"}]' > "$WS/turns.json"
expect_rc 2 "$LUAGENT" ask "x" && err_has "turns.json" && pass "a JSON script with a repeated key is refused"
conf 'providers = { { kind = "script", file = "missing.lua" } },'
expect_rc 2 "$LUAGENT" ask "x" && err_has "missing.lua" && pass "a missing file is named"
echo 'return { { text = "x" }, function() end }' > "$WS/turns.lua"
conf 'providers = { { kind = "script", file = "turns.lua" } },'
expect_rc 2 "$LUAGENT" ask "x" && err_has "turns.lua[2]" && err_has "data only" && pass "a function in the script is refused"
echo 'while true do end' > "$WS/turns.lua"
expect_rc 2 timeout 30 "$LUAGENT" ask "x" && err_has "turns.lua" && pass "a script file that loops is stopped"

# 5. a bad turn is a config error naming the key path, at load, before any call
conf 'providers = { { kind = "script", turns = { { txt = "x" } } } },'
expect_rc 2 "$LUAGENT" ask "x" && err_has "providers[1].turns[1]: unknown key 'txt'" && pass "unknown turn key named"
conf 'providers = { { kind = "script", base_url = "http://127.0.0.1:1", turns = { { text = "x" } } } },'
expect_rc 2 "$LUAGENT" ask "x" && err_has "reaches no server" && pass "base_url on a script provider refused"
conf 'providers = { { kind = "openai", model = "m", turns = { { text = "x" } } } },'
expect_rc 2 "$LUAGENT" ask "x" && err_has 'turns and file belong to kind = "script"' && pass "turns on a real provider refused"
conf 'providers = { { kind = "script", turns = { { tool = "echo", tools = { { tool = "echo" } } } } } },'
expect_rc 2 "$LUAGENT" ask "x" && err_has "not both" && pass "tool and tools together refused"

# 6. raw JSON arguments go through the pipeline as a model's would: a repeated key is refused
conf 'providers = { { kind = "script", turns = {
  { tool = "echo", args = "{\"path\":\"a\",\"path\":\"b\"}" },
  { text = "result: %{result}" } } } },'
expect_rc 0 "$LUAGENT" ask "x" && out_has "invalid_args" && out_has "path" && pass "malformed arguments from the script are refused by the pipeline"

# 7. parallel calls in one answer, and a tool that is not offered
conf 'providers = { { kind = "script", turns = {
  { tools = { { tool = "echo", args = { n = 1 } }, { tool = "echo", args = { n = 2 } }, { tool = "nothere.tool" } } },
  { text = "done: %{result}" } } } },'
expect_rc 0 "$LUAGENT" ask "x" && err_has "nothere.tool" && out_has "done:" && pass "parallel calls; an unknown tool is reported to the model"
grep -c '^<- echo ok' "$WS/.err" | grep -q '^2$' && pass "both echo calls ran" || fail "expected two echo results: $(cat "$WS/.err")"

# 8. refusal (exit 3), truncation (exit 4), an error turn falls through to the next provider
conf 'providers = { { kind = "script", turns = { { refusal = "I will not." } } } },'
expect_rc 3 "$LUAGENT" ask "x" && err_has "I will not." && pass "refusal: exit 3"
conf 'providers = { { kind = "script", turns = { { text = "half an ans", finish = "length" } } } },'
expect_rc 4 "$LUAGENT" ask "x" && pass "truncated: exit 4"
conf 'providers = { { name = "a", kind = "script", turns = { { error = "overloaded" } } },
                    { name = "b", kind = "script", turns = { { text = "b answered" } } } },'
expect_rc 0 "$LUAGENT" ask "x" && out_has "b answered" && pass "an error turn falls through to the next provider"
conf 'providers = { { name = "a", kind = "script", turns = { { error = "overloaded" } } } },'
expect_rc 1 "$LUAGENT" ask "x" && err_has "a: overloaded" && pass "an error turn is a provider error"

# 9. delegate() from a script uses it too, with its tool allow-list
conf 'providers = { { kind = "script", turns = {
  { tool = "echo", args = { v = "ok" } }, { text = "delegated: %{result}" } } } },'
cat > "$WS/d.lua" <<'LUA'
local r = delegate("use echo", { tools = { "echo" } })
print(r.text or r)
LUA
expect_rc 0 "$LUAGENT" run d.lua && out_has 'delegated: {"v":"ok"}' && pass "delegate() with the scripted provider"
cat > "$WS/d2.lua" <<'LUA'
local ok, err = pcall(delegate, "use echo", { tools = { "fs.read" } })
print(ok, type(err) == "table" and err.code or err)
LUA
expect_rc 0 "$LUAGENT" run d2.lua
grep -q '<- echo ok' "$WS/.err" && fail "delegate() ran echo outside its allow-list" || pass "the allow-list holds for scripted calls"

# 10. an approval: the scripted model asks to delete; the queue decides from another process
conf 'approver = "queue", approval_timeout_s = 30,
providers = { { kind = "script", turns = {
  { tool = "fs.delete", args = { path = "old.txt" } }, { text = "after: %{result}" } } } },'
mkdir -p "$WS/data" && echo x > "$WS/data/old.txt"
(cd "$WS" && timeout 60 "$LUAGENT" ask "delete old.txt" </dev/null >"$WS/ask.out" 2>&1) &
APID=$!; PIDS="$PIDS $APID"
id=""
for _ in $(seq 1 100); do
  id=$(cd "$WS" && "$LUAGENT" approvals list --json 2>/dev/null | python3 -c '
import json, sys
t = sys.stdin.read().strip()
rows = json.loads(t) if t.startswith("[") else [json.loads(l) for l in t.splitlines() if l.strip()]
p = [r for r in rows if r.get("status") == "pending"]
print(p[0]["id"] if p else "")' 2>/dev/null)
  [ -n "$id" ] && break
  sleep 0.2
done
if [ -z "$id" ]; then fail "no pending approval for the scripted fs.delete: $(cat "$WS/ask.out")"; else
  [ -e "$WS/data/old.txt" ] && pass "the delete waits for the approver" || fail "deleted before approval"
  (cd "$WS" && "$LUAGENT" approvals approve "$id" >/dev/null) || fail "approve failed"
  wait $APID && grep -q "after:" "$WS/ask.out" && [ ! -e "$WS/data/old.txt" ] &&
    pass "approved: the scripted ask continues and the delete ran" || fail "ask after approval: $(cat "$WS/ask.out")"
fi

# 11. a tool name is the model's text: it cannot drive the operator's terminal
conf 'providers = { { kind = "script", turns = {
  { tool = "evil\r\27[2K<- fs.delete ok (0.1 ms): deleted\n\27[8m" }, { text = "done" } } } },'
expect_rc 0 "$LUAGENT" ask "x"
if LC_ALL=C grep -q $'\x1b\|\r' "$WS/.err"; then fail "a raw ESC or CR from a tool name reached stderr: $(od -c "$WS/.err" | head -5)"
else pass "tool names are escaped on the terminal"; fi
grep -q '^<- fs.delete ok' "$WS/.err" && fail "a forged result line starts a line" || pass "no forged line"
finish
