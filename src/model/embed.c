/* embed.c - see embed.h. */
#include "embed.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "json.h"
#include "store.h"
#include "tokenize.h"
#include "util.h"

struct embedder {
  enum embed_kind kind;
  char *base_url, *model, *api_key_env;
  double timeout_s;
  int dim;
  char id[512];
};

/* ---- builtin ----------------------------------------------------------- */

#define W_UNIGRAM 1.0f
#define W_NGRAMS 1.0f /* all n-grams of one word together */
#define W_BIGRAM 0.5f

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

static uint64_t fnv(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

static void add_feature(float *v, int dim, uint64_t h, float w) {
  h = mix64(h);
  uint32_t idx = (uint32_t)(h % (uint64_t)dim);
  v[idx] += (h >> 63) ? -w : w;
}

struct bstate {
  float *v;
  int dim;
  char prev[TOK_MAX + 1];
  size_t prevlen;
};

static int builtin_word(void *ud, const char *w, size_t wl, const char *stem, size_t sl) {
  struct bstate *b = ud;
  const uint64_t basis = 0xcbf29ce484222325ULL;
  add_feature(b->v, b->dim, fnv(fnv(basis, "u", 1), stem, sl), W_UNIGRAM);
  if (b->prevlen) {
    uint64_t h = fnv(fnv(basis, "b", 1), b->prev, b->prevlen);
    h = fnv(h, " ", 1);
    add_feature(b->v, b->dim, fnv(h, stem, sl), W_BIGRAM);
  }
  memcpy(b->prev, stem, sl);
  b->prevlen = sl;
  /* character 3- and 4-grams of "<word>" */
  if ((unsigned char)w[0] < 0x80 && wl >= 3) {
    char buf[TOK_MAX + 3];
    buf[0] = '<';
    memcpy(buf + 1, w, wl);
    buf[wl + 1] = '>';
    size_t n = wl + 2;
    size_t count = (n - 2) + (n - 3);
    float wt = W_NGRAMS / sqrtf((float)count);
    for (size_t g = 3; g <= 4; g++)
      for (size_t i = 0; i + g <= n; i++)
        add_feature(b->v, b->dim, fnv(fnv(basis, g == 3 ? "3" : "4", 1), buf + i, g), wt);
  }
  return 0;
}

void embed_builtin(const char *text, size_t len, float *out, int dim) {
  memset(out, 0, sizeof *out * (size_t)dim);
  struct bstate b = {.v = out, .dim = dim};
  tok_words(text, len, builtin_word, &b);
  double ss = 0;
  for (int i = 0; i < dim; i++) ss += (double)out[i] * out[i];
  if (ss > 0) {
    float inv = (float)(1.0 / sqrt(ss));
    for (int i = 0; i < dim; i++) out[i] *= inv;
  }
}

/* ---- provider ---------------------------------------------------------- */

int embedder_new(const struct embed_opts *o, struct embedder **out, struct err *e) {
  *out = NULL;
  struct embedder *m = xcalloc(1, sizeof *m);
  m->kind = o->kind;
  m->timeout_s = o->timeout_s > 0 ? o->timeout_s : 30;
  if (o->kind == EMBED_BUILTIN) {
    m->dim = o->dim > 0 ? o->dim : EMBED_BUILTIN_DIM;
    if (m->dim > 65536) {
      free(m);
      return err_set(e, ERR_INVALID, "config", "embeddings.dim %d is too large (max 65536)",
                     o->dim);
    }
    snprintf(m->id, sizeof m->id, "builtin-v1/%d", m->dim);
  } else if (o->kind == EMBED_OPENAI) {
    if (!o->base_url || !o->base_url[0] || !o->model || !o->model[0]) {
      free(m);
      return err_set(e, ERR_INVALID, "config",
                     "embeddings: kind \"openai\" needs base_url and model");
    }
    m->base_url = xstrdup(o->base_url);
    m->model = xstrdup(o->model);
    m->api_key_env = o->api_key_env ? xstrdup(o->api_key_env) : NULL;
    snprintf(m->id, sizeof m->id, "openai:%s:%s", m->base_url, m->model);
  } else {
    free(m);
    return err_set(e, ERR_INVALID, "config", "embeddings: unknown kind %d", (int)o->kind);
  }
  *out = m;
  return 0;
}

static int embedder_check(const struct config *cfg, struct embedder **out, struct err *e) {
  struct embed_opts o = {.kind = EMBED_BUILTIN};
  const cJSON *t = cfg ? config_get(cfg, "embeddings") : NULL;
  if (t && !cJSON_IsObject(t))
    return err_set(e, ERR_INVALID, "config", "embeddings must be a table");
  if (t) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(t, "kind");
    if (k && !cJSON_IsString(k))
      return err_set(e, ERR_INVALID, "config", "embeddings.kind must be \"builtin\" or \"openai\"");
    if (k && !strcmp(k->valuestring, "openai"))
      o.kind = EMBED_OPENAI;
    else if (k && strcmp(k->valuestring, "builtin"))
      return err_set(e, ERR_INVALID, "config",
                     "embeddings.kind \"%s\" is unknown (expected \"builtin\" or \"openai\")",
                     k->valuestring);
    static const char *const known[] = {"kind",      "base_url", "model", "api_key_env",
                                        "timeout_s", "dim",      NULL};
    if (config_check_keys(t, "embeddings", known, e)) return ERR_INVALID;
    const cJSON *it;
    cJSON_ArrayForEach(it, t) {
      int want_num = !strcmp(it->string, "timeout_s") || !strcmp(it->string, "dim");
      if (want_num ? !cJSON_IsNumber(it) : !cJSON_IsString(it))
        return err_set(e, ERR_INVALID, "config", "embeddings.%s must be a %s", it->string,
                       want_num ? "number" : "string");
    }
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(t, "base_url"))) o.base_url = v->valuestring;
    if ((v = cJSON_GetObjectItemCaseSensitive(t, "model"))) o.model = v->valuestring;
    if ((v = cJSON_GetObjectItemCaseSensitive(t, "api_key_env"))) o.api_key_env = v->valuestring;
    if ((v = cJSON_GetObjectItemCaseSensitive(t, "timeout_s"))) o.timeout_s = v->valuedouble;
    if ((v = cJSON_GetObjectItemCaseSensitive(t, "dim"))) o.dim = v->valueint;
  }
  return embedder_new(&o, out, e);
}

