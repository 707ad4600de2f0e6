#!/bin/bash
# Each mode with a run (2.5 s) slower than its trigger (1 s):
#   single: skip while running; queued: back to back, up to max waiting;
#   parallel: up to max at once; restart: the running one is stopped.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
start_http
for m in single queued parallel restart; do
  extra=""
  [ $m = queued ] && extra='max = 1,'
  [ $m = parallel ] && extra='max = 2,'
  cat > "$WS/automations/m_$m.lua" <<LUA
return { every = "1s", mode = "$m", $extra timeout = "10s", run = function(ctx)
  tools.call("http.request", { url = "http://127.0.0.1:$HTTP_PORT/slow?d=2.5" })
  return "done"
end }
LUA
done
start_daemon
sleep 8
stop_daemon
q "SELECT name, status, started, COALESCE(finished, 0), COALESCE(error, '') FROM runs ORDER BY started" > "$WS/runs.tsv"
python3 - "$WS/runs.tsv" <<'PY'
import sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, status, s, f, err = line.rstrip("\n").split("\t")
    runs[name].append((status, float(s), float(f), err))
fails = 0
def check(cond, msg):
    global fails
    print(("ok: " if cond else "FAIL: ") + msg)
    fails += 0 if cond else 1
def executed(n):
    return [r for r in runs[n] if r[0] != "skipped"]
def max_overlap(rs):
    ev = sorted([(r[1], 1) for r in rs] + [(r[2], -1) for r in rs], key=lambda x: (x[0], x[1]))
    cur = best = 0
    for _, d in ev:
        cur += d
        best = max(best, cur)
    return best
def skipped(n, word):
    return [r for r in runs[n] if r[0] == "skipped" and word in r[3]]

s = executed("m_single")
check(max_overlap(s) == 1 and len(s) >= 2, "single: %d runs, never two at once" % len(s))
check(len(skipped("m_single", "mode single")) >= 3, "single: due slots while running are skipped and journaled")
check(all(r[0] == "ok" for r in s[:-1]), "single: runs complete ok")

q = executed("m_queued")
check(max_overlap(q) == 1, "queued: one at a time")
gaps = [b[1] - a[2] for a, b in zip(q, q[1:])]
check(len(q) >= 3 and all(g < 0.6 for g in gaps), "queued: %d runs back to back (gaps %s)" % (len(q), ["%.2f" % g for g in gaps]))
check(len(skipped("m_queued", "mode queued, max 1")) >= 2, "queued: beyond max waiting, skipped")

p = executed("m_parallel")
check(max_overlap(p) == 2, "parallel: two at once (max 2), never three")
check(len(skipped("m_parallel", "mode parallel, max 2")) >= 1, "parallel: beyond max, skipped")

r = executed("m_restart")
intr = [x for x in r if x[0] == "interrupted" and "newer run" in x[3]]
check(len(intr) >= 4, "restart: %d runs stopped for a newer run" % len(intr))
check(max_overlap(r) == 1, "restart: never two at once")
check(not [x for x in r[:-1] if x[0] == "ok"], "restart: a 2.5 s run never completes under a 1 s trigger (until the stop)")
sys.exit(1 if fails else 0)
PY
[ $? = 0 ] || fail "mode checks"
finish
