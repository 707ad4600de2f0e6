#!/bin/sh
# Security pipeline figures (called by bench/run.sh). Usage: bench/run_security.sh BUILD_DIR
B=${1:-build}
"$B/bench_pipeline" 2000
