#!/bin/bash
# e2e: the official MCP Inspector CLI (@modelcontextprotocol/inspector-cli,
# pinned in tests/mcp) against `luagent mcp serve`: tools/list and
# tools/call, a call the pipeline denies, and the audit of both.
set -u
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/mcp_node.sh"
need_node_bin mcp-inspector-cli
mkdir -p "$WS/skills/greet"
cat > "$WS/skills/greet/skill.lua" <<'LUA'
return { name = "greet", description = "Greets people", tools = {
  hello = { description = "Say hello", impact = "read",
    params = { type = "object", required = { "who" }, properties = { who = { type = "string" } } },
    run = function(args) return { text = "hello " .. args.who } end } } }
LUA
echo 'return { rules = { { tool = "fs.*", caller = "mcp", action = "deny", reason = "no files for MCP clients" } } }' > "$WS/luagent.lua"
# inspector-cli 1.0.3 finds its own package.json through the current
# folder's parent (build/index.js callMethod): run it from node_modules/.
inspect() { (cd "$LUAGENT_MCP_NODE/node_modules" && timeout 120 ./.bin/mcp-inspector-cli --cli "$LUAGENT" --workspace "$WS" mcp serve "$@") >"$WS/.out" 2>"$WS/.err"; }
inspect --method tools/list
python3 - "$WS/.out" <<'PY' && pass "inspector tools/list" || fail "tools/list: $(head -c 800 "$WS/.out") $(head -c 800 "$WS/.err")"
import json, sys
txt = open(sys.argv[1]).read()
d = json.loads(txt[txt.index("{"):])
names = {t["name"]: t for t in d["tools"]}
assert "greet__hello" in names and "fs__read" in names and "echo" in names, sorted(names)
h = names["greet__hello"]
assert h["inputSchema"]["required"] == ["who"] and h["annotations"]["readOnlyHint"] is True
assert "Greets people" in h["description"]
PY
inspect --method tools/call --tool-name greet__hello --tool-arg who=inspector
grep -q '"hello inspector"' "$WS/.out" && pass "inspector tools/call" || fail "tools/call: $(head -c 800 "$WS/.out") $(head -c 600 "$WS/.err")"
inspect --method tools/call --tool-name fs__read --tool-arg path=x.txt
grep -q "no files for MCP clients" "$WS/.out" && grep -q '"isError": true' "$WS/.out" && pass "a denied call comes back as a tool error" || fail "denied: $(head -c 800 "$WS/.out")"
expect_rc 0 "$LUAGENT" audit tail -n 20 && out_has "greet.hello" && out_has "fs.read" && out_has "inspector-cli" && pass "audited with the inspector's clientInfo name"
finish
