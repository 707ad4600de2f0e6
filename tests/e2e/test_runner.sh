#!/bin/bash
# e2e: `luagent test` itself. A failing test exits 1 naming file:line with
# the diff; a test cannot reach the network (a real 127.0.0.1 server, a real
# provider) nor touch the real workspace's data/ and state.db; a hanging test
# is stopped and the file goes on; --junit and --tap are well-formed.
set -u
. "$(dirname "$0")/lib/common.sh"
unset LUAGENT_PROVIDER LUAGENT_MODEL LUAGENT_BASE_URL LUAGENT_API_KEY
mkdir -p "$WS/tests" "$WS/skills/greet" "$WS/tmp"
export TMPDIR="$WS/tmp" # where the runner's temporary workspaces go (and must not stay)
conf() { printf 'return {\n%s\n}\n' "$1" > "$WS/luagent.lua"; }
conf 'http_allow = { "127.0.0.1" },'
cat > "$WS/skills/greet/skill.lua" <<'EOF'
return {
  name = "greet",
  description = "Greets people",
  tools = {
    hello = {
      description = "Say hello",
      params = { type = "object", required = { "name" }, properties = { name = { type = "string" } } },
      impact = "read",
      run = function(args) return { text = "hello " .. args.name } end,
    },
    fetch = {
      description = "Fetch a page (read-only: the loop runs these in parallel)",
      params = { type = "object", required = { "n" }, properties = { n = { type = "integer" } } },
      impact = "read",
      run = function(args)
        return tools.call("http.request", { url = "http://127.0.0.1:9/page/" .. args.n }).body
      end,
    },
    ask = {
      description = "Ask the model from inside a skill",
      params = { type = "object", properties = {} },
      impact = "low",
      run = function() return { answer = delegate("hi from a skill") } end,
    },
  },
}
EOF

# 1. a deliberately failing test: exit 1, file:line of the expect, the diff, the summary
cat > "$WS/skills/greet/greet_test.lua" <<'EOF'
test("passes", function()
  expect(tools.call("greet.hello", { name = "Ada" })).to_equal({ text = "hello Ada" })
end)
describe("greeting", function()
  test("fails on purpose", function()
    local r = tools.call("greet.hello", { name = "Ada" })
    expect(r).to_equal({ text = "hello Bob", n = 1 })
  end)
end)
test("raises where it is called", function()
  tools.call("greet.hello", {})
end)
EOF
expect_rc 1 "$LUAGENT" test && out_has "FAIL skills/greet/greet_test.lua:7: greeting > fails on purpose" &&
  out_has 'expected: {n = 1, text = "hello Bob"}' && out_has 'actual: {text = "hello Ada"}' &&
  out_has 'at .n: expected 1, got nil' && out_has 'at .text: expected "hello Bob", got "hello Ada"' &&
  out_has "FAIL skills/greet/greet_test.lua:11: raises where it is called" && out_has "[invalid_args]" &&
  out_has "1 passed, 2 failed" && pass "a failing test: exit 1, file:line and the diff"
expect_rc 0 "$LUAGENT" test --filter passes && out_has "1 passed, 0 failed" && pass "--filter runs only matching tests"
expect_rc 1 "$LUAGENT" test --filter nothing-matches && err_has "no tests ran" && pass "--filter matching nothing fails"
expect_rc 2 "$LUAGENT" test --bogus && err_has "unknown option --bogus" && pass "unknown option: usage error"
expect_rc 2 "$LUAGENT" test no/such/dir && err_has "no/such/dir" && pass "a missing path is named"
(cd / && "$LUAGENT" --workspace "$WS" test skills/greet/greet_test.lua --filter passes) | grep -q "1 passed" &&
  pass "a path relative to --workspace" || fail "a path relative to the workspace was not found"
conf 'http_allow = { "127.0.0.1" }, test_paths = { "skills", "tset" },'
expect_rc 2 "$LUAGENT" test && err_has "luagent.lua: test_paths: tset: no such file or folder" && pass "a misspelt test_paths entry is named"
conf 'http_allow = { "127.0.0.1" }, test_paths = { "tests" },'
expect_rc 1 "$LUAGENT" test && err_has "no *_test.lua files found" && pass "test_paths decides where tests are found"
conf 'http_allow = { "127.0.0.1" },'
rm "$WS/skills/greet/greet_test.lua"

