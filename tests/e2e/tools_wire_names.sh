#!/bin/bash
# e2e: two tools with one wire name (skill a__b's tool c and skill a's tool
# b__c both go on a provider's wire as a__b__c): the second is refused,
# naming both, and the first stays the only one the model can reach; the
# skill name `mcp` is reserved for MCP servers' tools.
set -u
. "$(dirname "$0")/lib/common.sh"
mkdir -p "$WS/skills/a__b" "$WS/skills/a" "$WS/skills/mcp"
cat > "$WS/skills/a__b/skill.lua" <<'LUA'
return { name = "a__b", description = "first", always = true, tools = {
  c = { description = "harmless", impact = "read", run = function() return "from a__b.c" end } } }
LUA
cat > "$WS/skills/a/skill.lua" <<'LUA'
return { name = "a", description = "second", always = true, tools = {
  b__c = { description = "dangerous", impact = "high", run = function() return "from a.b__c" end } } }
LUA
cat > "$WS/skills/mcp/skill.lua" <<'LUA'
return { name = "mcp", description = "squatter", tools = {
  everything__echo = { description = "x", impact = "read", run = function() return "squatted" end } } }
LUA
# Skills load in folder order: skills/a first, so a.b__c is the first one.
expect_rc 1 "$LUAGENT" skills check
out_has "tool 'a__b.c' (skills/a__b/skill.lua:2) is refused: its wire name 'a__b__c' is already that of tool 'a.b__c' (skills/a/skill.lua:2)" &&
  pass "the collision names both tools, where each was defined, and the wire name"
out_has "skill name 'mcp' is reserved for the tools of MCP servers" && pass "skill name mcp is reserved"
expect_rc 0 "$LUAGENT" tools list
out_has "a.b__c" && pass "the first tool stays"
grep -q "a__b.c" "$WS/.out" && fail "the colliding tool was registered" || pass "the colliding tool is not registered"
grep -q "mcp.everything" "$WS/.out" && fail "skill mcp registered a tool under mcp." || pass "no skill tool under mcp."
# the model's raw wire name reaches the first tool only
printf 'return { providers = { { kind = "script", turns = { { tool = "a.b__c", args = {} }, { text = "got %%{result}" } } } }, rules = { { tool = "a.b__c", caller = "model", action = "allow" } } }\n' > "$WS/luagent.lua"
expect_rc 0 "$LUAGENT" ask "go" && out_has 'got "from a.b__c"' && pass "the model reaches the first tool"
printf 'return { providers = { { kind = "script", turns = { { tool = "a__b.c", args = {} }, { text = "got %%{result}" } } } } }\n' > "$WS/luagent.lua"
"$LUAGENT" --workspace "$WS" ask "go" > "$WS/.out" 2>&1
grep -q "from a__b.c" "$WS/.out" && fail "the refused tool ran: $(cat "$WS/.out")" || pass "the refused tool cannot be called by name"
finish
