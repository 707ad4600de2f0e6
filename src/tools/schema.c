/* schema.c - runs a compiled JSON Schema (schema_compile.c) against a value.
 *
 * eval() applies one schema node to one instance. Errors stop at the first
 * failing keyword and name the instance path ("args.items[2].id") and what
 * was expected. Annotations, needed only by unevaluatedProperties and
 * unevaluatedItems, are collected lazily: a node with an unevaluated*
 * keyword passes a bitmap (one bit per member or item of the instance)
 * down through the in-place applicators (allOf, anyOf, oneOf, if/then/
 * else, dependentSchemas, $ref, $dynamicRef), which mark what they
 * evaluated; failed branches' marks are dropped, as the specification
 * says. Without unevaluated* the bitmap pointer is NULL and nothing is
 * allocated: the common tool schema (type, required, properties,
 * additionalProperties, enum, bounds) validates without touching the heap.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema_impl.h"
#include "util.h"

#define MAX_EVAL_DEPTH 200
#define MAX_EVAL_STEPS 1000000 /* schema nodes applied in one run; a few ms of work */
#define STR_(x) #x
#define STR(x) STR_(x)

/* The path to the value being checked, as a chain of parent links, so the
 * text ("args.items[2].id") is only formatted when something fails. */
struct vpath {
  const struct vpath *up;
  const char *key; /* object member, or NULL for an array index */
  int index;
};

/* The dynamic scope: the schema resources entered, innermost first. */
struct dscope {
  const struct sres *res;
  const struct dscope *up;
};

/* Evaluated members/items of one instance. */
struct ann {
  unsigned char *bits;
  int n;
  unsigned char small[64];
};

/* Evaluation state shared by a whole schema_run. A run that goes too
 * deep or takes too many steps is aborted as a whole: inside anyOf or not
 * a mere "this branch failed" would turn an unfinished evaluation into an
 * answer (`not` would even accept the value). */
struct vctx {
  struct err *e; /* where failures go now (a scratch err inside probes) */
  int depth;
  long steps;
  struct err *abort; /* the run's own err, set once aborted */
  int aborted;
};

static void ann_init(struct ann *a, const cJSON *v) {
  int n = 0;
  for (const cJSON *x = v->child; x; x = x->next) n++;
  a->n = n;
  a->bits = n <= (int)sizeof a->small ? a->small : xcalloc((size_t)n, 1);
  memset(a->bits, 0, (size_t)n);
}

static void ann_done(struct ann *a) {
  if (a->bits != a->small) free(a->bits);
}

static void ann_merge(struct ann *into, const struct ann *from) {
  if (!into) return;
  for (int i = 0; i < into->n && i < from->n; i++) into->bits[i] |= from->bits[i];
}

static void ann_all(struct ann *a) {
  if (a) memset(a->bits, 1, (size_t)a->n);
}

static void path_format(const struct vpath *p, char *out, size_t n) {
  if (!p) {
    out[0] = 0;
    return;
  }
  path_format(p->up, out, n);
  size_t l = strlen(out);
  if (l >= n - 1) return;
  if (!p->up)
    snprintf(out + l, n - l, "%s", p->key ? p->key : "value");
  else if (p->key)
    snprintf(out + l, n - l, ".%s", p->key);
  else
    snprintf(out + l, n - l, "[%d]", p->index);
}

