/* schema_compile.c - checks a JSON Schema document and compiles it into
 * the node tree schema.c runs.
 *
 * One walk over the schema-bearing keywords checks every keyword's name
 * and value type, compiles regexes, registers schema resources ($id) and
 * anchors, and records each $ref and $dynamicRef. After the walk the refs
 * are resolved (RFC 3986 against the enclosing $id, then a JSON pointer
 * or an anchor inside a resource of this document); a target reached by
 * pointer that the walk did not visit is compiled then. A ref to anything
 * outside the document is refused: luagent never fetches a schema. Last,
 * a cycle of subschemas applied in place to the same value ($ref, allOf,
 * anyOf, ...) is refused, since evaluating it could never end.
 *
 * Lookups (node by cJSON pointer, resource by URI, anchor by name, member
 * of a large object) are hashed or sorted, so compiling a schema with
 * tens of thousands of $defs stays near-linear. Resolving the refs and the
 * cycle check are in schema_ref.c.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema_impl.h"
#include "util.h"

#define MAX_DEPTH 128

/* ---- keyword table ---- */

enum kind {
  K_ANY, /* any JSON value */
  K_STRING,
  K_BOOL,
  K_NUMBER,
  K_POSNUM, /* number > 0 */
  K_COUNT,  /* non-negative integer */
  K_ARRAY,
  K_STRLIST, /* array of unique strings */
  K_SCHEMA,
  K_SCHEMA_LIST, /* non-empty array of schemas */
  K_SCHEMA_MAP,  /* object of schemas */
  K_TYPE,
  K_DEPREQ, /* object of string arrays */
  K_ANCHOR,
  K_VOCAB,
};

// clang-format off
enum kw {
  KW_SCHEMA, KW_ID, KW_REF, KW_ANCHOR, KW_DYNREF, KW_DYNANCHOR, KW_VOCABULARY, KW_COMMENT,
  KW_DEFS, KW_ALLOF, KW_ANYOF, KW_ONEOF, KW_NOT, KW_IF, KW_THEN, KW_ELSE, KW_DEPSCHEMAS,
  KW_PREFIXITEMS, KW_ITEMS, KW_CONTAINS, KW_PROPERTIES, KW_PATTERNPROPS, KW_ADDLPROPS,
  KW_PROPNAMES, KW_UNEVALITEMS, KW_UNEVALPROPS, KW_TYPE, KW_ENUM, KW_CONST, KW_MULTIPLEOF,
  KW_MAXIMUM, KW_EXMAXIMUM, KW_MINIMUM, KW_EXMINIMUM, KW_MAXLENGTH, KW_MINLENGTH, KW_PATTERN,
  KW_MAXITEMS, KW_MINITEMS, KW_UNIQUE, KW_MAXCONTAINS, KW_MINCONTAINS, KW_MAXPROPS, KW_MINPROPS,
  KW_REQUIRED, KW_DEPREQUIRED, KW_FORMAT, KW_CONTENTENC, KW_CONTENTTYPE, KW_CONTENTSCHEMA,
  KW_TITLE, KW_DESCRIPTION, KW_DEFAULT, KW_DEPRECATED, KW_READONLY, KW_WRITEONLY, KW_EXAMPLES,
  KW_ASSERT_FORMAT,
};
// clang-format on

