#!/bin/sh
# Issue 20's start-up and memory figures, each beside its floor measured in
# the same run:
#   - `luagent version`: wall (median and min of many processes), the
#     instructions it executes (callgrind, loader included: repeatable on a
#     loaded machine), the shared libraries mapped, its peak RSS;
#   - a cold `luagent ask` of the 10-turn task (9 streamed tool rounds + an
#     answer) against tests/mock_llm.py, against the raw C floor's cold
#     process (bench_floor: libcurl only, replaying the very request bodies
#     luagent sent, one kept-alive handle): wall, instructions, peak RSS
#     (VmHWM read just before exit), shared libraries mapped; and the same
#     ask with its workspace on tmpfs (/dev/shm), where the journal's and
#     the audit chain's fsyncs cost nothing: on a busy disk they are most of
#     the difference in wall time (the floor writes nothing).
# The "baseline" column is main at 519106e measured by this script
# (bench/README.md); BASE=/path/to/an/older/luagent measures that binary in
# the same run as well.
# Usage: bench/run_startup.sh BUILD_DIR   (N=runs of version, M=runs of ask)
set -u
B=${1:-build}
N=${N:-300}
M=${M:-30}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
case $B in /*) ;; *) B=$(pwd)/$B ;; esac
BASE=${BASE:-}
for x in luagent bench_startup bench_floor; do
  [ -x "$B/$x" ] || { echo "run_startup: $B/$x is missing (cmake --build $B)" >&2; exit 1; }
done
T=$(mktemp -d /tmp/luagent_startup_XXXXXX)
MOCK=
SHM=
cleanup() {
  bench_mock_stop
  rm -rf "$T"
  [ -n "$SHM" ] && rm -rf "$SHM"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
S=$B/bench_startup
HAVE_VG=0
command -v valgrind >/dev/null 2>&1 && HAVE_VG=1

# instr CMD...: instructions of the whole process (callgrind, loader included)
instr() {
  [ $HAVE_VG = 1 ] || { echo "-"; return; }
  bench_callgrind /dev/null "$@" | awk '/Collected :/ { print $4 }'
}
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
# peak NAME KEY CMD...: the median of 5 `bench_startup peak` runs of CMD,
# as NAME.KEY_rss, _anon, _file and _libs lines
peak() {
  pn=$1 pk=$2
  shift 2
  : >"$T/peaks"
  for r in 1 2 3 4 5; do "$S" peak "$@" >>"$T/peaks" || exit 1; done
  for x in hwm_kib:rss anon_kib:anon file_kib:file libs:libs; do
    echo "$pn.${pk}_${x#*:}=$(field "${x%%:*}" <"$T/peaks" | sort -n | sed -n 3p)"
  done
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "-" && b > 0) printf "%.2fx", a / b; else print "-" }'; }

# --- the mock and the task (the fixture of bench_react.c / run_peers.sh)
bench_task "$T/fixture.json" keep_alive
bench_mock run_startup "$T/fixture.json"
export LUAGENT_PROVIDER=openai LUAGENT_MODEL=m LUAGENT_BASE_URL=$URL
mkdir -p "$T/ws"
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  SHM=$(mktemp -d /dev/shm/luagent_startup_XXXXXX)
fi
ASK="--workspace $T/ws ask --max-iterations 10"
MSG="Do the ten steps."
"$B/luagent" $ASK "$MSG" >"$T/answer" 2>"$T/err" || {
  echo "run_startup: luagent ask failed: $(tail -3 "$T/err")" >&2
  exit 1
}
grep -q "the answer is 42" "$T/answer" || { echo "run_startup: wrong answer: $(cat "$T/answer")" >&2; exit 1; }
# the ten request bodies of that task, for the floor to replay
python3 - "$T/requests.jsonl" "$T/bodies" <<'EOF'
import json, sys
lines = open(sys.argv[1]).read().splitlines()[-10:]
with open(sys.argv[2], "w") as f:
    for l in lines:
        f.write(json.dumps(json.loads(l)["body"], separators=(",", ":")) + "\n")
EOF
"$B/bench_floor" "$URL/chat/completions" "$T/bodies" || exit 1

# measure NAME BIN: every figure of one luagent binary, as NAME.key=value lines
measure() {
  name=$1 bin=$2
  v=$("$S" time "$N" "$bin" version) || exit 1
  echo "$name.version_med=$(echo "$v" | field median_ms)"
  echo "$name.version_min=$(echo "$v" | field min_ms)"
  peak "$name" version "$bin" version
  echo "$name.version_ins=$(instr "$bin" version)"
  a=$("$S" time "$M" "$bin" $ASK "$MSG") || exit 1
  echo "$name.ask_med=$(echo "$a" | field median_ms)"
  echo "$name.ask_min=$(echo "$a" | field min_ms)"
  echo "$name.ask_cpu=$(echo "$a" | field cpu_ms)"
  peak "$name" ask "$bin" $ASK "$MSG"
  if [ -n "$SHM" ]; then
    mkdir -p "$SHM/$name"
    a=$("$S" time "$M" "$bin" --workspace "$SHM/$name" ask --max-iterations 10 "$MSG") || exit 1
    echo "$name.shm_min=$(echo "$a" | field min_ms)"
  fi
  echo "$name.ask_ins=$(instr "$bin" $ASK "$MSG")"
}
: >"$T/fig"
measure now "$B/luagent" >>"$T/fig"
[ -n "$BASE" ] && measure base "$BASE" >>"$T/fig"
f=$("$S" time "$M" "$B/bench_floor" "$URL/chat/completions" "$T/bodies") || exit 1
echo "floor.ask_med=$(echo "$f" | field median_ms)" >>"$T/fig"
echo "floor.ask_min=$(echo "$f" | field min_ms)" >>"$T/fig"
echo "floor.ask_cpu=$(echo "$f" | field cpu_ms)" >>"$T/fig"
peak floor ask "$B/bench_floor" "$URL/chat/completions" "$T/bodies" >>"$T/fig"
echo "floor.ask_ins=$(instr "$B/bench_floor" "$URL/chat/completions" "$T/bodies")" >>"$T/fig"
h=$("$S" time "$N" /bin/true) || exit 1
echo "true.version_med=$(echo "$h" | field median_ms)" >>"$T/fig"
echo "true.version_min=$(echo "$h" | field min_ms)" >>"$T/fig"

get() { v=$(sed -n "s/^$1=//p" "$T/fig"); echo "${v:--}"; }
# main at 519106e, measured by this script (bench/README.md, "Start-up")
B_VMED=6.09 B_VMIN=5.46 B_VLIBS=39 B_VRSS=9224 B_VINS=17130440
B_AMED=35.75 B_AMIN=29.21 B_ALIBS=39 B_ARSS=14432 B_AINS=36588440 B_AANON=2120 B_AFILE=12300 B_ACPU=16.93 B_SMIN=-
row() { # what now floor baseline [base-now] target
  printf '  %-40s %12s %12s %9s %12s %12s %s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")" "$4" "$5" "$6"
}
printf '\nstart-up and memory (floor measured in the same run; wall ms on a shared machine):\n'
printf '  %-40s %12s %12s %9s %12s %12s %s\n' what now floor ratio baseline "BASE now" target
row "luagent version, wall ms (median)" "$(get now.version_med)" "$(get true.version_med)" \
  "$B_VMED" "$(get base.version_med)" "<=2 ms (floor: /bin/true)"
row "luagent version, wall ms (min)" "$(get now.version_min)" "$(get true.version_min)" \
  "$B_VMIN" "$(get base.version_min)" ""
row "luagent version, instructions" "$(get now.version_ins)" "-" "$B_VINS" "$(get base.version_ins)" ""
row "luagent version, shared objects (at start)" "$(get now.version_libs)" "-" "$B_VLIBS" \
  "$(get base.version_libs)" ""
row "luagent version, peak RSS KiB" "$(get now.version_rss)" "-" "$B_VRSS" "$(get base.version_rss)" ""
row "cold 10-turn ask, wall ms (median)" "$(get now.ask_med)" "$(get floor.ask_med)" "$B_AMED" \
  "$(get base.ask_med)" "<=2x floor"
row "cold 10-turn ask, wall ms (min)" "$(get now.ask_min)" "$(get floor.ask_min)" "$B_AMIN" \
  "$(get base.ask_min)" ""
row "cold 10-turn ask on tmpfs, wall ms (min)" "$(get now.shm_min)" "$(get floor.ask_min)" "$B_SMIN" \
  "$(get base.shm_min)" ""
row "cold 10-turn ask, CPU ms (median)" "$(get now.ask_cpu)" "$(get floor.ask_cpu)" "$B_ACPU" \
  "$(get base.ask_cpu)" ""
row "cold 10-turn ask, instructions" "$(get now.ask_ins)" "$(get floor.ask_ins)" "$B_AINS" \
  "$(get base.ask_ins)" ""
row "cold 10-turn ask, shared objects by its end" "$(get now.ask_libs)" "$(get floor.ask_libs)" "$B_ALIBS" \
  "$(get base.ask_libs)" ""
row "cold 10-turn ask, peak RSS KiB" "$(get now.ask_rss)" "$(get floor.ask_rss)" "$B_ARSS" \
  "$(get base.ask_rss)" "<=8192 KiB"
row "  of it private (RssAnon at exit)" "$(get now.ask_anon)" "$(get floor.ask_anon)" "$B_AANON" \
  "$(get base.ask_anon)" ""
row "  of it file-backed (RssFile at exit)" "$(get now.ask_file)" "$(get floor.ask_file)" "$B_AFILE" \
  "$(get base.ask_file)" ""
