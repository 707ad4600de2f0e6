#!/bin/sh
# Writes cmake/hot_functions.txt: the functions of the luagent binary that
# `luagent version` and a cold 10-turn `ask` (the task of run_startup.sh,
# against tests/mock_llm.py) execute, one name a line, sorted. CMake hands
# the file to lld (--symbol-ordering-file) when it links luagent, which
# places those functions side by side at the start of .text: the kernel
# maps a binary's cached pages 64 KiB at a time around each page touched,
# so hot code scattered over the whole 2 MiB text made all of it resident;
# packed, a cold `ask` maps about 0.75 MiB less (bench/README.md, "After
# (branch `cold`)").
# The order only moves code: a stale or missing name costs memory, never
# behaviour (lld ignores names it does not find). Rerun after changes that
# add or rename much of what a start runs, and commit the file.
# Usage: bench/hot_order.sh BUILD_DIR   (needs valgrind and python3)
set -eu
B=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
case $B in /*) ;; *) B=$(pwd)/$B ;; esac
[ -x "$B/luagent" ] || { echo "hot_order: $B/luagent is missing" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "hot_order: valgrind is needed" >&2; exit 1; }
T=$(mktemp -d /tmp/luagent_hot_XXXXXX)
MOCK=
cleanup() {
  bench_mock_stop
  rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
bench_task "$T/fixture.json" keep_alive
bench_mock hot_order "$T/fixture.json"
export LUAGENT_PROVIDER=openai LUAGENT_MODEL=m LUAGENT_BASE_URL=$URL
mkdir -p "$T/ws"
# the first ask creates the workspace; the second is the cold ask measured
"$B/luagent" --workspace "$T/ws" ask --max-iterations 10 "Do the ten steps." >/dev/null 2>&1
cg() { # cg OUT ARGS...: one luagent run under callgrind
  out=$1
  shift
  bench_callgrind "$out" "$B/luagent" "$@" >/dev/null ||
    { echo "hot_order: luagent $* failed" >&2; exit 1; }
}
cg "$T/cg.1" version
cg "$T/cg.2" --workspace "$T/ws" ask --max-iterations 10 "Do the ten steps."
# the static archives luagent links (SQLite, Lua, libsodium, libyaml): their
# objects were not compiled with -ffunction-sections, so lld moves an
# object's whole .text when it holds one hot name
ARCHIVES=$(tr ' ' '\n' <"$B/CMakeFiles/luagent.dir/link.txt" | grep '^/.*\.a$' || :)
# function names whose object is the binary (callgrind marks recursion
# levels with 'N and prints addresses for code without a symbol); a big
# archive object that is mostly cold (fts5.o: 121 KiB for the 1 KiB its
# init runs) is left where it is, since moving it would put all of it
# between the hot functions
for f in "$T"/cg.*; do
  callgrind_annotate --threshold=100 "$f" 2>/dev/null
done | python3 -c '
import collections, re, subprocess, sys
names = set()
for line in sys.stdin:
    m = re.match(r"\s*[\d,]+ \(.*?\)\s+(?:\S*:)?(\S+) \[(.*)\]$", line)
    if not m or not m.group(2).endswith("/luagent"):
        continue
    name = re.sub(r"\x27\d+$", "", m.group(1))
    if re.match(r"^[A-Za-z_][\w.]*$", name):
        names.add(name)
for ar in sys.argv[1:]:
    out = subprocess.run(["nm", "-S", "--defined-only", ar], capture_output=True, text=True).stdout
    member, size, hot, syms = None, collections.Counter(), collections.Counter(), {}
    for l in out.splitlines():
        if l.endswith(":"):
            member = l[:-1]
            continue
        p = l.split()
        if len(p) == 4 and p[2] in "tT":
            size[member] += int(p[1], 16)
            if p[3] in names:
                hot[member] += int(p[1], 16)
                syms.setdefault(member, []).append(p[3])
    for mb in hot:
        if size[mb] > 32768 and hot[mb] * 8 < size[mb]:
            names.difference_update(syms[mb])
sys.stdout.write("".join(n + "\n" for n in sorted(names)))
' $ARCHIVES >"$T/hot"
[ -s "$T/hot" ] || { echo "hot_order: no function names found (is $B/luagent stripped?)" >&2; exit 1; }
cp "$T/hot" "$ROOT/cmake/hot_functions.txt"
echo "hot_order: $(wc -l <"$T/hot") functions in cmake/hot_functions.txt"
