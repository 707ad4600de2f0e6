#!/bin/bash
# e2e: with audit.sign on, an approval in the cluster queue must carry the
# deciding host's signature (the workspace's audit key), so someone who can
# write the database but not read a host's .luagent/audit.key cannot
# approve a call or pick its arguments.
#  - a database writer marks a pending request approved (approved_hash =
#    args_hash): the run on host A refuses it, nothing is deleted
#  - a database writer marks it "modified" with arguments of its choosing
#    (and their true hash): refused, the file it chose is kept
#  - a signed approval copied onto another request: refused
#  - host B (same audit.key) approves: A proceeds; B modifies: A runs B's
#    arguments
#  - host C with another audit.key approves: A refuses it
#  - the chain verifies on A and B
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/pg.sh"
pg_start
for h in a b c; do
  mkdir -p "$WS/$h/data"
  cat >"$WS/$h/luagent.lua" <<LUA
return { approver = "queue", approval_timeout_s = 60, audit = { sign = true },
         cluster = { postgres = "$PG_URL", node = "host-$h" } }
LUA
done
A="$WS/a" B="$WS/b" C="$WS/c"
cat >"$A/del.lua" <<'LUA'
local ok, err = pcall(tools.call, "fs.delete", { path = args.file })
print(ok and ("deleted " .. args.file) or ("refused: " .. err.message))
LUA
# A's first write makes the key; B gets a copy (every host signs with it).
echo 'tools.call("fs.write", { path = "seed.txt", content = "x" })' >"$A/seed.lua"
(cd "$A" && "$LUAGENT" run seed.lua) || fail "seed run"
cp "$A/.luagent/audit.key" "$B/.luagent/audit.key" 2>/dev/null ||
  { mkdir -p "$B/.luagent" && cp "$A/.luagent/audit.key" "$B/.luagent/"; } || fail "no audit.key on A"
start_a() {
  (cd "$A" && LUAGENT_TEST_APPROVAL_RECHECK_S=0.3 exec timeout 60 "$LUAGENT" run del.lua \
    --arg file="$1" </dev/null >"$WS/out.$2" 2>&1) &
  RUNPID=$!
  PIDS="$PIDS $RUNPID"
}
pending() {
  for _ in $(seq 1 300); do
    id=$(pg_sql "SELECT id FROM luagent_approvals WHERE status = 'pending' ORDER BY id LIMIT 1")
    [ -n "$id" ] && { echo "$id"; return 0; }
    sleep 0.1
  done
  return 1
}
for f in v1 v2 v3 v4 v5 chosen; do echo x >"$A/data/$f.txt"; done

# 1. forged approval
start_a v1.txt 1
id=$(pending) || fail "no pending request (1)"
pg_sql "UPDATE luagent_approvals SET status = 'approved', approved_hash = args_hash, decided_by = 'operator' WHERE id = $id" >/dev/null
wait $RUNPID
grep -q "^refused: .*approval $id is not signed with the workspace's audit key" "$WS/out.1" &&
  [ -e "$A/data/v1.txt" ] && pass "an approval written into the database is refused" ||
  fail "forged approval: $(cat "$WS/out.1")"

# 2. forged modification with arguments the writer chose
start_a v2.txt 2
id=$(pending) || fail "no pending request (2)"
h=$(python3 -c 'import hashlib;print(hashlib.blake2b(b"{\"path\":\"chosen.txt\"}",digest_size=32).hexdigest())')
pg_sql "UPDATE luagent_approvals SET status = 'modified', new_args = '{\"path\":\"chosen.txt\"}', approved_hash = '$h' WHERE id = $id" >/dev/null
wait $RUNPID
grep -q "^refused: .*not signed" "$WS/out.2" && [ -e "$A/data/chosen.txt" ] && [ -e "$A/data/v2.txt" ] &&
  pass "a modification written into the database is refused; the chosen file is kept" ||
  fail "forged modification: $(cat "$WS/out.2"); chosen.txt $([ -e "$A/data/chosen.txt" ] && echo kept || echo DELETED)"

# 3. B approves (signed): A proceeds
start_a v3.txt 3
id=$(pending) || fail "no pending request (3)"
expect_rc 0 "$LUAGENT" --workspace "$B" approvals approve "$id"
wait $RUNPID
grep -q "^deleted v3.txt" "$WS/out.3" && [ ! -e "$A/data/v3.txt" ] &&
  pass "a signed approval from host B releases the run on A" || fail "signed approval: $(cat "$WS/out.3")"
signed=$id

# 4. B's signed approval copied onto another request
start_a v3.txt 4
id=$(pending) || fail "no pending request (4)"
pg_sql "UPDATE luagent_approvals SET status = 'approved', approved_hash = args_hash, decision_sig = (SELECT decision_sig FROM luagent_approvals WHERE id = $signed) WHERE id = $id" >/dev/null
wait $RUNPID
grep -q "^refused: .*not signed" "$WS/out.4" && pass "a signature copied from another approval is refused" ||
  fail "copied signature: $(cat "$WS/out.4")"

# 5. B modifies (signed): A runs B's arguments
start_a v4.txt 5
id=$(pending) || fail "no pending request (5)"
expect_rc 0 "$LUAGENT" --workspace "$B" approvals approve "$id" --args '{"path":"v5.txt"}'
wait $RUNPID
[ -e "$A/data/v4.txt" ] && [ ! -e "$A/data/v5.txt" ] && pass "a signed modification from B runs B's arguments" ||
  fail "signed modification: $(cat "$WS/out.5")"

# 6. host C has another key: its approval is refused by A
echo y >"$A/data/v6.txt"
start_a v6.txt 6
id=$(pending) || fail "no pending request (6)"
expect_rc 0 "$LUAGENT" --workspace "$C" approvals approve "$id"
wait $RUNPID
grep -q "^refused: .*not signed with the workspace's audit key" "$WS/out.6" && [ -e "$A/data/v6.txt" ] &&
  pass "an approval signed with another key is refused" || fail "other key: $(cat "$WS/out.6")"

expect_rc 0 "$LUAGENT" --workspace "$A" audit verify && pass "the chain verifies on A"
expect_rc 0 "$LUAGENT" --workspace "$B" audit verify && pass "the chain verifies on B"
finish
