/* bench_select.c - skill selection quality and speed.
 *
 * usage: bench_select TOOLSEL_DIR [OUT_DIR]
 *
 * For each dataset (metatool, sealtools) in TOOLSEL_DIR, every tool becomes
 * a skill (name in skill form: camelCase -> kebab-case, description) and
 * every query is ranked four ways: a plain BM25 baseline written here
 * independently (k1=1.2, b=0.75, name+description, lowercase word tokens,
 * no stopwords, no stemming: the dataset README's anchor), and luagent's
 * keyword-only, embedding-only (builtin) and fused selection. Prints
 * recall@1, recall@3 and MRR@10 (hit-rate definitions, as score.py) and,
 * when OUT_DIR is given, writes OUT_DIR/<dataset>.<mode>.jsonl predictions
 * for score.py. Before that, the quality table of the selection itself on
 * the dev splits (MetaTool; MetaTool with two example requests per tool,
 * scored on the other requests, and the same requests without examples;
 * Seal-Tools; the 75 Agent Skills of ../agent-skills, also with one of
 * their two requests as an example; three unrelated request sets made of
 * one dataset's requests sent to another's skills, one of them with
 * examples): top-1, top-3, the share of requests whose right skill is put
 * into the prompt, the share of unrelated requests that select a skill,
 * the calibration curve of the confidence, a min_confidence sweep and the
 * lowest threshold that keeps the pooled unrelated rate at 10%; --fit also
 * fits the confidence weights (logistic regression) on those rows.
 * BENCH_SHOW=<set label prefix> prints that set's misses; BENCH_MODE=bm25
 * or embed ranks by one side only.
 * Then measures the latency of one selection with 10, 1,000 and 12,000
 * skills loaded, for requests as asked and long ones.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "embed.h"
#include "select.h"
#include "skills.h"
#include "store.h"
#include "util.h"

struct tool {
  char *id, *name, *desc;
};
struct query {
  char *id, *text;
  char **gold;
  int ngold;
};

static char *read_all(const char *path) {
  char *t;
  size_t n;
  struct err e;
  if (util_read_file(path, 256u << 20, &t, &n, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    exit(2);
  }
  return t;
}

static size_t load_tools(const char *path, struct tool **out) {
  char *t = read_all(path), *save = NULL;
  size_t n = 0, cap = 256;
  struct tool *v = xmalloc(sizeof *v * cap);
  for (char *line = strtok_r(t, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    cJSON *j = cJSON_Parse(line);
    if (!j) continue;
    if (n == cap) v = xrealloc(v, sizeof *v * (cap *= 2));
    v[n].id = xstrdup(cJSON_GetObjectItem(j, "id")->valuestring);
    v[n].name = xstrdup(cJSON_GetObjectItem(j, "name")->valuestring);
    v[n].desc = xstrdup(cJSON_GetObjectItem(j, "description")->valuestring);
    n++;
    cJSON_Delete(j);
  }
  free(t);
  *out = v;
  return n;
}

static size_t load_queries(const char *path, struct query **out) {
  char *t = read_all(path), *save = NULL;
  size_t n = 0, cap = 256;
  struct query *v = xmalloc(sizeof *v * cap);
  for (char *line = strtok_r(t, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    cJSON *j = cJSON_Parse(line);
    if (!j) continue;
    if (n == cap) v = xrealloc(v, sizeof *v * (cap *= 2));
    v[n].id = xstrdup(cJSON_GetObjectItem(j, "id")->valuestring);
    v[n].text = xstrdup(cJSON_GetObjectItem(j, "query")->valuestring);
    cJSON *g = cJSON_GetObjectItem(j, "gold");
    v[n].ngold = cJSON_GetArraySize(g);
    v[n].gold = xmalloc(sizeof(char *) * (size_t)(v[n].ngold ? v[n].ngold : 1));
    for (int i = 0; i < v[n].ngold; i++)
      v[n].gold[i] = xstrdup(cJSON_GetArrayItem(g, i)->valuestring);
    n++;
    cJSON_Delete(j);
  }
  free(t);
  *out = v;
  return n;
}

/* camelCase / snake_case tool name -> an Agent Skills name (kebab-case). */
static char *skill_name(const char *id) {
  struct sbuf b = {0};
  for (const char *p = id; *p; p++) {
    unsigned char c = (unsigned char)*p;
    if (isupper(c)) {
      if (b.len && b.s[b.len - 1] != '-' && p > id &&
          (islower((unsigned char)p[-1]) || isdigit((unsigned char)p[-1])))
        sbuf_puts(&b, "-");
      char l = (char)tolower(c);
      sbuf_append(&b, &l, 1);
    } else if (islower(c) || isdigit(c)) {
      sbuf_append(&b, (const char *)p, 1);
    } else if (b.len && b.s[b.len - 1] != '-') {
      sbuf_puts(&b, "-");
    }
  }
  if (!b.s) sbuf_puts(&b, "tool");
  return sbuf_take(&b);
}

/* ---- the plain BM25 baseline (independent code) ------------------------ */

struct bdoc {
  char **w;
  int n;
};

static int lower_words(const char *s, char ***out) {
  int n = 0, cap = 16;
  char **v = xmalloc(sizeof *v * (size_t)cap);
  while (*s) {
    while (*s && !isalnum((unsigned char)*s)) s++;
    const char *st = s;
    while (*s && isalnum((unsigned char)*s)) s++;
    if (s > st) {
      if (n == cap) v = xrealloc(v, sizeof *v * (size_t)(cap *= 2));
      char *w = xmalloc((size_t)(s - st) + 1);
      for (size_t i = 0; i < (size_t)(s - st); i++) w[i] = (char)tolower((unsigned char)st[i]);
      w[s - st] = 0;
      v[n++] = w;
    }
  }
  *out = v;
  return n;
}

/* word -> postings (doc, tf), a sorted array searched with bsearch */
struct bpost {
  char *w;
  size_t doc;
  double tf;
};
struct baseline {
  size_t N;
  struct bdoc *d;
  double avgdl;
  struct bpost *p;
  size_t np;
};

static int cmp_bpost(const void *a, const void *b) {
  const struct bpost *x = a, *y = b;
  int c = strcmp(x->w, y->w);
  if (c) return c;
  return x->doc < y->doc ? -1 : x->doc > y->doc;
}

static void baseline_index(struct baseline *b) {
  size_t cap = 0;
  for (size_t i = 0; i < b->N; i++) cap += (size_t)b->d[i].n;
  b->p = xmalloc(sizeof *b->p * (cap ? cap : 1));
  size_t n = 0;
  for (size_t i = 0; i < b->N; i++)
    for (int k = 0; k < b->d[i].n; k++) b->p[n++] = (struct bpost){b->d[i].w[k], i, 1};
  qsort(b->p, n, sizeof *b->p, cmp_bpost);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (m && !strcmp(b->p[m - 1].w, b->p[i].w) && b->p[m - 1].doc == b->p[i].doc)
      b->p[m - 1].tf++;
    else
      b->p[m++] = b->p[i];
  }
  b->np = m;
}

