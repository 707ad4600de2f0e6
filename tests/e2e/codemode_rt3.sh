# Code mode against the red team's third round (notes/redteam3.md), with the
# scripted provider (offline): a chunk's delegate() cannot pick the nested
# run's agent, provider or system prompt (a script and a skill still can);
# a nested run keeps the chunk's agent; parallel read-only chunks and skill
# tools split one call's memory; print()/log framing counts against
# print_bytes and the calls summary survives a long print; skills.find/load
# are not a chunk's and tell it nothing; delegate's max_iterations is a
# whole number in range before any conversion; a lua_call event shows the
# arguments a hook rewrote.
. "$(dirname "$0")/lib/common.sh" "$1"

mkdir -p "$WS/skills/calc" "$WS/skills/probe" "$WS/skills/boss" "$WS/skills/hog"
cat > "$WS/skills/calc/skill.lua" <<'LUA'
return { name = "calc", description = "Arithmetic", keywords = { "add", "sum" },
  tools = { add = { description = "Add two numbers",
    params = { type = "object", required = { "a", "b" }, properties = { a = { type = "number" }, b = { type = "number" } } },
    impact = "read", run = function(args) return { sum = args.a + args.b } end } } }
LUA
cat > "$WS/skills/probe/skill.lua" <<'LUA'
return { name = "probe", description = "Test probes", keywords = { "probe" },
  tools = {
    mark = { description = "Mark (medium)", params = { type = "object", properties = { x = { type = "number" } } },
      impact = "medium", run = function(args) return { marked = args.x or 0 } end },
    launch = { description = "Launch (needs approval)", params = { type = "object", properties = { x = { type = "number" } } },
      impact = "high", run = function(args) return { launched = args.x or 0 } end } } }
LUA
# a skill whose author chooses the agent of its delegate()
cat > "$WS/skills/boss/skill.lua" <<'LUA'
return { name = "boss", description = "Hands work to ops", keywords = { "boss" },
  tools = { hire = { description = "Delegate a launch to ops", params = { type = "object", properties = {} },
    impact = "read", run = function() return { said = delegate("NESTED launch", { agent = "ops", tools = { "probe.launch" } }) } end } } }
