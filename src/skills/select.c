/* select.c - see select.h: the index, queries and the confidence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"
#include "select_impl.h"
#include "tokenize.h"
#include "util.h"

#define SEL_DECLARED_CONF 0.6f /* see rank_locked */
#define SEL_TINY 8             /* fewer skills than this: see rank_locked */

struct selector *selector_new(const struct sel_params *p) {
  struct selector *s = xcalloc(1, sizeof *s);
  if (p)
    s->p = *p;
  else
    sel_params_default(&s->p);
  s->tabcap = 1024;
  s->table = xmalloc(sizeof *s->table * s->tabcap);
  memset(s->table, 0xff, sizeof *s->table * s->tabcap);
  pthread_mutex_init(&s->mu, NULL);
  return s;
}

void selector_free(struct selector *s) {
  if (!s) return;
  for (size_t i = 0; i < s->ndocs; i++) {
    free(s->names[i]);
    if (s->etext) free(s->etext[i]);
  }
  free(s->names);
  free(s->etext);
  free(s->always);
  free(s->arena);
  free(s->term_off);
  free(s->table);
  free(s->pairs);
  free(s->pterms);
  free(s->phrases);
  free(s->post_off);
  free(s->post);
  free(s->idf);
  free(s->dsum_idf);
  free(s->phr_off);
  free(s->phr_sorted);
  sel__emat_free(&s->em);
  sel__emat_free(&s->bm_own);
  free(s->bcos);
  free(s->score);
  free(s->cos);
  free(s->midf);
  free(s->qstamp);
  free(s->touched_flag);
  free(s->touched);
  free(s->qdims);
  free(s->qseq);
  free(s->hits);
  free(s->heap);
  sel__free_examples(s);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

bool selector_has_embeddings(const struct selector *s) {
  return s->em.mat != NULL;
}
size_t selector_cache_hits(const struct selector *s) {
  return s->cache_hits;
}

static uint64_t hash_str(const char *w, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)w[i];
    h *= 0x100000001b3ULL;
  }
  return h ^ (h >> 29);
}

static const char *term_str(const struct selector *s, uint32_t t) {
  return s->arena + s->term_off[t];
}

/* The term id of w, or NO_TERM when absent and !add. */
static uint32_t term_id(struct selector *s, const char *w, size_t n, int add) {
  size_t mask = s->tabcap - 1;
  size_t i = hash_str(w, n) & mask;
  while (s->table[i] != NO_TERM) {
    const char *t = term_str(s, s->table[i]);
    if (!strncmp(t, w, n) && t[n] == 0) return s->table[i];
    i = (i + 1) & mask;
  }
  if (!add) return NO_TERM;
  if (s->nterms == s->capterms) {
    s->capterms = s->capterms ? s->capterms * 2 : 1024;
    s->term_off = xrealloc(s->term_off, sizeof *s->term_off * s->capterms);
  }
  if (s->arena_len + n + 1 > s->arena_cap) {
    while (s->arena_len + n + 1 > s->arena_cap)
      s->arena_cap = s->arena_cap ? s->arena_cap * 2 : 8192;
    s->arena = xrealloc(s->arena, s->arena_cap);
  }
  memcpy(s->arena + s->arena_len, w, n);
  s->arena[s->arena_len + n] = 0;
  uint32_t id = (uint32_t)s->nterms++;
  s->term_off[id] = (uint32_t)s->arena_len;
  s->arena_len += n + 1;
  s->table[i] = id;
  if (s->nterms * 2 > s->tabcap) { /* grow and rehash */
    size_t cap = s->tabcap * 2;
    uint32_t *tab = xmalloc(sizeof *tab * cap);
    memset(tab, 0xff, sizeof *tab * cap);
    for (uint32_t t = 0; t < s->nterms; t++) {
      const char *str = term_str(s, t);
      size_t j = hash_str(str, strlen(str)) & (cap - 1);
      while (tab[j] != NO_TERM) j = (j + 1) & (cap - 1);
      tab[j] = t;
    }
    free(s->table);
    s->table = tab;
    s->tabcap = cap;
  }
  return id;
}

struct addst {
  struct selector *s;
  uint32_t doc;
  float w;
  int phrase; /* also collect the sequence as a phrase */
  float len;  /* length weight of each word */
};

static void push_pair(struct selector *s, uint32_t term, uint32_t doc, float w, float len) {
  if (s->npairs == s->cappairs) {
    s->cappairs = s->cappairs ? s->cappairs * 2 : 4096;
    s->pairs = xrealloc(s->pairs, sizeof *s->pairs * s->cappairs);
  }
  s->pairs[s->npairs++] = (struct pair){term, doc, w, len};
}

