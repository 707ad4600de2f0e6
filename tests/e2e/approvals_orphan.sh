#!/bin/bash
# A request whose waiting process is gone is not offered and cannot be
# decided: it is expired, saying why, and approving it fails. Seen with a
# `kill -9` of a waiting ask and with a daemon stopped (SIGTERM, short
# grace) while its automation's run waits. A live waiter's request is
# offered and decided as before. (Red team 9's F5: such requests stayed
# pending for good, and `approvals approve` said "approved", exit 0, and
# audited a decision nothing acted on.)
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/zap_ws.sh"
zap_ws
cat > "$WS/automations/zapper.lua" <<'LUA'
return { on = "zap", timeout = "40s", run = function(ctx) return tools.call("hi.zap", { tag = "auto" }) end }
LUA
pending() { (cd "$WS" && "$LUAGENT" approvals list --json) | python3 -c '
import json, sys
print(" ".join(str(r["id"]) for r in json.load(sys.stdin) if r["status"] == "pending"))'; }

# 1. kill -9 of a waiting ask
(cd "$WS" && exec "$LUAGENT" ask zap) >"$WS/a.out" 2>&1 &
A=$!
wait_for 10 "grep -q 'waits in the queue' '$WS/a.out'" || fail "the ask did not wait: $(cat "$WS/a.out")"
[ "$(pending)" = 1 ] && pass "a live waiter's request is offered" || fail "pending: '$(pending)'"
kill -KILL $A
wait $A 2>/dev/null
[ -z "$(pending)" ] && pass "its waiter killed: the request is no longer offered" || fail "still pending: $(pending)"
expect_rc 1 "$LUAGENT" approvals approve 1 && err_has "approval 1 is already expired (the process waiting on it ended" &&
  pass "approving it fails and says why"
row=$(q "SELECT status, decided_by FROM approvals WHERE id = 1")
[ "$row" = "$(printf 'expired\tnobody')" ] && pass "it is recorded expired" || fail "row: $row"

# 2. a daemon stopped while its automation's run waits
start_daemon --grace 1s
(cd "$WS" && "$LUAGENT" emit zap >/dev/null) || fail "emit"
wait_for 15 '[ "$(pending)" = 2 ]' || fail "the automation's request did not appear: $(pending) $(tail -3 "$DLOG")"
kill -TERM "$DPID"
wait "$DPID"
[ -z "$(pending)" ] && pass "the daemon stopped: its run's request is no longer offered" || fail "still pending: $(pending)"
expect_rc 1 "$LUAGENT" approvals approve 2 && err_has "already expired" && pass "and cannot be approved"

# 3. nothing ran, and a live request is still decided as before
[ ! -e "$WS/data/zapped.txt" ] || fail "a call ran: $(cat "$WS/data/zapped.txt")"
(cd "$WS" && exec "$LUAGENT" ask zap) >"$WS/b.out" 2>&1 &
B=$!
wait_for 10 "grep -q 'waits in the queue' '$WS/b.out'" || fail "the second ask did not wait"
id=$(pending)
(cd "$WS" && "$LUAGENT" approvals approve "$id" >/dev/null) || fail "approve $id"
wait $B || fail "the approved ask exited $?: $(cat "$WS/b.out")"
[ "$(cat "$WS/data/zapped.txt")" = model ] && pass "a live request is approved and runs" || fail "zapped: $(cat "$WS/data/zapped.txt" 2>/dev/null)"
(cd "$WS" && "$LUAGENT" audit verify >/dev/null) || fail "audit verify"
finish
