#!/bin/bash
# Issue 12 item 11: one JSON style (`luagent help json`). With --json every
# command prints compact JSON, one value per line: a list is ONE array ([]
# when empty, never nothing), a single answer one object, a stream one event
# object per line. No tabs, no indentation, anywhere. `skills select` with
# nothing selected says so.
. "$(dirname "$0")/lib/common.sh"
mkdir -p "$WS/data"

# check_one NAME KIND CMD...: stdout is exactly one line of compact JSON of
# KIND (array|object); sets N to the value's length.
check_one() {
  local name=$1 kind=$2; shift 2
  (cd "$WS" && "$@") >"$WS/.out" 2>"$WS/.err"
  local rc=$?
  N=$(python3 - "$WS/.out" "$kind" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
lines = text.split("\n")
assert text.endswith("\n") and len(lines) == 2, "not exactly one line: %r" % text[:300]
assert "\t" not in text and "\n  " not in text, "indented: %r" % text[:200]
v = json.loads(lines[0])
want = {"array": list, "object": dict}[sys.argv[2]]
assert isinstance(v, want), "%s, wanted %s: %r" % (type(v).__name__, sys.argv[2], text[:200])
print(len(v))
PY
)
  local prc=$?
  if [ $prc != 0 ]; then fail "$name: $(head -c 300 "$WS/.out") (rc $rc, stderr $(head -c 200 "$WS/.err"))"; return 1; fi
  pass "$name: one line of compact JSON ($kind)"
  return 0
}
# compact: the separators cJSON prints without formatting
no_spaces() { python3 -c 'import sys; t=open(sys.argv[1]).read(); sys.exit(0 if "\": " not in t and ", \"" not in t else 1)' "$WS/.out" || fail "$1: spaces after separators"; }

# --- an empty workspace: every list is [] ---
for c in "tools list" "skills list" "skills check" "runs list" "automations history x" \
         "approvals list" "approvals list --all" "secrets list" "sessions list" "audit tail"; do
  # shellcheck disable=SC2086
  check_one "empty: $c" array "$LUAGENT" --json $c || continue
  case "$c" in tools*) [ "$N" -gt 0 ] || fail "no host tools listed";; *) [ "$N" = 0 ] || fail "$c: $N items, wanted []";; esac
  [ "$(cat "$WS/.out")" = "[]" ] || case "$c" in tools*) ;; *) fail "$c: not [] but $(cat "$WS/.out")";; esac
done
check_one "no automations/ folder: automations list" array "$LUAGENT" automations list --json && [ "$N" = 0 ] && pass "no automations/ folder: []"
mkdir -p "$WS/automations"
check_one "empty: automations list" array "$LUAGENT" automations list --json && [ "$N" = 0 ] && pass "no automations: []"
check_one "empty: automations check" array "$LUAGENT" automations check --json && [ "$N" = 0 ] && pass "no problems: []"

# --- single answers are one object ---
check_one "version --json" object "$LUAGENT" --json version && out_has '"version":"' && pass "version is an object"
check_one "version --json (after)" object "$LUAGENT" version --json
check_one "audit verify --json" object "$LUAGENT" audit verify --json && no_spaces "audit verify"
check_one "audit head --json" object "$LUAGENT" audit head --json
check_one "check --json" object "$LUAGENT" check --json && out_has '"problems":[]' && pass "check with no problems: an explicit empty list"
check_one "runs prune --json" object "$LUAGENT" runs prune --older-than 30d --json

# --- a workspace with things in it ---
mkdir -p "$WS/skills/greet"
cat > "$WS/skills/greet/skill.lua" <<'LUA'
return { name = "greet", description = "Greets people by name", keywords = { "greet", "hello" },
  tools = { hello = { description = "Say hello", params = { type = "object", properties = { who = { type = "string" } } },
    impact = "read", run = function(a) return { text = "hello " .. (a.who or "you") } end } } }
LUA
cat > "$WS/automations/tick.lua" <<'LUA'
return { every = "1h", run = function(ctx) return "t" end }
LUA
cat > "$WS/luagent.lua" <<'LUA'
return { secrets = { API = { origins = { "https://api.example.com" } } } }
LUA
printf 'return tools.call("greet.hello", { who = "Ada" })\n' > "$WS/hi.lua"
expect_rc 0 "$LUAGENT" run hi.lua || true
expect_rc 0 "$LUAGENT" skills call greet.hello '{"who":"Bo"}' || true
for c in "tools list:array" "skills list:array" "automations list:array" \
         "secrets list:array" "audit tail -n 3:array" "sessions list:array"; do
  cmd=${c%:*}; kind=${c##*:}
  # shellcheck disable=SC2086
  if check_one "$cmd" "$kind" "$LUAGENT" $cmd --json; then
    case "$cmd" in sessions*) ;; *) [ "$N" -gt 0 ] || fail "$cmd: empty";; esac
  fi