static const struct {
  const char *name;
  enum kind kind;
} keywords[] = {
    [KW_SCHEMA] = {"$schema", K_STRING},
    [KW_ID] = {"$id", K_STRING},
    [KW_REF] = {"$ref", K_STRING},
    [KW_ANCHOR] = {"$anchor", K_ANCHOR},
    [KW_DYNREF] = {"$dynamicRef", K_STRING},
    [KW_DYNANCHOR] = {"$dynamicAnchor", K_ANCHOR},
    [KW_VOCABULARY] = {"$vocabulary", K_VOCAB},
    [KW_COMMENT] = {"$comment", K_STRING},
    [KW_DEFS] = {"$defs", K_SCHEMA_MAP},
    [KW_ALLOF] = {"allOf", K_SCHEMA_LIST},
    [KW_ANYOF] = {"anyOf", K_SCHEMA_LIST},
    [KW_ONEOF] = {"oneOf", K_SCHEMA_LIST},
    [KW_NOT] = {"not", K_SCHEMA},
    [KW_IF] = {"if", K_SCHEMA},
    [KW_THEN] = {"then", K_SCHEMA},
    [KW_ELSE] = {"else", K_SCHEMA},
    [KW_DEPSCHEMAS] = {"dependentSchemas", K_SCHEMA_MAP},
    [KW_PREFIXITEMS] = {"prefixItems", K_SCHEMA_LIST},
    [KW_ITEMS] = {"items", K_SCHEMA},
    [KW_CONTAINS] = {"contains", K_SCHEMA},
    [KW_PROPERTIES] = {"properties", K_SCHEMA_MAP},
    [KW_PATTERNPROPS] = {"patternProperties", K_SCHEMA_MAP},
    [KW_ADDLPROPS] = {"additionalProperties", K_SCHEMA},
    [KW_PROPNAMES] = {"propertyNames", K_SCHEMA},
    [KW_UNEVALITEMS] = {"unevaluatedItems", K_SCHEMA},
    [KW_UNEVALPROPS] = {"unevaluatedProperties", K_SCHEMA},
    [KW_TYPE] = {"type", K_TYPE},
    [KW_ENUM] = {"enum", K_ARRAY},
    [KW_CONST] = {"const", K_ANY},
    [KW_MULTIPLEOF] = {"multipleOf", K_POSNUM},
    [KW_MAXIMUM] = {"maximum", K_NUMBER},
    [KW_EXMAXIMUM] = {"exclusiveMaximum", K_NUMBER},
    [KW_MINIMUM] = {"minimum", K_NUMBER},
    [KW_EXMINIMUM] = {"exclusiveMinimum", K_NUMBER},
    [KW_MAXLENGTH] = {"maxLength", K_COUNT},
    [KW_MINLENGTH] = {"minLength", K_COUNT},
    [KW_PATTERN] = {"pattern", K_STRING},
    [KW_MAXITEMS] = {"maxItems", K_COUNT},
    [KW_MINITEMS] = {"minItems", K_COUNT},
    [KW_UNIQUE] = {"uniqueItems", K_BOOL},
    [KW_MAXCONTAINS] = {"maxContains", K_COUNT},
    [KW_MINCONTAINS] = {"minContains", K_COUNT},
    [KW_MAXPROPS] = {"maxProperties", K_COUNT},
    [KW_MINPROPS] = {"minProperties", K_COUNT},
    [KW_REQUIRED] = {"required", K_STRLIST},
    [KW_DEPREQUIRED] = {"dependentRequired", K_DEPREQ},
    [KW_FORMAT] = {"format", K_STRING},
    [KW_CONTENTENC] = {"contentEncoding", K_STRING},
    [KW_CONTENTTYPE] = {"contentMediaType", K_STRING},
    [KW_CONTENTSCHEMA] = {"contentSchema", K_SCHEMA},
    [KW_TITLE] = {"title", K_STRING},
    [KW_DESCRIPTION] = {"description", K_STRING},
    [KW_DEFAULT] = {"default", K_ANY},
    [KW_DEPRECATED] = {"deprecated", K_BOOL},
    [KW_READONLY] = {"readOnly", K_BOOL},
    [KW_WRITEONLY] = {"writeOnly", K_BOOL},
    [KW_EXAMPLES] = {"examples", K_ARRAY},
    [KW_ASSERT_FORMAT] = {"x-luagent-assert-format", K_BOOL},
};
#define NKEYWORDS ((int)(sizeof keywords / sizeof keywords[0]))

static const char *const type_names[] = {"null",   "boolean", "object", "array",
                                         "string", "number",  "integer"};

static const char *const vocabularies[] = {
    "https://json-schema.org/draft/2020-12/vocab/core",
    "https://json-schema.org/draft/2020-12/vocab/applicator",
    "https://json-schema.org/draft/2020-12/vocab/unevaluated",
    "https://json-schema.org/draft/2020-12/vocab/validation",
    "https://json-schema.org/draft/2020-12/vocab/meta-data",
    "https://json-schema.org/draft/2020-12/vocab/format-annotation",
    "https://json-schema.org/draft/2020-12/vocab/format-assertion",
    "https://json-schema.org/draft/2020-12/vocab/content",
};

static int keyword_id(const char *name) {
  for (int i = 0; i < NKEYWORDS; i++)
    if (!strcmp(keywords[i].name, name)) return i;
  return -1;
}

/* ---- compile context ---- */

/* Grows an array of n elements for one more, doubling (n = 0, 1, 2, 4, ...
 * are the sizes at which it reallocates), so appends stay linear. */
void *schema__grow(void *v, size_t n, size_t size) {
  if (n && (n & (n - 1))) return v;
  return xrealloc(v, (n ? n * 2 : 1) * size);
}

static size_t str_hash(const char *s) {
  size_t h = (size_t)1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * (size_t)1099511628211ull;
  return h;
}

int schema__smap_get(const struct smap *m, const char *key) {
  if (!m->cap) return -1;
  for (size_t i = str_hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->keys[i]) return -1;
    if (!strcmp(m->keys[i], key)) return m->vals[i];
  }
}