static void baseline_scores(const struct baseline *b, const char *q, double *score) {
  char **qw;
  int qn = lower_words(q, &qw);
  for (size_t i = 0; i < b->N; i++) score[i] = 0;
  for (int k = 0; k < qn; k++) {
    /* first posting of the word */
    size_t lo = 0, hi = b->np;
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (strcmp(b->p[mid].w, qw[k]) < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    size_t end = lo;
    while (end < b->np && !strcmp(b->p[end].w, qw[k])) end++;
    double df = (double)(end - lo);
    if (df == 0) continue;
    double idf = log(1 + ((double)b->N - df + 0.5) / (df + 0.5));
    for (size_t i = lo; i < end; i++) {
      double tf = b->p[i].tf;
      size_t d = b->p[i].doc;
      score[d] += idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * b->d[d].n / b->avgdl));
    }
  }
  for (int k = 0; k < qn; k++) free(qw[k]);
  free(qw);
}

/* ---- metrics ----------------------------------------------------------- */

struct metrics {
  double r1, r3, mrr;
  size_t n;
};

static int is_gold(const struct query *q, const char *id) {
  for (int i = 0; i < q->ngold; i++)
    if (!strcmp(q->gold[i], id)) return 1;
  return 0;
}

static void score_ranked(struct metrics *m, const struct query *q, const struct tool *tools,
                         const size_t *ranked, size_t n) {
  m->n++;
  for (size_t r = 0; r < n && r < 10; r++)
    if (is_gold(q, tools[ranked[r]].id)) {
      if (r < 1) m->r1++;
      if (r < 3) m->r3++;
      m->mrr += 1.0 / (double)(r + 1);
      break;
    }
}

static void write_pred(FILE *f, const struct query *q, const struct tool *tools,
                       const size_t *ranked, size_t n) {
  if (!f) return;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", q->id);
  cJSON *a = cJSON_AddArrayToObject(o, "ranked");
  for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(tools[ranked[i]].id));
  char *s = cJSON_PrintUnformatted(o);
  fprintf(f, "%s\n", s);
  free(s);
  cJSON_Delete(o);
}

static FILE *open_pred(const char *outdir, const char *ds, const char *mode) {
  if (!outdir) return NULL;
  char p[4096];
  snprintf(p, sizeof p, "%s/%s.%s.jsonl", outdir, ds, mode);
  FILE *f = fopen(p, "w");
  if (!f) fprintf(stderr, "cannot write %s\n", p);
  return f;
}

/* Defaults, or overrides from the environment for exploring (the published
 * table uses the defaults): BENCH_RRF_K, BENCH_W_BM25, BENCH_W_EMBED,
 * BENCH_KW_BOOST, BENCH_MIN_CONF, BENCH_EXTRA, BENCH_RRF_ORDER=1, and field
 * weights BENCH_F_NAME, _DESC, _KEYWORDS, _TAGS, _EXAMPLES, _TOOLS. */
static void envd(const char *k, double *v) {
  const char *s = getenv(k);
  if (s) *v = atof(s);
}
static void bench_params(struct sel_params *p) {
  sel_params_default(p);
  envd("BENCH_RRF_K", &p->rrf_k);
  envd("BENCH_W_BM25", &p->w_bm25);
  envd("BENCH_W_EMBED", &p->w_embed);
  envd("BENCH_KW_BOOST", &p->keyword_boost);
  envd("BENCH_K1", &p->k1);
  envd("BENCH_B", &p->b);
  envd("BENCH_MIN_CONF", &p->min_confidence);
  envd("BENCH_EXTRA", &p->extra_share);
  envd("BENCH_F_NAME", &p->f_name);
  envd("BENCH_F_DESC", &p->f_description);
  envd("BENCH_F_KEYWORDS", &p->f_keywords);
  envd("BENCH_F_TAGS", &p->f_tags);
  envd("BENCH_F_EXAMPLES", &p->f_examples);
  envd("BENCH_F_TOOLS", &p->f_tools);
  envd("BENCH_F_BODY", &p->f_body);
  envd("BENCH_W_EXAMPLES", &p->w_examples);
  if (getenv("BENCH_RRF_ORDER")) p->rank_fused_rrf = true;
  static float we[SEL_NFEAT + 1], wk[SEL_NFEAT + 1];
  const char *v;
  if ((v = getenv("BENCH_CONF_EMB"))) {
    for (int i = 0; i <= SEL_NFEAT; i++) we[i] = strtof(v, (char **)&v), v += *v == ',';
    p->conf_w_emb = we;
  }
  if ((v = getenv("BENCH_CONF_KW"))) {
    for (int i = 0; i <= SEL_NFEAT; i++) wk[i] = strtof(v, (char **)&v), v += *v == ',';
    p->conf_w_kw = wk;
  }
}

/* One collection to select from: documents plus the ids the predictions
 * name them by. */
struct coll {
  const char *label;
  size_t n;
  struct sel_doc *docs;
  char **ids;
};

static void coll_free(struct coll *c) {
  for (size_t i = 0; i < c->n; i++) {
    free((char *)c->docs[i].name);
    free(c->ids[i]);
    if (c->docs[i].examples) {
      for (size_t k = 0; c->docs[i].examples[k]; k++) free((char *)c->docs[i].examples[k]);
      free((void *)c->docs[i].examples);
    }
  }
  free(c->docs);
  free(c->ids);
}

/* A toolsel dataset as a collection (descriptions borrowed from tools). */
static void coll_tools(struct coll *c, const char *label, const struct tool *t, size_t n) {
  c->label = label;
  c->n = n;
  c->docs = xcalloc(n, sizeof *c->docs);
  c->ids = xmalloc(sizeof *c->ids * n);
  for (size_t i = 0; i < n; i++) {
    c->docs[i].name = skill_name(t[i].name);
    c->docs[i].description = t[i].desc;
    c->ids[i] = xstrdup(t[i].id);
  }
}

static struct selector *coll_build(const struct coll *c, struct embedder *emb,
                                   const struct sel_params *p) {
  struct selector *s = selector_new(p);
  for (size_t i = 0; i < c->n; i++) selector_add(s, &c->docs[i]);
  struct err w;
  int deg = 0;
  selector_build(s, emb, NULL, &deg, &w);
  if (deg) fprintf(stderr, "warning: %s\n", w.msg);
  return s;
}

