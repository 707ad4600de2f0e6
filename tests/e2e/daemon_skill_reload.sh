#!/bin/bash
# A broken skill.lua saved into a running daemon's workspace does not take
# the skill out: the daemon reports it once with file:line, its workers keep
# the last good version (automations calling its tools go on working, also
# across a restart), and the fixed file is picked up with a line saying so.
# A skill that never loaded is reported as not loaded.
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
finish
