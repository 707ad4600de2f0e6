/* test_audit_queue.c - the audit rows the pipeline queues for the store
 * writer's thread (audit_queue.c, store/writer.c), attacked where a row
 * could be lost or the chain reordered:
 *  - eight threads call tools at once (reads, whose rows only queue, and
 *    writes, whose rows are written before and after they run) while the
 *    writer commits: every call has its rows, each thread's rows are in
 *    the order it made its calls, and the chain verifies;
 *  - the chain cannot be written (a trigger refuses every insert, as a
 *    full disk would): at most AUDIT_QUEUE_MAX reads run, then reads are
 *    refused naming the cause, a write is denied, and once the database
 *    takes rows again every read that ran is on record, in its order;
 *  - a row that must be on record is on disk when tool_call returns (read
 *    back through another connection, before any flush);
 *  - a writer slower than its caller (a sink that sleeps in every batch):
 *    no read is refused, every row arrives in the order of the calls with
 *    the args_hash json_hash_hex gives (the writer's thread hashes a
 *    read's arguments from its copy; arguments too big for the copy are
 *    hashed by the caller), the rows of a write are there when it
 *    returns, and the calling thread waits for the writer's batches
 *    instead of writing half of them itself.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit.h"
#include "audit_queue.h"
#include "json.h"
#include "runtime.h"
#include "security.h"
#include "store.h"
#include "test.h"
#include "util.h"

static char ws[256];

static int call(struct call_ctx *ctx, const char *tool, const char *json, struct err *e) {
  cJSON *a = cJSON_Parse(json), *res = NULL;
  int rc = tool_call(ctx, tool, a, &res, e);
  cJSON_Delete(res);
  cJSON_Delete(a);
  return rc;
}

static long long count(const char *sql) {
  struct store *st = NULL;
  struct err e = {0};
  long long n = -1;
  if (store_open(ws, &st, &e)) return -1;
  sqlite3_stmt *q = NULL;
  if (!store_prepare(st, sql, &q, &e) && sqlite3_step(q) == SQLITE_ROW)
    n = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  store_close(st);
  return n;
}

static void exec_sql(const char *sql) {
  struct store *st = NULL;
  struct err e = {0};
  CHECK_INT(store_open(ws, &st, &e), 0);
  if (!st) return;
  CHECK_INT(store_exec(st, sql, &e), 0);
  store_close(st);
}

static void verify_intact(long long rows) {
  struct store *st = NULL;
  struct err e = {0};
  CHECK_INT(store_open(ws, &st, &e), 0);
  if (!st) return;
  struct audit_report r;
  CHECK_INT(audit_verify(st, NULL, NULL, &r, &e), 0);
  CHECK_STR(r.problem, "");
  CHECK_INT(r.rows, rows);
  store_close(st);
}

/* --- many threads ------------------------------------------------------ */

#define THREADS 8
#define CALLS 240
#define WRITE_EVERY 40 /* every 40th call of a thread writes a file */

struct worker {
  struct runtime *rt;
  int id, failed;
};

static void call_args(int id, int k, char *out, size_t n) {
  if (k % WRITE_EVERY == WRITE_EVERY - 1)
    snprintf(out, n, "{\"path\":\"t%d-%d.txt\",\"content\":\"x\"}", id, k);
  else
    snprintf(out, n, "{\"t\":%d,\"k\":%d}", id, k);
}

static void *worker_main(void *arg) {
  struct worker *w = arg;
  struct call_ctx ctx;
  char name[16], js[96];
  snprintf(name, sizeof name, "t%d", w->id);
  call_ctx_init(&ctx, w->rt, CALLER_SCRIPT, name);
  for (int k = 0; k < CALLS; k++) {
    struct err e = {0};
    call_args(w->id, k, js, sizeof js);
    int write = k % WRITE_EVERY == WRITE_EVERY - 1;
    if (call(&ctx, write ? "fs.write" : "echo", js, &e)) {
      fprintf(stderr, "thread %d call %d: %s\n", w->id, k, e.msg);
      w->failed++;
    }
  }
  return NULL;
}

