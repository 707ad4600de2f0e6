/* test_memory.c - persistent memory: set/get/delete/search, namespaces,
 * FTS query building against injection, size cap, persistence across a
 * reopen, the v1 -> v2 migration, VACUUM, the tools through tool_call, the
 * config checks and memory_relevant. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memory.h"
#include "runtime.h"
#include "store.h"
#include "test.h"
#include "util.h"

static char dir[] = "/tmp/luagent-test-memory.XXXXXX";

static void rm_rf(const char *path) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", path);
}

static int put(struct store *s, const char *ns, const char *key, const char *value) {
  struct err e = {0};
  int rc =
      memory_put(s, ns, key, value, strlen(value), MEMORY_TEXT, MEMORY_DEFAULT_MAX_VALUE, NULL, &e);
  if (rc) fprintf(stderr, "put %s/%s: %s\n", ns, key, e.msg);
  return rc;
}

/* The keys found by a search, space-separated, in rank order. */
static char *search_keys(struct store *s, const char *ns, const char *text, size_t n, int *rc) {
  struct err e = {0};
  struct memory_item *items;
  size_t k;
  *rc = memory_search(s, ns, text, n, &items, &k, &e);
  if (*rc) fprintf(stderr, "search '%s': %s\n", text, e.msg);
  struct sbuf b = {0};
  sbuf_puts(&b, "");
  for (size_t i = 0; i < k; i++) sbuf_printf(&b, "%s%s", i ? " " : "", items[i].key);
  memory_items_free(items, k);
  return sbuf_take(&b);
}

#define CHECK_SEARCH(s, ns, text, n, want)          \
  do {                                              \
    int rc_;                                        \
    char *got_ = search_keys(s, ns, text, n, &rc_); \
    CHECK_INT(rc_, 0);                              \
    CHECK_STR(got_, want);                          \
    free(got_);                                     \
  } while (0)

/* A search of a namespace with nothing saved in it skips the FTS query
 * (memory_search): it must still find what another namespace holds when
 * asked for all, and stop finding it once it is deleted. */
static void test_empty(struct store *s) {
  struct err e = {0};
  CHECK_SEARCH(s, NULL, "lighthouse", 10, "");
  CHECK_SEARCH(s, "", "lighthouse", 10, "");
  CHECK_INT(put(s, "alpha", "tower", "the lighthouse keeper"), 0);
  CHECK_SEARCH(s, "gamma", "lighthouse", 10, "");
  CHECK_SEARCH(s, "", "lighthouse", 10, "");
  CHECK_SEARCH(s, "alpha", "lighthouse", 10, "tower");
  CHECK_SEARCH(s, NULL, "lighthouse", 10, "tower");
  CHECK_INT(memory_delete(s, "alpha", "tower", &e), 1);
  CHECK_SEARCH(s, "alpha", "lighthouse", 10, "");
  CHECK_SEARCH(s, NULL, "lighthouse", 10, "");
}

static void test_crud(struct store *s) {
  struct err e = {0};
  struct memory_item it;
  CHECK_INT(put(s, "", "trip", "Trip to Paris in June with Anna"), 0);
  CHECK_INT(memory_get(s, "", "trip", &it, &e), 1);
  CHECK_STR(it.value, "Trip to Paris in June with Anna");
  CHECK_INT(it.kind, MEMORY_TEXT);
  CHECK(it.updated > 1e9);
  memory_item_clear(&it);
  /* Replace. */
  int replaced = -1;
  CHECK_INT(memory_put(s, "", "trip", "Trip to Rome", 12, MEMORY_TEXT, 100, &replaced, &e), 0);
  CHECK_INT(replaced, 1);
  CHECK_INT(memory_get(s, "", "trip", &it, &e), 1);
  CHECK_STR(it.value, "Trip to Rome");
  memory_item_clear(&it);
  /* The index follows the update: the old words are gone. */
  CHECK_SEARCH(s, "", "paris", 10, "");
  CHECK_SEARCH(s, "", "rome", 10, "trip");
  CHECK_INT(memory_put(s, "", "fresh", "x", 1, MEMORY_TEXT, 100, &replaced, &e), 0);
  CHECK_INT(replaced, 0);
  /* Absent key, delete. */
  CHECK_INT(memory_get(s, "", "nope", &it, &e), 0);
  CHECK(it.value == NULL);
  CHECK_INT(memory_delete(s, "", "fresh", &e), 1);
  CHECK_INT(memory_delete(s, "", "fresh", &e), 0);
  CHECK_INT(memory_get(s, "", "fresh", &it, &e), 0);
  /* JSON values keep their kind. */
  const char *js = "{\"city\":\"Oslo\",\"tags\":[\"cold\"]}";
  CHECK_INT(memory_put(s, "", "cfg", js, strlen(js), MEMORY_JSON, 1000, NULL, &e), 0);
  CHECK_INT(memory_get(s, "", "cfg", &it, &e), 1);
  CHECK_INT(it.kind, MEMORY_JSON);
  cJSON *v = memory_item_value(&it);
  CHECK(cJSON_IsObject(v));
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(v, "city")), "Oslo");
  cJSON_Delete(v);
  memory_item_clear(&it);
  CHECK_SEARCH(s, "", "oslo", 10, "cfg");
  CHECK_INT(memory_delete(s, "", "cfg", &e), 1);
}

