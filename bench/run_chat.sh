#!/bin/sh
# Chat context assembly costs (bench/bench_context.c). Usage: run_chat.sh BUILD_DIR
"${1:-build}/bench_context"
