/* codemode.c - see codemode.h. */
#include "codemode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "json.h"
#include "react.h"
#include "secrets.h"
#include "security.h"
#include "skills_tools.h"
#include "util.h"

/* ------------------------------------------------------------------ */
/* Config                                                              */

void codemode_cfg_default(struct codemode_cfg *c) {
  c->instructions = 10000000;
  c->memory_bytes = 32u << 20;
  c->deadline_s = 30;
  c->print_bytes = 4096;
  c->max_code_bytes = 32768;
}

int codemode_config(const struct config *cfg, struct codemode_cfg *c, struct err *e) {
  codemode_cfg_default(c);
  const cJSON *t = cfg ? config_get(cfg, "code_mode") : NULL;
  if (!t) return 0;
  static const char *const known[] = {"instructions", "memory_mb", "deadline_s", "print_bytes",
                                      "max_code_bytes", NULL};
  if (config_check_keys(t, "code_mode", known, e)) return config_error_at(cfg, "code_mode", e);
  for (const cJSON *it = t->child; it; it = it->next) {
    const char *k = it->string;
    double v = cJSON_GetNumberValue(it);
    /* memory_mb is scaled to bytes: its own bound keeps that in size_t */
    double max = !strcmp(k, "memory_mb") ? 1048576 : 1e15;
    if (!cJSON_IsNumber(it) || !(v > 0) || v > max) {
      err_set(e, ERR_INVALID, "config", "code_mode.%s: expected a number above 0, at most %.0f",
              k, max);
      return config_error_at(cfg, "code_mode", e);
    }
    if (!strcmp(k, "instructions")) c->instructions = (uint64_t)v;
    else if (!strcmp(k, "memory_mb")) c->memory_bytes = (size_t)(v * 1048576.0);
    else if (!strcmp(k, "deadline_s")) c->deadline_s = v;
    else if (!strcmp(k, "print_bytes")) c->print_bytes = (size_t)v;
    else c->max_code_bytes = (size_t)v;
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* The API in the prompt                                               */

static int by_key(const void *a, const void *b) {
  return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* A schema's type in the compact notation: string, integer, {T} for an
 * array, {k: T, k2?: T} for an object with properties (two levels deep;
 * deeper: table), "a"|"b" for an enum, A|B for anyOf/oneOf. */
static void type_of(const cJSON *s, struct sbuf *b, int depth) {
  if (!cJSON_IsObject(s)) {
    sbuf_puts(b, "any");
    return;
  }
  const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
  if (cJSON_IsArray(en) && cJSON_GetArraySize(en) > 0 && cJSON_GetArraySize(en) <= 8) {
    int k = 0;
    for (const cJSON *v = en->child; v; v = v->next) {
      char *t = json_print(v, 0);
      sbuf_printf(b, "%s%s", k++ ? "|" : "", t);
      free(t);
    }
    return;
  }
  const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
  if (!any) any = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
  if (cJSON_IsArray(any) && any->child) {
    int k = 0;
    for (const cJSON *v = any->child; v; v = v->next) {
      if (k++) sbuf_puts(b, "|");
      type_of(v, b, depth + 1);
    }
    return;
  }
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "type");
  if (cJSON_IsArray(ty)) { /* ["string", "null"] */
    int k = 0;
    for (const cJSON *v = ty->child; v; v = v->next)
      if (cJSON_IsString(v)) sbuf_printf(b, "%s%s", k++ ? "|" : "", v->valuestring);
    if (!k) sbuf_puts(b, "any");
    return;
  }
  const char *tn = cJSON_GetStringValue(ty);
  const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
  if ((!tn || !strcmp(tn, "object")) && cJSON_IsObject(props)) {
    if (depth >= 2 || !props->child) {
      sbuf_puts(b, "table");
      return;
    }
    /* The required properties in their listed order, then the others by
     * name: a Lua table has no order, and the prompt's bytes must not
     * change from run to run (provider caches). */
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    int np = cJSON_GetArraySize(props), k = 0, nopt = 0;
    const cJSON **opt = xcalloc((size_t)np + 1, sizeof *opt);
    sbuf_puts(b, "{");
    for (const cJSON *r = cJSON_IsArray(req) ? req->child : NULL; r; r = r->next) {
      const cJSON *p = cJSON_IsString(r) ? cJSON_GetObjectItemCaseSensitive(props, r->valuestring)
                                         : NULL;
      if (!p) continue;
      sbuf_printf(b, "%s%s: ", k++ ? ", " : "", p->string);
      type_of(p, b, depth + 1);
    }
    for (const cJSON *p = props->child; p; p = p->next) {
      bool required = false;
      for (const cJSON *r = cJSON_IsArray(req) ? req->child : NULL; r; r = r->next)
        if (cJSON_IsString(r) && !strcmp(r->valuestring, p->string)) required = true;
      if (!required) opt[nopt++] = p;
    }
    qsort(opt, (size_t)nopt, sizeof *opt, by_key);
    for (int i = 0; i < nopt; i++) {
      sbuf_printf(b, "%s%s?: ", k++ ? ", " : "", opt[i]->string);
      type_of(opt[i], b, depth + 1);
    }
    free(opt);
    sbuf_puts(b, "}");
    return;
  }
  if (tn && !strcmp(tn, "array")) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    sbuf_puts(b, "{");
    type_of(items, b, depth + 1);
    sbuf_puts(b, "}");
    return;
  }
  sbuf_puts(b, tn ? (!strcmp(tn, "object") ? "table" : tn) : "any");
}

void codemode_api_line(const cJSON *def, const cJSON *returns, struct sbuf *out) {
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(def, "name"));
  const char *desc = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(def, "description"));
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(def, "parameters");
  sbuf_puts(out, name ? name : "?");
  const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
  if (cJSON_IsObject(props) && props->child) {
    type_of(params, out, 0);
  } else {
    sbuf_puts(out, "{}");
  }
  if (cJSON_IsObject(returns)) {
    sbuf_puts(out, " -> ");
    type_of(returns, out, 0);
  }
  if (desc && *desc) {
    /* the first line, cut on a character boundary */
    size_t n = strcspn(desc, "\n");
    if (n > 160) {
      n = 160;
      while (n > 0 && ((unsigned char)desc[n] & 0xC0) == 0x80) n--;
    }
    sbuf_puts(out, "  -- ");
    sbuf_append(out, desc, n);
    if (n < strlen(desc) && desc[n] != '\n') sbuf_puts(out, "...");
  }
}

