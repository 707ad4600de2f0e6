/* mcp_sample.c - a server's sampling/createMessage: the server asks
 * luagent's model to answer a conversation it sends.
 *
 * Refused (JSON-RPC error -1) unless the server's config says sampling =
 * true (or a table), and refused outside a run: a sampling spends the
 * run's model budget, so there must be one to charge (`mcp trust` has
 * none). When allowed, the request is shown to the approver first if the
 * config says approve = true (as tool mcp.NAME.sampling, its arguments the
 * conversation; deny declines, an edit sends the edited conversation),
 * then it runs through llm_complete with no tools at all, the smaller of
 * the server's maxTokens and the config's max_tokens, the run's deadline
 * and stop flag, and the config's provider. The call counts as one model
 * call and its tokens against the run's budget (and every budget above
 * it). Every outcome is audited as mcp.NAME.sampling. Only text content
 * is taken: an image or audio block, or tools, are refused as invalid
 * params (luagent does not declare sampling.tools). At most
 * MCP_MAX_SAMPLES samplings are answered while one request of ours waits
 * (a run without a budget, `luagent run`, is still bounded). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "approver.h"
#include "call.h"
#include "events.h"
#include "json.h"
#include "llm.h"
#include "mcp_impl.h"
#include "security.h"
#include "util.h"

#define SAMPLE_MAX_MESSAGES 256
#define SAMPLE_MAX_BYTES ((size_t)1 << 20) /* all the text of one request */

/* The text of one content value (a block, an array of blocks, or a plain
 * string: the form the operator sees and edits), appended to b. Fails
 * (returns -1 with why) on anything but text. */
static int content_text(const cJSON *c, struct sbuf *b, const char **why) {
  if (cJSON_IsString(c)) {
    if (b->len) sbuf_puts(b, "\n");
    sbuf_puts(b, c->valuestring);
    return 0;
  }
  if (cJSON_IsArray(c)) {
    const cJSON *x;
    cJSON_ArrayForEach(x, c) if (content_text(x, b, why)) return -1;
    return 0;
  }
  const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "type"));
  const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "text"));
  if (!type || strcmp(type, "text") || !text) {
    *why = type && strcmp(type, "text") ? "only text content is supported" : "a content block without type text and text";
    return -1;
  }
  if (b->len) sbuf_puts(b, "\n");
  sbuf_puts(b, text);
  return 0;
}

/* The neutral conversation (llm.h) of a request's messages, or NULL with
 * why. */
static cJSON *conversation(const cJSON *msgs, const char **why) {
  if (!cJSON_IsArray(msgs) || !cJSON_GetArraySize(msgs)) {
    *why = "messages: expected a non-empty array";
    return NULL;
  }
  if (cJSON_GetArraySize(msgs) > SAMPLE_MAX_MESSAGES) {
    *why = "messages: more than 256";
    return NULL;
  }
  cJSON *out = cJSON_CreateArray();
  size_t total = 0;
  const cJSON *m;
  cJSON_ArrayForEach(m, msgs) {
    const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "role"));
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
      *why = "messages: a role other than user or assistant";
      goto fail;
    }
    struct sbuf b = {0};
    if (content_text(cJSON_GetObjectItemCaseSensitive(m, "content"), &b, why)) {
      sbuf_free(&b);
      goto fail;
    }
    total += b.len;
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "role", role);
    cJSON_AddStringToObject(x, "content", b.s ? b.s : "");
    sbuf_free(&b);
    cJSON_AddItemToArray(out, x);
    if (total > SAMPLE_MAX_BYTES) {
      *why = "messages: more than 1 MiB of text";
      goto fail;
    }
  }
  return out;
fail:
  cJSON_Delete(out);
  return NULL;
}

static void audit(struct call_ctx *ctx, const char *tool, const char *hash, const char *decision,
                  const char *by, const char *status, const char *detail) {
  struct err ae = {0};
  if (sec_record(ctx, tool, hash, decision, by, status, detail, &ae))
    fprintf(stderr, "luagent: audit of %s failed: %s\n", tool, ae.msg);
}

/* The operator's word on the request (approve = true). Returns 0 when it
 * may run (*args replaced by an edit), else fills msg. */
