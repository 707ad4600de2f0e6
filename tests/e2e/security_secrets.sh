#!/bin/bash
# e2e: secrets. `secrets set NAME` reads stdin, `list`, `rm`; a secret used
# in an http.request header reaches the server but never appears in the
# script's output, the logs, the audit table or anywhere in the state file
# (database, WAL and shared memory searched byte for byte).
set -u
BIN=${1:?usage: $0 path/to/luagent}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
W=$(mktemp -d)
SRV=""
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
SECRET="tok-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

# An echo server on 127.0.0.1: sends back the Authorization header it got
# (so the value would reach the script if nothing redacted it) and records
# it in a file so the test can check it really was sent.
cat > "$W/server.py" <<'PY'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        got = self.headers.get("Authorization", "")
        with open(sys.argv[2], "w") as f: f.write(got)
        body = ("you sent: " + got).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("X-Echo", got)
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
with open(sys.argv[1], "w") as f: f.write(str(s.server_address[1]))
s.serve_forever()
PY
python3 "$W/server.py" "$W/port" "$W/received" &
SRV=$!
for _ in $(seq 1 50); do [ -s "$W/port" ] && break; sleep 0.1; done
PORT=$(cat "$W/port") || fail "server did not start"

cat > "$W/luagent.lua" <<LUA
return {
  http_allow = { "127.0.0.1" },
  secrets = {
    API = { origins = { "http://127.0.0.1:$PORT" } },
    MISSING = { origins = { "http://127.0.0.1:$PORT" } },
  },
}
LUA
# The CLI: value from stdin only.
(cd "$W" && "$BIN" secrets set API extra-arg </dev/null) && fail "secrets set accepted a value in argv"
printf '%s\n' "$SECRET" | (cd "$W" && "$BIN" secrets set API) || fail "secrets set failed"
printf 'other\n' | (cd "$W" && "$BIN" secrets set OTHER 2>"$W/set.err") || fail "secrets set OTHER failed"
grep -q "warning: luagent.lua declares no origins for OTHER" "$W/set.err" || fail "secrets set does not warn about a secret with no origins: $(cat "$W/set.err")"
[ "$(stat -c %a "$W/.luagent/secrets.key")" = 600 ] || fail "secrets.key is not 0600"
names=$(cd "$W" && "$BIN" secrets list)
[ "$names" = "$(printf 'API\thttp://127.0.0.1:%s\nMISSING\t(not set) http://127.0.0.1:%s\nOTHER\t(no origins declared: http.request sends it nowhere)' "$PORT" "$PORT")" ] || fail "secrets list: $names"
json=$(cd "$W" && "$BIN" secrets list --json)
python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert v[0]=={"name":"API","set":True,"origins":["http://127.0.0.1:'"$PORT"'"]}, v; assert v[2]=={"name":"OTHER","set":True,"origins":[]}, v' "$json" || fail "secrets list --json: $json"
(cd "$W" && "$BIN" secrets rm OTHER) || fail "secrets rm failed"
(cd "$W" && "$BIN" secrets rm OTHER 2>/dev/null) && fail "removing a missing secret succeeded"
(cd "$W" && "$BIN" secrets list) | grep -q '^OTHER' && fail "OTHER still listed"

cat > "$W/t.lua" <<LUA
local r = tools.call("http.request", {
  url = "http://127.0.0.1:$PORT/",
  headers = { Authorization = { secret = "API" } },
})
print("status", r.status)
print("body", r.body)
print("echo header", r.headers["x-echo"] or r.headers["X-Echo"])
log.info("response: " .. r.body)
print(json.encode(r))
local ok, err = pcall(tools.call, "http.request", {
  url = "http://127.0.0.1:$PORT/", headers = { Authorization = { secret = "MISSING" } } })
print("missing", ok, err and err.message)
LUA
(cd "$W" && timeout 60 "$BIN" -v run t.lua </dev/null >"$W/out" 2>"$W/err") || { cat "$W/out" "$W/err"; fail "run failed"; }
cat "$W/out"
[ "$(cat "$W/received")" = "$SECRET" ] || fail "the server did not receive the secret value"
grep -q '^status	200' "$W/out" || fail "request failed"
grep -q 'you sent: \[secret\]' "$W/out" || fail "the echoed value was not redacted in the result"
grep -q "missing	false	.*'MISSING' is not set" "$W/out" || fail "a missing secret is not a clear error"
(cd "$W" && "$BIN" audit tail -n 100 >"$W/audit.txt" && "$BIN" audit tail --json -n 100 >>"$W/audit.txt") || fail "audit tail"
grep -q 'tool=http.request' "$W/audit.txt" || fail "http.request not audited"
for f in "$W/out" "$W/err" "$W/audit.txt" "$W/.luagent/"*; do
  [ -f "$f" ] || continue
  if grep -aqF "$SECRET" "$f"; then fail "the secret value appears in $(basename "$f")"; fi
done
# Also as SQLite sees it (any table, any column).
if command -v sqlite3 >/dev/null; then
  dump=$(sqlite3 "$W/.luagent/state.db" .dump)
  grep -qF "$SECRET" <<<"$dump" && fail "the secret value appears in the database dump"
  grep -q 'INSERT INTO audit' <<<"$dump" || fail "no audit rows in the dump"
fi
echo "PASS security_secrets"
