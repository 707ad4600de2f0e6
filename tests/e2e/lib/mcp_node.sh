# Sourced by the mcp_real_* tests: finds the npm packages the mcp/npm_ci
# fixture installed (tests/mcp/install.sh) and fails loudly without them.
[ -n "${LUAGENT_MCP_NODE_LIB:-}" ] && return 0
LUAGENT_MCP_NODE_LIB=1
NODE_BIN="${LUAGENT_MCP_NODE:-}/node_modules/.bin"
need_node_bin() {
  for b in "$@"; do
    if [ ! -x "$NODE_BIN/$b" ]; then
      echo "FAIL: $b is not installed in ${LUAGENT_MCP_NODE:-(LUAGENT_MCP_NODE unset)}: the mcp/npm_ci fixture (tests/mcp/install.sh) must run first; this MCP test cannot run and FAILS" >&2
      exit 1
    fi
  done
}
