#!/bin/sh
# Builds the JSON fuzz target with clang's libFuzzer (+ASan/UBSan) and runs it
# over tests/fuzz/corpus_json for N seconds (default 60). New interesting
# inputs land in the corpus directory; commit the small ones.
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
secs=${1:-60}
CC=${CC:-clang}
out=${TMPDIR:-/tmp}/luagent_fuzz_json
$CC -g -O1 -fsanitize=fuzzer,address,undefined -I"$root/src/base" \
  "$here/fuzz_json.c" "$root/src/base/json.c" "$root/src/base/util.c" "$root/src/base/err.c" \
  $(pkg-config --cflags --libs libcjson libsodium) -lm -lpthread -o "$out"
mkdir -p "$here/corpus_json"
"$out" -max_total_time="$secs" -max_len=4096 "$here/corpus_json"
