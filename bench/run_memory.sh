#!/bin/sh
# Memory: write/read/search/context-assembly latency. Usage: run_memory.sh BUILD_DIR
"${1:-build}/bench_memory" 10000
