/* memory.c - persistent memory with FTS5 search. See memory.h. */
#include "memory.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "config.h"
#include "json.h"
#include "util.h"

/* ------------------------------------------------------------ items */

void memory_item_clear(struct memory_item *it) {
  if (!it) return;
  free(it->ns);
  free(it->key);
  free(it->value);
  memset(it, 0, sizeof *it);
}

void memory_items_free(struct memory_item *items, size_t n) {
  for (size_t i = 0; items && i < n; i++) memory_item_clear(&items[i]);
  free(items);
}

cJSON *memory_item_value(const struct memory_item *it) {
  if (it->kind == MEMORY_JSON) {
    cJSON *v = json_parse_str(it->value, 0, NULL);
    if (v) return v;
  }
  return cJSON_CreateString(it->value ? it->value : "");
}

static char *col_dup(sqlite3_stmt *st, int i) {
  const unsigned char *t = sqlite3_column_text(st, i);
  return xstrdup(t ? (const char *)t : "");
}

static enum memory_kind kind_parse(const unsigned char *t) {
  return t && !strcmp((const char *)t, "json") ? MEMORY_JSON : MEMORY_TEXT;
}

/* -------------------------------------------------------- validation */

int memory_check_ns(const char *ns, struct err *e) {
  if (!ns) return err_set(e, ERR_INVALID, "invalid_args", "namespace missing");
  size_t n = strlen(ns);
  if (n > MEMORY_MAX_NS)
    return err_set(e, ERR_INVALID, "invalid_args", "namespace longer than %d bytes", MEMORY_MAX_NS);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)ns[i];
    if (!isalnum(c) && c != '_' && c != '-' && c != '.' && c != ':')
      return err_set(e, ERR_INVALID, "invalid_args",
                     "namespace '%.64s': only letters, digits and _ - . : are allowed", ns);
  }
  return 0;
}

int memory_check_key(const char *key, struct err *e) {
  if (!key || !*key) return err_set(e, ERR_INVALID, "invalid_args", "key must not be empty");
  size_t n = strlen(key);
  if (n > MEMORY_MAX_KEY)
    return err_set(e, ERR_INVALID, "invalid_args", "key longer than %d bytes", MEMORY_MAX_KEY);
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)key[i] < 0x20 || key[i] == 0x7f)
      return err_set(e, ERR_INVALID, "invalid_args", "key has control characters");
  return 0;
}

/* ------------------------------------------------------ store layer */

