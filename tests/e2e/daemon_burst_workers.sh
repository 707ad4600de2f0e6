#!/bin/bash
# Short runs go to the burst workers (one per CPU, at least 2: the daemon
# runs on 2 CPUs here, under taskset), not spread over every worker
# (daemon_runs.c, burst_workers); and that never holds up what it must
# not: runs of unknown length still get workers of their own, in
# parallel, and when the burst workers are stuck in runs that turned slow,
# the short runs go on elsewhere, except the few queued behind those runs.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
start_http
on_two_cpus
N=60
for i in $(seq $N); do
  printf 'return { every = "1s", run = function(ctx) ctx.state.n = (ctx.state.n or 0) + 1 end }\n' \
    > "$WS/automations/z$i.lua"
done
# t1, t2: short runs, until the one that waits for its gate (a run that
# turned slow, on whichever worker it got)
gated_automation t1 7
gated_automation t2 7
T0=$(date +%s.%N)
start_daemon --workers 8
# s1..s4: slow from their first run (unknown length, then 1.5 s), every 2 s
# from 7 s on
sleep 6.5
T1=$(date +%s.%N)
for i in 1 2 3 4; do
  cat > "$WS/automations/s$i.lua" <<LUA
return { every = "2s", run = function(ctx)
  tools.call("http.request", { url = "http://127.0.0.1:$HTTP_PORT/slow?d=1.5" })
end }
LUA
done
sleep 6
T2=$(date +%s.%N)
touch "$WS/gate-t1" "$WS/gate-t2"
sleep 2
stop_daemon
q "SELECT name, status, started, started - json_extract(trigger, '$.slot'), COALESCE(worker_pid, 0),
     COALESCE(error, '') FROM runs WHERE kind = 'automation' ORDER BY started" > "$WS/runs.tsv"
PYTHONPATH="$(dirname "$0")/lib" python3 - "$WS/runs.tsv" "$T0" "$T1" "$T2" "$N" <<'PY'
import sys, collections
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
t0, t1, t2, n = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
from checks import check, done
runs = [(nm, st, float(s), float(l), int(p), e) for nm, st, s, l, p, e in rows]
fast = [r for r in runs if r[0].startswith("z")]
bad = [r for r in runs if r[1] not in ("ok", "skipped")]
check(not bad, "every run ended ok (or was skipped): %s" % bad[:3])
# 1. the steady state before anything turns slow: seconds 3-5.5 after the
# start, the short runs on at most 2 workers (32 before: 8 here)
a = [r for r in fast if t0 + 3 <= r[2] < t0 + 5.5 and r[1] == "ok"]
pids = {r[4] for r in a}
check(len(a) >= 2 * n and len(pids) <= 2,
      "%d short runs in 2.5 s of steady state went to %d worker(s): %s" % (len(a), len(pids), sorted(pids)))
# 2. the slow ones ran side by side, each with a worker of its own
s = sorted(r for r in runs if r[0].startswith("s") and r[1] == "ok")
first = sorted(r[2] for r in runs if r[0].startswith("s"))[:4]
check(len(first) == 4 and first[-1] - first[0] < 1.0,
      "the 4 slow automations' first runs started within %.2f s of each other"
      % (first[-1] - first[0] if first else -1))
spids = {r[4] for r in s}
check(len(spids) >= 4, "the slow runs ran on %d workers" % len(spids))
# 3. t1 and t2 stuck from their 7th run on: the short runs went on; only
# the few queued behind a stuck run (DAEMON_PIPE - 1 = 3 per worker)
# waited with it
w = [r for r in fast if t1 + 1.5 <= r[2] < t2 - 0.5 and r[1] == "ok"]
ran = collections.Counter(r[0] for r in w)
missing = [f"z{i}" for i in range(1, n + 1) if ran[f"z{i}"] < 2]
check(len(missing) <= 6,
      "while t1 and t2 were stuck, %d of %d short automations did not run twice in %.1f s (at most 6 may wait behind them): %s"
      % (len(missing), n, t2 - 0.5 - t1 - 1.5, missing[:10]))
seventh = [sorted(r for r in runs if r[0] == t and r[1] == "ok")[6:7] for t in ("t1", "t2")]
stuck = {x[0][4] for x in seventh if x}  # the workers their 7th runs held
print("the stuck runs held worker(s) %s; the burst workers were %s" % (sorted(stuck), sorted(pids)))
if stuck == pids:  # both burst workers held: the short runs had to go elsewhere
    check(not ({r[4] for r in w} & stuck), "with both burst workers stuck, the short runs went to others")
# the short runs due with the stuck ones: they found both burst workers
# busy with runs that had looked short, and waited for them only until
# those stopped looking short (DAEMON_PIPE_FAST_S), not for an event
slot = [x[0][2] - x[0][3] for x in seventh if x]
same = [r for r in fast if any(abs(r[2] - r[3] - s) < 0.1 for s in slot)]
held = [r for r in same if r[3] > 0.3]
print("the short runs due with the stuck ones: lateness %s ms" % sorted(int(r[3] * 1000) for r in same)[-8:])
check(same and len(held) <= 3 * len(stuck),
      "%d of the %d short runs due with the stuck ones started over 300 ms late (at most %d queued behind them)"
      % (len(held), len(same), 3 * len(stuck)))
late = sorted(r[3] for r in w)
p90 = late[int(0.9 * len(late))] if late else 99
check(p90 < 0.5, "the short runs then started %.0f ms after their due time (p90)" % (p90 * 1000))
ended = collections.Counter(r[0] for r in runs if r[0] in ("t1", "t2") and r[1] == "ok")
check(ended["t1"] >= 7 and ended["t2"] >= 7, "t1 and t2 ran 7 times or more, the 7th once its gate opened: %s" % dict(ended))
done()
PY
[ $? = 0 ] || fail "the burst workers' promises (above)"
finish
