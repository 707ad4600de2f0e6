# A skill's tool calls reuse its sandboxes (issue 20), and no state leaks
# from one call to the next: a tool plants state everywhere a script can
# reach (globals, _G, module tables, upvalues, a suspended coroutine, the
# random generator, the shared libraries and the string metatable, load(),
# 4 MiB of memory), then a probe in a later call of the same skill looks
# for each of them. Sequential calls, calls nested in a skill tool, after a
# failed call, and the model's parallel calls.
. "$(dirname "$0")/lib/mock.sh" "$1"
mkdir -p "$WS/skills/leak"
cat > "$WS/skills/leak/skill.lua" <<'LUA'
local counter = 0 -- an upvalue of every tool
local cache = {}  -- a table the tools share
local parked      -- a coroutine left suspended
local M
local function plant()
  counter = counter + 1
  cache.secret = "planted"
  leaked_global = "planted"
  _G.leaked_g = "planted"
  parked = coroutine.create(function() coroutine.yield() return "resumed" end)
  coroutine.resume(parked)
  M.tools.plant.marker = "planted"
  local tries = {
    string_lib = pcall(function() string.leak = "planted" end),
    rawset_string = pcall(rawset, string, "leak", "planted"),
    string_mt = pcall(function() getmetatable("").__index.leak = "planted" end),
    setmt_string = pcall(setmetatable, string, {}),
    tools_lib = pcall(function() tools.leak = "planted" end),
    json_lib = pcall(function() json.leak = "planted" end),
    math_lib = pcall(function() math.leak = "planted" end),
    os_lib = pcall(function() os.leak = "planted" end),
    coroutine_lib = pcall(function() coroutine.leak = "planted" end),
    env_mt = pcall(setmetatable, _ENV, { __index = function() return "planted" end }),
    require = pcall(require, "leak"),
    package = pcall(function() return package end),
    debug = pcall(function() return debug end),
    gc = pcall(setmetatable, {}, { __gc = function() end }),
  }
  pcall(function() load("loaded_global = 'planted'")() end)
  math.randomseed(42)
  cache.big = string.rep("x", 4 << 20)
  return { counter = counter, tries = tries }
end
local function probe()
  counter = counter + 1
  local draw = math.random(1 << 30)
  math.randomseed(42)
  local seeded = math.random(1 << 30)
  local leaks = {}
  local function check(what, bad) if bad then leaks[#leaks + 1] = what end end
  check("upvalue counter " .. counter, counter ~= 1)
  check("module-level table", cache.secret ~= nil or cache.big ~= nil)
  check("global", rawget(_ENV, "leaked_global") ~= nil)
  check("_G", rawget(_G, "leaked_g") ~= nil)
  check("suspended coroutine", parked ~= nil)
  check("module table", M.tools.plant.marker ~= nil)
  check("string library", string.leak ~= nil)
  check("tools library", tools.leak ~= nil)
  check("json library", json.leak ~= nil)
  check("math library", math.leak ~= nil)
  check("load()", rawget(_ENV, "loaded_global") ~= nil)
  check("random generator left seeded", draw == seeded)
  return { leaks = leaks, kb = collectgarbage("count") }
end
M = {
  name = "leak",
  description = "Plants state and probes for it",
  tools = {
    plant = { description = "plant", impact = "read", params = { type = "object" }, run = plant },
    probe = { description = "probe", impact = "read", params = { type = "object" }, run = probe },
    plant_fail = { description = "plant, then fail", impact = "read", params = { type = "object" },
      run = function() plant() error("failing after planting") end },
    chain = { description = "plant and probe from inside a skill", impact = "read",
      params = { type = "object" },
      run = function()
        tools.call("leak.plant", {})
        return tools.call("leak.probe", {})
      end },
  },
}
return M
LUA
cat > "$WS/attack.lua" <<'LUA'
local function report(label, p)
  if #p.leaks == 0 then print("clean " .. label) end
  for _, l in ipairs(p.leaks) do print("LEAK " .. label .. ": " .. l) end
end
local first = tools.call("leak.probe", {})
report("first probe", first)
for i = 1, 3 do
  local p = tools.call("leak.plant", {})
  if p.counter ~= 1 then print("LEAK plant " .. i .. " saw counter " .. p.counter) end
  for k, ok in pairs(p.tries) do if ok then print("LEAK plant " .. i .. " could write " .. k) end end
  local q = tools.call("leak.probe", {})
  report("probe after plant " .. i, q)
  if q.kb > first.kb + 256 then
    print(string.format("LEAK memory: %.0f KiB after the plant, %.0f KiB before", q.kb, first.kb))
  end
end
report("probe nested in a skill", tools.call("leak.chain", {}))
print("fail: " .. tostring(pcall(tools.call, "leak.plant_fail", {})))
report("probe after a failed call", tools.call("leak.probe", {}))
LUA
lrun "$WS/attack.lua"
expect_rc 0 "the attack script ran"
for what in "first probe" "probe after plant 1" "probe after plant 2" "probe after plant 3" \
  "probe nested in a skill" "probe after a failed call"; do
  expect_out "clean $what" "$what: nothing of an earlier call is reachable"
done
expect_out "fail: false" "the failing call failed"
case "$OUT" in *LEAK*) fail "leaks: $(printf '%s\n' "$OUT" | grep LEAK | head -5)" ;; *) ok "no LEAK line" ;; esac

