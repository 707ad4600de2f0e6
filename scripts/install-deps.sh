#!/bin/sh
# Installs the Debian packages luagent needs to build, test and run, and only
# the ones that are missing. Called by `make run` and `make test`.
set -eu
PKGS="build-essential cmake pkg-config liblua5.4-dev libcjson-dev libsodium-dev \
libcurl4-openssl-dev libsqlite3-dev libyaml-dev libmicrohttpd-dev python3 sqlite3 procps"
PKGS="$PKGS chromium"  # the console's browser tests
PKGS="$PKGS libpq-dev postgresql iproute2"  # cluster mode; its tests start a throwaway PostgreSQL
PKGS="$PKGS lld"  # links the start's functions side by side (CMakeLists.txt, LUAGENT_HOT_ORDER)
command -v npm >/dev/null 2>&1 || PKGS="$PKGS nodejs npm"  # any npm will do (playwright-core)
missing=""
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
# The MCP tests run Node.js packages pinned in tests/mcp (npm ci); any
# Node.js 18+ with npm will do, so Debian's is installed only when none is.
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "luagent: missing Debian packages:$missing" >&2
  echo "luagent: run as root, or install them: sudo apt-get install -y$missing" >&2
  exit 1
fi
echo "luagent: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing
