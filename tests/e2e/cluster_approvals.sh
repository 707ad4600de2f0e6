#!/bin/bash
# e2e: the approval queue in PostgreSQL, across two hosts (two workspace
# folders with the same cluster config and different cluster.node).
#  - a `luagent run` on host A escalates fs.delete; host B lists the request
#    (with A's node), approves it: A proceeds with exactly the approved args
#  - deny from B: A's call raises the denial
#  - modify from B: A runs the modified args, not the requested ones
#  - the stored args edited in the database: B's approve is refused (hash)
#  - args and hash both rewritten in the database: B's approve goes through,
#    but A refuses it (the approval is for other arguments than it holds)
#  - the wake-up comes through NOTIFY: A's fallback re-check is set to 1000 s
#    (LUAGENT_TEST_APPROVAL_RECHECK_S) and its wait is capped by `timeout 60`,
#    so a run that finishes at all was woken by the notification
#  - a daemon worker on host A waits the same way and is released from B
#  - so does the model's call in a `luagent ask` on host A
#  - the console on host B lists A's request and approves it (API)
#  - every decision and call is in one chain that verifies on both hosts
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/pg.sh"
pg_start

A="$WS/a" B="$WS/b"
for h in a b; do
  mkdir -p "$WS/$h/data" "$WS/$h/automations"
  cat >"$WS/$h/luagent.lua" <<LUA
return {
  approver = "queue",
  approval_timeout_s = 120,
  limits = { deadline_s = 300 },
  cluster = { postgres = "$PG_URL", node = "host-$h" },
  providers = { { name = "demo", kind = "script", turns = {
    { turns = { { tool = "fs.delete", args = { path = "m.txt" } }, { text = "Done: %{result}" } } },
  } } },
}
LUA
done
cat >"$A/del.lua" <<'LUA'
local ok, err = pcall(tools.call, "fs.delete", { path = args.file })
if ok then print("deleted " .. args.file) else print("refused: " .. err.code .. ": " .. err.message) end
LUA

