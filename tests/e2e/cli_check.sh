#!/bin/bash
# Issue 12 item 3: `luagent check` checks the whole workspace (luagent.lua,
# hooks.lua, skills, automations) and exits 1 on any problem, naming each
# file:line; `automations check` mirrors `skills check`; `automations list`
# refuses the luagent.lua every other command refuses, and says on stderr
# when a file does not load instead of exiting 0 silently.
. "$(dirname "$0")/lib/common.sh"
mkdir -p "$WS/automations" "$WS/skills/greet"
cat > "$WS/skills/greet/skill.lua" <<'LUA'
return { name = "greet", description = "Greets", tools = { hello = { description = "hi",
  params = { type = "object" }, impact = "read", run = function() return "hi" end } } }
LUA
printf 'return { every = "1h", run = function(ctx) return 1 end }\n' > "$WS/automations/tick.lua"
printf 'return { before_tool = function(call) return nil end }\n' > "$WS/hooks.lua"
printf 'return { limits = { memory_mb = 64 } }\n' > "$WS/luagent.lua"

# a good workspace passes
expect_rc 0 "$LUAGENT" check && out_has "check passed: 1 skill(s) with 1 tool(s), 1 automation(s), 1 hook(s); 0 problem(s)" \
  && pass "a good workspace passes"
expect_rc 0 "$LUAGENT" automations check && out_has "1 automation(s) loaded; 0 problem(s)" && pass "automations check: good"
expect_rc 0 "$LUAGENT" check --json && python3 -c '
import json,sys; v=json.load(open(sys.argv[1])); assert v["ok"] is True and v["problems"]==[] and v["skills"]==1 and v["automations"]==1, v' "$WS/.out" \
  && pass "check --json: ok"

# a broken automation: syntax error on line 2
printf 'return { every = "1h",\n  run = function(ctx) return 1 end end }\n' > "$WS/automations/broken.lua"
expect_rc 1 "$LUAGENT" automations check && out_has "automations/broken.lua:2:" && out_has "1 automation(s) loaded; 1 problem(s)" \
  && pass "automations check: a file that does not load, file:line, exit 1"
expect_rc 1 "$LUAGENT" automations check --json && python3 -c '
import json,sys; v=json.load(open(sys.argv[1])); assert len(v)==1 and v[0]["file"]=="automations/broken.lua" and v[0]["line"]==2 and v[0]["level"]=="error", v' "$WS/.out" \
  && pass "automations check --json: the problem record"
expect_rc 0 "$LUAGENT" automations list && out_has "(does not load)" && err_has "1 automation(s) do not load" \
  && err_has "luagent automations check" && pass "automations list is not silent about it"
expect_rc 1 "$LUAGENT" check && out_has "automations/broken.lua:2:" && out_has "check failed" && pass "check: the broken automation, exit 1"
# a bad file name is reported too (the daemon ignores it)
printf 'return { every = "1h", run = function() end }\n' > "$WS/automations/Bad Name.lua"
expect_rc 1 "$LUAGENT" automations check && out_has "automations/Bad Name.lua: the file name is not a valid automation name" \
  && ! grep -q "Bad Name.lua: automations/" "$WS/.out" && pass "an invalid automation file name is a problem"
rm -f "$WS/automations/Bad Name.lua" "$WS/automations/broken.lua"

# a broken skill
printf 'return { name = "greet", descripton = "x" }\n' > "$WS/skills/greet/skill.lua"
expect_rc 1 "$LUAGENT" check && out_has "skills/greet/skill.lua:1: unknown key 'descripton'" && pass "check: a broken skill, file:line"
expect_rc 1 "$LUAGENT" check --json && python3 -c '
import json,sys; v=json.load(open(sys.argv[1])); p=[x for x in v["problems"] if x["what"]=="skill"]; assert v["ok"] is False and p and p[0]["file"]=="skills/greet/skill.lua", v' "$WS/.out" \
  && pass "check --json: the skill problem"
printf 'return { name = "greet", description = "Greets", tools = {} }\n' > "$WS/skills/greet/skill.lua"

# a broken hooks.lua
printf 'return { before_tools = function() end }\n' > "$WS/hooks.lua"
expect_rc 1 "$LUAGENT" check && out_has "hooks.lua:1: unknown key 'before_tools'" && out_has "skills: not checked" \
  && pass "check: hooks.lua, file:line"
rm -f "$WS/hooks.lua"

# an unknown key in luagent.lua: check names it; automations list refuses it like every other command
printf 'return {\n  limits = { memory_mb = 64 },\n  aprover = "queue",\n}\n' > "$WS/luagent.lua"
expect_rc 1 "$LUAGENT" check && out_has "luagent.lua:3: key 'aprover': unknown key; did you mean 'approver'?" \
  && pass "check: an unknown config key, line and suggestion"
expect_rc 2 "$LUAGENT" automations list && err_has "luagent.lua:3: key 'aprover': unknown key" \
  && pass "automations list refuses the unknown key (exit 2)"
expect_rc 2 "$LUAGENT" tools list && err_has "luagent.lua:3: key 'aprover'" && pass "as tools list does"
# automations are still checked while the config is broken
printf 'return { every = "1h",\n  run = function(ctx) return 1 end end }\n' > "$WS/automations/broken.lua"
expect_rc 1 "$LUAGENT" check && out_has "automations/broken.lua:2:" && pass "automations are checked even when the config is bad"
rm -f "$WS/automations/broken.lua"
printf 'return { limits = { memory_mb = 64 } }\n' > "$WS/luagent.lua"
expect_rc 0 "$LUAGENT" check && pass "fixed: check passes again"

# a schedule that never fires is a warning: shown, but the check passes
printf 'return { cron = "0 9 31 2 *", run = function() end }\n' > "$WS/automations/feb31.lua"
expect_rc 0 "$LUAGENT" check && out_has "automations/feb31.lua: warning: cron 0 9 31 2 * never fires" && out_has "1 warning(s)" \
  && pass "check: a never-firing schedule is a warning"
expect_rc 0 "$LUAGENT" check --json && python3 -c '
import json,sys; v=json.load(open(sys.argv[1])); assert v["ok"] is True and v["warnings"]==1 and v["problems"][0]["level"]=="warning", v' "$WS/.out" \
  && pass "check --json: the warning"
finish
