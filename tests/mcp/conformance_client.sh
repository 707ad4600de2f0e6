#!/bin/bash
# The client the MCP conformance tool drives in its client scenarios:
#   conformance client --command "bash conformance_client.sh LUAGENT" --scenario S
# appends the scenario server's URL. A fresh workspace names that server
# (Streamable HTTP, its origin on http_allow), trusts its tools, and for
# tools_call, sse-retry and elicitation-sep1034-client-defaults call the
# scenario's tool through luagent's pipeline.
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
  sse-retry)
    echo 'print(tools.call("mcp.conf.test_reconnection", {}).text)' > "$W/t.lua"
    "$L" --workspace "$W" run "$W/t.lua" || exit 1 ;;
  elicitation-sep1034-client-defaults)
    # the operator approves the form (its defaults go back) from the queue
    printf 'return { approver = "queue", approval_timeout_s = 30, http_allow = { "%s" }, mcp = { servers = { conf = { url = "%s", timeout_s = 8 } } } }\n' "$origin" "$URL" > "$W/luagent.lua"
    echo 'print(tools.call("mcp.conf.test_client_elicitation_defaults", {}).text)' > "$W/t.lua"
    "$L" --workspace "$W" run "$W/t.lua" & RP=$!
    for _ in $(seq 1 200); do
      kill -0 $RP 2>/dev/null || break
      id=$("$L" --workspace "$W" approvals list --json 2>/dev/null | python3 -c 'import json, sys; r = [x for x in json.load(sys.stdin) if x["status"] == "pending"]; print(int(r[0]["id"]) if r else "")' 2>/dev/null)
      [ -n "$id" ] && { "$L" --workspace "$W" approvals approve "$id" >&2; break; }
      sleep 0.1
    done
    wait $RP || exit 1 ;;
esac
exit 0
