#!/bin/bash
# One chat per session at a time: a second `chat --session s1` while one
# has it open is refused naming the first (it would save its own copy of
# the history over the other's and lose its turns, silently), and so is
# `sessions delete s1` (the open chat would save it back); the lock goes
# with the process however it ends (kill -9 too), and the history holds
# every turn of the chats that ran. (Red team 9's F9.)
. "$(dirname "$0")/lib/common.sh"
cat > "$WS/luagent.lua" <<'LUA'
return { providers = { { name = "demo", kind = "script", turns = { { turns = { { text = "ok: %{user}" } } } } } } }
LUA
users() {
  python3 - "$WS/.luagent/state.db" <<'PY'
import json, sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=10)
print(",".join(json.loads(r[0])["content"] for r in c.execute(
    "SELECT content FROM messages WHERE session = 's1' AND role = 'user' ORDER BY seq")))
PY
}
(cd "$WS" && echo "before" | "$LUAGENT" chat --session s1 >/dev/null 2>&1) || fail "first chat"
mkfifo "$WS/in"
(cd "$WS" && exec "$LUAGENT" chat --session s1 <"$WS/in") >"$WS/a.out" 2>&1 &
A=$!
PIDS="$PIDS $A"
exec 3>"$WS/in"
echo "alpha 1" >&3
for _ in $(seq 100); do grep -q 'ok: alpha 1' "$WS/a.out" && break; sleep 0.1; done
grep -q 'ok: alpha 1' "$WS/a.out" || fail "chat A did not answer: $(cat "$WS/a.out")"
expect_rc 1 sh -c "cd '$WS' && echo beta | '$LUAGENT' chat --session s1" &&
  err_has "session s1 is open in another chat (pid $A)" && pass "a second chat on the session is refused, naming the first"
expect_rc 1 "$LUAGENT" sessions delete s1 && err_has "session s1 is open in another chat" &&
  pass "deleting a session open in a chat is refused"
(cd "$WS" && echo "other" | "$LUAGENT" chat --session s2 >/dev/null 2>&1) && pass "another session is free" ||
  fail "chat on s2"
echo "alpha 2" >&3
for _ in $(seq 100); do grep -q 'ok: alpha 2' "$WS/a.out" && break; sleep 0.1; done
exec 3>&-
wait $A || fail "chat A exited $?"
[ "$(users)" = "before,alpha 1,alpha 2" ] && pass "the history holds every turn" || fail "history: $(users)"
(cd "$WS" && echo "beta" | "$LUAGENT" chat --session s1 >/dev/null 2>&1) || fail "chat after A ended"
[ "$(users)" = "before,alpha 1,alpha 2,beta" ] && pass "once it ended, the next chat resumes it" || fail "history: $(users)"
# kill -9 lets go of it
(cd "$WS" && exec "$LUAGENT" chat --session s1 <"$WS/in") >"$WS/c.out" 2>&1 &
C=$!
exec 3>"$WS/in"
for _ in $(seq 50); do grep -q 'session s1' "$WS/c.out" && break; sleep 0.1; done
kill -KILL $C
wait $C 2>/dev/null
exec 3>&-
expect_rc 0 "$LUAGENT" sessions delete s1 && pass "a killed chat leaves no lock: the session can be deleted"
# the lock's name holding something else: refused at once, nothing of it touched
mkdir -p "$WS/.luagent/sessions"
echo "precious data" > "$WS/precious"
ln "$WS/precious" "$WS/.luagent/sessions/s3.lock"
expect_rc 2 sh -c "cd '$WS' && echo hi | '$LUAGENT' chat --session s3" && err_has "is not a plain lock file" &&
  pass "a hard link at the lock's name is refused"
[ "$(cat "$WS/precious")" = "precious data" ] && pass "and the file it links to is untouched" ||
  fail "the linked file now holds: $(cat "$WS/precious")"
mkfifo "$WS/.luagent/sessions/s4.lock"
expect_rc 2 timeout 10 sh -c "cd '$WS' && echo hi | '$LUAGENT' chat --session s4" && err_has "is not a plain lock file" &&
  pass "a FIFO at the lock's name is refused at once"
expect_rc 1 timeout 10 "$LUAGENT" sessions delete s4 && err_has "is not a plain lock file" &&
  pass "sessions delete too"
finish
