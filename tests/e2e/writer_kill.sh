#!/bin/bash
# e2e: the store writer (src/store/writer.c) against kill -9. Rows and
# events are written by a thread of their own; what the pipeline and the
# journal promise must still be on disk when they say so:
#  1. a script makes 40 plain reads (their rows only queue), then a call
#     that escalates and is denied (no terminal): once that call has
#     returned, kill -9. Its rows and every read before it are in the
#     chain, in order, and `audit verify` passes;
#  2. the same with a write the rules allow: its decision row is written
#     before it runs, with the reads before it; and with an escalated write
#     an operator approves from another process (`approvals approve`): its
#     escalation, approval and execution rows are there once it returned;
#  3. an `ask` killed while a slow tool the model asked for runs: the run
#     is `interrupted`, and its events up to the last non-streamed one
#     (the turn's turn_complete) are there, seq 1.. without a gap.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
MOCK="${LUAGENT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/mock_llm.py"
mkdir -p "$WS/data"
echo text >"$WS/data/r.txt"

kill_after() { # SCRIPT MARKER: runs SCRIPT, kill -9 as soon as MARKER is printed
  : >"$WS/k.out"
  (cd "$WS" && exec "$LUAGENT" --workspace "$WS" run "$1" >"$WS/k.out" 2>"$WS/k.err") &
  local p=$!
  local i=0
  while ! grep -q "^$2" "$WS/k.out" 2>/dev/null; do
    i=$((i + 1))
    [ "$i" -gt 4000 ] && break
    kill -0 "$p" 2>/dev/null || break
  done
  kill -9 "$p" 2>/dev/null
  wait "$p" 2>/dev/null
  grep -q "^$2" "$WS/k.out" || fail "$1 never printed $2: $(cat "$WS/k.out" "$WS/k.err")"
}

# --- 1. an escalated call ---
cat >"$WS/luagent.lua" <<'LUA'
return { rules = { { tool = "fs.write", action = "escalate", reason = "writes need a person" } } }
LUA
cat >"$WS/esc.lua" <<'LUA'
for i = 1, 40 do tools.call("fs.read", { path = "r.txt" }) end
local ok, err = pcall(tools.call, "fs.write", { path = "w.txt", content = "x" })
print("returned " .. tostring(ok) .. " " .. tostring(err and err.code))
io.stdout:flush()
while true do end
LUA
kill_after esc.lua "returned false denied"
reads=$(q "SELECT count(*) FROM audit WHERE tool='fs.read' AND decision='allow' AND status='ok'")
[ "$reads" = 40 ] && pass "kill -9 after an escalated call: all 40 reads before it are in the chain" ||
  fail "reads on record: $reads of 40"
esc=$(q "SELECT decision || ':' || decided_by FROM audit WHERE tool='fs.write' ORDER BY seq" | tr '\n' ' ')
[ "$esc" = "escalate:rule 1 deny:approver:auto " ] && pass "its escalation and its denial are in the chain" ||
  fail "fs.write rows: '$esc'"
after=$(q "SELECT count(*) FROM audit WHERE tool='fs.read' AND seq > (SELECT min(seq) FROM audit WHERE tool='fs.write')")
[ "$after" = 0 ] && pass "every read is before the escalation" || fail "$after reads after it"
expect_rc 0 "$LUAGENT" --workspace "$WS" audit verify && pass "audit verify passes" || true

# --- 2. an allowed write ---
cat >"$WS/luagent.lua" <<'LUA'
return {}
LUA
cat >"$WS/wr.lua" <<'LUA'
for i = 1, 30 do tools.call("fs.read", { path = "r.txt" }) end
tools.call("fs.write", { path = "w2.txt", content = "y" })
print("wrote")
io.stdout:flush()
while true do end
LUA
kill_after wr.lua wrote
reads=$(q "SELECT count(*) FROM audit WHERE tool='fs.read' AND seq < (SELECT min(seq) FROM audit WHERE tool='fs.write' AND decision='allow')")
[ "$reads" = 70 ] && pass "kill -9 after an allowed write: its reads are in the chain before it" ||
  fail "reads before the write: $reads of 70"
w=$(q "SELECT count(*) FROM audit WHERE tool='fs.write' AND decision='allow'")
[ "$w" = 1 ] && pass "the write's decision is on record" || fail "allow rows of fs.write: $w"
expect_rc 0 "$LUAGENT" --workspace "$WS" audit verify && pass "audit verify passes" || true

# --- 2b. an escalated call an operator approves from another process ---
cat >"$WS/luagent.lua" <<'LUA'
return { approver = "queue", approval_timeout_s = 60, limits = { deadline_s = 120 },
         rules = { { tool = "fs.write", action = "escalate", reason = "writes need a person" } } }
