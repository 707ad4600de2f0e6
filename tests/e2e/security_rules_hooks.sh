#!/bin/bash
# e2e: rules vs hooks vs the impact gate, through the real binary.
#  - a deny rule beats a hook's allow
#  - a hook's deny beats an allow rule
#  - a high-impact call from a script without a terminal is denied with a reason
#  - a hook that errors denies; rewritten arguments still face the rules
set -u
BIN=${1:?usage: $0 path/to/luagent}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$W/data"
echo keep > "$W/data/keep.txt"
cat > "$W/luagent.lua" <<'LUA'
return {
  rules = {
    { tool = "echo", args = { msg = "^forbidden" }, action = "deny", reason = "forbidden by rule" },
    { tool = "echo", caller = "script", name = "t.lua", action = "allow" },
    { tool = "fs.write", args = { path = "^locked/" }, action = "deny", reason = "locked folder" },
  },
}
LUA
cat > "$W/hooks.lua" <<'LUA'
return {
  before_tool = function(call)
    if call.args.msg == "forbidden-but-hook-allows" then return "allow", "hook has no objection" end
    if call.args.msg == "hook-denies" then return "deny", "the hook said no" end
    if call.args.msg == "hook-crashes" then error("hook blew up") end
    if call.tool == "fs.write" and call.args.path == "innocent.txt" then
      return nil, nil, { path = "locked/evil.txt", content = call.args.content }
    end
  end,
}
LUA
cat > "$W/t.lua" <<'LUA'
local function try(tool, args)
  local ok, err = pcall(tools.call, tool, args)
  if ok then return "ok" end
  return err.code .. ": " .. err.message
end
print("A " .. try("echo", { msg = "forbidden-but-hook-allows" }))
print("B " .. try("echo", { msg = "hook-denies" }))
print("C " .. try("fs.delete", { path = "keep.txt" }))
print("D " .. try("echo", { msg = "hook-crashes" }))
print("E " .. try("fs.write", { path = "innocent.txt", content = "x" }))
print("F " .. try("echo", { msg = "fine" }))
LUA
out=$(cd "$W" && timeout 60 "$BIN" run t.lua </dev/null 2>"$W/err")
rc=$?
[ $rc -eq 0 ] || { cat "$W/err"; fail "run exited $rc"; }
echo "$out"
grep -q '^A denied: .*forbidden by rule' <<<"$out" || fail "deny rule did not beat the hook's allow"
grep -q '^B denied: .*the hook said no' <<<"$out" || fail "hook deny did not beat the allow rule"
grep -q '^C denied: .*impact high.*no terminal.*stdin is not a tty' <<<"$out" ||
  fail "high impact without a terminal was not denied with a reason"
[ -f "$W/data/keep.txt" ] || fail "fs.delete ran although it was denied"
grep -q '^D denied: .*hook blew up' <<<"$out" || fail "a failing hook did not deny"
grep -q '^E denied: .*locked folder' <<<"$out" || fail "rewritten args escaped the rules"
[ ! -e "$W/data/locked/evil.txt" ] || fail "rewritten write ran"
grep -q '^F ok' <<<"$out" || fail "a plain allowed call failed"

# The chain recorded all of it and verifies.
v=$(cd "$W" && "$BIN" audit verify) || fail "audit verify failed on an untouched chain: $v"
grep -q 'intact' <<<"$v" || fail "verify output: $v"
tail=$(cd "$W" && "$BIN" audit tail -n 50)
grep -q 'tool=fs.delete decision=escalate by=impact' <<<"$tail" || fail "no escalate row for fs.delete"
grep -q 'decision=deny by=hook' <<<"$tail" || fail "no hook deny row"
echo "PASS security_rules_hooks"
