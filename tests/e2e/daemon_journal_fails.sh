#!/bin/bash
# A run never starts unless its journal row is on disk: when the scheduler
# cannot record a run (its row's INSERT fails, or the COMMIT holding it
# does, as on a full disk), the worker never gets the job. The run goes
# back to pending, the daemon says why and keeps going, and the run starts
# once its row can be written. Before, the job went out anyway: the run
# made its tool calls (audited, under a run id the journal never had) and
# saved its ctx.state, with no trace of it in `luagent runs`.
#
# The failures are made with triggers in state.db: a BEFORE INSERT that
# raises "database or disk is full" (the statement fails), and an AFTER
# INSERT that breaks a deferred foreign key (the statement works, the
# COMMIT fails and is rolled back). Each is tried with one automation,
# with `luagent automations run`, and with a burst of short ones whose runs
# queue behind each other on the workers (jobs handed out, not yet sent,
# when the commit fails).
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"

# Every run makes one audited tool call under its own run id.
cat > "$WS/automations/mark.lua" <<'LUA'
return { every = "1s", run = function(ctx)
  tools.call("echo", { text = "ran " .. ctx.run_id })
  ctx.state.n = (ctx.state.n or 0) + 1
end }
LUA

# sqlite3's CLI may be absent: python's module, waiting for the daemon's
# transaction like any other writer.
sql() {
  python3 - "$WS/.luagent/state.db" "$1" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
c.executescript(sys.argv[2])
PY
}
# Audited tool calls made by runs the journal has no row for: must stay 0.
ghosts() { q "SELECT count(*) FROM audit WHERE caller_kind = 'automation' AND run_id NOT IN (SELECT id FROM runs)"; }
marks() { q "SELECT count(*) FROM audit WHERE caller_name = 'mark'"; }

INSERT_FAILS="CREATE TRIGGER jf BEFORE INSERT ON runs BEGIN
  SELECT RAISE(FAIL, 'database or disk is full'); END;"
COMMIT_FAILS="CREATE TRIGGER jf AFTER INSERT ON runs BEGIN INSERT INTO jf_c VALUES (1); END;"
# RAISE(ROLLBACK) ends the transaction the way SQLite itself does on a
# full disk or an I/O error in a statement: the daemon must notice that
# its transaction is gone (review 21: the rows written after it went in
# one by one, were taken for lost, and one run's INSERT then failed on
# its own row for good, holding every start back).
UPDATE_ROLLS_BACK="CREATE TRIGGER jf BEFORE UPDATE ON runs BEGIN
  SELECT RAISE(ROLLBACK, 'database or disk is full'); END;"
INSERT_ROLLS_BACK="CREATE TRIGGER jf BEFORE INSERT ON runs BEGIN
  SELECT RAISE(ROLLBACK, 'database or disk is full'); END;"
# The end of a run that cannot be written (its row's UPDATE fails):
# written when it can be.
UPDATE_FAILS="CREATE TRIGGER jf BEFORE UPDATE ON runs BEGIN
  SELECT RAISE(FAIL, 'database or disk is full'); END;"
# Every schedule and ctx.state save rolls back: one lost transaction
# after another in a pass (review 22: only the last was remembered, and
# rows of the others were taken for written).
SAVE_ROLLS_BACK="CREATE TRIGGER jf BEFORE UPDATE ON automations BEGIN
  SELECT RAISE(ROLLBACK, 'database or disk is full'); END;"
# A run's event rows fail halfway, rolling back its end with them.
EVENT_ROLLS_BACK="CREATE TRIGGER jf BEFORE INSERT ON events WHEN new.type = 'run_start' BEGIN
  SELECT RAISE(ROLLBACK, 'database or disk is full'); END;"
HEAL="DROP TRIGGER IF EXISTS jf; DELETE FROM jf_c;"

# The schema first (a daemon's first start makes it), then no run of mark
# can be recorded from its first slot on.
expect_rc 0 "$LUAGENT" --workspace "$WS" automations list
sql "CREATE TABLE jf_p(id INTEGER PRIMARY KEY);
CREATE TABLE jf_c(x INTEGER REFERENCES jf_p(id) DEFERRABLE INITIALLY DEFERRED);"

