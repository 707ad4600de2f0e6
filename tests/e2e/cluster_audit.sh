#!/bin/bash
# e2e: one audit chain per workspace in PostgreSQL, appended by two hosts.
#  - calls from both hosts land in one chain; `audit verify` passes on both;
#    `audit tail` on B shows A's rows with their node
#  - six processes (three per host) appending at once keep the chain linear:
#    seq 1..N without a gap, every row's prev_hash the row before's hash
#    (no fork), and the head counts every row
#  - tampering through psql is caught and names the seq: an UPDATE of a row,
#    a DELETE, rows cut off the end (head left alone, then head rewritten
#    to match: this host's anchor file catches it), a forged head; a host
#    refuses to append after a forged head (its calls are denied)
#  - the local SQLite chain is untouched (`audit verify --local`)
#  - audit.sign: two hosts sharing audit.key sign one head that verifies; a
#    host with another key is refused; a forged signature is caught
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/pg.sh"
pg_start

A="$WS/a" B="$WS/b"
for h in a b; do
  mkdir -p "$WS/$h/data"
  cat >"$WS/$h/luagent.lua" <<LUA
return { cluster = { postgres = "$PG_URL", node = "host-$h" } }
LUA
  cat >"$WS/$h/calls.lua" <<'LUA'
-- args.n writes (two rows each: decision, execution) and reads (one row each)
for i = 1, tonumber(args.n) do
  tools.call("fs.write", { path = "f" .. args.tag .. ".txt", content = tostring(i) })
  tools.call("fs.read", { path = "f" .. args.tag .. ".txt" })
end
print("done " .. args.tag)
LUA
done
run_on() { (cd "$1" && "$LUAGENT" run calls.lua --arg n="$2" --arg tag="$3") >>"$WS/runs.log" 2>&1; }

run_on "$A" 3 a1 || fail "calls on A: $(tail -3 "$WS/runs.log")"
run_on "$B" 3 b1 || fail "calls on B: $(tail -3 "$WS/runs.log")"
expect_rc 0 "$LUAGENT" --workspace "$A" audit verify && out_has "cluster audit chain intact: 18 rows" &&
  pass "calls from both hosts in one chain that verifies on A"
expect_rc 0 "$LUAGENT" --workspace "$B" audit verify && pass "... and on B"
expect_rc 0 "$LUAGENT" --workspace "$B" audit tail -n 20
out_has "node=host-a" && out_has "node=host-b" && pass "audit tail on B shows both hosts' rows"
expect_rc 0 "$LUAGENT" --workspace "$A" audit verify --local && out_has "audit chain intact: 0 rows" &&
  pass "the local SQLite chain got nothing"

# Concurrent appends from six processes on two hosts.
pids=""
for k in 1 2 3; do
  run_on "$A" 20 "ca$k" & pids="$pids $!"
  run_on "$B" 20 "cb$k" & pids="$pids $!"
done
for p in $pids; do wait "$p" || fail "a concurrent run failed: $(tail -5 "$WS/runs.log")"; done
n=$(pg_sql "SELECT count(*) FROM luagent_audit")
[ "$n" = $((18 + 6 * 60)) ] && pass "every concurrent call is on record ($n rows)" || fail "rows: $n"
[ "$(pg_sql "SELECT min(seq) || ',' || max(seq) || ',' || count(DISTINCT seq) FROM luagent_audit")" = "1,$n,$n" ] &&
  pass "seq runs 1..$n without a gap" || fail "seq range: $(pg_sql "SELECT min(seq), max(seq) FROM luagent_audit")"
forks=$(pg_sql "SELECT count(*) FROM luagent_audit a JOIN luagent_audit b ON b.seq = a.seq + 1 WHERE b.prev_hash <> a.hash")
dups=$(pg_sql "SELECT count(*) - count(DISTINCT prev_hash) FROM luagent_audit")
[ "$forks" = 0 ] && [ "$dups" = 0 ] && pass "the chain is linear: no fork, no two rows after one" ||
  fail "forks $forks, shared prev_hash $dups"