static void smap_put(struct smap *m, const char *key, int val) {
  if ((m->n + 1) * 2 > m->cap) {
    struct smap g = {xcalloc(m->cap ? m->cap * 2 : 32, sizeof(char *)), NULL, 0,
                     m->cap ? m->cap * 2 : 32};
    g.vals = xcalloc(g.cap, sizeof(int));
    for (size_t i = 0; i < m->cap; i++) {
      if (!m->keys[i]) continue;
      size_t k = str_hash(m->keys[i]) & (g.cap - 1);
      while (g.keys[k]) k = (k + 1) & (g.cap - 1);
      g.keys[k] = m->keys[i], g.vals[k] = m->vals[i], g.n++;
    }
    free(m->keys);
    free(m->vals);
    *m = g;
  }
  size_t k = str_hash(key) & (m->cap - 1);
  while (m->keys[k] && strcmp(m->keys[k], key)) k = (k + 1) & (m->cap - 1);
  if (!m->keys[k]) m->keys[k] = xstrdup(key), m->n++;
  m->vals[k] = val;
}

static void smap_free(struct smap *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
  free(m->keys);
  free(m->vals);
}

int schema__cfail(struct cc *c, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  err_set(c->e, ERR_INVALID, "invalid_schema", "%s: %s at %s", c->where, msg,
          c->plen ? c->ptr : "#");
  if (c->e) snprintf(c->e->subject, sizeof c->e->subject, "%s", c->kw ? c->kw : "");
  return ERR_INVALID;
}

/* Appends "/seg" (escaped per RFC 6901) to the current pointer; returns
 * the old length to restore. */
static size_t ptr_push(struct cc *c, const char *seg, int index) {
  size_t old = c->plen;
  char num[24];
  if (!seg) snprintf(num, sizeof num, "%d", index), seg = num;
  if (!c->plen) c->ptr[c->plen++] = '#';
  if (c->plen + 1 < sizeof c->ptr) c->ptr[c->plen++] = '/';
  for (; *seg && c->plen + 2 < sizeof c->ptr; seg++) {
    if (*seg == '~' || *seg == '/') {
      c->ptr[c->plen++] = '~';
      c->ptr[c->plen++] = *seg == '~' ? '0' : '1';
    } else {
      c->ptr[c->plen++] = *seg;
    }
  }
  c->ptr[c->plen] = 0;
  return old;
}

static void ptr_pop(struct cc *c, size_t old) {
  c->plen = old;
  c->ptr[old] = 0;
}

/* node -> snode, open addressing keyed by the cJSON pointer, so resolving
 * many refs stays linear. The first snode compiled for a node wins. */
static size_t ptr_hash(const cJSON *j, size_t mask) {
  uintptr_t x = (uintptr_t)j;
  x ^= x >> 17;
  x *= (uintptr_t)0x9E3779B97F4A7C15ull;
  return (size_t)(x >> 7) & mask;
}

static void map_put(struct cc *c, struct snode *n) {
  if ((c->mapn + 1) * 2 > c->mapcap) {
    size_t cap = c->mapcap ? c->mapcap * 2 : 64;
    struct snode **m = xcalloc(cap, sizeof *m);
    for (size_t i = 0; i < c->mapcap; i++) {
      if (!c->map[i]) continue;
      size_t k = ptr_hash(c->map[i]->json, cap - 1);
      while (m[k]) k = (k + 1) & (cap - 1);
      m[k] = c->map[i];
    }
    free(c->map);
    c->map = m;
    c->mapcap = cap;
  }
  size_t k = ptr_hash(n->json, c->mapcap - 1);
  while (c->map[k]) {
    if (c->map[k]->json == n->json) return; /* keep the first */
    k = (k + 1) & (c->mapcap - 1);
  }
  c->map[k] = n;
  c->mapn++;
}

static struct snode *node_new(struct cc *c, const cJSON *j, struct sres *res) {
  struct snode *n = xcalloc(1, sizeof *n);
  n->json = j;
  n->res = res;
  n->boolean = -1;
  n->min_len = n->max_len = n->min_items = n->max_items = -1;
  n->min_props = n->max_props = n->min_contains = n->max_contains = -1;
  n->ptr = xstrdup(c->plen ? c->ptr : "#");
  struct schema *s = c->s;
  n->idx = s->nnodes;
  if (s->nnodes == s->capnodes) {
    s->capnodes = s->capnodes ? s->capnodes * 2 : 16;
    s->nodes = xrealloc(s->nodes, s->capnodes * sizeof *s->nodes);
  }
  s->nodes[s->nnodes++] = n;
  map_put(c, n);
  return n;
}

