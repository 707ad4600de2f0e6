#!/bin/bash
# Issue 12 item 10: --help and -h on every command and subcommand print that
# command's usage on stdout and exit 0 (nothing on stderr, nothing run);
# `luagent help TOPIC` shows the topic; an unknown command or subcommand
# names the unknown word; `run` of a missing file or of a folder is a usage
# error (exit 2) with a clear message.
. "$(dirname "$0")/lib/common.sh"
mkdir -p "$WS/automations"
printf 'return { every = "1h", run = function() error("must not run") end }\n' > "$WS/automations/tick.lua"

# the commands and subcommands, read from the binary's own overview
expect_rc 0 "$LUAGENT" help && out_has "commands:" && pass "help: the overview"
expect_rc 0 "$LUAGENT" --help && pass "--help: the overview"
python3 - "$LUAGENT" "$WS" <<'PY' || fail "per-command help"
import subprocess, sys, re
exe, ws = sys.argv[1], sys.argv[2]
over = subprocess.run([exe, "help"], capture_output=True, text=True).stdout
cmds = []
for line in over.split("commands:")[1].split("topics:")[0].splitlines():
    m = re.match(r"  (\S+)(?: (\S+))?", line)
    if not m or line.startswith("   "):
        continue
    subs = m.group(2).split("|") if m.group(2) and re.fullmatch(r"[a-z|]+", m.group(2)) else []
    cmds.append((m.group(1), subs))
assert len(cmds) >= 15, cmds
bad = []
n = 0
for cmd, subs in cmds:
    for sub in [None] + subs:
        for flag in ("--help", "-h"):
            argv = [exe, cmd] + ([sub] if sub else []) + [flag]
            if cmd == "help":
                continue  # help --help is the overview, checked above
            r = subprocess.run(argv, capture_output=True, text=True, cwd=ws, timeout=20)
            first = r.stdout.split("\n")[0].split()
            ok = first[:3] == ["usage:", "luagent", cmd]
            if sub:  # "enable|disable NAME" answers for disable too
                ok = ok and len(first) > 3 and sub in first[3].split("|")
            if r.returncode != 0 or not ok or r.stderr:
                bad.append((argv[1:], r.returncode, r.stdout[:80], r.stderr[:200]))
            n += 1
    # help CMD shows the same usage
    r = subprocess.run([exe, "help", cmd], capture_output=True, text=True, cwd=ws)
    if r.returncode != 0 or ("usage: luagent " + cmd) not in r.stdout:
        bad.append((["help", cmd], r.returncode, r.stdout[:80], r.stderr[:200]))
# a subcommand's help lists only that subcommand
r = subprocess.run([exe, "automations", "next", "--help"], capture_output=True, text=True, cwd=ws)
if "automations list" in r.stdout or "next NAME [-n N]" not in r.stdout:
    bad.append(("automations next --help shows more than next", r.stdout))
# --help wins wherever it stands, and nothing runs
r = subprocess.run([exe, "automations", "run", "tick", "--help"], capture_output=True, text=True, cwd=ws)
if r.returncode != 0 or "must not run" in r.stdout + r.stderr or "usage: luagent automations run" not in r.stdout:
    bad.append(("automations run tick --help ran something", r.returncode, r.stdout, r.stderr))
print("checked", n, "help invocations")
if bad:
    for b in bad:
        print("BAD", b)
    sys.exit(1)
PY
[ $? = 0 ] && pass "every command and subcommand answers --help and -h with its usage, exit 0"

# topics
for t in exit-codes json workspace; do
  expect_rc 0 "$LUAGENT" help "$t" && [ -s "$WS/.out" ] && pass "help $t"
done
expect_rc 0 "$LUAGENT" help automations next && out_has "usage: luagent automations next" && pass "help CMD SUB"
expect_rc 2 "$LUAGENT" help frobnicate && err_has "unknown topic 'frobnicate'" && pass "an unknown topic is named"
expect_rc 2 "$LUAGENT" help automatons && err_has "did you mean 'automations'?" && pass "a misspelt topic gets a suggestion"

# unknown words are named
expect_rc 2 "$LUAGENT" frobnicate && err_has "unknown command 'frobnicate'" && pass "unknown command named"
expect_rc 2 "$LUAGENT" automatons list && err_has "unknown command 'automatons'; did you mean 'automations'?" && pass "near miss suggested"
expect_rc 2 "$LUAGENT" automations lsit && err_has "automations: unknown subcommand 'lsit'; did you mean 'list'?" \
  && err_has "usage: luagent automations" && pass "unknown subcommand named, usage shown"
for c in "skills frob" "runs frob" "audit frob" "approvals frob" "secrets frob" "sessions frob" "tools frob"; do
  # shellcheck disable=SC2086
  expect_rc 2 "$LUAGENT" $c && err_has "unknown subcommand 'frob'" && pass "$c: named"
done
expect_rc 2 "$LUAGENT" --frob && err_has "unknown option '--frob'" && pass "unknown global option named"
expect_rc 2 "$LUAGENT" runs list --frob && err_has "unknown option --frob" && pass "unknown command option named"

# run: a missing file and a folder are usage errors
expect_rc 2 "$LUAGENT" run nothere.lua && err_has "run: nothere.lua: no such file" && pass "run nothere.lua: exit 2, clear"
mkdir -p "$WS/adir"
expect_rc 2 "$LUAGENT" run adir && err_has "run: adir is a folder, not a Lua script" && pass "run DIR: exit 2, clear"
expect_rc 2 "$LUAGENT" run && err_has "usage: luagent run FILE.lua" && pass "run without a file: usage"
printf 'return 1 + 1\n' > "$WS/ok.lua"
expect_rc 0 "$LUAGENT" run ok.lua && out_has "2" && pass "a real script still runs"
finish