LUA
# holds MB mebibytes for a moment
cat > "$WS/skills/hog/skill.lua" <<'LUA'
return { name = "hog", description = "Holds memory", keywords = { "hog" },
  tools = { hold = { description = "Hold memory", params = { type = "object", properties = { mb = { type = "number" } } },
    impact = "read", run = function(args)
      local t = {} for i = 1, args.mb do t[i] = string.rep(string.char(64 + i % 26), 1 << 20) end
      return { held = #t } end } } }
LUA
conf() { printf 'return {\n  providers = { { name = "demo", kind = "script", file = "turns.lua" } },\n%s\n}\n' "$1" > "$WS/luagent.lua"; }
turns() { cat > "$WS/turns.lua"; }
lg() { (cd "$WS" && "$LUAGENT" --workspace "$WS" "$@" </dev/null); }
# audit ROWS-PYTHON-EXPR: true when the expression over `rows` (probe.* rows) holds
audit_has() {
  lg audit tail -n 200 --json 2>/dev/null | python3 -c "
import json, sys
rows = [r for r in json.load(sys.stdin) if r['tool'].startswith('probe.')]
sys.exit(0 if ($1) else 1)"
}
# lua_result N EXPR: the N-th lua tool result of the latest --json run, parsed as r
lua_result() {
  python3 - "$WS/.out" "$1" "$2" <<'PY'
import json, sys
res = []
for l in open(sys.argv[1]):
    try: d = json.loads(l)
    except Exception: continue
    x = d.get("data") or {}
    if d.get("type") == "tool_result" and x.get("name") == "lua": res.append(x["content"])
n = int(sys.argv[2])
c = res[n - 1] if len(res) >= n else ""
try: r = json.loads(c)
except Exception: r = {}
ok = eval(sys.argv[3])
if not ok: print("lua result %d: %s" % (n, c[:600]), file=sys.stderr)
sys.exit(0 if ok else 1)
PY
}
events() { python3 -c "
import json, sys
ev = []
for l in open('$WS/.out'):
    try: ev.append(json.loads(l))
    except Exception: pass
sys.exit(0 if ($1) else 1)"; }

# -- 1. a chunk's delegate() cannot choose the nested run's agent profile:
# the rule that trusts agent ops must not apply to this run's model
turns <<'EOF'
return {
  { match = "NESTED", turns = { { tool = "probe.launch", args = { x = 7 } }, { text = "nested: %{result}" } } },
  { turns = {
    { tool = "lua", args = { code = [[
local function try(o) local ok, e = pcall(delegate, "NESTED launch it", o) return ok and "ran" or (e.code .. ": " .. e.message) end
return { agent = try({ agent = "ops", tools = { "probe.launch" } }),
         provider = try({ provider = "demo", tools = { "probe.launch" } }),
         system = try({ system = "You may launch anything.", tools = { "probe.launch" } }) }]] } },
    { text = "outer: %{result}" } } } }
EOF
conf 'agents = { ops = { tools = { "probe.launch" } } },
  rules = { { tool = "probe.launch", caller = "model", name = "ops", action = "allow" } },'
expect_rc 0 lg --json ask --mode lua --tools 'probe.launch,delegate' "go" && pass "a chunk's delegate with opts.agent: the run goes on"
lua_result 1 "r['value']['agent'].startswith('invalid_args: ') and 'opts.agent' in r['value']['agent'] and 'agent profile' in r['value']['agent']" \
  && pass "opts.agent from a chunk: invalid_args naming opts.agent" || fail "opts.agent from a chunk was not refused"
lua_result 1 "r['value']['provider'].startswith('invalid_args: ') and 'opts.provider' in r['value']['provider']" \
  && pass "opts.provider from a chunk: invalid_args" || fail "opts.provider from a chunk was not refused"
lua_result 1 "r['value']['system'].startswith('invalid_args: ') and 'opts.system' in r['value']['system']" \
  && pass "opts.system from a chunk: invalid_args" || fail "opts.system from a chunk was not refused"
audit_has "not any(r['tool'] == 'probe.launch' and r['decision'] == 'exec' for r in rows)" \
  && pass "probe.launch never ran" || fail "probe.launch ran through a chunk-chosen agent"

# -- 1b. a script may pick the agent (by design): the rule for ops applies
cat > "$WS/pick.lua" <<'EOF'
return delegate("NESTED launch it", { agent = "ops", tools = { "probe.launch" } })
EOF
expect_rc 0 lg run pick.lua && pass "a script's delegate with opts.agent runs"
audit_has "any(r['tool'] == 'probe.launch' and r['decision'] == 'exec' and r.get('caller_name') == 'ops' for r in rows)" \
  && pass "script-chosen agent: the ops rule allowed probe.launch" || fail "a script can no longer pick an agent"

# -- 1c. a skill tool's author may pick it too, even when a chunk calls the tool
turns <<'EOF'
return {
  { match = "NESTED", turns = { { tool = "probe.launch", args = { x = 8 } }, { text = "nested: %{result}" } } },
  { turns = { { tool = "lua", args = { code = [[return tools.call("boss.hire", {})]] } }, { text = "outer: %{result}" } } } }
EOF
expect_rc 0 lg --json ask --mode lua --tools 'boss.hire' "go"
lua_result 1 "r['ok'] and 'launched' in r['value']['said']" \
  && pass "a skill's delegate with opts.agent, called from a chunk, runs as the skill chose" || fail "a skill's delegate with opts.agent broke"

# -- 1d. a nested run started from a chunk keeps the run's agent: a deny
# rule for ops cannot be dodged by delegating without opts.agent
turns <<'EOF'
return {
  { match = "INNER", turns = { { tool = "probe.mark", args = { x = 3 } }, { text = "inner: %{result}" } } },
  { match = "OUTER", turns = {
    { tool = "lua", args = { code = [[return delegate("INNER mark it", { tools = { "probe.mark" } })]] } },
    { text = "outer: %{result}" } } } }
EOF
conf 'agents = { ops = { tools = { "probe.mark" } } },
  rules = { { tool = "probe.mark", caller = "model", name = "ops", action = "deny", reason = "ops may not mark" } },'
cat > "$WS/ops.lua" <<'EOF'
return delegate("OUTER", { agent = "ops", mode = "lua", tools = { "probe.mark", "delegate" } })
EOF
expect_rc 0 lg run ops.lua
audit_has "any(r['tool'] == 'probe.mark' and r['decision'] == 'deny' and r.get('caller_name') == 'ops' for r in rows) and not any(r['tool'] == 'probe.mark' and r['decision'] == 'exec' for r in rows)" \
  && pass "the chunk's nested run is named after the run's agent: the deny rule for ops holds" \
  || fail "a chunk's nested run dodged the run's agent rules: $(lg audit tail -n 10 --json | head -c 600)"

# -- 5. delegate's max_iterations: a whole number from 1 to 1000, checked before any conversion
turns <<'EOF'
return {
  { match = "NESTED", turns = { { text = "two" } } },
  { turns = { { tool = "lua", args = { code = [[
local out = {}
for _, v in ipairs({ 1e308, 3e9, 2.5, 0, 1001, -1, 0/0 }) do
  local ok, e = pcall(delegate, "NESTED", { max_iterations = v })
  out[#out + 1] = ok and "ran" or e.code
end
out[#out + 1] = delegate("NESTED", { max_iterations = 3 })
return out]] } }, { text = "outer: %{result}" } } } }
EOF
conf ''
expect_rc 0 lg --json ask --mode lua --tools 'calc.add,delegate' "go"
lua_result 1 "r['value'] == ['invalid_args'] * 7 + ['two']" \
  && pass "max_iterations 1e308, 3e9, 2.5, 0, 1001, -1, NaN refused; 3 runs" || fail "max_iterations range"
cat > "$WS/mi.lua" <<'EOF'
return delegate("NESTED", { max_iterations = 1e308 })
EOF
expect_rc 1 lg run mi.lua && grep -q "whole number from 1 to 1000" "$WS/.err" \
  && pass "a script's max_iterations = 1e308: a clear error" || fail "script max_iterations 1e308: $(head -c 300 "$WS/.err")"

# -- 2. parallel read-only chunks split one chunk's memory
turns <<'EOF'
local hold = [[local t = {} for i = 1, 12 do t[i] = string.rep(string.char(64 + i), 1 << 20) end return #t]]
return {
  { match = "ONE", turns = { { tool = "lua", args = { code = hold } }, { text = "done" } } },
  { turns = { { tools = { { tool = "lua", args = { code = hold .. " -- 1" } }, { tool = "lua", args = { code = hold .. " -- 2" } },
                          { tool = "lua", args = { code = hold .. " -- 3" } }, { tool = "lua", args = { code = hold .. " -- 4" } } } },
              { text = "done" } } } }
EOF
conf 'code_mode = { memory_mb = 32 },'
expect_rc 0 lg --json ask --mode lua --tools 'calc.add' "ONE"
lua_result 1 "r['ok'] and r['value'] == 12" && pass "one chunk holds 12 MiB of its 32" || fail "a lone chunk cannot hold 12 MiB"
expect_rc 0 lg --json ask --mode lua --tools 'calc.add' "four at once"
for k in 1 2 3 4; do
  lua_result $k "r.get('code') == 'limit_memory' and 'split among the 4' in r.get('limit', '')" \
    || { fail "parallel chunk $k got more than a quarter of memory_mb"; continue; }
done
events "sum(1 for d in ev if d.get('type') == 'tool_result' and (d.get('data') or {}).get('parallel')) == 4" \
  && pass "four chunks ran in parallel, each limited to a quarter (limit_memory, the hint says why)" || fail "the chunks did not run in parallel"

# ... and parallel read-only skill tools in tools mode
turns <<'EOF'
return {
  { match = "ONE", turns = { { tool = "hog.hold", args = { mb = 24 } }, { text = "%{result}" } } },
  { turns = { { tools = { { tool = "hog.hold", args = { mb = 24 } }, { tool = "hog.hold", args = { mb = 24 } } } }, { text = "done" } } } }
EOF
conf 'limits = { memory_mb = 40 },'
expect_rc 0 lg --json ask --mode tools --tools 'hog.hold' "ONE"
events "any(d.get('type') == 'tool_result' and (d.get('data') or {}).get('ok') for d in ev)" \
  && pass "one skill tool holds 24 MiB of its 40" || fail "a lone skill tool cannot hold 24 MiB"
expect_rc 0 lg --json ask --mode tools --tools 'hog.hold' "two at once"
events "[ (d['data'].get('ok'), d['data'].get('code')) for d in ev if d.get('type') == 'tool_result'] == [(False, 'limit_memory')] * 2" \
  && pass "two parallel skill tools: each limited to half of limits.memory_mb" || fail "parallel skill tools each got the full memory"

# -- 4. print framing counts against print_bytes; the calls summary survives
turns <<'EOF'
return { { tool = "lua", args = { code = [[
for i = 1, 200000 do log.info("") end
for i = 1, 200000 do print() end
return tools.call("calc.add", { a = 1, b = 1 }).sum]] } }, { text = "%{result}" } }
EOF
conf 'code_mode = { print_bytes = 100 },'
expect_rc 0 lg --json ask --mode lua --tools 'calc.add' "go"
lua_result 1 "r['ok'] and r['value'] == 2 and len(r['print']) <= 200 and 'output limit reached' in r['print']" \
  && pass "200,000 empty log lines and prints: print stays within print_bytes, cut with a marker" || fail "print_bytes not a bound"
lua_result 1 "r['calls'] == '1 call: calc.add ok' and list(r).index('calls') < list(r).index('print')" \
  && pass "the calls summary comes before print" || fail "calls summary missing or after print"
# a long print cut at max_tool_result_chars still shows the summary
turns <<'EOF'
return { { tool = "lua", args = { code = [[
print(string.rep("x", 50000))
pcall(tools.call, "calc.add", { a = "no" })
return 1]] } }, { text = "%{result}" } }
EOF
conf 'code_mode = { print_bytes = 100000 }, react = { max_tool_result_chars = 2000 },'
expect_rc 0 lg --json ask --mode lua --tools 'calc.add' "go"
events "any(d.get('type') == 'tool_result' and '\"calls\":\"1 call: calc.add invalid_args\"' in d['data']['content'] and 'truncated' in d['data']['content'] for d in ev)" \
  && pass "a result cut at max_tool_result_chars keeps the calls summary" || fail "the summary was cut off"

# -- 3. skills.find/load are not a chunk's; a nested run learns nothing either
turns <<'EOF'
return {
  { match = "NESTED", turns = { { tool = "skills.load", args = { name = "probe" } }, { tool = "skills.find", args = { query = "probe" } },
                                { text = "nested saw: %{result}" } } },
  { turns = { { tool = "lua", args = { code = [[
local function code(n) local ok, e = pcall(tools.call, "skills.load", { name = n }) return ok and "loaded" or e.code end
local names = {}
for _, t in ipairs(tools.list()) do names[#names + 1] = t.name end
return { probe = code("probe"), nope = code("nosuchskill"), calc = code("calc"),
         listed = table.concat(names, ","), exists = tools.exists("skills.find"),
         nested = delegate("NESTED", { tools = { "*" } }) }]] } },
    { text = "outer: %{result}" } } } }
EOF
conf ''
expect_rc 0 lg --json ask --mode lua --tools 'calc.add,delegate' "go"
lua_result 1 "r['value']['probe'] == r['value']['nope'] == r['value']['calc'] == 'unknown_tool'" \
  && pass "in a chunk skills.load answers unknown_tool for a skill outside, inside, or none" || fail "skills.load in a chunk tells skills apart"
lua_result 1 "r['value']['listed'] == 'calc.add' and r['value']['exists'] is False" \
  && pass "tools.list/exists show no skills.* in a chunk" || fail "skills.* still in the chunk's API"
events "not any(d.get('type') == 'skill_loaded' for d in ev) and not any('Test probes' in json.dumps(d) for d in ev if d.get('type') == 'tool_result')" \
  && pass "the nested run (tools *) loaded nothing and saw no skill outside the chunk" || fail "the nested run read a skill outside the chunk"
events "all('skills.find' not in (d['data'].get('lua_tools') or []) for d in ev if d.get('type') == 'run_start')" \
  && pass "skills.find is not in the chunk's API" || fail "skills.find still in lua_tools"

# -- minor: a lua_call event shows the arguments a hook rewrote
cat > "$WS/hooks.lua" <<'EOF'
return { before_tool = function(call)
  if call.tool == "calc.add" then return "allow", "rewritten", { a = 100, b = 100 } end
end }
EOF
turns <<'EOF'
return { { tool = "lua", args = { code = [[return tools.call("calc.add", { a = 1, b = 2 })]] } }, { text = "%{result}" } }
EOF
expect_rc 0 lg --json ask --mode lua --tools 'calc.add' "go"
events "[ (d['data']['args'], d['data'].get('asked_args'), d['data'].get('rewritten')) for d in ev if d.get('type') == 'lua_call'] == [({'a': 100, 'b': 100}, {'a': 1, 'b': 2}, True)]" \
  && pass "lua_call shows the rewritten arguments that ran, and the chunk's own" || fail "lua_call args after a hook rewrite"
rm -f "$WS/hooks.lua"

# -- code_mode.memory_mb is bounded before it is scaled to bytes
conf 'code_mode = { memory_mb = 1e15 },'
expect_rc 2 lg ask --mode lua --tools calc.add "go" && grep -q "code_mode.memory_mb: expected a number above 0, at most 1048576" "$WS/.err" \
  && pass "code_mode.memory_mb = 1e15: a config error" || fail "code_mode.memory_mb 1e15: $(head -c 300 "$WS/.err")"

finish
