#!/bin/bash
# e2e: reads fail closed too when the cluster database is down. A plain
# allowed read's row only queues (written after it ran, with the next
# flush); with the database gone the queue cannot drain. Before, reads ran
# on and after 4096 queued rows 2048 were dropped: reads that ran and were
# never on record. Now, once AUDIT_BUF_MAX (256) rows wait and cannot be
# written, the next read is refused naming the database, and when the
# database is back every read that ran is in the chain.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/pg.sh"
pg_start
H="$WS/h"
mkdir -p "$H/data"
cat >"$H/luagent.lua" <<LUA
return { cluster = { postgres = "$PG_URL", node = "host-h" } }
LUA
echo text >"$H/data/r.txt"
cat >"$H/steps.lua" <<'LUA'
tools.call("fs.write", { path = "w0.txt", content = "x" })
print("ready")
local function wait_for(name)
  for _ = 1, 1200 do
    local ok, l = pcall(tools.call, "fs.list", {})
    for _, e in ipairs(ok and l or {}) do if e.name == name then return end end
    local t = os.clock() + 0.05 while os.clock() < t do end
  end
  error("no " .. name)
end
wait_for("down")
local n, why = 0, ""
for i = 1, 5000 do
  local ok, err = pcall(tools.call, "fs.read", { path = "r.txt" })
  if ok then n = n + 1 else why = err.message end
end
print("ran " .. n)
print("refused: " .. why)
wait_for("up")
local ok, err = pcall(tools.call, "fs.write", { path = "w1.txt", content = "x" })
print(ok and "wrote w1" or ("w1 refused: " .. err.message))
LUA
(cd "$H" && exec timeout 120 "$LUAGENT" run steps.lua >"$WS/o" 2>"$WS/e") &
P=$!
PIDS="$PIDS $P"
for _ in $(seq 300); do grep -q ready "$WS/o" && break; sleep 0.1; done
grep -q ready "$WS/o" || fail "the run did not start: $(cat "$WS/o" "$WS/e")"
$PG_AS "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w stop >/dev/null || fail "cannot stop the database"
touch "$H/data/down"
for _ in $(seq 900); do grep -q "^refused" "$WS/o" && break; sleep 0.1; done
$PG_AS "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 30 start >/dev/null ||
  fail "cannot restart the database"
touch "$H/data/up"
wait $P
ran=$(sed -n 's/^ran //p' "$WS/o")
[ -n "$ran" ] && [ "$ran" -le 256 ] && pass "with the database down at most 256 reads run ($ran)" ||
  fail "reads that ran with the database down: ${ran:-?}: $(cat "$WS/o")"
grep -q "^refused: fs.read: denied (audit): cluster database 127.0.0.1:$PG_PORT/luagent" "$WS/o" &&
  pass "then reads are refused, naming the database" || fail "refusal: $(cat "$WS/o")"
grep -q "^wrote w1" "$WS/o" && pass "the database back: the run goes on" || fail "after: $(cat "$WS/o" "$WS/e")"
rec=$(pg_sql "SELECT count(*) FROM luagent_audit WHERE tool = 'fs.read'")
[ -n "$ran" ] && [ "$rec" = "$ran" ] && pass "every read that ran is on record ($rec)" ||
  fail "fs.read rows on record: $rec, reads that ran: ${ran:-?}"
grep -q dropping "$WS/e" && fail "rows were dropped: $(grep dropping "$WS/e")"
expect_rc 0 "$LUAGENT" --workspace "$H" audit verify && pass "the chain verifies"
finish
