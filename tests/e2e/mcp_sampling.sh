#!/bin/bash
# e2e: an MCP server's sampling/createMessage (tests/mcp/fake_server.py's
# `sample` tool asks whatever the client declared). Refused unless the
# server's config allows it (and then the capability is not even
# declared); when allowed it runs through the configured provider (the
# mock model, whose request log shows what was sent: no tools, maxTokens
# capped by config), is counted against the run's budget (model calls and
# tokens), goes to the approver when config says approve = true, maps back
# to {role, content, model, stopReason}, and is audited as
# mcp.NAME.sampling. Bad requests (image content, tools) are refused.
set -u
. "$(dirname "$0")/lib/common.sh"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed for the fake MCP server" >&2; exit 1; }
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cp "$SRC/tests/mcp/fake_server.py" "$WS/fake_server.py"
LOG="$WS/fake.log"
unset LUAGENT_PROVIDER LUAGENT_MODEL LUAGENT_BASE_URL LUAGENT_API_KEY

# the mock model: every request answers the next step
start_mock() {
  printf '%s' "$1" > "$WS/m.fixture.json"
  rm -f "$WS/m.port" "$WS/m.log"
  python3 "$SRC/tests/mock_llm.py" --script "$WS/m.fixture.json" --port-file "$WS/m.port" --log "$WS/m.log" &
  PIDS="$PIDS $!"
  for _ in $(seq 100); do [ -s "$WS/m.port" ] && break; sleep 0.05; done
  [ -s "$WS/m.port" ] || { echo "FAIL: the mock model did not start" >&2; exit 1; }
  MPORT=$(cat "$WS/m.port")
}
# conf SAMPLING [EXTRA]: the fake server with sampling = SAMPLING, the mock as provider
conf() {
  printf 'return {\n  providers = { { name = "mock", kind = "openai", base_url = "http://127.0.0.1:%s/v1", model = "mock-model", max_retries = 0, timeout_s = 10 } },\n  mcp = { servers = { fake = { command = "python3", args = { "%s" }, timeout_s = 5, env = { FAKE_LOG = "%s" }%s } } },\n%s\n}\n' \
    "${MPORT:-9}" "$WS/fake_server.py" "$LOG" "${1:+, sampling = $1}" "${2:-}" > "$WS/luagent.lua"
}
lua() { printf '%s\n' "$1" > "$WS/t.lua"; }

# 1. config: wrong types and unknown keys are named with the line
printf 'return {\n  mcp = { servers = {\n    x = { command = "a", sampling = "yes" } } } }\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" tools list && err_has "luagent.lua:3" && err_has "mcp.servers.x.sampling: expected true, false or" && pass "sampling of a wrong type: file and line"
printf 'return { mcp = { servers = { x = { command = "a", sampling = { max_tokenz = 5 } } } } }\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" tools list && err_has "max_tokenz is not a known key" && pass "an unknown sampling key is refused"
printf 'return { mcp = { servers = { x = { command = "a", sampling = { max_tokens = 0 } } } } }\n' > "$WS/luagent.lua"
expect_rc 2 "$LUAGENT" tools list && err_has "mcp.servers.x.sampling.max_tokens: expected a number from 1" && pass "max_tokens out of range is refused"

# 2. not allowed: refused, not declared, nothing reaches the model
start_mock '{"steps": [{"text": "should never be asked", "repeat": true}]}'
conf
expect_rc 0 "$LUAGENT" mcp trust fake --yes
lua 'print(tools.call("mcp.fake.sample", {}).text)'
expect_rc 0 "$LUAGENT" run t.lua </dev/null && out_has '"error"' && out_has "luagent does not allow sampling for this server" && pass "sampling not allowed: the server gets an error"
grep '"initialize"' "$LOG" | grep -q sampling && fail "the sampling capability was declared without config" || pass "without config the sampling capability is not declared"
[ ! -s "$WS/m.log" ] && pass "a refused sampling never reaches the model" || fail "the model was asked: $(head -c 300 "$WS/m.log")"
expect_rc 0 "$LUAGENT" audit tail -n 50 --json && grep -q "mcp.fake.sampling" "$WS/.out" && grep -q '"refused"' "$WS/.out" && pass "the refusal is audited" || fail "audit: $(grep -o '.\{0,200\}sampling.\{0,200\}' "$WS/.out" | head -3)"

