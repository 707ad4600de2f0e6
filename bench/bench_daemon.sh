#!/bin/bash
# Daemon benchmark: N automations (default 1000) at every = "1s" with trivial
# bodies. Prints the scheduler's CPU use, the workers' CPU use, runs per
# second, and the lateness of runs against their due times (p50/p99/max).
# Usage: bench/bench_daemon.sh BUILD_DIR [N] [SECONDS] [WORKERS]
# WARMUP=S (default 5) seconds pass before the window: workers keep each
# automation compiled once they ran it, so a longer warm-up measures the
# steady state of a long-running daemon.
set -u
B=${1:-build}
N=${2:-1000}
SECS=${3:-20}
WORKERS=${4:-32}
LUAGENT=$(cd "$B" && pwd)/luagent
WS=$(mktemp -d /tmp/luagent-bench.XXXXXX)
DPID=""
cleanup() { [ -n "$DPID" ] && kill "$DPID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WS"; }
trap cleanup EXIT
mkdir -p "$WS/automations"
for i in $(seq 1 "$N"); do
  printf 'return { every = "1s", run = function(ctx) ctx.state.n = (ctx.state.n or 0) + 1 end }\n' \
    > "$WS/automations/a$i.lua"
done
ticks=$(getconf CLK_TCK)
cpu_of() { # utime+stime in ticks of one pid
  awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0
}
workers_cpu() { # sum over the daemon's live children
  local s=0
  for c in $(cat /proc/"$DPID"/task/*/children 2>/dev/null); do s=$((s + $(cpu_of "$c"))); done
  echo $s
}
"$LUAGENT" --workspace "$WS" daemon --quiet --workers "$WORKERS" > "$WS/daemon.log" 2>&1 &
DPID=$!
sleep "${WARMUP:-5}"   # load, first burst, workers warm
t0=$(date +%s.%N)
c0=$(cpu_of "$DPID"); w0=$(workers_cpu)
sleep "$SECS"
t1=$(date +%s.%N)
c1=$(cpu_of "$DPID"); w1=$(workers_cpu)
kill -TERM "$DPID"; wait "$DPID"; rc=$?; DPID=""
python3 - "$WS/.luagent/state.db" "$t0" "$t1" "$c0" "$c1" "$w0" "$w1" "$ticks" "$N" "$rc" "$(nproc)" "$WORKERS" <<'PY'
import sqlite3, sys
db, t0, t1, c0, c1, w0, w1, tck, n, rc, ncpu, workers = sys.argv[1:]
t0, t1 = float(t0), float(t1)
wall = t1 - t0
c = sqlite3.connect(db)
rows = c.execute("SELECT started - json_extract(trigger, '$.slot'), status FROM runs "
                 "WHERE started >= ? AND started < ?", (t0, t1)).fetchall()
late = sorted(r[0] for r in rows if r[1] != "skipped")
st = {}
for _, s in rows: st[s] = st.get(s, 0) + 1
def pct(p): return late[min(len(late) - 1, int(p * len(late)))] * 1000 if late else float("nan")
sched = (int(c1) - int(c0)) / int(tck)
work = (int(w1) - int(w0)) / int(tck)
print(f"daemon bench: {n} automations at every=1s, {wall:.1f} s window, {workers} workers max, {ncpu} CPUs")
print(f"  runs: {len(late)} executed ({len(late)/wall:.0f}/s, ideal {int(n)}/s), statuses {st}")
print(f"  scheduler CPU: {sched:.2f} s = {100*sched/wall:.1f}% of one core")
print(f"  workers CPU:   {work:.2f} s = {100*work/wall:.1f}% of one core ({1e6*work/max(1,len(late)):.0f} us per run)")
print(f"  per run, scheduler + workers: {1e6*(sched+work)/max(1,len(late)):.0f} us of CPU")
print(f"  lateness vs due time: p50 {pct(0.50):.1f} ms, p99 {pct(0.99):.1f} ms, max {late[-1]*1000 if late else float('nan'):.1f} ms")
print(f"  daemon exit status after SIGTERM: {rc}")
PY

# Idle: 10 automations every 1h (no run due in the window): the scheduler
# should sleep in poll() and use next to no CPU.
rm -rf "$WS"; WS=$(mktemp -d /tmp/luagent-bench.XXXXXX); mkdir -p "$WS/automations"
for i in $(seq 1 10); do
  printf 'return { every = "1h", run = function(ctx) end }\n' > "$WS/automations/i$i.lua"
done
"$LUAGENT" --workspace "$WS" daemon --quiet > "$WS/daemon.log" 2>&1 &
DPID=$!
sleep 3
c0=$(cpu_of "$DPID"); w0=$(workers_cpu); t0=$(date +%s.%N)
sleep 10
c1=$(cpu_of "$DPID"); w1=$(workers_cpu); t1=$(date +%s.%N)
wakeups=$(awk '/voluntary_ctxt_switches/ && !/non/ { print $2 }' /proc/$DPID/status)
kill -TERM "$DPID"; wait "$DPID"; DPID=""
python3 -c "
import sys
c0,c1,w0,w1,t0,t1,tck=map(float,sys.argv[1:8])
print(f'idle daemon (10 automations, nothing due): scheduler {1000*(c1-c0)/tck:.0f} ms CPU and workers {1000*(w1-w0)/tck:.0f} ms CPU in {t1-t0:.1f} s; {sys.argv[8]} voluntary context switches since start')
" "$c0" "$c1" "$w0" "$w1" "$t0" "$t1" "$ticks" "$wakeups"
