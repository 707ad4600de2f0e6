/* mcp_discover.c - protocol revision 2026-07-28 ("modern", stateless) on
 * stdio: the server/discover probe that tells a modern server from a
 * legacy one, and the per-request _meta a modern server needs on every
 * request instead of an initialize handshake.
 *
 * The probe follows the stdio binding's backward-compatibility rules: a
 * DiscoverResult that offers 2026-07-28 makes the connection stateless;
 * an UnsupportedProtocolVersionError (-32022) is a modern server's answer,
 * not a reason to fall back blindly; any other error, garbage, silence or
 * death means a legacy server, which then gets initialize exactly as
 * before. A legacy server that answers the probe costs one round trip; one
 * that ignores it costs the probe's wait (MCP_DISCOVER_TIMEOUT_S, or the
 * server's timeout_s when shorter), once per start.
 *
 * luagent does not implement multi round-trip requests (InputRequiredResult)
 * yet, so it declares no client capabilities in stateless mode: a modern
 * server then cannot ask for elicitation or sampling, and a result that
 * asks for input anyway is a clear error.
 */
#include <stdio.h>
#include <string.h>

#include "mcp_impl.h"

#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define META_CLIENT "io.modelcontextprotocol/clientInfo"
#define META_SERVER "io.modelcontextprotocol/serverInfo"
#define UNSUPPORTED_PROTOCOL_VERSION (-32022)

cJSON *mcp__stateless_params(const cJSON *params) {
  cJSON *p = cJSON_IsObject(params) ? cJSON_Duplicate(params, 1) : cJSON_CreateObject();
  cJSON *meta = cJSON_GetObjectItemCaseSensitive(p, "_meta");
  if (!cJSON_IsObject(meta)) {
    cJSON_DeleteItemFromObjectCaseSensitive(p, "_meta");
    meta = cJSON_AddObjectToObject(p, "_meta");
  }
  /* ours replace whatever a caller put there: the version is not theirs to choose */
  cJSON_DeleteItemFromObjectCaseSensitive(meta, META_VERSION);
  cJSON_DeleteItemFromObjectCaseSensitive(meta, META_CAPS);
  cJSON_DeleteItemFromObjectCaseSensitive(meta, META_CLIENT);
  cJSON_AddStringToObject(meta, META_VERSION, MCP_STATELESS_VERSION);
  cJSON_AddObjectToObject(meta, META_CAPS); /* none: see the top of this file */
  cJSON *ci = cJSON_AddObjectToObject(meta, META_CLIENT);
  cJSON_AddStringToObject(ci, "name", "luagent");
  cJSON_AddStringToObject(ci, "version", LUAGENT_VERSION);
  return p;
}

int mcp__stateless_result(const struct mcp_server *s, const char *method, const cJSON *result,
                          struct err *e) {
  const cJSON *rt = cJSON_GetObjectItemCaseSensitive(result, "resultType");
  if (!rt || (cJSON_IsString(rt) && !strcmp(rt->valuestring, "complete"))) return 0; /* absent: complete */
  if (cJSON_IsString(rt) && !strcmp(rt->valuestring, "input_required"))
    return err_set(e, ERR_FAIL, "mcp_unsupported",
                   "mcp server %s: %s asked the client for more input (resultType input_required); "
                   "luagent does not answer multi round-trip requests yet and declared no client "
                   "capabilities",
                   s->name, method);
  char ex[80];
  snprintf(ex, sizeof ex, "%s", cJSON_IsString(rt) ? rt->valuestring : "(not a string)");
  return err_set(e, ERR_INVALID, "mcp_protocol", "mcp server %s: %s answered with an unknown resultType '%s'",
                 s->name, method, ex);
}

/* 1 when the JSON array of strings a holds version v. */
static int has_version(const cJSON *a, const char *v) {
  const cJSON *x;
  cJSON_ArrayForEach(x, a) if (cJSON_IsString(x) && !strcmp(x->valuestring, v)) return 1;
  return 0;
}

