/* schema_impl.h - shared between the schema module's files: the compiled
 * form (schema_compile.c builds it, schema.c runs it), the ECMA-262 to
 * POSIX regex translation (schema_regex.c), format checks
 * (schema_format.c), exact number helpers (schema_num.c), URI
 * resolution (schema_uri.c) and $ref resolution (schema_ref.c). */
#ifndef LUAGENT_SCHEMA_IMPL_H
#define LUAGENT_SCHEMA_IMPL_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>

#include "schema.h"

enum {
  ST_NULL = 1 << 0,
  ST_BOOL = 1 << 1,
  ST_OBJECT = 1 << 2,
  ST_ARRAY = 1 << 3,
  ST_STRING = 1 << 4,
  ST_NUMBER = 1 << 5,
  ST_INTEGER = 1 << 6,
};

struct snode;

struct sregex {
  regex_t re;
  const char *src; /* the ECMA text, borrowed from the document */
  long cost;       /* estimated expanded size, for the matching budget */
};

struct sprop {
  const char *name; /* borrowed */
  struct snode *s;
};

struct spat {
  struct sregex *re;
  struct snode *s;
};

struct sanchor {
  char *name;
  const cJSON *node;
  struct snode *s; /* filled once compiled */
  bool dynamic;
};

/* A schema resource: the document root or a subschema with $id. */
struct sres {
  char *uri; /* absolute-or-relative base, no fragment ("" for an unnamed root) */
  const cJSON *root;
  struct sanchor *anchors;
  int nanchors;
  struct sanchor **dyn; /* its $dynamicAnchors, sorted by name */
  int ndyn;
};

/* One compiled schema object (or boolean). Keyword fields are NULL / -1
 * when the keyword is absent. */
struct snode {
  const cJSON *json;
  char *ptr;   /* its JSON pointer ("#/properties/a"), for messages */
  size_t idx;  /* its index in schema.nodes */
  int boolean; /* -1: an object schema; 0: false; 1: true */
  struct sres *res;
  unsigned types; /* ST_* mask; 0: no type keyword */
  const cJSON *type_kw, *enm, *cnst;
  const cJSON *multiple_of, *minimum, *maximum, *ex_min, *ex_max;
  long long min_len, max_len, min_items, max_items, min_props, max_props;
  long long min_contains, max_contains;
  bool unique;
  struct sregex *pattern;
  const cJSON *required, *dep_required;
  struct sprop *props; /* sorted by name */
  int nprops;
  struct spat *pprops;
  int npprops;
  struct snode *addl, *pnames, *items, *contains, *not_, *if_, *then_, *else_;
  struct snode *uneval_props, *uneval_items;
  struct snode **prefix, **all_of, **any_of, **one_of;
  int nprefix, nall, nany, none;
  struct sprop *dep_schemas;
  int ndep;
  struct snode *ref;     /* $ref target */
  struct snode *dyn_ref; /* $dynamicRef static target */
  const char *dyn_name;  /* set when that target has a matching $dynamicAnchor */
  int format;            /* SF_* when asserted, 0 otherwise */
};

struct schema {
  const cJSON *doc;
  struct snode *root;
  struct snode **nodes; /* every compiled node, for lookup and free */
  size_t nnodes, capnodes;
  struct sres **res;
  int nres;
  struct sregex **regexes;
  int nregexes;
  struct sanchor **dyn; /* every $dynamicAnchor, sorted by name */
  int ndyn;
  int any_object; /* the document is {"type": "object"} (and at most an empty
                     "properties"): every object passes, with nothing to run */
};

/* The range [*lo, *hi) of v (sorted by name) named name. */
void schema__dyn_range(struct sanchor *const *v, int n, const char *name, int *lo, int *hi);