static int add_word(void *ud, const char *w, size_t wl, const char *stem, size_t sl) {
  (void)w;
  (void)wl;
  struct addst *a = ud;
  struct selector *s = a->s;
  uint32_t t = term_id(s, stem, sl, 1);
  push_pair(s, t, a->doc, a->w, a->len);
  if (a->phrase) {
    if (s->npterms == s->cappterms) {
      s->cappterms = s->cappterms ? s->cappterms * 2 : 1024;
      s->pterms = xrealloc(s->pterms, sizeof *s->pterms * s->cappterms);
    }
    s->pterms[s->npterms++] = t;
  }
  return 0;
}

/* phrase: 0 none, 1 the name, 2 a declared keyword or tag */
static void add_field(struct selector *s, uint32_t doc, const char *text, float w, int phrase) {
  if (!text || !*text) return;
  struct addst a = {s, doc, w, phrase, w < 0 ? 0 : w};
  if (w < 0) a.w = -w; /* a negative weight: the body, which adds no length */
  size_t start = s->npterms;
  tok_words(text, strlen(text), add_word, &a);
  if (phrase && s->npterms > start) {
    if (s->nphrases == s->capphrases) {
      s->capphrases = s->capphrases ? s->capphrases * 2 : 256;
      s->phrases = xrealloc(s->phrases, sizeof *s->phrases * s->capphrases);
    }
    s->phrases[s->nphrases++] = (struct phrase){s->pterms[start], doc, (uint32_t)start,
                                                (uint32_t)(s->npterms - start), phrase == 2};
  }
}

static void cat_list(struct sbuf *b, const char *const *l) {
  for (size_t i = 0; l && l[i]; i++) {
    sbuf_puts(b, l[i]);
    sbuf_puts(b, ". ");
  }
}

/* A copy of text's first max bytes at most, cut on a UTF-8 boundary. */
static char *cut_copy(const char *text, size_t max) {
  size_t n = strlen(text);
  if (n > max) {
    n = max;
    while (n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80) n--;
  }
  char *t = xmalloc(n + 1);
  memcpy(t, text, n);
  t[n] = 0;
  return t;
}

/* The first SEL_BODY_BYTES of the instructions, cut on a UTF-8 boundary. */
#define SEL_BODY_BYTES 4000
static void add_body(struct selector *s, uint32_t doc, const char *body, float w) {
  char *t = cut_copy(body, SEL_BODY_BYTES);
  /* Instructions run to hundreds of words: counted in the document's
   * length they would push a skill that has them below one that has none. */
  add_field(s, doc, t, -w, 0);
  free(t);
}

