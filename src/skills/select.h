/* select.h - ranking skills for a message, and how sure the ranking is.
 *
 * A selector indexes documents (one per skill) and ranks them for a query:
 *   keyword side   BM25F (k1, b) over weighted fields (sel_params.f_*:
 *                  name and keywords 2x, tags 1.5x, description 1x, tool
 *                  descriptions 0.7x, the instructions' first 4,000 bytes
 *                  0.4x); words are split at case changes, digits, '_' and
 *                  '-' and stemmed (tokenize.h). A
 *                  keyword, tag or name that occurs in the query as a whole
 *                  phrase adds keyword_boost * the phrase's summed IDF.
 *   examples       each of a document's first 8 examples (512 bytes each)
 *                  is a document of its own; a document's keyword score
 *                  gains w_examples * its best example's, and the
 *                  confidence reads that example's evidence (see
 *                  select_examples.c). They are also part of the text the
 *                  document's vector is made from.
 *   embedding side cosine between the query's and the document's vectors
 *                  (embed.h), when an embedder is available.
 *   order          by confidence (RRF breaks ties); with an embedder other
 *                  than the builtin one, by reciprocal-rank fusion
 *                  w_bm25/(k + rank_bm25) + w_embed/(k + rank_embed) over
 *                  the top SEL_DEPTH of each list.
 * confidence is a calibrated probability that the skill is the right one
 * rather than what an unrelated request brings up: a logistic model
 * (weights fitted on the development splits, bench_select --fit) of
 * evidence normalised against this query's scores over the collection:
 * BM25 / the collection's largest IDF, the share of the query's IDF
 * matched, the builtin cosine and its z-score over all skills, margins over
 * the runner-up on both sides, the agreement of both ranks and the best
 * example's BM25, word overlap and builtin cosine. It always
 * reads the builtin embedding, so its scale holds whatever embedder ranks.
 * An author's keyword or tag found whole in the request lifts it to at
 * least 0.6. selector_select puts a skill into the prompt when the best
 * reaches min_confidence (then the next ones need extra_share of that).
 *
 * Building precomputes everything a query needs (an inverted index with
 * per-posting BM25 weights, a phrase index, dimension-major int8 vector
 * matrices), so a query touches only the postings of its words, reads at
 * most SEL_QDIMS dimensions of the builtin matrix, and does no allocation.
 * A selector is safe to query from several threads (a mutex guards its
 * scratch buffers; an HTTP embedding of the query happens before taking
 * it); adding documents and building are single-threaded.
 */
#ifndef LUAGENT_SELECT_H
#define LUAGENT_SELECT_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

struct config;
struct embedder;
struct store;

/* The evidence the confidence is computed from (see select.c). */
#define SEL_NFEAT 13

struct sel_params {
  int max_skills;         /* at most this many ranked skills are selected (default 3) */
  double min_confidence;  /* the best skill needs this to be selected (default 0.35) */
  double rrf_k;           /* RRF constant k (default 20) */
  double w_bm25, w_embed; /* RRF weights (default 1, 1) */
  double k1, b;           /* BM25 (default 1.2, 0.75) */
  double keyword_boost;   /* exact keyword/name phrase hit (default 1.0) */
  /* Field weights of the keyword side (BM25F: a word's count in a field is
   * multiplied by the field's weight before saturation). Defaults: name 2,
   * description 1, keywords 2, tags 1.5, examples 0 (they are documents of
   * their own, w_examples), tools 0.7 (tool descriptions), body 0.4 (the
   * first 4,000 bytes of the instructions). */
  double f_name, f_description, f_keywords, f_tags, f_examples, f_tools, f_body;
  /* Selection for a prompt: the best skill must reach min_confidence; the
   * next ones (up to max_skills) need extra_share * min_confidence. */
  double extra_share;
  /* Each example request (at most 8 per skill, 512 bytes each) is also a
   * document of its own: a skill's keyword score gains w_examples times
   * its best-matching example's (default 0.5; 0: off; internal, for the
   * benchmark), and the confidence reads that example's evidence. */
  double w_examples;
  /* Offer the model skills.find and skills.load in every loop (default
   * true; config selection.recovery = false turns them off). */
  bool recovery;
  bool rank_fused_rrf; /* internal, for the benchmark: order by RRF instead of confidence */
  /* Confidence weights (SEL_NFEAT + 1 each, intercept first) with and
   * without embeddings; NULL: the fitted ones in select.c. For the
   * benchmark's fit; borrowed, must outlive the selector. */
  const float *conf_w_emb, *conf_w_kw;
};
void sel_params_default(struct sel_params *p);
/* Reads the `selection` table of the config over the defaults: max_skills,
 * min_confidence, rrf_k, weights = { bm25 =, embed = }, k1, b,
 * keyword_boost, fields = { name =, description =, keywords =, tags =,
 * examples =, tools =, body = }, extra_share, recovery. Errors name the key. cfg
 * may be NULL. */
