/* select_impl.h - what the selector's files share (select.c: the index,
 * queries and confidence; select_vec.c: the vector matrices and cosines;
 * select_examples.c: examples as documents of their own). Not a public
 * interface: select.h is. */
#ifndef LUAGENT_SELECT_IMPL_H
#define LUAGENT_SELECT_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "select.h"

struct embedder;
struct store;

/* Query dimensions the embedding side reads at most: a long message spreads
 * over every dimension of the hashed vector, and reading the whole matrix
 * for it costs more than the selection budget at 10,000+ skills; its
 * largest components carry nearly all of the cosine (bench_select). */
#define SEL_QDIMS 256
#define MAX_QTERMS 1024 /* words of a query the keyword side looks at */
#define NO_TERM UINT32_MAX
/* Examples: each of a skill's first SEL_EXAMPLES_MAX examples, cut to
 * SEL_EXAMPLE_BYTES, is a document of its own (select_examples.c); the
 * rest are not indexed, so a skill with a huge list costs what one with
 * eight short ones does. */
#define SEL_EXAMPLES_MAX 8
#define SEL_EXAMPLE_BYTES 512

/* ---- the index --------------------------------------------------------- */

struct pair { /* one weighted word occurrence, before building */
  uint32_t term, doc;
  float w;
  float len; /* what it adds to the document's length (0 for the body) */
};

struct posting {
  uint32_t doc;
  float w; /* precomputed BM25 contribution */
};

struct phrase {
  uint32_t first; /* its first term, the key of the phrase index */
  uint32_t doc;
  uint32_t off, len; /* into phrase_terms */
  uint32_t declared; /* 1: an author's keyword or tag, 0: the name */
};

struct qdim {
  float a; /* |q_j| */
  int j;
};

struct emat { /* dim-major int8: mat[j * ndocs + d] * rowscale[j] ~ vector */
  int dim;
  int8_t *mat;
  float *rowscale;
  float *qvec; /* query scratch */
};

struct selector {
  struct sel_params p;
  /* documents */
  size_t ndocs, capdocs;
  char **names;
  char **etext; /* text to embed, freed after build */
  bool *always;
  /* term dictionary: open addressing over term ids */
  char *arena;
  size_t arena_len, arena_cap;
  uint32_t *term_off; /* offset of each term's string in arena */
  size_t nterms, capterms;
  uint32_t *table; /* NO_TERM or a term id */
  size_t tabcap;
  /* building */
  struct pair *pairs;
  size_t npairs, cappairs;
  uint32_t *pterms; /* phrase term ids */
  size_t npterms, cappterms;
  struct phrase *phrases;
  size_t nphrases, capphrases;
  /* built */
  bool built;
  uint32_t *post_off; /* nterms + 1 */
  struct posting *post;
  float *idf;
  float idf_max;     /* IDF of a word found in one document */
  float *dsum_idf;   /* per document: the summed IDF of its distinct words */
  uint32_t *phr_off; /* by first term: nterms + 1 */
  struct phrase *phr_sorted;
  /* embeddings */
  struct embedder *emb;
  struct emat em; /* the embedder's vectors: ranking */
  /* The builtin embedding's vectors, which the confidence is calibrated on
   * whatever embedder ranks: &em when that is the builtin one, else their
   * own copy (bm_own), built only when the embedder works. */
  struct emat *bm, bm_own;
  size_t cache_hits;
  /* query scratch */
  pthread_mutex_t mu;
  float *score, *cos, *midf; /* midf: summed IDF of the query words a doc matched */
  uint32_t *qstamp;          /* per term: the query that last counted it */
  uint32_t qcount;
  uint8_t *touched_flag;
  uint32_t *touched;
  float *bcos;        /* builtin cosines when em is another embedder's */
  struct qdim *qdims; /* the query's nonzero dimensions, largest first */
  int qdims_max;      /* how many of them are read (SEL_QDIMS) */
  uint32_t *qseq;
  struct sel_hit *hits; /* candidate buffer, 2 * SEL_DEPTH */
  uint32_t *heap;
  /* examples (select_examples.c): ex holds one document per example,
   * ex_owner[e] the skill of example e (a skill's examples are
   * consecutive: ex_start[d] .. ex_start[d + 1]); exv_* their builtin
   * vectors, sparse (example e's nonzero dimensions are exv_dim[exv_off[e]
   * .. exv_off[e + 1]]), or NULL without embeddings; per skill, for the
   * last query: ex_kw its best example's BM25 over ex's largest IDF,
   * ex_ovl the best IDF-weighted word overlap; ex_bmean and ex_bsd the
   * mean and deviation of the query's cosine with the examples */
  struct selector *ex;
  uint32_t *ex_owner, *ex_start;
  uint32_t *exv_off;
  uint16_t *exv_dim;
  float *exv_val;
  size_t nex, capex;
  float *ex_kw, *ex_ovl; /* valid where ex_stamp[d] == ex_q (this query) */
  uint32_t *ex_stamp, ex_q;
  uint32_t *ex_list; /* scratch: the skills the query's examples touched */
  float *ex_rnorm;   /* per example: 1 / sqrt(its summed IDF) */
  uint8_t *ex_has;   /* per skill: 1 when it has an example */
  float ex_bmean, ex_bsd;
};