[ "$(pg_sql "SELECT seq || ',' || rows FROM luagent_audit_head")" = "$n,$n" ] && pass "the head counts every row" ||
  fail "head: $(pg_sql "SELECT seq, rows FROM luagent_audit_head")"
expect_rc 0 "$LUAGENT" --workspace "$B" audit verify && pass "the concurrently written chain verifies"

# A last run on A alone, so A's anchor file names the chain's end.
run_on "$A" 1 last || fail "last run"
N=$(pg_sql "SELECT max(seq) FROM luagent_audit")
tail -1 "$A/.luagent/cluster-audit.anchor" | grep -q "^seq=$N " && pass "A anchored the head (seq $N)" ||
  fail "anchor file: $(tail -2 "$A/.luagent/cluster-audit.anchor" 2>&1)"

verify_fails() { # verify_fails WORKSPACE TEXT WHAT
  expect_rc 1 "$LUAGENT" --workspace "$1" audit verify && err_has "$2" && pass "$3"
}

# 1. an edited row
K=20
pg_sql "CREATE TABLE saved AS SELECT * FROM luagent_audit WHERE seq = $K" >/dev/null
pg_sql "UPDATE luagent_audit SET detail = 'nothing happened' WHERE seq = $K" >/dev/null
verify_fails "$B" "broken at row $K: row $K: contents do not match its hash" "an UPDATE of row $K is caught, naming it"
pg_sql "UPDATE luagent_audit SET caller_name = 'someone else' WHERE seq = $K" >/dev/null
verify_fails "$B" "broken at row $K" "... so is an edit of another column"
pg_sql "UPDATE luagent_audit a SET detail = s.detail, caller_name = s.caller_name FROM saved s WHERE a.seq = s.seq" >/dev/null
expect_rc 0 "$LUAGENT" --workspace "$B" audit verify || fail "restored row still fails: $(cat "$WS/.err")"
pg_sql "UPDATE luagent_audit SET node = CASE WHEN node = 'host-a' THEN 'host-b' ELSE 'host-a' END WHERE seq = $K" >/dev/null
verify_fails "$B" "broken at row $K" "a row moved to another host (node edited) is caught"
pg_sql "UPDATE luagent_audit a SET node = s.node FROM saved s WHERE a.seq = s.seq" >/dev/null

# 2. a deleted row
pg_sql "DELETE FROM luagent_audit WHERE seq = $K" >/dev/null
verify_fails "$A" "broken at row $K: row $K is missing (deleted)" "a DELETE of row $K is caught, naming it"
pg_sql "INSERT INTO luagent_audit SELECT * FROM saved" >/dev/null
expect_rc 0 "$LUAGENT" --workspace "$A" audit verify || fail "restored chain fails: $(cat "$WS/.err")"

# 3. rows cut off the end: the head catches it; with the head rewritten to
# match, A's anchor file does
pg_sql "CREATE TABLE tail AS SELECT * FROM luagent_audit WHERE seq > $((N - 3)); CREATE TABLE head AS SELECT * FROM luagent_audit_head" >/dev/null
pg_sql "DELETE FROM luagent_audit WHERE seq > $((N - 3))" >/dev/null
verify_fails "$A" "the head says the chain ends at row $N but the last row is $((N - 3))" \
  "rows cut off the end are caught (the head names seq $N)"
pg_sql "UPDATE luagent_audit_head SET seq = $((N - 3)), rows = $((N - 3)), hash = (SELECT hash FROM luagent_audit WHERE seq = $((N - 3)))" >/dev/null
verify_fails "$A" "broken at row $((N - 2)): row $((N - 2)) is missing: the anchor file (line" \
  "... and with the head rewritten to match, A's anchor file names the missing seq"
pg_sql "INSERT INTO luagent_audit SELECT * FROM tail; UPDATE luagent_audit_head h SET seq = s.seq, rows = s.rows, hash = s.hash FROM head s" >/dev/null
expect_rc 0 "$LUAGENT" --workspace "$A" audit verify || fail "restored tail fails: $(cat "$WS/.err")"