struct snode *schema__node_find(const struct cc *c, const cJSON *j) {
  if (!c->map) return NULL;
  for (size_t i = ptr_hash(j, c->mapcap - 1);; i = (i + 1) & (c->mapcap - 1)) {
    if (!c->map[i]) return NULL;
    if (c->map[i]->json == j) return c->map[i];
  }
}

static struct sres *res_new(struct cc *c, char *uri, const cJSON *root) {
  struct schema *s = c->s;
  struct sres *r = xcalloc(1, sizeof *r);
  r->uri = uri;
  r->root = root;
  s->res = schema__grow(s->res, (size_t)s->nres, sizeof *s->res);
  smap_put(&c->resmap, uri, s->nres);
  s->res[s->nres++] = r;
  return r;
}

struct sres *schema__res_find(const struct cc *c, const char *uri) {
  int i = schema__smap_get(&c->resmap, uri);
  return i < 0 ? NULL : c->s->res[i];
}

void schema__anchor_key(const struct sres *r, const char *name, struct sbuf *b) {
  b->len = 0;
  sbuf_printf(b, "%s#%s", r->uri, name);
}

static struct sregex *regex_new(struct cc *c, const char *src, const char *kw) {
  struct sregex *r = xcalloc(1, sizeof *r);
  const char *why;
  c->kw = kw;
  if (schema__regex_compile(src, r, &why)) {
    free(r);
    schema__cfail(c, "'%s' \"%s\" cannot be used: %s", kw, src, why);
    return NULL;
  }
  c->s->regexes = schema__grow(c->s->regexes, (size_t)c->s->nregexes, sizeof *c->s->regexes);
  c->s->regexes[c->s->nregexes++] = r;
  return r;
}

static int is_count(const cJSON *v) {
  return cJSON_IsNumber(v) && v->valuedouble >= 0 && schema__num_is_integer(v) &&
         v->valuedouble < 9.2e18;
}

/* Lua turns an empty table into []; where an object is expected, [] is {}. */
static int is_empty_array(const cJSON *v) {
  return cJSON_IsArray(v) && !v->child;
}


/* Checks a keyword's value against its kind; 0 or -1 (c->e set). */
static int check_kind(struct cc *c, int id, const cJSON *v) {
  const char *k = keywords[id].name;
  switch (keywords[id].kind) {
    case K_ANY:
      return 0;
    case K_STRING:
      return cJSON_IsString(v) ? 0 : schema__cfail(c, "'%s' must be a string", k);
    case K_BOOL:
      return cJSON_IsBool(v) ? 0 : schema__cfail(c, "'%s' must be true or false", k);
    case K_NUMBER:
      return cJSON_IsNumber(v) ? 0 : schema__cfail(c, "'%s' must be a number", k);
    case K_POSNUM:
      return cJSON_IsNumber(v) && v->valuedouble > 0
                 ? 0
                 : schema__cfail(c, "'%s' must be a number greater than 0", k);
    case K_COUNT:
      return is_count(v) ? 0 : schema__cfail(c, "'%s' must be a non-negative integer", k);
    case K_ARRAY:
      return cJSON_IsArray(v) ? 0 : schema__cfail(c, "'%s' must be an array", k);
    case K_STRLIST:
      if (cJSON_IsObject(v) && !v->child) return 0; /* {} from Lua */
      if (!cJSON_IsArray(v)) return schema__cfail(c, "'%s' must be a list of names", k);
      for (const cJSON *x = v->child; x; x = x->next) {
        if (!cJSON_IsString(x)) return schema__cfail(c, "'%s' must be a list of names", k);
        for (const cJSON *y = v->child; y != x; y = y->next)
          if (!strcmp(x->valuestring, y->valuestring))
            return schema__cfail(c, "'%s' lists '%s' twice", k, x->valuestring);
      }
      return 0;
    case K_SCHEMA:
      return cJSON_IsObject(v) || cJSON_IsBool(v)
                 ? 0
                 : schema__cfail(c, "'%s' must be a schema (an object or a boolean)", k);
    case K_SCHEMA_LIST:
      if (!cJSON_IsArray(v) || !v->child)
        return schema__cfail(c, "'%s' must be a non-empty array of schemas", k);
      return 0;
    case K_SCHEMA_MAP:
      return cJSON_IsObject(v) || is_empty_array(v) ? 0 : schema__cfail(c, "'%s' must be an object", k);
    case K_TYPE: {
      const cJSON *one = cJSON_IsArray(v) ? v->child : v;
      if (cJSON_IsArray(v) && !v->child) return schema__cfail(c, "'type' must not be an empty list");
      for (const cJSON *t = one; t; t = cJSON_IsArray(v) ? t->next : NULL) {
        int ok = 0;
        for (int i = 0; cJSON_IsString(t) && i < 7; i++)
          ok |= !strcmp(t->valuestring, type_names[i]);
        if (!ok)
          return schema__cfail(c, "'type': unknown schema type %s",
                       cJSON_IsString(t) ? t->valuestring : "(not a string)");
      }
      return 0;
    }
    case K_DEPREQ:
      if (is_empty_array(v)) return 0;
      if (!cJSON_IsObject(v)) return schema__cfail(c, "'%s' must be an object of name lists", k);
      for (const cJSON *x = v->child; x; x = x->next) {
        if (is_empty_array(x) || (cJSON_IsObject(x) && !x->child)) continue;
        if (!cJSON_IsArray(x)) return schema__cfail(c, "'%s' must be an object of name lists", k);
        for (const cJSON *y = x->child; y; y = y->next)
          if (!cJSON_IsString(y)) return schema__cfail(c, "'%s' must be an object of name lists", k);
      }
      return 0;
    case K_ANCHOR: {
      const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
      int ok = s && (isalpha((unsigned char)s[0]) || s[0] == '_');
      for (const char *p = s; ok && *p; p++) ok = isalnum((unsigned char)*p) || strchr("_-.", *p);
      return ok ? 0 : schema__cfail(c, "'%s' must be a name ([A-Za-z_][A-Za-z0-9._-]*)", k);
    }
    case K_VOCAB:
      if (is_empty_array(v)) return 0;
      if (!cJSON_IsObject(v)) return schema__cfail(c, "'$vocabulary' must be an object");
      for (const cJSON *x = v->child; x; x = x->next) {
        if (!cJSON_IsBool(x)) return schema__cfail(c, "'$vocabulary' values must be true or false");
        int known = 0;
        for (size_t i = 0; i < sizeof vocabularies / sizeof vocabularies[0]; i++)
          known |= !strcmp(x->string, vocabularies[i]);
        if (!known && cJSON_IsTrue(x) && !(c->flags & SCHEMA_LENIENT))
          return schema__cfail(c, "'$vocabulary' requires %s, which luagent does not implement", x->string);
      }
      return 0;
  }
  return 0;
}

