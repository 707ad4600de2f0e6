#!/bin/bash
# A daemon cut off from the database long enough to look dead (A1, node
# "a", in a network namespace made here) comes back after a replacement
# (A2) joined under the same node name and started a run. A1 must notice
# it was evicted and stop without touching the rows under the name: its
# reconnect used to "reconcile" first, marking A2's live run interrupted
# (A2's next renewal then killed its worker). A2's run ends ok.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
. "$(dirname "$0")/lib/cluster.sh"
command -v ip >/dev/null || { echo "FAIL: the netns test needs iproute2 (ip)" >&2; exit 1; }
NS=lgev$$ VH=lgevh$$ VN=lgevn$$
SUB=10.$(( ($$ >> 8) % 200 + 20 )).$(( $$ % 250 ))
ip netns add $NS || { echo "FAIL: cannot create a network namespace (root needed)" >&2; exit 1; }
netns_cleanup() { cleanup; ip link del $VH 2>/dev/null; ip netns del $NS 2>/dev/null; }
trap netns_cleanup EXIT
ip link add $VH type veth peer name $VN; ip link set $VN netns $NS
ip addr add $SUB.1/24 dev $VH; ip link set $VH up
ip netns exec $NS ip addr add $SUB.2/24 dev $VN; ip netns exec $NS ip link set $VN up
ip netns exec $NS ip link set lo up
start_http
PG_LISTEN=$SUB.1 pg_start
cat >"$WS/automations/job.lua" <<LUA
return { on = "go", timeout = "60s", run = function(ctx)
  for i = 1, 25 do tools.call("http.request", { url = "http://127.0.0.1:$HTTP_PORT/slow?d=0.3" }) end
  tools.call("fs.write", { path = "done.txt", content = "done" })
end }
LUA
cl_host a "postgresql://luagent@$SUB.1:$PG_PORT/luagent"
cl_host a2
sed -i 's/node = "a2"/node = "a"/' "$WS/a2/luagent.lua"
cl_start a ip netns exec $NS
sleep 1
ip link set $VH down
sleep 7   # > 2 leases: A1 is dead as far as the cluster can tell
cl_start a2
(cd "$WS/a2" && "$LUAGENT" emit go) >/dev/null 2>&1
wait_for 10 "[ \"\$(pg_sql \"SELECT count(*) FROM luagent_runs WHERE automation = 'job' AND status = 'running'\")\" = 1 ]" ||
  fail "A2 did not start the run"
ip link set $VH up
wait_for 10 "grep -q 'taken over by another daemon' '$WS/a.log'" || fail "A1 did not notice the eviction"
wait "$CLPID_a" 2>/dev/null
wait_for 15 "[ -f '$WS/a2/data/done.txt' ]" || fail "A2's run did not finish"
st=$(pg_sql "SELECT status || ': ' || coalesce(error, '') FROM luagent_runs WHERE automation = 'job'")
[ "$st" = "ok: " ] || fail "A2's run was ended by the evicted daemon: $st"
grep -q "no longer this host's" "$WS/a2.log" && fail "A2 stopped its own run: $(grep "no longer" "$WS/a2.log")"
grep -q "recorded .* fenced run" "$WS/a.log" && fail "the evicted daemon reconciled: $(grep recorded "$WS/a.log")"
cl_stop a2
pass "an evicted daemon leaves its successor's runs alone"
finish