static int ask_operator(struct mcp_server *s, struct call_ctx *ctx, const char *tool,
                        cJSON **args, char hash[65], char *msg, size_t msgsz) {
  struct sbuf why = {0}, ex = {0};
  const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(*args, "messages");
  const cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
  const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(last, "content"));
  util_escape_text(&ex, t ? t : "", t ? strlen(t) : 0, 300);
  sbuf_printf(&why, "MCP server %s asks the model: %s", s->name, ex.s ? ex.s : "");
  sbuf_free(&ex);
  struct approval_request rq = {.run_id = ctx->run_id,
                                .tool = tool,
                                .caller_kind = caller_kind_name(ctx->caller.kind),
                                .caller_name = ctx->caller.name,
                                .impact = "medium",
                                .reason = why.s ? why.s : "",
                                .args = *args,
                                .args_hash = hash};
  struct approval_result res;
  struct err e = {0};
  int rc = sec_ask(ctx, &rq, &res, &e);
  sbuf_free(&why);
  if (rc || res.verdict == APPROVAL_DENIED) {
    snprintf(msg, msgsz, "the operator declined the sampling request%s%s", res.reason[0] ? ": " : "",
             res.reason);
    audit(ctx, tool, hash, "deny", res.by[0] ? res.by : "approver", "declined", msg);
    cJSON_Delete(res.new_args);
    return -1;
  }
  audit(ctx, tool, hash, res.verdict == APPROVAL_MODIFIED ? "modified" : "approved",
        res.by[0] ? res.by : "approver", NULL, NULL);
  if (res.verdict == APPROVAL_MODIFIED && res.new_args) {
    cJSON_Delete(*args);
    *args = res.new_args;
    json_hash_hex(*args, hash);
  } else {
    cJSON_Delete(res.new_args);
  }
  return 0;
}

static const char *stop_reason(const struct llm_response *r) {
  switch (r->finish) {
  case LLM_FINISH_STOP: return "endTurn";
  case LLM_FINISH_LENGTH: return "maxTokens";
  case LLM_FINISH_REFUSAL: return "refusal";
  default: return r->stop_reason[0] ? r->stop_reason : "endTurn";
  }
}

