#!/bin/sh
# JSONTestSuite conformance of json_parse (src/base/json.c).
# Usage: bench/json_suite.sh [PATH/test_parsing] [-v]   (or JSONTESTSUITE=PATH/test_parsing)
# PATH is a checkout of github.com/nst/JSONTestSuite, kept outside this repository.
# Prints "y_ accepted X/Y", "n_ refused X/Y", "i_ crashed N" and the printer's
# round trip; -v prints each file's verdict and message. Exits non-zero unless
# every y_ is accepted, every n_ refused and nothing crashed. BUILD selects the
# build folder (default: build).
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
suite=${1:-${JSONTESTSUITE:-}}
[ $# -gt 0 ] && shift
if [ -z "$suite" ] || [ ! -d "$suite" ]; then
  echo "usage: $0 JSONTestSuite/test_parsing [-v]  (or set JSONTESTSUITE)" >&2
  exit 2
fi
[ -x "$build/bench_json_suite" ] || cmake --build "$build" --target bench_json_suite >/dev/null
exec "$build/bench_json_suite" "$suite" "$@"
