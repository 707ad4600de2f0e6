#!/bin/bash
# Two consoles started at the same moment on a fresh workspace and one
# address (`luagent daemon --console` and `luagent console` both default
# to 127.0.0.1:8765): one listens, and its token is in
# .luagent/console.token and printed by it if it made it; the other says
# the port is taken and makes nothing. (Red team 9's F4: the one that
# could not bind deleted the token the other had read, so nobody could
# log in; or one read the other's half-written token file.)
. "$(dirname "$0")/lib/common.sh"
ok=0
for t in $(seq 1 12); do
  W="$WS/w$t"
  mkdir -p "$W"
  PORT=$(free_port)
  (cd "$W" && exec "$LUAGENT" console 127.0.0.1:$PORT) >"$W/c1" 2>&1 &
  A=$!
  (cd "$W" && exec "$LUAGENT" console 127.0.0.1:$PORT) >"$W/c2" 2>&1 &
  B=$!
  PIDS="$PIDS $A $B"
  up=""
  for _ in $(seq 50); do
    for f in c1 c2; do grep -q '^console: http' "$W/$f" && up=$f; done
    [ -n "$up" ] && break
    sleep 0.1
  done
  other=c2; [ "$up" = c2 ] && other=c1
  for _ in $(seq 50); do grep -q 'cannot listen' "$W/$other" && break; sleep 0.1; done
  tok=$(cat "$W/.luagent/console.token" 2>/dev/null)
  if [ -z "$up" ]; then
    fail "try $t: no console listens: $(cat "$W/c1" "$W/c2")"
  elif [ ${#tok} != 64 ]; then
    fail "try $t: a console listens but the token file holds '${tok}': $(cat "$W/c1" "$W/c2")"
  elif ! grep -q 'cannot listen on 127.0.0.1:'"$PORT"'.*another console or program has the port' "$W/$other"; then
    fail "try $t: the second console did not say the port is taken: $(cat "$W/$other")"
  elif ! grep -q "#token=$tok" "$W/$up"; then
    fail "try $t: the console that made the token did not print it: $(cat "$W/$up")"
  else
    python3 - "$PORT" "$tok" "$(dirname "$0")/lib" <<'PY' && ok=$((ok + 1)) || fail "try $t: cannot log in with the file's token"
import sys
sys.path.insert(0, sys.argv[3])
from console_client import Console
sys.exit(0 if Console(int(sys.argv[1])).login(sys.argv[2])[0] == 200 else 1)
PY
  fi
  kill $A $B 2>/dev/null
  wait $A $B 2>/dev/null
done
[ "$ok" = 12 ] && pass "12 of 12 races: one console, its token on disk and printed once, login works"
finish
