#!/bin/sh
# Issue 20's figures: instructions per operation (callgrind, exact and
# repeatable on a loaded machine) for each target beside its floor measured
# in the same process, and the baseline of bench/README.md ("Speed baseline
# (issue 20)"). Then a second callgrind run with --separate-threads=yes
# gives each region's instructions on the calling thread alone, beside the
# first run's all-threads figure (the store writer's thread does the run
# journal's and the queued audit rows' SQLite work). Without valgrind it
# prints the wall times only.
# Usage: bench/run_speed.sh BUILD_DIR   (N=calls per loop, TASKS=warm tasks)
set -u
B=${1:-build}
N=${N:-2000}
TASKS=${TASKS:-3}
export LUAGENT_SOURCE_DIR=${LUAGENT_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
if ! command -v valgrind >/dev/null 2>&1; then
  echo "valgrind not found: wall times only"
  exec "$B/bench_speed" "$N" "$TASKS"
fi
OUT=$(mktemp -d /tmp/luagent-bench-speed.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/cg.%p" \
  "$B/bench_speed" "$N" "$TASKS" 2>"$OUT/vg.err" | sed 's/^/  (under valgrind) /' || {
  cat "$OUT/vg.err" >&2
  exit 1
}
# One dump per region: "desc: Trigger: Client Request: NAME COUNT" and its
# total ("summary:" or "totals:"). Prints NAME PER-OP.
for f in "$OUT"/cg.*; do
  awk '/^desc: Trigger: Client Request:/ { name = $5; n = $6 }
       /^(summary|totals):/ { t = $2 }
       END { if (name != "") printf "%s %.0f\n", name, t / n }' "$f"
done > "$OUT/per_op"
# The same regions again with --separate-threads=yes: a client request
# then dumps (and zeroes) only the thread that makes it, so each region's
# files NAME.N-01 hold the calling thread alone (the bench runs every
# region on its main thread, thread 1); what the store writer's thread does
# for that region is in the all-threads figure of the first run only.
# --fair-sched=yes: valgrind runs one thread at a time, and without it the
# woken writer thread rarely gets its turn while the caller is busy, so
# the queue fills to its bound and the caller writes the rows itself (a
# barrier makes its pass on the caller's thread), which a machine with a
# second core seldom sees; echo read 21k on the caller that way, 12.5k
# with fair scheduling.
mkdir "$OUT/t"
# BENCH_FLUSH_AFTER=1: each region's closing sec_flush comes after its
# dump, so the calling thread's figure is the calls' own cost, not also
# the rows the writer had not taken yet when the loop ended (0 to 1.5k
# per echo call from run to run when the flush was inside); those rows are
# in the first run's all-threads figure.
BENCH_FLUSH_AFTER=1 valgrind --tool=callgrind --instr-atstart=no --separate-threads=yes --fair-sched=yes \
  --callgrind-out-file="$OUT/t/cg.%p" "$B/bench_speed" "$N" "$TASKS" >/dev/null 2>"$OUT/vg2.err" || {
  cat "$OUT/vg2.err" >&2
  exit 1
}
for f in "$OUT"/t/cg.*.*-01; do
  awk '/^desc: Trigger: Client Request:/ { name = $5; n = $6 }
       /^(summary|totals):/ { t = $2 }
       END { if (name != "") printf "%s %.0f\n", name, t / n }' "$f"
done > "$OUT/per_op_thread"
get() { awk -v k="$1" '$1 == k { print $2 }' "$OUT/per_op"; }
getc() { awk -v k="$1" '$1 == k { print $2 }' "$OUT/per_op_thread"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1fx", a / b; else print "-" }'; }
bare=$(get bare); echo_=$(get echo); skill=$(get skill); audit=$(get audit); task=$(get task); raw=$(get raw)
# The baseline: main at 17de3e0, measured by this script (bench/README.md).
B_BARE=1698 B_ECHO=31389 B_SKILL=590127 B_AUDIT=241750 B_TASK=12036017 B_RAW=818259
printf '\ninstructions per operation (callgrind), floor measured in the same process:\n'
printf '  %-34s %12s %12s %9s %14s %8s\n' what now floor ratio baseline target
printf '  %-34s %12s %12s %9s %14s %8s\n' "tools.call('echo')" "$echo_" "$bare" \
  "$(ratio "$echo_" "$bare")" "$B_ECHO" "<=4x"
printf '  %-34s %12s %12s %9s %14s %8s\n' "  the same, calling thread" "$(getc echo)" "$bare" \
  "$(ratio "$(getc echo)" "$bare")" "-" "<=4x"
printf '  %-34s %12s %12s %9s %14s %8s\n' "read-only Lua skill tool call" "$skill" "-" \
  "$(ratio "$skill" "$bare")" "$B_SKILL" "<=60k"
printf '  %-34s %12s %12s %9s %14s %8s\n' "audit row, synchronous append" "$audit" "-" \
  "-" "$B_AUDIT" "-"
printf '  %-34s %12s %12s %9s %14s %8s\n' "warm 10-turn task (streamed)" "$task" "$raw" \
  "$(ratio "$task" "$raw")" "$B_TASK" "<=2.0M"
printf '  %-34s %12s %12s %9s %14s %8s\n' "  the same, the loop's thread" "$(getc task)" "$raw" \
  "$(ratio "$(getc task)" "$raw")" "-" "-"
task_a=$(get task_a)
printf '  %-34s %12s %12s %9s %14s %8s\n' "  the same, Anthropic wire" "${task_a:--}" "$raw" \
  "$(ratio "${task_a:-0}" "$raw")" "-" "-"
printf '\ninstructions per operation by thread (a second callgrind run, --separate-threads=yes):\n'
printf '  %-34s %16s %12s %14s\n' what "calling thread" "all threads" "other threads"
for k in echo skill audit task task_a; do
  c=$(getc "$k"); a=$(get "$k")
  o=$(awk -v a="$a" -v c="$c" 'BEGIN { if (a != "" && c != "") printf "%.0f", a - c; else print "-" }')
  printf '  %-34s %16s %12s %14s\n' "$k" "${c:--}" "${a:--}" "$o"
done
echo "  (all threads: the first run's figure, every queued row written inside the region; calling"
echo "   thread: the calls' own cost, the closing flush after the dump; other threads: the rows' writing,"
echo "   from the difference of two runs, so it may be off by the runs' own spread)"