static int gold_docs(const struct coll *c, const struct query *q, int *out, int max) {
  int n = 0;
  for (int g = 0; g < q->ngold; g++)
    for (size_t i = 0; i < c->n && n < max; i++)
      if (!strcmp(c->ids[i], q->gold[g])) out[n++] = (int)i;
  return n;
}

/* ---- one evaluation: ranking, selection, calibration rows -------------- */

#define NTOP 10
#define MAXCAND (2 * SEL_DEPTH)

/* What the benchmark keeps of each query: the ranked top NTOP with their
 * confidences, whether each is right. Thresholds are swept over these with
 * the same rule as selector_select. */
struct qrec {
  int n;
  float conf[NTOP];
  bool right[NTOP];
  bool has_gold; /* false: an unrelated request */
};

struct evalres {
  const char *label;
  size_t nq;
  struct qrec *q;
  double r1, r3, mrr;
};

/* Feature rows for --fit. */
struct rows {
  size_t n, cap;
  float (*x)[SEL_NFEAT];
  float *y, *w;
};
static void rows_add(struct rows *r, const float *x, float y, float w) {
  if (r->n == r->cap) {
    r->cap = r->cap ? r->cap * 2 : 4096;
    r->x = xrealloc(r->x, sizeof *r->x * r->cap);
    r->y = xrealloc(r->y, sizeof *r->y * r->cap);
    r->w = xrealloc(r->w, sizeof *r->w * r->cap);
  }
  memcpy(r->x[r->n], x, sizeof *r->x);
  r->y[r->n] = y;
  r->w[r->n] = w;
  r->n++;
}

static double fit_wrong_weight(void) {
  const char *v = getenv("BENCH_FIT_WRONG");
  return v ? atof(v) : 0;
}

/* Ranks every query (skipping those whose index is set in skip) against s.
 * unrelated: the queries' gold is not in this collection. Writes
 * predictions to pred (may be NULL) and feature rows to rows (may be
 * NULL) with total weight fitw for the whole set. */
static void evaluate(struct evalres *er, const char *label, struct selector *s,
                     const struct coll *c, const struct query *qs, size_t nq, const bool *skip,
                     bool unrelated, FILE *pred, struct rows *rows, float fitw) {
  memset(er, 0, sizeof *er);
  er->label = label;
  er->q = xcalloc(nq, sizeof *er->q);
  static struct sel_hit hits[MAXCAND];
  size_t counted = 0;
  for (size_t i = 0; i < nq; i++) counted += !(skip && skip[i]);
  for (size_t qi = 0; qi < nq; qi++) {
    if (skip && skip[qi]) continue;
    int gold[8], ng = unrelated ? 0 : gold_docs(c, &qs[qi], gold, 8);
    size_t nh = 0;
    int deg;
    struct err w;
    enum sel_mode md = SEL_FUSED;
    if (getenv("BENCH_MODE")) md = !strcmp(getenv("BENCH_MODE"), "bm25") ? SEL_BM25 : SEL_EMBED;
    selector_rank(s, qs[qi].text, md, hits, MAXCAND, &nh, &deg, &w);
    struct qrec *r = &er->q[er->nq++];
    r->has_gold = !unrelated;
    size_t ranked[NTOP];
    int first = 0;
    for (size_t h = 0; h < nh; h++) {
      bool right = false;
      for (int g = 0; g < ng; g++) right |= (size_t)gold[g] == hits[h].doc;
      if (h < NTOP) {
        r->conf[h] = hits[h].confidence;
        r->right[h] = right;
        ranked[h] = hits[h].doc;
        r->n++;
        if (right && !first) {
          first = (int)h + 1;
          er->mrr += 1.0 / first;
          if (h < 1) er->r1++;
          if (h < 3) er->r3++;
        }
      }
      /* The confidence is fitted to tell a right skill from the skills an
       * unrelated request brings up; a wrong skill for a request that has a
       * right one does not count by default (BENCH_FIT_WRONG: its weight):
       * it is often a near neighbour, and the prompt has room for three. */
      if (rows && (h < NTOP || right)) {
        float wt = right || unrelated ? 1.0f : (float)fit_wrong_weight();
        wt *= fitw;
        if (wt > 0) rows_add(rows, hits[h].feat, right ? 1.0f : 0.0f, wt / (float)counted);
      }
    }
    /* BENCH_SHOW=label prefix: print that set's misses (right skill not in
     * the top 3) or, for an unrelated set, the requests that select one */
    const char *show = getenv("BENCH_SHOW");
    if (show && !strncmp(label, show, strlen(show)) &&
        (unrelated ? r->n && r->conf[0] >= 0.35 : !(first && first <= 3))) {
      printf("MISS %s | %s | gold %s |", label, qs[qi].text, unrelated ? "-" : qs[qi].gold[0]);
      for (int h = 0; h < r->n && h < 3; h++)
        printf(" %s %.2f [bm %.1f cos %.2f z %.1f exkw %.2f]", c->ids[ranked[h]], r->conf[h],
               hits[h].bm25, hits[h].cosine, hits[h].cos_z, hits[h].feat[8]);
      printf("\n");
    }
    if (pred) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "id", qs[qi].id);
      cJSON *a = cJSON_AddArrayToObject(o, "ranked");
      for (int h = 0; h < r->n; h++) cJSON_AddItemToArray(a, cJSON_CreateString(c->ids[ranked[h]]));
      char *js = cJSON_PrintUnformatted(o);
      fprintf(pred, "%s\n", js);
      free(js);
      cJSON_Delete(o);
    }
  }
  if (er->nq) {
    er->r1 /= (double)er->nq;
    er->r3 /= (double)er->nq;
    er->mrr /= (double)er->nq;
  }
}

/* selector_select's rule on a recorded ranking: the best must reach
 * minc, the next ones minc * extra, at most maxk. Returns how many are
 * selected; *right tells whether a right one is among them. */
static int simulate(const struct qrec *r, double minc, double extra, int maxk, bool *right) {
  int k = 0;
  *right = false;
  for (int h = 0; h < r->n && k < maxk; h++) {
    double need = k ? minc * extra : minc;
    if (r->conf[h] < need) continue;
    k++;
    *right |= r->right[h];
  }
  return k;
}

static void put_rates(const struct evalres *er, double minc, double extra, int maxk, double *put,
                      double *any) {
  size_t p = 0, a = 0;
  for (size_t i = 0; i < er->nq; i++) {
    bool right;
    int k = simulate(&er->q[i], minc, extra, maxk, &right);
    p += right;
    a += k > 0;
  }
  *put = er->nq ? (double)p / (double)er->nq : 0;
  *any = er->nq ? (double)a / (double)er->nq : 0;
}

/* ---- logistic regression for --fit ------------------------------------- */

/* Weighted L2-regularised logistic regression by Newton's method: b[0] is
 * the intercept, b[1..] the feature weights; features listed in use. */
