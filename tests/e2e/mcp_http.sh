#!/bin/bash
# e2e: Streamable HTTP both ways, luagent to luagent. `mcp serve --http`:
# loopback, bearer token shown once and stored 0600, 401/403/400/404/405,
# DELETE. The client: http_allow and the secret's declared origins decide
# before any request leaves, the token travels as a secret header, calls
# run as caller mcp on the server (audited there), a restarted server
# reuses its token, and a server that is down is a clear error.
set -u
. "$(dirname "$0")/lib/common.sh"
S="$WS/server"; C="$WS/client"
mkdir -p "$S/skills/greet" "$C"
cat > "$S/skills/greet/skill.lua" <<'LUA'
return { name = "greet", description = "Greets people", tools = {
  hello = { description = "Say hello", impact = "read",
    params = { type = "object", required = { "who" }, properties = { who = { type = "string" } } },
    run = function(args) return { text = "hello " .. args.who } end } } }
LUA
P=$(free_port)
URL="http://127.0.0.1:$P/mcp"
start_server() {
  (cd "$S" && exec "$LUAGENT" mcp serve --http "$P" 2>>"$S/serve.err") & SP=$!; PIDS="$PIDS $SP"
  for _ in $(seq 1 50); do grep -q "serving MCP" "$S/serve.err" 2>/dev/null && break; sleep 0.1; done
}
start_server
grep -q "serving MCP (Streamable HTTP) on http://127.0.0.1:$P/mcp" "$S/serve.err" && pass "listens on loopback by default" || fail "server: $(cat "$S/serve.err")"
TOKEN=$(cat "$S/.luagent/mcp/serve.token")
[ ${#TOKEN} = 64 ] && [ "$(stat -c %a "$S/.luagent/mcp/serve.token")" = 600 ] && pass "token stored 0600" || fail "token file"
[ "$(grep -c "$TOKEN" "$S/serve.err")" = 1 ] && pass "token shown once" || fail "token not shown once"
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
INIT='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}'
[ "$(code -X POST "$URL" -d "$INIT")" = 401 ] && pass "no token: 401"
[ "$(code -X POST "$URL" -H "Authorization: Bearer ${TOKEN%?}x" -d "$INIT")" = 401 ] && pass "wrong token: 401"
[ "$(code -X POST "$URL" -H "Authorization: Bearer $TOKEN" -H "Origin: http://evil.example" -d "$INIT")" = 403 ] && pass "foreign Origin: 403 (DNS rebinding)"
[ "$(code -X POST "$URL" -H "Authorization: Bearer $TOKEN" -d '{"jsonrpc":"2.0","id":2,"method":"tools/list"}')" = 400 ] && pass "no session: 400"
[ "$(code -X POST "$URL" -H "Authorization: Bearer $TOKEN" -H "Mcp-Session-Id: nope" -d '{"jsonrpc":"2.0","id":2,"method":"tools/list"}')" = 404 ] && pass "unknown session: 404"
[ "$(code "$URL" -H "Authorization: Bearer $TOKEN")" = 405 ] && pass "GET: 405"
SID=$(curl -s -D - -o /dev/null -X POST "$URL" -H "Authorization: Bearer $TOKEN" -d "$INIT" | tr -d '\r' | awk 'tolower($1)=="mcp-session-id:"{print $2}')
[ -n "$SID" ] && [ "$(code -X POST "$URL" -H "Authorization: Bearer $TOKEN" -H "Mcp-Session-Id: $SID" -d '{"jsonrpc":"2.0","id":2,"method":"tools/list"}')" = 200 ] && pass "a session" || fail "session"
[ "$(code -X DELETE "$URL" -H "Authorization: Bearer $TOKEN" -H "Mcp-Session-Id: $SID")" = 200 ] &&
  [ "$(code -X POST "$URL" -H "Authorization: Bearer $TOKEN" -H "Mcp-Session-Id: $SID" -d '{"jsonrpc":"2.0","id":2,"method":"tools/list"}')" = 404 ] && pass "DELETE ends the session"

# the client
printf '%s\n' "Bearer $TOKEN" | "$LUAGENT" --workspace "$C" secrets set LG 2>/dev/null || fail "secrets set"
cconf() { printf 'return {\n%s\n  mcp = { servers = { lg = { url = "%s", headers = { Authorization = { secret = "LG" } } } } },\n}\n' "$1" "$URL" > "$C/luagent.lua"; }
calls() { grep -c "called greet.hello" "$S/serve.err"; }
cconf "  http_allow = { \"http://127.0.0.1:$P\" }, secrets = { LG = { origins = { \"http://127.0.0.1:$P\" } } },"
(cd "$C" && "$LUAGENT" mcp trust lg --yes) >"$WS/.out" 2>&1 && grep -q "mcp.lg.greet__hello" "$WS/.out" && pass "trust over HTTP" || fail "trust: $(cat "$WS/.out")"
echo 'print(tools.call("mcp.lg.greet__hello", { who = "http" }).structured.text)' > "$C/t.lua"
(cd "$C" && "$LUAGENT" run t.lua) >"$WS/.out" 2>&1; grep -q "^hello http$" "$WS/.out" && pass "a call over HTTP, structuredContent back" || fail "call: $(cat "$WS/.out")"
(cd "$S" && "$LUAGENT" audit tail -n 20) | grep "greet.hello" | grep -q "luagent" && pass "the server audits it as caller mcp named luagent" || fail "server audit"
n=$(calls)
cconf "  secrets = { LG = { origins = { \"http://127.0.0.1:$P\" } } },"
(cd "$C" && "$LUAGENT" run t.lua) >"$WS/.out" 2>&1; grep -q "host_not_allowed" "$WS/.out" && pass "not on http_allow: refused" || fail "http_allow: $(cat "$WS/.out")"
cconf "  http_allow = { \"http://127.0.0.1:$P\" }, secrets = { LG = { origins = { \"https://elsewhere.example\" } } },"
(cd "$C" && "$LUAGENT" run t.lua) >"$WS/.out" 2>&1; grep -q "secret_not_allowed" "$WS/.out" && pass "the token's secret may not go there: refused" || fail "secret origin: $(cat "$WS/.out")"
[ "$(calls)" = "$n" ] && pass "neither refused call reached the server"
# a header value with CR/LF would add a header of its own: refused before any request
printf 'Bearer x\r\nX-Injected: 1' | "$LUAGENT" --workspace "$C" secrets set LGBAD 2>/dev/null || fail "secrets set LGBAD"
cp "$C/luagent.lua" "$C/luagent.lua.keep"
printf 'return {\n  http_allow = { "http://127.0.0.1:%s" }, secrets = { LGBAD = { origins = { "http://127.0.0.1:%s" } } },\n  mcp = { servers = { lg = { url = "%s", headers = { Authorization = { secret = "LGBAD" } } } } },\n}\n' "$P" "$P" "$URL" > "$C/luagent.lua"
(cd "$C" && "$LUAGENT" mcp trust lg --yes) >"$WS/.out" 2>&1
grep -q "header 'Authorization' has forbidden characters" "$WS/.out" && [ "$(calls)" = "$n" ] \
  && pass "a CR/LF in a header value is refused before any request" || fail "CRLF header: $(cat "$WS/.out")"
mv "$C/luagent.lua.keep" "$C/luagent.lua"
# restart the server: the client's session is gone; it initializes again
cconf "  http_allow = { \"http://127.0.0.1:$P\" }, secrets = { LG = { origins = { \"http://127.0.0.1:$P\" } } },"
kill $SP; wait $SP 2>/dev/null; : > "$S/serve.err"; start_server
grep -q "bearer token: in .luagent/mcp/serve.token" "$S/serve.err" && ! grep -q "$TOKEN" "$S/serve.err" && pass "restart: the token is reused, not shown again"
(cd "$C" && "$LUAGENT" run t.lua) >"$WS/.out" 2>&1; grep -q "^hello http$" "$WS/.out" && pass "after a server restart, a new run gets a new session" || fail "restart: $(cat "$WS/.out")"
kill $SP 2>/dev/null; wait $SP 2>/dev/null
(cd "$C" && "$LUAGENT" run t.lua) >"$WS/.out" 2>&1; grep -q "mcp_http" "$WS/.out" && pass "server down: a clear error" || fail "down: $(cat "$WS/.out")"
finish
