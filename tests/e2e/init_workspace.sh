#!/bin/bash
# luagent init [DIR]: scaffolds a workspace that works as it is (skills
# check, automations, the hook, the impact gate, ask with the scripted demo
# model), creates DIR and its parents, and never overwrites: any file in
# the way is named, nothing at all is written, exit 1.
. "$(dirname "$0")/lib/common.sh"

D="$WS/a/b/ws"
expect_rc 0 "$LUAGENT" init "$D" && out_has "created $D/luagent.lua" && out_has "created $D/skills/todo/skill.lua" \
  && out_has "created $D/automations/todo_digest.lua" && out_has "created $D/hooks.lua" && out_has "created $D/.gitignore" \
  && pass "init creates the workspace and its missing parents"
for f in luagent.lua model_script.lua hooks.lua skills/todo/skill.lua automations/todo_digest.lua .gitignore; do
  [ -s "$D/$f" ] || fail "init did not write $f"
done
[ -d "$D/data" ] || fail "init did not create data/"
grep -qx '.luagent/' "$D/.gitignore" || fail ".gitignore does not ignore .luagent/: $(cat "$D/.gitignore")"

# It works as it is.
in_d() { (cd "$D" && "$@"); }   # expect_rc runs in $WS; these run in the new workspace
expect_rc 0 in_d "$LUAGENT" skills check && out_has "1 skill(s) loaded with 3 tool(s); 0 problem(s)" && pass "skills check passes"
expect_rc 0 in_d "$LUAGENT" automations list && out_has "todo_digest" && { grep -q "error" "$WS/.out" && fail "automations list shows an error: $(cat "$WS/.out")" || pass "automations list loads todo_digest"; }
expect_rc 0 in_d "$LUAGENT" skills call todo.list '{}' && out_has '"count"' && pass "todo.list on an empty list"
expect_rc 0 in_d "$LUAGENT" skills call todo.add '{"item": "buy milk"}' && pass "todo.add"
expect_rc 0 in_d "$LUAGENT" automations run todo_digest && out_has "$(date -u +%Y-%m-%d): 1 item(s) on the list" \
  && out_has '{"count":1}' && pass "the automation runs (os.date on ctx.now)"
long=$(printf 'x%.0s' $(seq 201))
expect_rc 1 in_d "$LUAGENT" skills call todo.add "{\"item\": \"$long\"}" && err_has "at most 200 characters" && pass "the example hook denies a long item"
expect_rc 1 in_d "$LUAGENT" skills call todo.clear '{}' </dev/null && err_has "needs approval" && pass "todo.clear (impact high) needs approval"
expect_rc 0 in_d "$LUAGENT" ask "what is on my todo list?" </dev/null && out_has 'Your todo list: {"count":1,"items":["buy milk"]}' \
  && err_has "-> todo.list" && pass "ask works offline with the scripted demo model"
expect_rc 0 in_d "$LUAGENT" ask "hello there" </dev/null && out_has "I am the scripted demo model" && pass "any other message gets the demo's answer"
expect_rc 0 in_d "$LUAGENT" ask "clear my todo list" </dev/null && out_has "todo.clear said:" && out_has "denied" \
  && pass "without a terminal the demo's todo.clear is denied, and the model is told"
expect_rc 0 in_d "$LUAGENT" check && out_has "0 problem(s), 0 warning(s)" && pass "luagent check passes on a new workspace"

# Never overwrites: a second init names every file, changes none, exit 1.
echo "-- my own config" >> "$D/luagent.lua"
sum=$(cd "$D" && find . -type f | sort | xargs md5sum)
expect_rc 1 "$LUAGENT" init "$D" && err_has "$D/luagent.lua already exists" && err_has "$D/skills/todo/skill.lua already exists" \
  && err_has "nothing was written" && pass "a second init refuses, naming the files"
[ "$sum" = "$(cd "$D" && find . -type f | sort | xargs md5sum)" ] || fail "a refused init changed files"

# One file in the way: only it is named, and nothing else is created.
mkdir -p "$WS/one" && echo 'return {}' > "$WS/one/hooks.lua"
expect_rc 1 "$LUAGENT" init "$WS/one" && err_has "$WS/one/hooks.lua already exists" && pass "one file in the way is named"
grep -q "luagent.lua already" "$WS/.err" && fail "init named a file that is not there"
[ "$(ls -A "$WS/one")" = "hooks.lua" ] || fail "a refused init wrote something: $(ls -A "$WS/one")"
[ "$(cat "$WS/one/hooks.lua")" = "return {}" ] || fail "a refused init changed hooks.lua"

# A symlink in the way counts too (never written through).
mkdir -p "$WS/ln" && ln -s /nonexistent/target "$WS/ln/.gitignore"
expect_rc 1 "$LUAGENT" init "$WS/ln" && err_has ".gitignore already exists" && pass "a dangling symlink is in the way too"

# DIR is a file; a file where a folder goes; no DIR = the current folder (or --workspace).
echo x > "$WS/afile"
expect_rc 1 "$LUAGENT" init "$WS/afile" && err_has "afile" && pass "init on a file fails naming it"
mkdir -p "$WS/sk" && echo x > "$WS/sk/skills"
expect_rc 1 "$LUAGENT" init "$WS/sk" && err_has "skills" && pass "a file where skills/ goes fails naming it"
mkdir -p "$WS/here" && (cd "$WS/here" && "$LUAGENT" init >/dev/null) && [ -f "$WS/here/luagent.lua" ] && pass "init with no DIR uses the current folder" \
  || fail "init with no DIR did not write ./luagent.lua"
expect_rc 0 "$LUAGENT" --workspace "$WS/wsopt" init && [ -f "$WS/wsopt/skills/todo/skill.lua" ] && pass "init honours --workspace" || fail "--workspace init"
expect_rc 2 "$LUAGENT" init a b && err_has "one folder" && pass "two folders is a usage error"
expect_rc 2 "$LUAGENT" init --bogus && err_has "unknown option --bogus" && pass "unknown option is a usage error"
finish
