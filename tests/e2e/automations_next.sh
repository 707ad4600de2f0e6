#!/bin/bash
# Issue 12 item 4: fire times are shown with their zone (the cron's tz, else
# the local one); `automations next NAME [-n N]` lists the next N; a schedule
# that can never fire (0 9 31 2 *, an `at` in the past) is warned about when
# it loads: by the daemon, `automations list`, `automations check`, `next`.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
cat > "$WS/automations/paris.lua" <<'LUA'
return { cron = "30 9 * * 1-5", tz = "Europe/Paris", run = function() end }
LUA
cat > "$WS/automations/local.lua" <<'LUA'
return { cron = "0 */6 * * *", run = function() end }
LUA
cat > "$WS/automations/often.lua" <<'LUA'
return { every = "15m", run = function() end }
LUA
cat > "$WS/automations/onevent.lua" <<'LUA'
return { on = "deploy.*", run = function() end }
LUA

# next: the cron's own zone, times checked against Python's zoneinfo
expect_rc 0 "$LUAGENT" automations next paris -n 4 --json
python3 - "$WS/.out" <<'PY' && pass "next --json: the 4 right times, ISO with offset, zone named" || fail "next paris: $(cat "$WS/.out")"
import json, sys, time, datetime
from zoneinfo import ZoneInfo
v = json.load(open(sys.argv[1]))
z = ZoneInfo("Europe/Paris")
t = datetime.datetime.now(z).replace(second=0, microsecond=0)
want = []
while len(want) < 4:
    t += datetime.timedelta(minutes=1)
    if t.weekday() < 5 and t.hour == 9 and t.minute == 30:
        want.append(t)
assert len(v) == 4, v
for got, w in zip(v, want):
    assert got["zone"] == "Europe/Paris", got
    assert got["time"] == w.timestamp(), (got, w)
    assert got["at"] == w.isoformat(), (got["at"], w.isoformat())
PY
expect_rc 0 "$LUAGENT" automations next paris -n 2
python3 - "$WS/.out" <<'PY' && pass "next (text): wall time in Paris with its abbreviation, and when" || fail "next text: $(cat "$WS/.out")"
import sys, re
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 3, lines
for l in lines[:2]:
    assert re.match(r"\d{4}-\d\d-\d\d 09:30:00 (CET|CEST)  \(\d{4}-\d\d-\d\dT09:30:00\+0[12]:00, in ", l), l
assert lines[2] == "(times in Europe/Paris, the automation's zone)", lines[2]
PY
# a cron without tz: the local zone, named
TZ=UTC expect_rc 0 "$LUAGENT" automations next local -n 3 && out_has " UTC  (" && pass "local zone shown (TZ=UTC)"
TZ=Asia/Tokyo expect_rc 0 "$LUAGENT" automations next local -n 1 --json && python3 -c '
import json,sys; v=json.load(open(sys.argv[1])); assert v[0]["at"].endswith("+09:00") and v[0]["zone"] is None and v[0]["at"][11:13] in ("00","06","12","18"), v' "$WS/.out" \
  && pass "local zone: offset in the ISO time (TZ=Asia/Tokyo)"
expect_rc 0 "$LUAGENT" automations next often -n 3 --json && python3 -c '
import json,sys; v=json.load(open(sys.argv[1])); d=[b["time"]-a["time"] for a,b in zip(v,v[1:])]; assert len(v)==3 and d==[900,900], v' "$WS/.out" \
  && pass "every 15m: 15 minutes apart"
expect_rc 0 "$LUAGENT" automations next onevent && out_has "has no schedule: it runs on deploy.*" && pass "an event trigger has no times"
expect_rc 2 "$LUAGENT" automations next nosuch && err_has "no automation 'nosuch'" && pass "unknown automation: exit 2"
expect_rc 2 "$LUAGENT" automations next paris -n 0 && err_has "-n needs a number" && pass "-n 0 refused"

# list: next run with its zone, text and JSON
expect_rc 0 "$LUAGENT" automations list && grep -E '^paris .* 09:30:00 (CET|CEST) ' "$WS/.out" >/dev/null \
  && pass "list shows the next run with its zone" || fail "list: $(cat "$WS/.out")"
expect_rc 0 "$LUAGENT" automations list --json && python3 -c '
import json,sys; v={r["name"]: r for r in json.load(open(sys.argv[1]))}
p=v["paris"]; assert p["zone"]=="Europe/Paris" and p["next_run_at"][10:19]=="T09:30:00" and p["next_run_at"][19] in "+-", p
assert v["onevent"]["next_run_at"] is None, v["onevent"]' "$WS/.out" && pass "list --json: next_run_at with offset, zone"

# schedules that never fire
cat > "$WS/automations/feb31.lua" <<'LUA'
return { cron = "0 9 31 2 *", run = function() end }
LUA
cat > "$WS/automations/past.lua" <<'LUA'
return { at = "2020-01-01T00:00:00Z", run = function() end }
LUA
expect_rc 0 "$LUAGENT" automations check && out_has "automations/feb31.lua: warning: cron 0 9 31 2 * never fires" \
  && out_has "automations/past.lua: warning: at 2020-01-01T00:00:00Z is in the past" && out_has "2 warning(s)" \
  && pass "automations check warns about both"
expect_rc 0 "$LUAGENT" automations list && out_has "warning: cron 0 9 31 2 * never fires" && err_has "2 never fire" \
  && pass "automations list warns"
expect_rc 1 "$LUAGENT" automations next feb31 && err_has "never fires" && pass "next on a never-firing cron: warning, exit 1"
expect_rc 1 "$LUAGENT" automations next past --json && [ "$(cat "$WS/.out")" = "[]" ] && err_has "in the past" && pass "next on a past at: [] and a warning"
# and the daemon warns when it loads them
start_daemon
wait_for 10 "grep -q 'past.lua: warning' '$DLOG'" && grep -q "automations/feb31.lua: warning: cron 0 9 31 2 \* never fires" "$DLOG" \
  && pass "the daemon warns at load time" || fail "daemon log: $(cat "$DLOG")"
grep -q "paris.lua: warning\|often.lua: warning" "$DLOG" && fail "a warning for a schedule that fires"
stop_daemon
finish