# 3. allowed: the provider answers; maxTokens capped; no tools; mapped back
kill $PIDS 2>/dev/null; PIDS=""
start_mock '{"steps": [{"text": "four", "usage": {"input": 30, "output": 2}}, {"text": "again", "usage": {"input": 30, "output": 2}, "repeat": true}]}'
conf '{ max_tokens = 20 }'
: > "$LOG"
expect_rc 0 "$LUAGENT" run t.lua </dev/null && out_has '"role": "assistant"' && out_has '"text": "four"' && out_has '"model": "mock-model"' && out_has '"stopReason": "endTurn"' && pass "allowed: the model's answer goes back as a CreateMessageResult" || fail "sample: $(cat "$WS/.out" "$WS/.err" | head -c 600)"
grep '"initialize"' "$LOG" | grep -q '"sampling"' && pass "with config the sampling capability is declared" || fail "sampling capability not declared: $(grep initialize "$LOG")"
python3 - "$WS/m.log" <<'PY' && pass "the model got the server's conversation, no tools, and maxTokens capped at the config's 20" || fail "request: $(head -c 800 "$WS/m.log")"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert len(r) == 1, len(r)
b = r[0]["body"]
assert "tools" not in b and "tool_choice" not in b, b
assert b.get("max_completion_tokens", b.get("max_tokens")) == 20, b
m = b["messages"]
assert m[0]["role"] == "system" and "test server" in m[0]["content"], m
assert m[-1]["role"] == "user" and "2+2" in json.dumps(m[-1]["content"]), m
PY
expect_rc 0 "$LUAGENT" audit tail -n 50 --json && python3 - "$WS/.out" <<'PY' && pass "the sampling is audited: provider and tokens" || fail "audit: $(grep -o '.\{0,300\}sampling.\{0,300\}' "$WS/.out" | head -3)"
import json, sys
rows = json.load(open(sys.argv[1]))
rows = rows if isinstance(rows, list) else rows.get("rows", [])
s = [x for x in rows if x.get("tool") == "mcp.fake.sampling" and x.get("status") == "ok"]
assert s and "provider mock" in (s[-1].get("detail") or ""), s
PY

# 3b. a server that keeps asking: 10 samplings per request of ours, then refused
: > "$WS/m.log"
lua 'print(tools.call("mcp.fake.sample", { kind = "loop" }).text)'
expect_rc 0 "$LUAGENT" run t.lua </dev/null && out_has "more than 10 sampling requests during one request" && [ "$(grep -c . "$WS/m.log")" = 10 ] && pass "a looping server gets 10 samplings, then refusals" || fail "loop: $(grep -c . "$WS/m.log") model calls; $(head -c 400 "$WS/.out")"

# 4. bad requests: image content and tools are refused as invalid params, the model not asked
: > "$WS/m.log"
lua 'print(tools.call("mcp.fake.sample", { kind = "image" }).text); print(tools.call("mcp.fake.sample", { kind = "tools" }).text)'
expect_rc 0 "$LUAGENT" run t.lua </dev/null && out_has "only text content is supported" && out_has "luagent offers no tools to a sampled model" && out_has -32602 && pass "image content and tools are refused (-32602)"
[ ! -s "$WS/m.log" ] && pass "an invalid sampling request never reaches the model" || fail "the model was asked: $(head -c 300 "$WS/m.log")"

