#!/bin/bash
# e2e: a fresh process on a host also notices a cluster chain changed
# below what the host vouched for (its anchor file), with audit.sign on.
#  - runs r1 and r2 on host A each write (and anchor at exit); a database
#    writer then deletes r2's rows and puts back r1's head with its valid
#    signature. Before, run r3 appended on top (head and tip consistent,
#    signature valid); now its write is refused, naming the row the host
#    anchored, and nothing is written
#  - the rows put back, the head's signature stripped (so that the next
#    host would sign whatever the table holds as "signing just began"):
#    a host that has seen a signed head refuses it
#  - the head restored as it was: writes go on, the chain verifies
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/pg.sh"
pg_start
A="$WS/a"
mkdir -p "$A/data"
cat >"$A/luagent.lua" <<LUA
return { audit = { sign = true }, cluster = { postgres = "$PG_URL", node = "host-a" } }
LUA
w() { echo "local ok, err = pcall(tools.call, 'fs.write', { path = '$1', content = 'x' }) print(ok and 'wrote' or ('refused: ' .. err.message))" >"$A/w.lua"; (cd "$A" && "$LUAGENT" run w.lua 2>&1); }
w r1.txt | grep -q '^wrote' || fail "r1"
h1=$(pg_sql "SELECT seq || '|' || rows || '|' || hash || '|' || sig FROM luagent_audit_head")
IFS='|' read -r s1 n1 hash1 sig1 <<<"$h1"
w r2.txt | grep -q '^wrote' || fail "r2"
pg_sql "CREATE TABLE saved AS SELECT * FROM luagent_audit WHERE seq > $s1;
        CREATE TABLE saved_head AS SELECT * FROM luagent_audit_head;
        DELETE FROM luagent_audit WHERE seq > $s1;
        UPDATE luagent_audit_head SET seq = $s1, rows = $n1, hash = '$hash1', sig = '$sig1'" >/dev/null
out=$(w r3.txt)
grep -q "^refused: fs.write: denied (audit): .*row [0-9]*, which this host anchored, is gone" <<<"$out" &&
  pass "a fresh run refuses to append to a chain cut below this host's anchor" || fail "r3: $out"
[ ! -e "$A/data/r3.txt" ] || fail "r3.txt written on a cut chain"
pg_sql "INSERT INTO luagent_audit SELECT * FROM saved;
        UPDATE luagent_audit_head h SET seq = s.seq, rows = s.rows, hash = s.hash, sig = NULL
        FROM saved_head s" >/dev/null
out=$(w r4.txt)
grep -q "^refused: .*not signed although this host has seen it signed" <<<"$out" &&
  pass "a head whose signature was stripped is refused by a host that has seen it signed" ||
  fail "r4: $out"
[ ! -e "$A/data/r4.txt" ] || fail "r4.txt written under a stripped head"
pg_sql "UPDATE luagent_audit_head h SET sig = s.sig FROM saved_head s" >/dev/null
w r5.txt | grep -q '^wrote' && pass "the head restored: writes go on" || fail "r5"
expect_rc 0 "$LUAGENT" --workspace "$A" audit verify && pass "the chain verifies"
finish