cJSON *codemode_tool_def(void) {
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "name", CODEMODE_TOOL);
  cJSON_AddStringToObject(
      d, "description",
      "Run Lua 5.4 code that calls the tools listed in the system prompt with "
      "tools.call(name, args). Returns the code's return value as JSON, its print output and a "
      "summary of the calls it made.");
  cJSON *p = cJSON_AddObjectToObject(d, "parameters");
  cJSON_AddStringToObject(p, "type", "object");
  cJSON *req = cJSON_AddArrayToObject(p, "required");
  cJSON_AddItemToArray(req, cJSON_CreateString("code"));
  cJSON *props = cJSON_AddObjectToObject(p, "properties");
  cJSON *code = cJSON_AddObjectToObject(props, "code");
  cJSON_AddStringToObject(code, "type", "string");
  cJSON_AddStringToObject(code, "description", "Lua source; `return` the value you need");
  cJSON_AddFalseToObject(p, "additionalProperties");
  return d;
}

static const char RULES[] =
    "You are in code mode: your one tool is `lua`; pass it Lua 5.4 source as `code`. Each call "
    "runs in a fresh, empty sandbox: do many steps in one call, with loops and conditions.\n"
    "In the code, `tools.call(name, args)` returns a tool's result as a table or raises an error "
    "table {code=, message=} (pcall catches it); `tools.list()` lists the tools. The tools:\n";
