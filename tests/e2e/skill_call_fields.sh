# A skill's tools share its sandboxes (issue 20), and run()'s second
# argument is built once per sandbox: each call must still see its own
# tool name, caller and run id, never those of the call before it, and the
# args it was given (a tool that edits its args table changes nothing for
# the next call). The one metatable all fresh _ENV tables share stays
# hidden and read-only.
. "$(dirname "$0")/lib/common.sh" "$1"
mkdir -p "$WS/skills/two"
cat > "$WS/skills/two/skill.lua" <<'LUA'
local function run(args, call)
  local seen = args.n
  args.n = "edited"
  return { tool = call.tool, skill = call.skill, caller = call.caller,
           caller_name = call.caller_name, run_id = call.run_id, n = seen,
           keys = (function() local k = 0 for _ in pairs(args) do k = k + 1 end return k end)() }
end
return {
  name = 'two', description = 'Two tools in one skill',
  tools = {
    alpha = { description = 'a', impact = 'read', params = { type = 'object' }, run = run },
    env = { description = 'e', impact = 'read', params = { type = 'object' },
            run = function()
              -- every _ENV shares one metatable now: it must stay out of reach
              local mt = getmetatable(_ENV)
              local set_ok = pcall(setmetatable, _ENV, {})
              local miss_ok, miss = pcall(function() return not_defined_anywhere end)
              return { mt = type(mt), mtv = tostring(mt), set_ok = set_ok, miss_ok = miss_ok,
                       miss = tostring(miss) }
            end },
    beta_with_a_longer_name = { description = 'b', impact = 'read', params = { type = 'object' },
                                run = run },
  },
}
LUA
cat > "$WS/t.lua" <<'LUA'
local order = { "two.alpha", "two.beta_with_a_longer_name", "two.alpha", "two.alpha",
                "two.beta_with_a_longer_name" }
for i, name in ipairs(order) do
  local args = (i % 2 == 1) and { n = i } or { n = i, extra = true }
  local r = tools.call(name, args)
  assert(r.tool == name, "call " .. i .. ": call.tool is " .. tostring(r.tool) .. ", wanted " .. name)
  assert(r.skill == "two", "call " .. i .. ": call.skill is " .. tostring(r.skill))
  assert(r.caller == "script", "call " .. i .. ": call.caller is " .. tostring(r.caller))
  assert(r.n == i, "call " .. i .. ": args.n is " .. tostring(r.n))
  assert(r.keys == ((i % 2 == 1) and 1 or 2), "call " .. i .. ": args has " .. tostring(r.keys) .. " keys")
  assert(args.n == i, "call " .. i .. ": the caller's args changed")
  assert(type(r.run_id) == "string" and r.run_id ~= "", "call " .. i .. ": no run id")
end
for i = 1, 2 do
  local r = tools.call("two.env", {})
  assert(r.mt == "boolean" and r.mtv == "false", "getmetatable(_ENV) gave " .. r.mt .. " " .. r.mtv)
  assert(r.set_ok == false, "setmetatable(_ENV) succeeded")
  assert(r.miss_ok == false and r.miss:find("undefined global 'not_defined_anywhere'", 1, true),
         "a missing global read: " .. r.miss)
end
print("fields ok")
LUA
expect_rc 0 "$LUAGENT" run t.lua && out_has "fields ok"
[ "$FAILS" = 0 ] && echo "PASS skill_call_fields"
exit "$FAILS"
