#!/bin/bash
# A worker reuses one sandbox for its runs (recycled between them) and keeps
# each automation's chunk compiled (daemon_worker.c, sandbox_run_cached).
# Attack it: with a single worker, two automations run again and again on
# the same sandbox, each checking for what the earlier runs (its own and the
# other's) tried to leave behind, then planting all of it for the next:
# globals, _G, module-level locals of the cached chunk, fields on the
# string, math and tools libraries, the string metatable, ctx, math.random's
# seed. Every run must see nothing. An edit of the source is compiled anew
# (never the cached function), and a run that times out leaves the worker
# able to run clean again.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"

probe() { # probe NAME VERSION
cat > "$WS/automations/$1.lua" <<LUA
local seen_local = {}
return { every = "1s", run = function(ctx)
  local seen = {}
  local function chk(cond, what) if cond then seen[#seen + 1] = what end end
  local y = math.random(1, 1 << 40)
  pcall(math.randomseed, 7)
  local x = math.random(1, 1 << 40)
  chk(y == x, "math.random seed")
  pcall(math.randomseed, 7)
  chk(rawget(_ENV, "leak_global") ~= nil, "global")
  chk(type(_G) == "table" and rawget(_G, "leak_g") ~= nil, "_G")
  chk(#seen_local > 0, "module local")
  chk(rawget(string, "leak") ~= nil or string.leak ~= nil, "string field")
  chk(("").leak ~= nil, "string metatable")
  chk(math.leak ~= nil, "math field")
  chk(type(tools) == "table" and tools.leak ~= nil, "tools field")
  chk(ctx.leak ~= nil, "ctx")
  chk(ctx.state.owner ~= nil and ctx.state.owner ~= "$1", "another automation's state")
  chk(getmetatable(ctx) ~= nil, "ctx metatable")
  leak_global = 1
  pcall(function() _G.leak_g = 1 end)
  seen_local[#seen_local + 1] = 1
  pcall(function() string.leak = 1 end)
  pcall(rawset, string, "leak", 1)
  pcall(function() getmetatable("").__index.leak = 1 end)
  pcall(function() getmetatable("").__index = { leak = 1 } end)
  pcall(function() math.leak = 1 end)
  pcall(function() tools.leak = 1 end)
  ctx.leak = 1
  pcall(setmetatable, ctx, { __index = function() return 1 end })
  ctx.state.mine = (ctx.state.mine or 0) + 1
  ctx.state.owner = "$1"
  return "$2 " .. (#seen == 0 and "clean" or table.concat(seen, ","))
end }
LUA
}
probe probe_a v1
probe probe_b v1
cat > "$WS/automations/spin.lua" <<'LUA'
return { on = "spin", timeout = "1s", run = function(ctx) leak_global = 1; while true do end end }
LUA
start_daemon --workers 1
wait_for 10 '[ "$(q "SELECT count(*) FROM runs WHERE name LIKE \"probe%\" AND status=\"ok\"")" -ge 6 ]' || fail "probes did not run: $(tail -5 "$DLOG")"
pids=$(q "SELECT count(DISTINCT worker_pid) FROM runs WHERE name LIKE 'probe%' AND status='ok'")
[ "$pids" = 1 ] && pass "all probe runs on one worker (its sandbox reused)" || fail "probe runs on $pids workers"
bad=$(q "SELECT name, result FROM runs WHERE name LIKE 'probe%' AND (status != 'ok' OR result != 'v1 clean')")
[ -z "$bad" ] && pass "no run saw what an earlier run left ($(q "SELECT count(*) FROM runs WHERE name LIKE 'probe%'") runs)" || fail "leaked: $bad"
[ "$(q "SELECT state FROM automations WHERE name='probe_a'" | python3 -c 'import json,sys; print(json.load(sys.stdin)["mine"])')" -ge 3 ] && pass "ctx.state still carries over" || fail "state: $(q "SELECT state FROM automations WHERE name='probe_a'")"

# an edit is compiled anew: the cached function for the old text never runs
t0=$(date +%s.%N)
probe probe_a v2
wait_for 10 '[ "$(q "SELECT count(*) FROM runs WHERE name=\"probe_a\" AND result=\"v2 clean\"")" -ge 2 ]' && pass "edited automation runs its new text" || fail "after edit: $(q "SELECT result FROM runs WHERE name='probe_a' ORDER BY started DESC LIMIT 3")"
[ -z "$(q "SELECT id FROM runs WHERE name='probe_a' AND result='v1 clean' AND started > $t0 + 1.5")" ] && pass "no old text after the reload" || fail "old text ran after the edit"

# a run that hits a limit (instructions or its deadline, whichever first):
# only that run; the worker's next runs are clean
expect_rc 0 "$LUAGENT" --workspace "$WS" emit spin
wait_for 8 '[ -n "$(q "SELECT id FROM runs WHERE name=\"spin\" AND status IN (\"timeout\", \"failed\") AND (error LIKE \"%limit%\" OR error LIKE \"%deadline%\")")" ]' && pass "spinning run stopped by its limit" || fail "spin: $(q "SELECT status, error FROM runs WHERE name='spin'")"
t1=$(q "SELECT finished FROM runs WHERE name='spin'")
wait_for 6 '[ "$(q "SELECT count(*) FROM runs WHERE name LIKE \"probe%\" AND started > $t1 AND status=\"ok\"")" -ge 3 ]' && pass "runs go on after the timeout" || fail "no runs after the timeout"
bad=$(q "SELECT name, status, result FROM runs WHERE name LIKE 'probe%' AND started > $t1 AND (status != 'ok' OR result NOT LIKE '% clean')")
[ -z "$bad" ] && pass "runs after the timeout are clean" || fail "after timeout: $bad"
stop_daemon
finish
