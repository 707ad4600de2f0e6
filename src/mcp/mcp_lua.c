/* mcp_lua.c - an MCP server's resources and prompts: the tools
 * mcp.resources, mcp.read and mcp.prompt (read impact, open world: what
 * they return is the server's text), and the Lua functions mcp.resources,
 * mcp.read and mcp.prompt that call them through tool_call, so every read
 * passes the pipeline and taints the run like any open-world result. Only
 * trusted servers (pinned) answer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "json.h"
#include "mcp_impl.h"
#include "security.h"
#include "util.h"

static struct mcp_server *server_arg(struct mcp *m, const char *tool, const cJSON *args,
                                     struct err *e) {
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(args, "server"));
  for (size_t i = 0; name && i < m->n; i++) {
    if (strcmp(m->v[i]->name, name)) continue;
    if (!m->v[i]->pinned) {
      err_set(e, ERR_DENIED, "mcp_untrusted", "%s: MCP server %s is not trusted (luagent mcp trust %s)",
              tool, name, name);
      return NULL;
    }
    return m->v[i];
  }
  err_set(e, ERR_NOTFOUND, "mcp_unknown", "%s: no MCP server named '%s' in luagent.lua", tool,
          name ? name : "");
  return NULL;
}

static int request(struct mcp *m, struct mcp_server *s, struct call_ctx *ctx, const char *method,
                   const cJSON *params, cJSON **res, struct err *e) {
  pthread_mutex_lock(&s->mu);
  int rc = mcp__request(m, s, ctx, method, params, res, e);
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* mcp.resources {server}: every page of resources/list. */
static int t_resources(struct call_ctx *ctx, const struct tool *t, const cJSON *args, cJSON **out,
                       struct err *e) {
  struct mcp *m = t->ud;
  struct mcp_server *s = server_arg(m, t->name, args, e);
  if (!s) return e->rc;
  cJSON *all = cJSON_CreateArray();
  char *cursor = NULL;
  int rc = 0;
  for (int page = 0;; page++) {
    if (page == MCP_MAX_PAGES) { /* as tools/list: never a silently cut list */
      rc = err_set(e, ERR_LIMIT, "mcp_protocol",
                   "mcp server %s: resources/list has more than %d pages", s->name, MCP_MAX_PAGES);
      break;
    }
    cJSON *p = cJSON_CreateObject();
    if (cursor) cJSON_AddStringToObject(p, "cursor", cursor);
    cJSON *res = NULL;
    rc = request(m, s, ctx, "resources/list", p, &res, e);
    cJSON_Delete(p);
    if (rc) break;
    mcp__page_take(all, res, "resources", &cursor); /* no list: no resources */
    cJSON_Delete(res);
    if (!cursor) break;
  }
  free(cursor);
  if (rc) {
    cJSON_Delete(all);
    return rc;
  }
  *out = all;
  return 0;
}

/* mcp.read {server, uri}: resources/read; { contents = {...}, text = joined text }. */
static int t_read(struct call_ctx *ctx, const struct tool *t, const cJSON *args, cJSON **out,
                  struct err *e) {
  struct mcp *m = t->ud;
  struct mcp_server *s = server_arg(m, t->name, args, e);
  if (!s) return e->rc;
  cJSON *p = cJSON_CreateObject();
  cJSON_AddItemToObject(p, "uri", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(args, "uri"), 0));
  cJSON *res = NULL;
  int rc = request(m, s, ctx, "resources/read", p, &res, e);
  cJSON_Delete(p);
  if (rc) return rc;
  cJSON *contents = cJSON_DetachItemFromObjectCaseSensitive(res, "contents");
  cJSON_Delete(res);
  if (!cJSON_IsArray(contents)) {
    cJSON_Delete(contents);
    return err_set(e, ERR_INVALID, "mcp_protocol", "%s: the server's answer has no contents list", t->name);
  }
  struct sbuf b = {0};
  const cJSON *c;
  cJSON_ArrayForEach(c, contents) {
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "text"));
    if (text) sbuf_printf(&b, "%s%s", b.len ? "\n" : "", text);
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "contents", contents);
  if (b.s) cJSON_AddStringToObject(o, "text", b.s);
  sbuf_free(&b);
  *out = o;
  return 0;
}

/* mcp.prompt {server, name, arguments}: prompts/get as the server gave it. */
static int t_prompt(struct call_ctx *ctx, const struct tool *t, const cJSON *args, cJSON **out,
                    struct err *e) {
  struct mcp *m = t->ud;
  struct mcp_server *s = server_arg(m, t->name, args, e);
  if (!s) return e->rc;
  cJSON *p = cJSON_CreateObject();
  cJSON_AddItemToObject(p, "name", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(args, "name"), 0));
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(args, "arguments");
  if (a) cJSON_AddItemToObject(p, "arguments", cJSON_Duplicate(a, 1));
  int rc = request(m, s, ctx, "prompts/get", p, out, e);
  cJSON_Delete(p);
  return rc;
}

