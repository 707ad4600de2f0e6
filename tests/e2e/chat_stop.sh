# Ctrl-C mid-tool: `luagent ask` whose model calls http.request on a
# 127.0.0.1 server that answers slowly stops at once; the run is journaled
# as "stopped" with the text the model streamed before the call; in `luagent
# chat` Ctrl-C stops the turn (the partial answer stays in the session) and
# the chat goes on; a second Ctrl-C exits 130.
. "$(dirname "$0")/lib/mock.sh" "$1"
DRIVE="$SRC/tests/e2e/lib/drive_chat.py"
SPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
cat > "$WS/slow.py" <<'PY'
import http.server, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(30)
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
python3 "$WS/slow.py" "$SPORT" & MOCK_PIDS="$MOCK_PIDS $!"
for _ in $(seq 50); do (echo > /dev/tcp/127.0.0.1/$SPORT) 2>/dev/null && break; sleep 0.1; done
start_mock m "{\"steps\":[{\"text\":\"Fetching the slow page now.\",\"tool_calls\":[{\"id\":\"c1\",\"name\":\"http.request\",\"arguments\":{\"url\":\"http://127.0.0.1:$SPORT/slow\"}}]},{\"text\":\"never sent\"}]}"
config "providers = { $(provider openai $PORT_m) }, http_allow = { \"127.0.0.1\" }"

"$LUAGENT" --workspace "$WS" ask --tools http.request "fetch the slow page" > "$WS/out" 2> "$WS/err" &
pid=$!
for _ in $(seq 100); do grep -q -- "-> http.request" "$WS/err" 2>/dev/null && break; sleep 0.1; done
sleep 0.3
t0=$(date +%s.%N)
kill -INT $pid
wait $pid; RC=$?
t1=$(date +%s.%N)
OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
expect_rc 1 "stopped ask exits 1"
python3 -c "import sys; sys.exit(0 if $t1 - $t0 < 2.5 else 1)" && ok "stopped mid-tool within $(python3 -c "print(round($t1 - $t0, 2))") s" || fail "took $(python3 -c "print($t1 - $t0)") s"
expect_out "Fetching the slow page now." "text before the tool call printed"
expect_err "stopped" "says stopped"
check m 'len(reqs) == 1' "no model call after the stop"
RUN=$("$LUAGENT" --workspace "$WS" runs list --json | python3 -c 'import json,sys; r=[x for x in json.load(sys.stdin) if x["kind"]=="ask"]; print(r[0]["id"], r[0]["status"], r[0].get("result"))')
case "$RUN" in *" stopped Fetching the slow page now."*) ok "journaled as stopped with the partial answer";; *) fail "runs list: $RUN";; esac
OUT=$("$LUAGENT" --workspace "$WS" runs show "${RUN%% *}" --json); RC=$?
expect_out '"code":"stopped"' "runs show has the tool's stopped result"

# Ctrl-C while a skill's Lua tool is busy: the sandbox watches the stop flag
stop_mocks
mkdir -p "$WS/skills/busy"
cat > "$WS/skills/busy/skill.lua" <<'LUA'
return {
  name = "busy", description = "Spin for a long time", keywords = { "spin" },
  tools = { spin = { description = "Spin", params = { type = "object" }, impact = "read",
    run = function() local n = 0; while true do n = n + 1 end end } },
}
LUA
start_mock k '{"steps":[{"text":"Spinning.","tool_calls":[{"id":"c1","name":"busy.spin","arguments":{}}]},{"text":"never"}]}'
config "providers = { $(provider openai $PORT_k) }, limits = { deadline_s = 60, instructions = 100000000000 }"
"$LUAGENT" --workspace "$WS" ask --tools busy.spin "spin please" > "$WS/out" 2> "$WS/err" &
pid=$!
for _ in $(seq 100); do grep -q -- "-> busy.spin" "$WS/err" 2>/dev/null && break; sleep 0.1; done
sleep 0.5
t0=$(date +%s.%N)
kill -INT $pid
wait $pid; RC=$?
t1=$(date +%s.%N)
OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
expect_rc 1 "stopped while a Lua tool spins"
python3 -c "import sys; sys.exit(0 if $t1 - $t0 < 2.5 else 1)" && ok "the sandbox stopped within $(python3 -c "print(round($t1 - $t0, 2))") s" || fail "took $(python3 -c "print($t1 - $t0)") s"
expect_err "busy.spin failed: error (stopped)" "the tool failed with code stopped"
rm -rf "$WS/skills"

# chat: Ctrl-C mid-stream stops the turn, the chat goes on with the next line
stop_mocks
start_mock c '{"steps":[{"text":"A long answer that streams very slowly so that it can be cut off halfway.","chunk":3,"delay_ms":200},{"text":"Second answer."}]}'
config "providers = { $(provider openai $PORT_c) }"
python3 "$DRIVE" "$WS/c.log" "$WS/out" "$WS/err" -- "$LUAGENT" --workspace "$WS" chat --session s1 <<'S'
say tell me a long story
wait_requests 1
sleep 0.8
sigint
wait_err stopped
say and now?
wait_requests 2
sleep 0.5
close
S
RC=$?; OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
expect_rc 0 "chat goes on after a stopped turn"
expect_out "Second answer." "next turn answered"
case "$OUT" in *"halfway."*) fail "the first answer should have been cut";; *) ok "first answer cut";; esac
check c 'msgs(1)[-2]["role"] == "assistant" and "[stopped by the operator]" in msgs(1)[-2]["content"] and msgs(1)[-2]["content"].startswith("A long")' \
  "the partial answer stays in the conversation, marked as stopped"
RUN=$("$LUAGENT" --workspace "$WS" runs list --json | python3 -c 'import json,sys; print(" ".join(x["status"] for x in json.load(sys.stdin) if x["kind"]=="chat"))')
case "$RUN" in *stopped*ok*|*ok*stopped*) ok "chat turns journaled: $RUN";; *) fail "chat runs: $RUN";; esac

# a second Ctrl-C exits at once with 130 (the first stopped the turn)
stop_mocks
start_mock d '{"steps":[{"text":"slow slow slow slow slow slow slow slow slow slow","chunk":2,"delay_ms":300}]}'
config "providers = { $(provider openai $PORT_d) }"
python3 "$DRIVE" "$WS/d.log" "$WS/out" "$WS/err" -- "$LUAGENT" --workspace "$WS" chat <<'S'
say go
wait_requests 1
sleep 0.5
sigint
sleep 0.2
sigint
S
RC=$?
expect_rc 130 "second Ctrl-C exits 130"
finish
