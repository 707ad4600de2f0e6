#!/bin/bash
# The cluster's edges and commands:
#   - an unreachable database at start: exit 1 and a message naming it;
#   - a database with a newer schema: refused, exit 2, "upgrade";
#   - a node name a live daemon holds: refused, exit 2;
#   - `cluster status` (text and --json): nodes alive/dead/stopped with
#     heartbeat age, leases, lag, schema versions;
#   - `automations disable/enable` hold on every host;
#   - hosts with different files of one automation: the log and
#     `automations list` say so;
#   - `runs list` shows the cluster's runs with their node, `runs show` one;
#   - `automations run` in a cluster journals there and uses its ctx.state.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
. "$(dirname "$0")/lib/cluster.sh"
pg_start
cat >"$WS/automations/count.lua" <<'LUA'
return { every = "1s", run = function(ctx)
  ctx.state.n = (ctx.state.n or 0) + 1
  print("count " .. ctx.state.n .. " on " .. ctx.node)
  return ctx.state.n
end }
LUA
# more automations: each slot has a preferred node, so a few names spread over both
for i in 1 2 3 4 5 6; do
  printf 'return { every = "1s", run = function(ctx) return ctx.node end }\n' >"$WS/automations/t$i.lua"
done
# unreachable at start
dead=$(free_port)
cl_host z "postgresql://luagent@127.0.0.1:$dead/luagent"
expect_rc 1 "$LUAGENT" --workspace "$WS/z" daemon && err_has "cluster database 127.0.0.1:$dead/luagent" &&
  err_has "cannot connect" && pass "unreachable database at start: exit 1, named"
expect_rc 1 "$LUAGENT" --workspace "$WS/z" cluster status && err_has "127.0.0.1:$dead" &&
  pass "cluster status: unreachable database named"
expect_rc 2 "$LUAGENT" --workspace "$WS" cluster status && err_has "no cluster table" &&
  pass "cluster status without a cluster table: exit 2"
for h in a b; do cl_host $h; done
cl_start a
cl_start b
wait_for 10 "[ \"\$(pg_sql \"SELECT count(*) FROM luagent_runs WHERE automation = 'count' AND status = 'ok'\")\" -ge 3 ]" || fail "no runs"
# the same node name twice
cp -r "$WS/a" "$WS/a2" && rm -rf "$WS/a2/.luagent"
expect_rc 2 "$LUAGENT" --workspace "$WS/a2" daemon && err_has "cluster node 'a' is held by a live daemon" &&
  pass "a second daemon with a live node's name is refused"
# status
expect_rc 0 "$LUAGENT" --workspace "$WS/a" cluster status && out_has "schema 3 (this luagent writes 3)" &&
  out_has "alive" && out_has "lag:" && out_has "(this host)" && pass "cluster status (text)"
expect_rc 0 "$LUAGENT" --workspace "$WS/a" cluster status --json
python3 - "$WS/.out" <<'PY' || fail "cluster status --json: $(cat "$WS/.out")"
import json, sys
o = json.load(open(sys.argv[1]))
nodes = {n["node"]: n for n in o["nodes"]}
assert set(nodes) == {"a", "b"}, nodes
assert all(n["state"] == "alive" and n["heartbeat_age_s"] < 3 for n in nodes.values()), nodes
assert o["schema"] == o["schema_binary"] == 3
assert o["lag"]["slots_10min"] >= 3 and o["lag"]["p99_s"] < 3, o["lag"]
assert all(n["runs"] >= 0 for n in nodes.values())
assert isinstance(o["leases"], list)
print("status json ok:", o["lag"])
PY
# enable/disable on every host
expect_rc 0 "$LUAGENT" --workspace "$WS/b" automations disable count && out_has "on every host"
sleep 1.5
n1=$(pg_sql "SELECT count(*) FROM luagent_runs WHERE automation = 'count'")
sleep 2.5
n2=$(pg_sql "SELECT count(*) FROM luagent_runs WHERE automation = 'count'")
[ "$n1" = "$n2" ] && pass "disabled on every host (no run in 2.5 s)" || fail "runs went on after disable: $n1 -> $n2"
grep -q "count: disabled (cluster-wide)" "$WS/a.log" || fail "a did not see the disable"
expect_rc 0 "$LUAGENT" --workspace "$WS/a" automations enable count
wait_for 5 "[ \"\$(pg_sql \"SELECT count(*) FROM luagent_runs WHERE automation = 'count'\")\" -gt $n2 ]" &&
  pass "enabled again" || fail "no run after enable"
# different versions of one file
sed -i 's/print("count "/print("count v2 "/' "$WS/b/automations/count.lua"
wait_for 5 "grep -q 'hosts run different versions' '$WS/b.log'" && pass "the log says the versions differ" ||
  fail "no version warning: $(tail -3 "$WS/b.log")"