/* ---- select.c ---------------------------------------------------------- */

/* The keyword side of a query: tokenizes query into s->qseq (*qn words)
 * and, for every document sharing a word with it, sets s->score (BM25F)
 * and s->midf (the summed IDF of the query words it matched), listing it
 * in s->touched with s->touched_flag set (the caller clears the flags).
 * *qidf gets the summed IDF of the query's distinct known words and
 * *unknown (may be NULL) how many of its words no document has. Returns
 * the number of touched documents. s must be built. */
size_t sel__kw_scores(struct selector *s, const char *query, size_t *qn, double *qidf,
                      size_t *unknown);

/* ---- select_vec.c ------------------------------------------------------ */

/* Fills m from N row-major vectors of dim floats (int8, one scale per
 * dimension; m owns what it allocates: sel__emat_free). */
void sel__emat_fill(struct emat *m, const float *vecs, int dim, size_t N);
void sel__emat_free(struct emat *m);
/* out[d] = the cosine of document d of s with the query (qremote, or the
 * builtin embedding of query when NULL) under m, for every document;
 * *mean and *sd get those cosines' mean and standard deviation. Reads at
 * most s->qdims_max dimensions of a builtin query vector. */
void sel__cosines(struct selector *s, const struct emat *m, const char *query, const float *qremote,
                  float *out, float *mean, float *sd);

/* ---- select_examples.c ------------------------------------------------- */

/* Adds text (at most SEL_EXAMPLE_BYTES: the caller cuts it) as an example
 * of document doc, before building. */
void sel__add_example(struct selector *s, uint32_t doc, const char *text);
/* Builds the examples' index after s's own: keywords, and when s has
 * embeddings (s->bm) their builtin vectors, sparse, in s->bm's dimension. */
void sel__build_examples(struct selector *s);
/* Folds the examples' evidence for query into s's scratch (with s's mutex
 * held, after s's own keyword side): s->score[d] gains w_examples times
 * the best example's BM25 (on s's IDF scale), s->midf the best example's
 * share of the query, ex_kw and ex_ovl are set for the confidence, and
 * with use_emb ex_bmean and ex_bsd (from s->bm's query vector). Returns
 * the new count of touched documents. */
size_t sel__merge_examples(struct selector *s, const char *query, bool use_emb, bool want_kw,
                           double qidf, size_t ntouched);
/* The best builtin cosine of doc's examples with the query whose builtin
 * vector is in s->bm->qvec (0 without examples or vectors). */
float sel__example_cos(const struct selector *s, uint32_t doc);
void sel__free_examples(struct selector *s);

#endif
