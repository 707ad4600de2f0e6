#!/bin/bash
# A run left "running" by a daemon that was killed is marked interrupted at
# the next start even while a process with its worker's pid still runs
# luagent: a worker whose daemon is gone (adopted by another parent, about
# to take its parent-death SIGKILL, or a zombie) can never finish its run
# (red team 8, F2: such rows stayed "running" for good). A worker whose
# parent is a live luagent (a concurrent `automations run`) is left alone.
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
sqlite3 "$WS/.luagent/state.db" "INSERT INTO runs(id, kind, name, status, started, worker_pid) VALUES
   ('r-orphan', 'automation', 'a', 'running', 1, $ORPHAN),
   ('r-live', 'automation', 'b', 'running', 1, $CHILD)" || fail "could not insert the rows"
start_daemon
wait_for 5 'grep -q "marked .* interrupted" "$DLOG"' || fail "no runs marked: $(tail -3 "$DLOG")"
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