int memory_put(struct store *s, const char *ns, const char *key, const char *value, size_t len,
               enum memory_kind kind, size_t max_bytes, int *replaced, struct err *e) {
  int rc;
  if (replaced) *replaced = 0;
  if ((rc = memory_check_ns(ns, e)) || (rc = memory_check_key(key, e))) return rc;
  if (!value) return err_set(e, ERR_INVALID, "invalid_args", "key '%s': value missing", key);
  if (len > max_bytes)
    return err_set(e, ERR_LIMIT, "too_large",
                   "key '%s': value is %zu bytes, over the limit of %zu (memory.max_value_bytes)",
                   key, len, max_bytes);
  sqlite3_stmt *st = NULL;
  if (replaced) {
    if (store_cached(s, "SELECT 1 FROM memory WHERE ns = ?1 AND key = ?2", &st, e)) return ERR_IO;
    sqlite3_bind_text(st, 1, ns, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    store_release(s, st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return store_error(s, e, "memory lookup");
    *replaced = rc == SQLITE_ROW;
  }
  if (store_cached(s,
                    "INSERT INTO memory(ns, key, value, kind, updated) VALUES (?1, ?2, ?3, ?4, ?5)"
                    " ON CONFLICT(ns, key) DO UPDATE SET value = excluded.value,"
                    " kind = excluded.kind, updated = excluded.updated, tainted = 0",
                    &st, e))
    return ERR_IO;
  sqlite3_bind_text(st, 1, ns, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, value, (int)len, SQLITE_STATIC);
  sqlite3_bind_text(st, 4, kind == MEMORY_JSON ? "json" : "text", -1, SQLITE_STATIC);
  sqlite3_bind_double(st, 5, util_now());
  rc = sqlite3_step(st);
  store_release(s, st);
  if (rc != SQLITE_DONE) return store_error(s, e, "memory write");
  return 0;
}

int memory_mark_tainted(struct store *s, const char *ns, const char *key, struct err *e) {
  sqlite3_stmt *st = NULL;
  if (store_cached(s, "UPDATE memory SET tainted = 1 WHERE ns = ?1 AND key = ?2", &st, e))
    return ERR_IO;
  sqlite3_bind_text(st, 1, ns, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : store_error(s, e, "memory: mark tainted");
  store_release(s, st);
  return rc;
}

int memory_get(struct store *s, const char *ns, const char *key, struct memory_item *out,
               struct err *e) {
  int rc;
  memset(out, 0, sizeof *out);
  if ((rc = memory_check_ns(ns, e)) || (rc = memory_check_key(key, e))) return rc;
  sqlite3_stmt *st;
  if (store_cached(s,
                    "SELECT value, kind, updated, tainted FROM memory WHERE ns = ?1 AND key = ?2",
                    &st, e))
    return ERR_IO;
  sqlite3_bind_text(st, 1, ns, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    out->ns = xstrdup(ns);
    out->key = xstrdup(key);
    out->value = col_dup(st, 0);
    out->kind = kind_parse(sqlite3_column_text(st, 1));
    out->updated = sqlite3_column_double(st, 2);
    out->tainted = sqlite3_column_int(st, 3) != 0;
    rc = 1;
  } else if (rc == SQLITE_DONE) {
    rc = 0;
  } else {
    rc = store_error(s, e, "memory read");
  }
  store_release(s, st);
  return rc;
}

int memory_delete(struct store *s, const char *ns, const char *key, struct err *e) {
  int rc;
  if ((rc = memory_check_ns(ns, e)) || (rc = memory_check_key(key, e))) return rc;
  sqlite3_stmt *st;
  if (store_cached(s, "DELETE FROM memory WHERE ns = ?1 AND key = ?2", &st, e)) return ERR_IO;
  sqlite3_bind_text(st, 1, ns, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
  rc = sqlite3_step(st);
  store_release(s, st);
  if (rc != SQLITE_DONE) return store_error(s, e, "memory delete");
  return sqlite3_changes(store_db(s)) > 0;
}

int memory_count(struct store *s, const char *ns, size_t *out, struct err *e) {
  *out = 0;
  if (ns && memory_check_ns(ns, e)) return ERR_INVALID;
  sqlite3_stmt *st;
  if (store_cached(s, "SELECT count(*) FROM memory WHERE ?1 IS NULL OR ns = ?1", &st, e))
    return ERR_IO;
  if (ns) sqlite3_bind_text(st, 1, ns, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) *out = (size_t)sqlite3_column_int64(st, 0);
  store_release(s, st);
  return rc == SQLITE_ROW ? 0 : store_error(s, e, "memory count");
}

int memory_list(struct store *s, const char *ns, const char *prefix, size_t limit, char ***keys,
                size_t *n, struct err *e) {
  *keys = NULL;
  *n = 0;
  if (memory_check_ns(ns, e)) return ERR_INVALID;
  sqlite3_stmt *st;
  /* substr() rather than LIKE/GLOB: a prefix is literal text, wildcards
   * included. */
  if (store_cached(s,
                    "SELECT key FROM memory WHERE ns = ?1 AND substr(key, 1, length(?2)) = ?2"
                    " ORDER BY key LIMIT ?3",
                    &st, e))
    return ERR_IO;
  sqlite3_bind_text(st, 1, ns, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, prefix ? prefix : "", -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)limit);
  size_t cap = 0;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (*n == cap) {
      cap = cap ? cap * 2 : 16;
      *keys = xrealloc(*keys, cap * sizeof **keys);
    }
    (*keys)[(*n)++] = col_dup(st, 0);
  }
  store_release(s, st);
  if (rc != SQLITE_DONE) {
    for (size_t i = 0; i < *n; i++) free((*keys)[i]);
    free(*keys);
    *keys = NULL;
    *n = 0;
    return store_error(s, e, "memory list");
  }
  return 0;
}

/* ------------------------------------------------------- FTS query */

/* Words too common to say anything about relevance; dropped from a query
 * that has other words. Sorted for bsearch. */
static const char *const stop_words[] = {
    "a",     "about", "after", "all",  "also", "am",   "an",    "and",   "any",  "are",  "as",
    "at",    "be",    "been",  "but",  "by",   "can",  "could", "did",   "do",   "does", "for",
    "from",  "had",   "has",   "have", "he",   "her",  "his",   "how",   "i",    "if",   "in",
    "into",  "is",    "it",    "its",  "me",   "my",   "no",    "not",   "of",   "on",   "or",
    "our",   "she",   "so",    "some", "than", "that", "the",   "their", "them", "then", "there",
    "these", "they",  "this",  "to",   "up",   "us",   "was",   "we",    "were", "what", "when",
    "where", "which", "who",   "why",  "will", "with", "would", "you",   "your",
};

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int is_stop_word(const char *w) {
  return bsearch(&w, stop_words, sizeof stop_words / sizeof stop_words[0], sizeof stop_words[0],
                 cmp_str) != NULL;
}

#define MAX_WORD 64
#define MAX_CANDIDATES 256

/* Cuts n so that s[0..n) does not end inside a UTF-8 sequence. */
static size_t utf8_cut(const char *s, size_t n) {
  size_t k = n;
  while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
  return k;
}

int memory_fts_query(const char *text, struct sbuf *out) {
  char words[MAX_CANDIDATES][MAX_WORD + 1];
  int stop[MAX_CANDIDATES];
  int nw = 0, nstop = 0;
  const unsigned char *p = (const unsigned char *)(text ? text : "");
  while (*p && nw < MAX_CANDIDATES) {
    while (*p && !(isalnum(*p) || *p >= 0x80)) p++;
    const unsigned char *start = p;
    while (*p && (isalnum(*p) || *p >= 0x80)) p++;
    size_t len = (size_t)(p - start);
    if (!len) continue;
    if (len > MAX_WORD) len = utf8_cut((const char *)start, MAX_WORD);
    if (!len) continue;
    char w[MAX_WORD + 1];
    for (size_t i = 0; i < len; i++) w[i] = (char)tolower(start[i]);
    w[len] = 0;
    int dup = 0;
    for (int i = 0; i < nw && !dup; i++) dup = !strcmp(words[i], w);
    if (dup) continue;
    memcpy(words[nw], w, len + 1);
    stop[nw] = is_stop_word(w);
    nstop += stop[nw];
    nw++;
  }
  int used = 0;
  for (int i = 0; i < nw && used < MEMORY_MAX_TERMS; i++) {
    if (stop[i] && nstop < nw) continue;
    sbuf_puts(out, used ? " OR \"" : "\"");
    /* Words hold no '"' (it is not a word character); should one ever
     * get in, doubling it is FTS5's escape inside a string. */
    for (const char *c = words[i]; *c; c++) sbuf_append(out, c, *c == '"' ? 2 : 1);
    sbuf_puts(out, "\"");
    used++;
  }
  return used;
}

/* Ranks matches in the FTS index alone (bm25 weights: ns 0, key 2, value
 * 1; lower is better), keeps the best `cap` candidates, then joins them to
 * their rows and filters the namespace. Joining every match before ranking
 * costs about half as much again as ranking itself. Ties go to the newer
 * row, so the order is total and both phases agree. */
static const char search_sql[] =
    "SELECT m.ns, m.key, m.value, m.kind, m.updated, h.r, m.tainted FROM"
    " (SELECT rowid AS id, bm25(memory_fts, 0.0, 2.0, 1.0) AS r FROM memory_fts"
    "  WHERE memory_fts MATCH ?1 ORDER BY r, rowid DESC LIMIT ?4) AS h"
    " JOIN memory m ON m.id = h.id WHERE ?2 IS NULL OR m.ns = ?2"
    " ORDER BY h.r, h.id DESC LIMIT ?3";

/* One pass with at most cap candidates (-1: all). Appends to arr. */
static int search_pass(struct store *s, const char *q, size_t qlen, const char *ns, size_t limit,
                       long long cap, struct memory_item *arr, size_t *k, struct err *e) {
  sqlite3_stmt *st;
  if (store_cached(s, search_sql, &st, e)) return ERR_IO;
  sqlite3_bind_text(st, 1, q, (int)qlen, SQLITE_STATIC);
  if (ns) sqlite3_bind_text(st, 2, ns, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)limit);
  sqlite3_bind_int64(st, 4, cap);
  int rc = SQLITE_DONE;
  while (*k < limit && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    struct memory_item *it = &arr[(*k)++];
    it->ns = col_dup(st, 0);
    it->key = col_dup(st, 1);
    it->value = col_dup(st, 2);
    it->kind = kind_parse(sqlite3_column_text(st, 3));
    it->updated = sqlite3_column_double(st, 4);
    it->score = -sqlite3_column_double(st, 5);
    it->tainted = sqlite3_column_int(st, 6) != 0;
  }
  if (*k == limit) rc = SQLITE_DONE;
  store_release(s, st);
  return rc == SQLITE_DONE ? 0 : store_error(s, e, "memory search");
}

/* *any = 1 when memory holds a row in ns (in any namespace: ns NULL). The
 * (ns, key) index answers it without reading the table. */
static int any_saved(struct store *s, const char *ns, int *any, struct err *e) {
  sqlite3_stmt *st;
  if (store_cached(s,
                    ns ? "SELECT EXISTS (SELECT 1 FROM memory WHERE ns = ?1)"
                       : "SELECT EXISTS (SELECT 1 FROM memory)",
                    &st, e))
    return ERR_IO;
  if (ns) sqlite3_bind_text(st, 1, ns, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) *any = sqlite3_column_int(st, 0);
  store_release(s, st);
  return rc == SQLITE_ROW ? 0 : store_error(s, e, "memory search");
}

int memory_search(struct store *s, const char *ns, const char *text, size_t limit,
                  struct memory_item **items, size_t *n, struct err *e) {
  int rc;
  *items = NULL;
  *n = 0;
  if (ns && memory_check_ns(ns, e)) return ERR_INVALID;
  if (limit > MEMORY_MAX_SEARCH) limit = MEMORY_MAX_SEARCH;
  if (limit == 0) return 0;
  struct sbuf q = {0};
  if (memory_fts_query(text, &q) == 0) {
    sbuf_free(&q);
    return 0;
  }
  /* Nothing saved (in the namespace): no match can exist, since every
   * result is joined to its memory row. The usual case for a cold `ask`
   * in a new workspace, and the FTS5 search it skips is the dearest
   * statement of a start (preparing it connects the FTS table: ~0.6M
   * instructions, and FTS5's code paged in). */
  int any = 0;
  if ((rc = any_saved(s, ns, &any, e)) || !any) {
    sbuf_free(&q);
    return rc;
  }
  struct memory_item *arr = xcalloc(limit, sizeof *arr);
  size_t k = 0;
  /* Without a namespace filter the best `limit` candidates are the answer.
   * With one, the best 8x are usually enough; when they yield fewer than
   * `limit`, the namespace may hold more matches further down, so rank all
   * (exact either way: the filtered best of the best are the best). */
  long long cap = ns ? (long long)limit * 8 : (long long)limit;
  rc = search_pass(s, q.s, q.len, ns, limit, cap, arr, &k, e);
  if (!rc && ns && k < limit) {
    for (size_t i = 0; i < k; i++) memory_item_clear(&arr[i]);
    k = 0;
    rc = search_pass(s, q.s, q.len, ns, limit, -1, arr, &k, e);
  }
  sbuf_free(&q);
  if (rc) {
    memory_items_free(arr, k);
    return rc;
  }
  if (!k) {
    free(arr);
    arr = NULL;
  }
  *items = arr;
  *n = k;
  return 0;
}

/* ------------------------------------------------------------ config */

#define MAX_VALUE_CEILING ((size_t)16 << 20)

static int cfg_error(const struct config *cfg, const char *key, struct err *e, const char *what) {
  int line = config_line_of(cfg->path, key);
  if (line)
    return err_set(e, ERR_INVALID, "config", "luagent.lua:%d: key 'memory.%s': %s", line, key,
                   what);
  return err_set(e, ERR_INVALID, "config", "luagent.lua: key 'memory.%s': %s", key, what);
}

int memory_config(const struct config *cfg, size_t *max_value_bytes, const char **ns,
                  struct err *e) {
  *max_value_bytes = MEMORY_DEFAULT_MAX_VALUE;
  *ns = "";
  const cJSON *m = config_get(cfg, "memory");
  if (!m) return 0;
  for (const cJSON *k = m->child; k; k = k->next) {
    if (!strcmp(k->string, "max_value_bytes")) {
      if (!cJSON_IsNumber(k) || k->valuedouble < 1 || k->valuedouble > (double)MAX_VALUE_CEILING ||
          k->valuedouble != floor(k->valuedouble))
        return cfg_error(cfg, k->string, e, "expected a whole number of bytes from 1 to 16777216");
      *max_value_bytes = (size_t)k->valuedouble;
    } else if (!strcmp(k->string, "namespace")) {
      struct err ne = {0};
      if (!cJSON_IsString(k) || memory_check_ns(k->valuestring, &ne))
        return cfg_error(cfg, k->string, e, cJSON_IsString(k) ? ne.msg : "expected a string");
      *ns = k->valuestring;
    } else {
      return cfg_error(cfg, k->string, e, "unknown key (known: max_value_bytes, namespace)");
    }
  }
  return 0;
}

/* --------------------------------------------------------- JSON glue */

/* Encodes a JSON value for storage: strings as text, everything else as
 * JSON text. *buf is malloc'd when not NULL (caller frees). */
static int encode_value(const cJSON *v, const char *where, const char *key, char **buf,
                        const char **text, enum memory_kind *kind, struct err *e) {
  *buf = NULL;
  if (!v || cJSON_IsNull(v))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "%s: key '%s': value is nil (use memory.delete to remove a key)", where, key);
  if (cJSON_IsString(v)) {
    *text = v->valuestring;
    *kind = MEMORY_TEXT;
    return 0;
  }
  *buf = json_print(v, 0);
  if (!*buf)
    return err_set(e, ERR_NOMEM, "no_memory", "%s: key '%s': cannot encode value", where, key);
  *text = *buf;
  *kind = MEMORY_JSON;
  return 0;
}