int sel_params_from_config(const struct config *cfg, struct sel_params *p, struct err *e);

#define SEL_DEPTH 100 /* ranks beyond this do not contribute to fusion */

/* One document. Lists are NULL-terminated and may be NULL. Strings are
 * copied into the index. */
struct sel_doc {
  const char *name;
  const char *description;
  const char *const *keywords;
  const char *const *tags;
  const char *const *examples;
  const char *const *extra; /* tool descriptions */
  const char *body;         /* the instructions (SKILL.md body, prompt); may be NULL */
  bool always;
};

enum sel_mode { SEL_FUSED, SEL_BM25, SEL_EMBED };

struct sel_hit {
  size_t doc;       /* index in the order of selector_add */
  float bm25;       /* BM25 + keyword boost (0: no word in common) */
  float cosine;     /* embedding similarity (0 without embeddings) */
  float fused;      /* RRF score */
  float confidence; /* [0, 1]: the estimated chance that this is the right skill */
  float coverage;   /* share of the query's known-word IDF this document matched */
  float cos_z;      /* cosine as a z-score over the whole collection for this query */
  float margin;     /* confidence margin over the best other candidate */
  int rank_bm25;    /* 1-based rank in each list, 0 = not in the top SEL_DEPTH */
  int rank_embed;
  bool always;
  bool keyword_hit;      /* a keyword or the name occurred as a phrase */
  bool declared_hit;     /* a declared keyword or tag did (confidence >= 0.6) */
  float feat[SEL_NFEAT]; /* the features behind confidence (for the benchmark's fit) */
};

struct selector;

struct selector *selector_new(const struct sel_params *p);
void selector_free(struct selector *s); /* NULL is a no-op */
/* Adds a document before selector_build; returns its index. */
size_t selector_add(struct selector *s, const struct sel_doc *d);
/* The name of document i, or NULL. Borrowed. */
const char *selector_name(const struct selector *s, size_t i);

/* Builds the index. m (may be NULL: keyword only) embeds every document,
 * through st's cache when st is not NULL; the selector keeps m (borrowed:
 * it must outlive the selector) to embed queries. If embedding fails the
 * selector works keyword-only: the return is still 0, *degraded (may be
 * NULL) is set to 1 and warn holds the reason. */
int selector_build(struct selector *s, struct embedder *m, struct store *st, int *degraded,
                   struct err *warn);
/* True when the embedding side is in use. */
bool selector_has_embeddings(const struct selector *s);
/* Cache hits of the last build. */
size_t selector_cache_hits(const struct selector *s);

/* Ranks the documents for query, best first, into out[0..max): in
 * SEL_BM25 mode only documents with a word in common, in SEL_EMBED mode by
 * cosine, in SEL_FUSED mode by RRF (ties by confidence). *n gets the count.
 * If embedding the query fails, ranks keyword-only, sets *degraded (may be
 * NULL) and fills warn; that is not an error. Returns 0. */
int selector_rank(struct selector *s, const char *query, enum sel_mode mode, struct sel_hit *out,
                  size_t max, size_t *n, int *degraded, struct err *warn);

/* The selection for a prompt: every `always` document first, then the
 * fused ranking's best with confidence >= min_confidence, at most
 * max_skills of those. Same contract as selector_rank. */
int selector_select(struct selector *s, const char *query, struct sel_hit *out, size_t max,
                    size_t *n, int *degraded, struct err *warn);

#endif
