#!/bin/bash
# Automation runs can be inspected: a run's print and log output and its
# script tool calls (nested skill calls too) are kept in the journal,
# bounded (64 KiB of output, 256 calls per run, the cut marked), kept when
# the run times out, shown by `runs show ID` and `runs show ID --json`, and
# removed with the run by `runs prune`.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"

mkdir -p "$WS/skills/inner"
cat > "$WS/skills/inner/skill.lua" <<'LUA'
return { name = "inner", description = "calls echo", tools = {
  relay = { description = "relay", params = { type = "object" }, impact = "read",
            run = function(args) return tools.call("echo", { via = "inner" }) end } } }
LUA
cat > "$WS/automations/chatty.lua" <<'LUA'
return { run = function(ctx)
  print("hello from chatty")
  log.warn("careful: " .. ctx.trigger.kind)
  tools.call("echo", { n = 1 })
  tools.call("inner.relay", {})
  local ok, err = pcall(tools.call, "no.such_tool", {})
  print("second line")
  return { done = true }
end }
LUA
cat > "$WS/automations/flood.lua" <<'LUA'
return { run = function(ctx)
  local line = string.rep("x", 999)
  for i = 1, 100 do print(line) end            -- 100,000 bytes
  for i = 1, 300 do tools.call("echo", { i = i }) end
  return "flooded"
end }
LUA
cat > "$WS/automations/stuck.lua" <<'LUA'
return { timeout = "1s", run = function(ctx)
  print("before the hang")
  while true do end
end }
LUA
id_of() { q "SELECT id FROM runs WHERE name='$1' ORDER BY started DESC LIMIT 1"; }

expect_rc 0 "$LUAGENT" automations run chatty || fail "chatty did not run"
ID=$(id_of chatty)
expect_rc 0 "$LUAGENT" runs show "$ID" && out_has "hello from chatty" && out_has "second line" && out_has '"done":true' \
  && err_has "[warn] careful: manual" && err_has '[tool] echo {"n":1} by automation chatty: ok' \
  && err_has '[tool] echo {"via":"inner"} by skill inner: ok' && err_has '[tool] inner.relay {} by automation chatty: ok' \
  && err_has "[tool] no.such_tool {} by automation chatty: unknown_tool" && pass "runs show: output, log, tool calls (nested, failed)"
expect_rc 0 "$LUAGENT" runs show "$ID" --json
python3 - "$WS/.out" <<'PY' && pass "runs show --json: run_start, print, log, script_tool_call, run_end" || fail "runs show --json: $(head -c 600 "$WS/.out")"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
types = [e["type"] for e in evs]
assert types[0] == "run_start" and types[-1] == "run_end", types
assert evs[0]["data"]["kind"] == "automation" and evs[0]["data"]["name"] == "chatty"
assert evs[-1]["data"]["status"] == "ok" and evs[-1]["data"]["tool_calls"] >= 3, evs[-1]
prints = [e["data"]["text"] for e in evs if e["type"] == "print"]
assert prints == ["hello from chatty\n", "second line\n"], prints
logs = [e["data"] for e in evs if e["type"] == "log"]
assert logs == [{"level": "warn", "text": "careful: manual"}], logs
calls = [e["data"] for e in evs if e["type"] == "script_tool_call"]
assert [c["tool"] for c in calls].count("echo") == 2, calls
bad = [c for c in calls if c["tool"] == "no.such_tool"][0]
assert bad["ok"] is False and bad["code"] == "unknown_tool", bad
PY

