#!/bin/bash
# Issue 12 item 13: `luagent completion bash` completes commands,
# subcommands and options (from the same table as --help), and the
# workspace's skill, tool and automation names (asked of the binary each
# time, --workspace included). Driven through bash's own completion API.
. "$(dirname "$0")/lib/common.sh"
mkdir -p "$WS/ws/automations" "$WS/ws/skills/greet" "$WS/bin"
cat > "$WS/ws/skills/greet/skill.lua" <<'LUA'
return { name = "greet", description = "Greets", tools = { hello = { description = "hi",
  params = { type = "object" }, impact = "read", run = function() return "hi" end } } }
LUA
printf 'return { every = "1h", run = function() end }\n' > "$WS/ws/automations/tick.lua"
printf 'return { on = "x", run = function() end }\n' > "$WS/ws/automations/tock.lua"
ln -s "$LUAGENT" "$WS/bin/luagent"
expect_rc 0 "$LUAGENT" completion bash && bash -n "$WS/.out" && pass "the script is valid bash"
cp "$WS/.out" "$WS/luagent.bash"
expect_rc 2 "$LUAGENT" completion zsh && err_has "unknown shell 'zsh'" && pass "another shell: named, exit 2"

# comp 'luagent words ...' : what bash would offer for the last word
comp() {
  (cd "$WS" && PATH="$WS/bin:$PATH" bash -c '
    . ./luagent.bash
    read -ra COMP_WORDS <<< "$1"
    [[ "$1" == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
    _luagent
    printf "%s\n" "${COMPREPLY[@]}"' _ "$1") 2>&1
}
want() { # want 'LINE' WORD... : every WORD is offered
  local line=$1; shift
  local got; got=$(comp "$line")
  for w in "$@"; do
    grep -qxF -- "$w" <<<"$got" || { fail "'$line' lacks $w: $(tr '\n' ' ' <<<"$got")"; return 1; }
  done
  pass "'$line' -> $*"
}
want "luagent " run check automations skills tools ask help version completion
want "luagent au" automations audit
want "luagent automations " list check next run enable disable history
want "luagent automations next -" -n --json --help
want "luagent skills select --" --explain --json --top --mode --batch
want "luagent ask --" --provider --tools --max-iterations --no-journal --json
want "luagent audit verify --" --expect --strict --json
want "luagent --workspace ws automations next " tick tock
want "luagent -w ws automations run t" tick tock
want "luagent --workspace=ws skills call " greet.hello
want "luagent -w ws ask --tools " greet.hello greet.* fs.read
want "luagent skills select x --mode " fused keyword embedding
want "luagent help " automations exit-codes json workspace
got=$(comp "luagent -w nope automations next ")
[ -z "$got" ] && pass "a missing workspace offers nothing (and prints nothing)" || fail "missing workspace: $got"
# names follow the workspace as it changes
printf 'return { every = "2h", run = function() end }\n' > "$WS/ws/automations/new_one.lua"
want "luagent -w ws automations enable " new_one tick tock
# the option lists match --help: no option in the script that --help lacks, per command
for c in "automations next" "skills select" "runs list" "audit tail" "daemon" "ask"; do
  # shellcheck disable=SC2086
  helpopts=$("$LUAGENT" $c --help | grep -o -- '-[-a-z]*' | sort -u)
  compopts=$(comp "luagent $c -" | sort -u)
  extra=$(comm -13 <(printf '%s\n' "$helpopts") <(printf '%s\n' "$compopts") | grep -v -- '^--help$')
  [ -z "$extra" ] && pass "$c: options match --help" || fail "$c: completion offers $extra that --help lacks"
done
finish
