#!/bin/bash
# A run that is alive in another process stays `running` whatever other
# commands open the journal meanwhile (`runs list`, `runs show`, a second
# ask, a daemon starting), `runs prune` leaves it alone, and it ends `ok`
# with its row and events. Only a run whose process is gone is marked
# `interrupted`. (Red team 9's F1: the recorded process start time was
# the process's vsize, so every live run looked dead to the next command,
# and a prune then deleted a run that went on to call a high-impact tool.)
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/zap_ws.sh"
zap_ws
q() {
  python3 - "$WS/.luagent/state.db" "$1" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=10)
for row in c.execute(sys.argv[2]):
    print("\t".join("" if v is None else str(v) for v in row))
PY
}
(cd "$WS" && exec "$LUAGENT" ask zap) >"$WS/ask.out" 2>&1 &
A=$!
PIDS="$PIDS $A"
for _ in $(seq 100); do grep -q 'waits in the queue' "$WS/ask.out" && break; sleep 0.1; done
grep -q 'waits in the queue' "$WS/ask.out" || fail "the ask did not wait on its approval: $(cat "$WS/ask.out")"
id=$(q "SELECT id FROM runs WHERE kind='ask'")
(cd "$WS" && "$LUAGENT" runs list >/dev/null 2>&1)
(cd "$WS" && "$LUAGENT" runs show "$id" >/dev/null 2>&1)
(cd "$WS" && "$LUAGENT" ask hello >/dev/null 2>&1) || fail "a second ask"
st=$(q "SELECT status FROM runs WHERE id='$id'")
[ "$st" = running ] && pass "a live run stays running while other commands open the journal" ||
  fail "the live ask (pid $A, alive: $(kill -0 $A 2>/dev/null && echo yes || echo no)) is '$st': $(q "SELECT error FROM runs WHERE id='$id'")"
sleep 2
(cd "$WS" && "$LUAGENT" runs prune --older-than 1s >/dev/null 2>&1) || fail "runs prune"
[ "$(q "SELECT count(*) FROM runs WHERE id='$id'")" = 1 ] && pass "runs prune leaves the live run" ||
  fail "runs prune deleted the live run"
(cd "$WS" && "$LUAGENT" approvals approve 1 >/dev/null) || fail "approve"
wait $A || fail "the ask exited $?: $(cat "$WS/ask.out")"
[ "$(cat "$WS/data/zapped.txt" 2>/dev/null)" = model ] || fail "the approved call did not run"
[ "$(q "SELECT status FROM runs WHERE id='$id'")" = ok ] && pass "the run ends ok, in the journal" ||
  fail "after its end: '$(q "SELECT status, error FROM runs WHERE id='$id'")'"
[ "$(q "SELECT count(*) FROM events WHERE run_id='$id' AND type='tool_result'")" -ge 1 ] &&
  pass "with its events" || fail "its events are gone"
# and a run whose process is really gone is still marked interrupted
(cd "$WS" && exec "$LUAGENT" ask zap) >"$WS/ask2.out" 2>&1 &
B=$!
for _ in $(seq 100); do grep -q 'waits in the queue' "$WS/ask2.out" && break; sleep 0.1; done
id2=$(q "SELECT id FROM runs WHERE kind='ask' AND status='running'")
kill -KILL $B
wait $B 2>/dev/null
(cd "$WS" && "$LUAGENT" runs list >/dev/null 2>&1)
[ "$(q "SELECT status FROM runs WHERE id='$id2'")" = interrupted ] && pass "a killed run is marked interrupted" ||
  fail "the killed run is '$(q "SELECT status FROM runs WHERE id='$id2'")'"
finish
