#!/bin/sh
# The ReAct loop's overhead per turn against the mock model server (vs a raw
# client in the same run) and the peak RSS of a 10-turn `luagent ask`.
# Usage: bench/run_llm.sh BUILD_DIR
B=${1:-build}
LUAGENT_SOURCE_DIR=${LUAGENT_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)} \
  "$B/bench_react" "$B/luagent" "${REPS:-20}"
