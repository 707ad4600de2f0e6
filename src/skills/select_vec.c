/* select_vec.c - the selector's vector matrices and cosine passes (see
 * select_impl.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"
#include "select_impl.h"
#include "util.h"

/* Fills m from n row-major vectors of dim floats. int8 with one scale per
 * dimension: a query reads a quarter of the bytes of floats, and selection
 * over many skills is bound by memory bandwidth; the rounding error is
 * below 1/254 of each dimension's largest value. */
void sel__emat_fill(struct emat *m, const float *vecs, int dim, size_t N) {
  m->dim = dim;
  m->mat = xmalloc((size_t)dim * N);
  m->rowscale = xmalloc(sizeof *m->rowscale * (size_t)dim);
  m->qvec = xmalloc(sizeof *m->qvec * (size_t)dim);
  float *inv = xcalloc((size_t)dim, sizeof *inv);
  for (size_t d = 0; d < N; d++) /* row maxima, reading docs in order */
    for (int j = 0; j < dim; j++) {
      float a = fabsf(vecs[d * (size_t)dim + j]);
      if (a > inv[j]) inv[j] = a;
    }
  for (int j = 0; j < dim; j++) {
    m->rowscale[j] = inv[j] > 0 ? inv[j] / 127.0f : 1.0f;
    inv[j] = 1.0f / m->rowscale[j];
  }
  /* transpose in blocks of docs so both sides stay in cache */
  for (size_t d0 = 0; d0 < N; d0 += 64) {
    size_t d1 = d0 + 64 < N ? d0 + 64 : N;
    for (int j = 0; j < dim; j++) {
      int8_t *row = m->mat + (size_t)j * N;
      for (size_t d = d0; d < d1; d++) row[d] = (int8_t)lrintf(vecs[d * (size_t)dim + j] * inv[j]);
    }
  }
  free(inv);
}

void sel__emat_free(struct emat *m) {
  free(m->mat);
  free(m->rowscale);
  free(m->qvec);
}

/* c[d] += q0 c0[d] + q1 c1[d] + q2 c2[d] + q3 c3[d] for d < n. */
static void cos_pass(float *restrict c, const int8_t *restrict c0, const int8_t *restrict c1,
                     const int8_t *restrict c2, const int8_t *restrict c3, const float *q,
                     size_t n) {
  float q0 = q[0], q1 = q[1], q2 = q[2], q3 = q[3];
  size_t d = 0;
  for (; d + 16 <= n; d += 16)
    for (int i = 0; i < 16; i++)
      c[d + i] += q0 * (float)c0[d + i] + q1 * (float)c1[d + i] + q2 * (float)c2[d + i] +
                  q3 * (float)c3[d + i];
  for (; d < n; d++)
    c[d] += q0 * (float)c0[d] + q1 * (float)c1[d] + q2 * (float)c2[d] + q3 * (float)c3[d];
}

/* Moves the k largest of v[0..n) (by .a) to the front, unordered
 * (quickselect). */
static void select_largest(struct qdim *v, int n, int k) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    float pivot = v[(lo + hi) / 2].a;
    int i = lo, j = hi;
    while (i <= j) {
      while (v[i].a > pivot) i++;
      while (v[j].a < pivot) j--;
      if (i <= j) {
        struct qdim t = v[i];
        v[i++] = v[j];
        v[j--] = t;
      }
    }
    if (k - 1 <= j)
      hi = j;
    else if (k - 1 >= i)
      lo = i;
    else
      return;
  }
}

void sel__cosines(struct selector *s, const struct emat *m, const char *query, const float *qremote,
                  float *out, float *mean, float *sd) {
  size_t N = s->ndocs;
  int dim = m->dim;
  if (qremote)
    memcpy(m->qvec, qremote, sizeof *qremote * (size_t)dim);
  else
    embed_builtin(query, strlen(query), m->qvec, dim);
  int nz = 0;
  for (int j = 0; j < dim; j++)
    if (m->qvec[j] != 0) s->qdims[nz++] = (struct qdim){fabsf(m->qvec[j]), j};
  if (!qremote && nz > s->qdims_max) { /* a dense model's vector is read whole */
    select_largest(s->qdims, nz, s->qdims_max);
    nz = s->qdims_max;
  }
  memset(out, 0, sizeof *out * N);
  /* four dimensions per pass over the cosine array; blocks of 16 with
   * restrict pointers so that -O2 vectorises the inner loop */
  int k = 0;
  for (; k < nz; k += 4) {
    float q[4] = {0, 0, 0, 0};
    const int8_t *col[4];
    for (int i = 0; i < 4; i++) {
      int j = s->qdims[k + i < nz ? k + i : k].j;
      col[i] = m->mat + (size_t)j * N;
      if (k + i < nz) q[i] = m->qvec[j] * m->rowscale[j];
    }
    cos_pass(out, col[0], col[1], col[2], col[3], q, N);
  }
  double sum = 0, sq = 0;
  for (size_t d = 0; d < N; d++) {
    sum += out[d];
    sq += (double)out[d] * out[d];
  }
  double mu = N ? sum / (double)N : 0, var = N ? sq / (double)N - mu * mu : 0;
  *mean = (float)mu;
  *sd = (float)sqrt(var > 1e-12 ? var : 1e-12);
}
