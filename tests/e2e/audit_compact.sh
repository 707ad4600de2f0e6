# Issue 18 item 3 (audit part): old audit rows can be pruned under a
# checkpoint row that commits to their hashes, and the chain still verifies;
# cutting its beginning any other way is caught.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
printf 'for i = 1, 50 do tools.call("fs.write", { path = "a.txt", content = "x" }) end\n' > "$WS/w.lua"
expect_rc 0 "$LUAGENT" run w.lua
expect_rc 0 "$LUAGENT" audit compact --keep 10 && out_has "pruned 90 audit row(s)" && pass "compact prunes all but the last 10"
expect_rc 0 "$LUAGENT" audit verify --strict && out_has "intact: 11 rows" && out_has "rows 1..90 compacted" && pass "the compacted chain verifies"
expect_rc 0 "$LUAGENT" run w.lua
expect_rc 0 "$LUAGENT" audit compact --keep 5 && expect_rc 0 "$LUAGENT" audit verify --strict && pass "twice, with rows in between"
cp "$WS/.luagent/state.db" "$WS/good.db"
# 1. rows cut from the beginning without a checkpoint
python3 - "$WS/.luagent/state.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1]); lo = c.execute("SELECT min(seq) FROM audit").fetchone()[0]
c.execute("DELETE FROM audit WHERE seq < ?", (lo + 3,)); c.commit()
PY
expect_rc 1 "$LUAGENT" audit verify && err_has "is missing" && pass "a cut beginning without a checkpoint is caught"
# 2. a checkpoint edited to claim more pruned rows
cp "$WS/good.db" "$WS/.luagent/state.db"
python3 - "$WS/.luagent/state.db" <<'PY'
import sqlite3, sys, re
c = sqlite3.connect(sys.argv[1])
seq, d = c.execute("SELECT seq, detail FROM audit WHERE decision='checkpoint' ORDER BY seq DESC").fetchone()
c.execute("UPDATE audit SET detail=? WHERE seq=?", (re.sub(r"to=(\d+)", lambda m: "to=%d" % (int(m.group(1)) + 2), d), seq))
lo = c.execute("SELECT min(seq) FROM audit").fetchone()[0]
c.execute("DELETE FROM audit WHERE seq < ?", (lo + 2,)); c.commit()
PY
expect_rc 1 "$LUAGENT" audit verify && pass "an edited checkpoint is caught: $(head -c 150 "$WS/.err")"
# 2b. a checkpoint written into state.db by someone else (red team 2): the
# row chains and hashes fine, but the anchor file never witnessed it
cp "$WS/good.db" "$WS/.luagent/state.db"
python3 - "$WS/.luagent/state.db" <<'PY'
import sqlite3, struct, hashlib, sys, time
c = sqlite3.connect(sys.argv[1])
last_seq, last_hash = c.execute("select seq, hash from audit order by seq desc limit 1").fetchone()
K = last_seq - 2
hK = c.execute("select hash from audit where seq=?", (K,)).fetchone()[0]
def fr(s): return b"N" if s is None else b"S" + struct.pack(">Q", len(s.encode())) + s.encode()
ts = time.time(); seq = last_seq + 1
detail = "checkpoint from=1 to=%d prev=%s last=%s digest=%s" % (K, "0" * 64, hK, "ab" * 32)
f = [str(seq), struct.pack(">d", ts).hex(), None, None, None, None, None, "checkpoint", "audit compact", None, None, None, detail]
h = hashlib.blake2b(fr(last_hash) + b"".join(fr(x) for x in f), digest_size=32, key=b"luagent-audit-v1").hexdigest()
c.execute("insert into audit (seq, ts, decision, decided_by, detail, prev_hash, hash) values (?,?,?,?,?,?,?)", (seq, ts, "checkpoint", "audit compact", detail, last_hash, h))
c.execute("delete from audit where seq <= ?", (K,))
c.execute("update audit_head set seq=?, rows=?, hash=?, sig=NULL", (seq, seq, h))
c.commit()
PY
expect_rc 0 "$LUAGENT" run w.lua
expect_rc 1 "$LUAGENT" audit verify && err_has "is not in the anchor file" && pass "a forged checkpoint hides nothing"

# 3. the refusal to compact a broken chain
cp "$WS/good.db" "$WS/.luagent/state.db"
python3 - "$WS/.luagent/state.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1]); hi = c.execute("SELECT max(seq) FROM audit").fetchone()[0]
c.execute("UPDATE audit SET detail='edited' WHERE seq=?", (hi - 1,)); c.commit()
PY
expect_rc 1 "$LUAGENT" audit compact --keep 1 && err_has "does not verify" && pass "a broken chain is not compacted (the evidence stays)"
expect_rc 2 "$LUAGENT" audit compact --keep 0 && pass "--keep 0 is refused"
finish
