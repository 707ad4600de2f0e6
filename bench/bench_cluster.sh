#!/bin/bash
# Cluster benchmark: 1, 2, 4 and 8 daemons (separate processes, each with its
# own workspace copy) sharing one PostgreSQL, on N short automations at
# every = "1s" (default 300: 300 runs due per second). For each count:
# runs per second executed in the window, lateness (run start - slot) p50
# and p99, slots skipped (mode single: the previous run still going), and
# CPU of the daemons,
# their workers and PostgreSQL. Usage: bench/bench_cluster.sh BUILD_DIR [N] [SECONDS]
set -u
B=${1:-build}
N=${2:-300}
SECS=${3:-12}
COUNTS=${COUNTS:-"1 2 4 8"}
LUAGENT=$(cd "$B" && pwd)/luagent
HERE=$(cd "$(dirname "$0")" && pwd)
set -- "$LUAGENT"
. "$HERE/../tests/e2e/lib/common.sh"
. "$HERE/../tests/e2e/lib/pg.sh"
pg_start >/dev/null
ticks=$(getconf CLK_TCK)
cpu_tree() { # utime+stime (ticks) of pids and their children
  local s=0
  for p in "$@"; do
    s=$((s + $(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
    for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do
      s=$((s + $(awk '{ print $14 + $15 }' "/proc/$c/stat" 2>/dev/null || echo 0)))
    done
  done
  echo $s
}
pg_pids() { pgrep -u postgres -d ' ' postgres 2>/dev/null || pgrep -d ' ' postgres; }
echo "cluster bench: $N automations at every=1s, ${SECS}s window per count, $(nproc) CPUs, lease 15s"
for k in $COUNTS; do
  pg_sql "TRUNCATE luagent_runs, luagent_slots, luagent_schedules, luagent_state, luagent_files, luagent_nodes" >/dev/null 2>&1
  pids=""
  for h in $(seq 1 "$k"); do
    d="$WS/h$k-$h"
    mkdir -p "$d/automations"
    for i in $(seq 1 "$N"); do
      printf 'return { every = "1s", run = function(ctx) ctx.state.n = (ctx.state.n or 0) + 1 end }\n' \
        >"$d/automations/a$i.lua"
    done
    printf 'return { cluster = { postgres = "%s", node = "h%s" } }\n' "$PG_URL" "$h" >"$d/luagent.lua"
    "$LUAGENT" --workspace "$d" daemon --quiet --workers 8 >"$d.log" 2>&1 &
    pids="$pids $!"
  done
  PIDS="$PIDS $pids"
  sleep 5 # load, first burst, workers warm
  t0=$(python3 -c 'import time; print(time.time())')
  c0=$(cpu_tree $pids); p0=$(cpu_tree $(pg_pids))
  sleep "$SECS"
  t1=$(python3 -c 'import time; print(time.time())')
  c1=$(cpu_tree $pids); p1=$(cpu_tree $(pg_pids))
  for p in $pids; do kill -TERM "$p"; done
  for p in $pids; do wait "$p"; done
  pg_sql "SELECT started - slot FROM luagent_runs WHERE status = 'ok' AND started >= $t0 AND started < $t1" >"$WS/late.txt"
  skipped=$(pg_sql "SELECT count(*) FROM luagent_runs WHERE status = 'skipped' AND queued >= $t0 AND queued < $t1")
  python3 - "$WS/late.txt" "$t0" "$t1" "$c0" "$c1" "$p0" "$p1" "$ticks" "$k" "$N" "$skipped" <<'PY'
import sys
f, t0, t1, c0, c1, p0, p1, tck, k, n, skipped = sys.argv[1:]
late = sorted(float(x) for x in open(f) if x.strip())
wall = float(t1) - float(t0)
def pct(p): return late[min(len(late) - 1, int(p * len(late)))] * 1000 if late else float("nan")
d = (int(c1) - int(c0)) / int(tck)
pg = (int(p1) - int(p0)) / int(tck)
print(f"  {k} daemon(s): {len(late)/wall:6.1f} runs/s (ideal {n}), lateness p50 {pct(.5):7.1f} ms p99 {pct(.99):7.1f} ms,"
      f" skipped {skipped}; CPU daemons+workers {100*d/wall:5.1f}%, postgres {100*pg/wall:5.1f}% of one core")
PY
done