static int fail(struct vctx *c, const struct vpath *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct vctx *c, const struct vpath *path, const char *fmt, ...) {
  if (c->aborted || !c->e) return ERR_INVALID; /* keep the abort message; quiet probe */
  char msg[700], where[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  path_format(path, where, sizeof where);
  return err_set(c->e, ERR_INVALID, "invalid_args", "%s: %s", where, msg);
}

static const char *json_type(const cJSON *v) {
  if (cJSON_IsObject(v)) return "object";
  if (cJSON_IsArray(v)) return "array";
  if (cJSON_IsString(v)) return "string";
  if (cJSON_IsNumber(v)) return schema__num_is_integer(v) ? "integer" : "number";
  if (cJSON_IsBool(v)) return "boolean";
  return "null";
}

static unsigned type_bit(const cJSON *v) {
  if (cJSON_IsObject(v)) return ST_OBJECT;
  if (cJSON_IsArray(v)) return ST_ARRAY;
  if (cJSON_IsString(v)) return ST_STRING;
  if (cJSON_IsNumber(v)) return schema__num_is_integer(v) ? ST_INTEGER | ST_NUMBER : ST_NUMBER;
  if (cJSON_IsBool(v)) return ST_BOOL;
  return ST_NULL;
}

static int eval(struct vctx *c, const struct snode *n, const cJSON *v, const struct vpath *path,
                const struct dscope *scope, struct ann *a);

/* Evaluates n with errors going to a scratch err (for anyOf, oneOf, not,
 * if, contains), or nowhere when scratch is NULL (nothing is formatted):
 * returns 0 when v is valid. */
static int probe(struct vctx *c, const struct snode *n, const cJSON *v, const struct vpath *path,
                 const struct dscope *scope, struct ann *a, struct err *scratch) {
  struct err *saved = c->e;
  c->e = scratch;
  int rc = eval(c, n, v, path, scope, a);
  c->e = saved;
  return rc;
}

/* Ends the whole run with a message in the run's own err. */
static int abort_run(struct vctx *c, const struct vpath *path, const char *why) {
  if (!c->aborted) {
    struct err *saved = c->e;
    c->e = c->abort;
    fail(c, path, "%s", why);
    c->e = saved;
    c->aborted = 1;
  }
  return ERR_INVALID;
}

/* Code points in a host string (C0 80, the host's U+0000, is one). */
static size_t utf8_len(const char *s) {
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if ((*p & 0xC0) != 0x80) n++;
  return n;
}

static const struct snode *prop_find(const struct snode *n, const char *name) {
  int lo = 0, hi = n->nprops;
  while (lo < hi) {
    int mid = (lo + hi) / 2, k = strcmp(name, n->props[mid].name);
    if (!k) return n->props[mid].s;
    if (k < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}

static int check_type(struct vctx *c, const struct snode *n, const cJSON *v,
                      const struct vpath *path) {
  if (type_bit(v) & n->types) return 0;
  if (!c->e) return ERR_INVALID;
  struct sbuf b = {0}; /* in the order the schema lists them */
  const cJSON *t = n->type_kw;
  for (const cJSON *x = cJSON_IsArray(t) ? t->child : t; x; x = cJSON_IsArray(t) ? x->next : NULL)
    sbuf_printf(&b, "%s%s", b.len ? " or " : "", x->valuestring);
  int rc = fail(c, path, "expected %s, got %s", b.s ? b.s : "?", json_type(v));
  sbuf_free(&b);
  return rc;
}

static int check_number(struct vctx *c, const struct snode *n, const cJSON *v,
                        const struct vpath *path) {
  char x[64], k[64];
#define BOUND(field, bad, op)                                \
  if (n->field && (bad)) {                                   \
    schema__num_text(n->field, k, sizeof k);                 \
    schema__num_text(v, x, sizeof x);                        \
    return fail(c, path, "must be " op " %s, got %s", k, x); \
  }
  BOUND(minimum, schema__num_cmp(v, n->minimum) < 0, ">=")
  BOUND(maximum, schema__num_cmp(v, n->maximum) > 0, "<=")
  BOUND(ex_min, schema__num_cmp(v, n->ex_min) <= 0, ">")
  BOUND(ex_max, schema__num_cmp(v, n->ex_max) >= 0, "<")
  BOUND(multiple_of, !schema__num_multiple(v, n->multiple_of), "a multiple of")
#undef BOUND
  return 0;
}

static int check_string(struct vctx *c, const struct snode *n, const cJSON *v,
                        const struct vpath *path) {
  if (n->min_len >= 0 || n->max_len >= 0) {
    size_t len = utf8_len(v->valuestring);
    if (n->min_len >= 0 && (long long)len < n->min_len)
      return fail(c, path, "must be at least %lld characters, got %zu", n->min_len, len);
    if (n->max_len >= 0 && (long long)len > n->max_len)
      return fail(c, path, "must be at most %lld characters, got %zu", n->max_len, len);
  }
  if (n->pattern) {
    int m = schema__regex_search(n->pattern, v->valuestring);
    if (m < 0)
      return fail(c, path, "is too long (%zu bytes) to match pattern \"%s\" within the budget",
                  strlen(v->valuestring), n->pattern->src);
    if (!m) return fail(c, path, "does not match pattern \"%s\"", n->pattern->src);
  }
  if (n->format && !schema__format_ok(n->format, v->valuestring))
    return fail(c, path, "is not a valid %s", schema__format_name(n->format));
  return 0;
}

/* A hash that equal values (schema__json_equal) share: numbers by their
 * double (exactly equal numbers round to the same double), objects
 * independent of key order. */
static uint64_t json_hash(const cJSON *v) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)(v->type & 0xFF);
  switch (v->type & 0xFF) {
    case cJSON_Number: {
      double d = v->valuedouble == 0 ? 0 : v->valuedouble; /* -0 == 0 */
      uint64_t bits;
      memcpy(&bits, &d, sizeof bits);
      return h ^ (bits * 0x9E3779B97F4A7C15ull);
    }
    case cJSON_String:
      for (const unsigned char *p = (const unsigned char *)v->valuestring; p && *p; p++)
        h = (h ^ *p) * 1099511628211ull;
      return h;
    case cJSON_Array:
      for (const cJSON *x = v->child; x; x = x->next) h = (h ^ json_hash(x)) * 1099511628211ull;
      return h;
    case cJSON_Object: {
      uint64_t sum = 0;
      for (const cJSON *x = v->child; x; x = x->next) {
        uint64_t k = 1469598103934665603ull;
        for (const unsigned char *p = (const unsigned char *)x->string; p && *p; p++)
          k = (k ^ *p) * 1099511628211ull;
        sum += (k * 31) ^ json_hash(x);
      }
      return h ^ sum;
    }
  }
  return h;
}

struct hitem {
  uint64_t h;
  int index;
  const cJSON *v;
};

static int hitem_cmp(const void *a, const void *b) {
  const struct hitem *x = a, *y = b;
  if (x->h != y->h) return x->h < y->h ? -1 : 1;
  return x->index - y->index;
}

/* Two equal items of v (the first pair by index for small arrays); large
 * arrays are sorted by hash so the check stays O(n log n). */
static int find_duplicate(const cJSON *v, int count, int *out_i, int *out_j) {
  if (count <= 32) {
    int i = 0;
    for (const cJSON *x = v->child; x; x = x->next, i++) {
      int j = i + 1;
      for (const cJSON *y = x->next; y; y = y->next, j++)
        if (schema__json_equal(x, y)) return *out_i = i, *out_j = j, 1;
    }
    return 0;
  }
  struct hitem *t = xmalloc((size_t)count * sizeof *t);
  int i = 0, found = 0;
  for (const cJSON *x = v->child; x; x = x->next, i++) t[i] = (struct hitem){json_hash(x), i, x};
  qsort(t, (size_t)count, sizeof *t, hitem_cmp);
  for (i = 0; i < count && !found; i++)
    for (int j = i + 1; j < count && t[j].h == t[i].h && !found; j++)
      if (schema__json_equal(t[i].v, t[j].v)) *out_i = t[i].index, *out_j = t[j].index, found = 1;
  free(t);
  return found;
}

static int check_array(struct vctx *c, const struct snode *n, const cJSON *v,
                       const struct vpath *path, const struct dscope *scope, struct ann *a) {
  int count = 0, rc;
  for (const cJSON *x = v->child; x; x = x->next) count++;
  if (n->min_items >= 0 && count < n->min_items)
    return fail(c, path, "must have at least %lld items, got %d", n->min_items, count);
  if (n->max_items >= 0 && count > n->max_items)
    return fail(c, path, "must have at most %lld items, got %d", n->max_items, count);
  if (n->unique) {
    int i = 0, j = 0;
    if (find_duplicate(v, count, &i, &j))
      return fail(c, path, "items [%d] and [%d] are equal, must be unique", i, j);
  }
  int i = 0;
  const cJSON *x = v->child;
  for (; x && i < n->nprefix; x = x->next, i++) {
    struct vpath sub = {path, NULL, i};
    if ((rc = eval(c, n->prefix[i], x, &sub, scope, NULL))) return rc;
    if (a) a->bits[i] = 1;
  }
  if (n->items) {
    for (; x; x = x->next, i++) {
      struct vpath sub = {path, NULL, i};
      if (n->items->boolean == 0) return fail(c, path, "unexpected item [%d]", i);
      if ((rc = eval(c, n->items, x, &sub, scope, NULL))) return rc;
      if (a) a->bits[i] = 1;
    }
  }
  if (n->contains) {
    int matched = 0;
    i = 0;
    for (x = v->child; x; x = x->next, i++) {
      struct vpath sub = {path, NULL, i};
      if (!probe(c, n->contains, x, &sub, scope, NULL, NULL)) {
        matched++;
        if (a) a->bits[i] = 1;
      }
    }
    long long min = n->min_contains >= 0 ? n->min_contains : 1;
    if (matched < min)
      return fail(c, path, "must contain at least %lld item(s) matching 'contains', got %d", min,
                  matched);
    if (n->max_contains >= 0 && matched > n->max_contains)
      return fail(c, path, "must contain at most %lld item(s) matching 'contains', got %d",
                  n->max_contains, matched);
  }
  return 0;
}

static int check_object(struct vctx *c, const struct snode *n, const cJSON *v,
                        const struct vpath *path, const struct dscope *scope, struct ann *a) {
  int rc;
  if (n->min_props >= 0 || n->max_props >= 0) {
    int count = 0;
    for (const cJSON *x = v->child; x; x = x->next) count++;
    if (n->min_props >= 0 && count < n->min_props)
      return fail(c, path, "must have at least %lld properties, got %d", n->min_props, count);
    if (n->max_props >= 0 && count > n->max_props)
      return fail(c, path, "must have at most %lld properties, got %d", n->max_props, count);
  }
  for (const cJSON *r = n->required ? n->required->child : NULL; r; r = r->next)
    if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring))
      return fail(c, path, "missing required field '%s'", r->valuestring);
  for (const cJSON *d = n->dep_required ? n->dep_required->child : NULL; d; d = d->next) {
    if (!cJSON_GetObjectItemCaseSensitive(v, d->string)) continue;
    for (const cJSON *r = cJSON_IsArray(d) ? d->child : NULL; r; r = r->next)
      if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring))
        return fail(c, path, "field '%s' requires field '%s'", d->string, r->valuestring);
  }
  int i = 0;
  for (const cJSON *x = v->child; x; x = x->next, i++) {
    const char *key = x->string ? x->string : "";
    struct vpath sub = {path, key, 0};
    int matched = 0;
    const struct snode *ps = n->nprops ? prop_find(n, key) : NULL;
    if (ps) {
      matched = 1;
      if ((rc = eval(c, ps, x, &sub, scope, NULL))) return rc;
    }
    for (int k = 0; k < n->npprops; k++) {
      int m = schema__regex_search(n->pprops[k].re, key);
      if (m < 0)
        return fail(c, path, "field name '%.40s...' is too long to match patternProperties \"%s\"",
                    key, n->pprops[k].re->src);
      if (!m) continue;
      matched = 1;
      if ((rc = eval(c, n->pprops[k].s, x, &sub, scope, NULL))) return rc;
    }
    if (!matched && n->addl) {
      if (n->addl->boolean == 0) return fail(c, path, "unexpected field '%s'", key);
      if ((rc = eval(c, n->addl, x, &sub, scope, NULL))) return rc;
      matched = 1;
    }
    if (matched && a) a->bits[i] = 1;
    if (n->pnames) {
      struct err scratch = {0};
      cJSON name = {0};
      name.type = cJSON_String;
      name.valuestring = (char *)key;
      struct vpath root = {NULL, "name", 0};
      if (probe(c, n->pnames, &name, &root, scope, NULL, c->e ? &scratch : NULL)) {
        const char *why = strchr(scratch.msg, ':');
        return fail(c, path, "invalid property name '%s'%s", key, why ? why : "");
      }
    }
  }
  for (int k = 0; k < n->ndep; k++) {
    if (!cJSON_GetObjectItemCaseSensitive(v, n->dep_schemas[k].name)) continue;
    if ((rc = eval(c, n->dep_schemas[k].s, v, path, scope, a))) return rc;
  }
  return 0;
}