static void no_free(void *ud) { (void)ud; }

int mcp__register_lua_tools(struct mcp *m, struct err *e) {
  static const char server[] = "\"server\":{\"type\":\"string\",\"description\":\"an MCP server of luagent.lua\"}";
  char rs[300], rd[400], pr[600];
  snprintf(rs, sizeof rs, "{\"type\":\"object\",\"required\":[\"server\"],\"additionalProperties\":false,\"properties\":{%s}}", server);
  snprintf(rd, sizeof rd, "{\"type\":\"object\",\"required\":[\"server\",\"uri\"],\"additionalProperties\":false,\"properties\":{%s,\"uri\":{\"type\":\"string\"}}}", server);
  snprintf(pr, sizeof pr, "{\"type\":\"object\",\"required\":[\"server\",\"name\"],\"additionalProperties\":false,\"properties\":{%s,\"name\":{\"type\":\"string\"},\"arguments\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}}}", server);
  struct tool_registry *r = m->rt->tools;
  if (toolreg_add(r, "mcp.resources", "List the resources of an MCP server (its text: open world).", rs,
                  IMPACT_READ, true, t_resources, m, no_free, "host", NULL, e) ||
      toolreg_add(r, "mcp.read", "Read a resource of an MCP server by URI (its text: open world).", rd,
                  IMPACT_READ, true, t_read, m, no_free, "host", NULL, e) ||
      toolreg_add(r, "mcp.prompt", "Get a prompt of an MCP server, filled with arguments (open world).", pr,
                  IMPACT_READ, true, t_prompt, m, no_free, "host", NULL, e))
    return ERR_INVALID;
  return 0;
}

/* ---------------------------------------------------------------- Lua */

static int call_tool(void *ud, const char *tool, cJSON *args, cJSON **ret, struct err *e) {
  int rc = tool_call(ud, tool, args, ret, e);
  cJSON_Delete(args);
  return rc;
}

static int need_string(const cJSON *v, const char *fn, int n, struct err *e) {
  if (cJSON_IsString(v)) return 0;
  return err_set(e, ERR_INVALID, "invalid_args", "%s: argument #%d must be a string", fn, n);
}

/* mcp.resources(server) [-1, +1, e] */
static int l_mcp_resources(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)sb;
  const cJSON *s = cJSON_GetArrayItem(args, 0);
  if (need_string(s, "mcp.resources", 1, e)) return e->rc;
  cJSON *a = cJSON_CreateObject();
  cJSON_AddStringToObject(a, "server", s->valuestring);
  return call_tool(ud, "mcp.resources", a, ret, e);
}

/* mcp.read(server, uri) [-2, +1, e] */
static int l_mcp_read(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)sb;
  const cJSON *s = cJSON_GetArrayItem(args, 0), *u = cJSON_GetArrayItem(args, 1);
  if (need_string(s, "mcp.read", 1, e) || need_string(u, "mcp.read", 2, e)) return e->rc;
  cJSON *a = cJSON_CreateObject();
  cJSON_AddStringToObject(a, "server", s->valuestring);
  cJSON_AddStringToObject(a, "uri", u->valuestring);
  return call_tool(ud, "mcp.read", a, ret, e);
}

/* mcp.prompt(server, name, args) [-3, +1, e] */
static int l_mcp_prompt(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)sb;
  const cJSON *s = cJSON_GetArrayItem(args, 0), *n = cJSON_GetArrayItem(args, 1);
  const cJSON *pa = cJSON_GetArrayItem(args, 2);
  if (need_string(s, "mcp.prompt", 1, e) || need_string(n, "mcp.prompt", 2, e)) return e->rc;
  if (pa && !cJSON_IsNull(pa) && !cJSON_IsObject(pa))
    return err_set(e, ERR_INVALID, "invalid_args", "mcp.prompt: argument #3 must be a table of strings");
  cJSON *a = cJSON_CreateObject();
  cJSON_AddStringToObject(a, "server", s->valuestring);
  cJSON_AddStringToObject(a, "name", n->valuestring);
  if (cJSON_IsObject(pa)) cJSON_AddItemToObject(a, "arguments", cJSON_Duplicate(pa, 1));
  return call_tool(ud, "mcp.prompt", a, ret, e);
}

int mcp_install_api(struct sandbox *sb, struct call_ctx *ctx, struct err *e) {
  if (!ctx->rt->mcp) return 0; /* no servers: no mcp table */
  if (sandbox_add_function(sb, "mcp", "resources", l_mcp_resources, ctx) ||
      sandbox_add_function(sb, "mcp", "read", l_mcp_read, ctx) ||
      sandbox_add_function(sb, "mcp", "prompt", l_mcp_prompt, ctx))
    return err_set(e, ERR_FAIL, "internal", "cannot install the mcp API");
  return 0;
}
