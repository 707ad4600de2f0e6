# Issue 18 item 12: a provider that sends invalid UTF-8 inside a string
# does not lose the answer, nor put invalid UTF-8 anywhere: each bad byte
# becomes U+FFFD on stdout and in the journal, the fact is recorded (a note
# event with the count), and `runs show --json` stays valid UTF-8.
. "$(dirname "$0")/lib/mock.sh" "$1"
cp "$SRC/tests/fixtures/providers/openai_invalid_utf8.sse" "$WS/bad.sse"
printf '{"steps":[{"replay":"bad.sse"}]}' > "$WS/fx.json"
start_mock m "$(cat "$WS/fx.json")"
config "providers = { $(provider openai $PORT_m) }"
ask "say it"
expect_rc 0 "the answer is kept"
expect_out "café ok �� bad � end" "each bad byte is U+FFFD, the rest untouched"
id=$("$LUAGENT" --workspace "$WS" runs list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
"$LUAGENT" --workspace "$WS" runs show "$id" --json > "$WS/show.json"; RC=$?
python3 - "$WS/show.json" <<'PY' && ok "runs show --json is valid UTF-8 and records the fact" || fail "journal: $(head -c 400 "$WS/show.json")"
import json, sys
raw = open(sys.argv[1], "rb").read()
raw.decode("utf-8")  # raises on invalid UTF-8
evs = [json.loads(l) for l in raw.decode().splitlines() if l.strip()]
notes = [e for e in evs if e["type"] == "note" and e["data"].get("invalid_utf8_bytes") == 3]
sys.exit(0 if notes else 1)
PY
finish
