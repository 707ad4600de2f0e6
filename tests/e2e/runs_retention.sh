# Issue 18 item 3: a runaway script cannot fill the disk.
#  - limits.tool_calls caps tools.call from scripts per run, counted across
#    nested skill tools too; pcall does not reset it;
#  - `runs prune --older-than` deletes finished runs with their events and
#    keeps running ones; the daemon's --retain / daemon.retain does the same;
#  - the audit chain stays verifiable.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
mkdir -p "$WS/skills/loop"
cat > "$WS/skills/loop/skill.lua" <<'LUA'
return { name = "loop", description = "calls time.now ten times", tools = {
  ten = { description = "ten calls", impact = "read", run = function()
    for i = 1, 10 do tools.call("time.now", {}) end
    return { ok = true } end } } }
LUA
printf 'return { limits = { tool_calls = 100 } }\n' > "$WS/luagent.lua"
cat > "$WS/runaway.lua" <<'LUA'
local ok_calls, last = 0, nil
for i = 1, 1000 do
  local ok, e = pcall(tools.call, "time.now", {})
  if ok then ok_calls = ok_calls + 1 else last = e end
end
print("calls " .. ok_calls .. " code " .. last.code)
LUA
expect_rc 0 "$LUAGENT" run runaway.lua && out_has "calls 100 code limit_tool_calls" && pass "the cap holds through pcall"
cat > "$WS/nested.lua" <<'LUA'
local n = 0
for i = 1, 50 do if pcall(tools.call, "loop.ten", {}) then n = n + 1 end end
print("skill calls " .. n)
LUA
# each loop.ten is 1 + 10 calls: the 10th would need calls 100..110
expect_rc 0 "$LUAGENT" run nested.lua && out_has "skill calls 9" && pass "nested skill calls count against the run"
printf 'return { limits = { tool_calls = "many" } }\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" run runaway.lua && err_has "luagent.lua:1: key 'limits.tool_calls': expected a positive number" && pass "a bad cap is a config error"
printf 'return {}\n' > "$WS/luagent.lua"

# --- retention ---
now=$(date +%s)
python3 - "$WS/.luagent/state.db" "$now" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1]); now = float(sys.argv[2])
for i in range(1200):
    age = 40 * 86400 if i < 1000 else 3600
    c.execute("INSERT INTO runs(id, kind, name, status, started, finished) VALUES (?, 'ask', '', 'ok', ?, ?)",
              ("old%d" % i, now - age, now - age + 1))
    c.execute("INSERT INTO events(run_id, seq, ts, type, data) VALUES (?, 1, ?, 'run_end', '{}')", ("old%d" % i, now - age))
# a row of three joined streamed pieces: three events
c.execute("INSERT INTO events(run_id, seq, ts, type, data, pieces) VALUES ('old7', 0, ?, 'text_delta', '{\"text\":\"abc\"}', '1,1,1')", (now - 40 * 86400,))
c.execute("INSERT INTO runs(id, kind, name, status, started, worker_pid) VALUES ('live', 'ask', '', 'running', ?, ?)", (now - 50 * 86400, __import__('os').getppid()))
c.commit()
PY
expect_rc 0 "$LUAGENT" runs prune --older-than 30d && out_has "pruned 1000 run(s) and 1003 event(s) older than 30d" && pass "runs prune deletes old runs and their events (a row of 3 joined pieces counts 3)"
[ "$(q "SELECT count(*) FROM runs WHERE id LIKE 'old%'")" = 200 ] && pass "newer runs kept" || fail "runs left: $(q "SELECT count(*) FROM runs")"
[ "$(q "SELECT count(*) FROM events WHERE run_id LIKE 'old%'")" = 200 ] && pass "their events kept" || fail "events left"
[ "$(q "SELECT status FROM runs WHERE id = 'live'")" = running ] && pass "a running run is never pruned" || fail "live run pruned"
expect_rc 2 "$LUAGENT" runs prune --older-than soon && err_has "--older-than soon" && pass "a bad duration is refused"
# The daemon's retention setting.
printf 'return { daemon = { retain = "30m" } }\n' > "$WS/luagent.lua"
start_daemon
wait_for 10 "grep -q 'pruned 200 run(s)' '$DLOG'" && pass "the daemon prunes by daemon.retain" || fail "daemon log: $(tail -5 "$DLOG")"
stop_daemon
printf 'return { daemon = { retian = "30m" } }\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" daemon && err_has "luagent.lua:1: daemon: unknown key 'retian'" && pass "a misspelt daemon key is an error"
printf 'return {}\n' > "$WS/luagent.lua"
expect_rc 0 "$LUAGENT" audit verify && out_has "intact" && pass "the audit chain still verifies"
finish
