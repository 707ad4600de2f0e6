#!/bin/bash
# e2e: the reference server @modelcontextprotocol/server-everything (pinned
# in tests/mcp): trust, list, call every tool from Lua (its elicitations
# declined: no operator) and tools from `ask` with the scripted model; a
# denied and an escalated call; a tool that needs tasks is left out, named;
# the server/discover probe (2026-07-28) and the fallback to initialize.
set -u
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/mcp_node.sh"
need_node_bin mcp-server-everything
conf() { printf 'return {\n  mcp = { servers = { everything = { command = "%s", args = { "stdio" } } } },\n%s\n}\n' "$NODE_BIN/mcp-server-everything" "${1:-}" > "$WS/luagent.lua"; }
conf

expect_rc 0 timeout 60 "$LUAGENT" mcp trust everything --yes && out_has "mcp-servers/everything" && out_has "protocol 2025-11-25" && pass "trust: initialize negotiated 2025-11-25"
expect_rc 0 "$LUAGENT" mcp list && out_has "14 tool(s)" && out_has "simulate-research-query' can only be called as a task" && pass "14 tools (2 of them because luagent offers elicitation); the task-only tool is left out, named"
expect_rc 0 "$LUAGENT" tools list --json
python3 - "$WS/.out" <<'PY' && pass "impact and open_world from annotations" || fail "annotations: $(grep everything "$WS/.out" | head -c 800)"
import json, sys
t = {j["name"]: j for j in json.load(open(sys.argv[1]))}
assert t["mcp.everything.echo"]["impact"] == "read" and t["mcp.everything.echo"]["open_world"] is False
g = t["mcp.everything.gzip-file-as-resource"]
assert g["impact"] == "medium" and g["open_world"] is True, g
assert t["mcp.everything.echo"]["params"]["required"] == ["message"]
PY

