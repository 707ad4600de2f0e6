/* context.c - see context.h. */
#include "context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "events.h"
#include "json.h"
#include "llm.h"
#include "memory.h"
#include "react.h"
#include "util.h"

/* ------------------------------------------------------------------ */
/* Config                                                              */

static int cfg_err(const struct config *cfg, const char *key, struct err *e, const char *fmt,
                   const char *k) {
  const char *file = cfg->path[0] ? cfg->path : "luagent.lua";
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  int line = cfg->path[0] ? config_line_of(cfg->path, key) : 0;
  char what[200];
  snprintf(what, sizeof what, fmt, k);
  return err_set(e, ERR_INVALID, "config", "%s:%d: %s.%s", base, line, key, what);
}

int context_config(const struct config *cfg, struct context_cfg *c, struct err *e) {
  memset(c, 0, sizeof *c);
  c->compact_at = 0.7;
  c->keep_recent = 6;
  c->memory_items = 5;
  c->memory_chars = 2000;
  c->max_retries = 1;
  if (!cfg) return 0;
  const cJSON *t = config_get(cfg, "context"), *it;
  if (t && !cJSON_IsObject(t)) return cfg_err(cfg, "context", e, "%s: must be a table", "");
  cJSON_ArrayForEach(it, t) {
    const char *k = it->string;
    if (!cJSON_IsNumber(it) || it->valuedouble < 0)
      return cfg_err(cfg, "context", e, "%s: expected a number >= 0", k);
    double v = it->valuedouble;
    if (!strcmp(k, "window_tokens"))
      c->window_tokens = (long)v;
    else if (!strcmp(k, "compact_at")) {
      if (v <= 0 || v > 1) return cfg_err(cfg, "context", e, "%s: expected a share in (0, 1]", k);
      c->compact_at = v;
    } else if (!strcmp(k, "keep_recent"))
      c->keep_recent = (int)v;
    else if (!strcmp(k, "memory_items"))
      c->memory_items = (size_t)v;
    else if (!strcmp(k, "memory_chars"))
      c->memory_chars = (size_t)v;
    else
      return cfg_err(cfg, "context", e,
                     "%s: unknown key (known: window_tokens, compact_at, keep_recent, "
                     "memory_items, memory_chars)",
                     k);
  }
  t = config_get(cfg, "reflexion");
  if (t && !cJSON_IsObject(t)) return cfg_err(cfg, "reflexion", e, "%s: must be a table", "");
  cJSON_ArrayForEach(it, t) {
    const char *k = it->string;
    if (!strcmp(k, "enabled")) {
      if (!cJSON_IsBool(it)) return cfg_err(cfg, "reflexion", e, "%s: expected true or false", k);
      c->reflexion = cJSON_IsTrue(it);
    } else if (!strcmp(k, "max_retries")) {
      if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 10)
        return cfg_err(cfg, "reflexion", e, "%s: expected a number from 0 to 10", k);
      c->max_retries = (int)it->valuedouble;
    } else {
      return cfg_err(cfg, "reflexion", e, "%s: unknown key (known: enabled, max_retries)", k);
    }
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* Helpers                                                             */

static long json_chars(const cJSON *j) {
  if (!j) return 0;
  char *s = json_print(j, 0);
  long n = s ? (long)strlen(s) : 0;
  free(s);
  return n;
}

long context_estimate_tokens(const char *system, const cJSON *tools, const cJSON *messages) {
  long chars = (system ? (long)strlen(system) : 0) + json_chars(tools) + json_chars(messages);
  return (chars + 3) / 4;
}

/* The sizes context_estimate_run measured, in order. */
struct context_sizes {
  cJSON *snap; /* copies of the messages measured */
  long *len;   /* the printed size of each */
  size_t n, cap;
  cJSON *tools; /* a copy of the tool list measured */
  long tools_len;
  bool have_tools;
};

static void sizes_free(struct context_sizes *z) {
  if (!z) return;
  cJSON_Delete(z->snap);
  cJSON_Delete(z->tools);
  free(z->len);
  free(z);
}

long context_estimate_run(struct context_state *cs, const char *system, const cJSON *tools,
                          const cJSON *messages) {
  if (!cs->sizes) cs->sizes = xcalloc(1, sizeof *cs->sizes);
  struct context_sizes *z = cs->sizes;
  if (!z->have_tools || !json_identical(z->tools, tools)) {
    cJSON_Delete(z->tools);
    z->tools = tools ? cJSON_Duplicate(tools, 1) : NULL;
    z->tools_len = json_chars(tools);
    z->have_tools = true;
  }
  long chars = (system ? (long)strlen(system) : 0) + z->tools_len;
  if (!cJSON_IsArray(messages)) return (chars + json_chars(messages) + 3) / 4;
  if (!z->snap) z->snap = cJSON_CreateArray();
  /* the measured messages that are still there, unchanged, in place */
  const cJSON *m = messages->child;
  const cJSON *s = z->snap->child;
  size_t keep = 0;
  for (; m && s && keep < z->n && json_identical(m, s); m = m->next, s = s->next) keep++;
  while (z->n > keep) cJSON_DeleteItemFromArray(z->snap, (int)--z->n);
  for (; m; m = m->next) {
    if (z->n == z->cap) {
      z->cap = z->cap ? 2 * z->cap : 32;
      z->len = xrealloc(z->len, z->cap * sizeof *z->len);
    }
    z->len[z->n++] = json_chars(m);
    cJSON_AddItemToArray(z->snap, cJSON_Duplicate(m, 1));
  }
  /* "[" the messages joined by "," "]", as json_print writes the array */
  long sum = 2 + (z->n > 1 ? (long)z->n - 1 : 0);
  for (size_t i = 0; i < z->n; i++) sum += z->len[i];
  return (chars + sum + 3) / 4;
}

/* A prompt file of luagent's (util_data_path), else fallback. */
static char *prompt_file(const char *name, const char *fallback) {
  char path[4200];
  char *text = NULL;
  size_t len = 0;
  struct err e = {0};
  if (!util_data_path(name, path, sizeof path) && !util_read_file(path, 1 << 20, &text, &len, &e))
    return text;
  return xstrdup(fallback);
}

static const char *role_of(const cJSON *m) {
  const char *r = cJSON_GetStringValue(cJSON_GetObjectItem(m, "role"));
  return r ? r : "";
}
static const char *content_of(const cJSON *m) {
  const char *c = cJSON_GetStringValue(cJSON_GetObjectItem(m, "content"));
  return c ? c : "";
}

/* Appends s cut to max bytes (with a marker) to b. */
static void put_bounded(struct sbuf *b, const char *s, size_t max) {
  size_t n = strlen(s);
  if (n <= max) {
    sbuf_puts(b, s);
    return;
  }
  size_t k = max;
  while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--; /* no split UTF-8 */
  sbuf_append(b, s, k);
  sbuf_printf(b, " [... %zu more bytes cut]", n - k);
}

/* One model call without tools and without streaming to the operator.
 * Returns the text (caller frees) or NULL on failure. */
static char *side_call(struct context_state *cs, struct call_ctx *ctx, struct budget *b,
                       const char *system, const char *user) {
  struct err e = {0};
  if (!cs->llm || budget_check_model_call(b, &e)) return NULL;
  cJSON *msgs = cJSON_CreateArray();
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "user");
  cJSON_AddStringToObject(m, "content", user);
  cJSON_AddItemToArray(msgs, m);
  struct llm_request req = {.system = system,
                            .messages = msgs,
                            .deadline_at = budget_deadline(b),
                            .stop = ctx->stop,
                            .force_nostream = true};
  struct llm_response resp;
  int rc = llm_complete(cs->llm, &req, NULL, &resp, &e);
  budget_charge(b, 0, 1, 0, resp.input_tokens + resp.output_tokens);
  char *out = !rc && resp.text ? xstrdup(resp.text) : NULL;
  llm_response_free(&resp);
  cJSON_Delete(msgs);
  return out;
}