static void test_validation(struct store *s) {
  struct err e = {0};
  struct memory_item it;
  /* Size cap: at the limit passes, one byte over fails with too_large. */
  char *big = xmalloc(1001);
  memset(big, 'x', 1000);
  big[1000] = 0;
  CHECK_INT(memory_put(s, "", "big", big, 1000, MEMORY_TEXT, 1000, NULL, &e), 0);
  CHECK_INT(memory_put(s, "", "big", big, 1000, MEMORY_TEXT, 999, NULL, &e), ERR_LIMIT);
  CHECK_STR(e.code, "too_large");
  CHECK_CONTAINS(e.msg, "key 'big': value is 1000 bytes, over the limit of 999");
  free(big);
  CHECK_INT(memory_get(s, "", "big", &it, &e), 1);
  CHECK_INT(strlen(it.value), 1000); /* the failed write left the old value */
  memory_item_clear(&it);
  CHECK_INT(memory_delete(s, "", "big", &e), 1);
  /* Keys and namespaces. */
  CHECK_INT(memory_put(s, "", "", "v", 1, MEMORY_TEXT, 100, NULL, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "key must not be empty");
  CHECK_INT(memory_put(s, "", "a\nb", "v", 1, MEMORY_TEXT, 100, NULL, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "control characters");
  char longkey[MEMORY_MAX_KEY + 2];
  memset(longkey, 'k', sizeof longkey - 1);
  longkey[sizeof longkey - 1] = 0;
  CHECK_INT(memory_put(s, "", longkey, "v", 1, MEMORY_TEXT, 100, NULL, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "key longer than 256 bytes");
  longkey[MEMORY_MAX_KEY] = 0;
  CHECK_INT(memory_put(s, "", longkey, "v", 1, MEMORY_TEXT, 100, NULL, &e), 0);
  CHECK_INT(memory_delete(s, "", longkey, &e), 1);
  CHECK_INT(memory_put(s, "a b", "k", "v", 1, MEMORY_TEXT, 100, NULL, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "namespace 'a b': only letters");
  CHECK_INT(memory_put(s, "*", "k", "v", 1, MEMORY_TEXT, 100, NULL, &e), ERR_INVALID);
  CHECK_INT(memory_get(s, "x'; DROP TABLE memory; --", "k", &it, &e), ERR_INVALID);
  CHECK_INT(memory_search(s, "bad ns", "x", 5, &(struct memory_item *){NULL}, &(size_t){0}, &e),
            ERR_INVALID);
  /* Keys with SQL and FTS syntax are plain data. */
  CHECK_INT(put(s, "", "x'); DROP TABLE memory; --", "quoted key"), 0);
  CHECK_INT(memory_get(s, "", "x'); DROP TABLE memory; --", &it, &e), 1);
  CHECK_STR(it.value, "quoted key");
  memory_item_clear(&it);
  CHECK_INT(memory_delete(s, "", "x'); DROP TABLE memory; --", &e), 1);
}

static void test_namespaces(struct store *s) {
  struct err e = {0};
  struct memory_item it;
  CHECK_INT(put(s, "alpha", "shared", "alpha owns the lighthouse"), 0);
  CHECK_INT(put(s, "beta", "shared", "beta owns the windmill"), 0);
  CHECK_INT(memory_get(s, "alpha", "shared", &it, &e), 1);
  CHECK_STR(it.value, "alpha owns the lighthouse");
  memory_item_clear(&it);
  CHECK_INT(memory_get(s, "", "shared", &it, &e), 0);
  CHECK_SEARCH(s, "alpha", "lighthouse windmill", 10, "shared");
  CHECK_SEARCH(s, "beta", "lighthouse", 10, "");
  CHECK_SEARCH(s, "", "lighthouse", 10, "");
  /* NULL: every namespace. */
  struct memory_item *items;
  size_t k;
  CHECK_INT(memory_search(s, NULL, "owns", 10, &items, &k, &e), 0);
  CHECK_INT(k, 2);
  if (k == 2) CHECK(strcmp(items[0].ns, items[1].ns) != 0);
  memory_items_free(items, k);
  size_t n;
  CHECK_INT(memory_count(s, "alpha", &n, &e), 0);
  CHECK_INT(n, 1);
  CHECK_INT(memory_delete(s, "alpha", "shared", &e), 1);
  CHECK_INT(memory_get(s, "beta", "shared", &it, &e), 1);
  memory_item_clear(&it);
  CHECK_INT(memory_delete(s, "beta", "shared", &e), 1);

  /* A small namespace whose matches rank below many of a big one's: the
   * first pass's candidates are all from "big", so the exact pass must
   * find them. */
  char key[32];
  for (int i = 0; i < 60; i++) {
    snprintf(key, sizeof key, "b%02d", i);
    put(s, "big", key, "zeta");
  }
  put(s, "small", "s1", "zeta with many other words that make this text rank lower");
  put(s, "small", "s2", "zeta and a long tail of words that push it further down the ranking");
  CHECK_SEARCH(s, "small", "zeta", 1, "s1");
  CHECK_SEARCH(s, "small", "zeta", 5, "s1 s2");
  CHECK_SEARCH(s, "big", "zeta", 3, "b59 b58 b57"); /* ties: newest first */
  CHECK_INT(memory_search(s, NULL, "zeta", 100, &items, &k, &e), 0);
  CHECK_INT(k, 62);
  if (k == 62) CHECK_STR(items[61].ns, "small");
  memory_items_free(items, k);
  CHECK_INT(store_exec(s, "DELETE FROM memory WHERE ns IN ('big', 'small')", &e), 0);
}

static void test_search(struct store *s) {
  CHECK_INT(put(s, "", "trip", "Trip to Paris in June with Anna"), 0);
  CHECK_INT(put(s, "", "food", "Anna likes sushi and ramen"), 0);
  CHECK_INT(put(s, "", "car", "The car is a blue Volvo"), 0);
  CHECK_INT(put(s, "", "paris-hotel", "Hotel Lutetia, booked"), 0);
  CHECK_INT(put(s, "", "cafe", "Caf\xc3\xa9 cr\xc3\xa8me at the corner \xe6\x9d\xb1\xe4\xba\xac"),
            0);
  /* Ranking: more matching words first; a match in the key weighs more
   * than one in a value; shorter texts win ties (bm25). */
  CHECK_SEARCH(s, "", "paris anna", 10, "trip paris-hotel food");
  CHECK_SEARCH(s, "", "paris anna", 1, "trip");
  CHECK_SEARCH(s, "", "PARIS", 10, "paris-hotel trip");
  CHECK_SEARCH(s, "", "volvo?", 10, "car");
  /* Stemming (porter): plural and -ing forms find the stem. */
  CHECK_SEARCH(s, "", "volvos", 10, "car");
  CHECK_SEARCH(s, "", "booking", 10, "paris-hotel");
  /* Stop words are dropped when other words remain. */
  CHECK_SEARCH(s, "", "what is the car", 10, "car");
  /* Unicode: case folding and diacritics via the tokenizer. */
  CHECK_SEARCH(s, "", "cafe", 10, "cafe");
  CHECK_SEARCH(s, "", "CAF\xc3\x89", 10, "cafe");
  CHECK_SEARCH(s, "", "\xe6\x9d\xb1\xe4\xba\xac", 10, "cafe");
  /* Injection attempts: each is either plain words or nothing, never an
   * FTS5 syntax error. */
  static const char *const hostile[] = {
      "\"a\" OR",
      "NEAR(",
      "NEAR(paris anna, 2)",
      "*",
      "\"",
      "\"\"\"",
      "paris*",
      "^paris",
      "trip:paris",
      "- paris",
      "(paris",
      "paris)",
      "AND",
      "OR OR",
      "NOT anna",
      "{trip}:x",
      "'",
      "\\",
      "col:",
      "+",
      "\xff\xfe\xfd",
      "\xc3",
      "\xe2\x80\x94",
      "\xf0\x9f\x99\x82",
      "a\x01"
      "b",
      "   ",
      "",
      "!!!?",
      ".,;:",
      "$$$ ###",
  };
  for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
    int rc;
    char *got = search_keys(s, "", hostile[i], 10, &rc);
    if (rc) fprintf(stderr, "  hostile query #%zu failed\n", i);
    CHECK_INT(rc, 0);
    free(got);
  }
  CHECK_SEARCH(s, "", "NEAR(paris anna, 2)", 10, "trip paris-hotel food");
  CHECK_SEARCH(s, "", "NOT anna", 10, "food trip");
  CHECK_SEARCH(s, "", "paris*", 10, "paris-hotel trip");
  CHECK_SEARCH(s, "", "*", 10, "");
  CHECK_SEARCH(s, "", "", 10, "");
  CHECK_SEARCH(s, "", "!!!?", 10, "");
  CHECK_SEARCH(s, "", "\xe2\x80\x94", 10, "");
  /* NULL text and a zero limit find nothing. */
  CHECK_SEARCH(s, "", NULL, 10, "");
  CHECK_SEARCH(s, "", "paris", 0, "");

  /* The query builder itself. */
  struct sbuf q = {0};
  CHECK_INT(memory_fts_query("\"a\" OR NEAR(b*", &q), 2);
  CHECK_STR(q.s, "\"near\" OR \"b\"");
  sbuf_free(&q);
  CHECK_INT(memory_fts_query("the and", &q), 2); /* all stop words: kept */
  CHECK_STR(q.s, "\"the\" OR \"and\"");
  sbuf_free(&q);
  /* The first, middle and last stop words of the (bsearch'd) list. */
  CHECK_INT(memory_fts_query("A about the would YOUR zebra", &q), 1);
  CHECK_STR(q.s, "\"zebra\"");
  sbuf_free(&q);
  CHECK_INT(memory_fts_query("Paris paris PARIS", &q), 1);
  sbuf_free(&q);
  CHECK_INT(memory_fts_query("!!!", &q), 0);
  sbuf_free(&q);
  /* Many words: bounded. */
  struct sbuf many = {0};
  for (int i = 0; i < 500; i++) sbuf_printf(&many, "w%d ", i);
  CHECK_INT(memory_fts_query(many.s, &q), MEMORY_MAX_TERMS);
  sbuf_free(&q);
  int rc;
  char *got = search_keys(s, "", many.s, 10, &rc);
  CHECK_INT(rc, 0);
  free(got);
  sbuf_free(&many);
  /* A long word is cut without splitting a UTF-8 sequence. */
  char lw[400] = "";
  for (int i = 0; i < 100; i++) strcat(lw, "\xc3\xa9");
  CHECK_INT(memory_fts_query(lw, &q), 1);
  CHECK_INT(q.len, 2 + 64);
  sbuf_free(&q);

  /* list and count */
  char **keys;
  size_t n;
  struct err e = {0};
  CHECK_INT(memory_list(s, "", "pa", 10, &keys, &n, &e), 0);
  CHECK_INT(n, 1);
  if (n == 1) CHECK_STR(keys[0], "paris-hotel");
  for (size_t i = 0; i < n; i++) free(keys[i]);
  free(keys);
  CHECK_INT(memory_list(s, "", "%", 10, &keys, &n, &e), 0); /* literal, not a wildcard */
  CHECK_INT(n, 0);
  free(keys);
  CHECK_INT(memory_list(s, "", NULL, 2, &keys, &n, &e), 0);
  CHECK_INT(n, 2);
  if (n == 2) CHECK_STR(keys[0], "cafe");
  for (size_t i = 0; i < n; i++) free(keys[i]);
  free(keys);
  CHECK_INT(memory_count(s, "", &n, &e), 0);
  CHECK_INT(n, 5);
}

/* The v1 schema as the first release wrote it (a fixture: a workspace
 * created then must upgrade with its memory intact). */
static const char v1_schema[] =
    "CREATE TABLE runs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL DEFAULT '',"
    "  trigger TEXT, status TEXT NOT NULL, started REAL NOT NULL, finished REAL,"
    "  result TEXT, error TEXT, tool_calls INTEGER NOT NULL DEFAULT 0,"
    "  parent TEXT, session TEXT, worker_pid INTEGER);"
    "CREATE INDEX runs_by_name ON runs(name, started);"
    "CREATE INDEX runs_by_status ON runs(status);"
    "CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, ts REAL NOT NULL,"
    "  type TEXT NOT NULL, data TEXT, PRIMARY KEY (run_id, seq));"
    "CREATE TABLE automations (name TEXT PRIMARY KEY, state TEXT NOT NULL DEFAULT '{}',"
    "  next_fire REAL, enabled INTEGER, last_run REAL, last_status TEXT);"
    "CREATE TABLE memory (ns TEXT NOT NULL DEFAULT '', key TEXT NOT NULL, value TEXT NOT NULL,"
    "  updated REAL NOT NULL, PRIMARY KEY (ns, key));"
    "CREATE VIRTUAL TABLE memory_fts USING fts5(ns UNINDEXED, key, value,"
    "  content='memory', content_rowid='rowid');"
    "CREATE TRIGGER memory_ai AFTER INSERT ON memory BEGIN"
    "  INSERT INTO memory_fts(rowid, ns, key, value) VALUES (new.rowid, new.ns, new.key, "
    "new.value); END;"
    "CREATE TRIGGER memory_ad AFTER DELETE ON memory BEGIN"
    "  INSERT INTO memory_fts(memory_fts, rowid, ns, key, value)"
    "  VALUES ('delete', old.rowid, old.ns, old.key, old.value); END;"
    "CREATE TRIGGER memory_au AFTER UPDATE ON memory BEGIN"
    "  INSERT INTO memory_fts(memory_fts, rowid, ns, key, value)"
    "  VALUES ('delete', old.rowid, old.ns, old.key, old.value);"
    "  INSERT INTO memory_fts(rowid, ns, key, value) VALUES (new.rowid, new.ns, new.key, "
    "new.value); END;"
    "CREATE TABLE approvals (id INTEGER PRIMARY KEY, created REAL NOT NULL, run_id TEXT,"
    "  tool TEXT NOT NULL, caller_kind TEXT NOT NULL, caller_name TEXT, impact TEXT, reason TEXT,"
    "  args TEXT NOT NULL, args_hash TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'pending',"
    "  decided REAL, decided_by TEXT, decision_reason TEXT, new_args TEXT);"
    "CREATE TABLE audit (seq INTEGER PRIMARY KEY, ts REAL NOT NULL, run_id TEXT, caller_kind TEXT,"
    "  caller_name TEXT, tool TEXT, args_hash TEXT, decision TEXT NOT NULL,"
    "  decided_by TEXT, approver TEXT, status TEXT, duration_ms REAL, detail TEXT,"
    "  prev_hash TEXT NOT NULL, hash TEXT NOT NULL);"
    "CREATE TABLE secrets (name TEXT PRIMARY KEY, nonce BLOB NOT NULL, ciphertext BLOB NOT NULL,"
    "  updated REAL NOT NULL);"
    "CREATE TABLE embed_cache (model TEXT NOT NULL, content_hash TEXT NOT NULL, dim INTEGER NOT "
    "NULL,"
    "  vec BLOB NOT NULL, PRIMARY KEY (model, content_hash));"
    "CREATE TABLE sessions (name TEXT PRIMARY KEY, created REAL NOT NULL, updated REAL NOT NULL);"
    "CREATE TABLE messages (session TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL,"
    "  content TEXT NOT NULL, ts REAL NOT NULL, PRIMARY KEY (session, seq));"
    "INSERT INTO memory(ns, key, value, updated) VALUES ('', 'gone', 'deleted later', 1),"
    "  ('', 'old', 'written by release one: harbour', 1), ('n', 'other', 'harbour too', 1);"
    "DELETE FROM memory WHERE key = 'gone';"
    "PRAGMA user_version = 1;";

static void test_migration(void) {
  char path[4200];
  snprintf(path, sizeof path, "%s/v1.db", dir);
  sqlite3 *db;
  CHECK_INT(sqlite3_open(path, &db), SQLITE_OK);
  char *msg = NULL;
  CHECK_INT(sqlite3_exec(db, v1_schema, NULL, NULL, &msg), SQLITE_OK);
  if (msg) fprintf(stderr, "v1 fixture: %s\n", msg);
  sqlite3_free(msg);
  sqlite3_close(db);
  struct store *s;
  struct err e = {0};
  CHECK_INT(store_open_path(path, &s, &e), 0);
  if (!s) {
    fprintf(stderr, "migration: %s\n", e.msg);
    return;
  }
  struct memory_item it;
  CHECK_INT(memory_get(s, "", "old", &it, &e), 1);
  CHECK_STR(it.value, "written by release one: harbour");
  CHECK_INT(it.kind, MEMORY_TEXT);
  memory_item_clear(&it);
  CHECK_SEARCH(s, "", "harbour", 10, "old");
  CHECK_SEARCH(s, NULL, "harbour", 10, "other old");
  /* New rows and updates keep the index right after the migration. */
  CHECK_INT(put(s, "", "new", "harbour master"), 0);
  CHECK_INT(put(s, "", "old", "rewritten"), 0);
  CHECK_SEARCH(s, "", "harbour", 10, "new");
  CHECK_SEARCH(s, "", "rewritten", 10, "old");
  store_close(s);
}

/* VACUUM may renumber implicit rowids; with an INTEGER PRIMARY KEY the
 * index stays pointed at the right rows. */
static void test_vacuum(void) {
  char path[4200];
  snprintf(path, sizeof path, "%s/vac.db", dir);
  struct store *s;
  struct err e = {0};
  CHECK_INT(store_open_path(path, &s, &e), 0);
  if (!s) return;
  char key[32], val[64];
  for (int i = 0; i < 50; i++) {
    snprintf(key, sizeof key, "k%d", i);
    snprintf(val, sizeof val, "word%d common", i);
    put(s, "", key, val);
  }
  for (int i = 0; i < 50; i += 2) {
    snprintf(key, sizeof key, "k%d", i);
    memory_delete(s, "", key, &e);
  }
  CHECK_INT(store_exec(s, "VACUUM", &e), 0);
  CHECK_SEARCH(s, "", "word33", 10, "k33");
  CHECK_SEARCH(s, "", "word49", 10, "k49");
  CHECK_SEARCH(s, "", "word10", 10, "");
  CHECK_INT(
      store_exec(s, "INSERT INTO memory_fts(memory_fts, rank) VALUES ('integrity-check', 1)", &e),
      0);
  store_close(s);
}

static void test_runtime(void) {
  char ws[4200];
  snprintf(ws, sizeof ws, "%s/ws", dir);
  struct err e = {0};
  CHECK_INT(util_mkdirs(ws, 0700, &e), 0);
  /* Config: limits and default namespace. */
  char cfgpath[4300];
  snprintf(cfgpath, sizeof cfgpath, "%s/luagent.lua", ws);
  FILE *f = fopen(cfgpath, "w");
  fputs("return {\n  memory = { max_value_bytes = 200, namespace = \"team\" },\n}\n", f);
  fclose(f);
  struct runtime *rt = NULL;
  CHECK_INT(runtime_open(ws, &rt, &e), 0);
  if (!rt) {
    fprintf(stderr, "runtime_open: %s\n", e.msg);
    return;
  }
  const struct tool *t = toolreg_find(rt->tools, "memory.save");
  CHECK(t && t->impact == IMPACT_LOW);
  t = toolreg_find(rt->tools, "memory.search");
  CHECK(t && t->impact == IMPACT_READ);

  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_MODEL, "test");
  cJSON *res = NULL;
  cJSON *args =
      cJSON_Parse("{\"key\":\"deploy\",\"value\":\"Deploys happen on Tuesday at 10:00\"}");
  CHECK_INT(tool_call(&ctx, "memory.save", args, &res, &e), 0);
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(res, "namespace")), "team");
  CHECK(cJSON_IsFalse(cJSON_GetObjectItem(res, "replaced")));
  cJSON_Delete(res);
  res = NULL;
  CHECK_INT(tool_call(&ctx, "memory.save", args, &res, &e), 0);
  CHECK(cJSON_IsTrue(cJSON_GetObjectItem(res, "replaced")));
  cJSON_Delete(res);
  cJSON_Delete(args);
  args = cJSON_Parse(
      "{\"key\":\"owner\",\"value\":{\"name\":\"Ida\",\"team\":\"infra\"},\"namespace\":"
      "\"people\"}");
  res = NULL;
  CHECK_INT(tool_call(&ctx, "memory.save", args, &res, &e), 0);
  cJSON_Delete(res);
  cJSON_Delete(args);
  /* Over the configured cap. */
  struct sbuf big = {0};
  sbuf_puts(&big, "{\"key\":\"big\",\"value\":\"");
  for (int i = 0; i < 300; i++) sbuf_puts(&big, "y");
  sbuf_puts(&big, "\"}");
  args = cJSON_Parse(big.s);
  sbuf_free(&big);
  res = NULL;
  CHECK(tool_call(&ctx, "memory.save", args, &res, &e) < 0);
  CHECK_STR(e.code, "too_large");
  CHECK_CONTAINS(e.msg, "memory.save");
  cJSON_Delete(args);
  /* Schema: missing value, unknown property, null value. */
  args = cJSON_Parse("{\"key\":\"k\",\"value\":null}");
  CHECK(tool_call(&ctx, "memory.save", args, &res, &e) < 0);
  CHECK_STR(e.code, "invalid_args");
  cJSON_Delete(args);
  args = cJSON_Parse("{\"key\":\"k\"}");
  CHECK(tool_call(&ctx, "memory.save", args, &res, &e) < 0);
  cJSON_Delete(args);

  /* Search through the tool: default namespace, another, and all. */
  args = cJSON_Parse("{\"query\":\"when are deploys?\"}");
  res = NULL;
  CHECK_INT(tool_call(&ctx, "memory.search", args, &res, &e), 0);
  CHECK_INT(cJSON_GetObjectItem(res, "count")->valueint, 1);
  cJSON *r0 = cJSON_GetArrayItem(cJSON_GetObjectItem(res, "results"), 0);
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(r0, "key")), "deploy");
  CHECK(cJSON_GetObjectItem(r0, "score")->valuedouble > 0);
  cJSON_Delete(res);
  cJSON_Delete(args);
  args = cJSON_Parse("{\"query\":\"Ida\",\"namespace\":\"*\",\"limit\":3}");
  res = NULL;
  CHECK_INT(tool_call(&ctx, "memory.search", args, &res, &e), 0);
  r0 = cJSON_GetArrayItem(cJSON_GetObjectItem(res, "results"), 0);
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(r0, "namespace")), "people");
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(r0, "value"), "team")),
            "infra");
  cJSON_Delete(res);
  cJSON_Delete(args);
  args = cJSON_Parse("{\"query\":\"NEAR(\\\"\",\"namespace\":\"bad ns\"}");
  CHECK(tool_call(&ctx, "memory.search", args, &res, &e) < 0);
  CHECK_CONTAINS(e.msg, "namespace 'bad ns'");
  cJSON_Delete(args);

  /* A store failure reaches the caller without the host path. */
  struct store *s;
  CHECK_INT(runtime_store(rt, &s, &e), 0);
  CHECK_INT(store_exec(s, "PRAGMA query_only = 1", &e), 0);
  args = cJSON_Parse("{\"key\":\"ro\",\"value\":\"x\"}");
  res = NULL;
  CHECK(tool_call(&ctx, "memory.save", args, &res, &e) < 0);
  /* With the security pipeline in place the audit write fails first (and
   * denies); either way the message names the workspace-relative file. */
  CHECK_CONTAINS(e.msg, "memory.save: ");
  CHECK_CONTAINS(e.msg, ".luagent/state.db: ");
  CHECK(!strstr(e.msg, dir));
  cJSON_Delete(args);
  CHECK_INT(store_exec(s, "PRAGMA query_only = 0", &e), 0);

  /* memory_relevant: bounded block of the default namespace's matches. */
  put(s, "team", "standup", "Standup is at 09:30 every weekday\nin room 4");
  put(s, "team", "oncall", "Oncall rotation changes on Tuesday");
  struct sbuf out = {0};
  int n = memory_relevant(rt, "What happens on Tuesday?", 5, 2000, &out, &e);
  CHECK_INT(n, 2);
  CHECK_CONTAINS(out.s, "Relevant memories");
  CHECK_CONTAINS(out.s, "- deploy: Deploys happen on Tuesday at 10:00\n");
  CHECK_CONTAINS(out.s, "- oncall: Oncall rotation changes on Tuesday\n");
  CHECK(!strstr(out.s ? out.s : "", "standup"));
  sbuf_free(&out);
  /* Control characters are flattened. */
  n = memory_relevant(rt, "standup room", 5, 2000, &out, &e);
  CHECK_INT(n, 1);
  CHECK_CONTAINS(out.s, "- standup: Standup is at 09:30 every weekday in room 4\n");
  sbuf_free(&out);
  /* max_items */
  n = memory_relevant(rt, "Tuesday", 1, 2000, &out, &e);
  CHECK_INT(n, 1);
  sbuf_free(&out);
  /* max_chars: the block never exceeds it, values are cut with "...". */
  for (size_t cap = 0; cap < 200; cap++) {
    sbuf_puts(&out, "prefix|");
    n = memory_relevant(rt, "Tuesday", 5, cap, &out, &e);
    CHECK(n >= 0);
    CHECK(out.len - 7 <= cap);
    if (n == 0) CHECK_INT(out.len, 7);
    sbuf_free(&out);
  }
  n = memory_relevant(rt, "Tuesday", 5, 80, &out, &e);
  CHECK_INT(n, 1);
  CHECK_CONTAINS(out.s, "...\n");
  sbuf_free(&out);
  /* Nothing relevant: nothing appended. */
  n = memory_relevant(rt, "zebra", 5, 2000, &out, &e);
  CHECK_INT(n, 0);
  CHECK_INT(out.len, 0);
  n = memory_relevant(rt, "?!", 5, 2000, &out, &e);
  CHECK_INT(n, 0);
  sbuf_free(&out);
  runtime_free(rt);

  /* Persistence across a reopen of the workspace. */
  CHECK_INT(runtime_open(ws, &rt, &e), 0);
  if (rt) {
    n = memory_relevant(rt, "deploys", 5, 2000, &out, &e);
    CHECK_INT(n, 1);
    CHECK_CONTAINS(out.s, "Tuesday at 10:00");
    sbuf_free(&out);
    runtime_free(rt);
  }

  /* Config errors name the file, line and key. */
  static const struct {
    const char *cfg, *want;
  } bad[] = {
      {"return {\n  memory = { colour = 1 },\n}\n",
       "luagent.lua:2: key 'memory.colour': unknown key"},
      {"return {\n  memory = {\n    max_value_bytes = -5 },\n}\n",
       "luagent.lua:3: key 'memory.max_value_bytes'"},
      {"return {\n  memory = { max_value_bytes = 1.5 },\n}\n", "whole number"},
      {"return {\n  memory = { namespace = \"no spaces\" },\n}\n",
       "key 'memory.namespace': namespace 'no spaces'"},
      {"return {\n  memory = { namespace = 7 },\n}\n", "expected a string"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    f = fopen(cfgpath, "w");
    fputs(bad[i].cfg, f);
    fclose(f);
    rt = NULL;
    CHECK(runtime_open(ws, &rt, &e) < 0);
    CHECK_CONTAINS(e.msg, bad[i].want);
    runtime_free(rt);
  }
}

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char path[4200];
  snprintf(path, sizeof path, "%s/state.db", dir);
  struct store *s = NULL;
  struct err e = {0};
  CHECK_INT(store_open_path(path, &s, &e), 0);
  if (!s) {
    fprintf(stderr, "store_open_path: %s\n", e.msg);
    rm_rf(dir);
    return 1;
  }
  test_empty(s);
  test_crud(s);
  test_validation(s);
  test_namespaces(s);
  test_search(s);
  store_close(s);

  /* Persistence: everything is there after a reopen of the file. */
  CHECK_INT(store_open_path(path, &s, &e), 0);
  if (s) {
    CHECK_SEARCH(s, "", "anna", 10, "food trip");
    struct memory_item it;
    CHECK_INT(memory_get(s, "", "car", &it, &e), 1);
    CHECK_STR(it.value, "The car is a blue Volvo");
    memory_item_clear(&it);
    store_close(s);
  }
  test_migration();
  test_vacuum();
  test_runtime();
  rm_rf(dir);
  return TEST_END();
}