one() { # CASE-NAME SQL MESSAGE
  local name=$1 make=$2 said=$3
  sql "$make"
  local m0 s0 r0
  m0=$(marks)
  s0=$(q "SELECT coalesce((SELECT json_extract(state, '$.n') FROM automations WHERE name = 'mark'), 0)")
  r0=$(q "SELECT count(*) FROM runs WHERE name = 'mark'")
  : >"$DLOG"
  start_daemon
  sleep 3.5
  kill -0 "$DPID" 2>/dev/null && pass "$name: the daemon keeps running" || fail "$name: the daemon died: $(tail -5 "$DLOG")"
  [ "$(marks)" = "$m0" ] && pass "$name: no run of mark made its tool call" ||
    fail "$name: mark's runs ran unrecorded: $(( $(marks) - m0 )) audited call(s), $(ghosts) without a journal row"
  [ "$(q "SELECT coalesce((SELECT json_extract(state, '$.n') FROM automations WHERE name = 'mark'), 0)")" = "$s0" ] &&
    pass "$name: ctx.state not saved by a run that never started" || fail "$name: ctx.state advanced"
  [ "$(q "SELECT count(*) FROM runs WHERE name = 'mark'")" = "$r0" ] || fail "$name: a row appeared while rows could not be written"
  grep -q "$said" "$DLOG" && grep -q "not started: the journal could not record" "$DLOG" &&
    pass "$name: the log says what failed and that the run did not start" ||
    fail "$name: the log does not say why: $(tail -5 "$DLOG")"
  sql "$HEAL"
  wait_for 15 '[ "$(q "SELECT count(*) FROM runs WHERE name = \"mark\" AND status = \"ok\"")" -gt "$r0" ]' &&
    pass "$name: once rows can be written, mark runs again" || fail "$name: mark did not resume: $(tail -5 "$DLOG")"
  [ "$(marks)" -gt "$m0" ] || fail "$name: no tool call after the heal"
  stop_daemon
  [ "$(q "SELECT count(*) FROM runs WHERE status = 'running'")" = 0 ] || fail "$name: runs left running"
  [ "$(ghosts)" = 0 ] && pass "$name: every audited call has its run in the journal" ||
    fail "$name: $(ghosts) audited call(s) of runs the journal lacks"
}
one "INSERT fails" "$INSERT_FAILS" "journal insert: database or disk is full"
one "COMMIT fails" "$COMMIT_FAILS" "FOREIGN KEY constraint failed"

# `luagent automations run` is told, and runs nothing, rather than wait
# for the journal or run unrecorded.
manual() { # CASE-NAME SQL MESSAGE
  local name=$1 make=$2 said=$3 m0
  sql "$make"
  m0=$(marks)
  expect_rc 1 "$LUAGENT" --workspace "$WS" automations run mark &&
    err_has "mark: not run: the journal could not record the run: " && err_has "$said" &&
    pass "$name: automations run fails and says why"
  [ "$(marks)" = "$m0" ] && pass "$name: the manual run made no tool call" ||
    fail "$name: the manual run ran unrecorded"
  sql "$HEAL"
  expect_rc 0 "$LUAGENT" --workspace "$WS" automations run mark && [ "$(marks)" = $((m0 + 1)) ] &&
    pass "$name: automations run works again once rows can be written" ||
    fail "$name: automations run after the heal: $(head -c 300 "$WS/.err")"
}
manual "INSERT fails, manual" "$INSERT_FAILS" "database or disk is full"
manual "COMMIT fails, manual" "$COMMIT_FAILS" "FOREIGN KEY constraint failed"
[ "$(ghosts)" = 0 ] || fail "manual runs: $(ghosts) audited call(s) of runs the journal lacks"

# A burst: 40 short automations, run until their runs queue behind each
# other on the workers, then the commits fail while the daemon runs.
rm -f "$WS/automations/mark.lua"
for i in $(seq 1 40); do
  cat > "$WS/automations/b$i.lua" <<'LUA'
return { every = "1s", run = function(ctx) tools.call("echo", { text = ctx.run_id }) end }
LUA
done
burst() { # CASE-NAME SQL
  local name=$1 make=$2
  : >"$DLOG"
  start_daemon --workers 4
  wait_for 20 '[ "$(q "SELECT count(*) FROM runs WHERE name LIKE \"b%\" AND status = \"ok\"")" -ge 120 ]' ||
    fail "$name: the burst did not run: $(tail -5 "$DLOG")"
  sql "$make"
  sleep 3
  kill -0 "$DPID" 2>/dev/null || fail "$name: the daemon died: $(tail -5 "$DLOG")"
  [ "$(ghosts)" = 0 ] && pass "$name, burst: no run went to a worker unrecorded" ||
    fail "$name, burst: $(ghosts) audited call(s) of runs the journal lacks"
  local ok0
  ok0=$(q "SELECT count(*) FROM runs WHERE name LIKE 'b%' AND status = 'ok'")
  sql "$HEAL"
  wait_for 15 '[ "$(q "SELECT count(*) FROM runs WHERE name LIKE \"b%\" AND status = \"ok\"")" -ge $((ok0 + 80)) ]' &&
    pass "$name, burst: runs resume" || fail "$name, burst: runs did not resume: $(tail -5 "$DLOG")"
  stop_daemon
  [ "$(ghosts)" = 0 ] || fail "$name, burst: $(ghosts) audited call(s) of runs the journal lacks after the heal"
  # a run that ended while its end could not be written has it written
  # once it can (review 21: its row said `running` until the next start)
  # ... once: a run's events are there once (review 23: an end whose
  # UPDATE failed had its events committed, and written again with it)
  local twice
  twice=$(q "SELECT count(*) FROM (SELECT run_id FROM events WHERE type = 'run_end' GROUP BY run_id HAVING count(*) > 1)")
  [ "$twice" = 0 ] || fail "$name, burst: $twice run(s) with their events journaled twice"
  local left
  left=$(q "SELECT count(*) FROM runs WHERE status = 'running'")
  [ "$left" = 0 ] && pass "$name, burst: every run that ended has its end in the journal" ||
    fail "$name, burst: $left run(s) left running after a clean stop"
}
burst "INSERT fails" "$INSERT_FAILS"
burst "COMMIT fails" "$COMMIT_FAILS"
burst "an UPDATE fails" "$UPDATE_FAILS"
burst "an UPDATE rolls back" "$UPDATE_ROLLS_BACK"
burst "a save rolls back" "$SAVE_ROLLS_BACK"
burst "an event row rolls back" "$EVENT_ROLLS_BACK"
burst "an INSERT rolls back" "$INSERT_ROLLS_BACK"