static cJSON *item_json(const struct memory_item *it, int with_ns) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "key", it->key);
  cJSON_AddItemToObject(o, "value", memory_item_value(it));
  cJSON_AddNumberToObject(o, "score", it->score);
  if (with_ns) cJSON_AddStringToObject(o, with_ns == 2 ? "namespace" : "ns", it->ns);
  return o;
}

/* Store errors carry the database's host path; scripts and the model see
 * it relative to the workspace (".luagent/state.db"), never the host path.
 * Then the message is prefixed with the call's name. */
static void scrub_prefix(const struct runtime *rt, struct err *e, const char *fn) {
  size_t wl = strlen(rt->workspace);
  char *at;
  while (wl && (at = strstr(e->msg, rt->workspace))) {
    size_t cut = wl + (at[wl] == '/');
    memmove(at, at + cut, strlen(at + cut) + 1);
  }
  err_prefix(e, "%s", fn);
}

/* ------------------------------------------------------------ Lua API */

static const cJSON *arg_at(const cJSON *args, int i) {
  const cJSON *v = cJSON_GetArrayItem(args, i);
  return v && !cJSON_IsNull(v) ? v : NULL;
}

/* Common prologue: config, store and the namespace argument at index
 * ns_idx (nil: the default; "*" allowed only when allow_all, giving NULL). */
