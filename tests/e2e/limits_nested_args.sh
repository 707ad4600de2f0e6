#!/bin/sh
# The run's memory cap holds across nested skill tools: the arguments a
# tools.call hands down stay charged to the caller while the callee runs, so
# a recursion cannot hold its arguments at every level on top of the cap
# (red team 8, F3: each level passing 3 x 6 MiB reached 111 MiB under a
# 64 MiB cap before a limit stopped it). The peak RSS is the process's own,
# read by python's getrusage of the child.
. "$(dirname "$0")/lib/common.sh"
cd "$WS" || exit 1
echo 'return { limits = { memory_mb = 64, instructions = 1e9, deadline_s = 60 } }' >luagent.lua
mkdir -p skills/rec
cat >skills/rec/skill.lua <<'LUA'
return { name = "rec", description = "recurses", tools = { down = { description = "down",
  impact = "read", params = { type = "object" },
  run = function(args)
    if args.n <= 0 then return { n = 0 } end
    local s = string.rep(string.char(65 + args.n), args.mib * 1024 * 1024)
    local r = tools.call("rec.down", { n = args.n - 1, mib = args.mib, a = s, b = s, c = s })
    return { n = r.n + 1 }
  end } } }
LUA
echo 'print(json.encode(tools.call("rec.down", { n = 7, mib = 6 })))' >big.lua
echo 'print(json.encode(tools.call("rec.down", { n = 7, mib = 1 })))' >small.lua
# peak RUN: prints the exit status, then the child's peak RSS in KiB
peak() {
  python3 - "$LUAGENT" "$1" <<'PY'
import resource, subprocess, sys
p = subprocess.run([sys.argv[1], "run", sys.argv[2]], capture_output=True, text=True)
sys.stdout.write(p.stdout); sys.stderr.write(p.stderr)
print("rc=%d peak_kib=%d" % (p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
PY
}
# Within the cap: 7 levels of 3 x 1 MiB (21 MiB of arguments, 42 MiB with
# the callees' copies) run to the end.
peak small.lua >small.out 2>small.err
grep -q '"n":7' small.out && pass "7 nested levels of 3 MiB arguments run under a 64 MiB cap" ||
  fail "the small recursion did not finish: $(cat small.out small.err | head -c 600)"
# Over it: stopped by the memory limit, near the cap. Under AddressSanitizer
# freed blocks wait in its quarantine (256 MiB by default) and count in the
# RSS: it is turned off here, so the peak is the live memory plus ASan's
# shadow (85 MiB there, 69 MiB without ASan; 111 MiB before the fix).
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0"
export ASAN_OPTIONS
peak big.lua >big.out 2>big.err
grep -q 'limit_memory' big.err && pass "the big recursion is stopped by the memory limit" ||
  fail "no memory limit error: $(cat big.out big.err | head -c 600)"
kib=$(sed -n 's/.*peak_kib=\([0-9]*\).*/\1/p' big.out)
[ -n "$kib" ] && [ "$kib" -le $((64 * 1024 * 3 / 2)) ] &&
  pass "peak RSS $((kib / 1024)) MiB stays within 1.5x the 64 MiB cap" ||
  fail "peak RSS ${kib:-?} KiB, over 1.5x the 64 MiB cap"
finish
