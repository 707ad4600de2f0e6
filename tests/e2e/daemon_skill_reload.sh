#!/bin/bash
# A broken skill.lua saved into a running daemon's workspace does not take
# the skill out: the daemon reports it once with file:line, its workers keep
# the last good version (automations calling its tools go on working, also
# across a restart), and the fixed file is picked up with a line saying so.
# A skill that never loaded is reported as not loaded. While a kept version
# runs, every reload says so and `skills check` / `check` report it. A
# skill whose skill.lua is deleted or renamed (or whose folder is gone) is
# removed, also across a restart: that is how it is taken out of service.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"

mkdir -p "$WS/skills/todo"
good() { # good VERSION: a skill whose tool returns VERSION
  cat > "$WS/skills/todo/skill.lua.tmp" <<LUA
return {
  name = "todo",
  description = "todo list",
  tools = {
    list = { description = "list", params = { type = "object" }, impact = "read",
             run = function() return { version = "$1" } end },
  },
}
LUA
  mv "$WS/skills/todo/skill.lua.tmp" "$WS/skills/todo/skill.lua"
}
good v1
echo "return {}" > "$WS/luagent.lua"
cat > "$WS/automations/poll.lua" <<'LUA'
return { every = "1s", run = function(ctx) return tools.call("todo.list", {}).version end }
LUA
ok_with() { q "SELECT count(*) FROM runs WHERE name='poll' AND status='ok' AND result LIKE '%$1%'"; }
last_id() { q "SELECT coalesce(max(rowid),0) FROM runs"; }
bad_since() { q "SELECT count(*) FROM runs WHERE name='poll' AND status!='ok' AND status!='running' AND rowid > $1"; }
ok_since() { q "SELECT count(*) FROM runs WHERE name='poll' AND status='ok' AND rowid > $1 AND result LIKE '%$2%'"; }

start_daemon
wait_for 10 '[ "$(ok_with v1)" -ge 1 ]' || fail "poll never ran ok with v1: $(tail -5 "$DLOG")"

# 1. a syntax error
mark=$(last_id)
printf 'return {\n  name = "todo",\n  description = "todo list" oops\n}\n' > "$WS/skills/todo/skill.lua"
wait_for 10 "grep -q 'skills/todo/skill.lua:3:.*keeping the last good version' '$DLOG'" \
  && pass "a syntax error is reported with file:line, keeping the last good version" \
  || fail "no report of the syntax error: $(tail -5 "$DLOG")"
sleep 2.5
[ "$(ok_since "$mark" v1)" -ge 2 ] && pass "runs after the bad save still reach todo.list (v1)" \
  || fail "no good runs after the bad save: $(q "SELECT status, result, error FROM runs WHERE rowid > $mark")"
[ "$(bad_since "$mark")" = 0 ] || fail "runs failed after the bad save: $(q "SELECT error FROM runs WHERE status='failed' AND rowid > $mark LIMIT 2")"

# the same broken file is not reported again when something else reloads
touch "$WS/luagent.lua"
sleep 1
[ "$(grep -c 'skills/todo/skill.lua:3:' "$DLOG")" = 1 ] && pass "the same problem is reported once" \
  || fail "the problem was reported $(grep -c 'skills/todo/skill.lua:3:' "$DLOG") times"
grep -q 'skills/todo: still running its last good version; skills/todo does not load' "$DLOG" \
  && pass "each later reload says the kept version still runs" \
  || fail "no reminder that the kept version runs: $(tail -3 "$DLOG")"
expect_rc 1 "$LUAGENT" skills check
out_has "skills/todo: the daemon runs the last good version it kept of this skill"
expect_rc 1 "$LUAGENT" check
out_has "skills/todo: warning: the daemon runs the last good version it kept"
expect_rc 1 "$LUAGENT" skills check --json
python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); assert any(p.get("daemon_kept") and p["file"]=="skills/todo" for p in a), a' "$WS/.out" \
  && pass "skills check (text, --json) and check report the kept version" || fail "skills check --json: $(cat "$WS/.out")"

# 2. a runtime error at load (top-level code raises)
printf 'local t = {}\nlocal x = t.a.b\nreturn { name = "todo" }\n' > "$WS/skills/todo/skill.lua"
wait_for 10 "grep -q 'skills/todo/skill.lua:2:.*keeping the last good version' '$DLOG'" \
  && pass "a load-time error is reported with file:line, keeping the last good version" \
  || fail "no report of the load error: $(tail -5 "$DLOG")"
# 3. a tool that does not load (its schema is broken) counts as broken too
cat > "$WS/skills/todo/skill.lua" <<'LUA'
return { name = "todo", description = "todo list", tools = {
  list = { description = "list", params = { type = "object", requried = { "x" } }, impact = "read",
           run = function() return { version = "broken" } end } } }
LUA
wait_for 10 "grep -q \"skills/todo/skill.lua:.*requried.*keeping the last good version\" '$DLOG'" \
  && pass "a tool left out by a bad schema keeps the last good version" \
  || fail "no report of the bad tool: $(tail -5 "$DLOG")"
mark=$(last_id)
sleep 2.5
[ "$(ok_since "$mark" v1)" -ge 2 ] && [ "$(bad_since "$mark")" = 0 ] && pass "still v1 while broken" \
  || fail "runs while broken: $(q "SELECT status, result, error FROM runs WHERE rowid > $mark")"

# 4. fixed: the new version is used and a line says so
good v2
wait_for 10 "grep -q 'skills/todo: fixed; the new version is loaded' '$DLOG'" \
  && pass "the fix is announced" || fail "no line about the fix: $(tail -5 "$DLOG")"
