# Context assembly: memory saved by the model (tool memory.save) in one run
# is found by memory.search in the next and joins its system text as a
# relevant memory; compaction summarises older turns past compact_at of the
# window (or elides them when the summary call fails) and every request
# stays under the window; reflexion retries once on a failed critique,
# fails open on a malformed one, and when off the requests are identical.
. "$(dirname "$0")/lib/mock.sh" "$1"
DRIVE="$SRC/tests/e2e/lib/drive_chat.py"

# --- memory across runs -------------------------------------------------
start_mock a '{"steps":[
 {"tool_calls":[{"id":"c1","name":"memory.save","arguments":{"key":"favourite-depot","value":"Depot B in Leeds, opens at 06:00"}}]},
 {"text":"Noted."}]}'
config "providers = { $(provider openai $PORT_a) }"
ask "remember that my favourite depot is Depot B in Leeds"
expect_rc 0 "run 1 saves a memory"
check a 'msgs(1)[-1]["role"] == "tool" and "favourite-depot" in msgs(1)[-1]["content"] and "error" not in msgs(1)[-1]["content"]' "memory.save ran"
stop_mocks
start_mock b '{"steps":[
 {"tool_calls":[{"id":"c1","name":"memory.search","arguments":{"query":"favourite depot"}}]},
 {"text":"Your favourite depot is Depot B."}]}'
config "providers = { $(provider openai $PORT_b) }"
ask "which depot is my favourite?"
expect_rc 0 "run 2"
expect_out "Depot B" "answered"
check b 'msgs(1)[-1]["role"] == "tool" and "Depot B in Leeds" in msgs(1)[-1]["content"]' "memory.search in run 2 finds what run 1 saved"
check b 'msgs(0)[0]["role"] == "system" and "Relevant memories" in msgs(0)[0]["content"] and "Depot B in Leeds, opens at 06:00" in msgs(0)[0]["content"]' \
  "the relevant memory joins the system text"

# --- compaction -----------------------------------------------------------
# Five turns of ~200-byte lines and answers against a 700-token window with
# compact_at 0.6: the fifth request would pass 420 tokens, so the older
# turns are summarised (one call without tools) and every request stays
# under the window. Then the same with a summariser that fails: elided.
compaction_chat() { # NAME SIDE-STEP
  stop_mocks
  A=$(python3 -c 'print("The answer is long enough to matter here. " * 5)')
  start_mock $1 "{\"steps\":[{\"text\":\"$A\",\"repeat\":true}],
   \"when_system\":{\"You summarise\":$2}}"
  config "providers = { $(provider openai $(cat "$WS/$1.port")) },
    system_prompt = \"Be brief.\",
    context = { window_tokens = 700, compact_at = 0.6, keep_recent = 2 }"
  { for i in 1 2 3 4 5 6; do
      echo "say Question $i about route $i: $(python3 -c "print('the loop passes the harbour and the river, ' * 4)")"
      echo "wait_out $i \"type\":\"run_end\""
    done; echo close; } |
    python3 "$DRIVE" "$WS/$1.log" "$WS/out" "$WS/err" -- "$LUAGENT" --workspace "$WS" chat --json --session "$1" --tools echo
  RC=$?; OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
}
compaction_chat c '{"text":"SUMMARY: the user asked about routes 1 to 3."}'
expect_rc 0 "long chat"
expect_out '"type":"compaction"' "compaction event"
expect_out '"summarised":true' "the older turns were summarised"
check c 'sum(1 for r in reqs if "You summarise" in json.dumps(r["body"])) >= 1 and all("tools" not in r["body"] for r in reqs if "You summarise" in json.dumps(r["body"]))' "summary calls made, without tools"
check c '"Question 1 about route 1" in json.dumps([r for r in reqs if "You summarise" in json.dumps(r["body"])][0]["body"])' "the summariser sees the oldest turn"
check c 'any("SUMMARY: the user asked about routes 1 to 3." in json.dumps(r["body"]) for r in reqs)' "the summary replaces the older turns"
check c 'all(len(json.dumps(r["body"])) / 4 < 700 for r in reqs)' "every request stays under the window (bytes/4 < 700)"
check c 'len(reqs) == 6 + sum(1 for r in reqs if "You summarise" in json.dumps(r["body"]))' "one main call per turn plus the summary calls"
check c '(6 * len(msgs(0)[-1]["content"]) + 5 * len(msgs(1)[2]["content"])) / 4 > 0.6 * 700' "without compaction the history would pass the threshold"
check c '[m["content"] for m in msgs(-1) if m["role"] == "user"][-1].startswith("Question 6 about route 6")' "the latest message is kept in full"
OUT=$("$LUAGENT" --workspace "$WS" sessions show c --json); RC=$?
case "$OUT" in *"Question 1 about"*) fail "session still holds the compacted turn";; *"SUMMARY: the user asked"*) ok "the session stores the compacted history";; *) fail "session: $OUT";; esac
compaction_chat e '{"fault":"500"}'
expect_rc 0 "long chat, failing summariser"
expect_out '"summarised":false' "compaction without a summary"
check e 'any("earlier messages of this conversation were elided" in json.dumps(r["body"]) for r in reqs)' "elision marker when the summary call fails"
check e 'all(len(json.dumps(r["body"])) / 4 < 700 for r in reqs)' "every request still under the window"

