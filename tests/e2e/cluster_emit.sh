#!/bin/bash
# Events across three daemons: 30 `luagent emit` from the CLI of one host
# and 20 events.emit from a run on whichever host, each consumed exactly
# once cluster-wide (SKIP LOCKED claims, woken by NOTIFY). A host with no
# `on` automation leaves the queue alone.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
. "$(dirname "$0")/lib/cluster.sh"
pg_start
cat >"$WS/automations/worker.lua" <<'LUA'
return { on = "job.*", mode = "parallel", max = 1000, run = function(ctx)
  tools.call("fs.write", { path = "jobs.txt", append = true,
    content = ctx.trigger.name .. " " .. tostring(ctx.trigger.payload.n) .. " " .. ctx.node .. "\n" })
end }
LUA
cat >"$WS/automations/fan.lua" <<'LUA'
return { on = "fan", run = function(ctx)
  for i = 1, 20 do events.emit("job.fan", { n = 100 + i }) end
  return "fanned"
end }
LUA
for h in a b c; do cl_host $h; done
for h in a b c; do cl_start $h; done
sleep 1
for i in $(seq 1 30); do
  (cd "$WS/a" && "$LUAGENT" emit job.cli "{\"n\": $i}") >>"$WS/emit.out" 2>&1 || fail "emit $i failed: $(tail -2 "$WS/emit.out")"
done
(cd "$WS/b" && "$LUAGENT" emit fan) >>"$WS/emit.out" 2>&1 || fail "emit fan failed"
wait_for 20 "[ \"\$(cat '$WS'/[abc]/data/jobs.txt 2>/dev/null | wc -l)\" -ge 50 ]" ||
  fail "not all events ran: $(cat "$WS"/[abc]/data/jobs.txt 2>/dev/null | wc -l) of 50"
sleep 2
for h in a b c; do cl_stop $h; done
cat "$WS"/[abc]/data/jobs.txt >"$WS/jobs.txt"
python3 - "$WS/jobs.txt" <<'PY' || fail "events not consumed exactly once"
import sys, collections
c = collections.Counter()
nodes = collections.Counter()
for l in open(sys.argv[1]):
    name, n, node = l.split()
    c[(name, int(n))] += 1
    nodes[node] += 1
want = {("job.cli", i) for i in range(1, 31)} | {("job.fan", 100 + i) for i in range(1, 21)}
twice = [k for k, v in c.items() if v > 1]
missing = want - set(c)
extra = set(c) - want
print("consumed by", dict(nodes), "twice:", twice, "missing:", sorted(missing), "extra:", extra)
sys.exit(1 if twice or missing or extra else 0)
PY
[ "$(pg_sql "SELECT count(*) FROM luagent_events")" = 0 ] || fail "events left in the queue"
[ "$(pg_sql "SELECT count(*) FROM luagent_runs WHERE automation = 'worker' AND status = 'ok'")" = 50 ] ||
  fail "the journal does not have 50 ok runs of worker"
grep -q "queued event job.cli (#[0-9]*) in the cluster" "$WS/emit.out" || fail "emit did not say it queued: $(head -2 "$WS/emit.out")"
# A host without `on` automations does not consume (and drop) events.
rm "$WS/d/automations/"* 2>/dev/null
cl_host d
rm -f "$WS"/d/automations/*
cl_start d
(cd "$WS/a" && "$LUAGENT" emit job.cli '{"n": 999}') >/dev/null 2>&1
sleep 3
[ "$(pg_sql "SELECT count(*) FROM luagent_events")" = 1 ] || fail "a host with no listener took the event"
cl_stop d
pass "events consumed once across hosts"
finish
