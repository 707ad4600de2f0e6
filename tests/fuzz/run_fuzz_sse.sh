#!/bin/sh
# Builds the SSE fuzz target with clang's libFuzzer (+ASan/UBSan) and runs it
# over tests/fuzz/corpus_sse for N seconds (default 60). New interesting
# inputs land in the corpus directory; commit the small ones.
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
secs=${1:-60}
CC=${CC:-clang}
out=${TMPDIR:-/tmp}/luagent_fuzz_sse
$CC -g -O1 -fsanitize=fuzzer,address,undefined -I"$root/src/base" -I"$root/src/model" \
  "$here/fuzz_sse.c" "$root/src/model/sse.c" "$root/src/base/util.c" "$root/src/base/err.c" -o "$out"
"$out" -max_total_time="$secs" -max_len=4096 "$here/corpus_sse"
