#!/bin/sh
# JSONTestSuite conformance of json_parse: bench/json_suite.sh PATH/test_parsing [-v]
# PATH is a checkout of github.com/nst/JSONTestSuite (not part of this repository).
# Prints "y_ accepted X/Y", "n_ refused X/Y", "i_ crashed N"; exits non-zero
# unless every y_ is accepted, every n_ refused and nothing crashed.
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
[ -n "$1" ] || { echo "usage: $0 JSONTestSuite/test_parsing [-v]" >&2; exit 2; }
[ -x "$build/bench_json_suite" ] || cmake --build "$build" --target bench_json_suite >/dev/null
exec "$build/bench_json_suite" "$@"