/* anyOf / oneOf: how many branches pass; each passing branch's marks go
 * into a. With a NULL, anyOf stops at the first match. */
static int count_matches(struct vctx *c, struct snode *const *v, int nv, const cJSON *inst,
                         const struct vpath *path, const struct dscope *scope, struct ann *a,
                         int stop_at, struct err *first) {
  int count = 0;
  for (int i = 0; i < nv; i++) {
    struct ann t;
    if (a) ann_init(&t, inst);
    /* Only the first failure's message is shown; the rest stay unformatted. */
    struct err *msg = first && c->e && !first->msg[0] ? first : NULL;
    if (!probe(c, v[i], inst, path, scope, a ? &t : NULL, msg)) {
      count++;
      if (a) ann_merge(a, &t);
      if (msg) msg->msg[0] = 0;
    }
    if (a) ann_done(&t);
    if (stop_at && count >= stop_at) break;
  }
  return count;
}

/* The target of a $dynamicRef: the outermost resource in the dynamic
 * scope with a matching $dynamicAnchor, else the static target. */
static const struct snode *dynamic_target(const struct snode *n, const struct dscope *scope) {
  if (!n->dyn_name) return n->dyn_ref;
  const struct snode *found = NULL;
  for (const struct dscope *d = scope; d; d = d->up) { /* innermost first; the last hit wins */
    int lo, hi;
    schema__dyn_range(d->res->dyn, d->res->ndyn, n->dyn_name, &lo, &hi);
    if (lo < hi) found = d->res->dyn[lo]->s;
  }
  return found ? found : n->dyn_ref;
}