# 5. the run's budget: the sampling's tokens count against ask's max_tokens, and
#    a run with no model call left refuses it
kill $PIDS 2>/dev/null; PIDS=""
start_mock '{"steps": [{"text": "", "tool_calls": [{"id": "c1", "name": "mcp__fake__sample", "arguments": {}}], "usage": {"input": 10, "output": 5}}, {"text": "sampled text", "usage": {"input": 4000, "output": 1000}}, {"text": "final", "usage": {"input": 10, "output": 5}, "repeat": true}]}'
conf 'true' 'react = { max_tokens = 1000 },'
expect_rc 1 timeout 60 "$LUAGENT" ask "use the sampler" </dev/null && grep -q "budget_exceeded" "$WS/.err" && grep -qi "token" "$WS/.err" && pass "the sampling's 5000 tokens count against the run: the next model call is over max_tokens" || fail "budget tokens: $(cat "$WS/.out" "$WS/.err" | head -c 800)"
[ "$(grep -c . "$WS/m.log")" = 2 ] && pass "the model was asked twice (ask, then sampling), then the budget stopped the run" || fail "model calls: $(grep -c . "$WS/m.log")"
kill $PIDS 2>/dev/null; PIDS=""
start_mock '{"steps": [{"text": "", "tool_calls": [{"id": "c1", "name": "mcp__fake__sample", "arguments": {}}]}, {"text": "final", "repeat": true}]}'
conf 'true' 'react = { max_model_calls = 1 },'
expect_rc 1 timeout 60 "$LUAGENT" ask "use the sampler" </dev/null
grep -c . "$WS/m.log" | grep -qx 1 && pass "max_model_calls = 1: the sampling is refused, the model asked once" || fail "model calls: $(grep -c . "$WS/m.log")"
expect_rc 0 "$LUAGENT" audit tail -n 50 --json && grep -q "budget_exceeded" "$WS/.out" && pass "the budget refusal is audited" || fail "audit budget: $(grep -o '.\{0,200\}sampling.\{0,200\}' "$WS/.out" | head -3)"

# 6. approve = true: the approver decides; no operator declines, the queue approves
kill $PIDS 2>/dev/null; PIDS=""
start_mock '{"steps": [{"text": "approved answer", "repeat": true}]}'
conf '{ approve = true }'
: > "$WS/m.log"
lua 'print(tools.call("mcp.fake.sample", { prompt = "tell me a secret" }).text)'
expect_rc 0 "$LUAGENT" run t.lua </dev/null && out_has "the operator declined the sampling request" && pass "approve = true and no operator: declined" || fail "no operator: $(cat "$WS/.out" "$WS/.err" | head -c 600)"
[ ! -s "$WS/m.log" ] && pass "a declined sampling never reaches the model" || fail "the model was asked: $(head -c 300 "$WS/m.log")"
conf '{ approve = true }' 'approver = "queue", approval_timeout_s = 30,'
queue_run() {
  (cd "$WS" && timeout 60 "$LUAGENT" run t.lua </dev/null >"$WS/q.out" 2>&1) & QP=$!; PIDS="$PIDS $QP"
  id=""
  for _ in $(seq 1 100); do
    id=$(cd "$WS" && "$LUAGENT" approvals list --json 2>/dev/null | python3 -c '
import json, sys
r = [x for x in json.load(sys.stdin) if x["status"] == "pending"]
print(int(r[0]["id"]) if r else "")' 2>/dev/null)
    [ -n "$id" ] && break; sleep 0.1
  done
  [ -n "$id" ] || { fail "no pending sampling approval: $(cat "$WS/q.out")"; return 1; }
}
if queue_run; then
  (cd "$WS" && "$LUAGENT" approvals list) | grep -q "mcp.fake.sampling" && pass "the queue names the sampling request" || fail "queue lacks mcp.fake.sampling"
  (cd "$WS" && "$LUAGENT" approvals list --json) | grep -q "tell me a secret" && pass "the operator sees the conversation" || fail "the conversation is not shown"
  (cd "$WS" && "$LUAGENT" approvals approve "$id" >/dev/null); wait $QP
  grep -q '"text": "approved answer"' "$WS/q.out" && pass "approved in the queue: the model's answer goes back" || fail "queue approve: $(cat "$WS/q.out")"
fi
# an edit is what the model gets, still capped by the config (no tools however the edit says)
conf '{ approve = true, max_tokens = 30 }' 'approver = "queue", approval_timeout_s = 30,'
: > "$WS/m.log"
if queue_run; then
  (cd "$WS" && "$LUAGENT" approvals approve "$id" --args '{"messages":[{"role":"user","content":"the edited question"}],"maxTokens":99999,"tools":[{"name":"x"}]}' >/dev/null); wait $QP
  python3 - "$WS/m.log" <<'PY' && pass "the operator's edit is sent, maxTokens capped at 30, no tools" || fail "edit: $(head -c 800 "$WS/m.log") $(cat "$WS/q.out")"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert len(r) == 1, len(r)
b = r[0]["body"]
assert "tools" not in b, b
assert b.get("max_completion_tokens", b.get("max_tokens")) == 30, b
assert "the edited question" in json.dumps(b["messages"]) and "tell me a secret" not in json.dumps(b["messages"]), b
PY
fi
finish