void embedder_free(struct embedder *m) {
  if (!m) return;
  free(m->base_url);
  free(m->model);
  free(m->api_key_env);
  free(m);
}

const char *embedder_model(const struct embedder *m) {
  return m->id;
}
enum embed_kind embedder_kind(const struct embedder *m) {
  return m->kind;
}
/* ---- OpenAI-compatible client ------------------------------------------ */

#define MAX_RESPONSE (64u << 20)

static size_t on_body(char *p, size_t size, size_t n, void *ud) {
  struct sbuf *b = ud;
  size_t len = size * n;
  if (b->len + len > MAX_RESPONSE) return 0; /* aborts the transfer */
  sbuf_append(b, p, len);
  return len;
}

static void normalize(float *v, int dim) {
  double ss = 0;
  for (int i = 0; i < dim; i++) ss += (double)v[i] * v[i];
  if (ss > 0) {
    float inv = (float)(1.0 / sqrt(ss));
    for (int i = 0; i < dim; i++) v[i] *= inv;
  }
}

/* One request for texts[0..n): fills vecs (n * m->dim; m->dim set from the
 * first answer). */
static int openai_batch(struct embedder *m, const char *const *texts, size_t n, float **vecs,
                        size_t have, struct err *e) {
  char url[1024];
  size_t bl = strlen(m->base_url);
  while (bl && m->base_url[bl - 1] == '/') bl--;
  if (bl >= 11 && !strncmp(m->base_url + bl - 11, "/embeddings", 11))
    snprintf(url, sizeof url, "%.*s", (int)bl, m->base_url);
  else
    snprintf(url, sizeof url, "%.*s/embeddings", (int)bl, m->base_url);

  cJSON *req = cJSON_CreateObject();
  cJSON_AddStringToObject(req, "model", m->model);
  cJSON *in = cJSON_AddArrayToObject(req, "input");
  for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(in, cJSON_CreateString(texts[i]));
  char *body = json_print(req, 0);
  cJSON_Delete(req);

  CURL *c = curl_easy_init();
  if (!c) {
    free(body);
    return err_set(e, ERR_IO, "embed_error", "embeddings: cannot initialise libcurl");
  }
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  const char *key = m->api_key_env ? getenv(m->api_key_env) : NULL;
  if (key && key[0]) {
    char auth[2048];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
    h = curl_slist_append(h, auth);
  }
  struct sbuf resp = {0};
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &resp);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(m->timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(m->timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  CURLcode cr = curl_easy_perform(c);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  free(body);
  int rc = 0;
  cJSON *doc = NULL;
  if (cr != CURLE_OK) {
    rc = err_set(e, ERR_IO, "embed_error", "embeddings: %s: %s", url, curl_easy_strerror(cr));
    goto out;
  }
  if (status < 200 || status > 299) {
    struct sbuf ex = {0};
    util_escape_text(&ex, resp.s ? resp.s : "", resp.len, 200);
    rc = err_set(e, ERR_IO, "embed_error", "embeddings: %s: HTTP %ld: %s", url, status,
                 ex.s ? ex.s : "");
    sbuf_free(&ex);
    goto out;
  }
  struct err pe = {0};
  if (json_parse(resp.s ? resp.s : "", resp.len, 0, &doc, &pe)) {
    rc = err_set(e, ERR_IO, "embed_error", "embeddings: %s: the answer is not JSON: %s", url, pe.msg);
    goto out;
  }
  const cJSON *data = cJSON_GetObjectItemCaseSensitive(doc, "data");
  if (!cJSON_IsArray(data) || (size_t)cJSON_GetArraySize(data) != n) {
    rc = err_set(e, ERR_IO, "embed_error",
                 "embeddings: %s: the answer has no 'data' list of %zu embeddings", url, n);
    goto out;
  }
  size_t i = 0;
  const cJSON *item;
  cJSON_ArrayForEach(item, data) {
    const cJSON *idx = cJSON_GetObjectItemCaseSensitive(item, "index");
    size_t at = cJSON_IsNumber(idx) ? (size_t)idx->valuedouble : i;
    const cJSON *vec = cJSON_GetObjectItemCaseSensitive(item, "embedding");
    int d = cJSON_IsArray(vec) ? cJSON_GetArraySize(vec) : 0;
    if (at >= n || d <= 0 || (m->dim && d != m->dim) || d > 65536) {
      rc = err_set(e, ERR_IO, "embed_error",
                   "embeddings: %s: embedding %zu is missing or has %d dimensions (expected %d)",
                   url, i, d, m->dim);
      goto out;
    }
    if (!m->dim) m->dim = d;
    if (!*vecs) *vecs = xcalloc((have + n), sizeof(float) * (size_t)m->dim);
    float *dst = *vecs + (have + at) * (size_t)m->dim;
    int k = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, vec) dst[k++] = cJSON_IsNumber(x) ? (float)x->valuedouble : 0.0f;
    normalize(dst, m->dim);
    i++;
  }
out:
  cJSON_Delete(doc);
  sbuf_free(&resp);
  return rc;
}