static void fit_logistic(const struct rows *r, const bool *use, double *b) {
  enum { P = SEL_NFEAT + 1 };
  for (int i = 0; i < P; i++) b[i] = 0;
  for (int it = 0; it < 30; it++) {
    double g[P] = {0}, H[P][P] = {{0}};
    for (size_t n = 0; n < r->n; n++) {
      double x[P];
      x[0] = 1;
      for (int j = 0; j < SEL_NFEAT; j++) x[j + 1] = use[j] ? r->x[n][j] : 0;
      double z = 0;
      for (int j = 0; j < P; j++) z += b[j] * x[j];
      double pr = 1 / (1 + exp(-z)), w = r->w[n];
      for (int j = 0; j < P; j++) {
        g[j] += w * (pr - r->y[n]) * x[j];
        for (int k = 0; k < P; k++) H[j][k] += w * pr * (1 - pr) * x[j] * x[k];
      }
    }
    for (int j = 0; j < P; j++) {
      double lam = j ? 1e-3 : 0;
      g[j] += lam * b[j];
      H[j][j] += lam + 1e-9;
      if (j && !use[j - 1]) { /* keep unused weights at 0 */
        for (int k = 0; k < P; k++) H[j][k] = H[k][j] = 0;
        H[j][j] = 1;
        g[j] = 0;
      }
    }
    /* solve H d = g (Gaussian elimination with partial pivoting) */
    double A[P][P + 1];
    for (int j = 0; j < P; j++) {
      for (int k = 0; k < P; k++) A[j][k] = H[j][k];
      A[j][P] = g[j];
    }
    for (int c = 0; c < P; c++) {
      int piv = c;
      for (int j = c + 1; j < P; j++)
        if (fabs(A[j][c]) > fabs(A[piv][c])) piv = j;
      for (int k = 0; k <= P; k++) {
        double t = A[c][k];
        A[c][k] = A[piv][k];
        A[piv][k] = t;
      }
      for (int j = 0; j < P; j++) {
        if (j == c || A[c][c] == 0) continue;
        double f = A[j][c] / A[c][c];
        for (int k = c; k <= P; k++) A[j][k] -= f * A[c][k];
      }
    }
    double step = 0;
    for (int j = 0; j < P; j++) {
      double d = A[j][j] != 0 ? A[j][P] / A[j][j] : 0;
      b[j] -= d;
      step += fabs(d);
    }
    if (step < 1e-6) break;
  }
}

/* ---- the whole quality run --------------------------------------------- */

struct data {
  struct tool *mt, *st;
  size_t nmt, nst;
  struct query *mq, *sq, *aq;
  size_t nmq, nsq, naq;
  struct coll cmt, cst, cas, cmtx; /* metatool, sealtools, agent skills, metatool + examples */
  struct coll casx;                /* agent skills + one example each */
  bool *mt_used;                   /* metatool queries used as examples (not scored) */
  bool *as_used;                   /* agent skills requests used as examples */
  struct skillset *ss;
};

static void free_queries(struct query *qs, size_t nq) {
  for (size_t i = 0; i < nq; i++) {
    for (int k = 0; k < qs[i].ngold; k++) free(qs[i].gold[k]);
    free(qs[i].gold), free(qs[i].id), free(qs[i].text);
  }
  free(qs);
}

/* MetaTool with two example requests per tool, the first two single-tool
 * dev queries of that tool in file order; those queries are then left out
 * of the scoring (a stand-in for a skill author writing two examples). */
static void coll_with_examples(struct data *d) {
  coll_tools(&d->cmtx, "metatool+examples", d->mt, d->nmt);
  d->mt_used = xcalloc(d->nmq, sizeof *d->mt_used);
  for (size_t i = 0; i < d->nmt; i++) {
    const char **ex = xcalloc(3, sizeof *ex);
    int k = 0;
    for (size_t q = 0; q < d->nmq && k < 2; q++)
      if (d->mq[q].ngold == 1 && !strncmp(d->mq[q].id, "single-", 7) &&
          !strcmp(d->mq[q].gold[0], d->mt[i].id)) {
        ex[k++] = xstrdup(d->mq[q].text);
        d->mt_used[q] = true;
      }
    d->cmtx.docs[i].examples = ex;
  }
}