/* Compiles each member of an object of schemas into a sorted array. */
static int compile_map(struct cc *c, const cJSON *v, const char *kw, struct sres *res, int depth,
                       struct sprop **out, int *nout, struct spat **pout) {
  int n = 0;
  for (const cJSON *x = v->child; x; x = x->next) n++;
  if (!n) return 0;
  if (pout)
    *pout = xcalloc((size_t)n, sizeof **pout);
  else
    *out = xcalloc((size_t)n, sizeof **out);
  *nout = 0;
  for (const cJSON *x = cJSON_IsObject(v) ? v->child : NULL; x; x = x->next) {
    size_t o1 = ptr_push(c, kw, 0);
    size_t o2 = ptr_push(c, x->string, 0);
    struct snode *s = schema__compile(c, x, res, depth + 1);
    struct sregex *re = NULL;
    if (s && pout) {
      ptr_pop(c, o2);
      re = regex_new(c, x->string, kw);
    }
    ptr_pop(c, o1);
    if (!s || (pout && !re)) return -1;
    if (pout)
      (*pout)[*nout] = (struct spat){re, s};
    else
      (*out)[*nout] = (struct sprop){x->string, s};
    (*nout)++;
  }
  return 0;
}

static int prop_cmp(const void *a, const void *b) {
  return strcmp(((const struct sprop *)a)->name, ((const struct sprop *)b)->name);
}

static int compile_list(struct cc *c, const cJSON *v, const char *kw, struct sres *res, int depth,
                        struct snode ***out, int *nout) {
  int n = cJSON_GetArraySize(v), i = 0;
  *out = xcalloc((size_t)n, sizeof **out);
  *nout = n;
  for (const cJSON *x = v->child; x; x = x->next, i++) {
    size_t o1 = ptr_push(c, kw, 0);
    size_t o2 = ptr_push(c, NULL, i);
    (*out)[i] = schema__compile(c, x, res, depth + 1);
    (void)o2;
    ptr_pop(c, o1);
    if (!(*out)[i]) return -1;
  }
  return 0;
}

static struct snode *compile_sub(struct cc *c, const cJSON *v, const char *kw, struct sres *res,
                                 int depth) {
  size_t o = ptr_push(c, kw, 0);
  struct snode *s = schema__compile(c, v, res, depth + 1);
  ptr_pop(c, o);
  return s;
}