static void emit(struct call_ctx *ctx, const char *type, cJSON *d) {
  events_emit(ctx->events, ctx->run_id, type, d);
  cJSON_Delete(d);
}

/* ------------------------------------------------------------------ */
/* Compaction                                                          */

/* The transcript of messages [0, cut) as text for the summariser. */
static char *transcript(const cJSON *messages, int cut, size_t max) {
  struct sbuf b = {0};
  int i = 0;
  const cJSON *m;
  cJSON_ArrayForEach(m, messages) {
    if (i++ >= cut) break;
    const char *role = role_of(m);
    if (!strcmp(role, "tool")) {
      sbuf_printf(&b, "[tool result %s]: ",
                  cJSON_GetStringValue(cJSON_GetObjectItem(m, "name"))
                      ? cJSON_GetStringValue(cJSON_GetObjectItem(m, "name"))
                      : "?");
      put_bounded(&b, content_of(m), 2000);
    } else {
      sbuf_printf(&b, "[%s]: ", role);
      put_bounded(&b, content_of(m), 4000);
      const cJSON *c;
      cJSON_ArrayForEach(c, cJSON_GetObjectItem(m, "tool_calls")) {
        const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
        const char *args = cJSON_GetStringValue(cJSON_GetObjectItem(c, "arguments"));
        sbuf_printf(&b, "\n  (called %s with ", nm ? nm : "?");
        put_bounded(&b, args ? args : "", 500);
        sbuf_puts(&b, ")");
      }
    }
    sbuf_puts(&b, "\n\n");
  }
  char *s = sbuf_take(&b);
  if (!s) return xstrdup("");
  size_t n = strlen(s);
  if (n > max) { /* keep the start and the end, cut the middle */
    struct sbuf c = {0};
    size_t head = max / 3, tail = max - head;
    while (head > 0 && ((unsigned char)s[head] & 0xC0) == 0x80) head--;
    size_t from = n - tail;
    while (from < n && ((unsigned char)s[from] & 0xC0) == 0x80) from++;
    sbuf_append(&c, s, head);
    sbuf_printf(&c, "\n[... %zu bytes of the conversation cut ...]\n", from - head);
    sbuf_append(&c, s + from, n - from);
    free(s);
    s = sbuf_take(&c);
  }
  return s;
}

