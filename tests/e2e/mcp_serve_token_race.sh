#!/bin/bash
# Two `luagent mcp serve --http` started at the same moment on a fresh
# workspace both accept the token in .luagent/mcp/serve.token (what the
# README tells clients to send), and only the one that made it prints it.
# (Red team 9's F6: each made its own and renamed it over the file; the
# server whose rename lost refused the file's token as long as it ran.)
. "$(dirname "$0")/lib/common.sh"
command -v curl >/dev/null || { fail "curl is needed"; finish; }
INIT='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
good=0
for t in $(seq 1 6); do
  W="$WS/w$t"
  mkdir -p "$W"
  P1=$(free_port); P2=$(free_port)
  (cd "$W" && exec "$LUAGENT" mcp serve --http 127.0.0.1:$P1 </dev/null) >"$W/m1" 2>&1 &
  A=$!
  (cd "$W" && exec "$LUAGENT" mcp serve --http 127.0.0.1:$P2 </dev/null) >"$W/m2" 2>&1 &
  B=$!
  PIDS="$PIDS $A $B"
  for _ in $(seq 50); do
    [ "$(grep -l 'bearer token' "$W/m1" "$W/m2" 2>/dev/null | wc -l)" = 2 ] && break
    sleep 0.1
  done
  tok=$(cat "$W/.luagent/mcp/serve.token" 2>/dev/null)
  ok=1
  for p in $P1 $P2; do
    for _ in $(seq 30); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $p))" 2>/dev/null && break; sleep 0.1; done
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $tok" -H 'Content-Type: application/json' \
      -H 'Accept: application/json, text/event-stream' -d "$INIT" "http://127.0.0.1:$p/mcp")
    [ "$code" = 200 ] || { ok=0; fail "try $t: the server on $p answers $code to the file's token"; }
  done
  shown=$(grep -c "shown once" "$W/m1" "$W/m2" | awk -F: '{s += $2} END {print s}')
  [ "$shown" = 1 ] || { ok=0; fail "try $t: the token was printed by $shown servers: $(cat "$W/m1" "$W/m2")"; }
  [ $ok = 1 ] && good=$((good + 1))
  kill $A $B 2>/dev/null
  wait $A $B 2>/dev/null
done
[ "$good" = 6 ] && pass "6 of 6 races: both servers take the file's token, printed once"
finish
