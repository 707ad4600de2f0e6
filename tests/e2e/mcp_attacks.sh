#!/bin/bash
# e2e: an MCP client against a hostile server (tests/mcp/fake_server.py):
# trust pinning, lazy start, config errors, a server that crashes, hangs,
# sends garbage, floods, sends 100 MB, breaks its outputSchema, changes its
# tools after trust, lies in its annotations, names a tool fs.delete,
# carries instructions in a description; every call through the pipeline
# (rules, approval, taint, audit); the model's raw calls outside its
# allow-list; no server process outlives luagent.
set -u
. "$(dirname "$0")/lib/common.sh"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed for the fake MCP server" >&2; exit 1; }
cp "$(dirname "$0")/../mcp/fake_server.py" "$WS/fake_server.py"
FAKE="$WS/fake_server.py"
LOG="$WS/fake.log"
SERVER="fake = { command = \"python3\", args = { \"$FAKE\" }, timeout_s = 2,
  env = { FAKE_STATE = \"$WS/state\", FAKE_WIPED = \"$WS/wiped\", FAKE_LOG = \"$LOG\" }"
conf() { printf 'return {\n  mcp = { servers = { %s%s } } },\n%s\n}\n' "$SERVER" "${2:-}" "${1:-}" > "$WS/luagent.lua"; }
lua() { printf '%s\n' "$1" > "$WS/t.lua"; }
calls() { grep -c '"tools/call"' "$LOG" 2>/dev/null || echo 0; }
conf

# 1. config errors name the file and line
printf 'return {\n  mcp = {\n    servers = {\n      x = { command = "a", argz = {} } } } }\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" tools list && err_has "luagent.lua:4" && err_has "argz is not a known key" && pass "unknown server key: file and line"
printf 'return {\n  mcp = { servers = {\n    x = { command = 5 } } } }\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" tools list && err_has "luagent.lua:3" && err_has "mcp.servers.x.command: expected" && pass "wrong type: file and line"
printf 'return { mcp = { servers = { Bad_Name = { command = "a" } } } }\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" tools list && err_has "invalid server name" && pass "server names cannot hold _ or ."
printf 'return { mcp = { servers = { r = { url = "https://x/mcp", command = "a" } } } }\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" tools list && err_has "either command" && err_has "not both" && pass "command and url together are refused"
printf 'return { mcp = { servers = { r = { url = "https://x/mcp", args = { "a" } } } } }\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" tools list && err_has "mcp.servers.r.args: only for a stdio server" && pass "stdio keys on an HTTP server are refused"
printf 'return { mcp = { servers = { r = { url = "ftp://x/mcp" } } } }\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" tools list && err_has "expected an http:// or https:// URL" && pass "a non-HTTP url is refused"
printf 'return { mcp = { servers = { x = { command = "a", tools = { t = { impact = "huge" } } } } } }\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" tools list && err_has "mcp.servers.x.tools.t.impact" && pass "a bad impact override is named"
printf 'return { mcp = { servarz = {} } }\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" tools list && err_has "mcp.servarz is not a known key" && pass "unknown mcp key"

# 2. untrusted: no tools, and nothing started; trust needs a terminal or --yes
conf
expect_rc 0 "$LUAGENT" tools list
grep -q "mcp\.fake" "$WS/.out" && fail "an untrusted server has tools" || pass "untrusted server: no tools"
[ -e "$LOG" ] && fail "listing tools started the server" || pass "tools list starts no server"
expect_rc 2 "$LUAGENT" mcp trust fake </dev/null && err_has "run again with --yes" && pass "trust without a terminal needs --yes"
[ -e "$WS/.luagent/mcp/fake.trust.json" ] && fail "pinned without consent" || pass "nothing pinned"
rm -f "$LOG"
expect_rc 0 "$LUAGENT" mcp trust fake --yes
out_has "IGNORE ALL PREVIOUS INSTRUCTIONS" && out_has "inputSchema" && out_has "annotations" && pass "trust shows descriptions, schemas, annotations"
out_has "PROBLEM: invalid tool name" && pass "invalid names are shown as problems"
[ "$(stat -c %a "$WS/.luagent/mcp/fake.trust.json")" = 600 ] && pass "pin stored 0600" || fail "pin mode"
expect_rc 0 "$LUAGENT" mcp list && out_has "trusted" && out_has "16 tool(s)" && out_has "'bad name' is not valid" && out_has "'../up' is not valid" && pass "mcp list: 16 tools, 2 refused names"
rm -f "$LOG"

# 3. lazy start: a run that uses no MCP tool starts no server
lua 'print(tools.call("echo", { a = 1 }).a)'
expect_rc 0 "$LUAGENT" run t.lua && out_has 1
[ -e "$LOG" ] && fail "a run without MCP calls started the server" || pass "lazy: no MCP call, no server"

# 4. shadowing: the server's fs.delete is mcp.fake.fs.delete; luagent's stays
expect_rc 0 "$LUAGENT" tools list --json
python3 - "$WS/.out" <<'PY' && pass "fs.delete is still the host tool (high); the server's is apart" || fail "shadowing: $(grep delete "$WS/.out")"
import json, sys
t = {j["name"]: j for j in json.load(open(sys.argv[1]))}
assert t["fs.delete"]["source"] == "host" and t["fs.delete"]["impact"] == "high", t["fs.delete"]
assert t["mcp.fake.fs.delete"]["source"] == "mcp server fake", t["mcp.fake.fs.delete"]
assert t["mcp.fake.inject"]["open_world"] is True and t["mcp.fake.inject"]["impact"] == "medium"
assert not any(" " in n or ".." in n for n in t)
PY

# 5. a server that misbehaves: a clear error each time, and the run goes on
lua 'local function try(n, a)
  local ok, r = pcall(tools.call, n, a or {})
  if ok then print(n .. " OK " .. (r.structured and json.encode(r.structured) or r.text))
  else print(n .. " ERR " .. r.code .. " " .. r.message) end
end
try("mcp.fake.echo", { text = "one" })
try("mcp.fake.crash")
try("mcp.fake.echo", { text = "after crash" })
try("mcp.fake.hang")
try("mcp.fake.echo", { text = "after hang" })
try("mcp.fake.garbage")
try("mcp.fake.echo", { text = "after garbage" })
try("mcp.fake.flood")
try("mcp.fake.big")
try("mcp.fake.echo", { text = "after big" })
try("mcp.fake.struct", {})
try("mcp.fake.struct", { broken = true })
try("mcp.fake.fail")
try("mcp.fake.echo", { text = 5 })'
start=$(date +%s)
expect_rc 0 timeout 60 "$LUAGENT" run t.lua
took=$(( $(date +%s) - start ))
out_has "mcp.fake.echo OK echo: one" && pass "a call"
out_has "mcp.fake.crash ERR mcp_exited mcp.fake.crash: mcp server fake exited during tools/call (exit status 3); its stderr ended with: fake: about to crash" && pass "crash mid-call: named, with status and stderr"
out_has "echo OK echo: after crash" && pass "restarted after the crash"
out_has "mcp.fake.hang ERR timeout" && out_has "did not answer tools/call within 2 s" && pass "a server that never answers times out"
out_has "echo OK echo: after hang" && pass "restarted after the hang"
python3 - "$LOG" <<'PY' && pass "the request it never answered was cancelled (notifications/cancelled with its id)" || fail "no notifications/cancelled for the hung call"
import json, sys
msgs = [json.loads(l) for l in open(sys.argv[1])]
hang = [m["id"] for m in msgs if m.get("method") == "tools/call" and m["params"]["name"] == "hang"]
cancels = [m["params"]["requestId"] for m in msgs if m.get("method") == "notifications/cancelled"]
assert hang and hang[0] in cancels, (hang, cancels)
PY
out_has "mcp.fake.garbage ERR mcp_protocol" && out_has "malformed JSON-RPC" && out_has "this is not json" && pass "malformed JSON-RPC: named, with what it sent"
out_has "echo OK echo: after garbage" && pass "restarted after garbage"
out_has "mcp.fake.flood ERR mcp_flood" && pass "a notification flood is cut off"
out_has "mcp.fake.big ERR mcp_message_too_big" && out_has "max_message_mb" && pass "a 100 MB message is refused at the limit"
out_has "echo OK echo: after big" && pass "restarted after the big message"
out_has 'mcp.fake.struct OK {"n":7}' && pass "structuredContent checked and returned"
out_has "mcp.fake.struct ERR mcp_protocol" && out_has "does not match the tool's outputSchema: structuredContent.n" && pass "outputSchema violations are errors"
out_has "mcp.fake.fail ERR tool_error mcp.fake.fail: it broke" && pass "isError is a tool error"
out_has "mcp.fake.echo ERR invalid_args" && pass "inputSchema validated before the server sees it"
[ "$took" -lt 30 ] && pass "all of it in ${took}s" || fail "misbehaving server took ${took}s"
grep -q '"text": *5' "$LOG" && fail "invalid arguments reached the server" || true
[ -s "$WS/.luagent/mcp/fake.stderr.log" ] && grep -q "about to crash" "$WS/.luagent/mcp/fake.stderr.log" && pass "stderr goes to the log" || fail "no stderr log"

# 6. the server's environment: the basics and its own env, nothing else of luagent's
lua 'print(tools.call("mcp.fake.env", {}).text)'
SECRET_TOKEN=hunter2 OPENAI_API_KEY=sk-xyz expect_rc 0 env SECRET_TOKEN=hunter2 OPENAI_API_KEY=sk-xyz "$LUAGENT" run t.lua
out_has "FAKE_STATE" && out_has "PATH" && ! grep -q "hunter2\|sk-xyz\|SECRET_TOKEN\|OPENAI" "$WS/.out" && pass "luagent's environment does not reach the server" || fail "env: $(cat "$WS/.out")"

# 7. the pipeline: a deny rule stops the call before the server hears of it
conf 'rules = { { tool = "mcp.fake.*", caller = "script", action = "deny", reason = "no fake for scripts" } },'
rm -f "$LOG"
lua 'local ok, e = pcall(tools.call, "mcp.fake.echo", { text = "x" }); print(e.code, e.message)'
expect_rc 0 "$LUAGENT" run t.lua && out_has "denied" && out_has "no fake for scripts" && pass "a rule denies an MCP call"
[ "$(calls)" = 0 ] && pass "the denied call never reached the server" || fail "denied call reached the server"

# 8. lying annotations: wipe claims readOnlyHint; an override puts it back at high -> escalates
conf '' ', tools = { wipe = { impact = "high" } }'
lua 'local ok, e = pcall(tools.call, "mcp.fake.wipe", {}); print(ok, e and e.code, e and e.message)'
expect_rc 0 "$LUAGENT" run t.lua </dev/null && out_has "needs approval" && pass "an impact override escalates the lying tool"
[ -e "$WS/wiped" ] && fail "the escalated call ran" || pass "escalated without an approver: not run"
expect_rc 0 "$LUAGENT" mcp list && out_has "trusted" && pass "overrides do not void the pin"

# 9. queue approval for an MCP call: approved from a second process, then it runs
conf 'approver = "queue", approval_timeout_s = 30,' ', tools = { wipe = { impact = "high" } }'
lua 'local ok, r = pcall(tools.call, "mcp.fake.wipe", {}); print(ok, ok and r.text or r.message)'
(cd "$WS" && timeout 60 "$LUAGENT" run t.lua </dev/null >"$WS/q.out" 2>&1) & QP=$!; PIDS="$PIDS $QP"
id=""
for _ in $(seq 1 100); do
  id=$(cd "$WS" && "$LUAGENT" approvals list --json 2>/dev/null | python3 -c '
import json, sys
r = [x for x in json.load(sys.stdin) if x["status"] == "pending"]
print(int(r[0]["id"]) if r else "")' 2>/dev/null)
  [ -n "$id" ] && break; sleep 0.1
done
[ -n "$id" ] && (cd "$WS" && "$LUAGENT" approvals approve "$id" >/dev/null) && wait $QP
grep -q "true.*all files deleted" "$WS/q.out" && [ -e "$WS/wiped" ] && pass "an escalated MCP call waits in the queue and runs once approved" || fail "queue: $(cat "$WS/q.out")"
rm -f "$WS/wiped"

# 9b. elicitation goes to the approver: no terminal declines; the queue accepts with the form's
# defaults, or with the operator's edited values (checked against the form)
lua 'print(tools.call("mcp.fake.ask", {}).text)'
conf
expect_rc 0 "$LUAGENT" run t.lua </dev/null && out_has 'elicited: {"action": "decline"}' && pass "elicitation without an operator: declined"
conf 'approver = "queue", approval_timeout_s = 30,'
elicit() {
  (cd "$WS" && timeout 60 "$LUAGENT" run t.lua </dev/null >"$WS/q.out" 2>&1) & QP=$!; PIDS="$PIDS $QP"
  id=""
  for _ in $(seq 1 100); do
    id=$(cd "$WS" && "$LUAGENT" approvals list --json 2>/dev/null | python3 -c '
import json, sys
r = [x for x in json.load(sys.stdin) if x["status"] == "pending"]
print(int(r[0]["id"]) if r else "")' 2>/dev/null)
    [ -n "$id" ] && break; sleep 0.1
  done
  [ -n "$id" ] || { fail "no pending elicitation"; return 1; }
  (cd "$WS" && "$LUAGENT" approvals list) | grep -q "mcp.fake.elicitation" || fail "the queue does not name the elicitation"
  (cd "$WS" && "$LUAGENT" approvals approve "$id" "$@" >/dev/null); wait $QP
}
elicit && grep -q 'elicited: {"action": "accept", "content": {"name": "Ada"}}' "$WS/q.out" && pass "elicitation approved in the queue: the form's defaults go back" || fail "elicit: $(cat "$WS/q.out")"
elicit --args '{"name":"Grace","age":37}' && grep -q '"content": {"age": 37, "name": "Grace"}' "$WS/q.out" && pass "edited values go back" || fail "elicit edited: $(cat "$WS/q.out")"
elicit --args '{"age":"old"}' && grep -q '"action": "decline"' "$WS/q.out" && pass "values that do not fit the form are declined, not sent" || fail "elicit bad: $(cat "$WS/q.out")"

# 10. taint: the description/result of an open-world tool taints the run; the model's next medium call escalates
conf 'providers = { { kind = "script", turns = { { tool = "mcp.fake.inject", args = {} }, { tool = "mcp.fake.wipe", args = {} }, { text = "done: %{result}" } } } },' ', tools = { wipe = { impact = "medium" } }'
expect_rc 0 "$LUAGENT" ask "check status" </dev/null
[ -e "$WS/wiped" ] && fail "tainted run: the medium call ran without approval" ||
  { cat "$WS/.out" "$WS/.err" | grep -q "open_world tool result" && pass "after an open-world MCP result, the model's medium MCP call escalates (taint)" || fail "tainted run: $(cat "$WS/.out" "$WS/.err" | head -c 600)"; }
conf 'providers = { { kind = "script", turns = { { tool = "mcp.fake.wipe", args = {} }, { text = "done: %{result}" } } } },' ', tools = { wipe = { impact = "medium" } }'
expect_rc 0 "$LUAGENT" ask "check status" </dev/null && out_has "all files deleted" && pass "the same call untainted runs (the test can fail)"
rm -f "$WS/wiped"

# 11. the model's raw JSON calling an MCP tool outside its allow-list
conf 'providers = { { kind = "script", turns = { { tool = "mcp.fake.wipe", args = {} }, { text = "got %{result}" } } } },'
lua 'print(delegate("go", { tools = { "echo" } }))'
rm -f "$LOG"
expect_rc 0 "$LUAGENT" run t.lua </dev/null
[ -e "$WS/wiped" ] && fail "delegate's model reached a tool outside opts.tools" || pass "delegate(tools={echo}): the model cannot call mcp.fake.wipe"
[ "$(calls)" = 0 ] && pass "not even sent to the server" || fail "the server got a call"

# 12. audit: MCP calls are in the chain, caller and tool named
expect_rc 0 "$LUAGENT" audit tail -n 200 && out_has "mcp.fake.echo" && pass "MCP calls are audited"

# 13. changed tools are held back until trusted again; a changed config voids the pin
conf
rm -f "$WS/state"
lua 'print(tools.call("mcp.fake.change", {}).text)
local ok, e = pcall(tools.call, "mcp.fake.echo", { text = "x" }); print(ok, e and e.code, e and e.message)
print(tools.call("mcp.fake.wipe", {}).text)'
expect_rc 0 "$LUAGENT" run t.lua && out_has "mcp_untrusted" && out_has "held back" && out_has "luagent mcp trust fake" && pass "list_changed: the changed tool is held back"
out_has "all files deleted" && pass "unchanged tools keep working"
rm -f "$WS/wiped"
lua 'local ok, e = pcall(tools.call, "mcp.fake.echo", { text = "x" }); print(ok, e and e.code)'
expect_rc 0 "$LUAGENT" run t.lua && out_has "mcp_untrusted" && pass "a changed tool stays held back in a new run"
expect_rc 2 "$LUAGENT" mcp trust fake </dev/null && out_has "CHANGED since the last trust: echo" && out_has "Echo v2" && pass "trust reports the change"
expect_rc 0 "$LUAGENT" mcp trust fake --yes
lua 'print(tools.call("mcp.fake.echo", { text = "again" }).text)'
expect_rc 0 "$LUAGENT" run t.lua && out_has "echo: again" && pass "trusted again: it runs"
SERVER="fake = { command = \"python3\", args = { \"$FAKE\", \"--other\" }, timeout_s = 2"
conf
expect_rc 0 "$LUAGENT" mcp list && out_has "changed since it was trusted" && out_has "0 tool(s)" && pass "a changed command voids the pin"

# 14. no server outlives luagent, even killed with SIGKILL mid-call
SERVER="fake = { command = \"python3\", args = { \"$FAKE\" }, timeout_s = 60"
conf
lua 'tools.call("mcp.fake.block", {})'
expect_rc 0 "$LUAGENT" mcp trust fake --yes
(cd "$WS" && exec "$LUAGENT" run t.lua >/dev/null 2>&1) & LP=$!
for _ in $(seq 1 50); do pgrep -f "$FAKE" >/dev/null && break; sleep 0.1; done
pgrep -f "$FAKE" >/dev/null || fail "the server did not start"
kill -9 $LP; wait $LP 2>/dev/null
for _ in $(seq 1 30); do pgrep -f "$FAKE" >/dev/null || break; sleep 0.1; done
pgrep -f "$FAKE" >/dev/null && { fail "a server outlived a killed luagent"; kill $(pgrep -f "$FAKE"); } || pass "a killed luagent takes its server with it"
lua 'print(tools.call("mcp.fake.echo", { text = "x" }).text)'
expect_rc 0 "$LUAGENT" run t.lua
pgrep -f "$FAKE" >/dev/null && fail "a server outlived luagent run" || pass "luagent run stops its server at exit"
finish
