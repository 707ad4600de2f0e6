#!/bin/bash
# A run left "running" by a daemon that was killed is marked interrupted at
# the next start even while a process with its worker's pid still runs
# luagent: a worker whose daemon is gone (adopted by another parent, about
# to take its parent-death SIGKILL, or a zombie) can never finish its run
# (red team 8, F2: such rows stayed "running" for good). A worker whose
# parent is a live luagent (a concurrent `automations run`) is left alone.
# A row records its worker's start time beside its pid: a live luagent
# worker that has the pid but started at another time is some later
# process that reused the pid, and the row is marked interrupted, by a
# daemon's start and by any command opening the journal (`runs list`).
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
mkdir -p "$WS/automations"
(cd "$WS" && "$LUAGENT" runs list >/dev/null 2>&1) # the state database
# An orphan running our binary: a daemon of another workspace, started by a
# subshell that exits at once, so init (or a subreaper) adopts it.
W2=$(mktemp -d /tmp/luagent-e2e-orphan.XXXXXX)
mkdir -p "$W2/automations"
( (cd "$W2" && exec "$LUAGENT" --workspace "$W2" daemon --quiet >/dev/null 2>&1) &
  echo $! >"$WS/orphan.pid")
ORPHAN=$(cat "$WS/orphan.pid")
PIDS="$PIDS $ORPHAN"
wait_for 5 "[ \"\$(readlink /proc/$ORPHAN/exe)\" = \"$LUAGENT\" ]" || fail "the orphan is not luagent"
# A worker of a live luagent: the other daemon's own child. Its pid is
# taken from its children once it has spawned its warm workers.
wait_for 5 '[ -n "$(pgrep -P '"$ORPHAN"' | head -1)" ]' || fail "the other daemon has no worker"
CHILD=$(pgrep -P "$ORPHAN" | head -1)
# its start time, field 22 of /proc/PID/stat (fields counted after "(comm)")
START=$(python3 -c "import sys; s = open('/proc/%s/stat' % sys.argv[1]).read(); print(s[s.rindex(')') + 2:].split()[19])" "$CHILD")
# A row whose worker pid is now that live worker's, recorded with the start
# time of the process that had the pid before: `runs list` marks it.
sqlite3 "$WS/.luagent/state.db" "INSERT INTO runs(id, kind, name, status, started, worker_pid, proc_start) VALUES
   ('r-reused-cli', 'automation', 'c', 'running', 1, $CHILD, $((START - 1))),
   ('r-live-start', 'automation', 'd', 'running', 1, $CHILD, $START)" || fail "could not insert the rows"
(cd "$WS" && "$LUAGENT" runs list >/dev/null 2>&1)
[ "$(q "SELECT status FROM runs WHERE id='r-reused-cli'")" = interrupted ] &&
  pass "a run whose worker pid was reused by a live worker is marked interrupted (runs list)" ||
  fail "r-reused-cli is $(q "SELECT status FROM runs WHERE id='r-reused-cli'")"
[ "$(q "SELECT status FROM runs WHERE id='r-live-start'")" = running ] &&
  pass "a run whose live worker has the recorded start time is left running (runs list)" ||
  fail "r-live-start is $(q "SELECT status FROM runs WHERE id='r-live-start'")"
sqlite3 "$WS/.luagent/state.db" "INSERT INTO runs(id, kind, name, status, started, worker_pid, proc_start) VALUES
   ('r-orphan', 'automation', 'a', 'running', 1, $ORPHAN, NULL),
   ('r-live', 'automation', 'b', 'running', 1, $CHILD, NULL),
   ('r-reused', 'automation', 'e', 'running', 1, $CHILD, $((START - 1)))" || fail "could not insert the rows"
start_daemon
wait_for 5 'grep -q "marked .* interrupted" "$DLOG"' || fail "no runs marked: $(tail -3 "$DLOG")"
grep -q "marked 2 run(s)" "$DLOG" && pass "the daemon's start marks two runs" ||
  fail "the daemon's start: $(grep marked "$DLOG")"
[ "$(q "SELECT status FROM runs WHERE id='r-reused'")" = interrupted ] &&
  pass "a run whose worker pid was reused by a live worker is marked interrupted (daemon start)" ||
  fail "r-reused is $(q "SELECT status FROM runs WHERE id='r-reused'")"
[ "$(q "SELECT status FROM runs WHERE id='r-live-start'")" = running ] &&
  pass "a run whose live worker has the recorded start time is left running (daemon start)" ||
  fail "r-live-start is $(q "SELECT status FROM runs WHERE id='r-live-start'")"
[ "$(q "SELECT status FROM runs WHERE id='r-orphan'")" = interrupted ] &&
  pass "a run whose worker pid is an adopted luagent is marked interrupted" ||
  fail "r-orphan is $(q "SELECT status FROM runs WHERE id='r-orphan'")"
[ "$(q "SELECT status FROM runs WHERE id='r-live'")" = running ] &&
  pass "a run whose worker's parent is a live luagent is left running" ||
  fail "r-live is $(q "SELECT status FROM runs WHERE id='r-live'")"
stop_daemon
kill "$ORPHAN" 2>/dev/null
wait_for 5 "! kill -0 $ORPHAN 2>/dev/null"
rm -rf "$W2"
finish
