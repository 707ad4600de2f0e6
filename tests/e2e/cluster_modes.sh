#!/bin/bash
# The modes hold across hosts (three daemons), each with a run (2.5 s)
# slower than its trigger (1 s):
#   single: never two runs at once on any hosts; due slots meanwhile skipped;
#   queued (max 2): one at a time, in slot order, back to back, whichever host;
#   parallel (max 2): at most two at once across hosts;
#   restart: a newer slot ends the running run, also on another host (its
#     worker stops: no "end" side effect of an interrupted run).
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
. "$(dirname "$0")/lib/cluster.sh"
start_http
pg_start
for m in single queued parallel restart; do
  extra=""
  [ $m = queued ] && extra='max = 2,'
  [ $m = parallel ] && extra='max = 2,'
  cat >"$WS/automations/m_$m.lua" <<LUA
return { every = "1s", mode = "$m", $extra timeout = "20s", run = function(ctx)
  tools.call("http.request", { url = "http://127.0.0.1:$HTTP_PORT/slow?d=2.5" })
  tools.call("fs.write", { path = "$m.txt", append = true, content = ctx.run_id .. "\\n" })
  return "done"
end }
LUA
done
for h in a b c; do cl_host $h; done
for h in a b c; do cl_start $h; done
sleep 12
for h in a b c; do cl_stop $h; done
pg_sql "SELECT automation, status, coalesce(started, 0), coalesce(finished, 0), coalesce(node, ''), coalesce(slot, 0), id, coalesce(error, '') FROM luagent_runs ORDER BY automation, coalesce(started, queued)" >"$WS/runs.txt"
cat "$WS"/[abc]/data/restart.txt >"$WS/restart_ends.txt" 2>/dev/null
python3 - "$WS/runs.txt" "$WS/restart_ends.txt" <<'PY'
import sys, collections
fails = 0
def check(c, m):
    global fails
    print(("ok: " if c else "FAIL: ") + m)
    fails += 0 if c else 1
runs = collections.defaultdict(list)
for l in open(sys.argv[1]):
    a, st, s, f, node, slot, rid, err = l.rstrip("\n").split("|", 7)
    runs[a].append(dict(status=st, s=float(s), f=float(f), node=node, slot=float(slot), id=rid, err=err))
ends = set(l.strip() for l in open(sys.argv[2]))
def executed(a): return [r for r in runs[a] if r["status"] not in ("skipped", "queued") and r["s"] > 0]
def overlap(rs):
    ev = sorted([(r["s"], 1) for r in rs] + [(r["f"], -1) for r in rs if r["f"] > 0], key=lambda x: (x[0], x[1]))
    cur = best = 0
    for _, d in ev:
        cur += d; best = max(best, cur)
    return best
s = executed("m_single")
check(len(s) >= 3 and overlap(s) == 1, "single: %d runs on %s, never two at once" % (len(s), sorted(set(r["node"] for r in s))))
check(sum(1 for r in runs["m_single"] if r["status"] == "skipped" and "mode single" in r["err"]) >= 3, "single: slots due meanwhile skipped")
q = executed("m_queued")
check(len(q) >= 3 and overlap(q) == 1, "queued: %d runs on %s, one at a time" % (len(q), sorted(set(r["node"] for r in q))))
check([r["slot"] for r in q] == sorted(r["slot"] for r in q), "queued: started in slot order")
gaps = [b["s"] - a["f"] for a, b in zip(q, q[1:]) if a["f"] > 0]
check(all(g < 1.2 for g in gaps), "queued: back to back (gaps %s)" % ["%.2f" % g for g in gaps])
check(any(r["status"] == "skipped" and "mode queued, max 2" in r["err"] for r in runs["m_queued"]), "queued: beyond max waiting, skipped")
p = executed("m_parallel")
check(overlap(p) == 2, "parallel: two at once (max 2), never three (%d runs)" % len(p))
r = executed("m_restart")
inter = [x for x in r if x["status"] == "interrupted" and "mode restart" in x["err"]]
check(len(inter) >= 3, "restart: %d runs ended by a newer slot" % len(inter))
cross = [x for x in inter if ("node " + x["node"]) not in x["err"]]
check(len(cross) >= 1, "restart: a run was ended by another host (%d)" % len(cross))
check(not any(x["id"] in ends for x in inter), "restart: an interrupted run never reached its side effect")
check(overlap(r) <= 2, "restart: at most the new run and the one being stopped at once")
sys.exit(1 if fails else 0)
PY
[ $? = 0 ] || fail "mode checks failed"
finish
