#!/bin/bash
# e2e: the password of cluster.postgres never shows in an error. libpq's
# parse errors quote the offending token or the whole URL
# ('invalid percent-encoded token: "pw%zz"'); the message reaches the
# script (a denied call's error), the model, stderr and the CLI.
#  - a password with a bad percent sequence
#  - an unclosed IPv6 bracket (libpq quotes the whole URL)
#  - the same URL kept as a secret ({ secret = "PG" }): nor there
# No database is needed: the URL does not parse.
. "$(dirname "$0")/lib/common.sh"
H="$WS/h"
mkdir -p "$H/data"
cat >"$H/w.lua" <<'LUA'
local ok, err = pcall(tools.call, "fs.write", { path = "x.txt", content = "x" })
print(ok and "wrote" or ("refused: " .. err.message))
LUA
check() { # $1 what, $2 url (as luagent.lua text), $3 password
  cat >"$H/luagent.lua" <<LUA
return { cluster = { postgres = $2, node = "n1" } }
LUA
  (cd "$H" && "$LUAGENT" run w.lua) >"$WS/o" 2>&1
  grep -q "^refused: .*not a PostgreSQL connection string" "$WS/o" &&
    pass "$1: the call is refused, naming the bad URL" || fail "$1: $(cat "$WS/o")"
  [ ! -e "$H/data/x.txt" ] || fail "$1: written without an audit row"
  for sub in "audit verify" "audit tail" "approvals list"; do
    "$LUAGENT" --workspace "$H" $sub >>"$WS/o" 2>&1
  done
  grep -q -- "$3" "$WS/o" && fail "$1: the password shows: $(grep -- "$3" "$WS/o" | head -3)" ||
    pass "$1: the password shows nowhere (run, audit verify/tail, approvals list)"
}
check "bad percent-encoding" '"postgresql://luagent:TOPs3cret%zz@127.0.0.1:1/luagent"' TOPs3cret
check "unclosed IPv6 bracket" '"postgresql://luagent:Pw0rdQ@[::1/luagent"' Pw0rdQ
echo 'postgresql://luagent:SeCrEt9%zz@127.0.0.1:1/luagent' | (cd "$H" && "$LUAGENT" secrets set PG >/dev/null 2>&1) ||
  fail "cannot set the secret"
check "kept as a secret" '{ secret = "PG" }' SeCrEt9
finish
