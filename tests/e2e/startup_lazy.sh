# libcurl, libmicrohttpd (and libpq) are loaded when first used, not at start
# (base/dynlib.h): commands that make no HTTP request never load them, the
# ones that do still work, and a library that cannot be loaded is a clear
# error naming it (what to install, the variable that names another file),
# never a crash or a vague "cannot initialise".
. "$(dirname "$0")/lib/mock.sh" "$1"

# loaded CMD...: the shared objects the dynamic loader opened for CMD
# (LD_DEBUG=files), one file name a line, in $WS/loaded
loaded() {
  (cd "$WS" && LD_DEBUG=files "$@") >/dev/null 2>"$WS/ld.err"
  RC=$?
  sed -n 's/.*file=\([^ ]*\) \[0\];.*/\1/p' "$WS/ld.err" |
    sort -u >"$WS/loaded"
  OUT=""; ERR=$(tail -c 400 "$WS/ld.err")
}
has_lib() { grep -q "$1" "$WS/loaded"; }

config 'approver = "auto",'
# -- the check itself must see libraries, or it proves nothing
loaded "$LUAGENT" version
grep -q 'libc.so' "$WS/loaded" && ok "LD_DEBUG=files lists the loaded libraries" ||
  fail "LD_DEBUG=files shows no libc: this check cannot see what is loaded ($(head -c 300 "$WS/ld.err"))"

# -- commands without HTTP load neither library
for cmd in "version" "help" "tools list" "check" "runs list"; do
  loaded "$LUAGENT" --workspace "$WS" $cmd
  [ "$RC" = 0 ] || fail "luagent $cmd: exit $RC ($ERR)"
  if has_lib libcurl || has_lib libmicrohttpd; then
    fail "luagent $cmd loaded $(grep -E 'libcurl|libmicrohttpd' "$WS/loaded" | tr '\n' ' ')"
  else
    ok "luagent $cmd: neither libcurl nor libmicrohttpd loaded"
  fi
  has_lib libgnutls && fail "luagent $cmd loaded GnuTLS" || true
  has_lib libpq && fail "luagent $cmd loaded libpq (store/pq_dyn.h: forward it, do not link it)" || true
done

# -- a scripted model needs no network: ask answers without loading libcurl
config 'approver = "auto", providers = { { name = "demo", kind = "script", turns = { { tool = "echo", args = { n = 1 } }, { text = "Scripted, forty-two." } } } }'
loaded "$LUAGENT" --workspace "$WS" ask "go"
[ "$RC" = 0 ] && ok "ask with a scripted provider (exit 0)" || fail "scripted ask: exit $RC ($ERR)"
has_lib libcurl && fail "a scripted ask loaded libcurl" || ok "a scripted ask: libcurl not loaded"

# -- a real model call loads libcurl, and works through the forwarders
start_mock m '{"by_turn": true, "steps": [{"text": "Checking.", "tool_calls": [{"id": "c1", "name": "echo", "arguments": {"n": 1}}]}, {"text": "Done, forty-two."}]}'
config "approver = \"auto\", providers = { $(provider openai $PORT_m) }"
loaded "$LUAGENT" --workspace "$WS" ask "go"
[ "$RC" = 0 ] && ok "ask against the mock (exit 0)" || fail "ask against the mock: exit $RC"
has_lib libcurl && ok "ask loaded libcurl" || fail "ask did not load libcurl: $(tr '\n' ' ' <"$WS/loaded")"
has_lib libmicrohttpd && fail "ask loaded libmicrohttpd" || ok "ask: libmicrohttpd not loaded"
ask "go again"
expect_rc 0 "a second ask"
expect_out "Done, forty-two." "the answer came through libcurl"

# -- libcurl missing: each HTTP path says so, and which library and package
export LUAGENT_LIBCURL=/nonexistent/libcurl.so.4
ask "go"
expect_rc 1 "ask without libcurl fails"
expect_err "libcurl could not be loaded" "ask: the error names libcurl"
expect_err "/nonexistent/libcurl.so.4" "ask: the error names the file tried"
expect_err "libcurl4" "ask: the error names the package"
expect_err "LUAGENT_LIBCURL" "ask: the error names the variable"
cat >"$WS/h.lua" <<'EOF'
local ok, e = pcall(tools.call, "http.request", { url = "http://127.0.0.1:9/" })
print(ok, e.code, e.message)
EOF
config 'approver = "auto", http_allow = { "127.0.0.1" },'
lrun "$WS/h.lua"
expect_rc 0 "http.request without libcurl: the script sees an error"
expect_out "false	library	http.request: libcurl could not be loaded" "http.request: a structured error naming libcurl"
LIBC=$(ldd "$LUAGENT" | awk '$1 ~ /^libc\.so/ { print $3 }')
export LUAGENT_LIBCURL=$LIBC
lrun "$WS/h.lua"
expect_out "has no curl_" "a library that is not libcurl: the missing function is named"
unset LUAGENT_LIBCURL

# -- libmicrohttpd missing: the console and mcp serve --http refuse to start, saying why
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
RC=0
LUAGENT_LIBMICROHTTPD=/nonexistent/libmicrohttpd.so.12 timeout 20 "$LUAGENT" --workspace "$WS" \
  console "127.0.0.1:$PORT" --quiet >"$WS/out" 2>"$WS/err" || RC=$?
OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
expect_rc 1 "console without libmicrohttpd fails at once"
expect_err "console: libmicrohttpd could not be loaded" "console: the error names libmicrohttpd"
expect_err "LUAGENT_LIBMICROHTTPD" "console: the error names the variable"
[ ! -e "$WS/.luagent/console.token" ] && ok "console: no token made for a server that cannot start" ||
  fail "console: a token was written"
RC=0
LUAGENT_LIBMICROHTTPD=/nonexistent/libmicrohttpd.so.12 timeout 20 "$LUAGENT" --workspace "$WS" \
  mcp serve --http "127.0.0.1:$PORT" </dev/null >"$WS/out" 2>"$WS/err" || RC=$?
OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
[ "$RC" != 0 ] && [ "$RC" != 124 ] && ok "mcp serve --http without libmicrohttpd fails at once (exit $RC)" ||
  fail "mcp serve --http without libmicrohttpd: exit $RC"
expect_err "libmicrohttpd could not be loaded" "mcp serve --http: the error names libmicrohttpd"

finish
