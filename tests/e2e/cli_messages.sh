#!/bin/bash
# Issue 12 item 12: `emit NAME` without a payload gives the run an empty
# table (ctx.trigger.payload.x is nil, not an error); config errors name the
# whole key path and suggest the nearest known key; `ask` waiting for an
# approval prints the request id and the command that decides it (not a raw
# JSON line); the daemon says when a fixed luagent.lua is loaded again.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
SRC=${LUAGENT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}

# --- config errors: the key path and a suggestion ---
conf() { printf '%s\n' "$@" > "$WS/luagent.lua"; }
conf 'return {' '  limits = {' '    memory_mbb = 64,' '  },' '}'
expect_rc 2 "$LUAGENT" tools list && err_has "luagent.lua:3: key 'limits.memory_mbb': unknown key" \
  && err_has "did you mean 'limits.memory_mb'?" && pass "a nested unknown key: path, line, suggestion"
conf 'return { limits = { memory_mb = "big" } }'
expect_rc 2 "$LUAGENT" tools list && err_has "key 'limits.memory_mb': expected a positive number, got string" \
  && pass "a nested wrong type names the path"
conf 'return { limts = { memory_mb = 1 } }'
expect_rc 2 "$LUAGENT" tools list && err_has "key 'limts': unknown key; did you mean 'limits'?" && pass "a top-level typo: suggestion"
conf 'return { selection = { max_skill = 2 } }'
expect_rc 2 "$LUAGENT" skills list && err_has "selection.max_skill is not a known key" \
  && err_has "did you mean 'selection.max_skills'?" && pass "a module's key: path and suggestion"
conf 'return { zzzzzz = 1 }'
expect_rc 2 "$LUAGENT" tools list && err_has "key 'zzzzzz': unknown key" && ! grep -q "did you mean" "$WS/.err" \
  && pass "nothing close: no suggestion"
rm -f "$WS/luagent.lua"

# --- emit without a payload: an empty table ---
cat > "$WS/automations/deploy.lua" <<'LUA'
return { on = "deploy.*", run = function(ctx)
  local p = ctx.trigger.payload
  return type(p) .. ":" .. tostring(p.version) .. ":" .. tostring(next(p))
end }
LUA
start_daemon
expect_rc 0 "$LUAGENT" emit deploy.bare && pass "emit NAME without JSON"
wait_for 10 '[ -n "$(q "SELECT result FROM runs WHERE name=\"deploy\" AND status=\"ok\"")" ]'
[ "$(q "SELECT result FROM runs WHERE name='deploy'")" = "table:nil:nil" ] && pass "the payload is an empty table" \
  || fail "payload: $(q "SELECT status, result, error FROM runs WHERE name='deploy'")"
expect_rc 0 "$LUAGENT" emit deploy.full '{"version":"2"}'
wait_for 10 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"deploy\" AND status=\"ok\"")" = 2 ]'
q "SELECT result FROM runs WHERE name='deploy'" | grep -q "^table:2:version$" && pass "a payload still arrives" \
  || fail "payload: $(q "SELECT status, result, error FROM runs WHERE name='deploy'")"

# --- the daemon says when a broken luagent.lua loads again ---
printf 'return { limits = { memory_mb = 64 } }\n' > "$WS/luagent.lua"
wait_for 10 "grep -q 'luagent.lua: reloaded' '$DLOG'" && pass "a changed luagent.lua: the daemon says it reloaded" || fail "no reload line: $(tail -5 "$DLOG")"
printf 'return { limits = { memory_mbb = 64 } }\n' > "$WS/luagent.lua"
wait_for 10 "grep -q 'keeping the previous configuration' '$DLOG'" && pass "a broken luagent.lua is reported" || fail "no complaint: $(tail -5 "$DLOG")"
printf 'return { limits = { memory_mb = 64 } }\n' > "$WS/luagent.lua"
wait_for 10 "grep -q 'luagent.lua: loads again; reloaded' '$DLOG'" && pass "the restored luagent.lua: the daemon says so" \
  || fail "no line for the restored config: $(tail -5 "$DLOG")"
