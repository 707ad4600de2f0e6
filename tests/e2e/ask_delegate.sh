# delegate() from a Lua script (luagent run): a schema-checked table, a
# schema_mismatch after a failed repair round, budget_exceeded when the
# run's budget is spent, no_provider with how to configure one, the tool
# restriction, and the nested run in the journal.
. "$(dirname "$0")/lib/mock.sh" "$1"
printf '3 hostile contacts' > "$WS/data/contacts.txt"

# -- schema-checked table, with a tool call inside
start_mock m '{"steps":[
  {"tool_calls":[{"id":"c1","name":"fs.read","arguments":{"path":"contacts.txt"}}]},
  {"text":"```json\n{\"alert\": true, \"count\": 3}\n```"}]}'
config "providers = { $(provider openai $PORT_m) }"
cat > "$WS/ok.lua" <<'LUA'
local v = delegate("Which contacts need an alert?", {
  tools = { "fs.read" },
  schema = { type = "object", required = { "alert", "count" },
             properties = { alert = { type = "boolean" }, count = { type = "integer" } } },
})
assert(type(v) == "table", "expected a table, got " .. type(v))
assert(v.alert == true and v.count == 3, "wrong values")
print("alert=" .. tostring(v.alert) .. " count=" .. v.count)
LUA
lrun "$WS/ok.lua"
expect_rc 0 "schema-checked table returned"
expect_out "alert=true count=3" "decoded values"
check m "[t['function']['name'] for t in reqs[0]['body']['tools']] == ['fs__read']" "only opts.tools offered"
check m "'JSON Schema' in msgs(0)[-1]['content']" "the schema is in the prompt"
check m "msgs(1)[-1]['role'] == 'tool' and '3 hostile' in msgs(1)[-1]['content']" "the tool ran as the model asked"
OUT=$("$LUAGENT" --workspace "$WS" runs list --json | python3 "$(dirname "$0")/lib/jsonl.py"); RC=0
printf '%s\n' "$OUT" | grep -q '"kind":"delegate".*"status":"ok"' && ok "delegate run journaled" || fail "delegate not in the journal"
stop_mocks

# -- schema mismatch, a repair round, still wrong -> schema_mismatch
start_mock m '{"steps":[{"text":"{\"alert\": \"yes\"}"},{"text":"still not json"}]}'
config "providers = { $(provider anthropic $PORT_m) }"
cat > "$WS/bad.lua" <<'LUA'
local ok, err = pcall(delegate, "Alert?", {
  schema = { type = "object", required = { "alert" }, properties = { alert = { type = "boolean" } } } })
assert(not ok, "expected an error")
print("code=" .. tostring(err.code))
print("msg=" .. tostring(err.message))
LUA
lrun "$WS/bad.lua"
expect_rc 0 "script handled the error with pcall"
expect_out "code=schema_mismatch" "err.code schema_mismatch"
expect_out "after one repair round" "message says a repair was tried"
check m "len(reqs) == 2 and 'does not match' in str(msgs(1)[-1]['content'])" "one repair round sent"
stop_mocks

# -- a repaired answer is accepted
start_mock m '{"steps":[{"text":"{\"alert\": \"yes\"}"},{"text":"{\"alert\": false}"}]}'
config "providers = { $(provider openai $PORT_m) }"
cat > "$WS/fix.lua" <<'LUA'
local v = delegate("Alert?", { schema = { type = "object", required = { "alert" },
  properties = { alert = { type = "boolean" } } } })
print("repaired alert=" .. tostring(v.alert))
LUA
lrun "$WS/fix.lua"
expect_rc 0 "repair round fixed it"
expect_out "repaired alert=false" "repaired value"
stop_mocks

# -- budget: two delegates share the run's budget (react.max_model_calls = 3)
start_mock m '{"steps":[{"tool_calls":[{"id":"c1","name":"echo","arguments":{"n":1}}]},{"text":"first done"},
  {"tool_calls":[{"id":"c2","name":"echo","arguments":{"n":2}}]},{"text":"never reached"}]}'
config "providers = { $(provider openai $PORT_m) }, react = { max_model_calls = 3 }"
cat > "$WS/budget.lua" <<'LUA'
local a = delegate("first", { tools = { "echo" } })
print("first: " .. a)
local ok, err = pcall(delegate, "second", { tools = { "echo" } })
assert(not ok)
print("code=" .. err.code)
print("msg=" .. err.message)
-- max_iterations limits one delegate on its own
local ok2, err2 = pcall(delegate, "third", { tools = { "echo" }, max_iterations = 1 })
print("third=" .. tostring(err2 and err2.code))
LUA
lrun "$WS/budget.lua"
expect_rc 0 "budget script ran"
expect_out "first: first done" "first delegate answered"
expect_out "code=budget_exceeded" "second raises budget_exceeded"
expect_out "the caller's model call limit reached (3 of 3)" "names the parent's limit"
expect_out "third=budget_exceeded" "the exhausted parent budget also stops a third"
check m "len(reqs) == 3" "never more model calls than the parent allowed"
stop_mocks

# -- no provider: a clear error that says how to configure one
rm -f "$WS/luagent.lua"
cat > "$WS/noprov.lua" <<'LUA'
local ok, err = pcall(delegate, "hello")
print("code=" .. err.code)
print("msg=" .. err.message)
LUA
lrun "$WS/noprov.lua"
expect_rc 0 "no provider handled"
expect_out "code=no_provider" "err.code no_provider"
expect_out "LUAGENT_PROVIDER" "says which variables to set"
# uncaught, it fails the script with exit 1 and the reason
printf 'delegate("hello")\n' > "$WS/noprov2.lua"
lrun "$WS/noprov2.lua"
expect_rc 1 "uncaught no_provider fails the script"
expect_err "no model provider configured" "reason shown"

# -- bad options
config "providers = { $(provider openai 9) }"
cat > "$WS/opts.lua" <<'LUA'
for _, o in ipairs({ { tools = { "nosuch.*" } }, { colour = 1 }, { max_iterations = 0 }, { agent = "ghost" } }) do
  local ok, err = pcall(delegate, "x", o)
  print(err.code .. ": " .. err.message)
end
LUA
lrun "$WS/opts.lua"
expect_out "invalid_args: delegate: opts.tools: no tool matches 'nosuch.*'" "unknown tool pattern"
expect_out "unknown option 'colour'" "unknown option"
expect_out "max_iterations must be a whole number from 1 to 1000" "bad max_iterations"
expect_out "no agent profile 'ghost'" "unknown agent"

# -- agent profile supplies system prompt and tools
start_mock m '{"steps":[{"text":"profiled"}]}'
config "providers = { $(provider openai $PORT_m) }, agents = { analyst = { system = \"You are the analyst.\", tools = { \"time.*\" } } }"
printf 'print(delegate("hi", { agent = "analyst" }))\n' > "$WS/agent.lua"
lrun "$WS/agent.lua"
expect_out "profiled" "agent profile run"
check m "msgs(0)[0]['content'] == 'You are the analyst.' and [t['function']['name'] for t in reqs[0]['body']['tools']] == ['time__now']" "agent system and tools used"
finish
