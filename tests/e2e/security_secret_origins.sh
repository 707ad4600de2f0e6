#!/bin/bash
# e2e: a secret goes only to the origins luagent.lua declares for it.
#
# Two real HTTP servers on 127.0.0.1: A (an allowed origin of the secret)
# and B (the same host, another port: on http_allow, but not an origin of
# the secret). Each records every request it gets, headers included, in a
# log, so the test can check which server saw the secret value. Attacks:
#   - a redirect from A to B with the secret header attached (the hop is
#     refused before B is contacted, naming the secret and B's origin);
#   - a secret whose origin is https on A, sent over http to A (downgrade);
#   - a stored secret that luagent.lua declares no origin for;
#   - the model's raw tool call attaching the secret to B;
#   - http_allow entries that name a scheme and a port.
. "$(dirname "$0")/lib/mock.sh" "$1"
SECRET="tok-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
OTHER="oth-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

cat > "$WS/server.py" <<'PY'
import http.server, json, sys, urllib.parse
class H(http.server.BaseHTTPRequestHandler):
    def handle_one(self):
        with open(sys.argv[2], "a") as f:
            f.write(json.dumps({"path": self.path, "headers": dict(self.headers.items())}) + "\n")
        u = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(u.query)
        if u.path == "/redirect":
            self.send_response(int(q.get("code", ["302"])[0]))
            self.send_header("Location", q["to"][0])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = handle_one
    do_POST = handle_one
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(sys.argv[1], "w") as f: f.write(str(s.server_address[1]))
s.serve_forever()
PY
start_srv() {
  rm -f "$WS/$1.port"
  python3 "$WS/server.py" "$WS/$1.port" "$WS/$1.log" &
  MOCK_PIDS="$MOCK_PIDS $!"
  for _ in $(seq 100); do [ -s "$WS/$1.port" ] && break; sleep 0.05; done
  [ -s "$WS/$1.port" ] || { echo "server $1 did not start"; exit 1; }
  : > "$WS/$1.log"
}
start_srv A
start_srv B
PA=$(cat "$WS/A.port"); PB=$(cat "$WS/B.port")
A="http://127.0.0.1:$PA"; B="http://127.0.0.1:$PB"
reset_logs() { : > "$WS/A.log"; : > "$WS/B.log"; }
# saw SERVER VALUE: the server's log holds the value (in any header)
saw() { grep -qF -- "$2" "$WS/$1.log"; }
requests() { wc -l < "$WS/$1.log" | tr -d ' '; }

printf '%s\n' "$SECRET" | "$LUAGENT" --workspace "$WS" secrets set API 2>/dev/null || { echo "secrets set API failed"; exit 1; }
printf '%s\n' "$OTHER" | "$LUAGENT" --workspace "$WS" secrets set OTHER 2>/dev/null || { echo "secrets set OTHER failed"; exit 1; }

# --- 1. a secret with no declared origin is sent nowhere ----------------
# (today's main sends it to any allowed host and along every redirect)
config 'http_allow = { "127.0.0.1" }'
cat > "$WS/noorigin.lua" <<LUA
local ok, err = pcall(tools.call, "http.request", {
  url = "$A/redirect?to=$B/stolen", headers = { Authorization = { secret = "API" } } })
print("result", ok, err and err.code, err and err.message)
LUA
reset_logs
lrun "$WS/noorigin.lua"
expect_rc 0 "script with an undeclared secret runs"
expect_out "result	false	secret_not_allowed" "a secret with no origin is refused"
expect_out "secret API has no origins declared" "the error names the secret"
expect_out 'secrets = { API = { origins = {' "the error says how to declare origins"
saw A "$SECRET" && fail "A received a secret that has no origin" || ok "A did not receive the undeclared secret"
saw B "$SECRET" && fail "B received a secret that has no origin" || ok "B did not receive the undeclared secret"

