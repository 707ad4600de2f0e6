#!/bin/bash
# The repository's demo workspace (what `make run` starts): every demo
# automation runs clean with no model and no network; site_watch finds the
# local endpoint down, and its judgment call degrades without a model.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
SRC=${LUAGENT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cp -r "$SRC/automations/." "$WS/automations/"
[ -d "$SRC/skills" ] && cp -r "$SRC/skills" "$WS/skills"
cp "$SRC/luagent.lua" "$WS/luagent.lua"
# no model, whatever the environment says
unset LUAGENT_PROVIDER LUAGENT_MODEL LUAGENT_BASE_URL LUAGENT_API_KEY OPENAI_API_KEY ANTHROPIC_API_KEY

expect_rc 0 "$LUAGENT" --workspace "$WS" automations list && out_has "site_watch" && out_has "morning_digest" &&
  out_has "note_inbox" && out_has "heartbeat" && pass "demo automations all load"
grep -q "error:" "$WS/.out" && fail "a demo automation does not load: $(cat "$WS/.out")"
start_daemon
expect_rc 0 "$LUAGENT" --workspace "$WS" emit note '{"title":"ideas","text":"try the cron trigger"}'
wait_for 10 '[ "$(q "SELECT count(*) FROM runs WHERE status != \"running\" AND name IN (\"heartbeat\", \"site_watch\", \"note_inbox\")")" -ge 3 ]' || fail "demo runs did not finish: $(tail -5 "$DLOG")"
[ "$(q "SELECT status FROM runs WHERE name='heartbeat'")" = ok ] && pass "heartbeat ok"
r=$(q "SELECT status, result FROM runs WHERE name='site_watch'")
echo "$r" | grep -q '^ok.*"triage":"untriaged (' && pass "site_watch: outage found, no model: logged and marked, run ok" || fail "site_watch: $r"
grep -q "site_watch \[warn\] no model verdict" "$DLOG" && pass "the missing model is logged"
r=$(q "SELECT status, result FROM runs WHERE name='note_inbox'")
if [ -d "$SRC/skills/notes" ]; then
  echo "$r" | grep -q "^ok.created data/notes/ideas.md" && pass "note event filed by the notes skill" || fail "note_inbox: $r"
else
  echo "$r" | grep -q "^ok" && pass "note_inbox ok without the notes skill" || fail "note_inbox: $r"
fi
expect_rc 0 "$LUAGENT" --workspace "$WS" automations run morning_digest && pass "morning_digest runs by hand"
stop_daemon
[ "$(q "SELECT count(*) FROM runs WHERE status IN ('crashed', 'failed', 'timeout')")" = 0 ] && pass "no demo run failed" || fail "failed demo runs: $(q "SELECT name, status, error FROM runs WHERE status IN ('crashed','failed','timeout')")"
finish