/* The rows a thread's calls must leave, in its order: (decision, hash). */
static void expect_thread(int id, char (*dec)[16], char (*hash)[65], int *n) {
  *n = 0;
  char js[96];
  for (int k = 0; k < CALLS; k++) {
    call_args(id, k, js, sizeof js);
    cJSON *a = cJSON_Parse(js);
    char h[65];
    json_hash_hex(a, h);
    cJSON_Delete(a);
    int write = k % WRITE_EVERY == WRITE_EVERY - 1;
    snprintf(dec[*n], 16, "allow");
    memcpy(hash[(*n)++], h, 65);
    if (write) { /* the decision before it ran, then its execution */
      snprintf(dec[*n], 16, "exec");
      memcpy(hash[(*n)++], h, 65);
    }
  }
}

static void test_threads(void) {
  struct runtime *rt = NULL;
  struct err e = {0};
  CHECK_INT(runtime_open(ws, &rt, &e), 0);
  if (!rt) {
    fprintf(stderr, "runtime_open: %s\n", e.msg);
    return;
  }
  pthread_t th[THREADS];
  struct worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (struct worker){.rt = rt, .id = i};
    pthread_create(&th[i], NULL, worker_main, &w[i]);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    CHECK_INT(w[i].failed, 0);
  }
  sec_flush(rt->sec);
  int writes = CALLS / WRITE_EVERY;
  long long want = (long long)THREADS * (CALLS + writes);
  CHECK_INT(count("SELECT count(*) FROM audit"), want);
  /* Each thread's rows, in seq order, are its calls in the order made. */
  static char dec[CALLS * 2][16], hash[CALLS * 2][65];
  struct store *st = NULL;
  CHECK_INT(store_open(ws, &st, &e), 0);
  for (int i = 0; st && i < THREADS; i++) {
    int n;
    expect_thread(i, dec, hash, &n);
    sqlite3_stmt *q = NULL;
    char name[16];
    snprintf(name, sizeof name, "t%d", i);
    CHECK_INT(store_prepare(st,
                            "SELECT decision, args_hash FROM audit WHERE caller_name = ? "
                            "ORDER BY seq",
                            &q, &e),
              0);
    if (!q) break;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    int got = 0, bad = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
      if (got < n && (strcmp((const char *)sqlite3_column_text(q, 0), dec[got]) ||
                      strcmp((const char *)sqlite3_column_text(q, 1), hash[got])))
        bad++;
      got++;
    }
    sqlite3_finalize(q);
    CHECK_INT(got, n);
    CHECK_INT(bad, 0);
  }
  store_close(st);
  verify_intact(want);
  runtime_free(rt);
  /* What the process wrote is what a fresh count sees after it is gone. */
  CHECK_INT(count("SELECT count(*) FROM audit"), want);
  verify_intact(want);
}

/* --- a row that matters is on disk when the call returns ---------------- */

static void test_sync_row_on_disk(void) {
  struct runtime *rt = NULL;
  struct err e = {0};
  CHECK_INT(runtime_open(ws, &rt, &e), 0);
  if (!rt) return;
  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_SCRIPT, "sync");
  long long before = count("SELECT count(*) FROM audit");
  for (int i = 0; i < 5; i++) CHECK_INT(call(&ctx, "echo", "{\"r\":1}", &e), 0);
  /* The reads' rows only queue... */
  CHECK_INT(count("SELECT count(*) FROM audit"), before);
  CHECK_INT(call(&ctx, "fs.write", "{\"path\":\"s.txt\",\"content\":\"x\"}", &e), 0);
  /* ...the write's decision and execution are on disk when it returns,
   * with every read queued before them, in front of them. */
  CHECK_INT(count("SELECT count(*) FROM audit"), before + 7);
  CHECK_INT(count("SELECT count(*) FROM audit WHERE caller_name = 'sync' AND tool = 'echo' AND "
                  "seq < (SELECT min(seq) FROM audit WHERE caller_name = 'sync' AND tool = "
                  "'fs.write')"),
            5);
  runtime_free(rt);
}

/* --- the chain cannot be written --------------------------------------- */