done
check_one "skills list" array "$LUAGENT" skills list --json && python3 -c '
import json,sys; v=json.load(open(sys.argv[1])); assert v[0]["name"]=="greet" and v[0]["tools"]==["greet.hello"], v' "$WS/.out" \
  && pass "skills list --json: the records inside the array"
check_one "secrets list" array "$LUAGENT" secrets list --json && python3 -c '
import json,sys; v=json.load(open(sys.argv[1])); assert v==[{"name":"API","set":False,"origins":["https://api.example.com"]}], v' "$WS/.out" \
  && pass "secrets list --json record"
check_one "audit tail" array "$LUAGENT" audit tail -n 2 --json && python3 -c '
import json,sys; v=json.load(open(sys.argv[1])); assert len(v)==2 and all("seq" in r for r in v), v' "$WS/.out" && pass "audit tail --json rows"
check_one "automations next" array "$LUAGENT" automations next tick -n 3 --json && python3 -c '
import json,sys; v=json.load(open(sys.argv[1])); assert len(v)==3, v' "$WS/.out" && pass "automations next --json"
check_one "skills select" object "$LUAGENT" skills select "greet Ada" --json
check_one "skills call --json" object "$LUAGENT" --json skills call greet.hello '{"who":"Cy"}' && out_has '"text":"hello Cy"' && pass "skills call --json: compact"
check_one "run --json" object "$LUAGENT" --json run hi.lua

check_one "skills check (all good)" array "$LUAGENT" skills check --json && [ "$N" = 0 ] && pass "skills check --json, no problems: []"

# streams: one event object per line (ask against the mock model), and
# runs list records the run
SRC=${LUAGENT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
printf '{"steps":[{"text":"Hello there."}]}' > "$WS/fx.json"
python3 "$SRC/tests/mock_llm.py" --script "$WS/fx.json" --port-file "$WS/port" --log "$WS/mock.log" &
PIDS="$PIDS $!"
for _ in $(seq 100); do [ -s "$WS/port" ] && break; sleep 0.05; done
[ -s "$WS/port" ] || { fail "the mock model did not start"; finish; }
cat > "$WS/luagent.lua" <<LUA
return { providers = { { name = "m", kind = "openai", base_url = "http://127.0.0.1:$(cat "$WS/port")/v1", model = "m", timeout_s = 10 } } }
LUA
(cd "$WS" && timeout 60 "$LUAGENT" ask --json "say hello") >"$WS/live.jsonl" 2>"$WS/.err" || fail "ask --json: $(cat "$WS/.err")"
check_one "runs list" array "$LUAGENT" runs list --json && python3 -c '
import json,sys; v=json.load(open(sys.argv[1])); assert len(v)==1 and v[0]["kind"]=="ask" and v[0]["status"]=="ok", v' "$WS/.out" \
  && pass "runs list --json: the run inside the array"
RUN=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["id"])' "$WS/.out")
(cd "$WS" && "$LUAGENT" runs show "$RUN" --json) >"$WS/replay.jsonl" 2>"$WS/.err"
for f in live replay; do
  python3 - "$WS/$f.jsonl" <<'PY' && pass "$f: one event object per line" || fail "$f stream: $(head -c 300 "$WS/$f.jsonl")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) >= 3, lines
for l in lines:
    v = json.loads(l)
    assert isinstance(v, dict) and {"run_id", "type", "data"} <= set(v), v
    assert "\t" not in l
assert any(json.loads(l)["type"] == "text_delta" for l in lines)
PY
done

# skills select: nothing selected is said, on stderr (stdout stays one name per line)
expect_rc 0 "$LUAGENT" skills select "quantum chromodynamics lecture" && err_has "no skill selected" \
  && [ ! -s "$WS/.out" ] && pass "skills select with nothing selected says so"
expect_rc 0 "$LUAGENT" skills select "greet Ada please" && out_has "greet" && pass "a selection still prints the name"
if grep -q "no skill selected" "$WS/.err"; then fail "'no skill selected' when one was"; fi
finish
