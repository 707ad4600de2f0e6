#!/bin/bash
# Issue 12 item 2: one workspace rule. A --workspace folder that does not
# exist is an error for every command that reads a workspace: exit 2, ONE
# line naming the folder, and nothing is created there (no .luagent/,
# no state.db, no queued event). Only `init` creates a workspace, so the
# rule does not apply to it; help and version read none.
. "$(dirname "$0")/lib/common.sh"
NOPE="$WS/nope"
# every command, in the form a user would type it
while IFS= read -r cmd; do
  [ -z "$cmd" ] && continue
  # shellcheck disable=SC2086
  (cd "$WS" && eval "\"\$LUAGENT\" --workspace \"\$NOPE\" $cmd") >"$WS/.out" 2>"$WS/.err" </dev/null
  rc=$?
  lines=$(wc -l < "$WS/.err")
  if [ "$rc" != 2 ]; then fail "$cmd: exit $rc, wanted 2 ($(head -c 300 "$WS/.err"))"
  elif [ "$lines" != 1 ]; then fail "$cmd: $lines lines on stderr, wanted one: $(cat "$WS/.err")"
  elif ! grep -qF "luagent: workspace '$NOPE' does not exist (create one with \`luagent init $NOPE\`)" "$WS/.err"; then
    fail "$cmd: not the one message: $(cat "$WS/.err")"
  elif [ -e "$NOPE" ]; then fail "$cmd created $NOPE"; rm -rf "$NOPE"
  elif [ -s "$WS/.out" ]; then fail "$cmd printed on stdout: $(head -c 200 "$WS/.out")"
  else pass "$cmd"; fi
done <<'CMDS'
audit verify
audit tail
audit head
emit deploy.done
emit deploy.done '{"a":1}'
runs list
runs show r1
approvals list
approvals approve 1
secrets list
automations list
automations history tick
automations check
automations next tick
automations run tick
automations enable tick
sessions list
tools list
skills list
skills check
skills select hello
ask hello
chat
run x.lua
check
daemon
completion names tools
CMDS

# the same rule wherever --workspace stands, and with -w and =
for form in "-w $NOPE runs list" "runs list --workspace $NOPE" "--workspace=$NOPE runs list"; do
  # shellcheck disable=SC2086
  expect_rc 2 "$LUAGENT" $form && err_has "does not exist" && [ ! -e "$NOPE" ] && pass "form: $form"
done

# a file is not a workspace either
touch "$WS/afile"
expect_rc 2 "$LUAGENT" --workspace "$WS/afile" audit verify && err_has "workspace '$WS/afile' is not a folder" \
  && pass "a file as --workspace: exit 2, named"

# not for commands that read no workspace, and never for init
expect_rc 0 "$LUAGENT" --workspace "$NOPE" version && out_has "luagent " && pass "version needs no workspace"
expect_rc 0 "$LUAGENT" --workspace "$NOPE" help && pass "help needs no workspace"
expect_rc 0 "$LUAGENT" --workspace "$NOPE" audit verify --help && out_has "usage: luagent audit verify" \
  && pass "--help answers before the workspace rule"
(cd "$WS" && "$LUAGENT" --workspace "$NOPE" init) >"$WS/.out" 2>"$WS/.err"
grep -q "does not exist" "$WS/.err" && fail "the workspace rule refused init: $(cat "$WS/.err")" || pass "init is exempt from the rule"
rm -rf "$NOPE"

# an existing folder that is not yet a workspace still works (defaults)
mkdir "$WS/empty"
expect_rc 0 "$LUAGENT" --workspace "$WS/empty" audit verify && out_has "audit chain intact" && pass "an existing empty folder is a workspace"
finish
