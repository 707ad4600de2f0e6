#!/bin/bash
# Audited calls with the chain in SQLite vs in PostgreSQL (cluster mode),
# against a throwaway local server (tests/e2e/lib/pg.sh). Prints the time
# per call of N fs.write calls (two rows each, written before and after the
# call: one transaction each) and of N fs.read calls (one row each, queued
# and written in batches). Usage: bench/run_cluster_audit.sh BUILD_DIR [N]
B=$(cd "${1:-build}" && pwd)
N=${2:-2000}
LIB="$(cd "$(dirname "$0")/../tests/e2e/lib" && pwd)"
set -- "$B/luagent" # common.sh takes the binary as $1 (run.sh runs this with sh)
. "$LIB/common.sh"
. "$LIB/pg.sh"
pg_start
for mode in sqlite cluster; do
  W="$WS/$mode"
  mkdir -p "$W/data"
  if [ $mode = cluster ]; then
    printf 'return { cluster = { postgres = "%s", node = "bench" } }\n' "$PG_URL" >"$W/luagent.lua"
  else
    printf 'return {}\n' >"$W/luagent.lua"
  fi
  cat >"$W/b.lua" <<'LUA'
local n, tool = tonumber(args.n), args.tool
tools.call("fs.write", { path = "f.txt", content = "x" })
for i = 1, n do
  if tool == "write" then tools.call("fs.write", { path = "f.txt", content = "x" })
  else tools.call("fs.read", { path = "f.txt" }) end
end
LUA
  for tool in write read; do
    s=$(date +%s.%N)
    (cd "$W" && "$LUAGENT" run b.lua --arg n="$N" --arg tool=$tool) || exit 1
    e=$(date +%s.%N)
    python3 -c "import sys; print('%-7s fs.%-5s %7.1f us per call (%s calls, wall clock, process start included)' % (sys.argv[1], sys.argv[2], (float(sys.argv[4]) - float(sys.argv[3])) * 1e6 / int(sys.argv[5]), sys.argv[5]))" \
      $mode $tool "$s" "$e" "$N"
  done
done
(cd "$WS/cluster" && "$LUAGENT" audit verify) >/dev/null || echo "cluster chain does not verify"
