#!/bin/bash
# e2e: the "auto" approver on a real terminal (a pseudo-terminal driven by
# python3's pty module): the operator sees tool, impact, reason and exact
# args; "e" + JSON runs the edited arguments, "n" + reason raises it in the
# script, "y" approves.
set -u
BIN=${1:?usage: $0 path/to/luagent}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$W/data"
for f in a b c; do echo $f > "$W/data/$f.txt"; done
cat > "$W/t.lua" <<'LUA'
tools.call("fs.delete", { path = "a.txt" })
print("first done")
local ok, err = pcall(tools.call, "fs.delete", { path = "c.txt" })
print("second", ok, err and err.message)
tools.call("fs.delete", { path = "c.txt" })
print("third done")
LUA
cat > "$W/drive.py" <<'PY'
import os, pty, sys, time, select
binary, ws = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    os.chdir(ws)
    os.execv(binary, [binary, "run", "t.lua"])
out = b""
def read_until(token, timeout=20):
    global out
    end = time.time() + timeout
    while token not in out:
        left = end - time.time()
        if left <= 0:
            raise SystemExit("timed out waiting for %r; got:\n%s" % (token, out.decode(errors="replace")))
        r, _, _ = select.select([fd], [], [], left)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                raise SystemExit("EOF waiting for %r; got:\n%s" % (token, out.decode(errors="replace")))
            out += chunk
def answer(*lines):
    for l in lines:
        os.write(fd, l.encode() + b"\n")
        time.sleep(0.05)
read_until(b"approve? ")
answer("e", '{"path":"b.txt"}')
read_until(b"first done")
read_until(b"approve? ")
answer("n", "not this one")
read_until(b"second")
read_until(b"approve? ")
answer("y")
read_until(b"third done")
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
sys.exit(os.waitstatus_to_exitcode(status))
PY
out=$(timeout 60 python3 "$W/drive.py" "$BIN" "$W") || fail "terminal session failed: $out"
echo "$out"
grep -q 'tool: *fs.delete (impact high)' <<<"$out" || fail "prompt does not show the tool and impact"
grep -q 'args: *{"path":"a.txt"}' <<<"$out" || fail "prompt does not show the exact args"
grep -q 'reason: *impact high' <<<"$out" || fail "prompt does not show the reason"
[ -e "$W/data/a.txt" ] || fail "the original arguments ran instead of the edited ones"
[ ! -e "$W/data/b.txt" ] || fail "the edited arguments did not run"
grep -q 'second.*false.*denied by the operator: not this one' <<<"$out" || fail "the denial reason did not reach the script"
[ ! -e "$W/data/c.txt" ] || fail "the approved call did not run"
echo "PASS security_terminal"
