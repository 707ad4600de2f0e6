#!/bin/bash
# e2e: the reference server @modelcontextprotocol/server-filesystem confined
# by luagent's rules: reads under secret/ and the multi-file read are
# denied before the server hears of them, writes (destructiveHint: high)
# escalate unless a rule allows them for out/ only, and the server's own
# folder limit still holds behind that.
set -u
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/mcp_node.sh"
need_node_bin mcp-server-filesystem
D="$WS/data"
mkdir -p "$D/secret" "$D/out"
echo "public words" > "$D/ok.txt"
echo "the key" > "$D/secret/key.txt"
PD=$(printf '%s' "$D" | sed 's/[][%.^$()*+?-]/%&/g') # $D as a Lua pattern
cat > "$WS/luagent.lua" <<LUA
return {
  mcp = { servers = { files = { command = "$NODE_BIN/mcp-server-filesystem", args = { "$D" } } } },
  rules = {
    { tool = "mcp.files.*", args = { path = "secret" }, action = "deny", reason = "secret/ is off limits" },
    { tool = "mcp.files.read_multiple_files", action = "deny", reason = "one file at a time" },
    { tool = "mcp.files.write_file", caller = "script", args = { path = "^$PD/out/" }, action = "allow" },
  },
}
LUA
expect_rc 0 timeout 60 "$LUAGENT" mcp trust files --yes && pass "trusted"
expect_rc 0 "$LUAGENT" tools list && out_has "mcp.files.write_file" && grep -q "mcp.files.write_file *high" "$WS/.out" && pass "write_file is high (destructiveHint)"
cat > "$WS/t.lua" <<LUA
local function try(n, a)
  local ok, r = pcall(tools.call, n, a)
  print(n .. " " .. (ok and ("OK " .. (r.text or "")) or ("ERR " .. r.code .. " " .. r.message)))
end
try("mcp.files.read_text_file", { path = "$D/ok.txt" })
try("mcp.files.read_text_file", { path = "$D/secret/key.txt" })
try("mcp.files.read_multiple_files", { paths = { "$D/ok.txt", "$D/secret/key.txt" } })
try("mcp.files.write_file", { path = "$D/out/new.txt", content = "written" })
try("mcp.files.write_file", { path = "$D/ok.txt", content = "overwritten" })
try("mcp.files.read_text_file", { path = "/etc/hostname" })
LUA
expect_rc 0 timeout 60 "$LUAGENT" run t.lua </dev/null
out_has "read_text_file OK public words" && pass "a read inside the rules"
out_has "read_text_file ERR denied" && out_has "secret/ is off limits" && ! grep -q "the key" "$WS/.out" && pass "secret/ denied by a rule"
out_has "read_multiple_files ERR denied" && out_has "one file at a time" && pass "the multi-file read (a list argument the args rule cannot see) denied by name"
[ "$(cat "$D/out/new.txt" 2>/dev/null)" = written ] && pass "a write the rule allows (out/) runs" || fail "allowed write: $(cat "$WS/.out")"
out_has "write_file ERR denied" && out_has "needs approval" && [ "$(cat "$D/ok.txt")" = "public words" ] && pass "a write elsewhere escalates and does not run"
grep -q "read_text_file ERR tool_error.*outside allowed directories" "$WS/.out" && pass "outside its folder the server refuses too (isError)" || fail "the server read outside its folder: $(cat "$WS/.out")"
finish
