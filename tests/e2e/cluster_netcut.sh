#!/bin/bash
# Cut one host off the database mid-run. Host a runs in a network namespace
# made here (a veth pair; PostgreSQL also listens on the veth address),
# hosts b and c on loopback. a takes the one run of `job` (on_lost =
# "rerun"), whose worker notes a tick every 0.3 s in a's data/. Then a's
# link goes down:
#   - a fences: its worker is killed before the run's lease expires (its
#     last tick is earlier than the lease_until the database holds);
#   - b or c marks the run interrupted and runs it again to the end;
#   - a says the outage once (not once per tick) and stays up;
#   - the link returns: a rejoins (heartbeat, "reachable again") and runs
#     nothing twice (one "end" in all hosts' data).
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
. "$(dirname "$0")/lib/cluster.sh"
command -v ip >/dev/null || { echo "FAIL: the netns test needs iproute2 (ip)" >&2; exit 1; }
NS=lgcut$$
VH=lgh$$
VN=lgn$$
SUB=10.$(( ($$ >> 8) % 200 + 20 )).$(( $$ % 250 ))
ip netns add $NS || { echo "FAIL: cannot create a network namespace (root needed)" >&2; exit 1; }
netns_cleanup() {
  cleanup
  ip link del $VH 2>/dev/null
  ip netns del $NS 2>/dev/null
}
trap netns_cleanup EXIT
ip link add $VH type veth peer name $VN || fail "cannot make a veth pair"
ip link set $VN netns $NS
ip addr add $SUB.1/24 dev $VH
ip link set $VH up
ip netns exec $NS ip addr add $SUB.2/24 dev $VN
ip netns exec $NS ip link set $VN up
ip netns exec $NS ip link set lo up
start_http
PG_LISTEN=$SUB.1 pg_start
cl_http_in $NS
cl_noting_job job 'on_lost = "rerun",'
cl_host a "postgresql://luagent@$SUB.1:$PG_PORT/luagent"
cl_host b
cl_host c
cl_start a ip netns exec $NS
wait_for 10 "[ \"\$(pg_sql \"SELECT count(*) FROM luagent_runs WHERE status = 'running' AND node = 'a'\")\" = 1 ]" ||
  fail "a did not take the run: $(tail -5 "$WS/a.log")"
cl_start b
cl_start c
sleep 1.5
ip link set $VH down # the cut: a's packets to the database go nowhere
cut=$(python3 -c 'import time; print(time.time())')
# the lease a's run holds now (a cannot renew it any more)
lease=""
for _ in $(seq 1 80); do
  l=$(pg_sql "SELECT lease_until FROM luagent_runs WHERE node = 'a' AND status = 'running'")
  [ -n "$l" ] && lease=$l
  [ "$(pg_sql "SELECT count(*) FROM luagent_runs WHERE node = 'a' AND status = 'interrupted'")" = 1 ] && break
  sleep 0.1
done
[ -n "$lease" ] || fail "never saw a's lease"
[ "$(pg_sql "SELECT count(*) FROM luagent_runs WHERE node = 'a' AND status = 'interrupted'")" = 1 ] ||
  fail "a's run was not marked interrupted: $(pg_sql "SELECT node, status, error FROM luagent_runs")"
wait_for 20 "[ \"\$(pg_sql \"SELECT count(*) FROM luagent_runs WHERE attempt = 2 AND status = 'ok'\")\" = 1 ]" ||
  fail "no other host ran the job again to the end: $(pg_sql "SELECT node, status, attempt, error FROM luagent_runs")"
grep -q "killed 1 run" "$WS/a.log" || fail "a did not fence its run: $(tail -8 "$WS/a.log")"
python3 - "$WS/a/data/job.txt" "$lease" "$cut" <<'PY' || fail "a's worker ran past its lease"
import sys
ticks = [float(l.split()[3]) for l in open(sys.argv[1]) if l.split()[1] == "a"]
lease, cut = float(sys.argv[2]), float(sys.argv[3])
last = max(ticks)
print("a's last note %.2fs after the cut; its lease ran out %.2fs after the cut" % (last - cut, lease - cut))
sys.exit(0 if last < lease else 1)
PY
kill -0 "$CLPID_a" 2>/dev/null || fail "a died during the outage"
# an automation a loads while it cannot reach the database runs once it can
cat >"$WS/a/automations/late.lua" <<'LUA'
return { every = "1s", run = function(ctx)
  tools.call("fs.write", { path = "late.txt", append = true, content = ctx.node .. "\n" })
end }
LUA
wait_for 5 "grep -q 'late: loaded' '$WS/a.log'" || fail "a did not load late.lua during the outage"
ip link set $VH up
wait_for 20 "grep -q 'reachable again' '$WS/a.log'" || fail "a did not reconnect: $(tail -5 "$WS/a.log")"
wait_for 10 "[ \"\$(pg_sql \"SELECT extract(epoch from clock_timestamp()) - heartbeat < 3 FROM luagent_nodes WHERE node = 'a'\")\" = t ]" ||
  fail "a's heartbeat did not resume"
wait_for 10 "[ -s '$WS/a/data/late.txt' ]" && pass "what a loaded during the outage runs after it" ||
  fail "late.lua never ran after the outage: $(grep late "$WS/a.log" | tail -3)"
sleep 2
[ "$(grep -c 'retrying every second' "$WS/a.log")" = 1 ] || fail "the outage was not said exactly once: $(grep -c 'retrying' "$WS/a.log")"
for h in a b c; do cl_stop $h; done
cat "$WS"/[abc]/data/job.txt >"$WS/job.txt" 2>/dev/null
[ "$(grep -c '^end ' "$WS/job.txt")" = 1 ] || fail "wanted one end across hosts: $(grep '^end' "$WS/job.txt")"
[ "$(grep -c '^begin ' "$WS/job.txt")" = 2 ] || fail "wanted two begins (a's and the re-run): $(grep '^begin' "$WS/job.txt")"
! grep -q '^end a' "$WS/job.txt" || fail "a ran the job to its end too"
[ "$(pg_sql "SELECT count(*) FROM luagent_runs WHERE automation = 'job'")" = 2 ] || fail "runs of job besides it and its re-run: $(pg_sql "SELECT automation, node, status, attempt FROM luagent_runs WHERE automation = 'job'")"
pass "network cut: fenced before the lease, taken over, rejoined, nothing twice"
finish
