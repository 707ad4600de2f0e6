/* tool.c - the tool registry, canonical JSON, and tool_call(). */
#include "tool.h"

#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"
#include "schema.h"
#include "secrets.h"
#include "security.h"
#include "util.h"

static const char *const impact_names[] = {"read", "low", "medium", "high", "critical"};

const char *impact_name(enum impact i) {
  return (unsigned)i <= IMPACT_CRITICAL ? impact_names[i] : "?";
}

int impact_parse(const char *s, enum impact *out) {
  for (int i = 0; s && i <= IMPACT_CRITICAL; i++)
    if (!strcmp(s, impact_names[i])) {
      *out = (enum impact)i;
      return 0;
    }
  return ERR_INVALID;
}

/* ------------------------------------------------------------- registry */

/* Tools kept in name order: add inserts at its place (binary search), so
 * lookups never write and parallel tool threads can share the registry. */
struct tool_registry {
  struct tool **v;
  size_t n, cap;
};

struct tool_registry *toolreg_new(void) { return xcalloc(1, sizeof(struct tool_registry)); }

static void tool_free(struct tool *t) {
  if (!t) return;
  if (t->ud_free) t->ud_free(t->ud);
  free(t->name);
  free(t->description);
  schema_free(t->schema);
  cJSON_Delete(t->params);
  free(t->source);
  free(t->skill);
  free(t);
}

void toolreg_free(struct tool_registry *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n; i++) tool_free(r->v[i]);
  free(r->v);
  free(r);
}

/* The index of name, or where it would go; *found says which. */
static size_t lower_bound(const struct tool_registry *r, const char *name, int *found) {
  size_t lo = 0, hi = r->n;
  *found = 0;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(name, r->v[mid]->name);
    if (!c) {
      *found = 1;
      return mid;
    }
    if (c < 0) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

const struct tool *toolreg_find(const struct tool_registry *r, const char *name) {
  if (!r || !name) return NULL;
  int found;
  size_t i = lower_bound(r, name, &found);
  return found ? r->v[i] : NULL;
}

size_t toolreg_count(const struct tool_registry *r) { return r ? r->n : 0; }

const struct tool *toolreg_at(const struct tool_registry *r, size_t i) {
  return r && i < r->n ? r->v[i] : NULL;
}

int toolreg_add_parsed(struct tool_registry *r, const char *name, const char *description,
                       cJSON *params, enum impact impact, bool open_world, tool_handler handler,
                       void *ud, void (*ud_free)(void *), const char *source, const char *skill,
                       struct err *e) {
  int rc = 0;
  if (!name || !*name || !handler) {
    rc = err_set(e, ERR_INVALID, "invalid_tool", "tool needs a name and a handler");
    goto fail;
  }
  int found;
  size_t at = lower_bound(r, name, &found);
  if (found) {
    rc = err_set(e, ERR_INVALID, "duplicate_tool", "tool '%s' is already defined", name);
    goto fail;
  }
  if (!params) params = cJSON_Parse("{\"type\":\"object\"}");
  struct schema *compiled = NULL;
  if (schema_compile(params, NULL, name, &compiled, e)) {
    rc = ERR_INVALID;
    goto fail;
  }
  struct tool *t = xcalloc(1, sizeof *t);
  t->name = xstrdup(name);
  t->description = xstrdup(description ? description : "");
  t->params = params;
  t->schema = compiled;
  t->impact = impact;
  t->open_world = open_world;
  t->handler = handler;
  t->ud = ud;
  t->ud_free = ud_free;
  t->source = xstrdup(source ? source : "host");
  t->skill = skill ? xstrdup(skill) : NULL;
  if (r->n == r->cap) {
    r->cap = r->cap ? r->cap * 2 : 32;
    r->v = xrealloc(r->v, r->cap * sizeof *r->v);
  }
  memmove(r->v + at + 1, r->v + at, (r->n - at) * sizeof *r->v);
  r->v[at] = t;
  r->n++;
  return 0;
fail:
  cJSON_Delete(params);
  if (ud_free) ud_free(ud);
  return rc;
}

int toolreg_add(struct tool_registry *r, const char *name, const char *description,
                const char *params_json, enum impact impact, bool open_world, tool_handler handler,
                void *ud, void (*ud_free)(void *), const char *source, const char *skill,
                struct err *e) {
  cJSON *params = NULL;
  if (params_json && !(params = cJSON_Parse(params_json))) {
    if (ud_free) ud_free(ud);
    return err_set(e, ERR_INVALID, "invalid_schema", "tool '%s': parameter schema is not valid JSON",
                   name ? name : "?");
  }
  return toolreg_add_parsed(r, name, description, params, impact, open_world, handler, ud, ud_free,
                            source, skill, e);
}

/* ------------------------------------------------------- canonical JSON */

static void canon_string(struct sbuf *b, const char *s) {
  sbuf_puts(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
      case '"': sbuf_puts(b, "\\\""); break;
      case '\\': sbuf_puts(b, "\\\\"); break;
      case '\n': sbuf_puts(b, "\\n"); break;
      case '\r': sbuf_puts(b, "\\r"); break;
      case '\t': sbuf_puts(b, "\\t"); break;
      case '\b': sbuf_puts(b, "\\b"); break;
      case '\f': sbuf_puts(b, "\\f"); break;
      default:
        if (*p < 0x20) sbuf_printf(b, "\\u%04x", *p);
        else sbuf_append(b, (const char *)p, 1);
    }
  }
  sbuf_puts(b, "\"");
}

