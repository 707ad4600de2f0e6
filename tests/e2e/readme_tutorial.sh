#!/bin/bash
# The README's tutorial, exactly as written: every ```sh block marked
# <!-- tutorial --> (or <!-- tutorial answer y -->, typed into a terminal:
# "y" at each approval prompt) runs, in order, in one temporary folder
# outside the repository, with `luagent` on PATH being the built binary.
# Each block must exit 0, and every line of the ```text block marked
# <!-- tutorial output --> after it must appear in what the block printed
# ("..." stands for anything).
set -u
BIN=${1:?usage: $0 path/to/luagent}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
README=$(cd "$(dirname "$0")/../.." && pwd)/README.md
[ -f "$README" ] || { echo "FAIL: no README.md at $README" >&2; exit 1; }
T=$(mktemp -d /tmp/luagent-tutorial.XXXXXX)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/bin" "$T/home"
ln -s "$BIN" "$T/bin/luagent"
# Nothing from this machine's environment may steer the provider.
unset LUAGENT_PROVIDER LUAGENT_MODEL LUAGENT_BASE_URL LUAGENT_API_KEY
export PATH="$T/bin:$PATH" HOME="$T/home"

python3 - "$README" "$T" <<'PY'
import os, pty, re, select, subprocess, sys, time

readme, tmp = sys.argv[1], sys.argv[2]
lines = open(readme, encoding="utf-8").read().split("\n")

def block_after(i, lang):
    """The fenced block starting at the first line after i (blank lines skipped)."""
    j = i + 1
    while j < len(lines) and not lines[j].strip():
        j += 1
    if j >= len(lines) or lines[j].strip() != "```" + lang:
        sys.exit("FAIL: README.md:%d: a tutorial marker must be followed by a ```%s block" % (i + 1, lang))
    k = j + 1
    while k < len(lines) and lines[k].strip() != "```":
        k += 1
    return lines[j + 1:k], k

steps = []
for i, l in enumerate(lines):
    m = re.fullmatch(r"<!-- tutorial( answer (\w+))? -->", l.strip())
    if m:
        code, end = block_after(i, "sh")
        steps.append({"line": i + 1, "code": "\n".join(code), "answer": m.group(2), "expect": []})
    elif l.strip() == "<!-- tutorial output -->":
        if not steps:
            sys.exit("FAIL: README.md:%d: tutorial output before any tutorial block" % (i + 1))
        out, _ = block_after(i, "text")
        steps[-1]["expect"] += [x.rstrip() for x in out if x.strip()]
if len(steps) < 6:
    sys.exit("FAIL: found %d tutorial blocks in README.md, expected at least 6 (the markers moved?)" % len(steps))

cwd = os.path.join(tmp, "work")
os.mkdir(cwd)
cwdfile = os.path.join(tmp, "cwd")
open(cwdfile, "w").write(cwd)

def run_plain(script):
    p = subprocess.run(["bash", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    return p.returncode, p.stdout.decode("utf-8", "replace")

def run_terminal(script, answer):
    """As a person at a terminal: `answer` at every approval prompt."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp("bash", ["bash", "-c", script])
    out, answered, end = b"", 0, time.time() + 120
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.5)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                break
            out += chunk
            if out.count(b"approve? ") > answered:
                answered += 1
                os.write(fd, answer.encode() + b"\n")
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    text = out.decode("utf-8", "replace").replace("\r\n", "\n")
    if answered == 0:
        text += "\n[tutorial test: no approval prompt appeared]"
    return os.waitstatus_to_exitcode(status), text

def matches(want, got_lines):
    rx = ".*".join(re.escape(p) for p in re.split(r"\s*\.\.\.\s*", want))
    return any(re.search(rx, g) for g in got_lines)

fails = 0
for n, s in enumerate(steps, 1):
    here = open(cwdfile).read().strip()
    script = 'set -e\ncd "%s"\n%s\npwd > "%s"\n' % (here, s["code"], cwdfile)
    rc, out = run_terminal(script, s["answer"]) if s["answer"] else run_plain(script)
    got = out.split("\n")
    missing = [w for w in s["expect"] if not matches(w, got)]
    if rc != 0 or missing:
        fails += 1
        print("FAIL: tutorial block %d (README.md:%d) exited %d; missing lines: %s\n--- it printed:\n%s---"
              % (n, s["line"], rc, missing, out), file=sys.stderr)
        break  # later blocks build on this one
    print("ok: tutorial block %d (README.md:%d): %s" % (n, s["line"], s["code"].split("\n")[0]))
if os.path.realpath(tmp).startswith(os.path.realpath(os.path.dirname(readme)) + os.sep):
    sys.exit("FAIL: the tutorial ran inside the repository")
sys.exit(1 if fails else 0)
PY
rc=$?
[ $rc = 0 ] && echo "PASS readme_tutorial"
exit $rc
