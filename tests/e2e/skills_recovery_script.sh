#!/bin/bash
# e2e: the model recovers a selection miss with the scripted provider
# (kind = "script", as `luagent test` users write it): pre-selection
# misses, the script finds and loads the right skill, then calls its tool;
# the same script inside a tool-listed delegate() cannot reach the tool.
set -u
. "$(dirname "$0")/lib/common.sh"
mkdir -p "$WS/skills/tracks"
cat > "$WS/skills/tracks/skill.lua" <<'LUA'
return {
  name = "tracks",
  description = "Radar contact positions and track markers",
  prompt = "Track rule: report ranges in metres.",
  tools = {
    nearest = {
      description = "Nearest contact of a kind",
      params = { type = "object", required = { "kind" },
                 properties = { kind = { type = "string", enum = { "hostile", "friendly" } } } },
      impact = "read",
      run = function(args) return { id = "c7", range_m = 420 } end,
    },
  },
}
LUA
TURNS='{ tool = "skills.find", args = { query = "nearest radar contact" } },
  { text = "Found: %{result}", tool = "skills.load", args = { name = "tracks" } },
  { tool = "tracks.nearest", args = { kind = "hostile" } },
  { text = "Answer: %{result}" }'
printf 'return { providers = { { name = "demo", kind = "script", turns = {\n  %s } } } }\n' "$TURNS" > "$WS/luagent.lua"

expect_rc 0 "$LUAGENT" skills select "where is the closest bogey?" &&
  if grep -q tracks "$WS/.out"; then fail "pre-selection picked tracks: the test needs a miss"; else pass "pre-selection misses"; fi
expect_rc 0 "$LUAGENT" ask "where is the closest bogey?" && out_has 'Answer: {"id":"c7","range_m":420}' \
  && pass "find, load, then the loaded skill's tool"
grep -q "skills.load ok" "$WS/.err" && grep -q "tracks.nearest ok" "$WS/.err" && pass "both calls shown" \
  || fail "calls not shown: $(head -c 600 "$WS/.err")"

# inside delegate() with a tool list the same script gets nowhere
cat > "$WS/d.lua" <<'LUA'
local ok, res = pcall(delegate, "where is the closest bogey?", { tools = { "time.now" } })
print(ok and ("answer " .. tostring(res)) or ("error " .. tostring(res.code) .. ": " .. tostring(res.message)))
LUA
expect_rc 0 "$LUAGENT" run "$WS/d.lua"
if grep -q '"range_m":420' "$WS/.out"; then fail "the delegate reached tracks.nearest: $(cat "$WS/.out")"; else pass "a tool-listed delegate cannot load its way out"; fi
finish
