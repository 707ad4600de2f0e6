# Code mode from the pipeline's point of view (issue 14): what a model's
# Lua chunk tries and must not get. A denied tool is an error the chunk can
# catch; tools outside the allowed set cannot be seen or called (by name,
# tools.list/exists, rawget/_ENV/load tricks, through a skill or delegate);
# an approval waits and a denial is seen; endless loops and allocation are
# stopped by their limit, named, and the run goes on; delegate() is there
# only when allowed; malformed raw arguments get clear errors; taint from
# an open_world call inside a chunk escalates later medium+ calls.
. "$(dirname "$0")/lib/mock.sh" "$1"
. "$(dirname "$0")/lib/codemode.sh"

# one_chunk NAME 'CODE' [provider kind] : a mock that sends CODE as one lua
# call, then answers "after: <result>"
one_chunk() {
  start_mock "$1" "{\"steps\":[{\"text\":\"tools mode\"}],\"code_steps\":[$(lua_step "$2"),{\"text\":\"after: %{result}\"}]}"
}

# -- a denied tool inside the chunk is an error the chunk catches
one_chunk deny 'local ok, err = pcall(function() return tools.call("calc.add", { a = 1, b = 2 }) end)
local direct = tools.call("probe.peek", {})
return { ok = ok, code = err.code, msg = err.message, after = direct.tools }'
config "providers = { $(provider openai $PORT_deny) },
  rules = { { tool = \"calc.add\", caller = \"model\", action = \"deny\", reason = \"no sums today\" } }"
ask --mode lua --tools 'calc.add,probe.peek' "try"
expect_rc 0 "run with a denied inner call"
ccheck deny "res(1)['ok'] and res(1)['value']['ok'] is False and res(1)['value']['code'] == 'denied'" "the chunk caught err.code denied"
ccheck deny "'no sums today' in res(1)['value']['msg'] and res(1)['value']['msg'].startswith('code:1:')" "the denial's reason, at the chunk's line"
ccheck deny "res(1)['value']['after'] >= 1" "the chunk went on after the denial"
ccheck deny "res(1)['calls'] == '2 calls: calc.add denied, probe.peek ok'" "the summary shows the denial"
"$LUAGENT" --workspace "$WS" audit tail -n 50 --json 2>/dev/null | python3 -c '
import json, sys
rows = [r for r in json.load(sys.stdin) if r["tool"] == "calc.add"]
sys.exit(0 if rows and rows[-1]["caller_kind"] == "model" and rows[-1]["decision"] == "deny"
         and rows[-1]["detail"] == "no sums today" else 1)' \
  && ok "the denied inner call is audited as caller model, with the rule's reason" || fail "audit lacks the denied calc.add by model"
# uncaught, the denial fails the chunk with its line and code
one_chunk deny2 'local x = 1
tools.call("calc.add", { a = 1, b = 2 })
return x'
config "providers = { $(provider anthropic $PORT_deny2) },
  rules = { { tool = \"calc.add\", caller = \"model\", action = \"deny\" } }"
ask --mode lua --tools 'calc.add' "try"
expect_rc 0 "an uncaught denial ends the chunk, not the run"
ccheck deny2 "res(1)['ok'] is False and res(1)['code'] == 'denied' and res(1)['line'] == 2" "error code and line 2 in the chunk"
ccheck deny2 "any(b.get('is_error') for m in msgs(1) if isinstance(m.get('content'), list) for b in m['content'] if isinstance(b, dict) and b.get('type') == 'tool_result')" "marked as a tool error on the wire"
stop_mocks

# -- the chunk cannot see or call tools outside its set
one_chunk reach 'local out = {}
local function try(f, ...) local ok, e = pcall(f, ...) return ok and "ok" or (type(e) == "table" and (e.code .. ": " .. e.message) or tostring(e)) end
out.write = try(tools.call, "fs.write", { path = "pwn.txt", content = "x" })
out.nosuch = try(tools.call, "no.such", {})
out.skill_inner = try(tools.call, "fs.read", { path = "secret.txt" })
local names = {}
for _, t in ipairs(tools.list()) do names[#names + 1] = t.name end
table.sort(names)
out.list = table.concat(names, ",")
out.exists_write = tools.exists("fs.write")
out.exists_add = tools.exists("calc.add")
out.memory = try(function() return memory.get("k") end)
out.raw_memory = tostring(rawget(_ENV, "memory"))
out.raw_events = tostring(rawget(_ENV, "events"))
out.raw_delegate = tostring(rawget(_ENV, "delegate"))
out.G = tostring(rawget(_ENV, "_G") and rawget(_G, "memory"))
out.load = try(load("return tools.call(\"fs.delete\", { path = \"secret.txt\" })", "x", "t", { tools = tools }))
out.mt = tostring(getmetatable(tools))
out.rawset = try(function() rawset(tools, "call", nil) end)
out.peek = tools.call("probe.peek", {})
out.save = try(tools.call, "probe.save", { name = "via_skill.txt" })
return out'
config "providers = { $(provider openai $PORT_reach) }"
ask --mode lua --tools 'calc.add,probe.peek,probe.save' "explore"
expect_rc 0 "the reach-probing chunk ran"
ccheck reach "res(1)['value']['write'] == \"unknown_tool: unknown tool 'fs.write'\"" "tools.call on an existing tool outside the set: unknown_tool"
ccheck reach "res(1)['value']['nosuch'] == \"unknown_tool: unknown tool 'no.such'\"" "the same answer as a tool that does not exist"
ccheck reach "res(1)['value']['skill_inner'].startswith('unknown_tool:')" "a tool only a skill uses inside is out of reach too"
ccheck reach "res(1)['value']['list'] == 'calc.add,probe.peek,probe.save'" "tools.list shows exactly the allowed set"
ccheck reach "res(1)['value']['exists_write'] is False and res(1)['value']['exists_add'] is True" "tools.exists agrees"
ccheck reach "'undefined global' in res(1)['value']['memory'] and res(1)['value']['raw_memory'] == 'nil' and res(1)['value']['raw_events'] == 'nil' and res(1)['value']['raw_delegate'] == 'nil'" "no memory, events or delegate globals"
ccheck reach "res(1)['value']['G'] in ('nil', 'false')" "no way around through _G"
ccheck reach "res(1)['value']['load'].startswith('unknown_tool:')" "load()ed code gets the same restricted tools"
ccheck reach "res(1)['value']['rawset'] != 'ok'" "the tools table is read-only"
ccheck reach "res(1)['value']['peek'] == {'tools': 0, 'read': 'top secret\\n'} or res(1)['value']['peek']['read'] == 'top secret\\n'" "a skill's own inner calls run as the skill's (as for a direct model call)"
[ ! -e "$WS/data/pwn.txt" ] && ok "fs.write never ran" || fail "pwn.txt was written"
[ -e "$WS/data/secret.txt" ] && ok "fs.delete never ran" || fail "secret.txt was deleted"
[ -e "$WS/data/via_skill.txt" ] && ok "a skill in the set writes through its own fs.write" || fail "probe.save did not run its inner call"
stop_mocks
# the same skill called directly by the model in tools mode sees the same from inside
start_mock reach2 '{"steps":[{"tool_calls":[{"id":"d1","name":"probe.peek","arguments":{}}]},{"text":"ok"}]}'
config "providers = { $(provider openai $PORT_reach2) }"
ask --tools 'calc.add,probe.peek,probe.save' "peek"
python3 - "$WS/reach.log" "$WS/reach2.log" <<'PY' && ok "probe.peek: the same result in a chunk as in a direct call" || fail "probe.peek differs between code mode and tools mode"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])][1]["body"]["messages"][-1]["content"]
b = [json.loads(l) for l in open(sys.argv[2])][1]["body"]["messages"][-1]["content"]
sys.exit(0 if json.loads(a)["value"]["peek"] == json.loads(b) else 1)
PY
stop_mocks

# -- delegate(): absent unless allowed; allowed, it cannot widen the set
one_chunk nodel 'return delegate("what is 1 + 1?")'
config "providers = { $(provider openai $PORT_nodel) }"
ask --mode lua --tools 'calc.add' "delegate"
ccheck nodel "res(1)['ok'] is False and \"undefined global 'delegate'\" in res(1)['error'] and res(1)['line'] == 1" "delegate is not there unless allowed"
stop_mocks
DCODE='local a = delegate("add 1 and 1", { tools = { "calc.add" } })
local ok, err = pcall(delegate, "write", { tools = { "fs.write" } })
local ok2, err2 = pcall(delegate, "all", { tools = { "*" } })
return { a = a, wide = err.message, star = ok2 and err2 or err2.message }'
start_mock del "{\"steps\":[{\"tool_calls\":[{\"id\":\"n1\",\"name\":\"calc.add\",\"arguments\":{\"a\":1,\"b\":1}}]},{\"text\":\"two\"},{\"tool_calls\":[{\"id\":\"n2\",\"name\":\"fs.write\",\"arguments\":{\"path\":\"pwn2.txt\",\"content\":\"x\"}}]},{\"text\":\"nested done\"}],
  \"code_steps\":[$(lua_step "$DCODE"),{\"text\":\"after: %{result}\"}]}"
config "providers = { $(provider openai $PORT_del) }"
ask --mode lua --tools 'calc.add,delegate' "delegate"
expect_rc 0 "a chunk allowed to delegate"
ccheck del "res(5)['value']['a'] == 'two' and res(5)['value']['star'] == 'nested done'" "the nested runs answered"
ccheck del "[t['function']['name'] for t in reqs[1]['body']['tools']] == ['calc__add']" "the nested run offered only opts.tools"
ccheck del "\"no tool matches 'fs.write'\" in res(5)['value']['wide']" "opts.tools cannot name a tool outside the chunk's set"
ccheck del "[t['function']['name'] for t in reqs[3]['body']['tools']] == ['calc__add']" "'*' inside a chunk means the chunk's set"
ccheck del "'there is no tool named' in raw(4, 0) or 'unknown' in raw(4, 0)" "the nested model's call to fs.write is refused"
[ ! -e "$WS/data/pwn2.txt" ] && ok "the nested model never wrote" || fail "pwn2.txt was written through delegate"
stop_mocks

# -- the model's raw JSON: wrong, missing, extra and huge arguments
BIG=$(python3 -c 'print("-- " + "x" * 40000)')
RAWFX=$(python3 - "$BIG" <<'PY'
import json, sys
calls = [{"id": "a1", "name": "lua", "arguments": {"code": 42}},
         {"id": "a2", "name": "lua", "arguments": {}},
         {"id": "a3", "name": "lua", "arguments": {"code": "return 1", "shell": "rm -rf /"}},
         {"id": "a4", "name": "lua", "arguments": {"code": sys.argv[1]}},
         {"id": "a5", "name": "lua", "raw_arguments": "{\"code\": \"return 1\", \"code\": \"return 2\"}"},
         {"id": "a6", "name": "lua", "raw_arguments": "{not json"},
         {"id": "a7", "name": "lua", "arguments": {"code": "   \n"}},
         {"id": "a8", "name": "lua", "arguments": {"code": "return ("}},
         {"id": "a9", "name": "calc.add", "arguments": {"a": 1, "b": 2}}]
print(json.dumps({"steps": [{"text": "x"}], "code_steps": [{"tool_calls": calls}, {"text": "done"}]}))
PY
)
start_mock raw "$RAWFX"
config "providers = { $(provider openai $PORT_raw) }"
ask --mode lua --tools calc.add "raw"
expect_rc 0 "malformed lua calls do not end the run"
ccheck raw "raw(1, 0) == 'error (invalid_args): lua: \"code\" must be a string of Lua source, not a number'" "a number for code"
ccheck raw "raw(1, 1).startswith('error (invalid_args): lua: the arguments need \"code\", a string of Lua source')" "missing code"
ccheck raw "raw(1, 2) == 'error (invalid_args): lua: unknown argument \"shell\": lua takes one argument, \"code\" (a string of Lua)'" "an extra key"
ccheck raw "raw(1, 3).startswith('error (invalid_args): lua: the code is 40003 bytes; at most 32768 (code_mode.max_code_bytes)')" "huge code"
ccheck raw "raw(1, 4).startswith('error (invalid_args)') and 'code' in raw(1, 4) and 'duplicate' in raw(1, 4).lower()" "a duplicate code key"
ccheck raw "raw(1, 5).startswith('error (invalid_args): the arguments for lua are not a JSON object')" "not JSON"
ccheck raw "raw(1, 6) == 'error (invalid_args): lua: \"code\" is empty: send Lua source that returns what you need'" "blank code"
ccheck raw "res(1, 7)['code'] == 'syntax' and res(1, 7)['line'] == 1" "a syntax error with its line"
ccheck raw "raw(1, 8).startswith(\"error (unknown_tool): there is no tool named 'calc.add'; available: lua\")" "in code mode the model's direct tool call is refused"
stop_mocks

# -- limits: an endless loop, unbounded allocation and the deadline stop the chunk, named; the run goes on
LOOPS=$(python3 - <<'PY'
import json
codes = ["local n = 0\nwhile true do n = n + 1 end",
         "local ok = pcall(function() while true do end end)\nreturn 'escaped'",
         "return 'fine after all that'"]
steps = [{"tool_calls": [{"id": "l%d" % k, "name": "lua", "arguments": {"code": c}}]} for k, c in enumerate(codes)]
print(json.dumps({"steps": [{"text": "x"}], "code_steps": steps + [{"text": "the run went on"}]}))
PY
)
start_mock lim "$LOOPS"
config "providers = { $(provider openai $PORT_lim) }, code_mode = { instructions = 300000, memory_mb = 4 }"
ask --mode lua --tools calc.add "spin"
expect_rc 0 "the run survives its chunks' limits"
expect_out "the run went on" "the model answered after the limits"
ccheck lim "res(1)['code'] == 'limit_instructions' and res(1)['line'] == 2 and 'code_mode.instructions' in res(1)['limit']" "an endless loop: limit_instructions, line 2, the key named"
ccheck lim "res(2)['code'] == 'limit_instructions' and 'escaped' not in raw(2)" "pcall cannot swallow the kill"
ccheck lim "res(3)['ok'] and res(3)['value'] == 'fine after all that'" "the next chunk starts fresh"
stop_mocks
one_chunk mem 'local t = {}
for i = 1, 1e9 do t[i] = { i, tostring(i), {} } end'
config "providers = { $(provider openai $PORT_mem) }, code_mode = { instructions = 1e12, memory_mb = 4 }"
ask --mode lua --tools calc.add "grow"
expect_rc 0 "the run survives unbounded allocation"
ccheck mem "res(1)['code'] == 'limit_memory' and 'code_mode.memory_mb' in res(1)['limit']" "unbounded allocation: limit_memory, the key named"
ccheck mem "len(reqs) == 2" "the model was asked again after the kill"
stop_mocks
one_chunk dl 'while true do end'
config "providers = { $(provider anthropic $PORT_dl) }, code_mode = { instructions = 1e12, deadline_s = 0.5 }"
ask --mode lua --tools calc.add "spin"
expect_rc 0 "a chunk past its deadline"
ccheck dl "res(1)['code'] == 'limit_deadline' and 'code_mode.deadline_s' in res(1)['limit']" "stopped at code_mode.deadline_s, named"
config "providers = { $(provider anthropic $PORT_dl) }, code_mode = { instructions = -1 }"
ask --mode lua "x"
expect_rc 2 "a bad code_mode value"
expect_err "code_mode.instructions: expected a number above 0" "names the key"
config "providers = { $(provider anthropic $PORT_dl) }, code_mode = { instrs = 5 }"
ask --mode lua "x"
expect_err "code_mode.instrs is not a known key" "an unknown code_mode key"
stop_mocks

# -- print output is bounded
one_chunk pr 'for i = 1, 10000 do print("line " .. i) end return #"done"'
config "providers = { $(provider openai $PORT_pr) }, code_mode = { print_bytes = 200 }"
ask --mode lua --tools calc.add "print a lot"
ccheck pr "res(1)['ok'] and len(res(1)['print']) < 400 and 'output limit reached' in res(1)['print']" "print output cut at code_mode.print_bytes, marked"
stop_mocks

# -- taint: an open_world result inside a chunk escalates later medium+ calls (no terminal: denied)
TAINT1='local page = tools.call("web.get", { url = "http://x" })
local ok, err = pcall(tools.call, "probe.mark", { x = 1 })
return { page = page.text, ok = ok, code = err and err.code, msg = err and err.message }'
TAINT2='return tools.call("probe.mark", { x = 2 })'
start_mock taint "{\"steps\":[{\"text\":\"x\"}],\"code_steps\":[$(lua_step "$TAINT1" t1),$(lua_step "$TAINT2" t2),{\"text\":\"done\"}]}"
config "providers = { $(provider openai $PORT_taint) }"
ask --mode lua --tools 'web.get,probe.mark' "read then mark" < /dev/null
expect_rc 0 "tainted run"
ccheck taint "res(1)['value']['ok'] is False and res(1)['value']['code'] == 'denied' and 'outside content' in res(1)['value']['msg']" "the same chunk's medium call escalates after open_world"
ccheck taint "res(2)['ok'] is False and res(2)['code'] == 'denied' and 'outside content' in res(2)['error']" "a later chunk's medium call escalates too"
stop_mocks
one_chunk clean 'return tools.call("probe.mark", { x = 3 })'
config "providers = { $(provider openai $PORT_clean) }"
ask --mode lua --tools 'web.get,probe.mark' "mark" < /dev/null
ccheck clean "res(1)['ok'] and res(1)['value'] == {'marked': 3}" "without the open_world read the medium call runs"
stop_mocks

# -- approval inside a chunk waits for the approver (queue); a denial is seen by the chunk
APPR='local ok, r = pcall(tools.call, "probe.launch", { x = 7 })
return { ok = ok, r = ok and r or r.code, msg = not ok and r.message or nil }'
start_mock ap "{\"steps\":[{\"text\":\"x\"}],\"code_steps\":[$(lua_step "$APPR"),{\"text\":\"after: %{result}\"},$(lua_step "$APPR"),{\"text\":\"after: %{result}\"}]}"
config "providers = { $(provider openai $PORT_ap) }, approver = \"queue\", approval_timeout_s = 30"
pending_id() {
  for _ in $(seq 1 200); do
    id=$("$LUAGENT" --workspace "$WS" approvals list --json 2>/dev/null | python3 -c '
import json, sys
rows = [r for r in json.load(sys.stdin) if r["status"] == "pending"]
print(int(rows[0]["id"]) if rows else "")' 2>/dev/null)
    [ -n "$id" ] && { echo "$id"; return 0; }
    sleep 0.05
  done
  return 1
}
for verdict in approve deny; do
  timeout 60 "$LUAGENT" --workspace "$WS" ask --mode lua --tools probe.launch "launch" > "$WS/out" 2> "$WS/err" < /dev/null &
  APID=$!
  id=$(pending_id) || fail "no pending approval from the chunk"
  sleep 0.3
  kill -0 $APID 2>/dev/null && ok "$verdict: the chunk waits for the approver" || fail "$verdict: the run did not wait"
  if [ $verdict = approve ]; then
    "$LUAGENT" --workspace "$WS" approvals approve "$id" > /dev/null
  else
    "$LUAGENT" --workspace "$WS" approvals deny "$id" --reason "not today" > /dev/null
  fi
  wait $APID; RC=$?; OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
  expect_rc 0 "$verdict: the run finished"
done
ccheck ap "res(1)['value']['ok'] is True and res(1)['value']['r'] == {'launched': 7}" "approved: the call ran and the chunk got its result"
ccheck ap "res(3)['value']['ok'] is False and res(3)['value']['r'] == 'denied' and 'not today' in res(3)['value']['msg']" "denied: the chunk saw the denial and its reason"
stop_mocks

# -- the same on a terminal (pty): chat --mode lua prompts inside the chunk
for f in a b; do echo $f > "$WS/data/$f.txt"; done
TERM_CODE='local r = {}
for _, f in ipairs({ "a.txt", "b.txt" }) do
  local ok, e = pcall(tools.call, "fs.delete", { path = f })
  r[#r + 1] = f .. "=" .. (ok and "deleted" or e.code .. ":" .. e.message)
end
return table.concat(r, " | ")'
start_mock tty "{\"steps\":[{\"text\":\"x\"}],\"code_steps\":[$(lua_step "$TERM_CODE"),{\"text\":\"Chunk said: %{result}\"}]}"
config "providers = { $(provider openai $PORT_tty) }"
cat > "$WS/drive.py" <<'PY'
import os, pty, sys, time, select
binary, ws = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    os.chdir(ws)
    os.execv(binary, [binary, "chat", "--mode", "lua", "--tools", "fs.delete"])
out = b""
def read_until(token, timeout=15):
    global out
    end = time.time() + timeout
    while token not in out:
        left = end - time.time()
        if left <= 0:
            sys.stdout.write(out.decode(errors="replace"))
            raise SystemExit("timed out waiting for %r" % token)
        r, _, _ = select.select([fd], [], [], left)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                sys.stdout.write(out.decode(errors="replace"))
                raise SystemExit("EOF waiting for %r" % token)
            out += chunk
def say(line):
    os.write(fd, line.encode() + b"\n")
    time.sleep(0.1)
read_until(b"you> ")
say("delete both")
read_until(b"approve? ")
time.sleep(0.5)  # the chunk waits while the prompt is open
say("y")
read_until(b"approve? ")
say("n")
read_until(b"reason")
say("keep b")
read_until(b"Chunk said")
read_until(b"you> ")
os.write(fd, b"\x04")
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 99)
PY
OUT=$(timeout 60 python3 "$WS/drive.py" "$LUAGENT" "$WS" 2>&1); RC=$?; ERR=""
expect_rc 0 "chat --mode lua with approvals on a terminal"
expect_out "a.txt=deleted | b.txt=denied:" "approved on the terminal: ran; denied: the chunk saw it"
expect_out "keep b" "the operator's reason reached the chunk"
[ ! -e "$WS/data/a.txt" ] && [ -e "$WS/data/b.txt" ] && ok "exactly the approved delete ran" || fail "files after the terminal approvals"
stop_mocks

finish
