/* mcp.h - the Model Context Protocol, both directions.
 *
 * Client: luagent.lua's `mcp = { servers = { NAME = {...} } }` names
 * servers (mcp_config.c says which keys). Their tools become luagent
 * tools named mcp.NAME.TOOL, with the server's inputSchema as params
 * (compiled leniently), impact and open_world from the server's
 * annotations or the config's overrides. Each is an ordinary registry
 * tool: a call reaches the server only through tool_call (the pipeline:
 * rules, hooks, impact, taint, approval, audit) and the tool's handler.
 *
 * Trust: a server's tools are registered only from the list the operator
 * pinned with `luagent mcp trust NAME` (stored in
 * .luagent/mcp/NAME.trust.json with the server's config). So nothing
 * starts at start-up, and a tool whose name, description, schemas or
 * annotations change on the server afterwards is held back (its calls
 * fail with code "mcp_untrusted") until trusted again.
 *
 * Servers start on the first call of one of their tools (stdio: a
 * supervised child, mcp_proc.h), are restarted with backoff when they
 * die, and are stopped by mcp_free. Calls to one server are serialised.
 * Streamable HTTP event streams that break before the answer are resumed
 * (GET with Last-Event-ID, bounded). A server's elicitation goes to the
 * approver; its sampling requests are refused unless its config says
 * `sampling = ...`, and then run through the run's providers and budget
 * with no tools (mcp_sample.c).
 *
 * Server: mcp_serve answers an MCP client on a pair of descriptors with
 * the workspace's tools; each call runs as caller kind mcp through
 * tool_call. Resources, prompts, completions and logging are answered
 * valid and empty.
 */
#ifndef LUAGENT_MCP_H
#define LUAGENT_MCP_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "err.h"
#include "tool.h"

struct runtime;
struct mcp;

/* Protocol versions luagent speaks with initialize, newest first (on
 * stdio, 2026-07-28 is tried before them with server/discover:
 * MCP_STATELESS_VERSION, mcp_discover.c). */
extern const char *const mcp_versions[];

/* Reads rt->cfg's `mcp` (an unknown key or a wrong type fails with
 * "luagent.lua:LINE: ..."), and registers in rt->tools the pinned tools
 * of every trusted server whose config is unchanged since it was trusted.
 * Starts no process. A pinned tool that cannot be registered (a wire name
 * another tool has, a schema that does not compile) is left out and
 * reported by mcp_problems. *out is NULL when luagent.lua has no servers. */
int mcp_open(struct runtime *rt, struct mcp **out, struct err *e);
/* Installs mcp.resources(server), mcp.read(server, uri) and
 * mcp.prompt(server, name, args) in a sandbox for ctx (nothing when the
 * workspace has no MCP servers). Each calls the tool of that name through
 * tool_call: read impact, open world. */
struct sandbox;
struct call_ctx;
int mcp_install_api(struct sandbox *sb, struct call_ctx *ctx, struct err *e);

/* Stops every server process; NULL is a no-op. */
void mcp_free(struct mcp *m);

size_t mcp_count(const struct mcp *m);
const char *mcp_name(const struct mcp *m, size_t i);

/* What `luagent mcp list` shows about server i: a new JSON object
 * {name, command, trusted, tools, problems[]} (caller frees). */
cJSON *mcp_describe(const struct mcp *m, size_t i);

/* Starts server `name` (outside any tool call: only server/discover on
 * stdio, initialize unless the server is stateless, and tools/list are
 * sent) and sets *tools to a new JSON array of its tool
 * definitions as the server gave them, *info to {protocolVersion,
 * serverInfo}; with them *changes gets a new JSON object
 * {added: [names], changed: [names], removed: [names]} against the pin.
 * Tool entries get "x-luagent" {impact, open_world} as luagent would
 * register them. */
int mcp_fetch(struct mcp *m, const char *name, cJSON **tools, cJSON **info, cJSON **changes,
              struct err *e);
/* Pins tools (from mcp_fetch) for server name: writes its trust file
 * (0600). Takes effect for the next runtime opened. */
int mcp_trust(struct mcp *m, const char *name, const cJSON *tools, const cJSON *info,
              struct err *e);

/* Impact and open_world of an MCP tool definition (its annotations are a
 * server's claims, shown to the operator at trust time): readOnlyHint
 * true gives read, else destructiveHint true gives high, anything else
 * medium; open_world is false only when openWorldHint is false. The
 * config's overrides ov_impact (an impact name) and ov_open_world (a
 * boolean) win when set (NULL: none). */
void mcp_tool_policy(const cJSON *tool, const char *ov_impact, const cJSON *ov_open_world,
                     enum impact *impact, bool *open_world);

/* Serves the MCP protocol (stdio transport: one JSON-RPC message per
 * line) on in_fd/out_fd until the client closes in_fd. patterns: a JSON
 * array of tool-name globs to expose (NULL or empty: all). Every
 * tools/call goes through tool_call as caller kind mcp named by the
 * client's clientInfo.name. log (may be NULL) gets one line per event
 * for the operator (stderr). Returns 0 at the client's end of input. */
int mcp_serve(struct runtime *rt, int in_fd, int out_fd, const cJSON *patterns,
              void (*log)(void *ud, const char *line), void *ud, struct err *e);

/* Serves the MCP protocol over Streamable HTTP at addr ("PORT",
 * "HOST:PORT"; the host defaults to 127.0.0.1) until *stop is set (a
 * signal handler sets it). Every POST needs "Authorization: Bearer TOKEN":
 * the token is made once, stored 0600 in .luagent/mcp/serve.token and
 * given to log the first time; a request with an Origin header that is not
 * a loopback origin is refused (DNS rebinding). Answers are JSON bodies;
 * sessions by Mcp-Session-Id. Requests run one at a time. */
int mcp_serve_http(struct runtime *rt, const char *addr, const cJSON *patterns,
                   volatile int *stop, void (*log)(void *ud, const char *line), void *ud,
                   struct err *e);

#endif