static void test_unwritable(void) {
  struct runtime *rt = NULL;
  struct err e = {0};
  CHECK_INT(runtime_open(ws, &rt, &e), 0);
  if (!rt) return;
  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_SCRIPT, "full");
  long long before = count("SELECT count(*) FROM audit");
  exec_sql(
      "CREATE TRIGGER audit_full BEFORE INSERT ON audit "
      "BEGIN SELECT RAISE(ABORT, 'database or disk is full (test)'); END;");
  int ran = 0, refused = 0;
  char why[1100] = "";
  for (int i = 0; i < 2 * AUDIT_QUEUE_MAX && !refused; i++) {
    char js[32];
    snprintf(js, sizeof js, "{\"i\":%d}", i);
    struct err ce = {0};
    if (call(&ctx, "echo", js, &ce) == 0) {
      ran++;
    } else {
      refused = 1;
      snprintf(why, sizeof why, "%s", ce.msg);
    }
  }
  CHECK(refused);
  CHECK_INT(ran, AUDIT_QUEUE_MAX); /* one thread: exactly the queue's bound */
  CHECK_CONTAINS(why, "echo: denied (audit)");
  CHECK_CONTAINS(why, "database or disk is full (test)");
  /* A call with side effects is denied too, naming the cause. */
  struct err we = {0};
  CHECK_INT(call(&ctx, "fs.write", "{\"path\":\"f.txt\",\"content\":\"x\"}", &we), ERR_DENIED);
  CHECK_CONTAINS(we.msg, "database or disk is full (test)");
  char p[512];
  snprintf(p, sizeof p, "%s/data/f.txt", ws);
  CHECK(access(p, F_OK) != 0); /* it never ran */
  CHECK_INT(count("SELECT count(*) FROM audit"), before);
  /* The database takes rows again: every read that ran is on record, in
   * the order they ran, and the next write goes after them. */
  exec_sql("DROP TRIGGER audit_full;");
  CHECK_INT(call(&ctx, "fs.write", "{\"path\":\"g.txt\",\"content\":\"x\"}", &we), 0);
  CHECK_INT(count("SELECT count(*) FROM audit WHERE caller_name = 'full' AND tool = 'echo'"), ran);
  CHECK_INT(count("SELECT count(*) FROM audit WHERE caller_name = 'full' AND tool = 'fs.write'"),
            2);
  struct store *st = NULL;
  CHECK_INT(store_open(ws, &st, &e), 0);
  if (st) {
    sqlite3_stmt *q = NULL;
    CHECK_INT(store_prepare(st,
                            "SELECT args_hash FROM audit WHERE caller_name = 'full' AND "
                            "tool = 'echo' ORDER BY seq",
                            &q, &e),
              0);
    int i = 0, bad = 0;
    while (q && sqlite3_step(q) == SQLITE_ROW) {
      char js[32], h[65];
      snprintf(js, sizeof js, "{\"i\":%d}", i++);
      cJSON *a = cJSON_Parse(js);
      json_hash_hex(a, h);
      cJSON_Delete(a);
      bad += strcmp((const char *)sqlite3_column_text(q, 0), h) != 0;
    }
    sqlite3_finalize(q);
    CHECK_INT(i, ran);
    CHECK_INT(bad, 0);
    store_close(st);
  }
  runtime_free(rt);
  verify_intact(count("SELECT count(*) FROM audit"));
}

/* --- a writer slower than its caller ----------------------------------- */

#define SLOW_READS (6 * AUDIT_QUEUE_MAX)
#define SLOW_WRITE_AT 700 /* one fs.write in the middle */

struct slow_sink {
  pthread_mutex_t mu;
  pthread_t caller;
  char (*dec)[16];
  char (*hash)[65];
  size_t n, cap;
  size_t on_caller; /* rows written by a batch on the calling thread */
};

static int slow_append(void *ud, const struct audit_opts *o, const struct audit_entry *rows,
                       size_t n, long long *seq_out, struct err *e) {
  (void)o, (void)seq_out, (void)e;
  struct slow_sink *k = ud;
  usleep((useconds_t)(100 * n)); /* 0.1 ms a row: slower than a caller queueing reads */
  pthread_mutex_lock(&k->mu);
  if (pthread_equal(pthread_self(), k->caller)) k->on_caller += n;
  for (size_t i = 0; i < n && k->n < k->cap; i++, k->n++) {
    snprintf(k->dec[k->n], 16, "%s", rows[i].decision);
    snprintf(k->hash[k->n], 65, "%s", rows[i].args_hash ? rows[i].args_hash : "(null)");
  }
  pthread_mutex_unlock(&k->mu);
  return 0;
}

static const struct audit_sink_ops slow_ops = {.append_batch = slow_append};

/* Read k's arguments: small, or (every 97th) a string too big for the
 * decision's copy of them. */