static int api_begin(struct call_ctx *ctx, const char *fn, const cJSON *args, int ns_idx,
                     int allow_all, struct store **s, const char **ns, size_t *max_bytes,
                     struct err *e) {
  const char *dflt;
  int rc;
  if ((rc = memory_config(ctx->rt->cfg, max_bytes, &dflt, e))) return rc;
  const cJSON *a = arg_at(args, ns_idx);
  if (!a)
    *ns = dflt;
  else if (!cJSON_IsString(a))
    return err_set(e, ERR_INVALID, "invalid_args", "%s: argument #%d (namespace) must be a string",
                   fn, ns_idx + 1);
  else if (allow_all && !strcmp(a->valuestring, "*"))
    *ns = NULL;
  else {
    if ((rc = memory_check_ns(a->valuestring, e))) {
      err_prefix(e, "%s: argument #%d", fn, ns_idx + 1);
      return rc;
    }
    *ns = a->valuestring;
  }
  if ((rc = runtime_store(ctx->rt, s, e))) {
    scrub_prefix(ctx->rt, e, fn);
    return rc;
  }
  return 0;
}

static int api_key(const char *fn, const cJSON *args, const char **key, struct err *e) {
  const cJSON *k = arg_at(args, 0);
  if (!cJSON_IsString(k))
    return err_set(e, ERR_INVALID, "invalid_args", "%s: argument #1 (key) must be a string", fn);
  int rc = memory_check_key(k->valuestring, e);
  if (rc) {
    err_prefix(e, "%s: argument #1", fn);
    return rc;
  }
  *key = k->valuestring;
  return 0;
}

