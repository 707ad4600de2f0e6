#!/bin/bash
# Runs a unit test binary ($1) against a throwaway PostgreSQL: the test
# re-executes itself through this script when PG_URL is not set, so ctest
# needs nothing running. Fails (never skips) when PostgreSQL cannot start.
HERE=$(cd "$(dirname "$0")/../../e2e/lib" && pwd)
. "$HERE/common.sh"
. "$HERE/pg.sh"
pg_start
"$LUAGENT"
rc=$?
exit $rc
