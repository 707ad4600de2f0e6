#!/bin/sh
# Bounded pattern matcher vs stock Lua (called by bench/run.sh).
B=${1:-build}
"$B/bench_pattern"