# --- reflexion ------------------------------------------------------------
stop_mocks
FIX='{"steps":[
 {"tool_calls":[{"id":"c1","name":"echo","arguments":{"text":"stock: 12 crates"}}]},
 {"text":"There are 20 crates."},
 {"text":"There are 12 crates."}],
 "when_system":{"careful reviewer":[{"text":"```json\n{\"ok\": false, \"feedback\": \"the tool said 12, not 20\"}\n```"}]}}'
start_mock r "$FIX"
config "providers = { $(provider openai $PORT_r) }, reflexion = { enabled = true, max_retries = 1 }"
ask --tools echo "how many crates?"
expect_rc 0 "reflexion run"
expect_out "There are 12 crates." "the retried answer"
check r 'len(reqs) == 4' "tool round, answer, critique, retry (4 calls; no second critique after max_retries)"
check r '"careful reviewer" in json.dumps(reqs[2]["body"]) and "stock: 12 crates" in json.dumps(reqs[2]["body"]) and "There are 20 crates." in json.dumps(reqs[2]["body"])' "the critique sees the tool results and the answer"
check r 'msgs(3)[-1]["role"] == "user" and "[reviewer]" in msgs(3)[-1]["content"] and "the tool said 12, not 20" in msgs(3)[-1]["content"] and msgs(3)[-2]["content"] == "There are 20 crates."' \
  "the feedback goes back as a reviewer note after the candidate answer"

# no room left for a retry (max_iterations reached): the candidate answer stands
stop_mocks
start_mock r2 "$FIX"
config "providers = { $(provider openai $PORT_r2) }, reflexion = { enabled = true, max_retries = 1 }"
ask --tools echo --max-iterations 2 "how many crates?"
expect_rc 0 "reflexion at the iteration limit"
expect_out "There are 20 crates." "the candidate answer stands when no retry fits"
check r2 'len(reqs) == 2' "tool round and answer; no critique or retry past the limit"
expect_err '"outcome":"skipped"' "the reflexion event says it was skipped"

stop_mocks
start_mock s '{"steps":[{"text":"Fine answer."}],"when_system":{"careful reviewer":{"text":"I think it is fine"}}}'
config "providers = { $(provider openai $PORT_s) }, reflexion = { enabled = true, max_retries = 2 }"
ask --tools echo "hello?"
expect_rc 0 "malformed critique"
expect_out "Fine answer." "fails open: the answer stands"
check s 'len(reqs) == 2' "one answer, one critique, no retry"

# off: no extra call and the same requests as without the key
stop_mocks
start_mock o1 '{"steps":[{"tool_calls":[{"id":"c1","name":"echo","arguments":{"text":"x"}}]},{"text":"done"}]}'
config "providers = { $(provider openai $PORT_o1) }"
ask --tools echo "same question"
stop_mocks
start_mock o2 '{"steps":[{"tool_calls":[{"id":"c1","name":"echo","arguments":{"text":"x"}}]},{"text":"done"}]}'
config "providers = { $(provider openai $PORT_o2) }, reflexion = { enabled = false, max_retries = 3 }"
ask --tools echo "same question"
expect_rc 0 "reflexion off"
python3 - "$WS/o1.log" "$WS/o2.log" <<'PY' && ok "reflexion off: identical requests to a run without the key" || fail "requests differ"
import json, sys
a = [json.loads(l)["body"] for l in open(sys.argv[1])]
b = [json.loads(l)["body"] for l in open(sys.argv[2])]
sys.exit(0 if len(a) == 2 and a == b else 1)
PY
printf 'return { reflexion = { enabled = "yes" } }\n' > "$WS/luagent.lua"
ask "x"
expect_rc 2 "bad reflexion config"
expect_err "reflexion.enabled: expected true or false" "names the key"
printf 'return {\n context = { window = 5 } }\n' > "$WS/luagent.lua"
ask "x"
expect_rc 2 "bad context config"
expect_err "luagent.lua:2: context.window: unknown key" "names the file, line and key"
finish
