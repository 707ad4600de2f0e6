#!/bin/bash
# kill -9 of the daemon in the middle of a burst: every run a worker began
# has its runs row (ok, or interrupted by the next start), so no run whose
# tools wrote (its audited exec row names its run id) is missing from the
# journal, and ctx.state counts exactly the runs journaled ok (red team 8,
# F1: the scheduler handed jobs to workers before committing their rows,
# and lost 1-35 such runs per kill).
. "$(dirname "$0")/lib/common.sh"
N=200
mkdir -p "$WS/skills/sk" "$WS/automations"
cat >"$WS/skills/sk/skill.lua" <<'LUA'
return { name = "sk", description = "a write", tools = {
  put = { description = "a write", impact = "medium", params = { type = "object" },
    run = function(args) return { wrote = args.i } end } } }
LUA
for i in $(seq $N); do
  cat >"$WS/automations/a$i.lua" <<LUA
return { every = "1s", run = function(ctx)
  tools.call("sk.put", { i = $i })
  ctx.state.n = (ctx.state.n or 0) + 1
end }
LUA
done
check() { # what the journal, the chain and ctx.state say after kill -9 at $1 s
  python3 - "$WS/.luagent/state.db" "$1" <<'PY'
import json, sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=10)
lost = c.execute("SELECT count(DISTINCT run_id) FROM audit WHERE tool = 'sk.put' AND decision = 'exec'"
                 " AND run_id NOT IN (SELECT id FROM runs)").fetchone()[0]
left = c.execute("SELECT count(*) FROM runs WHERE status = 'running'").fetchone()[0]
ok = dict(c.execute("SELECT name, count(*) FROM runs WHERE kind = 'automation' AND status = 'ok'"
                    " GROUP BY name"))
bad = [n for n, s in c.execute("SELECT name, state FROM automations")
       if json.loads(s or "{}").get("n", 0) != ok.get(n, 0)]
execs = c.execute("SELECT count(*) FROM audit WHERE tool = 'sk.put' AND decision = 'exec'").fetchone()[0]
print("kill at %s s: %d writes, %d of their runs not journaled, %d left running, %d states off"
      % (sys.argv[2], execs, lost, left, len(bad)))
sys.exit(1 if lost or left or bad or not execs else 0)
PY
}
for T in 2.04 2.06; do
  rm -rf "$WS/.luagent"
  (cd "$WS" && exec "$LUAGENT" --workspace "$WS" daemon --quiet >"$WS/d1.log" 2>&1) &
  DP=$!
  sleep "$T"
  kill -9 "$DP"
  wait "$DP" 2>/dev/null
  # the next start marks what was left running interrupted
  (cd "$WS" && exec "$LUAGENT" --workspace "$WS" daemon --quiet >"$WS/d2.log" 2>&1) &
  DP=$!
  sleep 1.5
  kill -TERM "$DP"
  wait "$DP"
  out=$(check "$T") && pass "$out" || fail "$out"
done
finish