# 2. --junit and --tap are well-formed, with the failures in them
cat > "$WS/tests/mixed_test.lua" <<'EOF'
test("one <&> \"quoted\"", function() expect(1).to_be(1) end)
test("two", function() expect("a\1b").to_be("ab") end)
test("three", function() print("printed by three"); expect(nil).to_be_truthy() end)
EOF
expect_rc 1 "$LUAGENT" test --junit "$WS/junit.xml" tests && out_has "printed by three" &&
  python3 - "$WS/junit.xml" <<'PY' && pass "--junit: well-formed XML with the failures" || fail "junit: $(head -c 600 "$WS/junit.xml")"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "testsuites" and root.get("tests") == "3" and root.get("failures") == "2", root.attrib
cases = root.findall("./testsuite/testcase")
assert [c.get("name") for c in cases] == ['one <&> "quoted"', "two", "three"], cases
assert cases[0].find("failure") is None
f = cases[2].find("failure")
assert f is not None and "tests/mixed_test.lua:3" in f.text, f.text
assert "printed by three" in cases[2].find("system-out").text
PY
expect_rc 1 "$LUAGENT" test --tap tests &&
  python3 - "$WS/.out" <<'PY' && pass "--tap: version, numbered results, plan" || fail "tap: $(head -c 600 "$WS/.out")"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[0] == "TAP version 13", lines[0]
results = [l for l in lines if re.match(r"^(not )?ok \d+ ", l)]
assert [int(re.match(r"^(?:not )?ok (\d+)", l).group(1)) for l in results] == [1, 2, 3], results
assert results[0].startswith("ok 1 ") and results[1].startswith("not ok 2 "), results
assert "1..3" in lines, lines
# every other line is YAML detail (indented) or a comment
for l in lines[1:]:
    assert re.match(r"^((not )?ok \d+ |1\.\.\d+$|# |  )", l), l
PY
expect_rc 1 "$LUAGENT" --json test tests &&
  python3 -c "import json,sys; d=json.load(open('$WS/.out')); assert d['passed']==1 and d['failed']==2 and d['tests'][1]['where']=='tests/mixed_test.lua:2', d" &&
  pass "--json: the results as one document" || fail "--json output: $(head -c 400 "$WS/.out")"
rm "$WS/tests/mixed_test.lua"

# 3. the network is refused: a real http.request to a 127.0.0.1 server, and a real provider
PORT=$(free_port)
python3 - "$PORT" "$WS/hits.log" <<'PY' &
import http.server, sys
log = open(sys.argv[2], "a")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self): log.write("GET " + self.path + "\n"); log.flush(); self.send_response(200); self.end_headers(); self.wfile.write(b"real")
    do_POST = do_GET
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
PIDS="$PIDS $!"
for _ in $(seq 50); do curl -s "http://127.0.0.1:$PORT/ready" >/dev/null 2>&1 && break; sleep 0.1; done
: > "$WS/hits.log"
echo "tools.call(\"http.request\", { url = \"http://127.0.0.1:$PORT/control\" })" > "$WS/control.lua"
(cd "$WS" && "$LUAGENT" run control.lua >/dev/null 2>&1)
grep -q "GET /control" "$WS/hits.log" && pass "control: luagent run reaches the server" || fail "the server saw nothing from luagent run"
: > "$WS/hits.log"
conf "http_allow = { \"127.0.0.1\" }, secrets = { TOKEN = { origins = { \"http://127.0.0.1:$PORT\" } } }, providers = { { kind = \"openai\", base_url = \"http://127.0.0.1:$PORT/v1\", model = \"m\", api_key = \"k\" } },"
cat > "$WS/tests/net_test.lua" <<EOF
test("http caught by the code", function()
  local ok, err = pcall(tools.call, "http.request", { url = "http://127.0.0.1:$PORT/caught" })
  expect(ok).to_be(false)
  expect(err.code).to_be("fake_unmatched")
end)
test("real provider through delegate", function()
  pcall(delegate, "hello")
end)
test("real provider from inside a skill", function()
  pcall(tools.call, "greet.ask", {})
end)
test("a secret header reaches the fake as its reference, never resolved", function()
  fake.http(function(req) return { body = json.encode(req.headers) } end)
  local r = tools.call("http.request", { url = "http://127.0.0.1:$PORT/s", headers = { Authorization = { secret = "TOKEN" } } })
  expect(json.decode(r.body)).to_equal({ Authorization = { secret = "TOKEN" } })
end)
test("faked, it answers", function()
  fake.http { ["GET http://127.0.0.1:$PORT/x"] = { status = 201, body = "fake" } }
  expect(tools.call("http.request", { url = "http://127.0.0.1:$PORT/x" }).body).to_be("fake")
end)
EOF
expect_rc 1 "$LUAGENT" test tests/net_test.lua &&
  out_has "FAIL tests/net_test.lua:2: http caught by the code: unmatched request GET http://127.0.0.1:$PORT/caught" &&
  out_has "FAIL tests/net_test.lua:7: real provider through delegate: the model was called" &&
  out_has "FAIL tests/net_test.lua:10: real provider from inside a skill: the model was called" && out_has "2 passed, 3 failed" &&
  pass "an unmatched request and a configured provider fail the test, even when caught"
