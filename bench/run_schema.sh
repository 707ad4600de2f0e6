#!/bin/sh
# JSON Schema conformance (called by bench/run.sh): JSON-Schema-Test-Suite
# draft2020-12, required tests, remote refs skipped. The suite is not part of
# the repository: point JSTS at a checkout (default /work/ext/jsts), e.g.
#   git clone https://github.com/json-schema-org/JSON-Schema-Test-Suite "$JSTS"
B=${1:-build}
JSTS=${JSTS:-/work/ext/jsts}
D="$JSTS/tests/draft2020-12"
if [ ! -d "$D" ]; then
  echo "schema: no suite at $D (set JSTS to a JSON-Schema-Test-Suite checkout); skipped"
  exit 0
fi
"$B/bench_schema_suite" "$D"
echo "-- optional (informational)"
"$B/bench_schema_suite" "$D/optional" | tail -2
"$B/bench_schema_suite" "$D/optional/format" --assert-format | tail -2
