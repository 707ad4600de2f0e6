#!/bin/sh
# The model's parallel read-only calls on the store: one `luagent ask` of
# TURNS answers with 8 memory.search calls each (the ReAct loop runs them
# in 8 threads), against 120 memories. Prints the process's instructions
# per tool call (callgrind, all threads) and the wall time without
# valgrind. Usage: bench/run_parallel_memory.sh LUAGENT [TURNS]
set -u
L=${1:?usage: $0 path/to/luagent [turns]}
TURNS=${2:-40}
WS=$(mktemp -d /tmp/luagent-bench-pmem.XXXXXX)
trap 'rm -rf "$WS"' EXIT
cat > "$WS/seed.lua" <<'LUA'
for i = 0, 119 do
  memory.set(string.format("k%03d", i), string.format("uniq%03dx words about releases %d", i, i))
end
LUA
python3 - "$WS/luagent.lua" "$TURNS" <<'PY'
import sys
path, n = sys.argv[1], int(sys.argv[2])
turns = ["{ tools = { %s } }," % ", ".join(
    '{ tool = "memory.search", args = { query = "uniq%03dx" } }' % ((t * 8 + j) % 120)
    for j in range(8)) for t in range(n)]
open(path, "w").write("""return {
  react = { max_iterations = %d, max_tool_calls = %d, parallel_tools = true },
  providers = { { name = "demo", kind = "script", turns = { { turns = {
%s
{ text = "done" } } } } } },
}
""" % (n + 5, n * 8 + 10, "\n".join(turns)))
PY
"$L" --workspace "$WS" run "$WS/seed.lua" >/dev/null || exit 1
"$L" --workspace "$WS" ask "search" >/dev/null 2>&1 # warm the page cache
t0=$(date +%s.%N)
"$L" --workspace "$WS" ask "search" >/dev/null 2>"$WS/err" || { cat "$WS/err"; exit 1; }
t1=$(date +%s.%N)
calls=$((TURNS * 8))
awk -v a="$t0" -v b="$t1" -v n="$calls" 'BEGIN { printf "wall: %.1f ms for %d parallel memory.search calls (%.1f us per call)\n", (b - a) * 1000, n, (b - a) * 1e6 / n }'
if command -v valgrind >/dev/null 2>&1; then
  valgrind --tool=callgrind --callgrind-out-file="$WS/cg.out" "$L" --workspace "$WS" ask "search" \
    >/dev/null 2>"$WS/vg.err" || { cat "$WS/vg.err"; exit 1; }
  ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$WS/cg.out")
  awk -v ir="$ir" -v n="$calls" 'BEGIN { printf "instructions: %d for the process, %.0f per tool call\n", ir, ir / n }'
fi