expect_rc 0 "$LUAGENT" --workspace "$WS/a" automations list && out_has "versions differ: a=" &&
  pass "automations list shows the versions"
expect_rc 0 "$LUAGENT" --workspace "$WS/a" --json automations list
python3 -c "import json,sys; o=[x for x in json.load(open('$WS/.out')) if x['name'] == 'count'][0]; assert o['versions_differ'] and set(o['versions'])=={'a','b'}, o" ||
  fail "automations list --json lacks versions: $(cat "$WS/.out")"
# runs list / show from the cluster
expect_rc 0 "$LUAGENT" --workspace "$WS/a" runs list --limit 50 && out_has "NODE" && out_has " b " && out_has " a " &&
  pass "runs list shows the cluster's runs and their nodes"
rid=$(pg_sql "SELECT id FROM luagent_runs WHERE node = 'b' AND status = 'ok' ORDER BY started LIMIT 1")
expect_rc 0 "$LUAGENT" --workspace "$WS/a" runs show "$rid" && out_has "-> b" && err_has "on node b" &&
  pass "runs show replays a run another host ran"
cid=$(pg_sql "SELECT id FROM luagent_runs WHERE automation = 'count' AND status = 'ok' ORDER BY started LIMIT 1")
cnode=$(pg_sql "SELECT node FROM luagent_runs WHERE id = '$cid'")
other=a; [ "$cnode" = a ] && other=b
expect_rc 0 "$LUAGENT" --workspace "$WS/$other" runs show "$cid" && out_has "count 1 on $cnode" &&
  pass "runs show on $other replays the print output of a run $cnode ran"
expect_rc 0 "$LUAGENT" --workspace "$WS/a" --json runs show "$cid"
python3 -c "
import json, sys
ev = [json.loads(l) for l in open('$WS/.out') if l.strip()]
types = [e['type'] for e in ev]
assert types[0] == 'run_start' and types[-1] == 'run_end' and 'print' in types, types
assert ev[-1]['data']['status'] == 'ok', ev[-1]
" || fail "runs show --json of a cluster run: $(cat "$WS/.out")"
expect_rc 0 "$LUAGENT" --workspace "$WS/a" automations history count -n 3 && out_has "ok"
cl_stop a
cl_stop b
# manual run: the cluster's ctx.state, journaled there
before=$(pg_sql "SELECT state::json->>'n' FROM luagent_state WHERE automation = 'count'")
expect_rc 0 "$LUAGENT" --workspace "$WS/a" automations run count && out_has "$((before + 1))" &&
  pass "automations run continues the cluster's ctx.state ($before -> $((before + 1)))"
[ "$(pg_sql "SELECT count(*) FROM luagent_runs WHERE trigger LIKE '%manual%' AND status = 'ok'")" = 1 ] ||
  fail "the manual run is not in the cluster journal"
expect_rc 0 "$LUAGENT" --workspace "$WS/a" --json cluster status
python3 -c "import json; o=json.load(open('$WS/.out')); assert all(n['state']=='stopped' for n in o['nodes']), o['nodes']" &&
  pass "stopped daemons show as stopped" || fail "status after stop: $(cat "$WS/.out")"
# a node that died (SIGKILL) shows as dead once its heartbeat is old
cl_start a
cl_kill a
sleep 6.5
expect_rc 0 "$LUAGENT" --workspace "$WS/a" cluster status && grep -E "^a .* dead" "$WS/.out" >/dev/null &&
  pass "a killed daemon shows as dead" || fail "dead node not shown: $(cat "$WS/.out")"
# the killed daemon's name is free again (its heartbeat is old)
cl_start a
wait_for 5 "grep -q 'joined' '$WS/a.log'" && pass "a restarted daemon takes its name back"
cl_stop a
# runs prune reaches the cluster's journal
sleep 1.2
expect_rc 0 "$LUAGENT" --workspace "$WS/b" runs prune --older-than 1s && out_has "automation run(s) of the cluster" &&
  [ "$(pg_sql "SELECT count(*) FROM luagent_runs WHERE coalesce(finished, queued) < extract(epoch from clock_timestamp()) - 1.5")" = 0 ] &&
  pass "runs prune prunes the cluster's runs" || fail "runs prune left cluster runs: $(cat "$WS/.out")"
# a newer schema is refused
pg_sql "INSERT INTO luagent_schema VALUES (99, 0)"
expect_rc 2 "$LUAGENT" --workspace "$WS/a" daemon && err_has "schema version 99 is newer" && err_has "upgrade luagent" &&
  pass "a newer schema is refused with exit 2"
finish