static int has_legacy(const cJSON *a) {
  for (int i = 0; mcp_versions[i]; i++)
    if (has_version(a, mcp_versions[i])) return 1;
  return 0;
}

/* The versions in a, for a message: "a, b" (cut short). */
static void list_versions(const cJSON *a, char *out, size_t n) {
  out[0] = 0;
  const cJSON *x;
  size_t used = 0;
  cJSON_ArrayForEach(x, a) {
    if (!cJSON_IsString(x) || used + 40 >= n) continue;
    used += (size_t)snprintf(out + used, n - used, "%s%.32s", used ? ", " : "", x->valuestring);
  }
  if (!out[0]) snprintf(out, n, "none");
}

static int no_common_version(const struct mcp_server *s, const cJSON *offered, struct err *e) {
  char vs[300];
  list_versions(offered, vs, sizeof vs);
  return err_set(e, ERR_INVALID, "mcp_version",
                 "mcp server %s speaks protocol versions %s (server/discover); luagent speaks %s, "
                 "%s, %s and 2025-03-26",
                 s->name, vs, MCP_STATELESS_VERSION, mcp_versions[0], mcp_versions[1]);
}

int mcp__discover(struct mcp_server *s, struct call_ctx *ctx, int *modern, struct err *e) {
  *modern = 0;
  cJSON *params = mcp__stateless_params(NULL);
  cJSON *ans = NULL;
  double wait = s->timeout_s < MCP_DISCOVER_TIMEOUT_S ? s->timeout_s : MCP_DISCOVER_TIMEOUT_S;
  struct err pe = {0};
  int rc = mcp__exchange(s, ctx, "server/discover", params, wait, 1, &ans, &pe);
  cJSON_Delete(params);
  if (rc == ERR_STOPPED) { /* the operator's stop is not the server's era */
    *e = pe;
    return rc;
  }
  /* silence (the server still runs), garbage or death (stopped: the
   * caller starts it again): legacy */
  if (rc) return 0;
  const cJSON *merr = cJSON_GetObjectItemCaseSensitive(ans, "error");
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(ans, "result");
  if (merr) {
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(merr, "code");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(merr, "data");
    const cJSON *sup = cJSON_GetObjectItemCaseSensitive(data, "supported");
    if (!cJSON_IsNumber(code) || code->valuedouble != UNSUPPORTED_PROTOCOL_VERSION || !cJSON_IsArray(sup)) {
      cJSON_Delete(ans);
      return 0; /* method not found, invalid params, anything else: legacy */
    }
    /* a modern server that will not speak 2026-07-28: if it offers a
     * version luagent speaks, that one is a legacy version, and using it
     * means the initialize handshake */
    rc = has_legacy(sup) ? 0 : no_common_version(s, sup, e);
    cJSON_Delete(ans);
    return rc;
  }
  const cJSON *sv = cJSON_GetObjectItemCaseSensitive(res, "supportedVersions");
  if (!cJSON_IsObject(res) || !cJSON_IsArray(sv)) {
    cJSON_Delete(ans);
    return 0; /* not a DiscoverResult: a lenient legacy server's answer */
  }
  if (!has_version(sv, MCP_STATELESS_VERSION)) {
    rc = has_legacy(sv) ? 0 : no_common_version(s, sv, e);
    cJSON_Delete(ans);
    return rc;
  }
  if ((rc = mcp__stateless_result(s, "server/discover", res, e))) {
    cJSON_Delete(ans);
    return rc;
  }
  *modern = 1;
  s->stateless = 1;
  snprintf(s->version, sizeof s->version, "%s", MCP_STATELESS_VERSION);
  cJSON_Delete(s->server_info);
  s->server_info = NULL;
  const cJSON *rmeta = cJSON_GetObjectItemCaseSensitive(res, "_meta");
  const cJSON *info = cJSON_GetObjectItemCaseSensitive(rmeta, META_SERVER);
  if (cJSON_IsObject(info)) s->server_info = cJSON_Duplicate(info, 1);
  cJSON_Delete(ans);
  return 0;
}
