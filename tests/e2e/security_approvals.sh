#!/bin/bash
# e2e: the approval queue, decided from a second process.
#  - approved: the waiting run continues and the call runs
#  - denied with a reason: tools.call raises with that reason
#  - modified arguments that violate the schema are rejected
#  - modified valid arguments run exactly as modified (not as requested)
set -u
BIN=${1:?usage: $0 path/to/luagent}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
W=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$W"; }
trap cleanup EXIT
# On failure, what the runs printed (a run that died early explains a
# request that never appeared).
fail() {
  echo "FAIL: $*" >&2
  for f in "$W"/out.*; do [ -e "$f" ] && { echo "--- $f" >&2; cat "$f" >&2; }; done
  exit 1
}

mkdir -p "$W/data"
cat > "$W/luagent.lua" <<'LUA'
return {
  approver = "queue",
  approval_timeout_s = 30,
  limits = { deadline_s = 60 },
}
LUA
cat > "$W/del.lua" <<'LUA'
local ok, err = pcall(tools.call, "fs.delete", { path = args.file })
if ok then print("deleted " .. args.file) else print("refused: " .. err.code .. ": " .. err.message) end
LUA

# Waits for the one pending approval and prints its id.
pending_id() {
  for _ in $(seq 1 150); do
    id=$(cd "$W" && "$BIN" approvals list --json | python3 -c '
import json, sys
rows = [r for r in json.load(sys.stdin) if r["status"] == "pending"]
print(int(rows[0]["id"]) if rows else "")')
    [ -n "$id" ] && { echo "$id"; return 0; }
    sleep 0.1
  done
  return 1
}

# Starts del.lua for a file in the background; output goes to $W/out.N.
start() {
  (cd "$W" && exec timeout 60 "$BIN" run del.lua --arg file="$1" </dev/null >"$W/out.$2" 2>&1) &
  PIDS+=($!)
  RUNPID=$!
}

# 1. approve
echo a > "$W/data/a.txt"
start a.txt 1
id=$(pending_id) || fail "no pending approval appeared"
listing=$(cd "$W" && "$BIN" approvals list)
grep -q 'fs.delete' <<<"$listing" && grep -q '"path":"a.txt"' <<<"$listing" ||
  fail "approvals list does not show the tool and exact args: $listing"
(cd "$W" && "$BIN" approvals approve "$id") || fail "approve failed"
wait $RUNPID
grep -q '^deleted a.txt' "$W/out.1" || { cat "$W/out.1"; fail "approved run did not continue"; }
[ ! -e "$W/data/a.txt" ] || fail "a.txt still exists after an approved delete"
(cd "$W" && "$BIN" approvals approve "$id") && fail "approving twice succeeded"

# 2. deny with a reason
echo b > "$W/data/b.txt"
start b.txt 2
id=$(pending_id) || fail "no pending approval (deny case)"
(cd "$W" && "$BIN" approvals deny "$id" --reason "not on a friday") || fail "deny failed"
wait $RUNPID
grep -q '^refused: denied: .*not on a friday' "$W/out.2" || { cat "$W/out.2"; fail "denial reason not raised"; }
[ -e "$W/data/b.txt" ] || fail "b.txt deleted despite the denial"

# 3. modified arguments that violate the schema
start b.txt 3
id=$(pending_id) || fail "no pending approval (bad modify case)"
(cd "$W" && "$BIN" approvals approve "$id" --args '{"path": 12}') || fail "approve --args failed"
wait $RUNPID
grep -q '^refused: denied: .*modified arguments rejected' "$W/out.3" ||
  { cat "$W/out.3"; fail "schema-violating modified args were not rejected"; }
[ -e "$W/data/b.txt" ] || fail "b.txt deleted by rejected modified args"

# 4. modified valid arguments: what runs is what was approved
echo c > "$W/data/c.txt"
start b.txt 4
id=$(pending_id) || fail "no pending approval (modify case)"
(cd "$W" && "$BIN" approvals approve "$id" --args '{"path": "c.txt"}') || fail "approve --args failed"
wait $RUNPID
grep -q '^deleted b.txt' "$W/out.4" || { cat "$W/out.4"; fail "modified run did not finish"; }
[ -e "$W/data/b.txt" ] || fail "the original arguments ran instead of the approved ones"
[ ! -e "$W/data/c.txt" ] || fail "the approved (modified) arguments did not run"

# 5. no decision: the request times out as a denial
cat > "$W/luagent.lua" <<'LUA'
return { approver = "queue", approval_timeout_s = 1 }
LUA
start b.txt 5
wait $RUNPID
grep -q '^refused: denied: .*timed out' "$W/out.5" || { cat "$W/out.5"; fail "no timeout denial"; }

# Everything is in the audit chain, which still verifies.
(cd "$W" && "$BIN" audit verify) || fail "audit verify failed"
tail=$(cd "$W" && "$BIN" audit tail -n 100)
grep -q 'decision=approved' <<<"$tail" || fail "no approved row in the audit"
grep -q 'decision=approval_denied' <<<"$tail" || fail "no CLI denial row in the audit"
echo "PASS security_approvals"