/* Index of the first kept message: n - keep moved back to a user message
 * (not a tool result), or forward when none is before it; -1 if none. */
static int find_cut(const cJSON *messages, int keep) {
  int n = cJSON_GetArraySize(messages);
  int start = n - keep;
  if (start <= 0) start = n > 0 ? n - 1 : 0;
  for (int i = start; i > 0; i--)
    if (!strcmp(role_of(cJSON_GetArrayItem(messages, i)), "user")) return i;
  for (int i = start + 1; i < n; i++)
    if (!strcmp(role_of(cJSON_GetArrayItem(messages, i)), "user")) return i;
  return -1;
}

static void replace_head(cJSON *messages, int cut, const char *text) {
  for (int i = 0; i < cut; i++) cJSON_DeleteItemFromArray(messages, 0);
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "user");
  cJSON_AddStringToObject(m, "content", text);
  cJSON_InsertItemInArray(messages, 0, m);
}

/* Returns whether it may have changed messages (react.h): false only
 * when it left them alone, under the threshold. */
static bool compact_hook(void *ud, struct call_ctx *ctx, struct budget *b, const char *system,
                         const cJSON *tools, cJSON *messages) {
  struct context_state *cs = ud;
  long window = cs->cfg.window_tokens;
  long limit = (long)(cs->cfg.compact_at * (double)window);
  long before = context_estimate_run(cs, system, tools, messages);
  if (window <= 0 || before <= limit) return false;
  int cut = find_cut(messages, cs->cfg.keep_recent);
  bool summarised = false;
  int dropped = 0;
  if (cut > 0) {
    /* the summariser's own request must fit the window too */
    size_t max = (size_t)(window > 2000 ? window : 2000) * 2;
    char *tr = transcript(messages, cut, max);
    char *sys = prompt_file("compact_prompt.md",
                            "Summarise this conversation compactly, keeping facts, decisions and "
                            "open questions. Plain text.");
    struct sbuf u = {0};
    sbuf_puts(&u, "The conversation so far:\n\n");
    sbuf_puts(&u, tr);
    char *summary = side_call(cs, ctx, b, sys, u.s);
    struct sbuf t = {0};
    if (summary && *summary) {
      sbuf_printf(&t,
                  "[luagent] Summary of the %d earlier messages of this conversation (compacted to "
                  "stay inside the context window):\n",
                  cut);
      put_bounded(&t, summary, (size_t)window); /* ~ a quarter of the window in tokens */
      summarised = true;
    } else {
      sbuf_printf(&t,
                  "[luagent] %d earlier messages of this conversation were elided to stay inside "
                  "the context window.",
                  cut);
    }
    replace_head(messages, cut, t.s);
    dropped = cut;
    sbuf_free(&t);
    sbuf_free(&u);
    free(summary);
    free(sys);
    free(tr);
  }
  long after = context_estimate_run(cs, system, tools, messages);
  if (after > limit) { /* still too big: keep only from the last user message */
    int n = cJSON_GetArraySize(messages), last = -1;
    for (int i = n - 1; i > 0 && last < 0; i--)
      if (!strcmp(role_of(cJSON_GetArrayItem(messages, i)), "user")) last = i;
    if (last > 1 || (last == 1 && !summarised)) {
      char text[200];
      snprintf(text, sizeof text,
               "[luagent] %d earlier messages of this conversation were elided to stay inside "
               "the context window.",
               last);
      replace_head(messages, last, text);
      dropped += last;
      summarised = false;
      after = context_estimate_run(cs, system, tools, messages);
    }
  }
  cs->compactions++;
  cJSON *d = cJSON_CreateObject();
  cJSON_AddNumberToObject(d, "tokens_before", (double)before);
  cJSON_AddNumberToObject(d, "tokens_after", (double)after);
  cJSON_AddNumberToObject(d, "window_tokens", (double)window);
  cJSON_AddNumberToObject(d, "messages_replaced", dropped);
  cJSON_AddBoolToObject(d, "summarised", summarised);
  emit(ctx, "compaction", d);
  return true;
}

