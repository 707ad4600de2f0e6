# Ctrl-C (SIGINT) during a streamed answer stops the run at once: the
# partial answer is printed and kept, the run is journaled as stopped, and
# the exit code is 1.
. "$(dirname "$0")/lib/mock.sh" "$1"
start_mock m '{"steps":[{"text":"This answer streams slowly, piece by piece, for many seconds.","chunk":4,"delay_ms":300}]}'
config "providers = { $(provider anthropic $PORT_m) }"
"$LUAGENT" --workspace "$WS" ask "talk slowly" > "$WS/out" 2> "$WS/err" &
pid=$!
for _ in $(seq 100); do [ "$(cat "$WS/out" 2>/dev/null | wc -c)" -ge 11 ] && break; sleep 0.1; done
kill -INT $pid
t0=$(date +%s)
wait $pid; RC=$?
t1=$(date +%s)
OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
expect_rc 1 "stopped run exits 1"
[ $((t1 - t0)) -le 2 ] && ok "stopped within $((t1 - t0)) s of Ctrl-C" || fail "took $((t1 - t0)) s to stop"
expect_out "This answer" "partial answer printed"
case "$OUT" in *"many seconds."*) fail "the answer should have been cut";; *) ok "the answer was cut";; esac
expect_err "stopped" "says it was stopped"
OUT=$("$LUAGENT" --workspace "$WS" runs list --json | python3 "$(dirname "$0")/lib/jsonl.py"); RC=0
printf '%s\n' "$OUT" | grep -q '"status":"stopped".*"result":"This answer' && ok "journaled as stopped with the partial answer" || fail "journal"
finish
