#!/bin/bash
# Instructions per automation run (callgrind), for the scheduler and for a
# worker, of one or more builds measured one after the other:
#   scheduler: a daemon with N automations at every = "1s" (default 200, so
#   it keeps up under valgrind), counters zeroed after a warm-up and dumped
#   SECS seconds later, divided by the runs journaled in between; the
#   workers run natively (valgrind does not follow their exec).
#   worker: one worker driven over its descriptors (bench_sched_worker.py),
#   100 and 1,100 jobs, the difference over 1,000.
# Usage: bench/bench_sched_cg.sh BUILD_DIR[:json] ... ; ":json" marks a build
# before the binary job records (its worker is driven with JSON frames).
# N=200 SECS=10 WARMUP=12 EVERY=1s set the scheduler's run (N=1000 EVERY=10s: bursts
# of 1,000 due at once, which it drains between them).
set -u
N=${N:-200}
SECS=${SECS:-10}
HERE=$(cd "$(dirname "$0")" && pwd)
count() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'; }
for spec in "$@"; do
  B=${spec%%:json}
  proto=""
  [ "$spec" != "$B" ] && proto=--json
  L=$(cd "$B" && pwd)/luagent
  T=$(mktemp -d /tmp/luagent-cg.XXXXXX)
  mkdir -p "$T/ws/automations" "$T/w"
  for i in $(seq 1 "$N"); do
    printf 'return { every = "%s", run = function(ctx) ctx.state.n = (ctx.state.n or 0) + 1 end }\n' "${EVERY:-1s}" \
      > "$T/ws/automations/a$i.lua"
  done
  valgrind --tool=callgrind --callgrind-out-file="$T/sched.%p" "$L" --workspace "$T/ws" daemon --quiet \
    > "$T/log" 2>&1 &
  dp=$!
  sleep "${WARMUP:-12}"
  # ok runs only: a run whose worker did not start (every run, before the
  # daemon exec'd its workers through a descriptor: under valgrind,
  # /proc/self/exe is valgrind's launcher) is journaled "crashed" through
  # another path, and counting it measured that path
  runs() { python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT count(*) FROM runs WHERE status = 'ok'\").fetchone()[0])" "$T/ws/.luagent/state.db"; }
  bad() { python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"SELECT count(*) FROM runs WHERE status NOT IN ('ok', 'skipped')\").fetchone()[0])" "$T/ws/.luagent/state.db"; }
  callgrind_control -z "$dp" > /dev/null
  r0=$(runs)
  sleep "$SECS"
  callgrind_control -d "$dp" > /dev/null
  r1=$(runs)
  kill -TERM "$dp"; wait "$dp"
  nbad=$(bad)
  if [ "$nbad" != 0 ]; then
    echo "bench_sched_cg: $spec: $nbad runs did not end ok (the figure would measure them):" >&2
    python3 -c "import sqlite3,sys; [print('  ', *r) for r in sqlite3.connect(sys.argv[1]).execute(\"SELECT status, error, count(*) FROM runs WHERE status NOT IN ('ok', 'skipped') GROUP BY 1, 2 LIMIT 5\")]" "$T/ws/.luagent/state.db" >&2
    rm -rf "$T"
    exit 1
  fi
  si=$(count "$(ls "$T"/sched.*.1 | head -1)")
  for n in 100 1100; do
    python3 "$HERE/bench_sched_worker.py" "$L" "$T/w" "$n" $proto \
      valgrind --tool=callgrind --callgrind-out-file="$T/worker.$n" || echo "worker run failed" >&2
  done
  w1=$(count "$T/worker.100"); w2=$(count "$T/worker.1100")
  python3 -c "
import sys
si, r0, r1, w1, w2 = map(int, sys.argv[2:7])
print(f'{sys.argv[1]}: scheduler {si // max(1, r1 - r0):,} instructions per run ({r1 - r0} runs), '
      f'worker {(w2 - w1) // 1000:,} per run')" "$spec" "$si" "$r0" "$r1" "$w1" "$w2"
  rm -rf "$T"
done
