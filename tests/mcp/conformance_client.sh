#!/bin/bash
# The client the MCP conformance tool drives in its client scenarios:
#   conformance client --command "bash conformance_client.sh LUAGENT" --scenario S
# appends the scenario server's URL. A fresh workspace names that server
# (Streamable HTTP, its origin on http_allow), trusts its tools, and for
# tools_call calls the scenario's tool through luagent's pipeline.
set -u
L=${1:?luagent}
URL=${2:?server url}
W=$(mktemp -d /tmp/luagent-conf.XXXXXX)
trap 'rm -rf "$W"' EXIT
origin=$(python3 -c 'import sys; from urllib.parse import urlsplit; u = urlsplit(sys.argv[1]); print("%s://%s:%d" % (u.scheme, u.hostname, u.port or (443 if u.scheme == "https" else 80)))' "$URL")
printf 'return { http_allow = { "%s" }, mcp = { servers = { conf = { url = "%s", timeout_s = 20 } } } }\n' "$origin" "$URL" > "$W/luagent.lua"
"$L" --workspace "$W" mcp trust conf --yes >&2 || exit 1
case "${MCP_CONFORMANCE_SCENARIO:-}" in
  tools_call)
    echo 'print(tools.call("mcp.conf.add_numbers", { a = 2, b = 3 }).text)' > "$W/t.lua"
    "$L" --workspace "$W" run "$W/t.lua" || exit 1 ;;
esac
exit 0
