# The run journal: `runs list` shows every ask with its status, and `runs
# show ID` replays a run: the same answer text and the same event stream as
# the live --json output. Also usage/config errors (exit 2).
. "$(dirname "$0")/lib/mock.sh" "$1"
printf 'journal me' > "$WS/data/j.txt"
start_mock m '{"steps":[{"text":"Checking.","tool_calls":[{"id":"c1","name":"fs.read","arguments":{"path":"j.txt"}}]},
  {"text":"It says: journal me.","chunk":3},{"fault":"401","repeat":true}]}'
config "providers = { $(provider openai $PORT_m) }"
ask --json "what does j.txt say"
expect_rc 0 "live run"
printf '%s\n' "$OUT" > "$WS/live.jsonl"
ID=$(head -1 "$WS/live.jsonl" | sed 's/.*"run_id":"\([^"]*\)".*/\1/')
"$LUAGENT" --workspace "$WS" runs show "$ID" --json > "$WS/replay.jsonl"
cmp -s "$WS/live.jsonl" "$WS/replay.jsonl" && ok "runs show --json replays the exact event stream" || { fail "replay differs"; diff "$WS/live.jsonl" "$WS/replay.jsonl" | head; }
OUT=$("$LUAGENT" --workspace "$WS" runs show "$ID" 2>"$WS/err"); ERR=$(cat "$WS/err"); RC=0
expect_out "Checking." "replay shows the text"
expect_out "It says: journal me." "replay shows the answer"
expect_err "<- fs.read ok" "replay shows tool activity"
# a failed run is journaled with its reason
ask "again"
expect_rc 1 "second run fails (401)"
OUT=$("$LUAGENT" --workspace "$WS" runs list); RC=$?
expect_rc 0 "runs list"
expect_out "$ID" "list has the first run"
expect_out "failed" "list shows the failed run"
expect_out "HTTP 401" "list shows why it failed"
[ "$(printf '%s\n' "$OUT" | grep -c '^r')" = 2 ] && ok "two runs listed" || fail "runs list count"
OUT=$("$LUAGENT" --workspace "$WS" runs show nosuchrun 2>&1); RC=$?
expect_rc 1 "unknown run id"
expect_out "no run with id 'nosuchrun'" "names the id"
OUT=$("$LUAGENT" --workspace "$WS" runs 2>&1); RC=$?
expect_rc 2 "runs without a subcommand"
stop_mocks

# -- configuration errors: exit 2, with what to set
rm -f "$WS/luagent.lua"
ask "hello"
expect_rc 2 "no provider"
expect_err "LUAGENT_PROVIDER" "names the env vars"
expect_err "providers = {" "names the config key"
config 'providers = { { kind = "gpt", model = "x" } }'
ask "hello"
expect_rc 2 "bad provider kind"
expect_err 'providers[1].kind: expected "openai", "anthropic" or "script"' "names the key"
expect_err "luagent.lua:2" "names the file and line"
config 'react = { max_iterashuns = 3 }, providers = { { kind = "openai", model = "m" } }'
ask "hello"
expect_rc 2 "unknown react key"
expect_err "unknown key 'max_iterashuns'" "names the key"
ask
expect_rc 2 "ask without a message"
# env quick start: LUAGENT_* without a config file
rm -f "$WS/luagent.lua"
start_mock e '{"steps":[{"text":"env works"}]}'
LUAGENT_PROVIDER=anthropic LUAGENT_MODEL=claude-test LUAGENT_BASE_URL="http://127.0.0.1:$PORT_e/v1" LUAGENT_API_KEY=k1 \
  timeout 30 "$LUAGENT" --workspace "$WS" ask "hi" > "$WS/out" 2>"$WS/err"; RC=$?; OUT=$(cat "$WS/out"); ERR=$(cat "$WS/err")
expect_rc 0 "env quick start"
expect_out "env works" "answer via env provider"
check e "reqs[0]['body']['model'] == 'claude-test' and reqs[0]['headers']['x-api-key'] == 'k1'" "env model and key used"
# api_key_secret: the key comes from the encrypted secrets store
stop_mocks
start_mock s '{"steps":[{"text":"secret key works"}]}'
printf "sk-from-the-vault\n" | (cd "$WS" && "$LUAGENT" secrets set MODEL_KEY >/dev/null 2>&1) || fail "secrets set"
config "providers = { $(provider openai $PORT_s ', api_key_secret = "MODEL_KEY"') }"
ask "hi"
expect_rc 0 "api_key_secret"
check s "reqs[0]['headers'].get('authorization') == 'Bearer sk-from-the-vault'" "key from the secrets store sent"
config "providers = { $(provider openai $PORT_s ', api_key_secret = "NO_SUCH"') }"
ask "hi"
expect_rc 2 "unknown secret is a config error"
expect_err "api_key_secret NO_SUCH" "names the secret"
rm -f "$WS/luagent.lua"
LUAGENT_PROVIDER=openai timeout 30 "$LUAGENT" --workspace "$WS" ask "hi" > "$WS/out" 2>"$WS/err"; RC=$?; ERR=$(cat "$WS/err")
expect_rc 2 "LUAGENT_PROVIDER without a model"
expect_err "LUAGENT_MODEL" "says to set the model"
finish
