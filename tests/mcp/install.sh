#!/bin/bash
# Installs the npm packages pinned in tests/mcp (package-lock.json) into
# DEST with `npm ci`, unless DEST already holds this exact lockfile's
# install. The e2e tests named mcp_real_* use DEST/node_modules/.bin.
# A failure is loud and fails the fixture (ctest then fails those tests).
set -u
SRC=$(cd "$(dirname "$0")" && pwd)
DEST=${1:?usage: $0 DEST}
if cmp -s "$SRC/package-lock.json" "$DEST/package-lock.json" &&
   [ -x "$DEST/node_modules/.bin/mcp-server-everything" ] &&
   [ -x "$DEST/node_modules/.bin/mcp-server-filesystem" ] &&
   [ -x "$DEST/node_modules/.bin/mcp-inspector-cli" ] &&
   [ -x "$DEST/node_modules/.bin/conformance" ]; then
  echo "MCP test packages up to date in $DEST"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "FAIL: npm is not installed: the MCP tests against the reference servers cannot run (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
mkdir -p "$DEST" && rm -f "$DEST/package-lock.json"
cp "$SRC/package.json" "$DEST/package.json" && cp "$SRC/package-lock.json" "$DEST/package-lock.json.new"
cd "$DEST" && mv package-lock.json.new package-lock.json
if ! npm ci --ignore-scripts --no-audit --no-fund --loglevel=error; then
  rm -f "$DEST/package-lock.json" # so the next run tries again
  echo "FAIL: npm ci of tests/mcp/package-lock.json failed (is the npm registry reachable?): the MCP tests against the reference servers and clients cannot run" >&2
  exit 1
fi
echo "MCP test packages installed in $DEST"