static int cmp_item(const void *a, const void *b) {
  return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

static void canon(struct sbuf *b, const cJSON *v) {
  if (!v || cJSON_IsNull(v)) sbuf_puts(b, "null");
  else if (cJSON_IsTrue(v)) sbuf_puts(b, "true");
  else if (cJSON_IsFalse(v)) sbuf_puts(b, "false");
  else if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    if (d == floor(d) && fabs(d) < 9007199254740992.0) {
      /* Integers are the common case: format without printf. */
      char tmp[24], *p = tmp + sizeof tmp;
      long long x = (long long)d;
      unsigned long long u = x < 0 ? (unsigned long long)(-x) : (unsigned long long)x;
      do *--p = (char)('0' + u % 10); while (u /= 10);
      if (x < 0) *--p = '-';
      sbuf_append(b, p, (size_t)(tmp + sizeof tmp - p));
    } else {
      sbuf_printf(b, "%.17g", d);
    }
  } else if (cJSON_IsString(v)) canon_string(b, v->valuestring);
  else if (cJSON_IsArray(v)) {
    sbuf_puts(b, "[");
    for (const cJSON *c = v->child; c; c = c->next) {
      canon(b, c);
      if (c->next) sbuf_puts(b, ",");
    }
    sbuf_puts(b, "]");
  } else if (cJSON_IsObject(v)) {
    int n = cJSON_GetArraySize(v), i = 0;
    cJSON **items = xmalloc(sizeof(cJSON *) * (size_t)(n ? n : 1));
    for (cJSON *c = v->child; c; c = c->next) items[i++] = c;
    qsort(items, (size_t)n, sizeof *items, cmp_item);
    sbuf_puts(b, "{");
    for (i = 0; i < n; i++) {
      canon_string(b, items[i]->string);
      sbuf_puts(b, ":");
      canon(b, items[i]);
      if (i + 1 < n) sbuf_puts(b, ",");
    }
    sbuf_puts(b, "}");
    free(items);
  } else sbuf_puts(b, "null");
}

char *json_canonical(const cJSON *v) {
  struct sbuf b = {0};
  canon(&b, v);
  return sbuf_take(&b);
}

void json_hash_hex(const cJSON *v, char out[65]) {
  char *s = json_canonical(v);
  unsigned char h[32];
  crypto_generichash(h, sizeof h, (const unsigned char *)s, strlen(s), NULL, 0);
  free(s);
  util_hex(h, sizeof h, out);
}

/* ------------------------------------------------------------ tool_call */

#define MAX_TOOL_DEPTH 16

int tool_call(struct call_ctx *ctx, const char *name, const cJSON *args, cJSON **result,
              struct err *e) {
  *result = NULL;
  int rc;
  cJSON *empty = NULL;
  if (!name) return err_set(e, ERR_INVALID, "invalid_args", "tool name missing");
  const struct tool *t = toolreg_find(ctx->rt->tools, name);
  if (!t) {
    rc = err_set(e, ERR_NOTFOUND, "unknown_tool", "unknown tool '%s'", name);
    goto out;
  }
  if (ctx->stop && *ctx->stop) {
    rc = err_set(e, ERR_STOPPED, "stopped", "%s: the run was stopped", name);
    goto out;
  }
  if (ctx->depth >= MAX_TOOL_DEPTH) {
    rc = err_set(e, ERR_LIMIT, "limit_depth", "%s: tool calls nested deeper than %d", name, MAX_TOOL_DEPTH);
    goto out;
  }
  if (!args || cJSON_IsNull(args)) args = empty = cJSON_CreateObject();
  if ((rc = schema_run(t->schema, args, "args", e))) {
    err_prefix(e, "%s", name);
    goto out;
  }

  /* The security pipeline may rewrite the arguments (a hook, or the
   * operator modifying them on approval); what runs is what it returns. */
  struct sec_decision d;
  memset(&d, 0, sizeof d);
  cJSON *a = (cJSON *)args;
  int owned = 0;
  if ((rc = sec_before(ctx, t, &a, &owned, &d, e))) goto out;

  struct err herr;
  memset(&herr, 0, sizeof herr);
  rc = t->handler(ctx, t, a, result, &herr);
  if (rc && !herr.code[0]) snprintf(herr.code, sizeof herr.code, "tool_error");
  sec_after(ctx, t, a, &d, rc, result, rc ? &herr : NULL);
  if (owned) cJSON_Delete(a);
  if (rc) {
    cJSON_Delete(*result);
    *result = NULL;
    /* A handler's message may quote what it was given (a header, a
     * response): scrub secret values before it travels anywhere. */
    if (secrets_registered()) {
      char *clean = secrets_redact(herr.msg, strlen(herr.msg), NULL);
      snprintf(herr.msg, sizeof herr.msg, "%s", clean ? clean : "[redacted]");
      free(clean);
    }
    err_set(e, rc, herr.code, "%s", herr.msg);
    if (!strstr(herr.msg, name)) err_prefix(e, "%s", name);
  } else if (!*result) {
    *result = cJSON_CreateNull();
  }
out:
  cJSON_Delete(empty);
  if (rc && e) snprintf(e->subject, sizeof e->subject, "%s", name);
  return rc;
}
