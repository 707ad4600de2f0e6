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

/* Examples of the query's cosine statistics are read from: a fixed,
 * evenly spaced sample of at most this many examples. */
#define SEL_EX_SAMPLE 256

void sel__build_examples(struct selector *s) {
  size_t N = s->ndocs ? s->ndocs : 1;
  struct selector *x = s->ex;
  s->ex_start = xcalloc(N + 1, sizeof *s->ex_start);
  for (size_t e = 0; e < s->nex; e++) s->ex_start[s->ex_owner[e] + 1]++;
  for (size_t d = 0; d < N; d++) s->ex_start[d + 1] += s->ex_start[d];
  /* Sparse builtin vectors, read from the texts before building frees
   * them: a short example has a few dozen nonzero dimensions of the
   * 2,048, so a query reads only the candidates' examples (and a sample
   * for the statistics), at a fraction of a dense matrix's memory. */
  if (s->bm) {
    int dim = s->bm->dim;
    float *v = xmalloc(sizeof *v * (size_t)dim);
    size_t cap = 1024, n = 0;
    s->exv_off = xmalloc(sizeof *s->exv_off * (s->nex + 1));
    s->exv_dim = xmalloc(sizeof *s->exv_dim * cap);
    s->exv_val = xmalloc(sizeof *s->exv_val * cap);
    for (size_t e = 0; e < s->nex; e++) {
      s->exv_off[e] = (uint32_t)n;
      embed_builtin(x->etext[e], strlen(x->etext[e]), v, dim);
      for (int j = 0; j < dim; j++) {
        if (v[j] == 0) continue;
        if (n == cap) {
          cap *= 2;
          s->exv_dim = xrealloc(s->exv_dim, sizeof *s->exv_dim * cap);
          s->exv_val = xrealloc(s->exv_val, sizeof *s->exv_val * cap);
        }
        s->exv_dim[n] = (uint16_t)j;
        s->exv_val[n++] = v[j];
      }
    }
    s->exv_off[s->nex] = (uint32_t)n;
    free(v);
  }
  int deg = 0;
  struct err w;
  selector_build(x, NULL, NULL, &deg, &w); /* keywords: the vectors are above */
  s->ex_rnorm = xmalloc(sizeof *s->ex_rnorm * (s->nex ? s->nex : 1));
  for (size_t e = 0; e < s->nex; e++)
    s->ex_rnorm[e] = x->dsum_idf[e] > 0 ? 1.0f / sqrtf(x->dsum_idf[e]) : 0;
  s->ex_kw = xcalloc(N, sizeof *s->ex_kw);
  s->ex_ovl = xcalloc(N, sizeof *s->ex_ovl);
  s->ex_has = xcalloc(N, 1);
  for (size_t e = 0; e < s->nex; e++) s->ex_has[s->ex_owner[e]] = 1;
  s->ex_stamp = xcalloc(N, sizeof *s->ex_stamp);
  s->ex_list = xmalloc(sizeof *s->ex_list * N);
  s->ex_bsd = 1;
}

void sel__free_examples(struct selector *s) {
  selector_free(s->ex);
  free(s->ex_owner);
  free(s->ex_start);
  free(s->exv_off);
  free(s->exv_dim);
  free(s->exv_val);
  free(s->ex_kw);
  free(s->ex_ovl);
  free(s->ex_has);
  free(s->ex_stamp);
  free(s->ex_rnorm);
  free(s->ex_list);
}

static float ex_dot(const struct selector *s, size_t e, const float *q) {
  float c = 0;
  for (uint32_t k = s->exv_off[e]; k < s->exv_off[e + 1]; k++)
    c += q[s->exv_dim[k]] * s->exv_val[k];
  return c;
}

float sel__example_cos(const struct selector *s, uint32_t doc) {
  if (!s->exv_off || !s->bm) return 0;
  float best = 0;
  for (uint32_t e = s->ex_start[doc]; e < s->ex_start[doc + 1]; e++) {
    float c = ex_dot(s, e, s->bm->qvec);
    if (c > best) best = c;
  }
  return best;
}

size_t sel__merge_examples(struct selector *s, const char *query, bool use_emb, bool want_kw,
                           double qidf, size_t ntouched) {
  struct selector *x = s->ex;
  size_t N = s->ndocs;
  if (!x->built) return ntouched;
  if (use_emb && s->exv_off) { /* the query's cosine over (a sample of) the examples */
    size_t step = s->nex > SEL_EX_SAMPLE ? s->nex / SEL_EX_SAMPLE : 1, cnt = 0;
    double sum = 0, sq = 0;
    for (size_t e = 0; e < s->nex; e += step, cnt++) {
      double c = ex_dot(s, e, s->bm->qvec);
      sum += c;
      sq += c * c;
    }
    double mu = cnt ? sum / (double)cnt : 0, var = cnt ? sq / (double)cnt - mu * mu : 0;
    s->ex_bmean = (float)mu;
    s->ex_bsd = (float)sqrt(var > 1e-12 ? var : 1e-12);
  }
  if (!want_kw) return ntouched;
  size_t xqn = 0, unknown = 0;
  double xqidf = 0;
  size_t xt = sel__kw_scores(x, query, &xqn, &xqidf, &unknown);
  if (++s->ex_q == 0) { /* the stamp wrapped: start over */
    memset(s->ex_stamp, 0, sizeof *s->ex_stamp * (N ? N : 1));
    s->ex_q = 1;
  }
  /* the query's weight for the overlap counts the words no example has,
   * each as rare as can be (df 0): a request of four words that shares
   * one with an example overlaps it little however short the example */
  double qall = xqidf + (double)unknown * log(1.0 + ((double)x->ndocs + 0.5) / 0.5);
  float rq = qall > 0 ? (float)(1.0 / sqrt(qall)) : 0, rim = 1.0f / x->idf_max;
  size_t nsk = 0; /* skills with a touched example, in s->ex_list */
  for (size_t i = 0; i < xt; i++) {
    uint32_t e = x->touched[i], d = s->ex_owner[e];
    x->touched_flag[e] = 0;
    float ek = x->score[e] * rim;
    /* the IDF-weighted overlap of the request's and the example's words
     * over both (a cosine of IDF-weighted word sets): a short example
     * sharing one common word with a long request counts little, one the
     * request restates counts fully */
    float ov = x->midf[e] * rq * s->ex_rnorm[e];
    if (s->ex_stamp[d] != s->ex_q) { /* the skill's first example this query */
      s->ex_stamp[d] = s->ex_q;
      s->ex_kw[d] = ek;
      s->ex_ovl[d] = ov;
      s->ex_list[nsk++] = d;
      if (!s->touched_flag[d]) {
        s->touched_flag[d] = 1;
        s->touched[ntouched++] = d;
        s->score[d] = 0;
        s->midf[d] = 0;
      }
    } else {
      if (ek > s->ex_kw[d]) s->ex_kw[d] = ek;
      if (ov > s->ex_ovl[d]) s->ex_ovl[d] = ov;
    }
    double cov = xqidf > 0 ? x->midf[e] / xqidf : 0; /* the example's share of the query */
    if (cov * qidf > s->midf[d]) s->midf[d] = (float)(cov * qidf);
  }
  /* each skill gains its best example's score, once */
  float scale = (float)s->p.w_examples * s->idf_max;
  for (size_t i = 0; i < nsk; i++) s->score[s->ex_list[i]] += scale * s->ex_kw[s->ex_list[i]];
  return ntouched;
}
