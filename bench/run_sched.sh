#!/bin/sh
# Scheduler benchmarks (called by bench/run.sh with the build folder).
B=${1:-build}
bash "$(dirname "$0")/bench_daemon.sh" "$B" 1000 20
