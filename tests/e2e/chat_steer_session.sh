# luagent chat: a turn with a tool; a line typed while the agent works is a
# steer that joins the next model request after the tool results (event
# "steer"), without restarting the turn; the history is kept in SQLite and
# a chat resumed with --session sends it again; sessions list / show.
. "$(dirname "$0")/lib/mock.sh" "$1"
DRIVE="$SRC/tests/e2e/lib/drive_chat.py"
start_mock m '{"steps":[
 {"text":"Let me check the depot first, one moment please.","chunk":3,"delay_ms":150,
  "tool_calls":[{"id":"c1","name":"echo","arguments":{"text":"depot A: 40 km"}}]},
 {"text":"Depot A is 25 miles away."},
 {"text":"You asked about depot A before."}]}'
config "providers = { $(provider openai $PORT_m) }"
chat() { # chat LOG-NAME ARGS... (script on stdin)
  python3 "$DRIVE" "$WS/m.log" "$WS/out" "$WS/err" -- "$LUAGENT" --workspace "$WS" chat "$@"
  RC=$?; OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
}
chat --session trip --tools echo <<'S'
say how far is depot A?
wait_requests 1
say please answer in miles
wait_requests 2
close
S
expect_rc 0 "chat ends at end of input"
expect_out "Depot A is 25 miles away." "answer streamed"
expect_err "[steer]" "the steer is shown as an event"
expect_err "session trip (new" "names the new session"
check m 'len(reqs) == 2' "the steer did not restart the turn (2 model calls)"
check m '[m["role"] for m in msgs(1)][-3:] == ["assistant", "tool", "user"] and msgs(1)[-1]["content"] == "please answer in miles"' \
  "request 2 carries the steer as a user message right after the tool result"
check m 'not any("miles" in json.dumps(m) for m in msgs(0))' "request 1 had no steer"

# resume: the next request carries the whole history
chat --session trip --tools echo <<'S'
say what did I ask?
wait_requests 3
close
S
expect_rc 0 "resumed chat"
expect_err "session trip (resumed, 5 messages" "resumed with its messages"
check m 'msgs(2)[1]["content"] == "how far is depot A?" and any(m.get("content") == "please answer in miles" for m in msgs(2)) and msgs(2)[-1]["content"] == "what did I ask?" and any("25 miles" in (m.get("content") or "") for m in msgs(2))' \
  "request 3 carries the earlier turn, its tool result, the steer and the answer"
check m 'any(m["role"] == "tool" and "40 km" in m["content"] for m in msgs(2))' "the tool result is in the history"

OUT=$("$LUAGENT" --workspace "$WS" sessions list --json); RC=$?
expect_rc 0 "sessions list --json"
printf '%s' "$OUT" | python3 -c 'import json,sys; s=json.load(sys.stdin); assert len(s)==1 and s[0]["name"]=="trip" and s[0]["messages"]==7 and s[0]["runs"]==2 and s[0]["last_user"]=="what did I ask?", s' \
  && ok "sessions list: one session, 7 messages, 2 runs, last question" || fail "sessions list json: $OUT"
OUT=$("$LUAGENT" --workspace "$WS" sessions list); RC=$?
expect_out "trip" "sessions list (text)"
OUT=$("$LUAGENT" --workspace "$WS" sessions show trip); RC=$?
expect_out "[user] please answer in miles" "sessions show lists the steer"
OUT=$("$LUAGENT" --workspace "$WS" runs list --json | python3 "$(dirname "$0")/lib/jsonl.py"); RC=$?
expect_out '"kind":"chat"' "turns are journaled as chat runs"
ERR=$("$LUAGENT" --workspace "$WS" chat --session 'bad name' </dev/null 2>&1); RC=$?
expect_rc 2 "a bad session name is a usage error"
expect_err "only letters, digits" "says what is allowed"
ERR=$("$LUAGENT" --workspace "$WS" sessions show nope 2>&1); RC=$?
expect_rc 1 "show of an unknown session"
expect_err "no session named 'nope'" "names it"
finish