wait_for 10 '[ "$(ok_with v2)" -ge 1 ]' && pass "runs use the fixed version (v2)" \
  || fail "no run with v2: $(tail -5 "$DLOG")"
good v3
wait_for 10 "grep -q 'skills/todo: reloaded' '$DLOG'" && pass "an edit of a good skill is announced" \
  || fail "no reloaded line: $(tail -5 "$DLOG")"
wait_for 10 '[ "$(ok_with v3)" -ge 1 ]' || fail "no run with v3"

# 5. a new skill that never loaded: reported, not loaded
mkdir -p "$WS/skills/other"
printf 'return {\n  name = "other",,\n}\n' > "$WS/skills/other/skill.lua"
wait_for 10 "grep -q 'skills/other/skill.lua:2:.*not loaded' '$DLOG'" && pass "a skill that never loaded is reported" \
  || fail "no report for skills/other: $(tail -5 "$DLOG")"

# 6. across a restart: broken on disk, the last good version (v3) still runs
printf 'return {\n  name = "todo" +\n}\n' > "$WS/skills/todo/skill.lua"
wait_for 10 "grep -q 'skills/todo/skill.lua:.*keeping the last good version' '$DLOG'" || fail "not reported before restart"
stop_daemon
: > "$DLOG"
start_daemon
wait_for 10 "grep -q 'skills/todo/skill.lua:.*keeping the last good version' '$DLOG'" \
  && pass "after a restart the broken skill is reported and the last good version kept" \
  || fail "restart: $(tail -5 "$DLOG")"
mark=$(last_id)
sleep 2.5
[ "$(ok_since "$mark" v3)" -ge 1 ] && [ "$(bad_since "$mark")" = 0 ] && pass "after a restart runs use v3" \
  || fail "runs after restart: $(q "SELECT status, result, error FROM runs WHERE rowid > $mark")"
stop_daemon
n=$(ls "$WS/.luagent/daemon-skills" | wc -l)
[ "$n" -le 2 ] && pass "at most two skill generations are kept ($n)" || fail "$n generations kept"

# 7. removing a skill removes it: skill.lua deleted (the folder stays with
# its tests), also across a restart; `luagent run` and the daemon agree
good v4
echo 'test("x", function() end)' > "$WS/skills/todo/todo_test.lua"
: > "$DLOG"
start_daemon
wait_for 10 '[ "$(ok_with v4)" -ge 1 ]' || fail "no run with v4: $(tail -5 "$DLOG")"
rm "$WS/skills/todo/skill.lua"
wait_for 10 "grep -q 'skills/todo: removed (no skill.lua or SKILL.md in its folder); its tools are gone' '$DLOG'" \
  && pass "deleting skill.lua removes the skill, and the log says so" || fail "no removal line: $(tail -5 "$DLOG")"
sleep 1.5
mark=$(last_id)
sleep 2.5
[ "$(ok_since "$mark" v)" = 0 ] && [ "$(bad_since "$mark")" -ge 1 ] \
  && pass "no run reaches the removed skill's old code" \
  || fail "the removed skill still runs: $(q "SELECT status, result FROM runs WHERE rowid > $mark")"
q "SELECT error FROM runs WHERE rowid > $mark LIMIT 1" | grep -q "unknown tool 'todo.list'" \
  || fail "runs after the removal do not say the tool is unknown: $(q "SELECT error FROM runs WHERE rowid > $mark LIMIT 1")"
stop_daemon
start_daemon
sleep 1.5
mark=$(last_id)
sleep 2.5
[ "$(ok_since "$mark" v)" = 0 ] && pass "after a restart the removed skill stays removed" \
  || fail "the removed skill runs again after a restart: $(q "SELECT status, result FROM runs WHERE rowid > $mark")"
echo 'print(tools.exists("todo.list"))' > "$WS/probe.lua"
expect_rc 0 "$LUAGENT" run probe.lua && out_has "false"

# 8. the documented deliberate disable: rename skill.lua (keeps the code)
good v5
wait_for 10 '[ "$(ok_with v5)" -ge 1 ]' && pass "the skill comes back when skill.lua is back" \
  || fail "no run with v5: $(tail -5 "$DLOG")"
mv "$WS/skills/todo/skill.lua" "$WS/skills/todo/skill.lua.disabled"
wait_for 10 "[ \"\$(grep -c 'skills/todo: removed' '$DLOG')\" -ge 2 ]" \
  && pass "renaming skill.lua disables the skill" || fail "no removal after the rename: $(tail -5 "$DLOG")"
sleep 1.5
mark=$(last_id)
sleep 2.5
[ "$(ok_since "$mark" v5)" = 0 ] && pass "no run reaches the disabled skill" \
  || fail "the disabled skill still runs: $(q "SELECT status, result FROM runs WHERE rowid > $mark")"

# 9. removing the whole folder says so too
before=$(grep -c 'skills/todo: loaded' "$DLOG")
mv "$WS/skills/todo/skill.lua.disabled" "$WS/skills/todo/skill.lua"
wait_for 20 "[ \"\$(grep -c 'skills/todo: loaded' '$DLOG')\" -gt $before ]" || fail "not loaded again: $(tail -5 "$DLOG")"
rm -rf "$WS/skills/todo"
wait_for 20 "grep -q 'skills/todo: removed (its folder is gone)' '$DLOG'" \
  && pass "a removed folder is announced" || fail "no line for the removed folder: $(tail -5 "$DLOG")"
stop_daemon
finish
