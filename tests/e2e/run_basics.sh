#!/bin/bash
# luagent run: the fs round trip, limits, exit codes, config errors, output
# escaping, fs confinement and http.request with its allow-list.
. "$(dirname "$0")/lib/common.sh"

cat > "$WS/roundtrip.lua" <<'LUA'
tools.call("fs.write", { path = "notes/today.txt", content = "buy milk" })
local r = tools.call("fs.read", { path = "notes/today.txt" })
print("read back: " .. r.content .. " (" .. r.size .. " bytes)")
print("arg: " .. tostring(args.who))
LUA
expect_rc 0 "$LUAGENT" run roundtrip.lua --arg who=operator && out_has "read back: buy milk (8 bytes)" && out_has "arg: operator" && pass "fs round trip"
[ -f "$WS/data/notes/today.txt" ] && pass "file lands in data/" || fail "data/notes/today.txt missing"

echo 'while true do end' > "$WS/spin.lua"
start=$(date +%s)
expect_rc 1 "$LUAGENT" run spin.lua && err_has "spin.lua:1: instruction limit" && pass "instruction limit"
[ $(( $(date +%s) - start )) -lt 30 ] || fail "instruction limit took too long"

echo 'local t = {} for i = 1, 1e9 do t[i] = string.rep("x", 1000) .. i end' > "$WS/bomb.lua"
expect_rc 1 "$LUAGENT" run bomb.lua && err_has "memory limit" && err_has "[limit_memory]" && pass "memory limit"

cat > "$WS/pcallspin.lua" <<'LUA'
while true do pcall(function() while true do end end) end
LUA
expect_rc 1 "$LUAGENT" run pcallspin.lua && err_has "instruction limit" && pass "limit through pcall"

echo 'error("bad thing")' > "$WS/err.lua"
expect_rc 1 "$LUAGENT" run err.lua && err_has "err.lua:1: bad thing" && pass "script error with file:line"
echo 'local x = ' > "$WS/syntax.lua"
expect_rc 1 "$LUAGENT" run syntax.lua && err_has "syntax.lua:2:" && pass "syntax error with file:line"
if grep -q "$WS" "$WS/.err"; then fail "host path leaked in error"; else pass "no host path in errors"; fi

expect_rc 2 "$LUAGENT" run && err_has "usage" && pass "usage error exits 2"
expect_rc 2 "$LUAGENT" run x.lua --bogus && pass "unknown option exits 2"
expect_rc 2 "$LUAGENT" frobnicate && pass "unknown command exits 2"
expect_rc 2 "$LUAGENT" run missing.lua && err_has "missing.lua: no such file" && pass "missing script named (a usage error)"
expect_rc 0 "$LUAGENT" version && out_has "luagent " && pass "version"
expect_rc 0 "$LUAGENT" tools list && out_has "fs.read" && out_has "http.request" && pass "tools list"
expect_rc 0 "$LUAGENT" run roundtrip.lua --workspace "$WS" --arg who=w && out_has "arg: w" && pass "--workspace after the command"
expect_rc 0 "$LUAGENT" --workspace="$WS" run roundtrip.lua && pass "--workspace=DIR"
expect_rc 2 "$LUAGENT" run roundtrip.lua --workspace && err_has "--workspace needs a directory" && pass "--workspace without a value"

# Output is escaped and bounded: no terminal escapes or forged log lines.
printf 'print("a\\27[2Jb")\nlog.info("line1\\nFORGED")\n' > "$WS/esc.lua"
expect_rc 0 "$LUAGENT" run esc.lua
if grep -q $'\x1b' "$WS/.out"; then fail "ESC reached stdout"; else out_has 'a\x1b[2Jb' && pass "control characters escaped"; fi
err_has 'line1\nFORGED' && pass "log newline escaped"
echo 'for i = 1, 1e6 do print(string.rep("z", 100)) end' > "$WS/flood.lua"
expect_rc 0 "$LUAGENT" run flood.lua
sz=$(wc -c < "$WS/.out")
[ "$sz" -lt 1200000 ] && out_has "output limit reached" && pass "output bounded ($sz bytes)" || fail "output not bounded: $sz bytes"

# Config: unknown key and wrong type name the file, line and key.
cat > "$WS/luagent.lua" <<'LUA'
return {
  limits = { memory_mb = 64 },
  colour = "blue",
}
LUA
expect_rc 2 "$LUAGENT" run roundtrip.lua && err_has "luagent.lua:3: key 'colour': unknown key" && pass "unknown config key"
printf 'return {\n  limits = { deadline_s = "soon" },\n}\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" run roundtrip.lua && err_has "luagent.lua:2: key 'limits.deadline_s'" && pass "wrong config type"
printf 'return { limits = { instructions = 1e5 } }\n' > "$WS/luagent.lua"
expect_rc 1 "$LUAGENT" run spin.lua && err_has "instruction limit of 100000" && pass "limits from config"
printf 'return {\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" run roundtrip.lua && err_has "luagent.lua:" && pass "config syntax error"
rm "$WS/luagent.lua"

# fs confinement: .., absolute paths and symlinks out of data/ are refused.
mkdir -p "$WS/data" && ln -s /etc "$WS/data/etc" && ln -s /etc/passwd "$WS/data/pw"
cat > "$WS/escape.lua" <<'LUA'
for _, p in ipairs({ "../luagent.lua", "/etc/passwd", "etc/passwd", "pw", "a/../../x" }) do
  local ok, err = pcall(tools.call, "fs.read", { path = p })
  print(p, ok, err.code)
end
local ok, err = pcall(tools.call, "fs.write", { path = "etc/evil", content = "x" })
print("write via symlink", ok, err.code)
LUA
expect_rc 0 "$LUAGENT" run escape.lua
if grep -q "true" "$WS/.out"; then fail "an escape succeeded: $(cat "$WS/.out")"; else pass "fs confinement"; fi
[ -e /etc/evil ] && fail "wrote through symlink"

# http.request: allowed host, refused host, redirect to a refused host.
PORT=$(free_port)
cat > "$WS/srv.py" <<'PY'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/redir":
            self.send_response(302); self.send_header("Location", "http://localhost.invalid/x"); self.end_headers(); return
        body = ("hello " + self.headers.get("X-Who", "?")).encode()
        self.send_response(200); self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
python3 "$WS/srv.py" "$PORT" & PIDS="$PIDS $!"
for i in $(seq 50); do (echo > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
printf 'return { http_allow = { "127.0.0.1" } }\n' > "$WS/luagent.lua"
cat > "$WS/http.lua" <<LUA
local r = tools.call("http.request", { url = "http://127.0.0.1:$PORT/", headers = { ["X-Who"] = "luagent" } })
print("status", r.status, r.body, r.headers["content-type"])
local ok, err = pcall(tools.call, "http.request", { url = "http://127.0.0.1:$PORT/redir" })
print("redirect", ok, err.code)
ok, err = pcall(tools.call, "http.request", { url = "http://localhost:$PORT/" })
print("other host", ok, err.code)
LUA
expect_rc 0 "$LUAGENT" run http.lua && out_has "status	200	hello luagent	text/plain" && out_has "redirect	false	host_not_allowed" && out_has "other host	false	host_not_allowed" && pass "http.request allow-list"

finish