/* memory.set(key, value [, ns]) [-2|3, +0, e] */
static int api_set(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)sb, (void)ret;
  struct store *s;
  /* Out-parameters set by the helpers on success (-O3 cannot tell). */
  const char *ns = NULL, *key = NULL, *text = NULL;
  size_t max;
  char *buf;
  enum memory_kind kind = MEMORY_TEXT;
  int rc;
  if ((rc = api_key("memory.set", args, &key, e)) ||
      (rc = api_begin(ud, "memory.set", args, 2, 0, &s, &ns, &max, e)) ||
      (rc = encode_value(arg_at(args, 1), "memory.set", key, &buf, &text, &kind, e)))
    return rc;
  rc = memory_put(s, ns, key, text, strlen(text), kind, max, NULL, e);
  /* A tainted run's writes carry its taint to whoever reads them. */
  if (!rc && call_ctx_tainted(ud)) rc = memory_mark_tainted(s, ns, key, e);
  free(buf);
  if (rc) scrub_prefix(((struct call_ctx *)ud)->rt, e, "memory.set");
  return rc;
}

/* memory.get(key [, ns]) -> value | nil [-1|2, +1, e] */
static int api_get(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)sb;
  struct store *s;
  const char *ns = NULL, *key = NULL; /* set by the helpers on success */
  size_t max;
  int rc;
  if ((rc = api_key("memory.get", args, &key, e)) ||
      (rc = api_begin(ud, "memory.get", args, 1, 0, &s, &ns, &max, e)))
    return rc;
  struct memory_item it;
  rc = memory_get(s, ns, key, &it, e);
  if (rc < 0) {
    scrub_prefix(((struct call_ctx *)ud)->rt, e, "memory.get");
    return rc;
  }
  if (rc == 1) *ret = memory_item_value(&it);
  if (rc == 1 && it.tainted) call_ctx_taint(ud);
  memory_item_clear(&it);
  return 0;
}

/* memory.delete(key [, ns]) -> existed [-1|2, +1, e] */
static int api_delete(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)sb;
  struct store *s;
  const char *ns = NULL, *key = NULL; /* set by the helpers on success */
  size_t max;
  int rc;
  if ((rc = api_key("memory.delete", args, &key, e)) ||
      (rc = api_begin(ud, "memory.delete", args, 1, 0, &s, &ns, &max, e)))
    return rc;
  rc = memory_delete(s, ns, key, e);
  if (rc < 0) {
    scrub_prefix(((struct call_ctx *)ud)->rt, e, "memory.delete");
    return rc;
  }
  *ret = cJSON_CreateBool(rc == 1);
  return 0;
}

/* Reads an optional whole-number count argument. */
static int api_count_arg(const char *fn, const cJSON *args, int i, const char *what, size_t dflt,
                         size_t max, size_t *out, struct err *e) {
  const cJSON *a = arg_at(args, i);
  *out = dflt;
  if (!a) return 0;
  if (!cJSON_IsNumber(a) || a->valuedouble < 1 || a->valuedouble != floor(a->valuedouble) ||
      a->valuedouble > (double)max)
    return err_set(e, ERR_INVALID, "invalid_args",
                   "%s: argument #%d (%s) must be a whole number from 1 to %zu", fn, i + 1, what,
                   max);
  *out = (size_t)a->valuedouble;
  return 0;
}

/* memory.search(text [, n [, ns]]) -> { {key=, value=, score= [, ns=]}, ... } [-1..3, +1, e] */
static int api_search(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)sb;
  struct store *s;
  const char *ns;
  size_t max, n;
  int rc;
  const cJSON *text = arg_at(args, 0);
  if (!cJSON_IsString(text))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "memory.search: argument #1 (text) must be a string");
  if ((rc = api_count_arg("memory.search", args, 1, "n", 10, MEMORY_MAX_SEARCH, &n, e)) ||
      (rc = api_begin(ud, "memory.search", args, 2, 1, &s, &ns, &max, e)))
    return rc;
  struct memory_item *items;
  size_t k;
  if ((rc = memory_search(s, ns, text->valuestring, n, &items, &k, e))) {
    scrub_prefix(((struct call_ctx *)ud)->rt, e, "memory.search");
    return rc;
  }
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; i < k; i++) {
    cJSON_AddItemToArray(arr, item_json(&items[i], ns == NULL));
    if (items[i].tainted) call_ctx_taint(ud);
  }
  memory_items_free(items, k);
  *ret = arr;
  return 0;
}

#define LIST_MAX 1000

/* memory.list([prefix [, ns]]) -> { key, ... } [-0..2, +1, e] */
static int api_list(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)sb;
  struct store *s;
  const char *ns;
  size_t max;
  int rc;
  const cJSON *prefix = arg_at(args, 0);
  if (prefix && !cJSON_IsString(prefix))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "memory.list: argument #1 (prefix) must be a string");
  if ((rc = api_begin(ud, "memory.list", args, 1, 0, &s, &ns, &max, e))) return rc;
  char **keys;
  size_t k;
  if ((rc = memory_list(s, ns, prefix ? prefix->valuestring : NULL, LIST_MAX, &keys, &k, e))) {
    scrub_prefix(((struct call_ctx *)ud)->rt, e, "memory.list");
    return rc;
  }
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; i < k; i++) {
    cJSON_AddItemToArray(arr, cJSON_CreateString(keys[i]));
    free(keys[i]);
  }
  free(keys);
  /* Keys are text a tainted run may have chosen, like its values: one
   * query over what the listing covered (its prefix; past LIST_MAX it
   * errs on the side of taint). */
  sqlite3_stmt *st = NULL;
  struct err te = {0};
  if (k && !store_prepare(s,
                          "SELECT 1 FROM memory WHERE ns = ?1 AND tainted = 1 AND "
                          "(?2 IS NULL OR substr(key, 1, length(?2)) = ?2) LIMIT 1",
                          &st, &te)) {
    sqlite3_bind_text(st, 1, ns, -1, SQLITE_STATIC);
    if (prefix) sqlite3_bind_text(st, 2, prefix->valuestring, -1, SQLITE_STATIC);
    else sqlite3_bind_null(st, 2);
    if (sqlite3_step(st) == SQLITE_ROW) call_ctx_taint(ud);
  }
  sqlite3_finalize(st);
  *ret = arr;
  return 0;
}

