#!/bin/bash
# Events when hosts have different automations: host b has no listener for
# what host a listens to (a rename, a file not copied yet). b must leave
# those events to a instead of taking and dropping them, and a's patterns
# (regex metacharacters, brackets, `?`) must still match exactly what
# fnmatch matches.
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/daemon_lib.sh"
. "$(dirname "$0")/lib/pg.sh"
. "$(dirname "$0")/lib/cluster.sh"
pg_start
w() { # w FILE PATTERN
  cat >"$WS/automations/$1.lua" <<LUA
return { on = "$2", mode = "parallel", max = 100, run = function(ctx)
  tools.call("fs.write", { path = "got.txt", append = true, content = "$1 " .. ctx.trigger.name .. "\n" })
end }
LUA
}
w jobs 'job.*'
w meta 'x.y:z/w-v_u'
w br 'br[ae]ck'
w q 'q?'
cl_host a
rm -f "$WS"/automations/*.lua
w other 'other'
cl_host b
cl_start a
cl_start b
sleep 1
emit() { (cd "$WS/a" && "$LUAGENT" emit "$1") >/dev/null 2>&1 || fail "emit $1 failed"; }
for i in $(seq 1 20); do emit "job.$i"; done
for n in 'x.y:z/w-v_u' xzy:z/w-v_u xy brack breck brick q1 qq1 other; do emit "$n"; done
want="$(for i in $(seq 1 20); do echo "jobs job.$i"; done; printf '%s\n' 'meta x.y:z/w-v_u' 'br brack' 'br breck' 'q q1')"
wait_for 15 "[ \"\$(cat '$WS/a/data/got.txt' 2>/dev/null | wc -l)\" -ge 24 ]" ||
  fail "host a ran $(cat "$WS/a/data/got.txt" 2>/dev/null | wc -l) of 24 runs; b: $(grep -c 'no automation on this host' "$WS/b.log") dropped"
sleep 1
[ "$(sort "$WS/a/data/got.txt")" = "$(echo "$want" | sort)" ] ||
  fail "host a ran the wrong set: $(sort "$WS/a/data/got.txt" | tr '\n' ';')"
# b is woken by the notification, or at worst by its 2 s re-check: give a
# loaded machine time, the check is the same
wait_for 10 "[ \"\$(cat '$WS/b/data/got.txt' 2>/dev/null)\" = 'other other' ]" ||
  fail "host b did not run its event: $(cat "$WS/b/data/got.txt" 2>/dev/null)"
# what no host listens for stays queued (xy, brick, qq1), nothing else
left=$(pg_sql "SELECT string_agg(name, ',' ORDER BY name) FROM luagent_events")
[ "$left" = "brick,qq1,xy,xzy:z/w-v_u" ] || fail "events left in the queue: '$left'"
grep -q "no automation on this host listens" "$WS/b.log" && fail "host b took an event it has no listener for"
cl_stop a
cl_stop b
pass "each host takes only the events it has a listener for"
finish