static const char RULES_END[] =
    "Rules: `return` what you need; it comes back as JSON with the captured `print` output "
    "(bounded) and a summary of the calls. `json.encode`/`json.decode` are there; no other "
    "globals beyond the sandbox's (string, table, math, utf8, os.time/clock/date, pcall...): no "
    "io, require, files or network except through the tools. An error comes back with its line "
    "and, when a limit stopped the code, the limit's name: fix the code and call lua again.";

int codemode_setup(struct codemode *cm, const struct runtime *rt, cJSON **tools, bool delegate,
                   struct sbuf *system, struct err *e) {
  memset(cm, 0, sizeof *cm);
  int rc = codemode_config(rt ? rt->cfg : NULL, &cm->cfg, e);
  if (rc) return rc;
  int n = cJSON_GetArraySize(*tools);
  cm->names = xcalloc((size_t)n + 1, sizeof *cm->names);
  cm->delegate = delegate;
  cm->readonly = !delegate;
  if (system->len) sbuf_puts(system, "\n\n");
  sbuf_puts(system, RULES);
  int k = 0;
  for (const cJSON *d = (*tools)->child; d; d = d->next) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "name"));
    if (!name) continue;
    /* skills.find/load are not a chunk's: the scope is fixed here, so a
     * load could never add a tool, and their answers would tell a chunk
     * which skills exist outside it (call.h, chunk_scope) */
    if (!strcmp(name, SKILLS_FIND) || !strcmp(name, SKILLS_LOAD)) continue;
    cm->names[k++] = xstrdup(name);
    const struct tool *t = rt && rt->tools ? toolreg_find(rt->tools, name) : NULL;
    if (!t || t->impact != IMPACT_READ) cm->readonly = false;
    codemode_api_line(d, t ? t->returns : NULL, system);
    sbuf_puts(system, "\n");
  }
  if (!k) sbuf_puts(system, "(none)\n");
  if (delegate)
    sbuf_puts(system,
              "delegate(prompt, opts) -> string  -- ask a nested model run (opts.tools limits "
              "its tools to these, opts.schema asks for JSON)\n");
  sbuf_puts(system, RULES_END);
  cJSON_Delete(*tools);
  *tools = cJSON_CreateArray();
  cJSON_AddItemToArray(*tools, codemode_tool_def());
  return 0;
}

void codemode_free(struct codemode *cm) {
  if (!cm || !cm->names) return;
  for (char **p = cm->names; *p; p++) free(*p);
  free(cm->names);
  cm->names = NULL;
}

/* ------------------------------------------------------------------ */
/* Running a chunk                                                     */

#define MAX_SUMMARY 12 /* distinct (tool, outcome) pairs named in the summary */

struct outcome {
  char name[72];
  char code[32]; /* "ok" or the error code */
  long count;
};

/* One chunk's run: what its calls add up to. */
struct chunk_run {
  struct budget *budget;
  const char *call_id;
  struct sbuf print;
  size_t print_max; /* code_mode.print_bytes */
  bool print_cut;
  struct outcome out[MAX_SUMMARY];
  size_t nout;
  long calls, others; /* others: calls past MAX_SUMMARY distinct outcomes */
};

/* print() and log.* of the chunk: kept for the model, secrets scrubbed
 * (the sandbox bounds the total, framing included, and marks the cut).
 * Past print_bytes (a redaction that grew the text) nothing more is kept
 * but one marker. */
static void capture(void *ud, const char *stream, const char *text, size_t len) {
  struct chunk_run *cr = ud;
  if (cr->print_cut) return;
  if (cr->print.len >= cr->print_max) {
    sbuf_puts(&cr->print, "[print output cut at code_mode.print_bytes]\n");
    cr->print_cut = true;
    return;
  }
  char *clean = secrets_registered() ? secrets_redact(text, len, &len) : NULL;
  if (strcmp(stream, "print")) sbuf_printf(&cr->print, "[%s] ", stream);
  sbuf_append(&cr->print, clean ? clean : text, len);
  sbuf_puts(&cr->print, "\n");
  free(clean);
}