# The model's calls: read-only, so one round runs them in parallel threads
start_mock m '{"steps":[
  {"tool_calls":[{"id":"a","name":"leak.plant","arguments":{}},{"id":"b","name":"leak.probe","arguments":{}},
                 {"id":"c","name":"leak.plant","arguments":{}},{"id":"d","name":"leak.probe","arguments":{}}]},
  {"tool_calls":[{"id":"e","name":"leak.probe","arguments":{}},{"id":"f","name":"leak.probe","arguments":{}}]},
  {"text":"done"}]}'
config "providers = { $(provider openai $PORT_m) }"
ask "Plant and probe."
expect_rc 0 "the model's parallel plant and probe calls ran"
check m "all('\"leaks\":[]' in m['content'] or '\"leaks\":{}' in m['content'] for r in reqs[1:] for m in r['body']['messages'] if m['role'] == 'tool' and m.get('tool_call_id') in ('b', 'd', 'e', 'f'))" \
  "every probe of the model's calls found nothing"
check m "sum(1 for r in reqs[1:] for m in r['body']['messages'] if m['role'] == 'tool' and m.get('tool_call_id') in ('b', 'd', 'e', 'f')) == 4 + 2" \
  "all six probe results reached the model"

# A reused sandbox must not carry the last call's collector pacing: after a
# call that held ~54 MB, a small call peaked at 64 MB (reading what the
# earlier caller held) or hit its memory cap (red team 4, F9).
mkdir -p "$WS/gcws/skills/doc" && echo 'return {}' > "$WS/gcws/luagent.lua"
cat > "$WS/gcws/skills/doc/skill.lua" <<'L'
return { name = "doc", description = "documents", tools = {
  process = { description = "holds a document of n KiB", impact = "read", params = { type = "object" },
    run = function(a) local keep = {} for i = 1, a.kib do keep[i] = string.rep("s", 1000) .. i end return { ok = #keep } end },
  probe = { description = "short-lived garbage", impact = "read", params = { type = "object" },
    run = function()
      local peak = 0
      for i = 1, 200000 do local t = { string.rep("x", 100) .. i } if i % 500 == 0 then peak = math.max(peak, collectgarbage("count")) end end
      return { peak_kib = math.floor(peak) }
    end },
} }
L
cat > "$WS/gcws/gc.lua" <<'L'
tools.call("doc.probe", {})
local alone = tools.call("doc.probe", {}).peak_kib
tools.call("doc.process", { kib = 54000 })
local ok, r = pcall(tools.call, "doc.probe", {})
print(ok and ("after " .. r.peak_kib .. " alone " .. alone) or ("FAILED " .. tostring(r.code or r)))
L
out=$(cd "$WS/gcws" && "$LUAGENT" run gc.lua 2>&1)
python3 - "$out" <<'PY' && ok "a reused sandbox starts with no pacing debt from the last call" || fail "pacing carried over: $out"
import sys, re
m = re.search(r"after (\d+) alone (\d+)", sys.argv[1])
assert m, sys.argv[1]
after, alone = int(m.group(1)), int(m.group(2))
assert after < alone * 4 + 512, (after, alone)
PY
# math.randomseed() hands out random seeds, not the clock and a heap address
cat > "$WS/seed.lua" <<'L'
local t, p = math.randomseed()
local a, b = math.randomseed()
print(((t >> 47) ~= 0 or (p >> 47) ~= 0) and t ~= a and p ~= b and math.abs(t - os.time()) > 1e6)
L
out=$(cd "$WS" && "$LUAGENT" run seed.lua 2>&1)
[ "$out" = true ] && ok "randomseed() seeds from getrandom" || fail "randomseed() returned $out"
stop_mocks
finish
