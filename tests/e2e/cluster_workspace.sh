#!/bin/bash
# e2e: a cluster database serves one workspace. Two workspaces given the
# same URL by mistake (prod and staging) never share an approval queue, an
# audit chain or schedules: the first to open the database names it, and
# the other is refused everywhere it would reach it (an audited call, the
# daemon, approvals list), naming both workspaces. Hosts of one workspace
# (same name) share it as before; a bad cluster.workspace is a config error.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/pg.sh"
pg_start

mk() { # mk DIR CLUSTER-TABLE-EXTRA TOP-LEVEL-EXTRA
  mkdir -p "$WS/$1/data"
  cat >"$WS/$1/luagent.lua" <<LUA
return { $3 cluster = { postgres = "$PG_URL", node = "$1" $2 } }
LUA
  echo 'tools.call("fs.write", { path = "x.txt", content = "1" }) print("wrote")' >"$WS/$1/w.lua"
}
mk prod1 "" 'name = "prod",'
mk prod2 ", workspace = \"prod\"" ""
mk staging "" 'name = "staging",'

expect_rc 0 "$LUAGENT" --workspace "$WS/prod1" run "$WS/prod1/w.lua" && out_has "wrote" &&
  pass "the first workspace (name = prod) claims the database"
expect_rc 0 "$LUAGENT" --workspace "$WS/prod2" run "$WS/prod2/w.lua" && out_has "wrote" &&
  pass "another host of it (cluster.workspace = prod) shares it"
[ "$(pg_sql "SELECT name FROM luagent_workspace")" = prod ] || fail "workspace row: $(pg_sql "SELECT * FROM luagent_workspace")"

"$LUAGENT" --workspace "$WS/staging" run "$WS/staging/w.lua" >"$WS/.out" 2>"$WS/.err"
grep -q "serves workspace 'prod', and this one is 'staging'" "$WS/.out" "$WS/.err" &&
  pass "staging's audited call is refused, naming both workspaces" ||
  fail "staging's call: $(cat "$WS/.out" "$WS/.err")"
[ ! -e "$WS/staging/data/x.txt" ] && pass "... and its write did not happen" || fail "staging wrote x.txt"
expect_rc 1 "$LUAGENT" --workspace "$WS/staging" approvals list && err_has "serves workspace 'prod'" &&
  pass "staging's approvals list is refused"
expect_rc 2 "$LUAGENT" --workspace "$WS/staging" daemon && err_has "serves workspace 'prod'" &&
  pass "staging's daemon does not start"
[ "$(pg_sql "SELECT count(DISTINCT node) FROM luagent_audit")" = 2 ] &&
  pass "the shared chain has only prod's hosts" || fail "nodes in the chain: $(pg_sql "SELECT DISTINCT node FROM luagent_audit")"

mk bad ", workspace = 7" ""
expect_rc 1 "$LUAGENT" --workspace "$WS/bad" check && out_has "luagent.lua:1: cluster.workspace" &&
  pass "a bad cluster.workspace is a config error"
finish