/* memory.count([ns]) -> n [-0|1, +1, e] */
static int api_count(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)sb;
  struct store *s;
  const char *ns = NULL; /* set by api_begin; -O3 cannot tell */
  size_t max, n;
  int rc;
  if ((rc = api_begin(ud, "memory.count", args, 0, 1, &s, &ns, &max, e))) return rc;
  if ((rc = memory_count(s, ns, &n, e))) {
    scrub_prefix(((struct call_ctx *)ud)->rt, e, "memory.count");
    return rc;
  }
  *ret = cJSON_CreateNumber((double)n);
  return 0;
}

int memory_install_api(struct runtime *rt, struct sandbox *sb, struct call_ctx *ctx,
                       struct err *e) {
  (void)rt;
  static const struct {
    const char *name;
    sb_hostfn fn;
  } fns[] = {{"set", api_set},       {"get", api_get},   {"delete", api_delete},
             {"search", api_search}, {"list", api_list}, {"count", api_count}};
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
    if (sandbox_add_function(sb, "memory", fns[i].name, fns[i].fn, ctx))
      return err_set(e, ERR_FAIL, "internal", "cannot install memory.%s", fns[i].name);
  return 0;
}

/* ---------------------------------------------------------------- tools */

/* The namespace of a tool call: the argument, or the configured default. */
static int tool_ns(struct call_ctx *ctx, const cJSON *args, int allow_all, const char **ns,
                   size_t *max, struct store **s, struct err *e) {
  const char *dflt;
  int rc;
  if ((rc = memory_config(ctx->rt->cfg, max, &dflt, e))) return rc;
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(args, "namespace");
  *ns = cJSON_IsString(a) ? a->valuestring : dflt;
  if (allow_all && !strcmp(*ns, "*"))
    *ns = NULL;
  else if ((rc = memory_check_ns(*ns, e)))
    return rc;
  return runtime_store(ctx->rt, s, e);
}

static int t_save(struct call_ctx *ctx, const struct tool *t, const cJSON *args, cJSON **result,
                  struct err *e) {
  (void)t;
  struct store *s;
  const char *ns = NULL, *text = NULL; /* set by the helpers on success */
  size_t max;
  char *buf = NULL;
  enum memory_kind kind = MEMORY_TEXT;
  int rc, replaced;
  const cJSON *key = cJSON_GetObjectItemCaseSensitive(args, "key");
  if (!cJSON_IsString(key))
    return err_set(e, ERR_INVALID, "invalid_args", "memory.save: key must be a string");
  if ((rc = tool_ns(ctx, args, 0, &ns, &max, &s, e)) ||
      (rc = encode_value(cJSON_GetObjectItemCaseSensitive(args, "value"), "memory.save",
                         key->valuestring, &buf, &text, &kind, e)))
    goto out;
  size_t len = strlen(text);
  if ((rc = memory_put(s, ns, key->valuestring, text, len, kind, max, &replaced, e))) goto out;
  if (call_ctx_tainted(ctx) && (rc = memory_mark_tainted(s, ns, key->valuestring, e))) goto out;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "key", key->valuestring);
  cJSON_AddStringToObject(o, "namespace", ns);
  cJSON_AddNumberToObject(o, "bytes", (double)len);
  cJSON_AddBoolToObject(o, "replaced", replaced);
  *result = o;
out:
  free(buf);
  if (rc) scrub_prefix(ctx->rt, e, "memory.save");
  return rc;
}