[ -s "$WS/hits.log" ] && fail "the real server was reached: $(cat "$WS/hits.log")" || pass "the real server saw no request"
rm "$WS/tests/net_test.lua"
conf 'http_allow = { "127.0.0.1" },'

# 4. a hanging test is stopped with a timeout; the file's next test still runs
conf 'http_allow = { "127.0.0.1" }, limits = { instructions = 1e15 },'
cat > "$WS/tests/hang_test.lua" <<'EOF'
test("spins", function()
  while true do end
end)
test("spins in the model", function()
  model.fn(function() while true do end end)
  delegate("x")
end)
test("runs after", function() expect(true).to_be(true) end)
EOF
t0=$(date +%s)
expect_rc 1 "$LUAGENT" test --timeout 1 tests/hang_test.lua &&
  out_has "FAIL tests/hang_test.lua:2: spins: test timed out after 1s" &&
  out_has "spins in the model: test timed out after 1s" && out_has "1 passed, 2 failed" &&
  pass "a hanging test is stopped with a timeout, and the next one runs"
[ $(( $(date +%s) - t0 )) -le 10 ] && pass "stopped within the timeout" || fail "the hanging tests took $(( $(date +%s) - t0 ))s"
conf 'http_allow = { "127.0.0.1" },'
cat > "$WS/tests/hang_test.lua" <<'EOF'
test("instruction limit", function() while true do end end)
EOF
expect_rc 1 "$LUAGENT" test tests/hang_test.lua && out_has "instruction limit of" && out_has "[limit_instructions]" &&
  pass "the workspace's limits apply to tests"
rm "$WS/tests/hang_test.lua"

