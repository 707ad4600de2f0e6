# Helpers for the daemon end-to-end tests (sourced after common.sh).
DLOG="$WS/daemon.log"
DPID=""
mkdir -p "$WS/automations"
# start_daemon [extra daemon options]: background daemon, output in $DLOG
# It returns once this daemon has said it started (it holds the workspace's
# lock by then): the log is appended to, so a line of an earlier daemon in
# it does not count (a slow start, under ASan, let a test go on before the
# lock was taken).
start_daemon() {
  local before
  before=$(grep -c 'luagent daemon .* (pid' "$DLOG" 2>/dev/null)
  (cd "$WS" && exec "$LUAGENT" --workspace "$WS" daemon --grace 3s --kill-grace 1s "$@") >>"$DLOG" 2>&1 &
  DPID=$!
  PIDS="$PIDS $DPID"
  wait_for 10 "[ \$(grep -c 'luagent daemon .* (pid' '$DLOG') -gt ${before:-0} ]" ||
    fail "daemon did not start: $(tail -5 "$DLOG")"
}
# stop_daemon: SIGTERM, expect exit 0
stop_daemon() {
  kill -TERM "$DPID"
  wait "$DPID"
  local rc=$?
  [ "$rc" = 0 ] && pass "SIGTERM: daemon exited 0" || fail "daemon exited $rc after SIGTERM: $(tail -5 "$DLOG")"
  if grep -Eq "AddressSanitizer|LeakSanitizer|runtime error:|ended unexpectedly" "$DLOG"; then
    fail "sanitizer or worker trouble in the daemon log: $(grep -E -m3 "Sanitizer|runtime error|unexpectedly" "$DLOG")"
  fi
}
# wait_for SECONDS 'shell condition'
wait_for() {
  local end=$(( $(date +%s%N) / 1000000 + $1 * 1000 ))
  while [ $(( $(date +%s%N) / 1000000 )) -lt $end ]; do
    eval "$2" && return 0
    sleep 0.1
  done
  return 1
}
# q 'SQL': prints rows tab-separated (python's sqlite3: no CLI needed)
q() {
  python3 - "$WS/.luagent/state.db" "$1" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=10)
for row in c.execute(sys.argv[2]):
    print("\t".join("" if v is None else str(v) for v in row))
PY
}
# A local HTTP server: /slow?d=SECONDS answers after a delay, /hang never does,
# /gate?g=NAME answers once the file $WS/gate-NAME exists (at most 120 s), so a
# run stays in progress exactly until the test lets it go, whatever the load.
# on_two_cpus: $LUAGENT runs under taskset on CPUs 0 and 1 where the
# machine has more (the daemon's burst workers are one per CPU: two, as on
# the 2-core machines the tests are written for)
on_two_cpus() {
  [ "$(nproc)" -gt 2 ] || return 0
  printf '#!/bin/sh\nexec taskset -c 0,1 "%s" "$@"\n' "$LUAGENT" > "$WS/luagent-on-2-cpus"
  chmod +x "$WS/luagent-on-2-cpus"
  LUAGENT=$WS/luagent-on-2-cpus
}
# gated_automation NAME N: automations/NAME.lua, every second, a short run
# until its Nth, which waits for the file $WS/gate-NAME (start_http's
# /gate): a run that turns slow, on whichever worker it got
gated_automation() {
  cat > "$WS/automations/$1.lua" <<LUA
return { every = "1s", timeout = "60s", run = function(ctx)
  ctx.state.n = (ctx.state.n or 0) + 1
  if ctx.state.n == $2 then
    tools.call("http.request", { url = "http://127.0.0.1:$HTTP_PORT/gate?g=$1", timeout_s = 60 })
  end
end }
LUA
}
start_http() {
  HTTP_PORT=$(free_port)
  cat > "$WS/httpd.py" <<'PY'
import http.server, os, socketserver, sys, time, urllib.parse
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        qs = urllib.parse.parse_qs(u.query)
        if u.path == "/hang":
            time.sleep(3600)
        if u.path == "/gate":
            f = os.path.join(sys.argv[2], "gate-" + qs["g"][0])
            for _ in range(6000):
                if os.path.exists(f): break
                time.sleep(0.02)
        if u.path == "/slow":
            time.sleep(float(qs.get("d", ["1"])[0]))
        body = b"ok"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
  python3 "$WS/httpd.py" "$HTTP_PORT" "$WS" 2>/dev/null & PIDS="$PIDS $!"
  wait_for 5 "(echo > /dev/tcp/127.0.0.1/$HTTP_PORT) 2>/dev/null" || fail "http server did not start"
  printf 'return { http_allow = { "127.0.0.1" } }\n' > "$WS/luagent.lua"
}