static void add_pending(struct cc *c, struct snode *n, const char *ref, struct sres *res,
                        int dynamic) {
  if (c->npend == c->cappend) {
    c->cappend = c->cappend ? c->cappend * 2 : 8;
    c->pend = xrealloc(c->pend, (size_t)c->cappend * sizeof *c->pend);
  }
  c->pend[c->npend++] =
      (struct pending){n, xstrdup(ref), res, dynamic, xstrdup(c->plen ? c->ptr : "#")};
}

/* Registers an anchor; -1 when another schema in r has the same name. */
static int add_anchor(struct cc *c, struct sres *r, const char *name, const cJSON *node,
                      bool dynamic) {
  struct sbuf key = {0};
  schema__anchor_key(r, name, &key);
  int i = schema__smap_get(&c->anchors, key.s), rc = 0;
  if (i >= 0) {
    if (r->anchors[i].node != node)
      rc = -1;
    else
      r->anchors[i].dynamic |= dynamic; /* $anchor and $dynamicAnchor on one schema */
  } else {
    r->anchors = schema__grow(r->anchors, (size_t)r->nanchors, sizeof *r->anchors);
    smap_put(&c->anchors, key.s, r->nanchors);
    r->anchors[r->nanchors++] = (struct sanchor){xstrdup(name), node, NULL, dynamic};
  }
  sbuf_free(&key);
  return rc;
}

