# Red team, issue 10 item 10: attacks on the audit chain that once passed.
#  - a number column edited into text ("<same number> approved-by-root") kept
#    its row hash;
#  - with the signing key deleted (never read), a chain rewritten in full was
#    re-signed by the next process with a brand-new key. A key pinned with
#    audit.public_key in luagent.lua stops that: no new key is made, and
#    verify needs no key file.
. "$(dirname "$0")/lib/common.sh"
printf 'for i = 1, 5 do tools.call("fs.write", { path = "f" .. i, content = "x" }) end\n' > "$WS/w.lua"
printf 'tools.call("fs.write", { path = "z", content = "x" })\n' > "$WS/z.lua"

# --- typed columns ---
expect_rc 0 "$LUAGENT" run w.lua
python3 - "$WS/.luagent/state.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
ts, dur = c.execute("select ts, duration_ms from audit where seq=2").fetchone()
c.execute("update audit set ts=?, duration_ms=? where seq=2", (repr(ts) + " approved-by-root", repr(dur) + " (operator approved)"))
c.commit()
PY
expect_rc 1 "$LUAGENT" audit verify && err_has "row 2: contents do not match its hash" && pass "a number column holding text fails its row"

# --- the pinned key ---
rm -rf "$WS/.luagent"
printf 'return { audit = { sign = true } }\n' > "$WS/luagent.lua"
expect_rc 0 "$LUAGENT" run w.lua
expect_rc 0 "$LUAGENT" audit key && K=$(cat "$WS/.out") && pass "audit key prints the public key ($K)"
printf 'return { audit = { sign = true, public_key = "%s" } }\n' "$K" > "$WS/luagent.lua"
expect_rc 0 "$LUAGENT" audit verify && out_has "head signature valid" && pass "the pinned key verifies"
cp "$WS/.luagent/audit.key" "$WS/key.bak"
rm "$WS/.luagent/audit.key"
expect_rc 0 "$LUAGENT" audit verify && pass "verify needs no key file with a pinned key"
# rewrite the whole chain (every tool becomes time.now), head unsigned
python3 - "$WS/.luagent/state.db" <<'PY'
import sqlite3, hashlib, struct, sys
COLS = ["seq","ts","run_id","caller_kind","caller_name","tool","args_hash","decision","decided_by","approver","status","duration_ms","detail"]
def frame(v):
    if v is None: return b"N"
    b = v.encode(); return b"S" + struct.pack(">Q", len(b)) + b
def text(c, v):
    if v is None: return None
    if c == "seq": return str(int(v))
    if c in ("ts", "duration_ms"): return struct.pack(">d", float(v)).hex()
    return str(v)
db = sqlite3.connect(sys.argv[1])
prev = "0" * 64
for r in db.execute("select " + ",".join(COLS) + " from audit order by seq").fetchall():
    r = list(r); r[5] = "time.now"
    h = hashlib.blake2b(frame(prev) + b"".join(frame(text(c, v)) for c, v in zip(COLS, r)), digest_size=32, key=b"luagent-audit-v1").hexdigest()
    db.execute("update audit set tool=?, prev_hash=?, hash=? where seq=?", (r[5], prev, h, r[0])); prev = h
db.execute("update audit_head set hash=?, sig=NULL", (prev,)); db.commit()
PY
rm -f "$WS/.luagent/audit.anchor"
expect_rc 1 "$LUAGENT" run z.lua && err_has "audit signing key" && err_has "restore the key" && pass "no new key is made for a pinned chain"
expect_rc 1 "$LUAGENT" audit verify && err_has "not signed" && pass "the rewritten chain still fails verify"
# a different key in the file is refused too
rm -rf "$WS/other" && mkdir -p "$WS/other" && printf 'return { audit = { sign = true } }\n' > "$WS/other/luagent.lua"
(cd "$WS/other" && "$LUAGENT" run ../z.lua >/dev/null 2>&1)
cp "$WS/other/.luagent/audit.key" "$WS/.luagent/audit.key"
expect_rc 1 "$LUAGENT" run z.lua && err_has "not the key luagent.lua pins" && pass "a replaced key is refused"
printf 'return { audit = { sign = true, public_key = "abc" } }\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" run z.lua && err_has "public_key must be the 64 hex digits" && pass "a malformed pin is a config error"
finish