# 5. the real workspace's data/ and .luagent/state.db are never touched
mkdir -p "$WS/data"
echo "real data" > "$WS/data/keep.txt"
echo 'memory.set("secret_plan", "the real one")' > "$WS/seed.lua"
(cd "$WS" && "$LUAGENT" run seed.lua >/dev/null) || fail "seeding the real state.db"
snapshot() { (cd "$WS" && find data .luagent -type f ! -name '*-shm' | sort | xargs sha256sum); }
before=$(snapshot)
cat > "$WS/tests/escape_test.lua" <<'EOF'
test("sees an empty workspace of its own", function()
  expect(memory.get("secret_plan")).to_be_nil()
  expect(function() tools.call("fs.read", { path = "keep.txt" }) end).to_raise()
  expect(tools.call("fs.list", {})).to_equal({})
end)
test("writes, deletes and remembers only in its own", function()
  tools.call("fs.write", { path = "keep.txt", content = "overwritten" })
  fake.approver { ["fs.delete"] = "approve" }
  tools.call("fs.delete", { path = "keep.txt" })
  memory.set("secret_plan", "changed")
  events.emit("note", { text = "from a test" })
  expect(function() tools.call("fs.read", { path = "../.luagent/state.db" }) end).to_raise()
  expect(#audit() > 0).to_be(true)
end)
test("the next test starts clean again", function()
  expect(memory.get("secret_plan")).to_be_nil()
  expect(audit()).to_equal({})
end)
EOF
expect_rc 0 "$LUAGENT" test tests/escape_test.lua && out_has "3 passed, 0 failed" && pass "tests get their own data/ and state"
after=$(snapshot)
[ "$before" = "$after" ] && pass "the real data/ and state.db are unchanged" || fail "the real workspace changed: $before // $after"
[ "$(cat "$WS/data/keep.txt")" = "real data" ] || fail "data/keep.txt changed"
[ -z "$(ls -A "$WS/tmp")" ] && pass "temporary workspaces are removed" || fail "temporary workspaces left behind: $(ls "$WS/tmp")"
rm "$WS/tests/escape_test.lua"

# 6. a file that does not load is one failure naming the line; the others still run
printf 'test("x", function()\n  expect(1).to_be(1)\nend\n' > "$WS/tests/broken_test.lua"
printf 'error("top level blew up")\n' > "$WS/tests/boom_test.lua"
printf 'test("fine", function() end)\n' > "$WS/tests/ok_test.lua"
expect_rc 1 "$LUAGENT" test && out_has "FAIL tests/broken_test.lua:4: (file): ')' expected (to close '(' at line 1)" && out_has "FAIL tests/boom_test.lua:1: (file): top level blew up" &&
  out_has "1 passed, 2 failed (3 files" && pass "a file that does not load fails with its line"
rm "$WS/tests/broken_test.lua" "$WS/tests/boom_test.lua" "$WS/tests/ok_test.lua"

# 7. the test API reaches only tests; a test cannot clear its own failures
cat > "$WS/tests/api_test.lua" <<'EOF'
local order = {}
before_each(function() order[#order + 1] = "before" end)
after_each(function() order[#order + 1] = "after" end)
test("hooks run around each test", function() order[#order + 1] = "test" end)
test("in order", function() expect(order).to_equal({ "before", "test", "after", "before" }) end)
test("no runner internals", function()
  expect(__test).to_be(false)
  expect(getmetatable(_G)).to_be(false)
end)
test("matchers", function()
  expect(0.1 + 0.2).to_be_near(0.3, 1e-9)
  expect("abc").never.to_match("^b")
  expect({ 1, { x = 2 } }).to_contain({ x = 2 })
  local e = expect(function() error({ code = "boom", message = "bad" }) end).to_raise("boom")
  expect(e.message).to_be("bad")
  expect(function() end).never.to_raise()
end)
test("a matcher that does not exist is named", function() expect(1).to_bee(1) end)
test("model.script is checked where it is called", function()
  model.script { { tool = 42 } }
end)
test("declaring inside a test is refused", function()
  test("late", function() end)
end)
EOF
expect_rc 1 "$LUAGENT" test tests/api_test.lua && out_has "4 passed, 3 failed" &&
  out_has "FAIL tests/api_test.lua:23: declaring inside a test is refused: test() belongs at the top of the file or in a describe" &&
  out_has "FAIL tests/api_test.lua:18: a matcher that does not exist is named: expect(...).to_bee is not a matcher" &&
  out_has "FAIL tests/api_test.lua:20: model.script is checked where it is called: model.script" &&
  pass "before/after_each, matchers, and errors at the test's line"
(cd "$WS" && printf 'return type(rawget(_G, "expect")) .. " " .. tostring(pcall(function() return model end))' > outside.lua && "$LUAGENT" run outside.lua) | grep -q "^nil false" &&
  pass "the test API does not exist outside luagent test" || fail "the test API leaked into luagent run"

# 8. a test that turns the fakes on themselves ends cleanly, failing
cat > "$WS/tests/selfish_test.lua" <<'EOF'
test("fake.http calling http.request", function()
  fake.http(function(req) return tools.call("http.request", { url = req.url }) end)
  tools.call("http.request", { url = "http://127.0.0.1:1/x" })
end)
test("an approver that escalates again", function()
  fake.approver(function(req) pcall(tools.call, "fs.delete", { path = "x" }); return "approve" end)
  tools.call("fs.write", { path = "x", content = "1" })
  tools.call("fs.delete", { path = "x" })
end)
test("model.fn with a bad turn, caught", function()
  model.fn(function(req) return { tool = 42 } end)
  pcall(delegate, "go")
end)
test("model.fn yielding across the runner", function()
  model.fn(function(req) coroutine.yield(1) end)
  coroutine.wrap(function() return delegate("x") end)()
end)
test("alive", function() end)
EOF
expect_rc 1 "$LUAGENT" test --timeout 10 tests/selfish_test.lua && out_has "1 passed, 4 failed" &&
  out_has "model.fn with a bad turn, caught: model.fn returned a bad turn" && out_has "yield across" &&
  pass "fakes turned on themselves: each test fails, none hangs or crashes"
rm "$WS/tests/selfish_test.lua"

# 9. parallel tool threads reach the fakes and the model one at a time
cat > "$WS/tests/parallel_test.lua" <<'EOF'
test("eight parallel fetches through fake.http and fake.approver", function()
  local calls = {}
  for i = 1, 8 do calls[i] = { tool = "greet.fetch", args = { n = i } } end
  model.script { { tools = calls }, { text = "done" } }
  local seen = 0
  fake.http(function(req) seen = seen + 1; return { body = "page " .. req.url:match("%d+$") } end)
  fake.approver(function(req) return "approve" end)
  expect(delegate("fetch them", { tools = { "greet.fetch" } })).to_be("done")
  expect(seen).to_be(8)
  local results = {}
  for _, m in ipairs(model.requests()[2].messages) do
    if m.role == "tool" then results[#results + 1] = m.content end
  end
  expect(#results).to_be(8)
  expect(results[8]).to_contain("page 8")
end)
EOF
for i in 1 2 3; do
  expect_rc 0 "$LUAGENT" test tests/parallel_test.lua || break
done && out_has "1 passed, 0 failed" && pass "parallel tool threads and the fakes"
rm "$WS/tests/parallel_test.lua"

# 10. files luagent.lua names in subfolders come along (the system prompt)
mkdir -p "$WS/prompts"
echo "You are the test prompt." > "$WS/prompts/system.md"
conf 'http_allow = { "127.0.0.1" }, system_prompt = "prompts/system.md",'
cat > "$WS/tests/prompt_test.lua" <<'EOF'
test("the configured system prompt file", function()
  model.script { { text = "ok" } }
  delegate("x")
  expect(model.requests()[1].system).to_contain("You are the test prompt.")
end)
EOF
expect_rc 0 "$LUAGENT" test tests/prompt_test.lua && pass "system_prompt = a file in a subfolder is copied for the tests"
rm "$WS/tests/prompt_test.lua"
conf 'http_allow = { "127.0.0.1" },'

# 11. the workspace `luagent init` writes comes with tests that pass
"$LUAGENT" init "$WS/fresh" >/dev/null && expect_rc 0 "$LUAGENT" --workspace "$WS/fresh" test &&
  out_has "5 passed, 0 failed" && pass "luagent init's workspace passes its own tests"

# 12. interrupted (Ctrl-C) or cut off by a closed pipe, the run ends and cleans up
conf 'http_allow = { "127.0.0.1" }, limits = { instructions = 1e15 },'
printf 'test("waits", function() while true do end end)\ntest("never", function() end)\n' > "$WS/tests/slow_test.lua"
t0=$(date +%s)
(cd "$WS" && exec "$LUAGENT" test --timeout 60 tests/slow_test.lua >"$WS/.out" 2>"$WS/.err") &
pid=$!
sleep 1
kill -INT "$pid"
wait "$pid"
rc=$?
[ "$rc" = 1 ] && err_has "stopped" && out_has "[stopped]" && [ $(( $(date +%s) - t0 )) -le 10 ] &&
  pass "Ctrl-C stops the running test and the run" || fail "after SIGINT: rc=$rc $(cat "$WS/.out" "$WS/.err" | head -c 400)"
[ -z "$(ls -A "$WS/tmp")" ] && pass "an interrupted run removes its temporary workspace" || fail "left behind after SIGINT: $(ls "$WS/tmp")"
printf 'for i = 1, 40 do test("t" .. i, function() end) end\n' > "$WS/tests/slow_test.lua"
(cd "$WS" && "$LUAGENT" test --tap tests/slow_test.lua | head -1 >/dev/null)
[ -z "$(ls -A "$WS/tmp")" ] && pass "a closed pipe (| head) leaves nothing behind" || fail "left behind after SIGPIPE: $(ls "$WS/tmp")"
rm "$WS/tests/slow_test.lua"

# 13. model.fn -> delegate() -> parallel read-only tools that use fake.http:
# the tools' threads call back into the test while model.fn waits for them
# (was a deadlock until the process watchdog killed the whole run)
conf 'http_allow = { "127.0.0.1" },'
cat > "$WS/tests/nest_test.lua" <<'EOF'
test("model.fn delegates to parallel fetches", function()
  fake.http(function(req) return { status = 200, body = "page " .. req.url:match("%d+$") } end)
  fake.approver("approve") -- the approver is asked from the tools' threads too
  local n = 0
  model.fn(function(request)
    n = n + 1
    if n == 1 then return { text = delegate("inner", { tools = { "greet.fetch" } }) } end
    if n == 2 then
      return { tools = { { tool = "greet.fetch", args = { n = 1 } }, { tool = "greet.fetch", args = { n = 2 } },
                         { tool = "greet.fetch", args = { n = 3 } } } }
    end
    local m = request.messages
    return { text = "got " .. m[#m].content }
  end)
  expect(delegate("outer")).to_match("^got \"page %d\"$")
  expect(#calls("http.request")).to_be(3)
end)
test("the file goes on", function() expect(1).to_be(1) end)
EOF
t0=$(date +%s)
expect_rc 0 timeout -k 2 40 "$LUAGENT" test --timeout 10 --junit "$WS/nest.xml" tests/nest_test.lua &&
  out_has "2 passed, 0 failed" && [ -s "$WS/nest.xml" ] && [ $(( $(date +%s) - t0 )) -le 10 ] &&
  pass "model.fn -> delegate -> parallel fake.http runs (no deadlock)"
[ -z "$(ls -A "$WS/tmp")" ] || fail "left behind after the nested test: $(ls "$WS/tmp")"
rm -f "$WS/tests/nest_test.lua" "$WS/nest.xml"

# 14. names and messages cannot forge report lines: TAP escapes '#' (a
# directive: "# TODO" would excuse the failure) and a backslash, and keeps a
# name on one line; the text output keeps names on one line, indents every
# further line of a message and shows control characters escaped
cat > "$WS/tests/forge_test.lua" <<'EOF'
test("real failure # TODO", function() expect(1).to_be(2) end)
test("x\nok 7 - forged\n1..1", function() expect(1).to_be(2) end)
test("y \\# SKIP", function() expect(1).to_be(2) end)
test("z\n5 passed, 0 failed (1 file, 0.01s)\27[2K", function() error("m\n9 passed, 0 failed\r\27[31m") end)
EOF
expect_rc 1 "$LUAGENT" test --tap tests/forge_test.lua &&
  python3 - "$WS/.out" <<'EOF' && pass "TAP: '#', '\\' and newlines in names are escaped (no directive, no forged line)" || fail "see above: $(head -c 600 "$WS/.out")"
import re, sys
lines = open(sys.argv[1], "rb").read().decode().split("\n")
tests = [l for l in lines if re.match(r"(not )?ok ", l)]
assert len(tests) == 4 and all(l.startswith("not ok ") for l in tests), tests
assert sum(1 for l in lines if re.match(r"\d+\.\.\d+", l)) == 1, lines
for l in tests:  # a '#' after an even run of backslashes would start a directive
    assert not re.search(r"(^|[^\\])(\\\\)*#", l), l
assert "\x1b" not in "\n".join(lines) and "\r" not in "\n".join(lines)
assert all(l == "" or re.match(r"((not )?ok |  |1\.\.|# |TAP version 13$)", l) for l in lines), lines
EOF
expect_rc 1 "$LUAGENT" test tests/forge_test.lua &&
  python3 - "$WS/.out" <<'EOF' && pass "text output: a name or a message cannot forge a summary line or reach the terminal raw" || fail "see above: $(head -c 600 "$WS/.out")"
import re, sys
out = open(sys.argv[1], "rb").read().decode()
assert "\x1b" not in out and "\r" not in out, repr(out)
lines = out.split("\n")
summaries = [l for l in lines if re.match(r"\d+ passed", l)]
assert summaries == ["0 passed, 4 failed (1 file, %s)" % summaries[0].split(", ")[-1][:-1]] or \
    (len(summaries) == 1 and summaries[0].startswith("0 passed, 4 failed")), summaries
assert all(l == "" or l.startswith(("FAIL ", "    ", "0 passed")) for l in lines), lines
assert "x\\nok 7 - forged\\n1..1" in out and "\\x1b[2K" in out, out
EOF
rm "$WS/tests/forge_test.lua"

# 15. --junit is well-formed XML whatever the tests hold: a long non-ASCII
# first line cut at 511 bytes (on a character boundary, either parity),
# control characters and bytes that are not UTF-8 in names, messages, output
cat > "$WS/tests/xml_test.lua" <<'EOF'
test("a long non-ASCII value", function() expect(string.rep("é", 300)).to_be("e") end)
test("one byte shifted", function() expect(string.rep("é", 300)).to_be("ee") end)
test("three-byte characters", function() expect(string.rep("€", 300)).to_be("e") end)
test("controls \1\27 in a name", function() print("out \2\27[31m \xff\xfe") error("msg \3 \xc3") end)
test("passes", function() end)
EOF
"$LUAGENT" --workspace "$WS" test --junit "$WS/j.xml" tests/xml_test.lua >/dev/null 2>&1
python3 - "$WS/j.xml" <<'EOF' && pass "--junit: well-formed XML for any content; the first line is cut between characters" || fail "see above: $(head -c 600 "$WS/.out")"
import sys, xml.dom.minidom as m
d = m.parse(sys.argv[1])
cases = d.getElementsByTagName("testcase")
assert len(cases) == 5, len(cases)
fails = d.getElementsByTagName("failure")
assert len(fails) == 4, len(fails)
for f in fails[:3]:
    msg = f.getAttribute("message")
    assert len(msg.encode()) <= 511 and len(msg.encode()) >= 505, len(msg.encode())
    assert "\ufffd" not in msg, msg[-5:]
EOF
rm -f "$WS/tests/xml_test.lua" "$WS/j.xml"

# 16. a test file cannot reach the harness or change how it judges: no
# metatable, no __test (load() chunks included), a test's own pcall, error
# or expect (even through load) and edits of the API stay in that test;
# error objects with metamethods and failures in coroutines still fail
cat > "$WS/tests/escape_test.lua" <<'EOF'
-- every way in that the red team and the brief name; each test below must FAIL
local reached = {}
local function grab(what, v) if type(v) == "table" then reached[#reached + 1] = what end end
grab("getmetatable(_G)", getmetatable(_G))
grab("__test", __test)
grab("load __test", load("return __test")())
local ok, henv = pcall(function() return getmetatable(load("return _ENV")()) end)
grab("load _ENV mt", ok and henv)
local lenv = load("return _ENV")()
if lenv ~= _G then reached[#reached + 1] = "load's _ENV is not the file's" end
test("top-level overrides do not reach the harness", function()
  if #reached > 0 then error("reached: " .. table.concat(reached, ", ")) end
  expect(1).to_be(2)
end)
test("overrides pcall, error and expect, then fails for real", function()
  pcall = function() return true end
  error = function() end
  expect = function() return setmetatable({}, { __index = function() return function() end end }) end
  load("pcall = function() return true end; error = function() end")()
  local x
  x()
end)
test("the next test has the real expect", function() expect(1).to_be(2) end)
test("an error object with metamethods", function()
  rawequal(1, 1)
  local mt = { __tostring = function() return "ok" end, __eq = function() return true end,
               __index = function() return "error" end, __concat = function() return "" end,
               __pairs = function() return function() end, nil, nil end, __len = function() return 0 end }
  error(setmetatable({}, mt))
end)
test("an error object whose code raises", function()
  error({ code = setmetatable({}, { __tostring = function() error("boom") end }), message = "real message" })
end)
test("error(nil)", function() error(nil) end)
test("a failure inside a coroutine", function()
  local co = coroutine.wrap(function() coroutine.yield(1); expect(1).to_be(2) end)
  co(); co()
end)
test("a yielded coroutine returned", function()
  local co = coroutine.create(function() coroutine.yield() end)
  coroutine.resume(co)
  expect(coroutine.status(co)).to_be("suspended")
  return co
end)
test("the string metatable", function()
  expect(pcall(function() getmetatable("").__index.rep = function() return "" end end)).to_be(false)
  expect(("ab"):rep(2)).to_be("abab")
end)
test("edits the API", function()
  fake.http = nil
  model.fn = nil
  expect = nil
  expect(1)
end)
test("passes: the API is whole again", function()
  assert(type(fake.http) == "function" and type(model.fn) == "function")
  assert(pcall(error, "x") == false)
  assert(getmetatable(events) == false)
end)
EOF
expect_rc 1 "$LUAGENT" test tests/escape_test.lua && out_has "3 passed, 8 failed" &&
  out_has "tests/escape_test.lua:13: top-level overrides do not reach the harness: expected 2, got 1" &&
  out_has "overrides pcall, error and expect, then fails for real: attempt to call a nil value (local 'x')" &&
  out_has "tests/escape_test.lua:23: the next test has the real expect: expected 2, got 1" &&
  out_has "an error object with metamethods: {}" && out_has "an error object whose code raises: real message" &&
  out_has "error(nil): nil" && out_has "a failure inside a coroutine:" && out_has "edits the API: undefined global 'expect'" &&
  pass "a test file cannot reach the harness nor make a failure pass"
rm "$WS/tests/escape_test.lua"

# 17. symlinks in skills/: cycles (three links to ..) and a chain of links
# that would reach 3^10 paths are entered once per folder (was exponential:
# ~10 s for the three links); a folder too big to copy is a clear error
mkdir -p "$WS/skills/loop" "$WS/chain/d0"
ln -s .. "$WS/skills/loop/a"; ln -s .. "$WS/skills/loop/b"; ln -s .. "$WS/skills/loop/c"
for i in 0 1 2 3 4 5 6 7 8 9; do
  mkdir -p "$WS/chain/d$((i + 1))"
  for l in a b c; do ln -s "../d$((i + 1))" "$WS/chain/d$i/$l"; done
done
echo 'return {}' > "$WS/chain/d10/x.lua"
ln -s ../chain/d0 "$WS/skills/chain"
printf 'test("t", function() expect(1).to_be(1) end)\n' > "$WS/tests/link_test.lua"
t0=$(date +%s)
expect_rc 0 timeout 30 "$LUAGENT" test tests/link_test.lua && out_has "1 passed, 0 failed" &&
  [ $(( $(date +%s) - t0 )) -le 3 ] && pass "symlink cycles and chains in skills/ are walked once per folder" ||
  fail "symlinks in skills/: rc=$? after $(( $(date +%s) - t0 ))s"
printf 'test("in the loop", function() end)\n' > "$WS/skills/loop/loop_test.lua"
t0=$(date +%s)
expect_rc 0 timeout 30 "$LUAGENT" test --filter "in the loop" skills/loop && out_has "1 passed, 0 failed" &&
  [ $(( $(date +%s) - t0 )) -le 3 ] && pass "discovery walks the same links once per folder"
rm -rf "$WS/skills/loop" "$WS/skills/chain" "$WS/chain"
mkdir -p "$WS/skills/big"
python3 -c 'import os, sys; [open(os.path.join(sys.argv[1], "f%d.txt" % i), "w").close() for i in range(20001)]' "$WS/skills/big"
expect_rc 1 timeout 60 "$LUAGENT" test tests/link_test.lua &&
  out_has "skills/ and automations/: more than 20000 files or 512 MiB to copy" && pass "a workspace too big to copy for the tests is a clear error"
[ -z "$(ls -A "$WS/tmp")" ] || fail "left behind after the copy failed: $(ls "$WS/tmp")"
rm -rf "$WS/skills/big" "$WS/tests/link_test.lua"

finish
