#!/bin/sh
# `luagent test` overhead (called by bench/run.sh with the build folder):
# the cost of a test that touches nothing, of one that writes state (each
# test starts from a copy of an empty state.db), and of a test file (a
# temporary copy of the workspace, its runtime, skills and sandbox).
# Prints milliseconds per test and per file; best of 3 runs.
set -u
B=${1:-build}
LUAGENT=$(cd "$B" && pwd)/luagent
W=$(mktemp -d /tmp/luagent-bench-test.XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/tests" "$W/files/tests"
echo 'return {}' > "$W/luagent.lua"
echo 'return {}' > "$W/files/luagent.lua"
printf 'for i = 1, 500 do test("t" .. i, function() expect(i).to_be(i) end) end\n' > "$W/tests/empty_test.lua"
printf 'for i = 1, 100 do test("t" .. i, function() memory.set("k", "v"); tools.call("fs.write", { path = "x", content = "y" }) end) end\n' > "$W/tests/state_test.lua"
for i in $(seq 50); do printf 'test("x", function() end)\n' > "$W/files/tests/f${i}_test.lua"; done

best() { # best WORKSPACE N ARGS...: the fastest of 3 runs, ms per unit of N
  ws=$1; n=$2; shift 2
  b=""
  for _ in 1 2 3; do
    t0=$(date +%s%N)
    "$LUAGENT" --workspace "$ws" test "$@" >/dev/null 2>&1 || { echo "luagent test failed" >&2; exit 1; }
    t=$(( ($(date +%s%N) - t0) / 1000 ))
    [ -z "$b" ] || [ "$t" -lt "$b" ] && b=$t
  done
  awk -v us="$b" -v n="$n" 'BEGIN { printf "%.2f", us / n / 1000 }'
}

printf 'empty test:          %s ms per test (500 in one file)\n' "$(best "$W" 500 "$W/tests/empty_test.lua")"
printf 'test writing state:  %s ms per test (memory.set + fs.write; 100 in one file)\n' "$(best "$W" 100 "$W/tests/state_test.lua")"
printf 'test file:           %s ms per file (50 files of one empty test)\n' "$(best "$W/files" 50)"