static int in_place(struct vctx *c, const struct snode *n, const cJSON *v, const struct vpath *path,
                    const struct dscope *scope, struct ann *a) {
  int rc;
  if (n->ref && (rc = eval(c, n->ref, v, path, scope, a))) return rc;
  if (n->dyn_ref && (rc = eval(c, dynamic_target(n, scope), v, path, scope, a))) return rc;
  for (int i = 0; i < n->nall; i++)
    if ((rc = eval(c, n->all_of[i], v, path, scope, a))) return rc;
  if (n->nany) {
    struct err first = {0};
    if (!count_matches(c, n->any_of, n->nany, v, path, scope, a, a ? 0 : 1, &first)) {
      return fail(c, path, "matches none of anyOf (first: %s)", first.msg);
    }
  }
  if (n->none) {
    int k = count_matches(c, n->one_of, n->none, v, path, scope, NULL, 2, NULL);
    if (k != 1) return fail(c, path, "must match exactly one of oneOf (matched %d)", k);
    if (a) count_matches(c, n->one_of, n->none, v, path, scope, a, 0, NULL);
  }
  if (n->not_) {
    if (!probe(c, n->not_, v, path, scope, NULL, NULL))
      return fail(c, path, "must not match the 'not' schema");
  }
  if (n->if_) {
    struct ann t;
    if (a) ann_init(&t, v);
    int ok = !probe(c, n->if_, v, path, scope, a ? &t : NULL, NULL);
    if (a) {
      if (ok) ann_merge(a, &t);
      ann_done(&t);
    }
    const struct snode *branch = ok ? n->then_ : n->else_;
    if (branch && (rc = eval(c, branch, v, path, scope, a))) return rc;
  }
  return 0;
}