static int t_search(struct call_ctx *ctx, const struct tool *t, const cJSON *args, cJSON **result,
                    struct err *e) {
  (void)t;
  struct store *s;
  const char *ns;
  size_t max;
  int rc;
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(args, "query");
  const cJSON *lim = cJSON_GetObjectItemCaseSensitive(args, "limit");
  if (!cJSON_IsString(q))
    return err_set(e, ERR_INVALID, "invalid_args", "memory.search: query must be a string");
  size_t limit = cJSON_IsNumber(lim) ? (size_t)lim->valuedouble : 5;
  if ((rc = tool_ns(ctx, args, 1, &ns, &max, &s, e))) {
    scrub_prefix(ctx->rt, e, "memory.search");
    return rc;
  }
  struct memory_item *items;
  size_t k;
  if ((rc = memory_search(s, ns, q->valuestring, limit, &items, &k, e))) {
    scrub_prefix(ctx->rt, e, "memory.search");
    return rc;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON *arr = cJSON_AddArrayToObject(o, "results");
  for (size_t i = 0; i < k; i++) {
    cJSON_AddItemToArray(arr, item_json(&items[i], 2));
    if (items[i].tainted) call_ctx_taint(ctx); /* outside content, read back */
  }
  cJSON_AddNumberToObject(o, "count", (double)k);
  memory_items_free(items, k);
  *result = o;
  return 0;
}

static const char save_params[] =
    "{\"type\":\"object\",\"required\":[\"key\",\"value\"],\"additionalProperties\":false,"
    "\"properties\":{"
    "\"key\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":256,"
    "\"description\":\"Short, descriptive name; saving an existing key replaces its value\"},"
    "\"value\":{\"type\":[\"string\",\"object\",\"array\",\"number\",\"boolean\"],"
    "\"description\":\"What to remember (text, or structured JSON)\"},"
    "\"namespace\":{\"type\":\"string\",\"maxLength\":64,"
    "\"description\":\"Optional group; default: the workspace's default namespace\"}}}";

static const char search_params[] =
    "{\"type\":\"object\",\"required\":[\"query\"],\"additionalProperties\":false,"
    "\"properties\":{"
    "\"query\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":2000,"
    "\"description\":\"Words to look for (full-text, best matches first)\"},"
    "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":50},"
    "\"namespace\":{\"type\":\"string\",\"maxLength\":64,"
    "\"description\":\"Optional group to search; \\\"*\\\" searches all\"}}}";

int memory_register_tools(struct runtime *rt, struct err *e) {
  size_t max;
  const char *ns;
  int rc;
  if ((rc = memory_config(rt->cfg, &max, &ns, e))) return rc;
  if (toolreg_add(rt->tools, "memory.save",
                  "Save a fact to persistent memory under a key, for later conversations.",
                  save_params, IMPACT_LOW, false, t_save, NULL, NULL, "host", NULL, e) ||
      toolreg_add(rt->tools, "memory.search",
                  "Search persistent memory by words; returns the best-matching keys and values.",
                  search_params, IMPACT_READ, false, t_search, NULL, NULL, "host", NULL, e))
    return ERR_FAIL;
  return 0;
}

/* --------------------------------------------------- context assembly */

/* Appends at most max bytes of s with control characters as spaces,
 * never ending inside a UTF-8 sequence. Returns the bytes appended. */
static size_t put_flat(struct sbuf *b, const char *s, size_t max) {
  size_t n = strlen(s);
  if (n > max) n = utf8_cut(s, max);
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if ((unsigned char)c < 0x20 || c == 0x7f) c = ' ';
    sbuf_append(b, &c, 1);
  }
  return n;
}

static const char relevant_header[] = "Relevant memories (saved earlier; may be out of date):\n";

int memory_relevant(struct runtime *rt, const char *message, size_t max_items, size_t max_chars,
                    struct sbuf *out, struct err *e) {
  int tainted;
  return memory_relevant_taint(rt, message, max_items, max_chars, out, &tainted, e);
}

int memory_relevant_taint(struct runtime *rt, const char *message, size_t max_items,
                          size_t max_chars, struct sbuf *out, int *tainted, struct err *e) {
  *tainted = 0;
  size_t maxv;
  const char *ns;
  struct store *s;
  int rc;
  if (!message || !max_items) return 0;
  if ((rc = memory_config(rt->cfg, &maxv, &ns, e)) || (rc = runtime_store(rt, &s, e))) return rc;
  struct memory_item *items;
  size_t k;
  if ((rc = memory_search(s, ns, message, max_items, &items, &k, e))) return rc;
  struct sbuf b = {0};
  const size_t hlen = sizeof relevant_header - 1, min_value = 8;
  int written = 0;
  if (k && max_chars > hlen) {
    sbuf_append(&b, relevant_header, hlen);
    for (size_t i = 0; i < k; i++) {
      size_t room = max_chars - b.len;
      /* "- " key ": " value "\n" */
      size_t klen = strlen(items[i].key), vlen = strlen(items[i].value);
      if (klen > 128) klen = 128;
      size_t fixed = 2 + klen + 2 + 1;
      if (room < fixed + min_value) break;
      sbuf_puts(&b, "- ");
      put_flat(&b, items[i].key, klen);
      sbuf_puts(&b, ": ");
      int cut = vlen > room - fixed;
      if (!cut) {
        put_flat(&b, items[i].value, vlen);
      } else {
        put_flat(&b, items[i].value, room - fixed - 3);
        sbuf_puts(&b, "...");
      }
      sbuf_puts(&b, "\n");
      written++;
      if (items[i].tainted) *tainted = 1;
      if (cut) break;
    }
  }
  if (written) sbuf_append(out, b.s, b.len);
  sbuf_free(&b);
  memory_items_free(items, k);
  return written;
}