# an edit made while a reload runs is never lost (the daemon used to make a
# new inotify descriptor after each reload; a restore that came in between
# was never seen): break and restore at once, several times
for i in 1 2 3 4 5; do
  nb=$(grep -c 'keeping the previous configuration' "$DLOG"); ng=$(grep -c 'loads again' "$DLOG")
  printf 'return { limits = { memory_mbb = %s } }\n' "$i" > "$WS/luagent.lua"
  wait_for 10 "[ \$(grep -c 'keeping the previous configuration' '$DLOG') -gt $nb ]" || { fail "cycle $i: no complaint"; break; }
  printf 'return { limits = { memory_mb = 64 } }\n' > "$WS/luagent.lua"
  wait_for 10 "[ \$(grep -c 'loads again' '$DLOG') -gt $ng ]" || { fail "cycle $i: the restore right after a reload was not seen: $(tail -3 "$DLOG")"; break; }
done
[ "$i" = 5 ] && pass "a restore right after a reload is always seen (5 cycles)"
stop_daemon

# --- ask waiting for an approval: the id and the command, not raw JSON ---
printf '{"steps":[{"tool_calls":[{"id":"d1","name":"fs.delete","arguments":{"path":"x.txt"}}]},{"text":"Deleted."}]}' > "$WS/fx.json"
python3 "$SRC/tests/mock_llm.py" --script "$WS/fx.json" --port-file "$WS/port" --log "$WS/mock.log" &
PIDS="$PIDS $!"
for _ in $(seq 100); do [ -s "$WS/port" ] && break; sleep 0.05; done
[ -s "$WS/port" ] || { fail "the mock model did not start"; finish; }
mkdir -p "$WS/data"; echo x > "$WS/data/x.txt"
cat > "$WS/luagent.lua" <<LUA
return { approver = "queue", approval_timeout_s = 30, limits = { deadline_s = 60 },
  providers = { { name = "m", kind = "openai", base_url = "http://127.0.0.1:$(cat "$WS/port")/v1", model = "m", timeout_s = 10 } } }
LUA
(cd "$WS" && exec timeout 60 "$LUAGENT" --workspace "$WS" ask "delete x.txt") >"$WS/ask.out" 2>"$WS/ask.err" &
ASK=$!
PIDS="$PIDS $ASK"
wait_for 15 "grep -q 'approvals approve' '$WS/ask.err'" || fail "ask did not say how to decide: $(cat "$WS/ask.err")"
ID=$(q "SELECT id FROM approvals WHERE status='pending'")
grep -q "\[approval needed\] fs.delete (impact high)" "$WS/ask.err" && pass "ask names the tool that needs approval"
grep -q "\[approval\] request $ID waits in the queue" "$WS/ask.err" && pass "ask prints the request id ($ID)" || fail "no id: $(cat "$WS/ask.err")"
CMD=$(grep -o "luagent --workspace [^ ]* approvals approve [0-9]*" "$WS/ask.err" | head -1)
[ -n "$CMD" ] && pass "ask prints the command: $CMD" || fail "no command: $(cat "$WS/ask.err")"
grep -q '^\[approval_requested\] {' "$WS/ask.err" && fail "a raw JSON line is still printed"
grep -q '{"tool"' "$WS/ask.err" && fail "raw JSON on stderr: $(cat "$WS/ask.err")"
# the printed command works as printed
(cd /tmp && "$LUAGENT" ${CMD#luagent }) >/dev/null 2>&1 && pass "the printed command decides the request" || fail "the printed command failed"
wait "$ASK"; rc=$?
[ "$rc" = 0 ] && grep -q "Deleted." "$WS/ask.out" && [ ! -e "$WS/data/x.txt" ] && pass "approved: the run finished" \
  || fail "ask rc $rc: $(cat "$WS/ask.out" "$WS/ask.err")"
grep -q "\[approval\] fs.delete approved by" "$WS/ask.err" && pass "the decision is shown in words"

# limits past what their conversion can hold are refused (a double beyond
# size_t/int is undefined behaviour), naming the key and the bound
for kv in "memory_mb = 1e300" "instructions = 1e300" "max_depth = 3e9" "output_kb = 1e300" "tool_calls = 1e300" "deadline_s = 1e300"; do
  conf "return { limits = { $kv } }"
  expect_rc 2 "$LUAGENT" tools list && err_has "limits.${kv%% *}" && err_has "expected at most" && pass "limits.$kv refused"
done
conf 'return { fs = { max_bytes = -5 } }'
expect_rc 2 "$LUAGENT" tools list && err_has "fs.max_bytes" && pass "fs.max_bytes = -5 refused"
conf 'return { limits = { memory_mb = 1048576, tool_calls = 5 } }'
expect_rc 0 "$LUAGENT" tools list && pass "limits at their bound load"
finish
