/* schema_ref.c - resolving $ref and $dynamicRef after the compile walk,
 * and refusing cycles of in-place applications (see schema_compile.c). */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schema_impl.h"
#include "util.h"

static int member_cmp(const void *a, const void *b) {
  return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static const cJSON *member(struct cc *c, const cJSON *obj, const char *key) {
  int n = 0;
  for (const cJSON *x = obj->child; x && n <= 32; x = x->next) n++;
  if (n <= 32) return cJSON_GetObjectItemCaseSensitive(obj, key);
  struct objidx *ix = NULL;
  for (int i = 0; i < c->nidx && !ix; i++)
    if (c->idx[i].obj == obj) ix = &c->idx[i];
  if (!ix) {
    c->idx = schema__grow(c->idx, (size_t)c->nidx, sizeof *c->idx);
    ix = &c->idx[c->nidx++];
    ix->obj = obj;
    ix->n = 0;
    for (const cJSON *x = obj->child; x; x = x->next) ix->n++;
    ix->members = xmalloc((size_t)ix->n * sizeof *ix->members);
    int k = 0;
    for (const cJSON *x = obj->child; x; x = x->next) ix->members[k++] = x;
    qsort(ix->members, (size_t)ix->n, sizeof *ix->members, member_cmp);
  }
  int lo = 0, hi = ix->n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (strcmp(ix->members[mid]->string, key) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < ix->n && !strcmp(ix->members[lo]->string, key) ? ix->members[lo] : NULL;
}

/* Resolves one $ref / $dynamicRef; 0 or -1. */
int schema__resolve(struct cc *c, int index) {
  struct pending pc = c->pend[index], *p = &pc; /* schema__compile() below may move c->pend */
  int rc = -1;
  const char *kw = p->dynamic ? "$dynamicRef" : "$ref";
  c->kw = kw;
  snprintf(c->ptr, sizeof c->ptr, "%s", p->ptr);
  c->plen = strlen(c->ptr);
  char *full = schema__uri_resolve(p->res->uri, p->ref);
  char *frag = strchr(full, '#');
  if (frag)
    *frag++ = 0;
  else
    frag = full + strlen(full);
  schema__percent_decode(frag);
  struct sres *r = schema__res_find(c, full);
  if (!r) {
    schema__cfail(c, "remote '%s' \"%s\" is not supported (only refs inside the schema)", kw, p->ref);
    goto out;
  }
  const cJSON *target = r->root;
  const char *dyn_name = NULL;
  if (frag[0] == '/') {
    char *seg = frag + 1;
    while (target && seg) {
      char *next = strchr(seg, '/');
      if (next) *next++ = 0;
      char *o = seg; /* ~1 -> /, ~0 -> ~ */
      for (char *q = seg; *q; q++) {
        if (q[0] == '~' && q[1] == '1')
          *o++ = '/', q++;
        else if (q[0] == '~' && q[1] == '0')
          *o++ = '~', q++;
        else
          *o++ = *q;
      }
      *o = 0;
      if (cJSON_IsObject(target))
        target = member(c, target, seg);
      else if (cJSON_IsArray(target) && isdigit((unsigned char)seg[0]))
        target = cJSON_GetArrayItem(target, atoi(seg));
      else
        target = NULL;
      seg = next;
    }
  } else if (frag[0]) {
    target = NULL;
    struct sbuf key = {0};
    schema__anchor_key(r, frag, &key);
    int i = schema__smap_get(&c->anchors, key.s);
    sbuf_free(&key);
    if (i >= 0) {
      target = r->anchors[i].node;
      if (r->anchors[i].dynamic) dyn_name = r->anchors[i].name;
    }
  }
  if (!target) {
    schema__cfail(c, "'%s' \"%s\" points to nothing in the schema", kw, p->ref);
    goto out;
  }
  struct snode *t = schema__node_find(c, target);
  if (!t) {
    snprintf(c->ptr, sizeof c->ptr, "%s", p->ref);
    c->plen = strlen(c->ptr);
    if (!(t = schema__compile(c, target, r, 1))) goto out;
  }
  if (p->dynamic) {
    p->n->dyn_ref = t;
    p->n->dyn_name = dyn_name;
  } else {
    p->n->ref = t;
  }
  rc = 0;
out:
  free(full);
  return rc;
}

/* ---- $ref cycles that never descend into the value ---- */

/* The subschemas n applies to the same value (in place): $ref, every
 * possible $dynamicRef target, allOf, anyOf, oneOf, not, if/then/else,
 * dependentSchemas. Returns how many, in a new array *out. */
static int inplace_edges(const struct schema *s, const struct snode *n, struct snode ***out) {
  int lo = 0, hi = 0;
  if (n->dyn_name) schema__dyn_range(s->dyn, s->ndyn, n->dyn_name, &lo, &hi);
  int cap = 2 + n->nall + n->nany + n->none + 4 + n->ndep + (hi - lo), k = 0;
  struct snode **v = xcalloc((size_t)cap, sizeof *v);
  if (n->ref) v[k++] = n->ref;
  if (n->dyn_ref) v[k++] = n->dyn_ref;
  for (int i = lo; i < hi; i++) v[k++] = s->dyn[i]->s;
  for (int i = 0; i < n->nall; i++) v[k++] = n->all_of[i];
  for (int i = 0; i < n->nany; i++) v[k++] = n->any_of[i];
  for (int i = 0; i < n->none; i++) v[k++] = n->one_of[i];
  if (n->not_) v[k++] = n->not_;
  if (n->if_) v[k++] = n->if_;
  if (n->then_) v[k++] = n->then_;
  if (n->else_) v[k++] = n->else_;
  for (int i = 0; i < n->ndep; i++) v[k++] = n->dep_schemas[i].s;
  *out = v;
  return k;
}

static int dyn_cmp(const void *a, const void *b) {
  return strcmp((*(struct sanchor *const *)a)->name, (*(struct sanchor *const *)b)->name);
}

void schema__dyn_range(struct sanchor *const *v, int n, const char *name, int *lo, int *hi) {
  int a = 0, b = n;
  while (a < b) {
    int m = (a + b) / 2;
    if (strcmp(v[m]->name, name) < 0)
      a = m + 1;
    else
      b = m;
  }
  *lo = a;
  while (a < n && !strcmp(v[a]->name, name)) a++;
  *hi = a;
}

/* Sorted views of the $dynamicAnchors, per resource (for $dynamicRef at
 * run time) and for the whole schema (for find_cycle). */
void schema__index_dynamic_anchors(struct schema *s) {
  int total = 0;
  for (int r = 0; r < s->nres; r++) {
    struct sres *res = s->res[r];
    for (int k = 0; k < res->nanchors; k++) res->ndyn += res->anchors[k].dynamic;
    total += res->ndyn;
    if (!res->ndyn) continue;
    res->dyn = xcalloc((size_t)res->ndyn, sizeof *res->dyn);
    int j = 0;
    for (int k = 0; k < res->nanchors; k++)
      if (res->anchors[k].dynamic) res->dyn[j++] = &res->anchors[k];
    qsort(res->dyn, (size_t)res->ndyn, sizeof *res->dyn, dyn_cmp);
  }
  if (!total) return;
  s->dyn = xcalloc((size_t)total, sizeof *s->dyn);
  for (int r = 0; r < s->nres; r++)
    for (int k = 0; k < s->res[r]->ndyn; k++) s->dyn[s->ndyn++] = s->res[r]->dyn[k];
  qsort(s->dyn, (size_t)s->ndyn, sizeof *s->dyn, dyn_cmp);
}

/* Which keyword of n applies t in place. */
static const char *edge_keyword(const struct snode *n, const struct snode *t) {
  if (n->ref == t) return "$ref";
  for (int i = 0; i < n->nall; i++)
    if (n->all_of[i] == t) return "allOf";
  for (int i = 0; i < n->nany; i++)
    if (n->any_of[i] == t) return "anyOf";
  for (int i = 0; i < n->none; i++)
    if (n->one_of[i] == t) return "oneOf";
  if (n->not_ == t) return "not";
  if (n->if_ == t) return "if";
  if (n->then_ == t) return "then";
  if (n->else_ == t) return "else";
  for (int i = 0; i < n->ndep; i++)
    if (n->dep_schemas[i].s == t) return "dependentSchemas";
  return "$dynamicRef";
}

/* A cycle of in-place applications would recurse forever on any value
 * that reaches it ({"anyOf": [{"$ref": "#"}]}), and exponentially fast
 * with two branches: refuse it when compiling. Depth-first search with an
 * explicit stack (a long $ref chain must not overflow the C stack).
 * Returns 0, or -1 with c->e set. */
int schema__find_cycle(struct cc *c) {
  struct schema *s = c->s;
  size_t n = s->nnodes;
  unsigned char *color = xcalloc(n, 1); /* 0 new, 1 on the stack, 2 done */
  struct frame {
    struct snode *node, **edges;
    int nedges, next;
  } *stack = xcalloc(n, sizeof *stack);
  int rc = 0;
  for (size_t start = 0; start < n && !rc; start++) {
    if (color[start]) continue;
    size_t top = 0;
    stack[top].node = s->nodes[start];
    stack[top].nedges = inplace_edges(s, s->nodes[start], &stack[top].edges);
    stack[top].next = 0;
    color[start] = 1;
    top++;
    while (top && !rc) {
      struct frame *f = &stack[top - 1];
      if (f->next == f->nedges) {
        color[f->node->idx] = 2;
        free(f->edges);
        top--;
        continue;
      }
      struct snode *t = f->edges[f->next++];
      if (!t || t->boolean != -1 || color[t->idx] == 2) continue;
      if (color[t->idx] == 1) {
        snprintf(c->ptr, sizeof c->ptr, "%s", f->node->ptr);
        c->plen = strlen(c->ptr);
        c->kw = edge_keyword(f->node, t);
        schema__cfail(c, "'%s' leads back to %s without descending into the value (it would never end)",
              c->kw, t->ptr);
        rc = -1;
        break;
      }
      color[t->idx] = 1;
      stack[top].node = t;
      stack[top].nedges = inplace_edges(s, t, &stack[top].edges);
      stack[top].next = 0;
      top++;
    }
    while (top) free(stack[--top].edges);
  }
  free(stack);
  free(color);
  return rc;
}