# 4. a forged head
pg_sql "UPDATE luagent_audit_head SET hash = repeat('ab', 32)" >/dev/null
verify_fails "$B" "row $N: hash differs from the head record" "a forged head hash is caught"
(cd "$B" && "$LUAGENT" run calls.lua --arg n=1 --arg tag=x) >"$WS/forged.out" 2>&1
grep -q "denied (audit)" "$WS/forged.out" && grep -q "does not match the chain's last row" "$WS/forged.out" &&
  pass "after a forged head, audited calls are refused" || fail "call after a forged head: $(cat "$WS/forged.out")"
[ ! -e "$B/data/fx.txt" ] && pass "... and the refused write did not happen" || fail "fx.txt written"
pg_sql "UPDATE luagent_audit_head SET seq = $((N + 5)), rows = $((N + 5)), hash = (SELECT hash FROM head)" >/dev/null
verify_fails "$B" "the head says the chain ends at row $((N + 5)) but the last row is $N" "a forged head seq is caught"
pg_sql "UPDATE luagent_audit_head h SET seq = s.seq, rows = s.rows, hash = s.hash FROM head s" >/dev/null
expect_rc 0 "$LUAGENT" --workspace "$B" audit verify && pass "the restored chain verifies again"

# 5. a signed head (audit.sign): every host signs with the same audit.key
pg_sql "CREATE SCHEMA signed" >/dev/null
SURL="$PG_URL?options=-csearch_path%3Dsigned"
for h in s1 s2 s3; do
  mkdir -p "$WS/$h/data"
  printf 'return { audit = { sign = true }, cluster = { postgres = "%s", node = "%s" } }\n' \
    "$SURL" "$h" >"$WS/$h/luagent.lua"
  cp "$A/calls.lua" "$WS/$h/"
done
run_on "$WS/s1" 1 s1 || fail "signed run on s1: $(tail -3 "$WS/runs.log")"
mkdir -p "$WS/s2/.luagent"
cp -p "$WS/s1/.luagent/audit.key" "$WS/s2/.luagent/audit.key"
run_on "$WS/s2" 1 s2 || fail "signed run on s2 (same key): $(tail -3 "$WS/runs.log")"
expect_rc 0 "$LUAGENT" --workspace "$WS/s1" audit verify && out_has "head signature valid" &&
  pass "a head signed by two hosts sharing audit.key verifies"
(cd "$WS/s3" && "$LUAGENT" run calls.lua --arg n=1 --arg tag=s3) >"$WS/s3.out" 2>&1
grep -q "copy it from another host" "$WS/s3.out" && [ ! -e "$WS/s3/data/fs3.txt" ] &&
  [ ! -e "$WS/s3/.luagent/audit.key" ] &&
  pass "a host without the key is refused and makes no key of its own" || fail "s3: $(cat "$WS/s3.out")"
# another key: made by a single-host workspace that signs
mkdir -p "$WS/k/data"
printf 'return { audit = { sign = true } }\n' >"$WS/k/luagent.lua"
cp "$A/calls.lua" "$WS/k/"
run_on "$WS/k" 1 k || fail "key maker"
mkdir -p "$WS/s3/.luagent"
cp -p "$WS/k/.luagent/audit.key" "$WS/s3/.luagent/audit.key"
(cd "$WS/s3" && "$LUAGENT" run calls.lua --arg n=1 --arg tag=s3) >"$WS/s3.out" 2>&1
grep -q "signed with another key" "$WS/s3.out" && [ ! -e "$WS/s3/data/fs3.txt" ] &&
  pass "a host with another key is refused (its write did not happen)" || fail "s3: $(cat "$WS/s3.out")"
pg_sql "UPDATE signed.luagent_audit_head SET sig = repeat('00', 64)" >/dev/null
expect_rc 1 "$LUAGENT" --workspace "$WS/s2" audit verify && err_has "signature is invalid" &&
  pass "a forged head signature is caught"
finish
