/* select_examples.c - a skill's examples as documents of their own.
 *
 * Folded into the skill's own document, two short example requests are a
 * few words among its description's and move its BM25 little; kept apart,
 * a request that restates one of them matches a short document almost
 * whole. So each example (at most SEL_EXAMPLES_MAX per skill, each cut to
 * SEL_EXAMPLE_BYTES) is a document of a second selector, s->ex, with its
 * own dictionary and IDF over the examples. A query then reads, per
 * skill, its best example only (never a sum: more examples give more
 * chances to match, never more weight per match):
 *   keyword   the best example's BM25, added at w_examples to the skill's
 *             score (rescaled to the skills' IDF range), and its
 *             IDF-weighted word overlap with the request;
 *   embedding the best example's builtin cosine and its z-score over all
 *             examples (evidence for the confidence only: as a ranking
 *             score it lost to the skill vector, which includes them).
 * See bench/README.md for what each choice measured.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"
#include "select_impl.h"
#include "util.h"

void sel__add_example(struct selector *s, uint32_t doc, const char *text) {
  if (!text || !*text) return;
  if (!s->ex) {
    struct sel_params p = s->p;
    p.w_examples = 0; /* an example has no examples */
    p.keyword_boost = 0;
    s->ex = selector_new(&p);
  }
  struct sel_doc ed = {.description = text}; /* already cut by selector_add */
  selector_add(s->ex, &ed);
  if (s->nex == s->capex) {
    s->capex = s->capex ? s->capex * 2 : 64;
    s->ex_owner = xrealloc(s->ex_owner, sizeof *s->ex_owner * s->capex);
  }
  s->ex_owner[s->nex++] = doc;
}

void sel__build_examples(struct selector *s, struct embedder *m, struct store *st) {
  size_t N = s->ndocs ? s->ndocs : 1;
  /* A failure here leaves the examples keyword-only (ex->em.mat stays
   * NULL); the skills' own build already said whether embeddings work. */
  int deg = 0;
  struct err w;
  if (m && embedder_kind(m) != EMBED_BUILTIN) {
    /* the confidence reads only the builtin side of examples: embedding
     * them over HTTP too would cost a request per 64 examples for nothing */
    struct embed_opts o = {.kind = EMBED_BUILTIN};
    m = embedder_new(&o, &s->ex_emb, &w) ? NULL : s->ex_emb;
    st = NULL; /* as the skills' own builtin vectors: recomputed */
  }
  selector_build(s->ex, m, st, &deg, &w);
  s->ex_kw = xcalloc(N, sizeof *s->ex_kw);
  s->ex_ovl = xcalloc(N, sizeof *s->ex_ovl);
  s->ex_bcos = xcalloc(N, sizeof *s->ex_bcos);
  s->ex_has = xcalloc(N, 1);
  for (size_t e = 0; e < s->nex; e++) s->ex_has[s->ex_owner[e]] = 1;
  s->ex_bsd = 1;
}

void sel__free_examples(struct selector *s) {
  selector_free(s->ex); /* before the embedder it borrows */
  embedder_free(s->ex_emb);
  free(s->ex_owner);
  free(s->ex_kw);
  free(s->ex_ovl);
  free(s->ex_bcos);
  free(s->ex_has);
}

size_t sel__merge_examples(struct selector *s, const char *query, bool use_emb, bool want_kw,
                           double qidf, size_t ntouched) {
  struct selector *x = s->ex;
  size_t N = s->ndocs;
  if (!x->built) return ntouched;
  if (use_emb && x->em.mat) {
    /* the examples' vectors are always the builtin embedding's (see
     * sel__build_examples): the query's builtin vector, never qremote */
    float m0, sd0;
    const float *xb = x->cos;
    sel__cosines(x, &x->em, query, NULL, x->cos, &m0, &sd0);
    s->ex_bmean = m0;
    s->ex_bsd = sd0;
    memset(s->ex_bcos, 0, sizeof *s->ex_bcos * N);
    for (size_t e = 0; e < s->nex; e++) {
      uint32_t d = s->ex_owner[e];
      if (xb[e] > s->ex_bcos[d]) s->ex_bcos[d] = xb[e];
    }
  }
  if (!want_kw) return ntouched;
  /* per skill, the best example (ex_kw: BM25 over ex's largest IDF);
   * first clear what the last query set (x->touched still lists it) */
  for (size_t i = 0; i < s->ex_last; i++) {
    uint32_t d = s->ex_owner[x->touched[i]];
    s->ex_kw[d] = s->ex_ovl[d] = 0;
  }
  size_t xqn = 0, unknown = 0;
  double xqidf = 0;
  size_t xt = sel__kw_scores(x, query, &xqn, &xqidf, &unknown);
  s->ex_last = xt;
  /* the query's weight for the overlap counts the words no example has,
   * each as rare as can be (df 0): a request of four words that shares
   * one with an example overlaps it little however short the example */
  double qall = xqidf + (double)unknown * log(1.0 + ((double)x->ndocs + 0.5) / 0.5);
  for (size_t i = 0; i < xt; i++) {
    uint32_t e = x->touched[i], d = s->ex_owner[e];
    float ek = x->score[e] / x->idf_max;
    /* the IDF-weighted overlap of the request's and the example's words
     * over both (a cosine of IDF-weighted word sets): a short example
     * sharing one common word with a long request counts little, one the
     * request restates counts fully */
    double den = sqrt(qall * x->dsum_idf[e]);
    float ov = den > 0 ? (float)(x->midf[e] / den) : 0;
    if (ek > s->ex_kw[d]) s->ex_kw[d] = ek;
    if (ov > s->ex_ovl[d]) s->ex_ovl[d] = ov;
    if (!s->touched_flag[d]) {
      s->touched_flag[d] = 1;
      s->touched[ntouched++] = d;
      s->score[d] = 0;
      s->midf[d] = 0;
    }
    double cov = xqidf > 0 ? x->midf[e] / xqidf : 0; /* the example's share of the query */
    if (cov * qidf > s->midf[d]) s->midf[d] = (float)(cov * qidf);
  }
  /* add the best example's score once per skill: ex_kw is negated to mark
   * a skill done, then restored */
  float scale = (float)s->p.w_examples * s->idf_max;
  for (size_t i = 0; i < xt; i++) {
    uint32_t d = s->ex_owner[x->touched[i]];
    if (s->ex_kw[d] > 0) {
      s->score[d] += scale * s->ex_kw[d];
      s->ex_kw[d] = -s->ex_kw[d];
    }
  }
  for (size_t i = 0; i < xt; i++) {
    uint32_t e = x->touched[i], d = s->ex_owner[e];
    if (s->ex_kw[d] < 0) s->ex_kw[d] = -s->ex_kw[d];
    x->touched_flag[e] = 0;
  }
  return ntouched;
}
