/* mcp_elicit.c - a server's elicitation/create, answered by the operator
 * through the configured approver (sec_ask), like an escalated call: the
 * request shows as tool mcp.SERVER.elicitation with the form's defaults
 * as its arguments and the server's message as the reason. Approve sends
 * those values (or the edited ones, `approvals approve ID --args JSON`),
 * deny declines; with no operator (no terminal, approver "deny", a
 * timeout) it is declined. A URL elicitation is approved or declined the
 * same way; luagent never opens the URL itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "approver.h"
#include "call.h"
#include "json.h"
#include "mcp_impl.h"
#include "schema.h"
#include "security.h"
#include "util.h"

/* The form's defaults: each property's "default", when it has one. */
static cJSON *defaults_of(const cJSON *schema) {
  cJSON *o = cJSON_CreateObject();
  const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
  const cJSON *p;
  cJSON_ArrayForEach(p, props) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(p, "default");
    if (d) cJSON_AddItemToObject(o, p->string, cJSON_Duplicate(d, 1));
  }
  return o;
}

cJSON *mcp__elicit(struct mcp_server *s, struct call_ctx *ctx, const cJSON *params) {
  cJSON *r = cJSON_CreateObject();
  const char *mode = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(params, "mode"));
  int url_mode = mode && !strcmp(mode, "url");
  const char *message = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(params, "message"));
  const char *url = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(params, "url"));
  const cJSON *schema = cJSON_GetObjectItemCaseSensitive(params, "requestedSchema");
  if (!ctx || (!url_mode && !cJSON_IsObject(schema)) || (url_mode && !url)) {
    cJSON_AddStringToObject(r, "action", "decline"); /* nobody to ask, or nothing to ask */
    return r;
  }
  struct sbuf why = {0}, m = {0};
  util_escape_text(&m, message ? message : "", message ? strlen(message) : 0, 400);
  sbuf_printf(&why, "MCP server %s asks: %s", s->name, m.s ? m.s : "");
  if (url_mode) {
    sbuf_free(&m);
    util_escape_text(&m, url, strlen(url), 400);
    sbuf_printf(&why, " (open %s)", m.s ? m.s : "");
  }
  sbuf_free(&m);
  cJSON *args = url_mode ? cJSON_CreateObject() : defaults_of(schema);
  char hash[65], tool[200];
  json_hash_hex(args, hash);
  snprintf(tool, sizeof tool, "mcp.%s.elicitation", s->name);
  struct approval_request rq = {.run_id = ctx->run_id,
                                .tool = tool,
                                .caller_kind = caller_kind_name(ctx->caller.kind),
                                .caller_name = ctx->caller.name,
                                .impact = "medium",
                                .reason = why.s ? why.s : "",
                                .args = args,
                                .args_hash = hash};
  struct approval_result res;
  struct err e = {0};
  int rc = sec_ask(ctx, &rq, &res, &e);
  sbuf_free(&why);
  const cJSON *content = res.verdict == APPROVAL_MODIFIED ? res.new_args : args;
  int accept = !rc && res.verdict != APPROVAL_DENIED;
  if (accept && !url_mode) { /* what goes back must fit the form */
    struct schema *sc = NULL;
    struct schema_opts o = {.flags = SCHEMA_LENIENT | SCHEMA_ANY_ROOT};
    struct err se = {0};
    if (schema_compile(schema, &o, "requestedSchema", &sc, &se) ||
        schema_run(sc, content, "content", &se))
      accept = 0;
    schema_free(sc);
  }
  cJSON_AddStringToObject(r, "action", accept ? "accept" : "decline");
  if (accept && !url_mode) cJSON_AddItemToObject(r, "content", cJSON_Duplicate(content, 1));
  cJSON_Delete(res.new_args);
  cJSON_Delete(args);
  return r;
}
