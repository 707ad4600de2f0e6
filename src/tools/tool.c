/* tool.c - the tool registry and the duplicate-key check of arguments. */
#include "tool.h"

#include <ctype.h>
#include <math.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "json.h"
#include "schema.h"
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

/* ----------------------------------------------------------- wire names */

void tool_wire_name(const char *full, char out[65]) {
  /* written straight into out: only the first 64 bytes can be kept, and
   * a longer name keeps 55 of them and a hash; n counts them all */
  size_t n = 0;
  for (const char *s = full; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (isalnum(ch) || ch == '_' || ch == '-') {
      if (n < 64) out[n] = (char)ch;
      n++;
    } else if (ch == '.') {
      if (n < 64) out[n] = '_';
      if (n + 1 < 64) out[n + 1] = '_';
      n += 2;
    } else {
      if (n < 64) out[n] = '_';
      n++;
    }
  }
  if (!n) {
    memcpy(out, "tool", 5);
    return;
  }
  if (n > 64) {
    /* keep it apart from its neighbours: cut and add a hash of the full
     * name (FNV-1a); a collision left is caught by toolreg_add */
    uint32_t h = 2166136261u;
    for (const char *s = full; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    snprintf(out + 55, 10, "_%08x", h);
    return;
  }
  out[n] = 0;
}

/* ------------------------------------------------------------- registry */

/* Tools kept in name order: add inserts at its place (binary search), so
 * lookups never write and parallel tool threads can share the registry. */
struct tool_registry {
  struct tool **v;
  struct tool **w; /* the same tools in wire-name order */
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
  cJSON_Delete(t->returns);
  free(t);
}

void toolreg_free(struct tool_registry *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n; i++) tool_free(r->v[i]);
  free(r->v);
  free(r->w);
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

/* The index of wire in r->w, or where it would go. */
static size_t wire_bound(const struct tool_registry *r, const char *wire, int *found) {
  size_t lo = 0, hi = r->n;
  *found = 0;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(wire, r->w[mid]->wire);
    if (!c) {
      *found = 1;
      return mid;
    }
    if (c < 0) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

const struct tool *toolreg_find_wire(const struct tool_registry *r, const char *wire) {
  if (!r || !wire) return NULL;
  int found;
  size_t i = wire_bound(r, wire, &found);
  return found ? r->w[i] : NULL;
}

size_t toolreg_count(const struct tool_registry *r) { return r ? r->n : 0; }

const struct tool *toolreg_at(const struct tool_registry *r, size_t i) {
  return r && i < r->n ? r->v[i] : NULL;
}

static int add(struct tool_registry *r, const char *name, const char *description, cJSON *params,
               enum impact impact, bool open_world, tool_handler handler, void *ud,
               void (*ud_free)(void *), const char *source, const char *skill,
               const struct schema_opts *opts, struct err *e) {
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
  /* Two tools the model cannot tell apart would let the first one answer
   * for the second (a server's tool standing in for a local one): refuse
   * the newcomer, naming both. */
  char wire[65];
  tool_wire_name(name, wire);
  size_t wat = wire_bound(r, wire, &found);
  if (found) {
    const struct tool *o = r->w[wat];
    rc = err_set(e, ERR_INVALID, "wire_name_collision",
                 "tool '%s' (%s) is refused: its wire name '%s' is already that of tool '%s' "
                 "(%s); rename one of them",
                 name, source ? source : "host", wire, o->name, o->source);
    goto fail;
  }
  if (!params) params = cJSON_Parse("{\"type\":\"object\"}");
  struct schema *compiled = NULL;
  if (schema_compile(params, opts, name, &compiled, e)) {
    rc = ERR_INVALID;
    goto fail;
  }
  struct tool *t = xcalloc(1, sizeof *t);
  t->name = xstrdup(name);
  memcpy(t->wire, wire, sizeof wire);
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
    r->w = xrealloc(r->w, r->cap * sizeof *r->w);
  }
  memmove(r->v + at + 1, r->v + at, (r->n - at) * sizeof *r->v);
  r->v[at] = t;
  memmove(r->w + wat + 1, r->w + wat, (r->n - wat) * sizeof *r->w);
  r->w[wat] = t;
  r->n++;
  return 0;
fail:
  cJSON_Delete(params);
  if (ud_free) ud_free(ud);
  return rc;
}

int toolreg_add_parsed(struct tool_registry *r, const char *name, const char *description,
                       cJSON *params, enum impact impact, bool open_world, tool_handler handler,
                       void *ud, void (*ud_free)(void *), const char *source, const char *skill,
                       struct err *e) {
  return add(r, name, description, params, impact, open_world, handler, ud, ud_free, source, skill,
             NULL, e);
}

int toolreg_add_external(struct tool_registry *r, const char *name, const char *description,
                         cJSON *params, enum impact impact, bool open_world, tool_handler handler,
                         void *ud, void (*ud_free)(void *), const char *source, struct err *e) {
  struct schema_opts o = {.flags = SCHEMA_LENIENT};
  return add(r, name, description, params, impact, open_world, handler, ud, ud_free, source, NULL,
             &o, e);
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

void toolreg_set_returns(struct tool_registry *r, const char *name, cJSON *returns) {
  int found = 0;
  size_t at = r && name ? lower_bound(r, name, &found) : 0;
  if (!r || !name || !found) {
    cJSON_Delete(returns);
    return;
  }
  cJSON_Delete(r->v[at]->returns);
  r->v[at]->returns = returns;
}

void toolreg_set_lent(struct tool_registry *r, const char *name, tool_handler_lent lent) {
  int found = 0;
  size_t at = r && name ? lower_bound(r, name, &found) : 0;
  if (found) r->v[at]->lent = lent;
}

/* ------------------------------------------------------ argument check */

#define MAX_ARGS_DEPTH 200

/* The one argument object of a call must mean one thing to every stage:
 * an object with a key twice would be read as its first value by one stage
 * (schema, rules, the handler walk cJSON in order) and as its last by
 * another (a hook's Lua table). Parsers refuse duplicates and the Lua bridge
 * cannot make them; this walk is the pipeline's own check, so no caller can
 * hand one in. Returns 0, or fills path (e.g. "args.a.b") and returns -1. */
static int cmp_key(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A key that object v holds twice, or NULL. Small objects (the usual tool
 * arguments) compare pairwise; bigger ones sort, so a model sending 100,000
 * keys costs n log n, not n^2. */
static const char *first_duplicate(const cJSON *v) {
  size_t n = 0;
  for (const cJSON *a = v->child; a; a = a->next) n++;
  if (n <= 16) {
    for (const cJSON *a = v->child; a; a = a->next)
      for (const cJSON *b = v->child; b != a; b = b->next)
        if (!strcmp(a->string ? a->string : "", b->string ? b->string : "")) return a->string;
    return NULL;
  }
  const char **keys = xmalloc(n * sizeof *keys);
  size_t i = 0;
  for (const cJSON *a = v->child; a; a = a->next) keys[i++] = a->string ? a->string : "";
  qsort(keys, n, sizeof *keys, cmp_key);
  const char *dup = NULL;
  for (i = 1; i < n && !dup; i++)
    if (!strcmp(keys[i - 1], keys[i])) dup = keys[i];
  free(keys);
  return dup;
}

/* Walks v; with path NULL only answers whether anything is wrong (the
 * walk of every call), with a path fills it in (the walk again, once
 * something was found: the message). Both walks take the same steps. */
static int args_unique(const cJSON *v, int depth, struct sbuf *path) {
  if (depth > MAX_ARGS_DEPTH) {
    if (path) sbuf_puts(path, ": nested too deeply");
    return -1;
  }
  int ty = v ? v->type & 0xFF : 0; /* cJSON_IsObject, cJSON_IsArray inline (every call) */
  if (ty == cJSON_Object) {
    const char *dup = first_duplicate(v);
    if (dup) {
      if (path) {
        sbuf_puts(path, ": duplicate key \"");
        util_escape_text(path, dup, strlen(dup), 100);
        sbuf_puts(path, "\"");
      }
      return -1;
    }
    for (const cJSON *a = v->child; a; a = a->next) {
      if (!path) {
        /* a member with nothing inside (a scalar, {} or []) holds no key
         * twice: only the depth could be wrong there */
        if ((a->child || depth + 1 > MAX_ARGS_DEPTH) && args_unique(a, depth + 1, NULL)) return -1;
        continue;
      }
      size_t keep = path->len;
      sbuf_puts(path, ".");
      util_escape_text(path, a->string ? a->string : "", a->string ? strlen(a->string) : 0, 100);
      if (args_unique(a, depth + 1, path)) return -1;
      path->len = keep;
      path->s[keep] = 0;
    }
  } else if (ty == cJSON_Array) {
    int i = 0;
    for (const cJSON *a = v->child; a; a = a->next, i++) {
      if (!path) {
        if (args_unique(a, depth + 1, NULL)) return -1;
        continue;
      }
      size_t keep = path->len;
      sbuf_printf(path, "[%d]", i);
      if (args_unique(a, depth + 1, path)) return -1;
      path->len = keep;
      path->s[keep] = 0;
    }
  }
  return 0;
}

int tool_args_check(const cJSON *args, const char *what, struct err *e) {
  if (!args_unique(args, 0, NULL)) return 0;
  struct sbuf path = {0};
  sbuf_puts(&path, what ? what : "args");
  int rc = args_unique(args, 0, &path) ? err_set(e, ERR_INVALID, "invalid_args", "%s", path.s) : 0;
  sbuf_free(&path);
  return rc;
}