static void slow_args(int k, char *out, size_t n) {
  if (k % 97 == 5) {
    int w = snprintf(out, n, "{\"k\":%d,\"big\":\"", k);
    for (int i = 0; i < 1500; i++) out[w++] = (char)('a' + i % 26);
    snprintf(out + w, n - (size_t)w, "\"}");
  } else {
    snprintf(out, n, "{\"k\":%d,\"s\":\"\\u0000x\u00e9\"}", k);
  }
}

static void test_slow_writer(void) {
  struct runtime *rt = NULL;
  struct err e = {0};
  CHECK_INT(runtime_open(ws, &rt, &e), 0);
  if (!rt) return;
  static char dec[SLOW_READS + 8][16], hash[SLOW_READS + 8][65];
  struct slow_sink k = {.dec = dec, .hash = hash, .cap = SLOW_READS + 8};
  pthread_mutex_init(&k.mu, NULL);
  k.caller = pthread_self();
  sec_set_backend(rt->sec, &(struct audit_sink){.ops = &slow_ops, .ud = &k}, NULL, NULL, NULL);
  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_SCRIPT, "slow");
  static char js[2048];
  int refused = 0;
  size_t at_write = 0, after_write = 0, caller_before = 0, caller_after = 0;
  for (int i = 0; i < SLOW_READS; i++) {
    if (i == SLOW_WRITE_AT) {
      pthread_mutex_lock(&k.mu);
      at_write = k.n;
      caller_before = k.on_caller;
      pthread_mutex_unlock(&k.mu);
      CHECK_INT(call(&ctx, "fs.write", "{\"path\":\"slow.txt\",\"content\":\"x\"}", &e), 0);
      pthread_mutex_lock(&k.mu);
      after_write = k.n;
      caller_after = k.on_caller;
      pthread_mutex_unlock(&k.mu);
    }
    slow_args(i, js, sizeof js);
    struct err ce = {0};
    if (call(&ctx, "echo", js, &ce)) {
      refused++;
      fprintf(stderr, "read %d: %s\n", i, ce.msg);
    }
  }
  pthread_mutex_lock(&k.mu);
  /* what the calling thread wrote for reads alone (the write's own pass
   * takes the reads queued before it, by design) */
  size_t before_flush = k.on_caller - (caller_after - caller_before);
  pthread_mutex_unlock(&k.mu);
  sec_flush(rt->sec);
  CHECK_INT(refused, 0);
  /* the write's decision and execution were written before it returned,
   * with every read queued before them */
  CHECK_INT((long long)at_write <= SLOW_WRITE_AT, 1);
  CHECK_INT((long long)after_write, SLOW_WRITE_AT + 2);
  CHECK_INT((long long)k.n, SLOW_READS + 2);
  int bad = 0;
  size_t r = 0;
  for (int i = 0; i < SLOW_READS && r < k.n; i++, r++) {
    if (i == SLOW_WRITE_AT) {
      bad += strcmp(dec[r], "allow") != 0;
      bad += strcmp(dec[r + 1], "exec") != 0;
      r += 2;
    }
    slow_args(i, js, sizeof js);
    cJSON *a = cJSON_Parse(js);
    char h[65];
    json_hash_hex(a, h);
    cJSON_Delete(a);
    if (strcmp(dec[r], "allow") || strcmp(hash[r], h)) {
      if (bad < 5) fprintf(stderr, "row %zu (read %d): %s %s, want allow %s\n", r, i, dec[r], hash[r], h);
      bad++;
    }
  }
  CHECK_INT(bad, 0);
  /* Before: a full queue made the caller write what the writer had not
   * taken yet, about half of the rows here. Now it waits; only a writer
   * that does not come within the wait leaves the caller a queue. */
  if (before_flush > AUDIT_QUEUE_MAX)
    fprintf(stderr, "the calling thread wrote %zu of %d rows\n", before_flush, SLOW_READS);
  CHECK(before_flush <= AUDIT_QUEUE_MAX);
  runtime_free(rt);
  pthread_mutex_destroy(&k.mu);
}

int main(void) {
  snprintf(ws, sizeof ws, "/tmp/luagent-test-audit-queue-XXXXXX");
  if (!mkdtemp(ws)) return 1;
  char d[300];
  snprintf(d, sizeof d, "%s/data", ws);
  struct err e = {0};
  if (util_mkdirs(d, 0700, &e)) return 1;
  test_threads();
  test_sync_row_on_disk();
  test_unwritable();
  test_slow_writer();
  char cmd[320];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", ws);
  if (system(cmd)) fprintf(stderr, "cleanup failed\n");
  return TEST_END();
}