struct snode *schema__compile(struct cc *c, const cJSON *j, struct sres *res, int depth) {
  if (depth > MAX_DEPTH) {
    c->kw = NULL;
    schema__cfail(c, "schema nested deeper than %d", MAX_DEPTH);
    return NULL;
  }
  if (cJSON_IsBool(j)) {
    struct snode *n = node_new(c, j, res);
    n->boolean = cJSON_IsTrue(j);
    return n;
  }
  if (!cJSON_IsObject(j)) {
    schema__cfail(c, "a schema must be an object or a boolean");
    return NULL;
  }
  /* $id first: it sets the base for everything else in this object. */
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "$id");
  if (id) {
    c->kw = "$id";
    if (!cJSON_IsString(id)) {
      schema__cfail(c, "'$id' must be a string");
      return NULL;
    }
    char *u = schema__uri_resolve(res->uri, id->valuestring);
    char *hash = strchr(u, '#');
    if (hash && hash[1]) {
      free(u);
      schema__cfail(c, "'$id' \"%s\" must not have a fragment (use $anchor)", id->valuestring);
      return NULL;
    }
    if (hash) *hash = 0;
    if (res->root == j) {
      free(res->uri);
      res->uri = u;
      smap_put(&c->resmap, u, 0); /* only the document root is created before its $id is read */
    } else {
      struct sres *other = schema__res_find(c, u);
      if (other && other->root != j) {
        free(u);
        schema__cfail(c, "'$id' \"%s\" is used twice in the schema", id->valuestring);
        return NULL;
      }
      res = other ? (free(u), other) : res_new(c, u, j);
    }
  }
  struct snode *n = node_new(c, j, res);
  for (const cJSON *m = j->child; m; m = m->next) {
    int kid = keyword_id(m->string);
    c->kw = m->string;
    if (kid < 0 || (kid == KW_ASSERT_FORMAT && depth > 0)) {
      if (c->flags & SCHEMA_LENIENT) {
        if (c->o && c->o->on_unknown) c->o->on_unknown(c->o->ud, m->string, c->plen ? c->ptr : "#");
        continue;
      }
      schema__cfail(c, "unknown keyword '%s'", m->string);
      return NULL;
    }
    if (check_kind(c, kid, m)) return NULL;
    const cJSON *v = m;
    switch (kid) {
      case KW_SCHEMA:
        if (strcmp(v->valuestring, "https://json-schema.org/draft/2020-12/schema") &&
            strcmp(v->valuestring, "https://json-schema.org/draft/2020-12/schema#") &&
            !(c->flags & SCHEMA_LENIENT)) {
          schema__cfail(c, "'$schema' \"%s\" is not supported (luagent implements draft 2020-12)",
                v->valuestring);
          return NULL;
        }
        break;
      case KW_REF:
        add_pending(c, n, v->valuestring, res, 0);
        break;
      case KW_DYNREF:
        add_pending(c, n, v->valuestring, res, 1);
        break;
      case KW_ANCHOR:
      case KW_DYNANCHOR:
        if (add_anchor(c, res, v->valuestring, j, kid == KW_DYNANCHOR)) {
          schema__cfail(c, "anchor '%s' is defined twice", v->valuestring);
          return NULL;
        }
        break;
      case KW_DEFS:
        if (cJSON_IsObject(v)) {
          for (const cJSON *x = v->child; x; x = x->next) {
            size_t o1 = ptr_push(c, "$defs", 0);
            ptr_push(c, x->string, 0);
            struct snode *d = schema__compile(c, x, res, depth + 1);
            ptr_pop(c, o1);
            if (!d) return NULL;
          }
        }
        break;
      case KW_CONTENTSCHEMA:
        if (!compile_sub(c, v, m->string, res, depth)) return NULL;
        break;
      case KW_ALLOF:
        if (compile_list(c, v, m->string, res, depth, &n->all_of, &n->nall)) return NULL;
        break;
      case KW_ANYOF:
        if (compile_list(c, v, m->string, res, depth, &n->any_of, &n->nany)) return NULL;
        break;
      case KW_ONEOF:
        if (compile_list(c, v, m->string, res, depth, &n->one_of, &n->none)) return NULL;
        break;
      case KW_PREFIXITEMS:
        if (compile_list(c, v, m->string, res, depth, &n->prefix, &n->nprefix)) return NULL;
        break;
#define SUB(field)                                                         \
  if (!(n->field = compile_sub(c, v, m->string, res, depth))) return NULL; \
  break
      case KW_NOT:
        SUB(not_);
      case KW_IF:
        SUB(if_);
      case KW_THEN:
        SUB(then_);
      case KW_ELSE:
        SUB(else_);
      case KW_ITEMS:
        SUB(items);
      case KW_CONTAINS:
        SUB(contains);
      case KW_ADDLPROPS:
        SUB(addl);
      case KW_PROPNAMES:
        SUB(pnames);
      case KW_UNEVALITEMS:
        SUB(uneval_items);
      case KW_UNEVALPROPS:
        SUB(uneval_props);
#undef SUB
      case KW_PROPERTIES:
        if (compile_map(c, v, m->string, res, depth, &n->props, &n->nprops, NULL)) return NULL;
        if (n->nprops) qsort(n->props, (size_t)n->nprops, sizeof *n->props, prop_cmp);
        break;
      case KW_PATTERNPROPS:
        if (compile_map(c, v, m->string, res, depth, NULL, &n->npprops, &n->pprops)) return NULL;
        break;
      case KW_DEPSCHEMAS:
        if (compile_map(c, v, m->string, res, depth, &n->dep_schemas, &n->ndep, NULL)) return NULL;
        break;
      case KW_TYPE:
        n->type_kw = v;
        for (const cJSON *t = cJSON_IsArray(v) ? v->child : v; t;
             t = cJSON_IsArray(v) ? t->next : NULL)
          for (int i = 0; i < 7; i++)
            if (!strcmp(t->valuestring, type_names[i])) n->types |= 1u << i;
        break;
      case KW_ENUM:
        n->enm = v;
        break;
      case KW_CONST:
        n->cnst = v;
        break;
      case KW_MULTIPLEOF:
        n->multiple_of = v;
        break;
      case KW_MAXIMUM:
        n->maximum = v;
        break;
      case KW_EXMAXIMUM:
        n->ex_max = v;
        break;
      case KW_MINIMUM:
        n->minimum = v;
        break;
      case KW_EXMINIMUM:
        n->ex_min = v;
        break;
      case KW_MAXLENGTH:
        n->max_len = (long long)v->valuedouble;
        break;
      case KW_MINLENGTH:
        n->min_len = (long long)v->valuedouble;
        break;
      case KW_MAXITEMS:
        n->max_items = (long long)v->valuedouble;
        break;
      case KW_MINITEMS:
        n->min_items = (long long)v->valuedouble;
        break;
      case KW_MAXCONTAINS:
        n->max_contains = (long long)v->valuedouble;
        break;
      case KW_MINCONTAINS:
        n->min_contains = (long long)v->valuedouble;
        break;
      case KW_MAXPROPS:
        n->max_props = (long long)v->valuedouble;
        break;
      case KW_MINPROPS:
        n->min_props = (long long)v->valuedouble;
        break;
      case KW_UNIQUE:
        n->unique = cJSON_IsTrue(v);
        break;
      case KW_PATTERN:
        if (!(n->pattern = regex_new(c, v->valuestring, "pattern"))) return NULL;
        break;
      case KW_REQUIRED:
        n->required = cJSON_IsArray(v) && v->child ? v : NULL;
        break;
      case KW_DEPREQUIRED:
        n->dep_required = cJSON_IsObject(v) && v->child ? v : NULL;
        break;
      case KW_FORMAT:
        if (c->assert_format) {
          n->format = schema__format_id(v->valuestring);
          if (!n->format) {
            schema__cfail(c, "'format' \"%s\" cannot be asserted by luagent", v->valuestring);
            return NULL;
          }
        }
        break;
      default:
        break; /* annotations: accepted, nothing to run */
    }
  }
  return n;
}