# The one pending request's id, as host B sees it.
pending_id() {
  for _ in $(seq 1 300); do
    id=$("$LUAGENT" --workspace "$B" approvals list --json 2>/dev/null | python3 -c '
import json, sys
try: rows = [r for r in json.load(sys.stdin) if r["status"] == "pending"]
except ValueError: rows = []
print(int(rows[0]["id"]) if rows else "")')
    [ -n "$id" ] && { echo "$id"; return 0; }
    sleep 0.1
  done
  return 1
}

# del.lua on host A in the background, its fallback re-check made long.
start_a() {
  (cd "$A" && LUAGENT_TEST_APPROVAL_RECHECK_S=1000 exec timeout 60 "$LUAGENT" run del.lua \
    --arg file="$1" </dev/null >"$WS/out.$2" 2>&1) &
  RUNPID=$!
  PIDS="$PIDS $RUNPID"
}

# 1. approve on B releases A
echo a >"$A/data/a.txt"
start_a a.txt 1
id=$(pending_id) || fail "no pending approval reached host B"
listing=$("$LUAGENT" --workspace "$B" approvals list)
grep -q 'fs.delete' <<<"$listing" && grep -q '"path":"a.txt"' <<<"$listing" &&
  grep -q 'host-a' <<<"$listing" && pass "host B lists A's request: tool, exact args, node" ||
  fail "listing on B: $listing"
expect_rc 0 "$LUAGENT" --workspace "$B" approvals approve "$id"
wait $RUNPID
grep -q '^deleted a.txt' "$WS/out.1" && pass "approved on B: the run on A proceeds (woken by NOTIFY: the fallback is 1000 s)" ||
  fail "approved run on A: $(cat "$WS/out.1")"
[ ! -e "$A/data/a.txt" ] && pass "the approved call ran on A" || fail "a.txt still on A"
expect_rc 1 "$LUAGENT" --workspace "$A" approvals approve "$id" && err_has "already approved" &&
  pass "a second decision (from A) is refused"

# 2. deny on B
echo b >"$A/data/b.txt"
start_a b.txt 2
id=$(pending_id) || fail "no pending approval (deny)"
expect_rc 0 "$LUAGENT" --workspace "$B" approvals deny "$id" --reason "not on a friday"
wait $RUNPID
grep -q '^refused: denied: .*not on a friday' "$WS/out.2" && pass "denied on B: A's call raises the reason" ||
  fail "deny: $(cat "$WS/out.2")"
[ -e "$A/data/b.txt" ] && pass "the denied call did not run" || fail "b.txt deleted despite the denial"

# 3. modify on B: what runs on A is what B approved
echo c >"$A/data/c.txt"
start_a b.txt 3
id=$(pending_id) || fail "no pending approval (modify)"
expect_rc 0 "$LUAGENT" --workspace "$B" approvals approve "$id" --args '{"path":"c.txt"}'
wait $RUNPID
grep -q '^deleted b.txt' "$WS/out.3" || fail "modified run: $(cat "$WS/out.3")"
[ -e "$A/data/b.txt" ] && [ ! -e "$A/data/c.txt" ] &&
  pass "modified on B: A ran the approved arguments, not the requested ones" ||
  fail "modify: b.txt $( [ -e "$A/data/b.txt" ] && echo kept || echo deleted), c.txt $( [ -e "$A/data/c.txt" ] && echo kept || echo deleted)"

# 4. the stored args edited in the database: approving is refused
start_a b.txt 4
id=$(pending_id) || fail "no pending approval (edited args)"
pg_sql "UPDATE luagent_approvals SET args = '{\"path\":\"keep.txt\"}' WHERE id = $id" >/dev/null
expect_rc 1 "$LUAGENT" --workspace "$B" approvals approve "$id" && err_has "do not match their hash" &&
  pass "approve of a row whose args were edited is refused (hash check)"
expect_rc 0 "$LUAGENT" --workspace "$B" approvals deny "$id" --reason "tampered"
wait $RUNPID
grep -q '^refused: denied' "$WS/out.4" && [ -e "$A/data/b.txt" ] && pass "... and can still be denied" ||
  fail "edited-args case: $(cat "$WS/out.4")"

# 5. args and hash both rewritten: B's approval is for other arguments, A refuses it
echo k >"$A/data/keep.txt"
start_a b.txt 5
id=$(pending_id) || fail "no pending approval (rewritten hash)"
pg_sql "UPDATE luagent_approvals SET args = '{\"path\":\"keep.txt\"}', args_hash = 'x' WHERE id = $id" >/dev/null
expect_rc 1 "$LUAGENT" --workspace "$B" approvals approve "$id" && pass "a forged hash does not match the args either"
# now make the row consistent (request 1's args and their true hash)
pg_sql "UPDATE luagent_approvals SET args = (SELECT args FROM luagent_approvals WHERE id = 1), args_hash = (SELECT args_hash FROM luagent_approvals WHERE id = 1) WHERE id = $id" >/dev/null
expect_rc 0 "$LUAGENT" --workspace "$B" approvals approve "$id"
wait $RUNPID
grep -q '^refused: denied: .*other arguments than the ones waiting to run' "$WS/out.5" &&
  [ -e "$A/data/b.txt" ] && pass "an approval for other arguments (rewritten row) is refused by the waiting run" ||
  fail "rewritten row: $(cat "$WS/out.5")"

# 6. a daemon worker on host A waits in the cluster queue and B releases it
cat >"$A/automations/cleanup.lua" <<'LUA'
return { on = "cleanup", timeout = "60s", run = function(ctx)
  tools.call("fs.write", { path = "tmp/d.txt", content = "x" })
  local ok, err = pcall(tools.call, "fs.delete", { path = "tmp/d.txt" })
  if not ok then error("delete refused: " .. tostring(err.message)) end
  return "deleted"
end }
LUA
(cd "$A" && LUAGENT_TEST_APPROVAL_RECHECK_S=1000 exec "$LUAGENT" daemon --grace 3s >"$WS/daemon.log" 2>&1) &
DPID=$!
PIDS="$PIDS $DPID"
for _ in $(seq 1 100); do grep -q 'luagent daemon' "$WS/daemon.log" && break; sleep 0.1; done
expect_rc 0 "$LUAGENT" --workspace "$A" emit cleanup '{}'
id=$(pending_id) || fail "no pending approval from the daemon worker: $(tail -3 "$WS/daemon.log")"
expect_rc 0 "$LUAGENT" --workspace "$B" approvals approve "$id"
for _ in $(seq 1 200); do [ ! -e "$A/data/tmp/d.txt" ] && break; sleep 0.1; done
[ ! -e "$A/data/tmp/d.txt" ] && pass "a daemon worker on A is released by an approval on B" ||
  fail "daemon worker still waiting: $(tail -5 "$WS/daemon.log")"
kill "$DPID" 2>/dev/null
wait "$DPID" 2>/dev/null

# 6b. `luagent ask` on host A: the model's call waits the same way
echo m >"$A/data/m.txt"
(cd "$A" && LUAGENT_TEST_APPROVAL_RECHECK_S=1000 exec timeout 60 "$LUAGENT" ask "delete m.txt" \
  </dev/null >"$WS/out.ask" 2>&1) &
RUNPID=$!
PIDS="$PIDS $RUNPID"
id=$(pending_id) || fail "no pending approval from ask: $(cat "$WS/out.ask")"
"$LUAGENT" --workspace "$B" approvals list --json | grep -q '"caller_kind":"model"' ||
  fail "the request from ask is not the model's"
expect_rc 0 "$LUAGENT" --workspace "$B" approvals approve "$id"
wait $RUNPID
grep -q "Done" "$WS/out.ask" && [ ! -e "$A/data/m.txt" ] &&
  pass "luagent ask on A: the model's call is released by an approval on B" ||
  fail "ask: $(cat "$WS/out.ask")"

# 7. the console on host B lists A's request and approves it
PORT=$(free_port)
(cd "$B" && exec "$LUAGENT" console 127.0.0.1:$PORT) >"$WS/console.log" 2>&1 &
CPID=$!
PIDS="$PIDS $CPID"
for _ in $(seq 50); do grep -q '^console: http' "$WS/console.log" && break; sleep 0.1; done
echo e >"$A/data/e.txt"
start_a e.txt 7
id=$(pending_id) || fail "no pending approval (console)"
PYTHONPATH="$(dirname "$0")/lib" python3 - "$PORT" "$(cat "$B/.luagent/console.token")" "$id" <<'PY' ||
import sys
from console_client import Console
port, token, id = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
c = Console(port)
c.login(token)
s, rows, _, _ = c.get("/api/approvals")
assert s == 200 and [r["node"] for r in rows if r["id"] == id] == ["host-a"], (s, rows)
s, j, _, _ = c.post(f"/api/approvals/{id}/approve")
assert s == 200 and j["status"] == "approved", (s, j)
s, j, _, _ = c.post(f"/api/approvals/{id}/approve")
assert s == 409 and "already approved" in j["error"], (s, j)
PY
  fail "console on B: $(tail -3 "$WS/console.log")"
wait $RUNPID
grep -q '^deleted e.txt' "$WS/out.7" && [ ! -e "$A/data/e.txt" ] &&
  pass "the console on B lists A's request (with its node) and its approval releases A" ||
  fail "console approval: $(cat "$WS/out.7")"
kill "$CPID" 2>/dev/null
wait "$CPID" 2>/dev/null

# Everything is in one chain, which verifies on both hosts.
expect_rc 0 "$LUAGENT" --workspace "$A" audit verify && out_has "cluster audit chain intact" &&
  pass "audit verify on A"
expect_rc 0 "$LUAGENT" --workspace "$B" audit verify && pass "audit verify on B"
nodes=$(pg_sql "SELECT string_agg(DISTINCT node, ',' ORDER BY node) FROM luagent_audit")
[ "$nodes" = "host-a,host-b" ] && pass "rows from both hosts in one chain" || fail "nodes in the chain: $nodes"
[ "$(pg_sql "SELECT count(*) FROM luagent_audit WHERE decision = 'approval_granted' AND node = 'host-b'")" -ge 3 ] &&
  pass "B's decisions are on record" || fail "decisions missing from the chain"
[ "$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM approvals").fetchone()[0])' "$A/.luagent/state.db")" = 0 ] &&
  pass "nothing went to the local SQLite queue" || fail "rows in A's SQLite approvals"
finish
