# Issue 18 items 1 and 2: a run that waits holds no lock, and a run whose
# process is killed with SIGKILL is marked interrupted with its real counts.
#  - while `ask` streams an answer slowly (a stalled model), the daemon runs
#    an automation every second that writes a file, and other processes emit
#    events, write memory and run scripts: all of them succeed promptly;
#  - kill -9 of `ask` after 5 tool results: the next command shows the run
#    interrupted with TOOLS 5; kill -9 during the first model call: the run
#    row exists and is marked interrupted too.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
MOCK="${LUAGENT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/mock_llm.py"
mkdir -p "$WS/data"

start_mock() { # NAME FIXTURE
  printf '%s' "$2" > "$WS/$1.json"
  python3 "$MOCK" --script "$WS/$1.json" --port-file "$WS/$1.port" --log "$WS/$1.log" &
  PIDS="$PIDS $!"
  wait_for 10 "[ -s '$WS/$1.port' ]" || fail "mock $1 did not start"
}
conf() { # PORT
  cat > "$WS/luagent.lua" <<LUA
return {
  providers = { { name = "p1", kind = "openai", base_url = "http://127.0.0.1:$1/v1", model = "m",
                  max_retries = 0, timeout_s = 60 } },
}
LUA
}

# --- 1. a waiting ask holds no lock ---
# 24 characters, one every 0.5 s: the answer takes about 12 s to stream.
start_mock slow '{"steps":[{"text":"slow answer arriving now.","chunk":1,"delay_ms":500}]}'
conf "$(cat "$WS/slow.port")"
cat > "$WS/automations/tick.lua" <<'LUA'
return { name = "tick", every = "1s", timeout = "5s",
  run = function(ctx) tools.call("fs.write", { path = "tick.txt", content = tostring(ctx.now) }) end }
LUA
start_daemon
(cd "$WS" && timeout 60 "$LUAGENT" --workspace "$WS" ask "go slowly" >"$WS/ask.out" 2>"$WS/ask.err") &
ASK=$!
PIDS="$PIDS $ASK"
sleep 2 # ask is now inside the streamed model call
printf 'memory.set("k%%s", "v")\ntools.call("fs.write", { path = "side.txt", content = "x" })\n' "" > "$WS/side.lua"
slow=0
for i in 1 2 3 4 5; do
  t0=$(date +%s%N)
  (cd "$WS" && timeout 20 "$LUAGENT" --workspace "$WS" emit ping "{\"i\":$i}") >/dev/null 2>"$WS/emit.err" || fail "emit $i failed: $(cat "$WS/emit.err")"
  (cd "$WS" && timeout 20 "$LUAGENT" --workspace "$WS" run side.lua) >/dev/null 2>"$WS/side.err" || fail "memory.set/fs.write script $i failed: $(cat "$WS/side.err")"
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ "$ms" -gt 3000 ] && slow=$((slow + 1))
  sleep 0.5
done
[ "$slow" = 0 ] && pass "emit and scripts finished promptly while ask waited" || fail "$slow of 5 rounds took over 3 s"
kill -0 "$ASK" 2>/dev/null && pass "ask was still waiting on the model meanwhile" || fail "ask ended too early: $(cat "$WS/ask.err")"
wait "$ASK"; rc=$?
[ "$rc" = 0 ] && grep -q "slow answer arriving now." "$WS/ask.out" && pass "ask got its whole answer" || fail "ask exited $rc: $(cat "$WS/ask.err")"
if grep -q "database is locked" "$DLOG" "$WS/ask.err"; then fail "someone saw 'database is locked': $(grep -m2 'locked' "$DLOG")"; else pass "no 'database is locked' anywhere"; fi
okruns=$(q "SELECT count(*) FROM runs WHERE kind='automation' AND name='tick' AND status='ok'")
bad=$(q "SELECT count(*) FROM runs WHERE kind='automation' AND name='tick' AND status<>'ok' AND status<>'running'")
[ "$okruns" -ge 5 ] && [ "$bad" = 0 ] && pass "the daemon's automation kept running ($okruns ok, $bad failed)" || fail "automation runs: $okruns ok, $bad failed: $(tail -5 "$DLOG")"
stop_daemon
rm -f "$WS/automations/tick.lua"

# --- 2. kill -9 mid-loop: interrupted, counts from the journal ---
start_mock kill '{"steps":[{"tool_calls":[
  {"id":"a","name":"echo","arguments":{"msg":"1"}},{"id":"b","name":"echo","arguments":{"msg":"2"}},
  {"id":"c","name":"echo","arguments":{"msg":"3"}},{"id":"d","name":"echo","arguments":{"msg":"4"}},
  {"id":"e","name":"echo","arguments":{"msg":"5"}}]},
  {"fault":"hang","hang_s":60}]}'
conf "$(cat "$WS/kill.port")"
(cd "$WS" && exec "$LUAGENT" --workspace "$WS" ask "five echoes" >/dev/null 2>&1) &
K=$!
wait_for 20 "[ \"\$(q \"SELECT count(*) FROM events WHERE type='tool_result'\")\" -ge 5 ]" || fail "the 5 tool results were not journaled"
kill -9 "$K"; wait "$K" 2>/dev/null
expect_rc 0 "$LUAGENT" --workspace "$WS" runs list
line=$(grep -E '^r' "$WS/.out" | head -1)
echo "$line" | grep -q " interrupted " && pass "the killed run is interrupted" || fail "runs list: $line"
[ "$(echo "$line" | awk '{print $7}')" = 5 ] && pass "TOOLS shows the 5 journaled results" || fail "runs list: $line"

# --- 2. kill -9 during the first model call: the row exists ---
start_mock first '{"steps":[{"fault":"hang","hang_s":60}]}'
conf "$(cat "$WS/first.port")"
before=$(q "SELECT count(*) FROM runs")
(cd "$WS" && exec "$LUAGENT" --workspace "$WS" ask "hello" >/dev/null 2>&1) &
K=$!
wait_for 10 "[ -s '$WS/first.log' ]" || fail "ask never called the model"
kill -9 "$K"; wait "$K" 2>/dev/null
after=$(q "SELECT count(*) FROM runs")
[ "$after" = $((before + 1)) ] && pass "the run row was there before the first model call" || fail "runs: $before -> $after"
expect_rc 0 "$LUAGENT" --workspace "$WS" runs list --json
python3 "$(dirname "$0")/lib/jsonl.py" < "$WS/.out" | head -1 | grep -q '"status":"interrupted"' && pass "and it is interrupted" || fail "runs list: $(head -c 300 "$WS/.out")"
finish