size_t selector_add(struct selector *s, const struct sel_doc *d) {
  if (s->ndocs == s->capdocs) {
    s->capdocs = s->capdocs ? s->capdocs * 2 : 64;
    s->names = xrealloc(s->names, sizeof *s->names * s->capdocs);
    s->etext = xrealloc(s->etext, sizeof *s->etext * s->capdocs);
    s->always = xrealloc(s->always, sizeof *s->always * s->capdocs);
  }
  uint32_t doc = (uint32_t)s->ndocs++;
  s->names[doc] = xstrdup(d->name ? d->name : "");
  s->always[doc] = d->always;
  const struct sel_params *prm = &s->p;
  add_field(s, doc, d->name, (float)prm->f_name, 1);
  /* the name written as one word ("webcheck", "gethealthworkforce") */
  if (d->name) {
    char joined[TOK_MAX + 1];
    size_t n = 0;
    for (const char *p = d->name; *p && n < TOK_MAX; p++)
      if ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'))
        joined[n++] = *p;
      else if (*p >= 'A' && *p <= 'Z')
        joined[n++] = (char)(*p + 32);
    joined[n] = 0;
    int multi = 0;
    for (const char *p = d->name; *p; p++)
      multi |= !((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'));
    if (multi && n >= 3) {
      uint32_t t = term_id(s, joined, n, 1);
      push_pair(s, t, doc, (float)prm->f_name, (float)prm->f_name);
    }
  }
  add_field(s, doc, d->description, (float)prm->f_description, 0);
  for (size_t i = 0; d->keywords && d->keywords[i]; i++)
    add_field(s, doc, d->keywords[i], (float)prm->f_keywords, 2);
  for (size_t i = 0; d->tags && d->tags[i]; i++)
    add_field(s, doc, d->tags[i], (float)prm->f_tags, 2);
  /* the first SEL_EXAMPLES_MAX examples, each cut to SEL_EXAMPLE_BYTES:
   * a huge list costs no more than eight short examples */
  char *ex[SEL_EXAMPLES_MAX];
  size_t nex = 0;
  for (; d->examples && d->examples[nex] && nex < SEL_EXAMPLES_MAX; nex++) {
    ex[nex] = cut_copy(d->examples[nex], SEL_EXAMPLE_BYTES);
    if (prm->f_examples > 0) add_field(s, doc, ex[nex], (float)prm->f_examples, 0);
    if (prm->w_examples > 0) sel__add_example(s, doc, ex[nex]);
  }
  for (size_t i = 0; d->extra && d->extra[i]; i++)
    add_field(s, doc, d->extra[i], (float)prm->f_tools, 0);
  if (d->body && prm->f_body > 0) add_body(s, doc, d->body, (float)prm->f_body);
  struct sbuf b = {0};
  if (d->name) {
    sbuf_puts(&b, d->name);
    sbuf_puts(&b, ". ");
  }
  if (d->description) {
    sbuf_puts(&b, d->description);
    sbuf_puts(&b, " ");
  }
  cat_list(&b, d->keywords);
  cat_list(&b, d->tags);
  /* the examples, bounded as their own documents are, also shape the
   * skill's vector (their centroid with the description is what carries
   * them on the embedding side: bench/README.md) */
  for (size_t i = 0; i < nex; i++) {
    sbuf_puts(&b, ex[i]);
    sbuf_puts(&b, ". ");
    free(ex[i]);
  }
  cat_list(&b, d->extra);
  s->etext[doc] = b.s ? sbuf_take(&b) : xstrdup("");
  return doc;
}

static int cmp_pair(const void *a, const void *b) {
  const struct pair *x = a, *y = b;
  if (x->term != y->term) return x->term < y->term ? -1 : 1;
  if (x->doc != y->doc) return x->doc < y->doc ? -1 : 1;
  return 0;
}

static int cmp_phrase(const void *a, const void *b) {
  const struct phrase *x = a, *y = b;
  if (x->first != y->first) return x->first < y->first ? -1 : 1;
  return x->doc < y->doc ? -1 : x->doc > y->doc;
}

int selector_build(struct selector *s, struct embedder *m, struct store *st, int *degraded,
                   struct err *warn) {
  if (degraded) *degraded = 0;
  size_t N = s->ndocs;
  /* postings: sort pairs by (term, doc), merge duplicates */
  if (s->npairs > 1) qsort(s->pairs, s->npairs, sizeof *s->pairs, cmp_pair);
  size_t np = 0;
  for (size_t i = 0; i < s->npairs; i++) {
    if (np && s->pairs[np - 1].term == s->pairs[i].term &&
        s->pairs[np - 1].doc == s->pairs[i].doc) {
      s->pairs[np - 1].w += s->pairs[i].w;
      s->pairs[np - 1].len += s->pairs[i].len;
    } else
      s->pairs[np++] = s->pairs[i];
  }
  double *dl = xcalloc(N ? N : 1, sizeof *dl);
  double total = 0;
  for (size_t i = 0; i < np; i++) {
    dl[s->pairs[i].doc] += s->pairs[i].len;
    total += s->pairs[i].len;
  }
  double avgdl = N ? total / (double)N : 1;
  if (avgdl <= 0) avgdl = 1;
  s->post_off = xcalloc(s->nterms + 1, sizeof *s->post_off);
  s->post = xmalloc(sizeof *s->post * (np ? np : 1));
  s->idf = xmalloc(sizeof *s->idf * (s->nterms ? s->nterms : 1));
  for (size_t i = 0; i < np; i++) s->post_off[s->pairs[i].term + 1]++;
  for (size_t t = 0; t < s->nterms; t++) {
    double df = s->post_off[t + 1];
    s->idf[t] = (float)log(1.0 + ((double)N - df + 0.5) / (df + 0.5));
    s->post_off[t + 1] += s->post_off[t];
  }
  s->idf_max = (float)log(1.0 + ((double)N - 0.5) / 1.5);
  if (s->idf_max < 0.1f) s->idf_max = 0.1f;
  double k1 = s->p.k1, b = s->p.b;
  for (size_t i = 0; i < np; i++) {
    const struct pair *pr = &s->pairs[i];
    double tf = pr->w;
    double norm = k1 * (1.0 - b + b * dl[pr->doc] / avgdl);
    s->post[i].doc = pr->doc;
    s->post[i].w = (float)(s->idf[pr->term] * tf * (k1 + 1.0) / (tf + norm));
  }
  free(dl);
  s->dsum_idf = xcalloc(N ? N : 1, sizeof *s->dsum_idf);
  for (size_t i = 0; i < np; i++) s->dsum_idf[s->pairs[i].doc] += s->idf[s->pairs[i].term];
  free(s->pairs);
  s->pairs = NULL;
  s->npairs = s->cappairs = 0;
  /* phrases by first term */
  if (s->nphrases > 1) qsort(s->phrases, s->nphrases, sizeof *s->phrases, cmp_phrase);
  s->phr_off = xcalloc(s->nterms + 1, sizeof *s->phr_off);
  for (size_t i = 0; i < s->nphrases; i++) s->phr_off[s->pterms[s->phrases[i].off] + 1]++;
  for (size_t t = 0; t < s->nterms; t++) s->phr_off[t + 1] += s->phr_off[t];
  s->phr_sorted = s->phrases;
  s->phrases = NULL;
  /* query scratch */
  s->score = xcalloc(N ? N : 1, sizeof *s->score);
  s->cos = xcalloc(N ? N : 1, sizeof *s->cos);
  s->midf = xcalloc(N ? N : 1, sizeof *s->midf);
  s->qstamp = xcalloc(s->nterms ? s->nterms : 1, sizeof *s->qstamp);
  s->touched_flag = xcalloc(N ? N : 1, 1);
  s->touched = xmalloc(sizeof *s->touched * (N ? N : 1));
  s->qseq = xmalloc(sizeof *s->qseq * MAX_QTERMS);
  s->hits = xmalloc(sizeof *s->hits * 2 * SEL_DEPTH);
  s->heap = xmalloc(sizeof *s->heap * (SEL_DEPTH + 1));
  s->built = true;
  /* embeddings */
  int rc = 0;
  if (m && N) {
    float *vecs = NULL;
    int dim = 0;
    size_t hits = 0;
    rc = embedder_embed_cached(m, st, (const char *const *)s->etext, N, &vecs, &dim, &hits, warn);
    if (rc == 0) {
      s->emb = m;
      s->cache_hits = hits;
      sel__emat_fill(&s->em, vecs, dim, N);
      if (embedder_kind(m) == EMBED_BUILTIN) {
        s->bm = &s->em;
      } else { /* the confidence's own evidence: the builtin embedding */
        int bd = EMBED_BUILTIN_DIM;
        float *bv = xmalloc(sizeof *bv * (size_t)bd * N);
        for (size_t d = 0; d < N; d++)
          embed_builtin(s->etext[d], strlen(s->etext[d]), bv + d * (size_t)bd, bd);
        sel__emat_fill(&s->bm_own, bv, bd, N);
        free(bv);
        s->bm = &s->bm_own;
        s->bcos = xcalloc(N, sizeof *s->bcos);
      }
      int qd = dim > s->bm->dim ? dim : s->bm->dim;
      s->qdims = xmalloc(sizeof *s->qdims * (size_t)qd);
      s->qdims_max = SEL_QDIMS;
    } else {
      err_prefix(warn, "embedding unavailable, selecting by keywords only");
      if (degraded) *degraded = 1;
    }
    free(vecs);
  } else if (m) {
    s->emb = m;
  }
  for (size_t i = 0; i < N; i++) {
    free(s->etext[i]);
    s->etext[i] = NULL;
  }
  if (s->ex) sel__build_examples(s);
  return 0;
}

/* ---- queries ----------------------------------------------------------- */

struct qst {
  struct selector *s;
  size_t n;
};

static int q_word(void *ud, const char *w, size_t wl, const char *stem, size_t sl) {
  (void)w;
  (void)wl;
  struct qst *q = ud;
  if (q->n >= MAX_QTERMS) return 1;
  q->s->qseq[q->n++] = term_id(q->s, stem, sl, 0);
  /* the word as written may be a joined skill name ("webcheck") */
  if (wl != sl && q->n < MAX_QTERMS) {
    uint32_t t = term_id(q->s, w, wl, 0);
    if (t != NO_TERM) q->s->qseq[q->n++] = t;
  }
  return 0;
}

/* Min-heap of doc ids keyed by key[doc] (then by lower doc id winning). */
static int heap_less(const float *key, uint32_t a, uint32_t b) {
  return key[a] < key[b] || (key[a] == key[b] && a > b);
}
static void heap_down(uint32_t *h, size_t n, size_t i, const float *key) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && heap_less(key, h[l], h[m])) m = l;
    if (r < n && heap_less(key, h[r], h[m])) m = r;
    if (m == i) return;
    uint32_t t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
}
static void heap_up(uint32_t *h, size_t i, const float *key) {
  while (i && heap_less(key, h[i], h[(i - 1) / 2])) {
    uint32_t t = h[i];
    h[i] = h[(i - 1) / 2];
    h[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

/* Top k docs among cand[0..n) (or all docs if cand is NULL) by key,
 * best first, into out; returns the count. */
static size_t top_k(uint32_t *heap, const float *key, const uint32_t *cand, size_t n, size_t k,
                    uint32_t *out) {
  size_t hn = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t d = cand ? cand[i] : (uint32_t)i;
    if (hn < k) {
      heap[hn] = d;
      heap_up(heap, hn++, key);
    } else if (heap_less(key, heap[0], d)) {
      heap[0] = d;
      heap_down(heap, hn, 0, key);
    }
  }
  size_t cnt = hn;
  while (hn) { /* pop ascending into out from the back */
    out[--hn] = heap[0];
    heap[0] = heap[hn];
    heap_down(heap, hn, 0, key);
  }
  return cnt;
}

/* ---- confidence ---------------------------------------------------------
 * The confidence of a candidate is a logistic model of its evidence, so
 * that it reads as "the chance this is the right skill" and one threshold
 * means the same in every collection. Every feature is normalised against
 * this query's scores over the collection, never an absolute score:
 *   f0  log(1 + bm25 / largest IDF of the collection)
 *   f1  coverage: the share of the query's known-word IDF the doc matched
 *   f2  the cosine as a z-score over all documents for this query
 *   f3  BM25 margin over the best other candidate (/ largest IDF)
 *   f4  cosine margin over the best other candidate (in standard deviations)
 *   f5  1 / rank in the keyword list (0 when not in it)
 *   f6  the cosine itself (the builtin embedding's scale)
 *   f7  a keyword or the name occurred in the query as a whole phrase
 *   f8  log(1 + the best example's BM25 / the examples' largest IDF)
 *   f9  the best example's IDF-weighted word overlap with the query
 *   f10 the best example's builtin cosine
 *   f11 that cosine as a z-score over all examples (f10 and f11 are 0 in
 *       a handful of skills, like f2)
 *   f12 the skill has examples at all
 * Agreement between the keyword and the embedding side is f0..f1 with
 * f2/f6 together. The weights were fitted (weighted logistic regression,
 * `bench_select DIR --fit`) on the development splits only: the right
 * skills of MetaTool, Seal-Tools and the 75 Agent Skills requests against
 * what two cross-domain unrelated-request sets bring up, and at half weight
 * the same with examples (MetaTool with two per tool, the Agent Skills with
 * one, unrelated requests against MetaTool with examples; bench/README.md),
 * so the confidence tells a right skill from an unrelated one (fitted with
 * fields.body = 0; indexing the body at 0.4 later moved no figure of the
 * unrelated sets by more than a point, see bench/README.md). Without
 * embeddings f2, f4, f6, f10, f11 are zero and the second set of weights
 * applies. */
static const float conf_w_emb[SEL_NFEAT + 1] = {-8.831f, 2.815f, -0.014f, 3.748f,  -0.135f,
                                                -2.368f, 0.468f, 15.833f, -0.134f, 0.637f,
                                                4.013f,  3.422f, -5.808f, 0.100f};
static const float conf_w_kw[SEL_NFEAT + 1] = {-8.030f, 6.095f, -0.131f, 0.000f,  -0.341f,
                                               0.000f,  0.456f, 0.000f,  -0.181f, -0.294f,
                                               4.731f,  0.000f, 0.000f,  -0.189f};

static float clampf(float x, float lo, float hi) {
  return x < lo ? lo : x > hi ? hi : x;
}

static float conf_logit(const struct selector *s, const float *f, bool have_emb) {
  const float *w = have_emb ? (s->p.conf_w_emb ? s->p.conf_w_emb : conf_w_emb)
                            : (s->p.conf_w_kw ? s->p.conf_w_kw : conf_w_kw);
  float z = w[0];
  for (int i = 0; i < SEL_NFEAT; i++) z += w[i + 1] * f[i];
  return z;
}

/* The query vector from an HTTP provider, fetched before taking the mutex
 * so a slow endpoint never blocks other selections. NULL when not needed
 * or on failure (then *failed is set and warn says why). */
static float *remote_query_vec(struct selector *s, const char *query, enum sel_mode mode,
                               int *failed, struct err *warn) {
  *failed = 0;
  if (mode == SEL_BM25 || !s->em.mat || !s->emb || embedder_kind(s->emb) == EMBED_BUILTIN)
    return NULL;
  float *v = NULL;
  int d2 = 0;
  const char *texts[1] = {query};
  if (embedder_embed(s->emb, texts, 1, &v, &d2, warn) || d2 != s->em.dim) {
    if (v && d2 != s->em.dim)
      err_set(warn, ERR_IO, "embed_error",
              "embeddings: the message vector has %d dimensions, the skills' have %d", d2,
              s->em.dim);
    err_prefix(warn, "embedding the message failed, selecting by keywords only");
    free(v);
    *failed = 1;
    return NULL;
  }
  return v;
}

size_t sel__kw_scores(struct selector *s, const char *query, size_t *qn, double *qidf,
                      size_t *unknown) {
  struct qst q = {s, 0};
  tok_words(query, strlen(query), q_word, &q);
  *qn = q.n;
  *qidf = 0;
  if (unknown) {
    *unknown = 0;
    for (size_t i = 0; i < q.n; i++) *unknown += s->qseq[i] == NO_TERM;
  }
  size_t ntouched = 0;
  if (++s->qcount == 0) { /* the stamp wrapped: start over */
    memset(s->qstamp, 0, sizeof *s->qstamp * (s->nterms ? s->nterms : 1));
    s->qcount = 1;
  }
  for (size_t i = 0; i < q.n; i++) {
    uint32_t t = s->qseq[i];
    if (t == NO_TERM || s->qstamp[t] == s->qcount) continue; /* each word counts once */
    s->qstamp[t] = s->qcount;
    float idf = s->idf[t];
    *qidf += idf;
    for (uint32_t k = s->post_off[t]; k < s->post_off[t + 1]; k++) {
      uint32_t d = s->post[k].doc;
      if (!s->touched_flag[d]) {
        s->touched_flag[d] = 1;
        s->touched[ntouched++] = d;
        s->score[d] = 0;
        s->midf[d] = 0;
      }
      s->score[d] += s->post[k].w;
      s->midf[d] += idf;
    }
  }
  return ntouched;
}

/* The core of rank/select, with the mutex held. Fills s->hits with up to
 * 2*SEL_DEPTH candidates (unsorted) and returns their count. */
static size_t rank_locked(struct selector *s, const char *query, const float *qremote, int qfailed,
                          enum sel_mode mode, bool *use_emb_out) {
  size_t N = s->ndocs;
  if (!s->built || !N) return 0;
  /* embedding side */
  bool use_emb = mode != SEL_BM25 && s->em.mat && !qfailed;
  float cmean = 0, csd = 1, bmean = 0, bsd = 1;
  const float *bc = s->cos; /* the builtin cosines the confidence reads */
  if (use_emb) {
    sel__cosines(s, &s->em, query, qremote, s->cos, &cmean, &csd);
    if (s->bm != &s->em) {
      sel__cosines(s, s->bm, query, NULL, s->bcos, &bmean, &bsd);
      bc = s->bcos;
    } else {
      bmean = cmean, bsd = csd;
    }
  }
  if (mode == SEL_EMBED && !use_emb) mode = SEL_BM25; /* no embeddings: keywords */
  /* keyword side */
  bool want_kw = mode != SEL_EMBED;
  size_t qn = 0;
  double qidf = 0; /* summed IDF of the distinct known query words */
  size_t ntouched = want_kw ? sel__kw_scores(s, query, &qn, &qidf, NULL) : 0;
  struct qst q = {s, qn};
  /* keyword/name phrase hits */
  for (size_t i = 0; i < q.n && want_kw && s->p.keyword_boost > 0; i++) {
    uint32_t t = s->qseq[i];
    if (t == NO_TERM) continue;
    for (uint32_t k = s->phr_off[t]; k < s->phr_off[t + 1]; k++) {
      const struct phrase *ph = &s->phr_sorted[k];
      if (i + ph->len > q.n) continue;
      int match = 1;
      float idfsum = 0;
      for (uint32_t j = 0; j < ph->len && match; j++) {
        match = s->qseq[i + j] == s->pterms[ph->off + j];
        idfsum += s->idf[s->pterms[ph->off + j]];
      }
      if (!match) continue;
      uint32_t d = ph->doc; /* a phrase's words are in the doc: it is touched */
      if (s->touched_flag[d] < 3) s->touched_flag[d] = ph->declared ? 3 : 2;
      s->score[d] += (float)s->p.keyword_boost * idfsum;
    }
  }
  if (s->ex) ntouched = sel__merge_examples(s, query, use_emb, want_kw, qidf, ntouched);
  *use_emb_out = use_emb;
  /* ranked lists */
  uint32_t bm_top[SEL_DEPTH], em_top[SEL_DEPTH];
  size_t nb = 0, ne = 0;
  if (mode != SEL_EMBED) nb = top_k(s->heap, s->score, s->touched, ntouched, SEL_DEPTH, bm_top);
  if (use_emb && mode != SEL_BM25) ne = top_k(s->heap, s->cos, NULL, N, SEL_DEPTH, em_top);
  /* candidates: union of both lists */
  size_t nh = 0;
  for (size_t pass = 0; pass < 2; pass++) {
    const uint32_t *lst = pass ? em_top : bm_top;
    size_t ln = pass ? ne : nb;
    for (size_t r = 0; r < ln; r++) {
      uint32_t d = lst[r];
      struct sel_hit *h = NULL;
      for (size_t k = 0; k < nh && pass; k++)
        if (s->hits[k].doc == d) h = &s->hits[k];
      if (!h) {
        h = &s->hits[nh++];
        memset(h, 0, sizeof *h);
        h->doc = d;
        h->bm25 = s->touched_flag[d] ? s->score[d] : 0;
        h->keyword_hit = s->touched_flag[d] >= 2;
        h->declared_hit = s->touched_flag[d] == 3;
        h->coverage = s->touched_flag[d] && qidf > 0 ? (float)(s->midf[d] / qidf) : 0;
        h->cosine = use_emb ? s->cos[d] : 0;
        h->cos_z = use_emb ? (bc[d] - bmean) / bsd : 0;
        h->always = s->always[d];
      }
      if (pass)
        h->rank_embed = (int)r + 1;
      else
        h->rank_bm25 = (int)r + 1;
    }
  }
  double k = s->p.rrf_k;
  float im = s->idf_max;
  /* A handful of skills has no distribution to rank or z-score against:
   * every hit is first and the margins say nothing, so those features are
   * left out (the weights were fitted on collections of 75 to 4,076). */
  bool tiny = N < SEL_TINY;
  for (size_t i = 0; i < nh; i++) {
    struct sel_hit *h = &s->hits[i];
    double f = 0;
    if (mode == SEL_BM25)
      f = h->rank_bm25 ? 1.0 / (k + h->rank_bm25) : 0;
    else if (mode == SEL_EMBED)
      f = h->rank_embed ? 1.0 / (k + h->rank_embed) : 0;
    else {
      if (h->rank_bm25) f += s->p.w_bm25 / (k + h->rank_bm25);
      if (h->rank_embed) f += s->p.w_embed / (k + h->rank_embed);
    }
    h->fused = (float)f;
    /* the best other candidate on each side */
    float ob = 0, oc = 0;
    if (nb) ob = bm_top[0] != h->doc ? s->score[bm_top[0]] : nb > 1 ? s->score[bm_top[1]] : 0;
    if (ne) oc = em_top[0] != h->doc ? bc[em_top[0]] : ne > 1 ? bc[em_top[1]] : bmean;
    float *x = h->feat;
    x[0] = logf(1.0f + h->bm25 / im);
    x[1] = h->coverage;
    x[2] = use_emb && !tiny ? clampf(h->cos_z, -5, 20) / 10 : 0;
    x[3] = nb && !tiny ? clampf((h->bm25 - ob) / im, -3, 3) : 0;
    x[4] = use_emb && ne && !tiny ? clampf((bc[h->doc] - oc) / bsd, -5, 5) / 5 : 0;
    x[5] = h->rank_bm25 && !tiny ? 1.0f / (float)h->rank_bm25 : 0;
    x[6] = use_emb ? bc[h->doc] : 0;
    x[7] = h->keyword_hit ? 1 : 0;
    bool exk = s->ex && want_kw, exe = s->ex && use_emb && s->exv_off && !tiny;
    exk = exk && s->ex_stamp[h->doc] == s->ex_q; /* an example of it matched a word */
    x[8] = exk ? logf(1.0f + s->ex_kw[h->doc]) : 0;
    x[9] = exk ? s->ex_ovl[h->doc] : 0;
    /* the examples' cosine and its z-score go together (fitted as a pair:
     * close, but not standing out among all examples, is weak evidence);
     * a handful of skills gives no z-score, so neither counts there */
    float ec = exe ? sel__example_cos(s, (uint32_t)h->doc) : 0;
    x[10] = ec;
    x[11] = exe ? clampf((ec - s->ex_bmean) / s->ex_bsd, -5, 20) / 10 : 0;
    /* whether the skill has examples at all: without it, a skill with
     * none would read as one whose examples all missed */
    x[12] = s->ex && s->ex_has[h->doc] ? 1 : 0;
    float z = conf_logit(s, x, use_emb);
    h->confidence = 1.0f / (1.0f + expf(-z));
    /* A keyword or tag its author declared, found whole in the request, is
     * evidence the benchmarks cannot weigh (their tools have none): it
     * sets a floor under the confidence. */
    if (h->declared_hit && h->confidence < SEL_DECLARED_CONF) h->confidence = SEL_DECLARED_CONF;
  }
  /* The order: by confidence (RRF breaks ties) when the confidence sees the
   * vectors that rank; with another embedder, by RRF, so that its list
   * counts (the confidence still decides what is selected). */
  bool own_vectors = !use_emb || s->bm == &s->em;
  if (mode == SEL_FUSED && !s->p.rank_fused_rrf && own_vectors)
    for (size_t i = 0; i < nh; i++) {
      struct sel_hit *h = &s->hits[i];
      float rrf = h->fused;
      h->fused = h->confidence + rrf * 1e-3f;
    }
  /* margins over the best other candidate's confidence */
  float c1 = 0, c2 = 0;
  for (size_t i = 0; i < nh; i++) {
    float c = s->hits[i].confidence;
    if (c > c1) {
      c2 = c1;
      c1 = c;
    } else if (c > c2) {
      c2 = c;
    }
  }
  for (size_t i = 0; i < nh; i++) {
    struct sel_hit *h = &s->hits[i];
    h->margin = h->confidence - (h->confidence == c1 ? c2 : c1);
  }
  for (size_t i = 0; i < ntouched; i++) s->touched_flag[s->touched[i]] = 0;
  return nh;
}

static int cmp_hit(const void *a, const void *b) {
  const struct sel_hit *x = a, *y = b;
  if (x->fused != y->fused) return x->fused > y->fused ? -1 : 1;
  if (x->confidence != y->confidence) return x->confidence > y->confidence ? -1 : 1;
  return x->doc < y->doc ? -1 : x->doc > y->doc;
}

int selector_rank(struct selector *s, const char *query, enum sel_mode mode, struct sel_hit *out,
                  size_t max, size_t *n, int *degraded, struct err *warn) {
  if (degraded) *degraded = 0;
  *n = 0;
  int qfailed = 0;
  float *qv = remote_query_vec(s, query, mode, &qfailed, warn);
  if (qfailed && degraded) *degraded = 1;
  pthread_mutex_lock(&s->mu);
  bool use_emb = false;
  size_t nh = rank_locked(s, query, qv, qfailed, mode, &use_emb);
  if (nh > 1) qsort(s->hits, nh, sizeof *s->hits, cmp_hit);
  size_t k = nh < max ? nh : max;
  if (k) memcpy(out, s->hits, sizeof *out * k);
  *n = k;
  pthread_mutex_unlock(&s->mu);
  free(qv);
  return 0;
}

int selector_select(struct selector *s, const char *query, struct sel_hit *out, size_t max,
                    size_t *n, int *degraded, struct err *warn) {
  if (degraded) *degraded = 0;
  *n = 0;
  size_t k = 0;
  /* always-on skills first, in load order */
  for (size_t d = 0; d < s->ndocs && k < max; d++)
    if (s->always[d]) {
      memset(&out[k], 0, sizeof out[k]);
      out[k].doc = d;
      out[k].always = true;
      out[k].confidence = 1;
      k++;
    }
  int qfailed = 0;
  float *qv = remote_query_vec(s, query, SEL_FUSED, &qfailed, warn);
  if (qfailed && degraded) *degraded = 1;
  pthread_mutex_lock(&s->mu);
  bool use_emb = false;
  size_t nh = rank_locked(s, query, qv, qfailed, SEL_FUSED, &use_emb);
  if (nh > 1) qsort(s->hits, nh, sizeof *s->hits, cmp_hit);
  int picked = 0;
  for (size_t i = 0; i < nh && k < max && picked < s->p.max_skills; i++) {
    const struct sel_hit *h = &s->hits[i];
    if (h->always) { /* already in; keep its scores for --explain */
      for (size_t j = 0; j < k; j++)
        if (out[j].doc == h->doc) out[j] = *h;
      continue;
    }
    /* the best must reach min_confidence; once the message is about some
     * skill, runners-up that may be the right one join it more easily */
    double need = picked ? s->p.min_confidence * s->p.extra_share : s->p.min_confidence;
    if (h->confidence < need) continue;
    out[k++] = *h;
    picked++;
  }
  pthread_mutex_unlock(&s->mu);
  free(qv);
  *n = k;
  return 0;
}

const char *selector_name(const struct selector *s, size_t i) {
  return i < s->ndocs ? s->names[i] : NULL;
}
