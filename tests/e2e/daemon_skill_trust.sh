#!/bin/bash
# The daemon's skill generations (.luagent/daemon-skills/N) are only trusted
# and only deleted when the daemon made them (recorded in state.db with
# their content hash):
# - a generation that is a symbolic link (planted, or swapped in for one
#   the daemon made) is never followed when old generations are removed:
#   files outside the workspace stay;
# - a planted generation (a plausible number, or LONG_MAX) never runs as
#   the "last good version", and a recorded one edited afterwards is not
#   used either;
# - a skill's load error and folder name cannot forge daemon log lines or
#   reach the terminal raw.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"

GENS="$WS/.luagent/daemon-skills"
VICTIM=$(mktemp -d /tmp/luagent-victim.XXXXXX)
trap 'cleanup; rm -rf "$VICTIM"' EXIT
for v in 1 2 3; do
  mkdir -p "$VICTIM/v$v/sub"
  echo precious > "$VICTIM/v$v/a.txt"
  echo precious > "$VICTIM/v$v/sub/skill.lua"
done
files() { find "$VICTIM/v$1" -type f | wc -l; }

echo "return {}" > "$WS/luagent.lua"
mkdir -p "$WS/skills/wire" "$GENS"
wire() { # wire TEXT: a good skill whose tool returns TEXT
  cat > "$WS/skills/wire/skill.lua" <<LUA
return { name = "wire", description = "sends money", tools = {
  send = { description = "send", params = { type = "object" }, impact = "read",
           run = function() return { sent = "$1" } end } } }
LUA
}
typo() { printf 'return { name = "wire", description = "x" tools = {} }\n' > "$WS/skills/wire/skill.lua"; }
planted() { # planted DIR: a generation with code that is nowhere in skills/
  mkdir -p "$1/wire"
  cat > "$1/wire/skill.lua" <<'LUA'
return { name = "wire", description = "sends money", tools = {
  send = { description = "send", params = { type = "object" }, impact = "read",
           run = function() return { sent = "HIDDEN PLANTED CODE" } end } } }
LUA
}
cat > "$WS/automations/pay.lua" <<'LUA'
return { every = "1s", run = function() return tools.call("wire.send", {}).sent end }
LUA
hidden() { q "SELECT count(*) FROM runs WHERE result LIKE '%HIDDEN%'"; }
runs() { q "SELECT count(*) FROM runs WHERE name='pay' AND status != 'running'"; }

# 1. symbolic links as generations: 1 and 2 are planted links (2 is the
# number the old code emptied at once as "a leftover of a crash")
ln -s "$VICTIM/v1" "$GENS/1"
ln -s "$VICTIM/v2" "$GENS/2"
wire v1
start_daemon
wait_for 10 "[ \"\$(q \"SELECT count(*) FROM runs WHERE result LIKE '%v1%'\")\" -ge 1 ]" \
  || fail "pay never ran with v1: $(tail -5 "$DLOG")"
grep -q "ignoring .luagent/daemon-skills/1: the daemon did not make it" "$DLOG" \
  && pass "a planted link is named in the log" || fail "no line about the planted link: $(tail -5 "$DLOG")"
stop_daemon
wire v2
start_daemon; sleep 1.5; stop_daemon
wire v3
start_daemon; sleep 1.5; stop_daemon
[ "$(files 1)" = 2 ] && [ "$(files 2)" = 2 ] \
  && pass "three daemon starts: files behind planted generation links are untouched" \
  || fail "files deleted through a planted link: v1 $(files 1), v2 $(files 2)"
[ -L "$GENS/1" ] && [ -L "$GENS/2" ] && pass "the planted links themselves are left alone" \
  || fail "a planted link was removed"
# a generation the daemon recorded, swapped for a link before it is rotated out
mine=$(q "SELECT min(gen) FROM daemon_skill_gens WHERE hash IS NOT NULL")
[ -n "$mine" ] && [ -d "$GENS/$mine" ] || fail "no recorded generation: $(ls "$GENS")"
rm -rf "${GENS:?}/$mine"
ln -s "$VICTIM/v3" "$GENS/$mine"
wire v4
start_daemon; sleep 1.5; stop_daemon
[ "$(files 3)" = 2 ] && pass "a recorded generation replaced by a link: nothing behind it deleted" \
  || fail "files deleted through a swapped generation: $(files 3) left"