LUA
cat >"$WS/appr.lua" <<'LUA'
for i = 1, 25 do tools.call("fs.read", { path = "r.txt" }) end
tools.call("fs.write", { path = "w3.txt", content = "z" })
print("approved-returned")
io.stdout:flush()
while true do end
LUA
: >"$WS/k.out"
(cd "$WS" && exec "$LUAGENT" --workspace "$WS" run appr.lua >"$WS/k.out" 2>"$WS/k.err") &
P=$!
PIDS="$PIDS $P"
id=""
for _ in $(seq 1 200); do
  id=$(cd "$WS" && "$LUAGENT" --workspace "$WS" approvals list --json 2>/dev/null | python3 -c '
import json, sys
rows = [r for r in json.load(sys.stdin) if r["status"] == "pending"]
print(int(rows[0]["id"]) if rows else "")')
  [ -n "$id" ] && break
  sleep 0.1
done
[ -n "$id" ] || fail "no pending approval: $(cat "$WS/k.err")"
(cd "$WS" && "$LUAGENT" --workspace "$WS" approvals approve "$id" >/dev/null) || fail "approve failed"
i=0
while ! grep -q "^approved-returned" "$WS/k.out" 2>/dev/null; do
  i=$((i + 1)); [ "$i" -gt 100000 ] && break
  kill -0 "$P" 2>/dev/null || break
done
kill -9 "$P" 2>/dev/null
wait "$P" 2>/dev/null
grep -q "^approved-returned" "$WS/k.out" || fail "the approved call never returned: $(cat "$WS/k.out" "$WS/k.err")"
h=$(q "SELECT args_hash FROM audit WHERE tool='fs.write' ORDER BY seq DESC LIMIT 1")
rows=$(q "SELECT decision FROM audit WHERE tool='fs.write' AND args_hash='$h' AND caller_kind='script' ORDER BY seq" | tr '\n' ' ')
case "$rows" in
  "escalate approved exec ") pass "kill -9 after an approved call returned: its escalation, approval and execution are in the chain" ;;
  *) fail "rows of the approved call: '$rows'" ;;
esac
before=$(q "SELECT count(*) FROM audit WHERE tool='fs.read' AND seq < (SELECT min(seq) FROM audit WHERE tool='fs.write' AND args_hash='$h')")
[ "$before" = 95 ] && pass "with all 25 reads before it (95 reads in all)" || fail "reads before it: $before of 95"
expect_rc 0 "$LUAGENT" --workspace "$WS" audit verify && pass "audit verify passes" || true

# --- 3. kill -9 mid-run ---
# The model asks for a slow read-only skill tool; the process is killed
# while it runs: everything up to the turn's end is on record.
mkdir -p "$WS/skills/slow"
cat >"$WS/skills/slow/skill.lua" <<'LUA'
return { name = "slow", description = "Takes its time",
  tools = { wait = { description = "Waits", impact = "read", params = { type = "object" },
    run = function() local t = os.clock() + 20 while os.clock() < t do end return {} end } } }
LUA
printf '%s' '{"steps":[{"text":"Let me look.","chunk":4,"tool_calls":[{"id":"a","name":"slow__wait","arguments":{}}]},{"text":"done"}]}' >"$WS/m.json"
python3 "$MOCK" --script "$WS/m.json" --port-file "$WS/m.port" --log "$WS/m.log" &
PIDS="$PIDS $!"
wait_for 10 "[ -s '$WS/m.port' ]" || fail "mock did not start"
cat >"$WS/luagent.lua" <<LUA
return { providers = { { name = "p1", kind = "openai", base_url = "http://127.0.0.1:$(cat "$WS/m.port")/v1",
                         model = "m", max_retries = 0, timeout_s = 60 } },
         limits = { instructions = 1e12, deadline_s = 120 } }
LUA
(cd "$WS" && exec "$LUAGENT" --workspace "$WS" ask --tools slow.wait "look" >/dev/null 2>"$WS/ask.err") &
A=$!
wait_for 20 "[ \"\$(grep -c . '$WS/m.log' 2>/dev/null)\" -ge 1 ]" || fail "the model call never came"
sleep 1.5 # the tool is running now
kill -0 "$A" 2>/dev/null || fail "ask ended before the kill: $(cat "$WS/ask.err")"
kill -9 "$A"
wait "$A" 2>/dev/null
expect_rc 0 "$LUAGENT" --workspace "$WS" runs list
echo "$(grep -E '^r' "$WS/.out" | head -1)" | grep -q " interrupted " && pass "the killed run is interrupted" ||
  fail "runs list: $(cat "$WS/.out")"
run="(SELECT id FROM runs WHERE kind='ask')"
types=$(q "SELECT type FROM events WHERE run_id = $run ORDER BY seq" | tr '\n' ' ')
# The text came in three pieces ("Let ", "me l", "ook."): they waited
# together, so they are one row with the whole text.
want="run_start text_delta tool_call_start tool_args_delta usage turn_complete "
[ "$types" = "$want" ] && pass "its events up to the last non-streamed one (turn_complete) are on record" ||
  fail "events: '$types', wanted '$want'"
text=$(q "SELECT data FROM events WHERE run_id = $run AND type = 'text_delta'")
[ "$text" = '{"text":"Let me look."}' ] && pass "the streamed pieces are one row with the whole text" ||
  fail "text_delta rows: '$text'"
gap=$(q "SELECT max(seq) - count(*) FROM events WHERE run_id = $run")
[ "$gap" = 0 ] && pass "seq runs from 1 without a gap" || fail "gap: $gap"
finish
