# Tool calls the model makes pass the security pipeline as caller "model":
# a rule that denies the model fs.write turns the call into an error the
# model sees (the file is not written), while the same tool stays allowed
# for other callers; an escalation without a terminal is denied with the
# reason; both are in the audit chain.
. "$(dirname "$0")/lib/mock.sh" "$1"
start_mock m '{"steps":[{"tool_calls":[
   {"id":"w1","name":"fs.write","arguments":{"path":"x.txt","content":"model wrote this"}},
   {"id":"d1","name":"fs.delete","arguments":{"path":"keep.txt"}}]},
  {"text":"I was not allowed to write or delete."}]}'
printf 'keep' > "$WS/data/keep.txt"
config "providers = { $(provider openai $PORT_m) },
  rules = { { tool = \"fs.write\", caller = \"model\", action = \"deny\", reason = \"models may not write\" } }"
ask --json "write x.txt and delete keep.txt"
expect_rc 0 "run continues after denials"
[ ! -e "$WS/data/x.txt" ] && ok "fs.write did not run" || fail "fs.write ran"
[ -e "$WS/data/keep.txt" ] && ok "fs.delete (high impact, no terminal) did not run" || fail "fs.delete ran"
check m "msgs(1)[3]['content'].startswith('error (denied)') and 'models may not write' in msgs(1)[3]['content']" "the model sees the rule's reason"
check m "msgs(1)[4]['content'].startswith('error (denied)')" "the escalated delete is denied"
OUT=$("$LUAGENT" --workspace "$WS" audit tail 2>&1); RC=$?
expect_out "fs.write" "audit has the denied write"
expect_out "model" "audit names the caller kind"
# the same rule does not stop an operator script
printf 'tools.call("fs.write", { path = "y.txt", content = "ok" })\n' > "$WS/w.lua"
lrun "$WS/w.lua"
expect_rc 0 "a script may still write"
finish
