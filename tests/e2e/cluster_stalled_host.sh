#!/bin/bash
# e2e: a host that stalls inside an audit append does not stall the
# cluster. Host x is stopped (SIGSTOP) while its append transaction holds
# the luagent_audit_head row lock (the test stops it until pg_locks shows
# exactly that). Before, the server kept that session and its lock as long
# as the process stayed stopped, and every audited call on every other host
# waited on it (a write on host z ran into its 30 s deadline). Now the
# server ends a luagent session idle inside a transaction after 10 s: z's
# write goes through, x's unfinished append is rolled back, x resumed goes
# on (that one call denied at most), and the chain verifies.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/pg.sh"
pg_start
for h in x y z; do
  mkdir -p "$WS/$h/data"
  cat >"$WS/$h/luagent.lua" <<LUA
return { limits = { deadline_s = 120 }, cluster = { postgres = "$PG_URL", node = "host-$h" } }
LUA
done
cat >"$WS/loop.lua" <<'LUA'
local n = 0
for i = 1, 100000 do
  if pcall(tools.call, "fs.write", { path = "f.txt", content = tostring(i) }) then n = n + 1 end
  for _, e in ipairs(tools.call("fs.list", {})) do if e.name == "stop" then print("wrote " .. n) return end end
end
LUA
for h in x y; do
  cp "$WS/loop.lua" "$WS/$h/"
  # no `timeout` in between: the test stops luagent itself
  (cd "$WS/$h" && exec "$LUAGENT" run loop.lua >"$WS/o.$h" 2>&1) &
  PIDS="$PIDS $!"
done
XP=$(echo $PIDS | awk '{print $1}') YP=$(echo $PIDS | awk '{print $2}')
sleep 1
caught=""
for _ in $(seq 600); do
  kill -STOP "$XP"
  sleep 0.05
  n=$(pg_sql "SELECT count(*) FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid
    WHERE a.application_name = 'luagent:host-x' AND a.state = 'idle in transaction'
    AND l.relation = 'luagent_audit_head'::regclass")
  [ "$n" != 0 ] && { caught=1; break; }
  kill -CONT "$XP"
  sleep 0.02
done
[ -n "$caught" ] && pass "host x is stopped inside an append, holding the chain's lock" ||
  fail "never caught host x inside an append"
echo 'tools.call("fs.write", { path = "z.txt", content = "z" }) print("wrote")' >"$WS/z/z.lua"
t0=$(date +%s)
(cd "$WS/z" && timeout 60 "$LUAGENT" run z.lua >"$WS/o.z" 2>&1)
rc=$? t=$(($(date +%s) - t0))
[ $rc = 0 ] && [ $t -lt 25 ] && grep -q '^wrote' "$WS/o.z" &&
  pass "host z's write goes through while x is stopped (${t} s)" ||
  fail "host z's write: rc $rc after $t s: $(cat "$WS/o.z")"
kill -CONT "$XP"
sleep 1
for h in x y z; do touch "$WS/$h/data/stop"; done
wait "$XP"; wait "$YP"
grep -q '^wrote [1-9]' "$WS/o.x" && pass "host x, resumed, goes on writing" || fail "host x: $(tail -3 "$WS/o.x")"
grep -q '^wrote [1-9]' "$WS/o.y" || fail "host y: $(tail -3 "$WS/o.y")"
for h in x z; do expect_rc 0 "$LUAGENT" --workspace "$WS/$h" audit verify && pass "the chain verifies on $h"; done
finish
