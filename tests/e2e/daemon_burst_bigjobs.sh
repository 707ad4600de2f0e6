#!/bin/bash
# Jobs queued behind a run that turned slow can outgrow the worker's job
# pipe (64 KiB): each carries the automation's ctx.state, here 40 KB. The
# scheduler writes the rest as the pipe drains and goes on meanwhile
# (review 19, D2: it blocked for up to 10 s in the write, scheduling
# nothing, then journaled the stuck run crashed: "could not hand the run
# to a worker process").
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
start_http
on_two_cpus
for i in $(seq 30); do
  printf 'return { every = "1s", run = function(ctx) ctx.state.n = (ctx.state.n or 0) + 1; ctx.state.blob = string.rep("x", 40000) end }\n' \
    > "$WS/automations/z$i.lua"
done
gated_automation t1 4
gated_automation t2 4
T0=$(date +%s.%N)
start_daemon --workers 8
sleep 10
T1=$(date +%s.%N)
touch "$WS/gate-t1" "$WS/gate-t2"
sleep 2
stop_daemon
q "SELECT name, status, started, COALESCE(error, '') FROM runs WHERE kind = 'automation'
   ORDER BY started" > "$WS/runs.tsv"
PYTHONPATH="$(dirname "$0")/lib" python3 - "$WS/runs.tsv" "$T0" "$T1" <<'PY'
import sys, collections
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
t0, t1 = float(sys.argv[2]), float(sys.argv[3])
from checks import check, done
runs = [(nm, st, float(s), e) for nm, st, s, e in rows]
bad = [r for r in runs if r[1] not in ("ok", "skipped")]
check(not bad, "every run ended ok (or was skipped): %s" % bad[:3])
fourth = [sorted(r for r in runs if r[0] == t and r[1] == "ok")[3:4] for t in ("t1", "t2")]
check(all(fourth), "t1 and t2 ran a 4th time, which waited for their gates")
stuck_at = max(x[0][2] for x in fourth if x) if all(fourth) else t0 + 4
per = collections.Counter(int(s - t0) for nm, st, s, e in runs
                          if nm.startswith("z") and st == "ok" and stuck_at + 1 <= s < t1)
n = [per[k] for k in range(int(stuck_at - t0) + 1, int(t1 - t0))]
check(len(n) >= 3 and min(n) >= 20,
      "while both were stuck, the short runs went on: %s a second (of 30; at least 20)" % n)
done()
PY
[ $? = 0 ] || fail "jobs queued behind a stuck run must not stop the scheduler (above)"
finish
