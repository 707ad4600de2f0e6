#!/bin/bash
# `luagent cluster migrate` moves a workspace that ran on one host (SQLite)
# into a cluster: schedules, ctx.state, queued events, the automation run
# journal with each run's kept events. A second migrate copies nothing; a
# row the cluster has that differs is refused (nothing copied) unless
# --force; a running daemon is refused; state.db is left as it was; a
# daemon started on the cluster goes on from the copied state.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
pg_start
cat >"$WS/automations/count.lua" <<'LUA'
return { every = "1s", run = function(ctx)
  ctx.state.n = (ctx.state.n or 0) + 1
  print("count " .. ctx.state.n)
  return ctx.state.n
end }
LUA
cat >"$WS/automations/later.lua" <<'LUA'
return { on = "later", mode = "queued", run = function(ctx) return "got " .. tostring(ctx.trigger.payload.x) end }
LUA
printf 'return {}\n' >"$WS/luagent.lua"
start_daemon
wait_for 10 "[ \"\$(q \"SELECT count(*) FROM runs WHERE name = 'count' AND status = 'ok'\")\" -ge 3 ]" || fail "no local runs"
stop_daemon
expect_rc 0 "$LUAGENT" --workspace "$WS" emit later '{"x": 7}' # waits: no daemon
echo 'tools.call("fs.write", { path = "m.txt", content = "1" })' >"$WS/w.lua"
expect_rc 0 "$LUAGENT" --workspace "$WS" run w.lua
local_audit=$(q "SELECT count(*) FROM audit")
[ "$local_audit" -gt 0 ] || fail "no local audit rows to copy"
local_runs=$(q "SELECT count(*) FROM runs WHERE kind = 'automation'")
local_n=$(q "SELECT json_extract(state, '$.n') FROM automations WHERE name = 'count'")
cat >"$WS/luagent.lua" <<LUA
return { cluster = { postgres = "$PG_URL", node = "m1", lease_s = 3 } }
LUA
expect_rc 0 "$LUAGENT" --workspace "$WS" --json cluster migrate
python3 - "$WS/.out" "$local_runs" "$local_audit" <<'PY' || fail "first migrate: $(cat "$WS/.out")"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["schedules"] == 2 and o["states"] == 1 and o["events"] == 1 and o["runs"] == int(sys.argv[2]), o
assert o["audit"] == int(sys.argv[3]), o
print("migrated:", o)
PY
[ "$(pg_sql "SELECT state::json->>'n' FROM luagent_state WHERE automation = 'count'")" = "$local_n" ] ||
  fail "ctx.state not copied"
[ "$(pg_sql "SELECT count(*) FROM luagent_runs")" = "$local_runs" ] || fail "runs not all copied"
pg_sql "SELECT events FROM luagent_runs WHERE automation = 'count' AND status = 'ok' LIMIT 1" | grep -q '"count ' ||
  fail "a run's kept print events were not copied"
[ "$(pg_sql "SELECT name || ' ' || payload FROM luagent_events")" = 'later {"x": 7}' ] || fail "queued event not copied"
expect_rc 0 "$LUAGENT" --workspace "$WS" audit verify && out_has "cluster audit chain intact: $local_audit rows" &&
  pass "the local audit chain was copied and verifies in the cluster"
# again: nothing twice
expect_rc 0 "$LUAGENT" --workspace "$WS" cluster migrate && out_has "copied 0 schedule(s), 0 ctx.state(s), 0 queued event(s), 0 run(s)" &&
  out_has "copied by an earlier migrate" && pass "a second migrate copies nothing"
[ "$(pg_sql "SELECT count(*) FROM luagent_events")" = 1 ] || fail "the event was copied twice"
# a different row in the cluster, not from this host: refused, nothing copied
pg_sql "DELETE FROM luagent_imports WHERE what = 'state'; UPDATE luagent_state SET state = '{\"n\": 999}'"
python3 -c "import sqlite3; c = sqlite3.connect('$WS/.luagent/state.db'); c.execute(\"INSERT INTO event_queue(name, payload, created) VALUES ('later', '{\\\"x\\\": 8}', 1)\"); c.commit()"
expect_rc 1 "$LUAGENT" --workspace "$WS" cluster migrate && err_has "differ from what the cluster already has" &&
  err_has "state count" && err_has "--force" && pass "a conflicting row is refused"
[ "$(pg_sql "SELECT count(*) FROM luagent_events")" = 1 ] || fail "a refused migrate copied something"
expect_rc 0 "$LUAGENT" --workspace "$WS" cluster migrate --force && out_has "replaced (--force)" &&
  pass "--force replaces it"
[ "$(pg_sql "SELECT state::json->>'n' FROM luagent_state WHERE automation = 'count'")" = "$local_n" ] ||
  fail "--force did not put the local state back"
[ "$(pg_sql "SELECT count(*) FROM luagent_events")" = 2 ] || fail "the new event was not copied"
[ "$(q "SELECT count(*) FROM runs WHERE kind = 'automation'")" = "$local_runs" ] || fail "state.db changed"
# the cluster daemon goes on from there
start_daemon
expect_rc 1 "$LUAGENT" --workspace "$WS" cluster migrate && err_has "stop it first" &&
  pass "migrate refuses while a daemon runs"
wait_for 10 "[ \"\$(pg_sql \"SELECT count(*) FROM luagent_runs WHERE automation = 'later' AND status = 'ok'\")\" = 2 ]" ||
  fail "the copied events did not run: $(grep later "$DLOG" | tail -5)"
wait_for 10 "grep -q 'count: ok in .* -> $((local_n + 1))\$' '$DLOG'" &&
  pass "ctx.state continues from the copied value" || fail "ctx.state did not continue: $(grep count: "$DLOG" | tail -3)"
stop_daemon
finish
