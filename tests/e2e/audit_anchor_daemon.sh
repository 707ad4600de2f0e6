#!/bin/bash
# e2e: daemon runs anchor the audit head when they end, while the daemon
# keeps running (a long-lived process must not leave its rows unanchored
# until it exits), and the anchors they write verify.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
AN="$WS/.luagent/audit.anchor"

cat > "$WS/automations/poke.lua" <<'LUA'
return { every = "1s", run = function(ctx) tools.call("echo", { n = 1 }) end }
LUA
start_daemon
wait_for 15 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"poke\" AND status=\"ok\"")" -ge 2 ]' ||
  fail "poke did not run twice: $(tail -5 "$DLOG")"
# The worker anchors after its run's rows are written: wait for a line.
wait_for 5 '[ -s "$AN" ]' && pass "a daemon run anchored its head while the daemon runs" ||
  fail "no anchor line while the daemon runs"
expect_rc 0 "$LUAGENT" audit verify && out_has "anchored up to row" && pass "verify during the daemon: $(cat "$WS/.out")"
stop_daemon
expect_rc 0 "$LUAGENT" audit head && head=$(cat "$WS/.out")
grep -q "^$head ts=" <(tail -n 1 "$AN") && pass "the last anchor line is the final head" ||
  fail "last anchor line '$(tail -n 1 "$AN")' is not the head '$head'"
expect_rc 0 "$LUAGENT" audit verify --strict && pass "verify --strict after the daemon stopped"
finish