/* Formats (schema_format.c). */
enum {
  SF_NONE = 0,
  SF_DATE_TIME,
  SF_DATE,
  SF_TIME,
  SF_DURATION,
  SF_EMAIL,
  SF_HOSTNAME,
  SF_IPV4,
  SF_IPV6,
  SF_URI,
  SF_URI_REFERENCE,
  SF_UUID,
  SF_REGEX,
  SF_JSON_POINTER,
  SF_IRI,
  SF_IRI_REFERENCE,
  SF_RELATIVE_JSON_POINTER,
};
/* The SF_* for a format name, or SF_NONE when luagent cannot assert it. */
int schema__format_id(const char *name);
const char *schema__format_name(int id);
/* 1 when s is a valid instance of format id. */
int schema__format_ok(int id, const char *s);

/* Regexes (schema_regex.c). Translates an ECMA-262 pattern and compiles
 * it into r. Returns 0, or -1 with why (a static string) set. */
int schema__regex_compile(const char *ecma, struct sregex *r, const char **why);
/* 1 when r finds a match anywhere in s (an unanchored search), 0 when it
 * does not, -1 when s is too long for r within the matching budget. */
int schema__regex_search(const struct sregex *r, const char *s);

/* URIs (schema_uri.c). ref resolved against base (RFC 3986 5.2): a new
 * string, fragment included when ref has one; the caller frees. */
char *schema__uri_resolve(const char *base, const char *ref);
/* Percent-decodes s in place. */
void schema__percent_decode(char *s);

/* Numbers (schema_num.c). */
/* Exact equality of two number nodes. */
int schema__num_eq(const cJSON *a, const cJSON *b);
/* Exact comparison: <0, 0, >0. */
int schema__num_cmp(const cJSON *a, const cJSON *b);
/* 1 when the number has no fractional part (1.0 counts). */
int schema__num_is_integer(const cJSON *a);
/* 1 when a is an integer multiple of m (m > 0). */
int schema__num_multiple(const cJSON *a, const cJSON *m);
/* The number's shortest exact text, into out (at least 40 bytes). */
void schema__num_text(const cJSON *a, char *out, size_t n);
/* Deep equality with exact numbers; object key order does not matter. */
int schema__json_equal(const cJSON *a, const cJSON *b);

/* --- the compile context: what schema_compile.c and schema_ref.c share
 * (split from schema_compile.c; the functions below lost their `static`,
 * names unchanged). */

struct pending {
  struct snode *n;
  char *ref;
  struct sres *res;
  int dynamic;
  char *ptr;
};

/* A string -> int map (open addressing, FNV-1a), for resources by URI
 * and anchors by "uri#name": many $id or $anchor must not make compiling
 * quadratic. Values are >= 0; keys are copied. */
struct smap {
  char **keys;
  int *vals;
  size_t n, cap;
};

/* Large objects ($defs with thousands of entries) get a sorted index the
 * first time a pointer walks through them, so many refs into them stay
 * O(n log n) instead of O(n^2). */
struct objidx {
  const cJSON *obj;
  const cJSON **members; /* sorted by key */
  int n;
};

struct cc {
  struct schema *s;
  const struct schema_opts *o;
  unsigned flags;
  const char *where;
  struct err *e;
  int assert_format;
  const char *kw; /* the keyword being checked, named in e->subject on failure */
  char ptr[1024];
  size_t plen;
  struct pending *pend;
  int npend, cappend;
  struct snode **map; /* see node_find */
  size_t mapn, mapcap;
  struct objidx *idx; /* see member */
  int nidx;
  struct smap resmap;  /* uri -> index in schema.res */
  struct smap anchors; /* "uri#name" -> index in that resource's anchors */
};

struct sbuf; /* util.h */

/* schema_compile.c */
void *schema__grow(void *v, size_t n, size_t size);
int schema__smap_get(const struct smap *m, const char *key);
int schema__cfail(struct cc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
struct snode *schema__node_find(const struct cc *c, const cJSON *j);
struct sres *schema__res_find(const struct cc *c, const char *uri);
void schema__anchor_key(const struct sres *r, const char *name, struct sbuf *b);
struct snode *schema__compile(struct cc *c, const cJSON *j, struct sres *res, int depth);
/* schema_ref.c */
int schema__resolve(struct cc *c, int index);
void schema__index_dynamic_anchors(struct schema *s);
int schema__find_cycle(struct cc *c);

#endif
