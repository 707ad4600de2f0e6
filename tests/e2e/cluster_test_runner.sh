#!/bin/bash
# e2e: `luagent test` in a cluster workspace stays on its throwaway copy: the
# tests' tool calls never reach the hosts' shared audit chain or approval
# queue, and a { secret = } database URL the copy cannot open does not
# break the run (the copy has no secrets and needs none).
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/pg.sh"
pg_start

mkdir -p "$WS/skills/notes" "$WS/data"
cat >"$WS/skills/notes/skill.lua" <<'LUA'
return { name = "notes", description = "Keep notes", tools = {
  add = { description = "add a note",
    params = { type = "object", properties = { text = { type = "string" } } },
    impact = "medium",
    run = function(a) return tools.call("fs.write", { path = "note.txt", content = a.text }) end },
} }
LUA
cat >"$WS/skills/notes/notes_test.lua" <<'LUA'
test("a note is written", function()
  local r = tools.call("notes.add", { text = "hi" })
  expect(tools.call("fs.read", { path = "note.txt" }).content).to_equal("hi")
end)
LUA
cat >"$WS/luagent.lua" <<LUA
return { cluster = { postgres = "$PG_URL", node = "host-a" } }
LUA
# A call on the host itself lands in the shared chain (the check below can fail).
echo 'tools.call("fs.write", { path = "x.txt", content = "1" })' >"$WS/one.lua"
expect_rc 0 "$LUAGENT" --workspace "$WS" run one.lua
before=$(pg_sql "SELECT count(*) FROM luagent_audit")
[ "$before" -gt 0 ] && pass "a host's own call is in the shared chain ($before rows)" || fail "no rows: $before"

expect_rc 0 "$LUAGENT" --workspace "$WS" test && out_has "1 passed" && pass "the test passes"
after=$(pg_sql "SELECT count(*) FROM luagent_audit")
[ "$after" = "$before" ] && pass "the tests' calls did not reach the shared chain" ||
  fail "shared chain went from $before to $after rows"
[ "$(pg_sql "SELECT count(*) FROM luagent_approvals")" = 0 ] && pass "nor the shared approval queue" ||
  fail "approval rows appeared"

# The URL as a secret this host has not set: the tests still run.
cat >"$WS/luagent.lua" <<'LUA'
return { cluster = { postgres = { secret = "PG_URL" }, node = "host-a" } }
LUA
expect_rc 0 "$LUAGENT" --workspace "$WS" test && out_has "1 passed" &&
  pass "a secret URL the copy cannot open does not break the tests"
finish
