#!/bin/bash
# e2e: the audit chain. `audit verify` passes on an untouched chain and
# fails, naming the first bad row, after an edit, a delete or a reorder made
# with the sqlite3 CLI; with audit = { sign = true } a consistent rewrite of
# the whole table is caught by the head signature.
set -u
BIN=${1:?usage: $0 path/to/luagent}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
command -v sqlite3 >/dev/null || { echo "SKIP: sqlite3 CLI not installed"; exit 0; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
DB="$W/.luagent/state.db"

# 5 reads (one row each: decision and execution) and one high-impact call
# denied without a terminal (escalate + deny): 7 rows.
cat > "$W/t.lua" <<'LUA'
for i = 1, 5 do tools.call("echo", { i = i }) end
pcall(tools.call, "fs.delete", { path = "nothing" })
LUA
(cd "$W" && "$BIN" run t.lua </dev/null >/dev/null 2>&1) || fail "script failed"
out=$(cd "$W" && "$BIN" audit verify) || fail "verify failed on an untouched chain"
grep -Eq 'intact: 7 rows' <<<"$out" || fail "unexpected verify output: $out"
json=$(cd "$W" && "$BIN" audit verify --json)
grep -Eq '"intact":[[:space:]]*true' <<<"$json" || fail "verify --json: $json"
n=$(cd "$W" && "$BIN" audit tail -n 3 | wc -l)
[ "$n" -eq 3 ] || fail "audit tail -n 3 printed $n lines"
(cd "$W" && "$BIN" audit tail --json -n 2) | python3 -c 'import json,sys; r=json.load(sys.stdin); assert len(r)==2 and r[1]["seq"]==7, r' ||
  fail "audit tail --json"

cp "$DB" "$W/pristine.db"
restore() { rm -f "$DB-wal" "$DB-shm"; cp "$W/pristine.db" "$DB"; }
expect_bad() { # $1 = row, $2 = what
  out=$(cd "$W" && "$BIN" audit verify 2>&1) && fail "verify passed after $2"
  grep -q "row $1" <<<"$out" || fail "verify after $2 does not name row $1: $out"
  echo "ok: $2 -> $out"
}

# An edited row.
sqlite3 "$DB" "UPDATE audit SET decision = 'allow' WHERE seq = 6"
expect_bad 6 "editing row 6"
restore
# An edited field that verify does not print (the args hash).
sqlite3 "$DB" "UPDATE audit SET args_hash = 'x' || substr(args_hash, 2) WHERE seq = 4"
expect_bad 4 "editing row 4's args hash"
restore
# A deleted row in the middle.
sqlite3 "$DB" "DELETE FROM audit WHERE seq = 5"
expect_bad 5 "deleting row 5"
restore
# Two rows swapped.
sqlite3 "$DB" "UPDATE audit SET seq = 1000 WHERE seq = 3; UPDATE audit SET seq = 3 WHERE seq = 5; UPDATE audit SET seq = 5 WHERE seq = 1000"
expect_bad 3 "reordering rows 3 and 5"
restore
# The last row cut off.
sqlite3 "$DB" "DELETE FROM audit WHERE seq = 7"
expect_bad 7 "deleting the last row"
restore
(cd "$W" && "$BIN" audit verify >/dev/null) || fail "restored chain does not verify"

# Signed head: a rewrite that keeps the chain consistent is still caught.
cat > "$W/luagent.lua" <<'LUA'
return { audit = { sign = true } }
LUA
(cd "$W" && "$BIN" run t.lua </dev/null >/dev/null 2>&1) || fail "script failed (signed)"
[ "$(stat -c %a "$W/.luagent/audit.key")" = 600 ] || fail "audit.key is not 0600"
out=$(cd "$W" && "$BIN" audit verify) || fail "signed verify failed: $out"
grep -q 'head signature valid' <<<"$out" || fail "no signature check: $out"
sqlite3 "$DB" "DELETE FROM audit WHERE seq = 14; UPDATE audit_head SET seq = 13, rows = 13, hash = (SELECT hash FROM audit WHERE seq = 13)"
out=$(cd "$W" && "$BIN" audit verify 2>&1) && fail "verify passed after a consistent truncation with signing on"
grep -q 'signature is invalid' <<<"$out" || fail "unexpected: $out"
echo "PASS security_audit"
