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