# The bound: 64 KiB of output and 256 tool calls kept, the rest counted.
expect_rc 0 "$LUAGENT" automations run flood >/dev/null || fail "flood did not run"
ID=$(id_of flood)
expect_rc 0 "$LUAGENT" runs show "$ID" --json
python3 - "$WS/.out" <<'PY' && pass "a flood is cut at 64 KiB and 256 calls, and the cut is marked" || fail "flood journal: $(tail -c 600 "$WS/.out")"
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
text = sum(len(e["data"]["text"].rstrip("\n")) for e in evs if e["type"] == "print")
assert 60000 < text <= 65536, text
calls = [e for e in evs if e["type"] == "script_tool_call"]
assert len(calls) == 256, len(calls)
notes = [e["data"] for e in evs if e["type"] == "note" and e["data"].get("truncated")]
assert len(notes) == 1 and "not kept" in notes[0]["text"] and "44 tool call(s)" in notes[0]["text"], notes
assert evs[-1]["type"] == "run_end" and evs[-1]["data"]["status"] == "ok"
PY
expect_rc 0 "$LUAGENT" runs show "$ID" && err_has "[note]" && err_has "not kept" && pass "runs show prints the truncation note"

# A run killed at its timeout keeps what it printed.
printf 'return { limits = { instructions = 1e12 } }\n' > "$WS/luagent.lua"  # the deadline ends it, not the count
expect_rc 1 "$LUAGENT" automations run stuck
ID=$(id_of stuck)
[ "$(q "SELECT status FROM runs WHERE id='$ID'")" = timeout ] || fail "stuck: $(q "SELECT status, error FROM runs WHERE id='$ID'")"
expect_rc 0 "$LUAGENT" runs show "$ID" && out_has "before the hang" && pass "a timed-out run keeps its output"

rm "$WS/luagent.lua"

# Runs of the daemon are journaled the same way.
cat > "$WS/automations/tick.lua" <<'LUA'
return { every = "1s", run = function(ctx) print("tick " .. ctx.run_id) end }
LUA
start_daemon
wait_for 10 '[ -n "$(q "SELECT id FROM runs WHERE name=\"tick\" AND status=\"ok\" LIMIT 1")" ]' || fail "tick never ran"
stop_daemon
ID=$(q "SELECT id FROM runs WHERE name='tick' AND status='ok' LIMIT 1")
expect_rc 0 "$LUAGENT" runs show "$ID" && out_has "tick $ID" && pass "a daemon run's output is in the journal"

# A run with no events at all (a skipped slot, or a row from before) still
# answers --json with one line.
python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("INSERT INTO runs(id, kind, name, status, started, finished, error) VALUES (?, ?, ?, ?, 1, 1, ?)", ("r-skipped-1", "automation", "tick", "skipped", "still running")); c.commit()' "$WS/.luagent/state.db"
expect_rc 0 "$LUAGENT" runs show r-skipped-1 --json && out_has '"type":"run_start"' && out_has '"type":"run_end"' \
  && out_has '"status":"skipped"' && pass "runs show --json of a run without events prints its row as run_start/run_end"
# A quiet run (no output, no calls) costs no event rows, and still replays.
cat > "$WS/automations/quiet.lua" <<'LUA'
return { run = function(ctx) return 42 end }
LUA
expect_rc 0 "$LUAGENT" automations run quiet
QID=$(id_of quiet)
[ "$(q "SELECT count(*) FROM events WHERE run_id='$QID'")" = 0 ] || fail "a quiet run wrote events"
expect_rc 0 "$LUAGENT" runs show "$QID" --json && out_has '"kind":"automation"' && out_has '"result":"42"' \
  && pass "a quiet run writes no events and replays from its row"

# Retention removes the events with the runs.
before=$(q "SELECT count(*) FROM events WHERE run_id IN (SELECT id FROM runs WHERE kind='automation')")
[ "$before" -gt 300 ] || fail "expected the runs' events in the journal, found $before"
sleep 1.1
expect_rc 0 "$LUAGENT" runs prune --older-than 1s
left=$(q "SELECT count(*) FROM events WHERE run_id NOT IN (SELECT id FROM runs)")
[ "$left" = 0 ] && [ "$(q "SELECT count(*) FROM runs WHERE kind='automation'")" = 0 ] \
  && pass "runs prune removes automation runs with their output and calls" || fail "$left orphan events after prune"
finish