/* ------------------------------------------------------------------ */
/* Reflexion                                                           */

/* The critique's reply as {ok, feedback}: the text itself or the first
 * {...} in it (models like code fences). 0 on success, -1 if malformed. */
static int parse_verdict(const char *text, bool *ok, char **feedback) {
  const char *a = strchr(text, '{'), *z = strrchr(text, '}');
  if (!a || !z || z < a) return -1;
  char *s = xmalloc((size_t)(z - a) + 2);
  memcpy(s, a, (size_t)(z - a) + 1);
  s[z - a + 1] = 0;
  cJSON *j = json_parse_str(s, 0, NULL);
  free(s);
  const cJSON *o = cJSON_GetObjectItem(j, "ok");
  if (!cJSON_IsObject(j) || !cJSON_IsBool(o)) {
    cJSON_Delete(j);
    return -1;
  }
  *ok = cJSON_IsTrue(o);
  const char *f = cJSON_GetStringValue(cJSON_GetObjectItem(j, "feedback"));
  *feedback = xstrdup(f ? f : "");
  cJSON_Delete(j);
  return 0;
}

static int reflect_hook(void *ud, struct call_ctx *ctx, struct budget *b, const cJSON *messages,
                        const char *answer, int retries_done, struct sbuf *feedback) {
  struct context_state *cs = ud;
  if (retries_done >= cs->cfg.max_retries) return 0;
  struct err be = {0};
  if (budget_check_model_call(b, &be)) { /* no room for a critique, let alone a retry */
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "outcome", "skipped");
    cJSON_AddStringToObject(d, "reason", be.msg);
    emit(ctx, "reflexion", d);
    return 0;
  }
  /* the question: the last operator message (not a luagent note) */
  int n = cJSON_GetArraySize(messages), q = -1;
  for (int i = n - 1; i >= 0 && q < 0; i--) {
    const cJSON *m = cJSON_GetArrayItem(messages, i);
    if (!strcmp(role_of(m), "user") && strncmp(content_of(m), "[luagent]", 9) &&
        strncmp(content_of(m), "[reviewer]", 10))
      q = i;
  }
  struct sbuf u = {0};
  sbuf_puts(&u, "Question:\n");
  put_bounded(&u, q >= 0 ? content_of(cJSON_GetArrayItem(messages, q)) : "(none)", 4000);
  sbuf_puts(&u, "\n\nTool results:\n");
  int nres = 0;
  for (int i = q < 0 ? 0 : q; i < n && u.len < 16000; i++) {
    const cJSON *m = cJSON_GetArrayItem(messages, i);
    if (strcmp(role_of(m), "tool")) continue;
    const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(m, "name"));
    sbuf_printf(&u, "- %s: ", nm ? nm : "?");
    put_bounded(&u, content_of(m), 1500);
    sbuf_puts(&u, "\n");
    nres++;
  }
  if (!nres) sbuf_puts(&u, "(none)\n");
  sbuf_puts(&u, "\nCandidate answer:\n");
  put_bounded(&u, answer, 8000);
  sbuf_puts(&u, "\n\nReply with only the JSON object {\"ok\": true|false, \"feedback\": \"...\"}.");
  char *sys = prompt_file("reflexion_prompt.md",
                          "Check the answer against the tool results. Reply only JSON "
                          "{\"ok\": bool, \"feedback\": string}.");
  char *reply = side_call(cs, ctx, b, sys, u.s);
  sbuf_free(&u);
  free(sys);
  bool ok = true;
  char *fb = NULL;
  const char *outcome;
  if (!reply)
    outcome = "failed";
  else if (parse_verdict(reply, &ok, &fb))
    outcome = "malformed";
  else
    outcome = ok ? "ok" : "retry";
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "outcome", outcome);
  cJSON_AddNumberToObject(d, "retry", retries_done);
  if (fb) cJSON_AddStringToObject(d, "feedback", fb);
  emit(ctx, "reflexion", d);
  int again = 0;
  if (!strcmp(outcome, "retry")) {
    sbuf_puts(feedback,
              "[reviewer] A reviewer checked your answer against the tool results and "
              "found a problem: ");
    put_bounded(feedback, fb && *fb ? fb : "(no details given)", 2000);
    sbuf_puts(feedback, "\nAnswer again, correcting it.");
    again = 1;
  }
  free(fb);
  free(reply);
  return again;
}

/* ------------------------------------------------------------------ */

void context_prepare(struct context_state *cs, const struct context_cfg *cfg, struct runtime *rt,
                     struct llm_client *llm, const char *message, struct react_opts *ro) {
  memset(cs, 0, sizeof *cs);
  cs->cfg = *cfg;
  cs->llm = llm;
  if (rt && message && cfg->memory_items && cfg->memory_chars) {
    struct sbuf b = {0};
    struct err e = {0};
    int tainted = 0;
    if (memory_relevant_taint(rt, message, cfg->memory_items, cfg->memory_chars, &b, &tainted,
                              &e) > 0) {
      cs->memories = sbuf_take(&b);
      ro->context_tainted = tainted;
    }
    sbuf_free(&b);
  }
  ro->context = cs->memories;
  if (cfg->window_tokens > 0) {
    ro->compact = compact_hook;
    ro->compact_ud = cs;
  }
  if (cfg->reflexion && cfg->max_retries > 0) {
    ro->reflect = reflect_hook;
    ro->reflect_ud = cs;
  }
}

void context_state_free(struct context_state *cs) {
  if (!cs) return;
  free(cs->memories);
  cs->memories = NULL;
  sizes_free(cs->sizes);
  cs->sizes = NULL;
}