int embedder_embed(struct embedder *m, const char *const *texts, size_t n, float **vecs, int *dim,
                   struct err *e) {
  *vecs = NULL;
  if (m->kind == EMBED_BUILTIN) {
    float *v = xmalloc(sizeof *v * (size_t)m->dim * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
      embed_builtin(texts[i], strlen(texts[i]), v + i * (size_t)m->dim, m->dim);
    *vecs = v;
    *dim = m->dim;
    return 0;
  }
  /* openai: batches; the first batch fixes the dimension, then the whole
   * buffer is allocated. */
  float *all = NULL;
  for (size_t off = 0; off < n; off += EMBED_BATCH) {
    size_t k = n - off < EMBED_BATCH ? n - off : EMBED_BATCH;
    float *part = NULL;
    int rc = openai_batch(m, texts + off, k, &part, 0, e);
    if (rc) {
      free(part);
      free(all);
      return rc;
    }
    if (!all) all = xcalloc(n ? n : 1, sizeof(float) * (size_t)m->dim);
    memcpy(all + off * (size_t)m->dim, part, sizeof(float) * (size_t)m->dim * k);
    free(part);
  }
  *vecs = all ? all : xcalloc(1, sizeof(float));
  *dim = m->dim;
  return 0;
}

void embed_content_hash(const char *text, char out[65]) {
  unsigned char h[32];
  crypto_generichash(h, sizeof h, (const unsigned char *)text, strlen(text), NULL, 0);
  util_hex(h, sizeof h, out);
}

int embedder_embed_cached(struct embedder *m, struct store *st, const char *const *texts, size_t n,
                          float **vecs, int *dim, size_t *hits, struct err *e) {
  if (hits) *hits = 0;
  if (!st) return embedder_embed(m, texts, n, vecs, dim, e);
  *vecs = NULL;
  sqlite3_stmt *get = NULL, *put = NULL;
  if (store_prepare(st, "SELECT dim, vec FROM embed_cache WHERE model = ?1 AND content_hash = ?2",
                    &get, e))
    return ERR_IO;
  char(*hashes)[65] = xmalloc(sizeof *hashes * (n ? n : 1));
  float **found = xcalloc(n ? n : 1, sizeof *found);
  size_t nmiss = 0, nhit = 0;
  int cdim = m->dim, rc = 0;
  for (size_t i = 0; i < n; i++) {
    embed_content_hash(texts[i], hashes[i]);
    sqlite3_reset(get);
    sqlite3_bind_text(get, 1, m->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(get, 2, hashes[i], -1, SQLITE_STATIC);
    if (sqlite3_step(get) == SQLITE_ROW) {
      int d = sqlite3_column_int(get, 0);
      int bytes = sqlite3_column_bytes(get, 1);
      if (d > 0 && (!cdim || d == cdim) && bytes == d * (int)sizeof(float)) {
        cdim = d;
        found[i] = xmalloc((size_t)bytes);
        memcpy(found[i], sqlite3_column_blob(get, 1), (size_t)bytes);
        nhit++;
        continue;
      }
    }
    nmiss++;
  }
  sqlite3_finalize(get);
  float *fresh = NULL;
  const char **miss = xmalloc(sizeof *miss * (nmiss ? nmiss : 1));
  size_t *missidx = xmalloc(sizeof *missidx * (nmiss ? nmiss : 1));
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (!found[i]) {
      missidx[k] = i;
      miss[k++] = texts[i];
    }
  if (nmiss) {
    int d = 0;
    rc = embedder_embed(m, miss, nmiss, &fresh, &d, e);
    if (rc) goto out;
    if (cdim && d != cdim) {
      rc = err_set(e, ERR_IO, "embed_error",
                   "embeddings: the model now returns %d dimensions, the cache has %d", d, cdim);
      goto out;
    }
    cdim = d;
    /* Store the new vectors; a cache that cannot be written only costs time. */
    if (store_prepare(st,
                      "INSERT OR REPLACE INTO embed_cache(model, content_hash, dim, vec) "
                      "VALUES (?1, ?2, ?3, ?4)",
                      &put, e) == 0) {
      struct err e2;
      int tx = store_begin(st, &e2) == 0;
      for (size_t j = 0; j < nmiss; j++) {
        sqlite3_reset(put);
        sqlite3_bind_text(put, 1, m->id, -1, SQLITE_STATIC);
        sqlite3_bind_text(put, 2, hashes[missidx[j]], -1, SQLITE_STATIC);
        sqlite3_bind_int(put, 3, cdim);
        sqlite3_bind_blob(put, 4, fresh + j * (size_t)cdim, cdim * (int)sizeof(float),
                          SQLITE_STATIC);
        sqlite3_step(put);
      }
      sqlite3_finalize(put);
      if (tx && store_commit(st, &e2)) store_rollback(st);
    }
  }
  if (!cdim) cdim = m->dim ? m->dim : 1;
  if (!m->dim) m->dim = cdim;
  *vecs = xcalloc(n ? n : 1, sizeof(float) * (size_t)cdim);
  for (size_t i = 0, j = 0; i < n; i++) {
    if (found[i]) {
      memcpy(*vecs + i * (size_t)cdim, found[i], sizeof(float) * (size_t)cdim);
    } else {
      memcpy(*vecs + i * (size_t)cdim, fresh + j * (size_t)cdim, sizeof(float) * (size_t)cdim);
      j++;
    }
  }
  *dim = cdim;
  if (hits) *hits = nhit;
out:
  for (size_t i = 0; i < n; i++) free(found[i]);
  free(found);
  free(hashes);
  free(miss);
  free(missidx);
  free(fresh);
  return rc;
}

int embedder_from_config(const struct config *cfg, struct embedder **out, struct err *e) {
  int rc = embedder_check(cfg, out, e);
  return rc ? config_error_at(cfg, "embeddings", e) : 0;
}