static void tally(struct chunk_run *cr, const char *name, const char *code) {
  cr->calls++;
  struct sbuf shown = {0};
  util_escape_text(&shown, name, strlen(name), 64);
  const char *nm = shown.s ? shown.s : "";
  for (size_t i = 0; i < cr->nout; i++)
    if (!strcmp(cr->out[i].name, nm) && !strcmp(cr->out[i].code, code)) {
      cr->out[i].count++;
      sbuf_free(&shown);
      return;
    }
  if (cr->nout < MAX_SUMMARY) {
    struct outcome *o = &cr->out[cr->nout++];
    snprintf(o->name, sizeof o->name, "%s", nm);
    snprintf(o->code, sizeof o->code, "%s", code);
    o->count = 1;
  } else {
    cr->others++;
  }
  sbuf_free(&shown);
}

/* chunk_scope.call: one tools.call of the chunk. The run's tool-call
 * budget pays for it, then it goes through tool_call like any call. */
static int chunk_call(void *ud, struct call_ctx *ctx, const char *name, const cJSON *args,
                      cJSON **result, struct err *e) {
  struct chunk_run *cr = ud;
  double t0 = util_monotonic();
  int rc = cr->budget ? budget_check_tool_call(cr->budget, e) : 0;
  cJSON *ran = NULL; /* the arguments a hook or the approver rewrote */
  if (!rc) {
    if (cr->budget) budget_charge(cr->budget, 0, 0, 1, 0);
    rc = tool_call_ran(ctx, name, args, result, &ran, e);
  }
  tally(cr, name, rc ? (e->code[0] ? e->code : "error") : "ok");
  if (ctx->events) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "id", cr->call_id);
    cJSON_AddNumberToObject(d, "n", (double)cr->calls);
    struct sbuf shown = {0};
    util_escape_text(&shown, name, strlen(name), 200);
    cJSON_AddStringToObject(d, "name", shown.s ? shown.s : "");
    sbuf_free(&shown);
    /* the arguments that ran; the chunk's own beside them when rewritten */
    cJSON *a = ran ? cJSON_Duplicate(ran, 1) : args ? cJSON_Duplicate(args, 1) : cJSON_CreateObject();
    secrets_redact_json(a);
    cJSON_AddItemToObject(d, "args", a);
    if (ran) {
      cJSON *asked = args ? cJSON_Duplicate(args, 1) : cJSON_CreateObject();
      secrets_redact_json(asked);
      cJSON_AddItemToObject(d, "asked_args", asked);
      cJSON_AddTrueToObject(d, "rewritten");
    }
    cJSON_AddBoolToObject(d, "ok", rc == 0);
    if (rc) {
      cJSON_AddStringToObject(d, "code", e->code);
      cJSON_AddStringToObject(d, "content", e->msg);
    } else {
      char *s = *result ? json_print(*result, JSON_CANONICAL) : xstrdup("null");
      struct sbuf cut = {0};
      util_escape_text(&cut, s, strlen(s), 400);
      cJSON_AddStringToObject(d, "content", cut.s ? cut.s : "");
      sbuf_free(&cut);
      free(s);
    }
    cJSON_AddNumberToObject(d, "ms", (double)(long)((util_monotonic() - t0) * 1e6) / 1000);
    events_emit(ctx->events, ctx->run_id, "lua_call", d);
    cJSON_Delete(d);
  }
  cJSON_Delete(ran);
  return rc;
}

/* "10 calls: calc.add ok x9, calc.add denied" */
static char *summary(const struct chunk_run *cr) {
  struct sbuf b = {0};
  if (!cr->calls) return xstrdup("no tool calls");
  sbuf_printf(&b, "%ld call%s: ", cr->calls, cr->calls == 1 ? "" : "s");
  for (size_t i = 0; i < cr->nout; i++) {
    sbuf_printf(&b, "%s%s %s", i ? ", " : "", cr->out[i].name, cr->out[i].code);
    if (cr->out[i].count > 1) sbuf_printf(&b, " x%ld", cr->out[i].count);
  }
  if (cr->others) sbuf_printf(&b, ", %ld more", cr->others);
  return sbuf_take(&b);
}

