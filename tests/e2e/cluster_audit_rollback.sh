#!/bin/bash
# e2e: a database writer cuts the rows a running host just appended (before
# they were anchored) and puts the older head back, its valid signature
# included (audit.sign on). Before, the host's next append found head and
# tip consistent, appended on top, and anchored the cut chain at exit:
# `audit verify` passed, the records of the cut calls gone without a trace.
# Now the host checks, under the head lock, that the last row it appended
# is still there as written: the next audited call is refused naming that
# row, and verify on the host reports the cut (the anchor at exit names the
# head this host really wrote).
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/pg.sh"
pg_start
A="$WS/a"
mkdir -p "$A/data"
cat >"$A/luagent.lua" <<LUA
return { audit = { sign = true }, cluster = { postgres = "$PG_URL", node = "host-a" } }
LUA
cat >"$A/s.lua" <<'LUA'
tools.call("fs.write", { path = "first.txt", content = "x" })
print("first") 
local function wait_for(name)
  for _ = 1, 600 do
    for _, e in ipairs(tools.call("fs.list", {})) do if e.name == name then return end end
    local t = os.clock() + 0.05 while os.clock() < t do end
  end
end
wait_for("go1")
tools.call("fs.write", { path = "evidence.txt", content = "the call to hide" })
print("evidence")
wait_for("go2")
local ok, err = pcall(tools.call, "fs.write", { path = "last.txt", content = "x" })
print(ok and "last" or ("last refused: " .. err.message))
LUA
(cd "$A" && exec timeout 60 "$LUAGENT" run s.lua >"$WS/o" 2>&1) & P=$!; PIDS="$PIDS $P"
wait_o() { for _ in $(seq 300); do grep -q "$1" "$WS/o" && return 0; sleep 0.1; done; return 1; }
wait_o first || fail "no first"
# the head after the first write: remember it (a DB writer sees it go by)
saved=$(pg_sql "SELECT seq || '|' || rows || '|' || hash || '|' || coalesce(sig, '') FROM luagent_audit_head")
IFS='|' read -r s r h g <<<"$saved"
touch "$A/data/go1"
wait_o evidence || fail "no evidence"
sleep 0.5
pg_sql "BEGIN; DELETE FROM luagent_audit WHERE seq > $s; UPDATE luagent_audit_head SET seq = $s, rows = $r, hash = '$h', sig = NULLIF('$g', ''); COMMIT" >/dev/null
touch "$A/data/go2"
wait $P
grep -q "^last refused: fs.write: denied (audit): .*row [0-9]*, which this host appended, is gone" "$WS/o" &&
  pass "the host's next audited call is refused, naming its row that is gone" || fail "after the cut: $(cat "$WS/o")"
[ ! -e "$A/data/last.txt" ] && pass "... and it did not run" || fail "last.txt written on top of a cut chain"
expect_rc 1 "$LUAGENT" --workspace "$A" audit verify && grep -q "rows were cut off the end" "$WS/.err" &&
  pass "verify on the host reports the cut" || fail "verify: $(cat "$WS/.out" "$WS/.err")"
finish
