#!/bin/bash
# e2e: the console in a real browser (Debian's chromium driven by npm
# playwright-core, pinned in tests/console/package-lock.json) against
# `luagent daemon --console` and the scripted model: login (and a wrong
# token), a run streaming live, approve / modify / deny, steer and stop a
# chat, run an automation now and disable one, and screenshots of the main
# pages into <build>/console-screenshots/. Nothing here may pass without a
# browser: a missing chromium or playwright-core fails the test.
set -u
. "$(dirname "$0")/lib/common.sh"
. "$(dirname "$0")/lib/console_ws.sh"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="$(dirname "$LUAGENT")"
NODE_DIR="$BUILD/console-node"
SHOTS="$BUILD/console-screenshots"

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
  fail "chromium is not installed (scripts/install-deps.sh installs Debian's chromium); the browser tests cannot run"
  finish
fi
command -v npm >/dev/null || { fail "npm is not installed; the browser tests cannot run"; finish; }
# npm ci into the build folder, again only when the lockfile changed
if ! cmp -s "$SRC/tests/console/package-lock.json" "$NODE_DIR/package-lock.json" ||
   [ ! -d "$NODE_DIR/node_modules/playwright-core" ]; then
  rm -rf "$NODE_DIR" && mkdir -p "$NODE_DIR"
  cp "$SRC/tests/console/package.json" "$SRC/tests/console/package-lock.json" "$NODE_DIR/"
  if ! (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error) >"$WS/npm.log" 2>&1; then
    fail "npm ci of playwright-core failed: $(tail -5 "$WS/npm.log")"
    rm -f "$NODE_DIR/package-lock.json"
    finish
  fi
fi
cp "$SRC/tests/console/browser.mjs" "$NODE_DIR/"

console_ws "$WS"
mkdir -p "$WS/skills/broken"
echo 'return { name = "broken", tools = { x = { run = 5 } }' > "$WS/skills/broken/skill.lua"
PORT=$(free_port)
(cd "$WS" && exec "$LUAGENT" daemon --console 127.0.0.1:$PORT --quiet) >"$WS/d.log" 2>&1 &
DPID=$!
PIDS="$PIDS $DPID"
for _ in $(seq 50); do grep -q '^console: http' "$WS/d.log" && break; sleep 0.1; done
grep -q '^console: http' "$WS/d.log" || { fail "daemon --console did not start: $(cat "$WS/d.log")"; finish; }

rm -rf "$SHOTS"
if URL="http://127.0.0.1:$PORT" TOKEN="$(cat "$WS/.luagent/console.token")" SHOTS="$SHOTS" \
   CHROMIUM="$CHROMIUM" timeout 240 node "$NODE_DIR/browser.mjs"; then
  pass "browser checks"
else
  fail "browser checks (daemon log: $(tail -5 "$WS/d.log"))"
fi
for p in login runs run approvals approvals-editor chat automations skills audit; do
  [ -s "$SHOTS/$p.png" ] || fail "no screenshot $p.png"
done
kill -TERM "$DPID"; wait "$DPID" 2>/dev/null
finish
