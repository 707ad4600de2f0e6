#!/bin/sh
# Several daemons sharing one PostgreSQL (called by bench/run.sh with the build
# folder): 1, 2, 4 and 8 daemons on 300 automations at every = "1s".
B=${1:-build}
bash "$(dirname "$0")/bench_cluster.sh" "$B" 300 12
