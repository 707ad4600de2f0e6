#!/bin/bash
# e2e: the cluster audit chain fails closed.
#  - one `luagent run` makes a write (on record), then the database is
#    stopped under it: its next write is refused with an error naming the
#    database, the file is not written (no side effect without its audit
#    row), and the process goes on; the database comes back and the same
#    process's next write works and is on record; the chain verifies
#  - an escalation while the database is down is denied, never run
#  - a run waiting for an approval survives a database restart and is
#    woken by an approval made after it
#  - a workspace pointed at a dead port: the call is refused naming it
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/pg.sh"
pg_start

H="$WS/h"
mkdir -p "$H/data"
cat >"$H/luagent.lua" <<LUA
return { approver = "queue", approval_timeout_s = 2,
         cluster = { postgres = "$PG_URL", node = "host-h" } }
LUA
# Each step waits for the test's go file (polled through fs.list, a read
# whose row only queues), then writes one file and says what happened.
cat >"$H/steps.lua" <<'LUA'
local function go(name)
  for _ = 1, 600 do
    for _, e in ipairs(tools.call("fs.list", {})) do
      if e.name == name then return end
    end
    local t = os.clock() + 0.1
    while os.clock() < t do end
  end
  error("no " .. name)
end
local function write(name)
  local ok, err = pcall(tools.call, "fs.write", { path = name, content = "x" })
  print(ok and ("wrote " .. name) or ("refused " .. name .. ": " .. err.message))
end
write("one.txt")
go("go2")
write("two.txt")
local ok, err = pcall(tools.call, "fs.delete", { path = "one.txt" })  -- escalates
print(ok and "deleted one.txt" or ("delete refused: " .. err.message))
go("go3")
write("three.txt")
LUA
(cd "$H" && exec timeout 120 "$LUAGENT" run steps.lua </dev/null >"$WS/steps.out" 2>"$WS/steps.err") &
RUNPID=$!
PIDS="$PIDS $RUNPID"
wait_out() { for _ in $(seq 1 600); do grep -q "$1" "$WS/steps.out" && return 0; sleep 0.1; done; return 1; }

wait_out "wrote one.txt" && pass "a write with the database up" || fail "first write: $(cat "$WS/steps.out" "$WS/steps.err")"
$PG_AS "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w stop >/dev/null || fail "cannot stop the database"
touch "$H/data/go2"
wait_out "delete refused" || fail "no answer with the database down: $(cat "$WS/steps.out" "$WS/steps.err")"
grep -q "^refused two.txt: fs.write: denied (audit): cluster database 127.0.0.1:$PG_PORT/luagent" "$WS/steps.out" &&
  pass "with the database down the write is refused, naming the database" ||
  fail "refusal: $(cat "$WS/steps.out")"
[ ! -e "$H/data/two.txt" ] && pass "... and nothing was written" || fail "two.txt written without its audit row"
[ -e "$H/data/one.txt" ] && pass "the escalated delete did not run with the database down" ||
  fail "one.txt deleted while the database was down"
kill -0 "$RUNPID" 2>/dev/null && pass "the process keeps running" || fail "the run died: $(cat "$WS/steps.err")"
$PG_AS "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 30 start >/dev/null ||
  fail "cannot restart the database"
touch "$H/data/go3"
wait $RUNPID
grep -q "^wrote three.txt" "$WS/steps.out" && [ -e "$H/data/three.txt" ] &&
  pass "the database back: the same process writes again" || fail "after the restart: $(cat "$WS/steps.out" "$WS/steps.err")"
expect_rc 0 "$LUAGENT" --workspace "$H" audit verify && pass "the chain verifies"
grep -q "not anchored" "$WS/steps.err" && fail "the head was not anchored: $(cat "$WS/steps.err")"
tail -1 "$H/.luagent/cluster-audit.anchor" | grep -q "^seq=$(pg_sql "SELECT max(seq) FROM luagent_audit") " &&
  pass "the run anchored the chain's head at exit" || fail "anchor: $(cat "$H/.luagent/cluster-audit.anchor" 2>&1)"