# --- 2. declared origins ------------------------------------------------
config "http_allow = { \"127.0.0.1\" },
  secrets = {
    API = { origins = { \"$A\" } },
    TLS_ONLY = { origins = { \"https://127.0.0.1:$PA\" } },
  }"
printf '%s\n' "$OTHER" | "$LUAGENT" --workspace "$WS" secrets set TLS_ONLY 2>/dev/null || { echo "secrets set TLS_ONLY failed"; exit 1; }
cat > "$WS/origins.lua" <<LUA
local function try(label, req)
  local ok, r = pcall(tools.call, "http.request", req)
  if ok then print(label, "ok", r.status, r.url)
  else print(label, "error", r.code, r.message) end
end
try("direct", { url = "$A/ok", headers = { Authorization = { secret = "API" } } })
LUA
reset_logs
lrun "$WS/origins.lua"
expect_out "direct	ok	200	$A/ok" "the secret reaches its declared origin"
saw A "$SECRET" && ok "A received the secret" || fail "A did not receive the secret"

cat > "$WS/redirect.lua" <<LUA
local ok, r = pcall(tools.call, "http.request", {
  url = "$A/redirect?to=$B/stolen", headers = { Authorization = { secret = "API" } } })
print("redirect", ok, r.code, r.message)
LUA
reset_logs
lrun "$WS/redirect.lua"
expect_out "redirect	false	secret_not_allowed	http.request: secret API may not be sent to $B (allowed: $A)" \
  "a redirect to another port with the secret is refused, naming secret and origin"
[ "$(requests B)" = 0 ] && ok "B got no request at all" || fail "B was contacted: $(cat "$WS/B.log")"
saw B "$SECRET" && fail "B received the secret through the redirect" || ok "B did not receive the secret"

# A protocol-relative and a scheme-changing Location are resolved by curl
# and checked the same way.
for loc in "//127.0.0.1:$PB/rel" "https://127.0.0.1:$PA/tls"; do
  cat > "$WS/loc.lua" <<LUA
local ok, r = pcall(tools.call, "http.request", {
  url = "$A/redirect?to=$loc", headers = { Authorization = { secret = "API" } } })
print("loc", ok, r.code, r.message)
LUA
  reset_logs
  lrun "$WS/loc.lua"
  expect_out "loc	false	secret_not_allowed	http.request: secret API may not be sent to $(case $loc in //*) echo "http:$loc";; *) echo "$loc";; esac | sed 's|/[a-z]*$||')" "Location $loc is refused"
  [ "$(requests B)" = 0 ] && ok "B got no request ($loc)" || fail "B was contacted ($loc)"
done

for code in 301 303 307 308; do
  sed "s|redirect?to=|redirect?code=$code\&to=|" "$WS/redirect.lua" > "$WS/redirect$code.lua"
  reset_logs
  lrun "$WS/redirect$code.lua"
  expect_out "secret API may not be sent to $B" "a $code redirect is refused too"
  [ "$(requests B)" = 0 ] && ok "B got no request ($code)" || fail "B was contacted after a $code"
done

# A redirect that stays on the secret's origin is followed, secret attached.
cat > "$WS/same.lua" <<LUA
local r = tools.call("http.request", {
  url = "$A/redirect?to=/ok2", headers = { Authorization = { secret = "API" } } })
print("same", r.status, r.url)
LUA
reset_logs
lrun "$WS/same.lua"
expect_out "same	200	$A/ok2" "a redirect within the origin is followed"
grep -F '"/ok2"' "$WS/A.log" | grep -qF "$SECRET" && ok "the secret went along to /ok2" || fail "the secret did not reach /ok2"

# A plain request (no secret) still follows a redirect to B.
cat > "$WS/plain.lua" <<LUA
local r = tools.call("http.request", { url = "$A/redirect?to=$B/plain", headers = { ["X-Plain"] = "visible" } })
print("plain", r.status, r.url)
LUA
reset_logs
lrun "$WS/plain.lua"
expect_out "plain	200	$B/plain" "redirects without secrets still work"

# Sent straight to an allowed host on the wrong port.
cat > "$WS/wrongport.lua" <<LUA
local ok, r = pcall(tools.call, "http.request", { url = "$B/x", headers = { Authorization = { secret = "API" } } })
print("wrongport", ok, r.code, r.message)
LUA
reset_logs
lrun "$WS/wrongport.lua"
expect_out "wrongport	false	secret_not_allowed	http.request: secret API may not be sent to $B (allowed: $A)" "wrong port refused"
[ "$(requests B)" = 0 ] && ok "B got no request (wrong port)" || fail "B was contacted (wrong port)"

# Downgrade: the origin is https on A's port; plain http to the same host
# and port is another origin.
cat > "$WS/downgrade.lua" <<LUA
local ok, r = pcall(tools.call, "http.request", { url = "$A/x", headers = { Authorization = { secret = "TLS_ONLY" } } })
print("downgrade", ok, r.code, r.message)
LUA
reset_logs
lrun "$WS/downgrade.lua"
expect_out "downgrade	false	secret_not_allowed	http.request: secret TLS_ONLY may not be sent to $A (allowed: https://127.0.0.1:$PA)" "http where the origin says https is refused"
[ "$(requests A)" = 0 ] && ok "A got no request (downgrade)" || fail "A was contacted over http"

# --- 3. the model attaches a secret to an allowed but wrong host --------
stop_mocks
start_srv A; start_srv B   # stop_mocks ended them; new ports
PA2=$(cat "$WS/A.port"); PB2=$(cat "$WS/B.port")
start_mock m "{\"steps\":[{\"tool_calls\":[
   {\"id\":\"h1\",\"name\":\"http.request\",\"arguments\":{\"url\":\"http://127.0.0.1:$PB2/model\",\"headers\":{\"Authorization\":{\"secret\":\"API\"}}}},
   {\"id\":\"h2\",\"name\":\"http.request\",\"arguments\":{\"url\":\"http://127.0.0.1:$PA2/model2\",\"headers\":{\"X-Key\":{\"secret\":\"OTHER\"}}}},
   {\"id\":\"s1\",\"name\":\"fetcher.get\",\"arguments\":{\"url\":\"http://127.0.0.1:$PA2/redirect?to=http://127.0.0.1:$PB2/skill\"}}]},
  {\"text\":\"done\"}]}"
# A skill tool (a nested call: caller "skill") that attaches the secret to
# whatever URL the model gives it; the model points it at a redirect to B.
mkdir -p "$WS/skills/fetcher"
cat > "$WS/skills/fetcher/skill.lua" <<'LUA'
return {
  name = "fetcher",
  description = "Fetch a URL with the API token",
  keywords = { "fetch" },
  tools = {
    get = {
      description = "GET a URL with the API token attached",
      params = { type = "object", required = { "url" }, properties = { url = { type = "string" } } },
      impact = "low",
      run = function(args)
        return tools.call("http.request", { url = args.url, headers = { Authorization = { secret = "API" } } })
      end,
    },
  },
}
LUA
# taint off: an open_world tool's failure taints the run (its error text may
# carry outside content), which would escalate the later calls before their
# secrets are checked; this part is about the secrets alone.
config "http_allow = { \"127.0.0.1\" }, taint = false,
  secrets = { API = { origins = { \"http://127.0.0.1:$PA2\" } } },
  providers = { $(provider openai $PORT_m) }"
ask --json "fetch it"
expect_rc 0 "ask finishes after the refused calls"
check m "'secret API may not be sent to http://127.0.0.1:$PB2' in msgs(1)[3]['content']" "the model sees why its call was refused"
check m "'secret OTHER has no origins declared' in msgs(1)[4]['content']" "the model cannot attach an undeclared secret"
check m "'secret API may not be sent to http://127.0.0.1:$PB2' in msgs(1)[5]['content']" "a skill tool's nested call is refused on the redirect"
grep -qF '/redirect?to=' "$WS/A.log" && ok "the skill's call reached A" || fail "the skill's call never reached A"
[ "$(requests B)" = 0 ] && ok "B got no request from the model's or the skill's call" || fail "B was contacted by the model's or the skill's call"
saw A "$OTHER" && fail "A received OTHER from the model" || ok "A did not receive OTHER"

# --- 4. http_allow entries with scheme and port --------------------------
config "http_allow = { \"http://127.0.0.1:$PA2\" }"
cat > "$WS/allow.lua" <<LUA
local function try(label, url)
  local ok, r = pcall(tools.call, "http.request", { url = url })
  if ok then print(label, "ok", r.status) else print(label, "error", r.code, r.message) end
end
try("allowedport", "http://127.0.0.1:$PA2/ok")
try("otherport", "http://127.0.0.1:$PB2/ok")
try("redirect", "http://127.0.0.1:$PA2/redirect?to=http://127.0.0.1:$PB2/x")
LUA
reset_logs
lrun "$WS/allow.lua"
expect_out "allowedport	ok	200" "an entry with scheme and port allows that origin"
expect_out "otherport	error	host_not_allowed	http.request: http://127.0.0.1:$PB2 is not allowed by http_allow" "another port of the host is refused"
expect_out "redirect	error	host_not_allowed	http.request: http://127.0.0.1:$PB2 is not allowed by http_allow" "a redirect to another port is refused"
[ "$(requests B)" = 0 ] && ok "B got no request (http_allow)" || fail "B was contacted despite http_allow"

# --- 5. config errors name the line --------------------------------------
printf 'return {\n  http_allow = { "127.0.0.1" },\n  secrets = {\n    API = { origin = { "http://x" } },\n  },\n}\n' > "$WS/luagent.lua"
lrun "$WS/allow.lua"
expect_rc 2 "an unknown key under secrets is an error"
expect_err "luagent.lua:4:" "it names the line"
expect_err "secrets.API.origin" "it names the key"
printf 'return {\n  secrets = {\n    API = { origins = { "https://api.github.com/user" } },\n  },\n}\n' > "$WS/luagent.lua"
lrun "$WS/allow.lua"
expect_rc 2 "an origin with a path is an error"
expect_err "luagent.lua:3:" "it names the line (origin with a path)"
expect_err "https://api.github.com/user" "it names the origin"
printf 'return {\n  http_allow = {\n    "ftp://example.com",\n  },\n}\n' > "$WS/luagent.lua"
lrun "$WS/allow.lua"
expect_rc 2 "an http_allow entry with another scheme is an error"
expect_err "ftp" "it names the scheme"
finish
