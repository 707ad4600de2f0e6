#!/bin/bash
# Issue 12 items 6 and 13: `make install DESTDIR=$tmp PREFIX=/usr/local`
# from an existing build folder (no packages installed, nothing outside
# DESTDIR touched) installs the binary, the man page, the bash completion
# and the prompts; the installed binary works from a folder outside the
# repository and reads the installed prompts, not the source tree's.
. "$(dirname "$0")/lib/common.sh"
SRC=${LUAGENT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=$(dirname "$LUAGENT")
STAGE="$WS/stage"
[ -f "$BUILD/CMakeCache.txt" ] || { fail "$BUILD is not a CMake build folder"; finish; }
command -v make >/dev/null || { fail "make is not installed"; finish; }

make -C "$SRC" install BUILD="$BUILD" DESTDIR="$STAGE" PREFIX=/usr/local JOBS=1 >"$WS/make.log" 2>&1 \
  && pass "make install DESTDIR PREFIX" || { fail "make install: $(tail -20 "$WS/make.log")"; finish; }
grep -q "install-deps\|apt-get" "$WS/make.log" && fail "make install ran the dependency installer"
P="$STAGE/usr/local"
for f in bin/luagent share/man/man1/luagent.1 share/bash-completion/completions/luagent share/luagent/system_prompt.md; do
  [ -s "$P/$f" ] && pass "installed $f" || fail "missing $P/$f"
done
[ -x "$P/bin/luagent" ] || fail "the binary is not executable"
# nothing outside DESTDIR: every file cmake installed or found up to date
grep -E -- "-- (Installing|Up-to-date): " "$WS/make.log" | sed -E 's/.*-- (Installing|Up-to-date): //' > "$WS/installed.txt"
[ "$(wc -l < "$WS/installed.txt")" -ge 4 ] && ! grep -v "^$STAGE/usr/local/" "$WS/installed.txt" \
  && pass "every installed file is under DESTDIR" || fail "install outside DESTDIR: $(cat "$WS/installed.txt")"

# the installed binary, from a folder outside the repository, source tree out of sight
BIN="$P/bin/luagent"
mkdir -p "$WS/mine/skills/greet" "$WS/mine/automations"
cat > "$WS/mine/skills/greet/skill.lua" <<'LUA'
return { name = "greet", description = "Greets", tools = { hello = { description = "hi",
  params = { type = "object", properties = { who = { type = "string" } } }, impact = "read",
  run = function(a) return "hello " .. (a.who or "you") end } } }
LUA
printf 'return { cron = "0 7 * * *", tz = "Europe/Paris", run = function() end }\n' > "$WS/mine/automations/daily.lua"
printf 'return tools.call("greet.hello", { who = args.who })\n' > "$WS/mine/hi.lua"
run_inst() { (cd "$WS/mine" && env -u LUAGENT_SOURCE_DIR "$BIN" "$@") >"$WS/.out" 2>"$WS/.err"; }
run_inst version && grep -q "^luagent " "$WS/.out" && pass "installed binary: version" || fail "version: $(cat "$WS/.err")"
run_inst check && grep -q "check passed: 1 skill(s) with 1 tool(s), 1 automation(s)" "$WS/.out" && pass "installed binary: check" \
  || fail "check: $(cat "$WS/.out" "$WS/.err")"
run_inst run hi.lua --arg who=Ada && grep -qx "hello Ada" "$WS/.out" && pass "installed binary: run" || fail "run: $(cat "$WS/.out" "$WS/.err")"
run_inst automations next daily -n 1 && grep -q "07:00:00 CE" "$WS/.out" && pass "installed binary: automations next" || fail "next: $(cat "$WS/.out")"

# the installed prompt is the one read: mark it and look at what the model got
echo "MARK-INSTALLED-PROMPT-7731" >> "$P/share/luagent/system_prompt.md"
printf '{"steps":[{"text":"hi"}]}' > "$WS/fx.json"
python3 "$SRC/tests/mock_llm.py" --script "$WS/fx.json" --port-file "$WS/port" --log "$WS/mock.log" &
PIDS="$PIDS $!"
for _ in $(seq 100); do [ -s "$WS/port" ] && break; sleep 0.05; done
cat > "$WS/mine/luagent.lua" <<LUA
return { providers = { { name = "m", kind = "openai", base_url = "http://127.0.0.1:$(cat "$WS/port")/v1", model = "m", timeout_s = 10 } } }
LUA
run_inst ask "hello" && grep -q "MARK-INSTALLED-PROMPT-7731" "$WS/mock.log" && pass "the installed prompt reaches the model" \
  || fail "ask: $(cat "$WS/.err"); the model did not get the installed prompt"

# man page: renders, and names every command of the overview
if command -v man >/dev/null; then
  MANWIDTH=80 man -l "$P/share/man/man1/luagent.1" >"$WS/man.txt" 2>"$WS/man.err" && grep -q "^NAME" "$WS/man.txt" \
    && pass "the man page renders" || fail "man -l: $(head -5 "$WS/man.err")"
fi
if command -v groff >/dev/null; then
  groff -man -ww -z "$P/share/man/man1/luagent.1" 2>"$WS/groff.err"
  [ ! -s "$WS/groff.err" ] && pass "groff: no warnings" || fail "groff warnings: $(head -5 "$WS/groff.err")"
fi
for c in $("$BIN" help | sed -n '/^commands:/,/^topics:/p' | grep -E '^  [a-z]' | awk '{print $1}'); do
  grep -q "^\.[A-Z]*  *\"\?$c\b\|^\.[A-Z]* \"$c \|^\.B $c\|^\.BI \"$c \|^\.B \"$c \|^\.BR \"$c " "$P/share/man/man1/luagent.1" \
    || fail "the man page does not describe '$c'"
done
pass "the man page describes every command"
# the completion file is what the binary prints, and it completes
"$BIN" completion bash | cmp -s - "$P/share/bash-completion/completions/luagent" && pass "the installed completion is current" \
  || fail "installed completion differs from \`luagent completion bash\`"
got=$(PATH="$P/bin:$PATH" bash -c '. "$1"; COMP_WORDS=(luagent -w "$2" automations next ""); COMP_CWORD=5; _luagent; printf "%s\n" "${COMPREPLY[@]}"' _ \
  "$P/share/bash-completion/completions/luagent" "$WS/mine")
[ "$got" = daily ] && pass "the installed completion names the workspace's automations" || fail "completion: $got"
# README says where the binary is
grep -q "make install" "$SRC/README.md" && pass "the README names make install" || fail "README does not mention make install"
# the README's tutorial, exactly as written, with the installed binary as `luagent`
env -u LUAGENT_SOURCE_DIR bash "$SRC/tests/e2e/readme_tutorial.sh" "$BIN" >"$WS/tutorial.log" 2>&1 \
  && pass "the installed binary runs the README's tutorial" || fail "tutorial, installed binary: $(tail -20 "$WS/tutorial.log")"
finish