int codemode_error_line(const char *msg) {
  for (const char *p = msg; p && (p = strstr(p, "code:")); p += 5) {
    if (p != msg && p[-1] != ' ' && p[-1] != '\t' && p[-1] != '\n') continue;
    char *end;
    long line = strtol(p + 5, &end, 10);
    if (end > p + 5 && *end == ':' && line > 0 && line < 1000000) return (int)line;
  }
  return 0;
}

/* The config key behind a limit's error code, for the model's message. */
static const char *limit_of(const char *code, const struct codemode_cfg *c, unsigned share,
                            char *buf, size_t n) {
  if (!strcmp(code, "limit_instructions"))
    snprintf(buf, n, "code_mode.instructions (%llu per lua call)",
             (unsigned long long)c->instructions);
  else if (!strcmp(code, "limit_memory") && share > 1)
    snprintf(buf, n,
             "code_mode.memory_mb (%.3g MiB per lua call, split among the %u lua calls that ran "
             "in parallel: make fewer at once)",
             (double)c->memory_bytes / 1048576.0, share);
  else if (!strcmp(code, "limit_memory"))
    snprintf(buf, n, "code_mode.memory_mb (%.3g MiB per lua call)",
             (double)c->memory_bytes / 1048576.0);
  else if (!strcmp(code, "limit_deadline"))
    snprintf(buf, n, "code_mode.deadline_s (%gs per lua call, never past the run's deadline)",
             c->deadline_s);
  else if (!strcmp(code, "limit_depth"))
    snprintf(buf, n, "limits.max_depth (Lua call depth)");
  else if (!strcmp(code, "limit_tool_calls"))
    snprintf(buf, n, "limits.tool_calls (tool calls from Lua per run)");
  else if (!strcmp(code, "budget_exceeded"))
    snprintf(buf, n, "the run's budget (react.max_tool_calls, react.deadline_s)");
  else
    return NULL;
  return buf;
}

