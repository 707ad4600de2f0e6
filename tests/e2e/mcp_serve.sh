#!/bin/bash
# e2e: `luagent mcp serve` to an MCP client over stdio (tests/mcp/client.py):
# initialize, tools/list (wire names, schemas, annotations from impact and
# open_world, descriptions from the skill, --tools), tools/call as caller
# kind mcp named by clientInfo (rules target it), escalations to the queue
# approver decided from a second process, audit, and the protocol errors
# (parse error, unknown method, unknown tool, before initialize, a message
# over the limit) after which the session goes on. stdout carries only
# protocol (a skill's print goes to stderr).
set -u
. "$(dirname "$0")/lib/common.sh"
CLIENT="$(dirname "$0")/../mcp/client.py"
mkdir -p "$WS/skills/notes" "$WS/data"
cat > "$WS/skills/notes/skill.lua" <<'LUA'
return {
  name = "notes", description = "Keeps short notes",
  tools = {
    add = { description = "Add a note", impact = "low",
      params = { type = "object", required = { "title" }, properties = { title = { type = "string", maxLength = 20 } } },
      run = function(args, call) print("printing from a skill"); return { saved = args.title, caller = call.caller } end },
  },
}
LUA
cat > "$WS/luagent.lua" <<'LUA'
return {
  approver = "queue", approval_timeout_s = 30,
  rules = { { tool = "notes.*", caller = "mcp", name = "evil*", action = "deny", reason = "not for evil clients" } },
}
LUA
init() { printf '{"send":{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"%s","capabilities":{},"clientInfo":{"name":"%s","version":"1"}}}},{"expect":1},{"send":{"jsonrpc":"2.0","method":"notifications/initialized"}}' "$1" "$2"; }
session() { printf '[%s]\n' "$1" > "$WS/steps.json"; (cd "$WS" && timeout 90 python3 "$CLIENT" "$WS/steps.json" -- "$LUAGENT" mcp serve ${2:-}) >"$WS/.out" 2>"$WS/.err"; }

# 1. handshake, list, calls, protocol errors
session "$(init 2025-06-18 probe),
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}},{\"expect\":2},
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"notes__add\",\"arguments\":{\"title\":\"hello\"}}}},{\"expect\":3},
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"notes.add\",\"arguments\":{\"title\":\"this title is far too long\"}}}},{\"expect\":4},
 {\"send\":\"this is not json\"},{\"expect\":null},
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"resources/subscribe\"}},{\"expect\":5},
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":{\"name\":\"fs__read\",\"arguments\":{}}}},{\"expect\":6},
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"nope\"}}},{\"expect\":7},
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"}},{\"expect\":8}" "--tools notes.*,echo,time.*"
python3 - "$WS/.out" <<'PY' && pass "initialize, list, call, errors" || fail "session 1: $(head -c 1500 "$WS/.out")"
import json, sys
r = {}
for l in open(sys.argv[1]):
    m = json.loads(l); r[m.get("id")] = m
init = r[1]["result"]
assert init["protocolVersion"] == "2025-06-18" and init["serverInfo"]["name"] == "luagent" and "tools" in init["capabilities"], init
tools = {t["name"]: t for t in r[2]["result"]["tools"]}
assert set(tools) == {"notes__add", "echo", "time__now"}, sorted(tools)
n = tools["notes__add"]
assert n["title"] == "notes.add" and "Add a note" in n["description"] and "Keeps short notes" in n["description"], n
assert n["inputSchema"]["required"] == ["title"] and n["inputSchema"]["properties"]["title"]["maxLength"] == 20
assert n["annotations"] == {"title": "notes.add", "readOnlyHint": False, "destructiveHint": False, "openWorldHint": False}, n["annotations"]
assert tools["echo"]["annotations"]["readOnlyHint"] is True
c = r[3]["result"]
assert c.get("isError") is not True and c["structuredContent"]["saved"] == "hello", c
assert json.loads(c["content"][0]["text"]) == c["structuredContent"], c
bad = r[4]["result"]
assert bad["isError"] is True and "invalid_args" in bad["content"][0]["text"], bad
assert r[None]["error"]["code"] == -32700, r[None]
assert r[5]["error"]["code"] == -32601
assert r[6]["error"]["code"] == -32602 and "Unknown tool" in r[6]["error"]["message"], r[6]  # not exposed by --tools
assert r[7]["error"]["code"] == -32602
assert r[8]["result"] == {}
PY
grep -q "printing from a skill" "$WS/.err" && pass "a skill's print goes to stderr, not the protocol" || fail "print not on stderr: $(cat "$WS/.err")"
err_has "client probe connected" && pass "the operator sees the client on stderr"

# 2. rules target the mcp caller by its clientInfo name; audit records it
session "$(init 2025-11-25 evil-bot),
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"notes__add\",\"arguments\":{\"title\":\"x\"}}}},{\"expect\":2}"
grep '"id": 2' "$WS/.out" | grep -q '"isError": true' && out_has "not for evil clients" && pass "a rule on caller mcp, name evil* denies" || fail "rule on mcp caller: $(cat "$WS/.out")"
grep -q '"protocolVersion": "2025-11-25"' "$WS/.out" && pass "2025-11-25 negotiated"
expect_rc 0 "$LUAGENT" audit tail -n 20 && out_has "evil-bot" && out_has "probe" && out_has "notes.add" && pass "the audit names the mcp callers"

# 3. an escalation waits in the queue (headless) and runs once approved
echo gone > "$WS/data/x.txt"
printf '[%s]\n' "$(init 2025-11-25 probe),
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"fs__delete\",\"arguments\":{\"path\":\"x.txt\"}}}},{\"expect\":2}" > "$WS/steps.json"
(cd "$WS" && timeout 90 python3 "$CLIENT" "$WS/steps.json" -- "$LUAGENT" mcp serve >"$WS/q.out" 2>"$WS/q.err") & QP=$!; PIDS="$PIDS $QP"
id=""
for _ in $(seq 1 150); do
  id=$(cd "$WS" && "$LUAGENT" approvals list --json 2>/dev/null | python3 -c '
import json, sys
r = [x for x in json.load(sys.stdin) if x["status"] == "pending"]
print(int(r[0]["id"]) if r else "")' 2>/dev/null)
  [ -n "$id" ] && break; sleep 0.1
done
[ -n "$id" ] || fail "no pending approval for the MCP client's fs.delete"
[ -e "$WS/data/x.txt" ] && pass "nothing deleted before approval" || fail "deleted before approval"
(cd "$WS" && "$LUAGENT" approvals approve "$id" >/dev/null)
wait $QP
[ ! -e "$WS/data/x.txt" ] && grep '"id": 2' "$WS/q.out" | grep -qv '"isError": true' && pass "approved from a second process: the call ran" || fail "queue: $(cat "$WS/q.out" "$WS/q.err")"

# 4. a message over the limit is refused and the session goes on
python3 - "$WS/steps.json" <<'PY'
import json, sys
steps = [{"send": {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "big", "version": "1"}}}}, {"expect": 1},
         {"send": json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"x": "y" * (17 << 20)}}})}, {"expect": None},
         {"send": {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"x": "small"}}}}, {"expect": 3}]
