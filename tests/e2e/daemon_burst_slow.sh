#!/bin/bash
# Burst workers are the ones free for short runs (red team 18):
# 1. a slow automation next to many short ones keeps a worker of its own,
#    and the short ones keep both burst workers (daemon_runs.c,
#    rank_workers and pick_worker). Before the fix the slow automation
#    took a burst worker every second, the short runs were left one
#    worker, and the other workers sat idle.
# 2. with both burst workers stuck, two other workers take their place;
#    the short runs do not spread over every worker there is (22 a second
#    of 24 before the fix).
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
start_http
on_two_cpus
# a1..a100 come before slow in the order runs due together are handed out
for i in $(seq 100); do
  printf 'return { every = "1s", run = function(ctx) local x = 0 for i = 1, 100000 do x = x + i end ctx.state.n = (ctx.state.n or 0) + 1 end }\n' \
    > "$WS/automations/a$i.lua"
done
cat > "$WS/automations/slow.lua" <<LUA
return { every = "1s", run = function(ctx)
  tools.call("http.request", { url = "http://127.0.0.1:$HTTP_PORT/slow?d=0.9" })
end }
LUA
T0=$(date +%s.%N)
start_daemon --workers 8
sleep 12
stop_daemon

rm -f "$WS"/automations/*.lua
for i in $(seq 30); do
  printf 'return { every = "1s", run = function(ctx) ctx.state.n = (ctx.state.n or 0) + 1 end }\n' \
    > "$WS/automations/y$i.lua"
done
gated_automation t1 4
gated_automation t2 4
T1=$(date +%s.%N)
start_daemon --workers 24
sleep 10
touch "$WS/gate-t1" "$WS/gate-t2"
sleep 1
stop_daemon

q "SELECT name, status, started, COALESCE(worker_pid, 0),
   COALESCE(started - json_extract(trigger, '$.slot'), 0) FROM runs WHERE kind = 'automation'
   ORDER BY started" > "$WS/runs.tsv"
PYTHONPATH="$(dirname "$0")/lib" python3 - "$WS/runs.tsv" "$T0" "$T1" <<'PY'
import sys, collections
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
t0, t1 = float(sys.argv[2]), float(sys.argv[3])
from checks import check, done
runs = [(nm, st, float(s), int(p)) for nm, st, s, p, l in rows]
late = {(nm, float(s)): float(l) for nm, st, s, p, l in rows}
bad = [r for r in runs if r[1] not in ("ok", "skipped")]
check(not bad, "every run ended ok (or was skipped): %s" % bad[:3])

# 1. seconds 4-11 of the first daemon: past the first runs (of unknown
# length, on every worker)
sec = collections.defaultdict(lambda: (set(), set()))
for nm, st, s, p in runs:
    if st == "ok" and t0 + 4 <= s < t0 + 11:
        sec[int(s - t0)][0 if nm.startswith("a") else 1].add(p)
both = sum(1 for z, sl in sec.values() if len(z) >= 2)
apart = sum(1 for z, sl in sec.values() if sl and not (z & sl))
print("per second, the short runs' workers and the slow one's:",
      [(k, sorted(z), sorted(sl)) for k, (z, sl) in sorted(sec.items())])
check(len(sec) >= 6 and both >= len(sec) - 1,
      "the short runs had 2 workers in %d of %d seconds" % (both, len(sec)))
check(apart >= len(sec) - 1,
      "the slow automation ran on a worker of its own in %d of %d seconds" % (apart, len(sec)))
z = [r for r in runs if r[0].startswith("a") and t0 + 4 <= r[2] < t0 + 11]
skipped = [r for r in z if r[1] == "skipped"]
check(not skipped, "no short run was skipped (its previous run still running): %d" % len(skipped))
# the slow one is not held back behind the short ones that wait for the
# burst workers (review 19, D1): it has a worker of its own to start on
sl = [r for r in runs if r[0] == "slow" and t0 + 4 <= r[2] < t0 + 11]
sl_late = sorted(late[(r[0], r[2])] for r in sl if r[1] == "ok")
check(sl and all(r[1] == "ok" for r in sl) and sl_late[-1] < 0.05,
      "the slow automation's runs all ran, started at most %.0f ms late (under 50)" % (1000 * sl_late[-1] if sl_late else -1))

# 2. the second daemon, from the later of t1's and t2's 4th runs (the
# ones that waited for their gates) until the gates opened
fourth = [sorted(r for r in runs if r[0] == t and r[1] == "ok")[3:4] for t in ("t1", "t2")]
check(all(fourth), "t1 and t2 ran a 4th time, once their gates opened")
stuck_at = max(x[0][2] for x in fourth if x) if all(fourth) else t1 + 4
per = collections.defaultdict(set)
for nm, st, s, p in runs:
    if nm.startswith("y") and st == "ok" and stuck_at + 1 <= s < t1 + 10:
        per[int(s - t1)].add(p)
n = [len(v) for k, v in sorted(per.items())]
check(len(n) >= 4 and max(n) <= 3,
      "while both were stuck, the short runs used %s workers a second (at most 3)" % n)
done()
PY
[ $? = 0 ] || fail "burst workers: the workers free for short runs (above)"
finish