# An event is consumed once: its runs are made only once its DELETE from
# event_queue is committed (review 22: they were made first, and a batch
# whose DELETE failed fired again on each of up to 100 rounds: 50 runs of
# one `luagent emit`).
rm -f "$WS"/automations/b*.lua
cat > "$WS/automations/ev.lua" <<'LUA'
return { on = "ping", mode = "parallel", max = 50, run = function(ctx) tools.call("echo", { text = ctx.run_id }) end }
LUA
: >"$DLOG"
start_daemon --workers 4
wait_for 10 'grep -q "ev: loaded" "$DLOG"' || fail "events: ev did not load: $(tail -3 "$DLOG")"
sql "CREATE TRIGGER jf BEFORE DELETE ON event_queue BEGIN
  SELECT RAISE(ROLLBACK, 'database or disk is full'); END;"
expect_rc 0 "$LUAGENT" --workspace "$WS" emit ping || fail "events: emit failed"
sleep 2
[ "$(q "SELECT count(*) FROM runs WHERE name = 'ev'")" = 0 ] && pass "events: no run while the event cannot be consumed" ||
  fail "events: ev ran while its event was still queued"
sql "$HEAL"
wait_for 10 '[ "$(q "SELECT count(*) FROM runs WHERE name = \"ev\" AND status = \"ok\"")" -ge 1 ]' ||
  fail "events: ev did not run once the event could be consumed: $(tail -5 "$DLOG")"
sleep 2
n=$(q "SELECT count(*) FROM runs WHERE name = 'ev'")
[ "$n" = 1 ] && pass "events: one emit, one run" || fail "events: one emit made $n runs"
[ "$(q "SELECT count(*) FROM event_queue")" = 0 ] || fail "events: the event is still queued"
stop_daemon
rm -f "$WS/automations/ev.lua"

# Stopping while starts are held back: the daemon waits for its run in
# progress without spinning (review 21: the hold's wake-up, in the past
# once nothing starts any more, made every wait a poll of 0 ms).
start_http
gated_automation slow 1
cat > "$WS/automations/mark.lua" <<'LUA'
return { every = "1s", run = function(ctx) tools.call("echo", { text = ctx.run_id }) end }
LUA
: >"$DLOG"
start_daemon --grace 20s
wait_for 15 '[ "$(q "SELECT count(*) FROM runs WHERE name = \"slow\" AND status = \"running\"")" = 1 ]' ||
  fail "stop: slow did not start: $(tail -5 "$DLOG")"
sql "$INSERT_FAILS"
wait_for 10 'grep -q "mark: run .* not started" "$DLOG"' || fail "stop: mark's start was not held back"
kill -TERM "$DPID"
sleep 0.5
c0=$(awk '{ print $14 + $15 }' "/proc/$DPID/stat")
sleep 2
c1=$(awk '{ print $14 + $15 }' "/proc/$DPID/stat")
ticks=$(getconf CLK_TCK)
# a spinning daemon uses a whole core (2 s: 2 * ticks); a waiting one ~0
[ $((c1 - c0)) -lt $((ticks / 2)) ] && pass "stop: the daemon waits for its run without spinning" ||
  fail "stop: the daemon used $((c1 - c0)) ticks of CPU in 2 s of its grace (CLK_TCK $ticks)"
touch "$WS/gate-slow"
wait "$DPID"
rc=$?
[ "$rc" = 0 ] && pass "stop: the daemon exits 0 once its run ends" || fail "stop: exit $rc: $(tail -5 "$DLOG")"
sql "$HEAL"
[ "$(ghosts)" = 0 ] || fail "stop: $(ghosts) audited call(s) of runs the journal lacks"
finish