json.dump(steps, open(sys.argv[1], "w"))
PY
(cd "$WS" && timeout 90 python3 "$CLIENT" "$WS/steps.json" -- "$LUAGENT" mcp serve) >"$WS/.out" 2>"$WS/.err"
out_has '"code": -32600' && out_has "message over" && grep '"id": 3' "$WS/.out" | grep -q small && pass "a 17 MB message is refused; the session goes on" || fail "big message: $(head -c 600 "$WS/.out")"

# 4b. what luagent does not serve is answered valid and empty (declared as capabilities)
session "$(init 2025-11-25 probe),
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"resources/list\"}},{\"expect\":2},
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"prompts/list\",\"params\":{}}},{\"expect\":3},
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"debug\"}}},{\"expect\":4},
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"loud\"}}},{\"expect\":5},
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"completion/complete\",\"params\":{\"ref\":{\"type\":\"ref/prompt\",\"name\":\"x\"},\"argument\":{\"name\":\"a\",\"value\":\"b\"}}}},{\"expect\":6},
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"resources/read\",\"params\":{\"uri\":\"file:///etc/passwd\"}}},{\"expect\":7},
 {\"send\":{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"resources/subscribe\",\"params\":{\"uri\":\"x\"}}},{\"expect\":8}"
python3 - "$WS/.out" <<'PY' && pass "resources/prompts lists empty, setLevel checked, no completions, reads refused, unknown methods -32601" || fail "empty answers: $(head -c 1200 "$WS/.out")"
import json, sys
r = {}
for l in open(sys.argv[1]):
    m = json.loads(l)
    r[m.get("id")] = m
caps = r[1]["result"]["capabilities"]
assert all(k in caps for k in ("tools", "resources", "prompts", "logging", "completions")), caps
assert r[2]["result"] == {"resources": []} and r[3]["result"] == {"prompts": []}, (r[2], r[3])
assert r[4]["result"] == {} and r[5]["error"]["code"] == -32602, (r[4], r[5])
assert r[6]["result"]["completion"]["values"] == [], r[6]
assert r[7]["error"]["code"] == -32002 and r[8]["error"]["code"] == -32601, (r[7], r[8])
PY

# 5. before initialize, tools/list is refused
session '{"send":{"jsonrpc":"2.0","id":1,"method":"tools/list"}},{"expect":1}'
out_has '"code": -32002' && pass "tools/list before initialize is refused"
finish