void mcp__sample(struct mcp_server *s, struct call_ctx *ctx, const cJSON *params, cJSON **result,
                 int *code, char *msg, size_t msgsz) {
  *result = NULL;
  *code = -1;
  char tool[200], hash[65] = "";
  snprintf(tool, sizeof tool, "mcp.%s.sampling", s->name);
  if (!s->sampling) {
    snprintf(msg, msgsz, "luagent does not allow sampling for this server");
    if (ctx) audit(ctx, tool, NULL, "deny", "config", "refused", msg);
    return;
  }
  if (!ctx || !ctx->rt->budget_check_fn || !ctx->rt->budget_charge_fn) {
    snprintf(msg, msgsz, "luagent allows sampling only during a run (none to charge now)");
    return;
  }
  if (++s->samples > MCP_MAX_SAMPLES) {
    snprintf(msg, msgsz, "sampling refused: more than %d sampling requests during one request",
             MCP_MAX_SAMPLES);
    audit(ctx, tool, NULL, "deny", "luagent", "mcp_flood", msg);
    return;
  }
  const char *why = NULL;
  cJSON *args = cJSON_CreateObject(); /* what is decided, audited and sent */
  const cJSON *sys = cJSON_GetObjectItemCaseSensitive(params, "systemPrompt");
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(params, "maxTokens");
  cJSON *conv = NULL;
  struct llm_client *llm = NULL;
  struct llm_response r = {0};
  if (cJSON_GetObjectItemCaseSensitive(params, "tools")) {
    why = "tools: luagent offers no tools to a sampled model";
  } else if (sys && !cJSON_IsString(sys)) {
    why = "systemPrompt: expected a string";
  } else if (!cJSON_IsNumber(mt) || mt->valuedouble < 1) {
    why = "maxTokens: expected a positive number";
  } else if ((conv = conversation(cJSON_GetObjectItemCaseSensitive(params, "messages"), &why))) {
    /* conv is what the model sees: role and text only */
    if (sys) cJSON_AddStringToObject(args, "systemPrompt", sys->valuestring);
    cJSON_AddItemToObject(args, "messages", conv);
    conv = NULL; /* args owns it */
    long n = mt->valuedouble > (double)s->sampling_max_tokens ? s->sampling_max_tokens
                                                              : (long)mt->valuedouble;
    cJSON_AddNumberToObject(args, "maxTokens", (double)n);
  }
  if (why) {
    *code = -32602;
    snprintf(msg, msgsz, "sampling/createMessage: %s", why);
    audit(ctx, tool, NULL, "deny", "luagent", "invalid_params", msg);
    goto out;
  }
  json_hash_hex(args, hash);
  if (s->sampling_approve && ask_operator(s, ctx, tool, &args, hash, msg, msgsz)) goto out;
  /* an edit is checked like the server's own request */
  conv = conversation(cJSON_GetObjectItemCaseSensitive(args, "messages"), &why);
  sys = cJSON_GetObjectItemCaseSensitive(args, "systemPrompt");
  mt = cJSON_GetObjectItemCaseSensitive(args, "maxTokens");
  if (!conv || (sys && !cJSON_IsString(sys)) || !cJSON_IsNumber(mt)) {
    snprintf(msg, msgsz, "sampling/createMessage: the edited request is invalid: %s",
             why ? why : "systemPrompt or maxTokens");
    audit(ctx, tool, hash, "deny", "luagent", "invalid_params", msg);
    goto out;
  }
  long max_tokens = mt->valuedouble > (double)s->sampling_max_tokens || mt->valuedouble < 1
                        ? s->sampling_max_tokens
                        : (long)mt->valuedouble;
  struct err e = {0};
  if (ctx->budget && ctx->rt->budget_check_fn(ctx->budget, &e)) {
    snprintf(msg, msgsz, "sampling refused: %s", e.msg);
    audit(ctx, tool, hash, "deny", "budget", e.code[0] ? e.code : "budget_exceeded", msg);
    goto out;
  }
  if (llm_client_for(ctx->rt, &llm, &e)) {
    snprintf(msg, msgsz, "sampling failed: %s", e.msg);
    audit(ctx, tool, hash, "allow", "config", e.code[0] ? e.code : "provider_error", msg);
    goto out;
  }
  double deadline = util_monotonic() + s->timeout_s;
  if (ctx->limits.deadline_at > 0 && ctx->limits.deadline_at < deadline)
    deadline = ctx->limits.deadline_at;
  struct llm_request rq = {.system = sys ? sys->valuestring : NULL,
                           .messages = conv,
                           .tools = NULL, /* never: the server gets text, not actions */
                           .provider = s->sampling_provider,
                           .deadline_at = deadline,
                           .stop = ctx->stop,
                           .max_tokens = (int)max_tokens,
                           .max_answer_bytes = SAMPLE_MAX_BYTES};
  struct llm_callbacks cb = {0};
  double t0 = util_monotonic();
  int rc = llm_complete(llm, &rq, &cb, &r, &e);
  if (ctx->budget) ctx->rt->budget_charge_fn(ctx->budget, r.input_tokens + r.output_tokens);
  if (ctx->events) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "server", s->name);
    cJSON_AddStringToObject(d, "provider", r.provider);
    cJSON_AddNumberToObject(d, "input_tokens", (double)r.input_tokens);
    cJSON_AddNumberToObject(d, "output_tokens", (double)r.output_tokens);
    cJSON_AddStringToObject(d, "status", rc ? (e.code[0] ? e.code : "error") : "ok");
    cJSON_AddNumberToObject(d, "ms", (util_monotonic() - t0) * 1000.0);
    events_emit(ctx->events, ctx->run_id, "mcp_sampling", d);
    cJSON_Delete(d);
  }
  if (rc) {
    snprintf(msg, msgsz, "sampling failed: %s", e.msg);
    audit(ctx, tool, hash, "allow", s->sampling_approve ? "approver" : "config",
          e.code[0] ? e.code : "provider_error", msg);
    goto out;
  }
  char note[160];
  snprintf(note, sizeof note, "provider %s, %ld+%ld tokens", r.provider, r.input_tokens,
           r.output_tokens);
  audit(ctx, tool, hash, "allow", s->sampling_approve ? "approver" : "config", "ok", note);
  const struct llm_provider *p = NULL;
  for (size_t i = 0; i < llm_client_count(llm); i++)
    if (!strcmp(llm_client_provider(llm, i)->name, r.provider)) p = llm_client_provider(llm, i);
  cJSON *res = cJSON_CreateObject();
  cJSON_AddStringToObject(res, "role", "assistant");
  cJSON *content = cJSON_AddObjectToObject(res, "content");
  cJSON_AddStringToObject(content, "type", "text");
  const char *text = r.finish == LLM_FINISH_REFUSAL && r.refusal && r.refusal[0] ? r.refusal : r.text;
  cJSON_AddStringToObject(content, "text", text ? text : "");
  cJSON_AddStringToObject(res, "model", p && p->model ? p->model : r.provider);
  cJSON_AddStringToObject(res, "stopReason", stop_reason(&r));
  *result = res;
out:
  cJSON_Delete(conv);
  llm_response_free(&r);
  llm_client_free(llm);
  cJSON_Delete(args);
}