# every tool, from Lua
cat > "$WS/all.lua" <<'LUA'
local calls = {
  { "echo", { message = "hi" } },
  { "get-annotated-message", { messageType = "success", includeImage = true } },
  { "get-env", {} },
  { "get-resource-links", { count = 2 } },
  { "get-resource-reference", { resourceType = "Text", resourceId = 1 } },
  { "get-structured-content", { location = "Chicago" } },
  { "get-sum", { a = 2, b = 3 } },
  { "get-tiny-image", {} },
  { "gzip-file-as-resource", { name = "h.gz", data = "data:text/plain;base64,aGVsbG8=", outputType = "resource" } },
  { "toggle-simulated-logging", {} },
  { "toggle-subscriber-updates", {} },
  { "trigger-long-running-operation", { duration = 1, steps = 2 } },
  { "trigger-elicitation-request", {} },
  { "trigger-url-elicitation", { url = "https://example.com/consent" } },
}
local listed = 0
for _, t in ipairs(tools.list()) do if t.name:find("^mcp%.everything%.") then listed = listed + 1 end end
print("listed " .. listed)
for _, c in ipairs(calls) do
  local ok, r = pcall(tools.call, "mcp.everything." .. c[1], c[2])
  local kinds = {}
  if ok then for _, b in ipairs(r.content) do kinds[#kinds + 1] = b.type end end
  print(c[1] .. " " .. (ok and "OK " .. table.concat(kinds, ",") or "ERR " .. r.code .. " " .. r.message))
  if ok and r.structured then print("structured " .. json.encode(r.structured)) end
  if ok and c[1] == "echo" then print("text " .. r.text) end
  if ok and c[1] == "get-sum" then print("text " .. r.text) end
  if ok and c[1]:find("elicitation") then print("elicitation " .. c[1] .. " " .. tostring((r.text or ""):find("decline") ~= nil)) end
end
local ok, e = pcall(tools.call, "mcp.everything.get-sum", { a = "two", b = 3 })
print("bad args " .. e.code)
local ok2, e2 = pcall(tools.call, "mcp.everything.simulate-research-query", { topic = "x" })
print("task tool " .. e2.code)
LUA
expect_rc 0 timeout 120 "$LUAGENT" run all.lua </dev/null
out_has "listed 14" && pass "tools.list shows the 14"
n=$(grep -c " OK " "$WS/.out"); [ "$n" = 14 ] && pass "all 14 tools called" || fail "$n of 14 tools OK: $(grep ERR "$WS/.out")"
out_has "elicitation trigger-elicitation-request true" && out_has "elicitation trigger-url-elicitation true" && pass "the server's elicitations (form, url) are declined without an operator"
out_has "text Echo: hi" && out_has "text The sum of 2 and 3 is 5." && pass "text results"
out_has "get-annotated-message OK text,image" && out_has "get-tiny-image OK text,image,text" && pass "image blocks"
out_has "get-resource-reference OK text,resource" && out_has "get-resource-links OK text,resource_link" && out_has "gzip-file-as-resource OK resource" && pass "resource blocks"
out_has 'structured {"' && out_has '"conditions"' && pass "structuredContent, checked against outputSchema"
out_has "bad args invalid_args" && pass "inputSchema enforced by luagent"
out_has "task tool unknown_tool" && pass "the left-out tool does not exist"

# resources and prompts from Lua: through the pipeline (audited), open world
cat > "$WS/res.lua" <<'LUA'
local rs = mcp.resources("everything")
print("resources " .. #rs .. " " .. rs[1].uri)
local r = mcp.read("everything", rs[1].uri)
print("read " .. r.contents[1].uri .. " " .. tostring(#(r.text or "") > 0))
print("prompt " .. mcp.prompt("everything", "args-prompt", { city = "Paris" }).messages[1].content.text)
local ok, e = pcall(mcp.read, "nope", "x")
print("unknown " .. e.code)
local ok2, e2 = pcall(mcp.prompt, "everything", 5)
print("bad " .. e2.code)
for _, t in ipairs(tools.list()) do if t.name == "mcp.read" then print("mcp.read " .. t.impact .. " " .. tostring(t.open_world)) end end
LUA
expect_rc 0 timeout 60 "$LUAGENT" run res.lua
out_has "resources " && out_has "demo://resource" && pass "mcp.resources lists them"
out_has "read demo://resource" && out_has " true" && pass "mcp.read reads one"
out_has "prompt What's weather in Paris" && pass "mcp.prompt fills one"
out_has "unknown mcp_unknown" && out_has "bad invalid_args" && pass "bad server and bad arguments are errors"
out_has "mcp.read read true" && pass "resources are read impact, open world"
expect_rc 0 "$LUAGENT" audit tail -n 20 && out_has "tool=mcp.read" && out_has "tool=mcp.prompt" && pass "resource and prompt reads are audited"

# from ask with the scripted model
conf 'providers = { { kind = "script", turns = { { tool = "mcp.everything.get-sum", args = { a = 40, b = 2 } }, { text = "model saw: %{result}" } } } },'
expect_rc 0 timeout 60 "$LUAGENT" ask "add" && out_has "model saw:" && out_has "The sum of 40 and 2 is 42." && pass "ask: the model calls an MCP tool"
# denied
conf 'providers = { { kind = "script", turns = { { tool = "mcp.everything.get-env", args = {} }, { text = "model saw: %{result}" } } } },
  rules = { { tool = "mcp.everything.get-env", caller = "model", action = "deny", reason = "env is private" } },'
expect_rc 0 timeout 60 "$LUAGENT" ask "env" && out_has "denied" && out_has "env is private" && ! grep -q '"PATH"' "$WS/.out" && pass "ask: a denied MCP call"
# escalated (no terminal: denied by the approver, never run)
conf 'providers = { { kind = "script", turns = { { tool = "mcp.everything.echo", args = { message = "esc" } }, { text = "model saw: %{result}" } } } },
  rules = { { tool = "mcp.everything.*", caller = "model", action = "escalate", reason = "ask me first" } },'
expect_rc 0 timeout 60 "$LUAGENT" ask "echo" </dev/null && out_has "needs approval" && ! grep -q "Echo: esc" "$WS/.out" && pass "ask: an escalated MCP call"
expect_rc 0 "$LUAGENT" audit tail -n 50 && out_has "mcp.everything.get-env" && out_has "mcp.everything.echo" && pass "denied and escalated calls are audited"
# sampling: refused without config (the tool that needs it is not even offered)
expect_rc 0 "$LUAGENT" tools list && ! grep -q "trigger-sampling-request" "$WS/.out" && pass "without sampling config the server offers no sampling tool"
# allowed: the scripted provider answers the server's sampling/createMessage
S_TURNS='turns = { { match = "context: ping", turns = { { text = "pong from the model" } } },
  { turns = { { tool = "mcp.everything.trigger-sampling-request", args = { prompt = "ping", maxTokens = 10 } }, { text = "model saw: %{result}" } } } }'
printf 'return {\n  mcp = { servers = { everything = { command = "%s", args = { "stdio" }, sampling = { max_tokens = 64, provider = "demo" } } } },\n  providers = { { name = "demo", kind = "script", %s } },\n}\n' "$NODE_BIN/mcp-server-everything" "$S_TURNS" > "$WS/luagent.lua"
expect_rc 0 timeout 60 "$LUAGENT" mcp trust everything --yes && out_has "trigger-sampling-request" && pass "with sampling allowed the server offers trigger-sampling-request (trusted anew)"
printf 'print(tools.call("mcp.everything.trigger-sampling-request", { prompt = "ping", maxTokens = 10 }).text)\n' > "$WS/s.lua"
expect_rc 0 timeout 60 "$LUAGENT" run s.lua </dev/null && out_has '"role": "assistant"' && out_has '"text": "pong from the model"' && out_has '"stopReason": "endTurn"' && out_has '"model": "script"' && pass "trigger-sampling-request from Lua: the scripted provider's answer goes back (role, content, model, stopReason)" || fail "sampling: $(head -c 800 "$WS/.out") $(head -c 400 "$WS/.err")"
expect_rc 0 timeout 60 "$LUAGENT" ask "sample" </dev/null && out_has "model saw:" && out_has "pong from the model" && pass "ask: the model calls a tool whose server samples the model"
expect_rc 0 "$LUAGENT" audit tail -n 30 && out_has "mcp.everything.sampling" && pass "the sampling is audited"
# refused by config: sampling = false, and the (now pinned) tool gets an error, not an answer
printf 'return {\n  mcp = { servers = { everything = { command = "%s", args = { "stdio" }, sampling = false } } },\n}\n' "$NODE_BIN/mcp-server-everything" > "$WS/luagent.lua"
expect_rc 0 timeout 60 "$LUAGENT" mcp trust everything --yes && ! grep -q "trigger-sampling-request" "$WS/.out" && pass "sampling = false: not declared, the tool is gone"
# 2026-07-28: luagent probes with server/discover first; this pinned server
# (SDK 1.32, legacy only) answers an error, and gets initialize at once
printf '#!/bin/bash\ntee -a "%s" | "%s" stdio\n' "$WS/wire.log" "$NODE_BIN/mcp-server-everything" > "$WS/wire.sh" && chmod +x "$WS/wire.sh"
printf 'return {\n  mcp = { servers = { wire = { command = "%s" } } },\n}\n' "$WS/wire.sh" > "$WS/luagent.lua"
expect_rc 0 timeout 60 "$LUAGENT" mcp trust wire --yes && out_has "protocol 2025-11-25" && python3 - "$WS/wire.log" <<'PY2' && pass "server/discover first, refused by the legacy server, then initialize: 2025-11-25" || fail "probe: $(head -c 600 "$WS/wire.log")"
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
assert [x.get("method") for x in m[:2]] == ["server/discover", "initialize"], m[:2]
assert m[0]["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
assert all("_meta" not in (x.get("params") or {}) for x in m[1:]), m
PY2
pgrep -f "$NODE_BIN/mcp-server-everything" >/dev/null && fail "server-everything outlived luagent" || pass "no server left running"
finish
