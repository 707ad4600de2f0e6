#!/bin/bash
# e2e: protocol revision 2026-07-28 (stateless) over stdio, against
# tests/mcp/fake_stateless.py: a server/discover probe first; a modern
# server gets no initialize and _meta (protocol version, client
# capabilities) on every request, every tools/list page included; a result
# asking for input (not supported yet) or with an unknown resultType is a
# clear error; a modern server offering only versions luagent does not
# speak is refused by name. Legacy servers that refuse the probe (an error,
# silence, dying) and a dual-era one offering only 2025-11-25 get
# initialize exactly as before, with no _meta.
set -u
. "$(dirname "$0")/lib/common.sh"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed for the fake MCP server" >&2; exit 1; }
cp "$(dirname "$0")/../mcp/fake_stateless.py" "$WS/fake.py"
LOG="$WS/fake.log"
PIDS="$WS/fake.pids"
conf() { # MODE [timeout_s]
  rm -f "$LOG" "$PIDS" "$WS"/.luagent/mcp-servers/* 2>/dev/null
  printf 'return {\n  mcp = { servers = { fake = { command = "python3", args = { "%s" }, timeout_s = %s,\n    env = { FAKE_MODE = "%s", FAKE_LOG = "%s", FAKE_PIDS = "%s" } } } },\n}\n' \
    "$WS/fake.py" "${2:-5}" "$1" "$LOG" "$PIDS" > "$WS/luagent.lua"
}
methods() { python3 -c 'import json,sys; print(" ".join(json.loads(l).get("method","?") for l in open(sys.argv[1])))' "$LOG"; }
cat > "$WS/t.lua" <<'LUA'
for _, n in ipairs({ "echo", "ask", "odd" }) do
  local ok, r = pcall(tools.call, "mcp.fake." .. n, n == "echo" and { text = "hi" } or {})
  print(n .. " " .. (ok and "OK " .. r.text or "ERR " .. r.code .. " " .. r.message))
end
LUA

# 1. modern: discover, no initialize, _meta everywhere
conf modern
expect_rc 0 timeout 30 "$LUAGENT" mcp trust fake --yes && out_has "fake-stateless 9.9, protocol 2026-07-28" && pass "modern: server/discover gives 2026-07-28 and serverInfo (from the result's _meta)"
[ "$(methods)" = "server/discover tools/list tools/list" ] && pass "modern: no initialize, both tools/list pages" || fail "modern messages: $(methods)"
python3 - "$LOG" <<'PY' && pass "modern: every request carries protocolVersion, clientCapabilities and clientInfo" || fail "modern _meta: $(head -c 600 "$LOG")"
import json, sys
msgs = [json.loads(l) for l in open(sys.argv[1])]
for m in msgs:
    meta = m["params"]["_meta"]
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28", m
    assert meta["io.modelcontextprotocol/clientCapabilities"] == {}, m
    assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "luagent", m
assert msgs[2]["params"]["cursor"] == "page2"
PY
expect_rc 0 timeout 30 "$LUAGENT" run t.lua
out_has "echo OK echo: hi meta=io.modelcontextprotocol/clientCapabilities,io.modelcontextprotocol/clientInfo,io.modelcontextprotocol/protocolVersion caps={}" && pass "modern: tools/call carries _meta (the fake refuses it otherwise)"
out_has "ask ERR mcp_unsupported" && out_has "input_required" && pass "modern: a result asking for input is a clear error, the run goes on"
out_has "odd ERR mcp_protocol" && out_has "unknown resultType 'later'" && pass "modern: an unknown resultType is refused"
grep -q '"initialize"' "$LOG" && fail "modern: initialize was sent" || pass "modern: calls start no handshake either"

# 2. legacy servers: the probe fails, initialize as before, no _meta; one
# that does not answer the probe in time (silent, or slow to start) is kept
# running and gets initialize; one that dies on it is started again
for mode in refuse silent slow die dual; do
  conf $mode 2
  start=$(date +%s)
  expect_rc 0 timeout 30 "$LUAGENT" mcp trust fake --yes && out_has "protocol 2025-11-25" && pass "$mode: falls back to initialize (2025-11-25)"
  took=$(( $(date +%s) - start ))
  want="server/discover initialize notifications/initialized tools/list"
  case $mode in silent|slow) want="server/discover notifications/cancelled initialize notifications/initialized tools/list" ;; esac
  [ "$(methods)" = "$want" ] && pass "$mode: discover, then the handshake as before" || fail "$mode messages: $(methods)"
  procs=$(wc -l < "$PIDS")
  if [ $mode = die ]; then [ "$procs" = 2 ] && pass "die: started again for initialize" || fail "die: $procs process(es)"
  else [ "$procs" = 1 ] && pass "$mode: one process, not restarted by the probe" || fail "$mode: $procs process(es)"; fi
  [ "$mode" = silent ] && { [ "$took" -le 6 ] && pass "silent: the probe waits at most timeout_s (took ${took}s)" || fail "silent: took ${took}s"; }
  expect_rc 0 timeout 30 "$LUAGENT" run t.lua
  out_has "echo OK echo: hi" && pass "$mode: calls work"
  grep -q "modern _meta on a legacy session" "$WS/.out" && fail "$mode: _meta sent to a legacy server" || pass "$mode: no modern _meta after initialize"
  python3 - "$LOG" <<'PY' || fail "$mode: a legacy request carried _meta: $(head -c 600 "$LOG")"
import json, sys
for l in open(sys.argv[1]):
    m = json.loads(l)
    if m.get("method") != "server/discover":
        assert "io.modelcontextprotocol/protocolVersion" not in (m.get("params") or {}).get("_meta", {}), m
PY
done

# 3. a modern server that speaks only a version luagent does not
conf future
expect_rc 1 timeout 30 "$LUAGENT" mcp trust fake --yes
err_has "speaks protocol versions 2027-01-01 (server/discover)" && pass "future: no common version, named"
grep -q '"initialize"' "$LOG" && fail "future: fell back to initialize after a modern error" || pass "future: a modern error does not fall back to initialize"
finish