static int eval(struct vctx *c, const struct snode *n, const cJSON *v, const struct vpath *path,
                const struct dscope *scope, struct ann *a) {
  int rc;
  if (c->aborted) return ERR_INVALID;
  if (n->boolean == 1) return 0;
  if (n->boolean == 0) return fail(c, path, "no value is allowed here");
  if (++c->steps > MAX_EVAL_STEPS)
    return abort_run(c, path, "schema evaluation took more than " STR(MAX_EVAL_STEPS) " steps");
  if (++c->depth > MAX_EVAL_DEPTH) {
    c->depth--;
    return abort_run(
        c, path, "schema evaluation deeper than " STR(MAX_EVAL_DEPTH) " levels (a $ref cycle?)");
  }
  struct dscope here = {n->res, scope};
  if (!scope || scope->res != n->res) scope = &here;
  if (n->types && (rc = check_type(c, n, v, path))) goto out;
  if (n->enm) {
    int ok = 0;
    for (const cJSON *x = n->enm->child; x && !ok; x = x->next) ok = schema__json_equal(x, v);
    if (!ok) {
      char *allowed = c->e ? cJSON_PrintUnformatted(n->enm) : NULL;
      rc = fail(c, path, "must be one of %s", allowed ? allowed : "the enum");
      cJSON_free(allowed);
      goto out;
    }
  }
  if (n->cnst && !schema__json_equal(n->cnst, v)) {
    rc = fail(c, path, "must equal the constant value");
    goto out;
  }
  /* unevaluated* need the marks of this node's own keywords and in-place
   * applicators, so such a node collects its own. */
  struct ann own, *mine = a;
  int need = (n->uneval_props && cJSON_IsObject(v)) || (n->uneval_items && cJSON_IsArray(v));
  if (need) {
    ann_init(&own, v);
    mine = &own;
  }
  if (cJSON_IsNumber(v))
    rc = check_number(c, n, v, path);
  else if (cJSON_IsString(v))
    rc = check_string(c, n, v, path);
  else if (cJSON_IsArray(v))
    rc = check_array(c, n, v, path, scope, mine);
  else if (cJSON_IsObject(v))
    rc = check_object(c, n, v, path, scope, mine);
  else
    rc = 0;
  if (!rc) rc = in_place(c, n, v, path, scope, mine);
  if (!rc && need) {
    const struct snode *u = cJSON_IsObject(v) ? n->uneval_props : n->uneval_items;
    int i = 0;
    for (const cJSON *x = v->child; x && !rc; x = x->next, i++) {
      if (own.bits[i]) continue;
      struct vpath sub = {path, cJSON_IsObject(v) ? (x->string ? x->string : "") : NULL, i};
      if (u->boolean == 0)
        rc = cJSON_IsObject(v) ? fail(c, path, "unexpected field '%s'", sub.key)
                               : fail(c, path, "unexpected item [%d]", i);
      else
        rc = eval(c, u, x, &sub, scope, NULL);
    }
    if (!rc) {
      ann_all(&own);
      ann_merge(a, &own);
    }
  }
  if (need) ann_done(&own);
out:
  c->depth--;
  return rc;
}

int schema_run(const struct schema *s, const cJSON *value, const char *where, struct err *e) {
  if (!s || !value)
    return err_set(e, ERR_INVALID, "invalid_args", "%s: no schema or no value to validate",
                   where ? where : "value");
  if (s->any_object && cJSON_IsObject(value)) return 0; /* what eval would find */
  struct vpath root = {NULL, where ? where : "value", 0};
  struct vctx c = {e, 0, 0, e, 0};
  int rc = eval(&c, s->root, value, &root, NULL, NULL);
  return c.aborted ? ERR_INVALID : rc; /* e holds the abort message */
}

int schema_validate(const cJSON *schema, const cJSON *value, const char *where, struct err *e) {
  struct schema *s;
  struct schema_opts o = {SCHEMA_ANY_ROOT, NULL, NULL};
  int rc = schema_compile(schema, &o, where, &s, e);
  if (!rc) rc = schema_run(s, value, where, e);
  schema_free(s);
  return rc;
}