static int load_data(const char *dir, struct data *d) {
  memset(d, 0, sizeof *d);
  char p[4096];
  snprintf(p, sizeof p, "%s/metatool/tools.jsonl", dir);
  d->nmt = load_tools(p, &d->mt);
  snprintf(p, sizeof p, "%s/metatool/queries.jsonl", dir);
  d->nmq = load_queries(p, &d->mq);
  snprintf(p, sizeof p, "%s/sealtools/tools.jsonl", dir);
  d->nst = load_tools(p, &d->st);
  snprintf(p, sizeof p, "%s/sealtools/queries.jsonl", dir);
  d->nsq = load_queries(p, &d->sq);
  coll_tools(&d->cmt, "metatool", d->mt, d->nmt);
  coll_tools(&d->cst, "sealtools", d->st, d->nst);
  coll_with_examples(d);
  /* the 75 Agent Skills, loaded by the real loader */
  snprintf(p, sizeof p, "%s/../agent-skills/requests.jsonl", dir);
  if (access(p, R_OK)) {
    fprintf(stderr, "agent-skills data not found next to %s\n", dir);
    return -1;
  }
  d->naq = load_queries(p, &d->aq);
  snprintf(p, sizeof p, "%s/../agent-skills/skills", dir);
  struct err e;
  if (skillset_load_dir(p, "skills", NULL, NULL, NULL, NULL, &d->ss, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return -1;
  }
  size_t n = skillset_count(d->ss);
  d->cas.label = "agent-skills";
  d->cas.n = n;
  d->cas.docs = xcalloc(n, sizeof *d->cas.docs);
  d->cas.ids = xmalloc(sizeof *d->cas.ids * n);
  for (size_t i = 0; i < n; i++) {
    const struct skill *k = skillset_at(d->ss, i);
    d->cas.docs[i] = (struct sel_doc){.name = xstrdup(k->name),
                                      .description = k->description,
                                      .keywords = (const char *const *)k->keywords,
                                      .tags = (const char *const *)k->tags,
                                      .extra = (const char *const *)k->tool_descriptions,
                                      .body = k->prompt};
    /* examples stay NULL: coll_free frees only the ones made here; the
     * Agent Skills files carry none */
    d->cas.ids[i] = xstrdup(k->name);
  }
  /* the same with each skill's first request as its one example; the
   * other request is scored */
  d->casx = d->cas;
  d->casx.label = "agent-skills+examples";
  d->casx.docs = xmalloc(sizeof *d->casx.docs * n);
  d->casx.ids = xmalloc(sizeof *d->casx.ids * n);
  d->as_used = xcalloc(d->naq, sizeof *d->as_used);
  for (size_t i = 0; i < n; i++) {
    d->casx.docs[i] = d->cas.docs[i];
    d->casx.docs[i].name = xstrdup(d->cas.docs[i].name);
    d->casx.ids[i] = xstrdup(d->cas.ids[i]);
    const char **ex = xcalloc(2, sizeof *ex);
    for (size_t q = 0; q < d->naq; q++)
      if (d->aq[q].ngold == 1 && !strcmp(d->aq[q].gold[0], d->cas.ids[i])) {
        ex[0] = xstrdup(d->aq[q].text);
        d->as_used[q] = true;
        break;
      }
    d->casx.docs[i].examples = ex;
  }
  return 0;
}

static void free_data(struct data *d) {
  coll_free(&d->cmt);
  coll_free(&d->cst);
  coll_free(&d->cas);
  coll_free(&d->cmtx);
  coll_free(&d->casx);
  free(d->mt_used);
  free(d->as_used);
  skillset_free(d->ss);
  for (size_t i = 0; i < d->nmt; i++) free(d->mt[i].id), free(d->mt[i].name), free(d->mt[i].desc);
  for (size_t i = 0; i < d->nst; i++) free(d->st[i].id), free(d->st[i].name), free(d->st[i].desc);
  free(d->mt);
  free(d->st);
  free_queries(d->mq, d->nmq);
  free_queries(d->sq, d->nsq);
  free_queries(d->aq, d->naq);
}

enum { E_MT, E_MTS, E_MTX, E_ST, E_AS, E_ASX, E_U1, E_U2, E_U3, E_N };

/* Runs the seven evaluations with one embedder (NULL: keyword only). */
static void run_all(struct data *d, struct embedder *emb, const struct sel_params *p,
                    const char *outdir, struct evalres *er, struct rows *rows) {
  /* the sets with examples reuse the plain sets' requests: they weigh
   * BENCH_FIT_EXW (default 0.5) in the fit, so no request counts more than
   * one and a half times */
  float exw = getenv("BENCH_FIT_EXW") ? (float)atof(getenv("BENCH_FIT_EXW")) : 0.5f;
  struct selector *smt = coll_build(&d->cmt, emb, p), *smx = coll_build(&d->cmtx, emb, p),
                  *sst = coll_build(&d->cst, emb, p), *sas = coll_build(&d->cas, emb, p),
                  *sasx = coll_build(&d->casx, emb, p);
  FILE *f[3] = {NULL, NULL, NULL};
  const char *fn[3] = {"metatool", "sealtools", "agent-skills"};
  for (int i = 0; i < 3 && outdir; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.selected.jsonl", outdir, fn[i]);
    f[i] = fopen(path, "w");
  }
  evaluate(&er[E_MT], "MetaTool", smt, &d->cmt, d->mq, d->nmq, NULL, false, f[0], rows, 1);
  evaluate(&er[E_MTS], "MetaTool, the same requests without examples", smt, &d->cmt, d->mq, d->nmq,
           d->mt_used, false, NULL, NULL, 1);
  evaluate(&er[E_MTX], "MetaTool + 2 examples/tool", smx, &d->cmtx, d->mq, d->nmq, d->mt_used,
           false, NULL, rows, exw);
  evaluate(&er[E_ST], "Seal-Tools", sst, &d->cst, d->sq, d->nsq, NULL, false, f[1], rows, 1);
  evaluate(&er[E_AS], "Agent Skills (75)", sas, &d->cas, d->aq, d->naq, NULL, false, f[2], rows, 1);
  /* unrelated: requests from another dataset's domain */
  evaluate(&er[E_U1], "unrelated: MetaTool requests -> Agent Skills", sas, &d->cas, d->mq, d->nmq,
           NULL, true, NULL, rows, 1);
  evaluate(&er[E_U2], "unrelated: Agent Skills requests -> MetaTool", smt, &d->cmt, d->aq, d->naq,
           NULL, true, NULL, rows, 1);
  evaluate(&er[E_ASX], "Agent Skills + 1 example/skill", sasx, &d->casx, d->aq, d->naq, d->as_used,
           false, NULL, rows, exw);
  evaluate(&er[E_U3], "unrelated: Agent Skills requests -> MetaTool + 2 examples/tool", smx,
           &d->cmtx, d->aq, d->naq, NULL, true, NULL, rows, exw);
  for (int i = 0; i < 3; i++)
    if (f[i]) fclose(f[i]);
  selector_free(smt);
  selector_free(smx);
  selector_free(sst);
  selector_free(sas);
  selector_free(sasx);
}

static void free_res(struct evalres *er) {
  for (int i = 0; i < E_N; i++) free(er[i].q);
}

static void print_quality(struct evalres *er, const struct sel_params *p, const char *what) {
  printf(
      "\nselection quality (%s; dev splits; min_confidence %.2f, extra_share %.2f, at most %d)\n",
      what, p->min_confidence, p->extra_share, p->max_skills);
  printf("| set | n | top-1 | top-3 | MRR@10 | put into the prompt | selects a skill |\n");
  printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  for (int i = 0; i < E_N; i++) {
    double put, any;
    put_rates(&er[i], p->min_confidence, p->extra_share, p->max_skills, &put, &any);
    if (er[i].q[0].has_gold)
      printf("| %s | %zu | %.3f | %.3f | %.3f | %.3f | %.3f |\n", er[i].label, er[i].nq, er[i].r1,
             er[i].r3, er[i].mrr, put, any);
    else
      printf("| %s | %zu | - | - | - | - | **%.3f** |\n", er[i].label, er[i].nq, any);
  }
}

/* The calibration curve: the best-ranked skill's confidence against how
 * often it is right, over every dev request (unrelated ones included, where
 * it is never right). */
static void print_calibration(struct evalres *er) {
  enum { B = 10 };
  double n[B] = {0}, ok[B] = {0}, sum[B] = {0};
  double tot = 0, ece = 0;
  for (int i = 0; i < E_N; i++) {
    if (i == E_MTS || i == E_MTX || i == E_ASX || i == E_U3) continue; /* counted already */
    for (size_t q = 0; q < er[i].nq; q++) {
      const struct qrec *r = &er[i].q[q];
      if (!r->n) continue;
      int b = (int)(r->conf[0] * B);
      if (b >= B) b = B - 1;
      n[b]++;
      sum[b] += r->conf[0];
      ok[b] += r->right[0];
      tot++;
    }
  }
  printf("\ncalibration of the best skill's confidence (all dev requests, unrelated included)\n");
  printf("| confidence | requests | mean confidence | right |\n| --- | --- | --- | --- |\n");
  for (int b = 0; b < B; b++) {
    if (!n[b]) continue;
    printf("| %.1f-%.1f | %.0f | %.3f | %.3f |\n", (double)b / B, (double)(b + 1) / B, n[b],
           sum[b] / n[b], ok[b] / n[b]);
    ece += fabs(sum[b] - ok[b]) / tot;
  }
  printf("expected calibration error: %.3f\n", ece);
}

/* min_confidence sweep: what the default is chosen from. */
static void print_sweep(struct evalres *er, const struct sel_params *p) {
  printf(
      "\nmin_confidence sweep (extra_share %.2f, at most %d): put into the prompt / unrelated "
      "requests that select a skill\n",
      p->extra_share, p->max_skills);
  printf(
      "| min_confidence | MetaTool | MetaTool (same) | MetaTool+ex | Seal-Tools | Agent Skills | "
      "Agent Skills+ex "
      "| unrelated MT->AS | unrelated AS->MT | unrelated AS->MT+ex |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  static const double grid[] = {0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6};
  double th[sizeof grid / sizeof grid[0] + 1];
  size_t nth = 0;
  bool have = false; /* the default gets a row of its own */
  for (size_t g = 0; g < sizeof grid / sizeof grid[0]; g++) {
    if (!have && grid[g] >= p->min_confidence - 1e-9) {
      if (fabs(grid[g] - p->min_confidence) > 1e-9) th[nth++] = p->min_confidence;
      have = true;
    }
    th[nth++] = grid[g];
  }
  if (!have) th[nth++] = p->min_confidence;
  for (size_t t = 0; t < nth; t++) {
    printf("| %.2f%s |", th[t], fabs(th[t] - p->min_confidence) < 1e-9 ? " (default)" : "");
    for (int i = 0; i < E_N; i++) {
      double put, any;
      put_rates(&er[i], th[t], p->extra_share, p->max_skills, &put, &any);
      printf(" %.3f |", er[i].q[0].has_gold ? put : any);
    }
    printf("\n");
  }
  /* the default is derived from this: the lowest threshold (in steps of
   * 0.01) at which the two unrelated sets without examples, pooled, select
   * a skill for at most 10% of their requests */
  double pick = 1;
  for (int t = 1; t <= 100; t++) {
    double put, a1, a2;
    put_rates(&er[E_U1], t / 100.0, p->extra_share, p->max_skills, &put, &a1);
    put_rates(&er[E_U2], t / 100.0, p->extra_share, p->max_skills, &put, &a2);
    double pooled =
        (a1 * (double)er[E_U1].nq + a2 * (double)er[E_U2].nq) / (double)(er[E_U1].nq + er[E_U2].nq);
    if (pooled <= 0.10) {
      pick = t / 100.0;
      break;
    }
  }
  printf(
      "lowest min_confidence with the pooled unrelated rate (MT->AS, AS->MT) at most 10%%: "
      "%.2f:",
      pick);
  for (int i = 0; i < E_N; i++) {
    double put, any;
    put_rates(&er[i], pick, p->extra_share, p->max_skills, &put, &any);
    printf(" %s %.3f%s", er[i].label, er[i].q[0].has_gold ? put : any, i + 1 < E_N ? ";" : "\n");
  }
}

static void print_fit(const char *name, const struct rows *r, bool emb) {
  bool use[SEL_NFEAT];
  for (int j = 0; j < SEL_NFEAT; j++)
    use[j] = emb || (j != 2 && j != 4 && j != 6 && j != 10 && j != 11);
  double b[SEL_NFEAT + 1];
  fit_logistic(r, use, b);
  printf("static const float %s[SEL_NFEAT + 1] = {", name);
  for (int j = 0; j <= SEL_NFEAT; j++) printf("%s%.3ff", j ? ", " : "", b[j]);
  printf("};  /* %zu rows */\n", r->n);
  printf("  BENCH_CONF_%s=", emb ? "EMB" : "KW");
  for (int j = 0; j <= SEL_NFEAT; j++) printf("%s%.3f", j ? "," : "", b[j]);
  printf("\n");
}

static void quality(const char *dir, const char *outdir, struct embedder *emb, bool fit) {
  struct data d;
  if (load_data(dir, &d)) exit(1);
  struct sel_params p;
  bench_params(&p);
  struct evalres er[E_N], ek[E_N];
  struct rows re = {0}, rk = {0};
  run_all(&d, emb, &p, outdir, er, fit ? &re : NULL);
  print_quality(er, &p, "fused, builtin embedding");
  print_calibration(er);
  print_sweep(er, &p);
  run_all(&d, NULL, &p, NULL, ek, fit ? &rk : NULL);
  print_quality(ek, &p, "keyword only, no embedding");
  print_calibration(ek);
  if (fit) {
    printf("\nfitted confidence weights (paste into src/skills/select.c):\n");
    print_fit("conf_w_emb", &re, true);
    print_fit("conf_w_kw", &rk, false);
  }
  free(re.x), free(re.y), free(re.w), free(rk.x), free(rk.y), free(rk.w);
  free_res(er);
  free_res(ek);
  free_data(&d);
}

/* The same quality table with an OpenAI-compatible embedding endpoint
 * (BENCH_EMBED_URL, model BENCH_EMBED_MODEL or "fake-26"): what such a
 * server buys over the builtin embedding, and what one selection costs
 * when each request is embedded over HTTP. */
static void remote_quality(const char *dir, const char *url) {
  const char *model = getenv("BENCH_EMBED_MODEL") ? getenv("BENCH_EMBED_MODEL") : "fake-26";
  struct embed_opts o = {.kind = EMBED_OPENAI, .base_url = url, .model = model, .timeout_s = 30};
  struct embedder *emb;
  struct err e;
  if (embedder_new(&o, &emb, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return;
  }
  struct data d;
  if (load_data(dir, &d)) exit(1);
  struct sel_params p;
  bench_params(&p);
  struct evalres er[E_N];
  double t0 = util_monotonic();
  run_all(&d, emb, &p, NULL, er, NULL);
  double secs = util_monotonic() - t0;
  size_t nq = 0;
  for (int i = 0; i < E_N; i++) nq += er[i].nq;
  char what[512];
  snprintf(what, sizeof what, "fused, embeddings from %s model %s; %.2f ms per request", url, model,
           secs * 1e3 / (double)(nq ? nq : 1));
  print_quality(er, &p, what);
  print_sweep(er, &p);
  free_res(er);
  free_data(&d);
  embedder_free(emb);
}

/* ---- the ranking table against the plain BM25 anchor ------------------- */

static struct selector *build(const struct tool *tools, size_t n, struct embedder *emb,
                              const struct sel_params *p) {
  struct selector *s = selector_new(p);
  for (size_t i = 0; i < n; i++) {
    char *nm = skill_name(tools[i].name);
    struct sel_doc d = {.name = nm, .description = tools[i].desc};
    selector_add(s, &d);
    free(nm);
  }
  struct err w;
  int deg = 0;
  selector_build(s, emb, NULL, &deg, &w);
  if (deg) fprintf(stderr, "warning: %s\n", w.msg);
  return s;
}

static void run_dataset(const char *dir, const char *ds, const char *outdir, struct embedder *emb) {
  char tp[4096], qp[4096];
  snprintf(tp, sizeof tp, "%s/%s/tools.jsonl", dir, ds);
  snprintf(qp, sizeof qp, "%s/%s/queries.jsonl", dir, ds);
  struct tool *tools;
  struct query *qs;
  size_t nt = load_tools(tp, &tools), nq = load_queries(qp, &qs);

  /* baseline */
  struct baseline b = {.N = nt, .d = xmalloc(sizeof(struct bdoc) * nt)};
  double tot = 0;
  for (size_t i = 0; i < nt; i++) {
    struct sbuf t = {0};
    sbuf_printf(&t, "%s %s", tools[i].name, tools[i].desc);
    b.d[i].n = lower_words(t.s, &b.d[i].w);
    tot += b.d[i].n;
    sbuf_free(&t);
  }
  b.avgdl = tot / (double)nt;
  baseline_index(&b);

  struct sel_params p;
  bench_params(&p);
  struct selector *s = build(tools, nt, emb, &p);

  struct metrics m[4] = {0};
  const char *names[4] = {"bm25-plain", "keyword", "embedding", "fused"};
  FILE *f[4];
  for (int i = 0; i < 4; i++) f[i] = open_pred(outdir, ds, names[i]);
  double *score = xmalloc(sizeof *score * nt);
  size_t ranked[10];
  struct sel_hit hits[10];
  for (size_t qi = 0; qi < nq; qi++) {
    /* baseline top 10 (ties: lower index first) */
    baseline_scores(&b, qs[qi].text, score);
    size_t n = 0;
    for (size_t r = 0; r < 10; r++) {
      size_t best = nt;
      for (size_t i = 0; i < nt; i++) {
        if (score[i] <= 0) continue;
        int used = 0;
        for (size_t k = 0; k < n; k++) used |= ranked[k] == i;
        if (used) continue;
        if (best == nt || score[i] > score[best]) best = i;
      }
      if (best == nt) break;
      ranked[n++] = best;
    }
    score_ranked(&m[0], &qs[qi], tools, ranked, n);
    write_pred(f[0], &qs[qi], tools, ranked, n);
    enum sel_mode modes[3] = {SEL_BM25, SEL_EMBED, SEL_FUSED};
    for (int k = 0; k < 3; k++) {
      size_t nh = 0;
      int deg;
      struct err w;
      selector_rank(s, qs[qi].text, modes[k], hits, 10, &nh, &deg, &w);
      for (size_t i = 0; i < nh; i++) ranked[i] = hits[i].doc;
      score_ranked(&m[k + 1], &qs[qi], tools, ranked, nh);
      write_pred(f[k + 1], &qs[qi], tools, ranked, nh);
    }
  }
  printf("\n%s: %zu tools, %zu queries\n", ds, nt, nq);
  printf("| method | recall@1 | recall@3 | MRR@10 |\n| --- | --- | --- | --- |\n");
  for (int i = 0; i < 4; i++) {
    printf("| %s | %.4f | %.4f | %.4f |\n", names[i], m[i].r1 / m[i].n, m[i].r3 / m[i].n,
           m[i].mrr / m[i].n);
    if (f[i]) fclose(f[i]);
  }
  free(score);
  selector_free(s);
  for (size_t i = 0; i < nt; i++) {
    for (int k = 0; k < b.d[i].n; k++) free(b.d[i].w[k]);
    free(b.d[i].w);
    free(tools[i].id);
    free(tools[i].name);
    free(tools[i].desc);
  }
  free(b.d);
  free(b.p);
  free(tools);
  for (size_t i = 0; i < nq; i++) {
    for (int k = 0; k < qs[i].ngold; k++) free(qs[i].gold[k]);
    free(qs[i].gold);
    free(qs[i].id);
    free(qs[i].text);
  }
  free(qs);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Latency of selector_select with n skills drawn (cycled, renamed) from
 * the sealtools and metatool tools, over the metatool queries: as asked
 * ("short", ~100 characters) and long (each query followed by the next 14,
 * ~1,500 characters: a request with pasted context). */
static void latency(const char *dir, struct embedder *emb) {
  char tp[4096], tp2[4096], qp[4096];
  snprintf(tp, sizeof tp, "%s/sealtools/tools.jsonl", dir);
  snprintf(tp2, sizeof tp2, "%s/metatool/tools.jsonl", dir);
  snprintf(qp, sizeof qp, "%s/metatool/queries.jsonl", dir);
  struct tool *t1, *t2;
  struct query *qs;
  size_t n1 = load_tools(tp, &t1), n2 = load_tools(tp2, &t2), nq = load_queries(qp, &qs);
  size_t all = n1 + n2;
  char **longq = xmalloc(sizeof *longq * nq);
  double longlen = 0;
  for (size_t i = 0; i < nq; i++) {
    struct sbuf b = {0};
    for (size_t k = 0; k < 15; k++) {
      sbuf_puts(&b, qs[(i + k) % nq].text);
      sbuf_puts(&b, " ");
    }
    longlen += (double)b.len;
    longq[i] = sbuf_take(&b);
  }
  printf(
      "\nselection latency (selector_select, fused, builtin embedding; %zu metatool queries as\n"
      "asked and long (%.0f characters on average); each the fastest of 3 runs)\n",
      nq, longlen / (double)nq);
  printf(
      "| skills | requests | build ms | mean us | p50 us | p99 us |\n"
      "| --- | --- | --- | --- | --- | --- |\n");
  /* the last size again with two examples per skill (two of the Seal-Tools
   * queries, which the timed MetaTool requests are not) */
  struct query *sq;
  char sqp[4096];
  snprintf(sqp, sizeof sqp, "%s/sealtools/queries.jsonl", dir);
  size_t nsq = load_queries(sqp, &sq);
  size_t sizes[4] = {10, 1000, 12000, 12000};
  for (int si = 0; si < 4; si++) {
    size_t n = sizes[si];
    bool with_ex = si == 3;
    double t0 = util_monotonic();
    struct selector *s = selector_new(NULL);
    for (size_t i = 0; i < n; i++) {
      const struct tool *t = i % all < n2 ? &t2[i % all] : &t1[i % all - n2];
      char nm[256];
      snprintf(nm, sizeof nm, "%s-%zu", t->name, i / all);
      const char *ex[3] = {sq[(2 * i) % nsq].text, sq[(2 * i + 1) % nsq].text, NULL};
      struct sel_doc d = {.name = nm, .description = t->desc, .examples = with_ex ? ex : NULL};
      selector_add(s, &d);
    }
    struct err w;
    selector_build(s, emb, NULL, NULL, &w);
    double tb = util_monotonic() - t0;
    double *lat = xmalloc(sizeof *lat * nq);
    struct sel_hit hits[8];
    size_t nh;
    for (int kind = 0; kind < 2; kind++) {
      for (size_t qi = 0; qi < nq; qi++) {
        /* the fastest of 3 runs: the machine is shared, and a preempted run
         * says nothing about the selection */
        lat[qi] = 1e30;
        for (int rep = 0; rep < 3; rep++) {
          double a = util_monotonic();
          selector_select(s, kind ? longq[qi] : qs[qi].text, hits, 8, &nh, NULL, &w);
          double us = (util_monotonic() - a) * 1e6;
          if (us < lat[qi]) lat[qi] = us;
        }
      }
      double sum = 0;
      for (size_t qi = 0; qi < nq; qi++) sum += lat[qi];
      qsort(lat, nq, sizeof *lat, cmp_d);
      printf("| %zu%s | %s | %.1f | %.1f | %.1f | %.1f |\n", n, with_ex ? " (2 examples each)" : "",
             kind ? "long" : "as asked", tb * 1e3, sum / (double)nq, lat[nq / 2],
             lat[(size_t)(nq * 0.99)]);
    }
    free(lat);
    selector_free(s);
  }
  for (size_t i = 0; i < nq; i++) free(longq[i]);
  free(longq);
  for (size_t i = 0; i < n1; i++) free(t1[i].id), free(t1[i].name), free(t1[i].desc);
  for (size_t i = 0; i < n2; i++) free(t2[i].id), free(t2[i].name), free(t2[i].desc);
  free(t1);
  free(t2);
  free_queries(qs, nq);
  free_queries(sq, nsq);
}

/* Cold and warm load+index of n SKILL.md skills written to a temp
 * folder: cold = a fresh state.db (every embedding computed and stored),
 * warm = the same again (every embedding from the cache), and without a
 * cache at all. */
static void load_times(const char *dir, struct embedder *emb, size_t n) {
  char tp[4096], tp2[4096];
  snprintf(tp, sizeof tp, "%s/sealtools/tools.jsonl", dir);
  snprintf(tp2, sizeof tp2, "%s/metatool/tools.jsonl", dir);
  struct tool *t1, *t2;
  size_t n1 = load_tools(tp, &t1), n2 = load_tools(tp2, &t2), all = n1 + n2;
  char tmp[] = "/tmp/luagent-bench-skills-XXXXXX";
  if (!mkdtemp(tmp)) return;
  char sk[4200];
  snprintf(sk, sizeof sk, "%s/skills", tmp);
  mkdir(sk, 0755);
  for (size_t i = 0; i < n; i++) {
    const struct tool *t = i % all < n2 ? &t2[i % all] : &t1[i % all - n2];
    char *nm = skill_name(t->name);
    char d[4400], f[4500];
    snprintf(d, sizeof d, "%s/%s-%zu", sk, nm, i);
    mkdir(d, 0755);
    snprintf(f, sizeof f, "%s/SKILL.md", d);
    FILE *fp = fopen(f, "w");
    if (fp) {
      cJSON *js = cJSON_CreateString(t->desc);
      char *q = cJSON_PrintUnformatted(js); /* a JSON string is a valid YAML scalar */
      fprintf(fp, "---\nname: %s-%zu\ndescription: %s\n---\nUse %s.\n", nm, i, q, t->name);
      free(q);
      cJSON_Delete(js);
      fclose(fp);
    }
    free(nm);
  }
  char db[4300];
  snprintf(db, sizeof db, "%s/state.db", tmp);
  printf("\nload + index %zu SKILL.md skills (builtin embedding)\n", n);
  printf("| run | ms | cache hits |\n| --- | --- | --- |\n");
  const char *label[3] = {"cold (empty cache)", "warm (cache hit)", "no cache"};
  for (int r = 0; r < 3; r++) {
    struct store *st = NULL;
    struct err e;
    if (r < 2 && store_open_path(db, &st, &e)) {
      fprintf(stderr, "%s\n", e.msg);
      break;
    }
    double t0 = util_monotonic();
    struct skillset *ss;
    if (skillset_load_dir(sk, "skills", NULL, NULL, emb, st, &ss, &e)) {
      fprintf(stderr, "%s\n", e.msg);
      store_close(st);
      break;
    }
    double ms = (util_monotonic() - t0) * 1e3;
    printf("| %s | %.0f | %zu |\n", label[r], ms, selector_cache_hits(skillset_selector(ss)));
    if (skillset_count(ss) != n) printf("(only %zu of %zu skills loaded)\n", skillset_count(ss), n);
    skillset_free(ss);
    store_close(st);
  }
  char cmd[4400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
  for (size_t i = 0; i < n1; i++) free(t1[i].id), free(t1[i].name), free(t1[i].desc);
  for (size_t i = 0; i < n2; i++) free(t2[i].id), free(t2[i].name), free(t2[i].desc);
  free(t1);
  free(t2);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_select TOOLSEL_DIR [OUT_DIR] [--fit]\n");
    return 2;
  }
  bool fit = false;
  const char *outdir = NULL;
  for (int i = 2; i < argc; i++)
    if (!strcmp(argv[i], "--fit"))
      fit = true;
    else
      outdir = argv[i];
  struct embed_opts o = {.kind = EMBED_BUILTIN};
  if (getenv("BENCH_DIM")) o.dim = atoi(getenv("BENCH_DIM"));
  struct embedder *emb;
  struct err e;
  if (embedder_new(&o, &emb, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  struct sel_params p;
  bench_params(&p);
  printf(
      "luagent skill selection benchmark (builtin embedding %s; rrf_k=%g, weights bm25=%g "
      "embed=%g, keyword_boost=%g)\n",
      embedder_model(emb), p.rrf_k, p.w_bm25, p.w_embed, p.keyword_boost);
  const char *only = getenv("BENCH_ONLY");
  if (!only || !strcmp(only, "quality")) quality(argv[1], outdir, emb, fit);
  if (getenv("BENCH_EMBED_URL") && (!only || !strcmp(only, "remote")))
    remote_quality(argv[1], getenv("BENCH_EMBED_URL"));
  if (!only || !strcmp(only, "metatool")) run_dataset(argv[1], "metatool", outdir, emb);
  if (!only || !strcmp(only, "sealtools")) run_dataset(argv[1], "sealtools", outdir, emb);
  if (!only || !strcmp(only, "latency")) latency(argv[1], emb);
  if (!only || !strcmp(only, "load")) load_times(argv[1], emb, 10000);
  embedder_free(emb);
  return 0;
}
