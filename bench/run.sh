#!/bin/sh
# Runs every benchmark and prints its figures. Usage: bench/run.sh BUILD_DIR
set -u
B=${1:-build}
cd "$(dirname "$0")/.."
echo "== sandbox"
"$B/bench_sandbox"
for s in bench/run_*.sh; do
  [ -f "$s" ] || continue
  echo "== $(basename "$s" .sh | sed 's/^run_//')"
  sh "$s" "$B"
done