[ "$(pg_sql "SELECT count(*) FROM luagent_audit WHERE tool = 'fs.write' AND detail IS NULL AND args_hash IS NOT NULL AND decision = 'exec'")" = 2 ] &&
  pass "both writes that ran are on record, the refused one is not" ||
  fail "exec rows: $(pg_sql "SELECT seq, decision, tool, status FROM luagent_audit")"

# An approval wait outlives a database restart: the waiting run keeps
# trying its row, LISTENs again on the new connection, and an approval
# made after the restart wakes it (its fallback re-check is 1000 s away).
echo q >"$H/data/q.txt"
cat >"$H/del.lua" <<'LUA'
local ok, err = pcall(tools.call, "fs.delete", { path = "q.txt" })
print(ok and "deleted q.txt" or ("refused: " .. err.message))
LUA
cat >"$H/luagent.lua" <<LUA
return { approver = "queue", approval_timeout_s = 60,
         cluster = { postgres = "$PG_URL", node = "host-h" } }
LUA
(cd "$H" && LUAGENT_TEST_APPROVAL_RECHECK_S=1000 exec timeout 90 "$LUAGENT" run del.lua </dev/null \
  >"$WS/del.out" 2>&1) &
RUNPID=$!
PIDS="$PIDS $RUNPID"
for _ in $(seq 1 300); do
  [ "$(pg_sql "SELECT count(*) FROM luagent_approvals WHERE status = 'pending'")" = 1 ] && break
  sleep 0.1
done
id=$(pg_sql "SELECT id FROM luagent_approvals WHERE status = 'pending'")
[ -n "$id" ] || fail "no pending approval: $(cat "$WS/del.out")"
$PG_AS "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w stop >/dev/null || fail "cannot stop the database"
sleep 2 # the waiter finds the database gone and keeps trying
$PG_AS "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 30 start >/dev/null ||
  fail "cannot restart the database"
kill -0 "$RUNPID" 2>/dev/null && pass "a run waiting for approval survives the database going away" ||
  fail "the waiting run ended: $(cat "$WS/del.out")"
# the waiter LISTENs again before it reads its row on a new connection:
# once that read is done, only a notification can wake it
listening=""
for _ in $(seq 1 100); do
  listening=$(pg_sql "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'luagent:host-h'
    AND state = 'idle' AND query LIKE 'SELECT status, decided_by%'")
  [ "$listening" -ge 1 ] && break
  sleep 0.1
done
[ "$listening" -ge 1 ] || fail "the waiter did not come back to the database"
expect_rc 0 "$LUAGENT" --workspace "$H" approvals approve "$id"
wait $RUNPID
grep -q "^deleted q.txt" "$WS/del.out" && [ ! -e "$H/data/q.txt" ] &&
  pass "approved after the restart: the run wakes (NOTIFY on its new connection) and its call runs, on record" ||
  fail "after the restart: $(cat "$WS/del.out")"
expect_rc 0 "$LUAGENT" --workspace "$H" audit verify && pass "the chain still verifies"

# A dead port from the start.
D="$WS/d"
mkdir -p "$D/data"
dead=$(free_port)
cat >"$D/luagent.lua" <<LUA
return { cluster = { postgres = "postgresql://luagent@127.0.0.1:$dead/luagent", node = "dead" } }
LUA
cat >"$D/w.lua" <<'LUA'
local ok, err = pcall(tools.call, "fs.write", { path = "w.txt", content = "x" })
print(ok and "wrote" or ("refused: " .. err.message))
LUA
expect_rc 0 "$LUAGENT" --workspace "$D" run "$D/w.lua" && out_has "refused: fs.write: denied (audit): cluster database 127.0.0.1:$dead/luagent: cannot connect" &&
  pass "a dead port: the call is refused, naming the database"
[ ! -e "$D/data/w.txt" ] && pass "... and nothing was written" || fail "w.txt written"
[ -n "${SHOW:-}" ] && cat "$WS/steps.out" "$WS/steps.err" "$WS/.out"
finish
