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
 * for score.py. Then measures the latency of one selection with 10, 1,000
 * and 10,000 skills loaded.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
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

/* Defaults, or overrides from BENCH_RRF_K, BENCH_W_BM25, BENCH_W_EMBED,
 * BENCH_KW_BOOST (for exploring; the published table uses the defaults). */
static void bench_params(struct sel_params *p) {
  sel_params_default(p);
  const char *v;
  if ((v = getenv("BENCH_RRF_K"))) p->rrf_k = atof(v);
  if ((v = getenv("BENCH_W_BM25"))) p->w_bm25 = atof(v);
  if ((v = getenv("BENCH_W_EMBED"))) p->w_embed = atof(v);
  if ((v = getenv("BENCH_KW_BOOST"))) p->keyword_boost = atof(v);
}

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
 * the sealtools and metatool tools, over the metatool queries. */
static void latency(const char *dir, struct embedder *emb) {
  char tp[4096], tp2[4096], qp[4096];
  snprintf(tp, sizeof tp, "%s/sealtools/tools.jsonl", dir);
  snprintf(tp2, sizeof tp2, "%s/metatool/tools.jsonl", dir);
  snprintf(qp, sizeof qp, "%s/metatool/queries.jsonl", dir);
  struct tool *t1, *t2;
  struct query *qs;
  size_t n1 = load_tools(tp, &t1), n2 = load_tools(tp2, &t2), nq = load_queries(qp, &qs);
  size_t all = n1 + n2;
  printf(
      "\nselection latency (selector_select, fused, builtin embedding; %zu metatool queries,\n"
      "each the fastest of 3 runs)\n",
      nq);
  printf("| skills | build ms | mean us | p50 us | p99 us |\n| --- | --- | --- | --- | --- |\n");
  size_t sizes[3] = {10, 1000, 10000};
  for (int si = 0; si < 3; si++) {
    size_t n = sizes[si];
    double t0 = util_monotonic();
    struct selector *s = selector_new(NULL);
    for (size_t i = 0; i < n; i++) {
      const struct tool *t = i % all < n2 ? &t2[i % all] : &t1[i % all - n2];
      char nm[256];
      snprintf(nm, sizeof nm, "%s-%zu", t->name, i / all);
      struct sel_doc d = {.name = nm, .description = t->desc};
      selector_add(s, &d);
    }
    struct err w;
    selector_build(s, emb, NULL, NULL, &w);
    double tb = util_monotonic() - t0;
    double *lat = xmalloc(sizeof *lat * nq);
    struct sel_hit hits[8];
    size_t nh;
    for (size_t qi = 0; qi < nq; qi++) {
      /* the fastest of 3 runs: the machine is shared, and a preempted run
       * says nothing about the selection */
      lat[qi] = 1e30;
      for (int rep = 0; rep < 3; rep++) {
        double a = util_monotonic();
        selector_select(s, qs[qi].text, hits, 8, &nh, NULL, &w);
        double us = (util_monotonic() - a) * 1e6;
        if (us < lat[qi]) lat[qi] = us;
      }
    }
    double sum = 0;
    for (size_t qi = 0; qi < nq; qi++) sum += lat[qi];
    qsort(lat, nq, sizeof *lat, cmp_d);
    printf("| %zu | %.1f | %.1f | %.1f | %.1f |\n", n, tb * 1e3, sum / (double)nq, lat[nq / 2],
           lat[(size_t)(nq * 0.99)]);
    free(lat);
    selector_free(s);
  }
  for (size_t i = 0; i < n1; i++) free(t1[i].id), free(t1[i].name), free(t1[i].desc);
  for (size_t i = 0; i < n2; i++) free(t2[i].id), free(t2[i].name), free(t2[i].desc);
  free(t1);
  free(t2);
  for (size_t i = 0; i < nq; i++) {
    for (int k = 0; k < qs[i].ngold; k++) free(qs[i].gold[k]);
    free(qs[i].gold), free(qs[i].id), free(qs[i].text);
  }
  free(qs);
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
    fprintf(stderr, "usage: bench_select TOOLSEL_DIR [OUT_DIR]\n");
    return 2;
  }
  const char *outdir = argc > 2 ? argv[2] : NULL;
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
  if (!only || !strcmp(only, "metatool")) run_dataset(argv[1], "metatool", outdir, emb);
  if (!only || !strcmp(only, "sealtools")) run_dataset(argv[1], "sealtools", outdir, emb);
  if (!only || !strcmp(only, "latency")) latency(argv[1], emb);
  if (!only || !strcmp(only, "load")) load_times(argv[1], emb, 10000);
  embedder_free(emb);
  return 0;
}
