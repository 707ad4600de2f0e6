/* test_store.c - the state database: creation, WAL, versioned migrations,
 * clear errors for a newer schema or a file that is not a database, and one
 * connection per thread writing concurrently (busy timeout). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store.h"
#include "test.h"

static char dir[64];

static int query_int(struct store *s, const char *sql) {
  sqlite3_stmt *st;
  struct err e;
  if (store_prepare(s, sql, &st, &e)) return -1;
  int v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
  sqlite3_finalize(st);
  return v;
}

static void test_create_and_reopen(void) {
  struct store *s;
  struct err e;
  CHECK_INT(store_open(dir, &s, &e), 0);
  CHECK_INT(query_int(s, "PRAGMA user_version"), store_schema_version());
  sqlite3_stmt *st;
  CHECK_INT(store_prepare(s, "PRAGMA journal_mode", &st, &e), 0);
  CHECK_INT(sqlite3_step(st), SQLITE_ROW);
  CHECK_STR((const char *)sqlite3_column_text(st, 0), "wal");
  sqlite3_finalize(st);
  CHECK_INT(query_int(s, "SELECT count(*) FROM sqlite_master WHERE name = 'embed_cache'"), 1);
  CHECK(strstr(store_path(s), "/.luagent/state.db") != NULL);
  CHECK_INT(store_exec(s, "INSERT INTO embed_cache VALUES ('m', 'h', 1, x'00000000')", &e), 0);
  store_close(s);
  /* reopening migrates nothing and keeps the data */
  CHECK_INT(store_open(dir, &s, &e), 0);
  CHECK_INT(query_int(s, "SELECT count(*) FROM embed_cache"), 1);
  /* a bad statement names the file */
  CHECK(store_exec(s, "SELECT * FROM no_such_table", &e) < 0);
  CHECK_CONTAINS(e.msg, "state.db");
  CHECK_CONTAINS(e.msg, "no_such_table");
  store_close(s);
  store_close(NULL);
}

static void test_newer_schema(void) {
  char path[128];
  snprintf(path, sizeof path, "%s/newer.db", dir);
  sqlite3 *db;
  CHECK_INT(sqlite3_open(path, &db), SQLITE_OK);
  char sql[64];
  snprintf(sql, sizeof sql, "PRAGMA user_version = %d", store_schema_version() + 5);
  CHECK_INT(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  struct store *s = (struct store *)1;
  struct err e;
  CHECK(store_open_path(path, &s, &e) < 0);
  CHECK(s == NULL);
  CHECK_CONTAINS(e.msg, "newer.db");
  CHECK_CONTAINS(e.msg, "newer than this luagent understands");
}

static void test_not_a_database(void) {
  char path[128];
  snprintf(path, sizeof path, "%s/junk.db", dir);
  FILE *f = fopen(path, "w");
  for (int i = 0; i < 200; i++) fputs("this is not an sqlite file at all. ", f);
  fclose(f);
  struct store *s;
  struct err e;
  CHECK(store_open_path(path, &s, &e) < 0);
  CHECK_CONTAINS(e.msg, "junk.db");
  CHECK_CONTAINS(e.msg, "not a database");
  CHECK(store_open_path("/nonexistent-dir/x/state.db", &s, &e) < 0);
  CHECK_CONTAINS(e.msg, "/nonexistent-dir/x/state.db");
}

/* One connection per thread, both writing: the busy timeout serialises
 * the writers instead of failing them. */
struct writer {
  int id, ok, failed;
};
static void *write_rows(void *ud) {
  struct writer *w = ud;
  struct store *s;
  struct err e;
  if (store_open(dir, &s, &e)) {
    w->failed = 1000;
    return NULL;
  }
  for (int i = 0; i < 200; i++) {
    char sql[160];
    snprintf(sql, sizeof sql, "INSERT INTO embed_cache VALUES ('thread', '%d-%d', 1, x'00000000')",
             w->id, i);
    if (store_begin(s, &e) == 0 && store_exec(s, sql, &e) == 0 && store_commit(s, &e) == 0) {
      w->ok++;
    } else {
      store_rollback(s);
      w->failed++;
    }
  }
  store_close(s);
  return NULL;
}

static void test_threads(void) {
  pthread_t t[4];
  struct writer w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (struct writer){.id = i};
    pthread_create(&t[i], NULL, write_rows, &w[i]);
  }
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 4; i++) {
    CHECK_INT(w[i].ok, 200);
    CHECK_INT(w[i].failed, 0);
  }
  struct store *s;
  struct err e;
  CHECK_INT(store_open(dir, &s, &e), 0);
  CHECK_INT(query_int(s, "SELECT count(*) FROM embed_cache WHERE model = 'thread'"), 800);
  store_close(s);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/luagent-test-store-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_create_and_reopen();
  test_newer_schema();
  test_not_a_database();
  test_threads();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_INT(system(cmd), 0);
  return TEST_END();
}