/* Whether doc says nothing but "an object": {"type": "object"}, maybe
 * with an empty "properties" (the echo tool's, a skill's `params = {}`).
 * Anything else, an annotation included, is evaluated as compiled. */
static int accepts_any_object(const cJSON *doc) {
  int type = 0;
  if (!cJSON_IsObject(doc)) return 0;
  for (const cJSON *m = doc->child; m; m = m->next) {
    if (!m->string) return 0;
    if (!strcmp(m->string, "type") && cJSON_IsString(m) && !strcmp(m->valuestring, "object"))
      type++;
    else if (!(!strcmp(m->string, "properties") && cJSON_IsObject(m) && !m->child))
      return 0;
  }
  return type == 1;
}

int schema_compile(const cJSON *doc, const struct schema_opts *opts, const char *where,
                   struct schema **out, struct err *e) {
  *out = NULL;
  where = where ? where : "schema";
  unsigned flags = opts ? opts->flags : 0;
  if (!doc) return err_set(e, ERR_INVALID, "invalid_schema", "%s: no schema", where);
  if (!(flags & SCHEMA_ANY_ROOT)) {
    if (!cJSON_IsObject(doc))
      return err_set(e, ERR_INVALID, "invalid_schema", "%s: parameter schema must be an object",
                     where);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(doc, "type");
    if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "object")))
      return err_set(e, ERR_INVALID, "invalid_schema",
                     "%s: parameter schema must have type \"object\"", where);
  }
  struct cc c = {0};
  struct schema *s = xcalloc(1, sizeof *s);
  c.s = s;
  c.o = opts;
  c.flags = flags;
  c.where = where;
  c.e = e;
  const cJSON *af =
      cJSON_IsObject(doc) ? cJSON_GetObjectItemCaseSensitive(doc, "x-luagent-assert-format") : NULL;
  c.assert_format = (flags & SCHEMA_ASSERT_FORMAT) || cJSON_IsTrue(af);
  s->doc = doc;
  struct sres *root_res = res_new(&c, xstrdup(""), doc);
  int rc = ERR_INVALID;
  if (!(s->root = schema__compile(&c, doc, root_res, 0))) goto out;
  for (int i = 0, more = 1; more;) {
    for (; i < c.npend; i++) /* c.npend may grow: on-demand targets add refs */
      if (schema__resolve(&c, i)) goto out;
    for (int r = 0; r < s->nres; r++)
      for (int k = 0; k < s->res[r]->nanchors; k++) {
        struct sanchor *a = &s->res[r]->anchors[k];
        if (!a->s && !(a->s = schema__node_find(&c, a->node))) a->s = schema__compile(&c, a->node, s->res[r], 1);
        if (!a->s) goto out;
      }
    more = i < c.npend;
  }
  schema__index_dynamic_anchors(s);
  if (schema__find_cycle(&c)) goto out;
  s->any_object = accepts_any_object(doc);
  rc = 0;
out:
  for (int i = 0; i < c.npend; i++) {
    free(c.pend[i].ref);
    free(c.pend[i].ptr);
  }
  free(c.pend);
  free(c.map);
  smap_free(&c.resmap);
  smap_free(&c.anchors);
  for (int i = 0; i < c.nidx; i++) free(c.idx[i].members);
  free(c.idx);
  if (rc)
    schema_free(s);
  else
    *out = s;
  return rc;
}

void schema_free(struct schema *s) {
  if (!s) return;
  for (size_t i = 0; i < s->nnodes; i++) {
    struct snode *n = s->nodes[i];
    free(n->ptr);
    free(n->props);
    free(n->pprops);
    free(n->prefix);
    free(n->all_of);
    free(n->any_of);
    free(n->one_of);
    free(n->dep_schemas);
    free(n);
  }
  free(s->nodes);
  for (int i = 0; i < s->nres; i++) {
    for (int k = 0; k < s->res[i]->nanchors; k++) free(s->res[i]->anchors[k].name);
    free(s->res[i]->anchors);
    free(s->res[i]->dyn);
    free(s->res[i]->uri);
    free(s->res[i]);
  }
  free(s->res);
  free(s->dyn);
  for (int i = 0; i < s->nregexes; i++) {
    regfree(&s->regexes[i]->re);
    free(s->regexes[i]);
  }
  free(s->regexes);
  free(s);
}

int schema_check(const cJSON *schema, const char *where, struct err *e) {
  struct schema *s;
  int rc = schema_compile(schema, NULL, where, &s, e);
  schema_free(s);
  return rc;
}