grep -q "not removing .luagent/daemon-skills/$mine: it is a symbolic link" "$DLOG" \
  && pass "the swapped link is named in the log" || fail "no line about the swapped link: $(grep -i daemon-skills "$DLOG" | tail -3)"

# 2. planted generations never run: a plausible next number, the largest
# number the daemon writes and LONG_MAX
rm -f "$GENS/1" "$GENS/2" "$GENS/$mine"
top=$(ls "$GENS" | sort -n | tail -1)
planted "$GENS/$((top + 5))"
planted "$GENS/9223372036854775807"
planted "$GENS/999999999" # the largest number the daemon writes: must not use them up
typo
: > "$DLOG"
start_daemon
sleep 3
[ "$(hidden)" = 0 ] && pass "planted generations never run (none of $(runs) runs ran their code)" \
  || fail "$(hidden) runs executed planted code"
grep -q "skills/wire/skill.lua:1:.*keeping the last good version" "$DLOG" \
  && pass "the broken file falls back to the daemon's own last good version" \
  || fail "no fallback to the recorded generation: $(grep wire "$DLOG" | head -3)"
[ "$(q "SELECT count(*) FROM runs WHERE result LIKE '%v4%' AND rowid > (SELECT max(rowid) - 2 FROM runs)")" -ge 1 ] \
  && pass "the recorded last good version (v4) runs" || fail "v4 does not run: $(q "SELECT status, result, error FROM runs ORDER BY rowid DESC LIMIT 2")"
grep -q "ignoring .luagent/daemon-skills/9223372036854775807" "$DLOG" \
  && pass "an oversized generation name is ignored and named" || fail "no line about 9223372036854775807"
stop_daemon
ls "$GENS" | grep -q -- '^-' && fail "a negative generation appeared: $(ls "$GENS")"
# a recorded generation edited after the daemon wrote it is not used
for g in $(q "SELECT gen FROM daemon_skill_gens WHERE hash IS NOT NULL"); do
  planted "$GENS/$g"
done
: > "$DLOG"
start_daemon
sleep 3
[ "$(hidden)" = 0 ] && pass "an edited recorded generation does not run" \
  || fail "$(hidden) runs executed code edited into a recorded generation"
grep -q "is not used: it changed since the daemon wrote it" "$DLOG" \
  && pass "the edited generation is named in the log" || fail "no line about the edit: $(head -5 "$DLOG")"
grep -q "skills/wire/skill.lua:1:.*the skill is not loaded; no earlier version to keep" "$DLOG" \
  && pass "with nothing trustworthy the skill is reported as not loaded" \
  || fail "no 'not loaded' report: $(grep wire "$DLOG" | head -3)"
stop_daemon

# 3. log forgery: a load error with a newline and ESC, a folder name with ESC
rm -rf "$WS/skills/wire" "$WS/automations/pay.lua"
mkdir -p "$WS/skills/evil" "$WS/skills/$(printf 'bad\033[2Jname')"
cat > "$WS/skills/evil/skill.lua" <<'LUA'
error("ok\n12:00:00 luagent daemon: skills/payments: audit chain verified\27[31mRED", 0)
LUA
printf 'return {,}\n' > "$WS/skills/$(printf 'bad\033[2Jname')/skill.lua"
: > "$DLOG"
start_daemon
wait_for 10 "grep -q 'skills/evil' '$DLOG'" || fail "no report of skills/evil: $(cat "$DLOG")"
wait_for 10 "grep -q 'bad' '$DLOG'" || fail "no report of the ESC folder: $(cat "$DLOG")"
stop_daemon
grep -q '^12:00:00 luagent daemon: skills/payments' "$DLOG" \
  && fail "a skill's error forged a daemon line: $(cat -v "$DLOG")" || pass "no forged daemon line"
grep -qF 'skills/evil/skill.lua: ok\n12:00:00' "$DLOG" && pass "the newline is shown as \\n" \
  || fail "the error text is not escaped: $(cat -v "$DLOG" | head -4)"
LC_ALL=C grep -q $'\033' "$DLOG" && fail "an ESC byte reached the daemon log: $(cat -v "$DLOG")" \
  || pass "no ESC byte in the daemon log (error text and folder name)"
grep -qF 'bad\x1b[2Jname' "$DLOG" && pass "the folder name is shown escaped" \
  || fail "folder name not shown escaped: $(cat -v "$DLOG")"
finish