static void fail_args(struct codemode_result *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void fail_args(struct codemode_result *out, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  struct sbuf b = {0};
  sbuf_printf(&b, "error (invalid_args): lua: %s", msg);
  out->content = sbuf_take(&b);
  out->is_error = true;
  snprintf(out->code, sizeof out->code, "invalid_args");
}

/* The one argument the lua tool takes, checked with messages that say
 * what to send instead. Returns the code, or NULL after fail_args. */
static const char *check_args(const struct codemode *cm, const cJSON *args, size_t *len,
                              struct codemode_result *out) {
  const cJSON *code = NULL;
  for (const cJSON *it = args ? args->child : NULL; it; it = it->next) {
    if (!strcmp(it->string, "code")) {
      code = it;
      continue;
    }
    struct sbuf k = {0};
    util_escape_text(&k, it->string, strlen(it->string), 60);
    fail_args(out, "unknown argument \"%s\": lua takes one argument, \"code\" (a string of Lua)",
              k.s ? k.s : "");
    sbuf_free(&k);
    return NULL;
  }
  if (!code) {
    fail_args(out, "the arguments need \"code\", a string of Lua source, e.g. "
                   "{\"code\": \"return 1 + 1\"}");
    return NULL;
  }
  if (!cJSON_IsString(code)) {
    const char *ty = cJSON_IsNumber(code)   ? "a number"
                     : cJSON_IsBool(code)   ? "a boolean"
                     : cJSON_IsNull(code)   ? "null"
                     : cJSON_IsArray(code)  ? "an array"
                     : cJSON_IsObject(code) ? "an object"
                                            : "not a string";
    fail_args(out, "\"code\" must be a string of Lua source, not %s", ty);
    return NULL;
  }
  *len = strlen(code->valuestring);
  if (*len > cm->cfg.max_code_bytes) {
    fail_args(out, "the code is %zu bytes; at most %zu (code_mode.max_code_bytes): split the work "
                   "into smaller calls",
              *len, cm->cfg.max_code_bytes);
    return NULL;
  }
  if (strspn(code->valuestring, " \t\r\n") == *len) {
    fail_args(out, "\"code\" is empty: send Lua source that returns what you need");
    return NULL;
  }
  return code->valuestring;
}

void codemode_exec(const struct codemode *cm, struct call_ctx *mctx, struct budget *b,
                   const char *call_id, const cJSON *args, struct codemode_result *out) {
  memset(out, 0, sizeof *out);
  size_t len = 0;
  const char *code = check_args(cm, args, &len, out);
  if (!code) return;
  if (mctx->events) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "id", call_id);
    cJSON_AddStringToObject(d, "code", code);
    secrets_redact_json(d);
    events_emit(mctx->events, mctx->run_id, "lua_code", d);
    cJSON_Delete(d);
  }
  struct chunk_run cr = {.budget = b, .call_id = call_id, .print_max = cm->cfg.print_bytes};
  struct chunk_scope scope = {.tools = (const char *const *)cm->names,
                              .delegate = cm->delegate,
                              .call = chunk_call,
                              .ud = &cr};
  /* The chunk's context: the model's (caller, run state, events, stop
   * flag, budget), with the chunk's own limits and scope. Its deadline is
   * the earlier of its own and the run's; nested calls inherit it. */
  struct call_ctx c = *mctx;
  c.chunk = &scope;
  c.limits.instructions = cm->cfg.instructions;
  c.limits.memory_bytes = cm->cfg.memory_bytes;
  c.limits.output_bytes = cm->cfg.print_bytes;
  c.limits.deadline_s = cm->cfg.deadline_s;
  double dl = util_monotonic() + cm->cfg.deadline_s;
  if (c.limits.deadline_at <= 0 || dl < c.limits.deadline_at) c.limits.deadline_at = dl;
  struct sandbox *sb = NULL;
  cJSON *ret = NULL;
  struct err e = {0};
  int rc = runtime_sandbox(mctx->rt, &c, &sb, &e);
  if (!rc) {
    sandbox_set_output(sb, &(struct sb_output){.write = capture, .ud = &cr});
    rc = sandbox_run_string(sb, code, len, "code", &ret, &e);
    /* the caller's sandbox (a script that delegated) pays for the chunk */
    if (mctx->sb) sandbox_spend(mctx->sb, sandbox_instructions_used(sb));
  }
  sandbox_free(sb);

  /* ok, the error if any, then the calls summary: a long value or print
   * output cut at max_tool_result_chars never hides which calls were
   * denied */
  cJSON *o = cJSON_CreateObject();
  cJSON_AddBoolToObject(o, "ok", rc == 0);
  if (rc) {
    char lim[200];
    const char *ecode = e.code[0] ? e.code : "error";
    cJSON_AddStringToObject(o, "error", e.msg);
    cJSON_AddStringToObject(o, "code", ecode);
    int line = codemode_error_line(e.msg);
    if (line) cJSON_AddNumberToObject(o, "line", line);
    const char *l = limit_of(ecode, &cm->cfg, mctx->share, lim, sizeof lim);
    if (l) cJSON_AddStringToObject(o, "limit", l);
    out->is_error = true;
    snprintf(out->code, sizeof out->code, "%s", ecode);
  }
  char *sum = summary(&cr);
  cJSON_AddStringToObject(o, "calls", sum);
  free(sum);
  if (!rc) {
    /* keys sorted: a Lua table has no order, and the same value must be
     * the same bytes (loop detection, provider caches) */
    char *canon = ret ? json_print(ret, JSON_CANONICAL) : NULL;
    cJSON *v = canon ? json_parse_str(canon, 0, NULL) : NULL;
    free(canon);
    cJSON_AddItemToObject(o, "value", v ? v : cJSON_CreateNull());
  }
  cJSON_Delete(ret);
  cJSON_AddStringToObject(o, "print", cr.print.s ? cr.print.s : "");
  secrets_redact_json(o);
  out->content = json_print(o, 0);
  out->inner_calls = cr.calls;
  cJSON_Delete(o);
  sbuf_free(&cr.print);
}
