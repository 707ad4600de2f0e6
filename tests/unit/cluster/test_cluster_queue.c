/* test_cluster_queue.c - the approval queue and the audit chain in
 * PostgreSQL (cluster_queue.h): the importers (a SQLite chain copied so it
 * still verifies, twice = once, a foreign or broken chain refused, a
 * longer SQLite chain appended), the queue's semantics (hash checks,
 * decided once, expiry, stop), a NOTIFY waking a waiting run whose
 * fallback re-check is 1000 s away, a decision whose notification was
 * lost found by that re-check, text PostgreSQL would refuse, and
 * batches larger than one INSERT.
 *
 * Needs a server: without PG_URL the test re-executes itself under
 * with_pg.sh, which starts a throwaway one (tests/e2e/lib/pg.sh). Each
 * test gets a schema of its own (search_path in the URL). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "approver.h"
#include "audit.h"
#include "cluster.h"
#include "cluster_queue.h"
#include "json.h"
#include "store.h"
#include "test.h"
#include "util.h"

static char dir[256];

/* A URL for schema name (created here). */
static void schema_url(const char *name, char *out, size_t n) {
  struct pg *p = NULL;
  struct err e = {0};
  char sql[200];
  CHECK_INT(pg_connect(getenv("PG_URL"), "test", &p, &e), 0);
  snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE; CREATE SCHEMA %s", name, name);
  CHECK_INT(pg_exec(p, sql, &e), 0);
  pg_close(p);
  snprintf(out, n, "%s?options=-csearch_path%%3D%s", getenv("PG_URL"), name);
}

static struct cluster_opts opts_for(char *url, const char *node) {
  struct cluster_opts o = {.url = url, .lease_s = 15};
  snprintf(o.node, sizeof o.node, "%s", node);
  return o;
}

/* A workspace folder with a store. */
static struct store *workspace(const char *name, char *ws, size_t n) {
  snprintf(ws, n, "%s/%s", dir, name);
  CHECK_INT(mkdir(ws, 0700), 0);
  struct store *s = NULL;
  struct err e = {0};
  CHECK_INT(store_open(ws, &s, &e), 0);
  return s;
}

static void add(struct store *s, const char *tool, const char *detail, double ms) {
  struct audit_entry a = {.run_id = "r-1",
                          .caller_kind = "script",
                          .caller_name = "t.lua",
                          .tool = tool,
                          .args_hash = "abc",
                          .decision = "allow",
                          .decided_by = "default",
                          .duration_ms = ms,
                          .detail = detail};
  struct err e = {0};
  CHECK_INT(audit_append(s, NULL, &a, NULL, &e), 0);
}

static long long count(struct pg *p, const char *sql) {
  PGresult *r = NULL;
  struct err e = {0};
  if (pg_query(p, sql, 0, NULL, &r, &e)) {
    fprintf(stderr, "%s: %s\n", sql, e.msg);
    return -1;
  }
  long long v = (long long)pg_number(r, 0, 0, -1);
  PQclear(r);
  return v;
}

static void verify_ok(struct cluster_policy *cp, long long rows) {
  struct audit_report r;
  struct err e = {0};
  CHECK_INT(cluster_audit_verify(cp, NULL, NULL, &r, &e), 0);
  CHECK_STR(r.problem, "");
  CHECK_INT(r.rows, rows);
}

static void test_import_audit(void) {
  char ws[300], url[600], ws2[300];
  struct err e = {0};
  struct store *s = workspace("imp", ws, sizeof ws);
  add(s, "fs.read", NULL, -1);
  add(s, "fs.write", "wrote \xc3\xa9 \xe2\x9c\x93", 1.5);
  add(s, "http.request", "a \"quoted\" line\nand another", 0.000123456789);
  add(s, NULL, NULL, 1e-300);
  add(s, "fs.delete", "", 12345.678);
  schema_url("imp", url, sizeof url);
  struct cluster_opts o = opts_for(url, "n1");
  struct pg *p = NULL;
  CHECK_INT(cluster_open(&o, &p, &e), 0);
  long long n = -1;
  CHECK_INT(cluster_import_audit(p, s, &n, &e), 0);
  CHECK_INT(n, 5);
  CHECK_INT(count(p, "SELECT count(*) FROM luagent_audit WHERE node IS NULL"), 5);
  CHECK_INT(cluster_import_audit(p, s, &n, &e), 0);
  CHECK_INT(n, 0); /* twice = once */
  struct cluster_policy *cp = NULL;
  CHECK_INT(cluster_policy_new(&o, ws, &cp, &e), 0);
  verify_ok(cp, 5);
  /* The head carries over: its hash is the SQLite head's. */
  struct audit_head sh, ch;
  CHECK_INT(audit_head_read(s, &sh, &e), 0);
  CHECK_INT(cluster_audit_head(cp, &ch, &e), 0);
  CHECK_STR(ch.hash, sh.hash);
  CHECK_INT(ch.rows, 5);

  /* The cluster goes on; importing again still adds nothing. */
  struct audit_sink sink = cluster_policy_sink(cp);
  struct audit_entry a[2] = {{.decision = "allow", .tool = "x", .duration_ms = -1},
                             {.decision = "exec", .tool = "x", .status = "ok", .duration_ms = 3}};
  long long seq = 0;
  CHECK_INT(sink.ops->append_batch(sink.ud, NULL, a, 2, &seq, &e), 0);
  CHECK_INT(seq, 7);
  verify_ok(cp, 7);
  CHECK_INT(cluster_import_audit(p, s, &n, &e), 0);
  CHECK_INT(n, 0);
  verify_ok(cp, 7);

  /* Another workspace's chain cannot go into this one. */
  struct store *s2 = workspace("imp2", ws2, sizeof ws2);
  add(s2, "other", NULL, -1);
  CHECK(cluster_import_audit(p, s2, &n, &e) != 0);
  CHECK_CONTAINS(e.msg, "already holds another audit chain");
  CHECK_INT(n, 0);
  verify_ok(cp, 7);
  store_close(s2);
  cluster_policy_free(cp);
  pg_close(p);
  store_close(s);
}

static void test_import_refused_and_prefix(void) {
  char ws[300], url[600];
  struct err e = {0};
  struct store *s = workspace("pre", ws, sizeof ws);
  add(s, "a", NULL, -1);
  add(s, "b", NULL, -1);
  add(s, "c", NULL, -1);
  schema_url("pre", url, sizeof url);
  struct cluster_opts o = opts_for(url, "n1");
  struct pg *p = NULL;
  CHECK_INT(cluster_open(&o, &p, &e), 0);
  long long n = -1;
  CHECK_INT(cluster_import_audit(p, s, &n, &e), 0);
  CHECK_INT(n, 3);
  /* The SQLite chain grew before the cluster wrote anything: the rest is
   * added. */
  add(s, "d", NULL, -1);
  add(s, "e", NULL, -1);
  CHECK_INT(cluster_import_audit(p, s, &n, &e), 0);
  CHECK_INT(n, 2);
  struct cluster_policy *cp = NULL;
  CHECK_INT(cluster_policy_new(&o, ws, &cp, &e), 0);
  verify_ok(cp, 5);
  cluster_policy_free(cp);

  /* A SQLite chain that does not verify is not imported. */
  char url2[600];
  schema_url("broken", url2, sizeof url2);
  struct cluster_opts o2 = opts_for(url2, "n1");
  struct pg *p2 = NULL;
  CHECK_INT(cluster_open(&o2, &p2, &e), 0);
  CHECK_INT(store_exec(s, "UPDATE audit SET detail = 'x' WHERE seq = 2", &e), 0);
  CHECK(cluster_import_audit(p2, s, &n, &e) != 0);
  CHECK_CONTAINS(e.msg, "does not verify");
  CHECK_CONTAINS(e.msg, "row 2");
  CHECK_INT(count(p2, "SELECT count(*) FROM luagent_audit"), 0);
  pg_close(p2);
  pg_close(p);
  store_close(s);
}

static const struct approval_request *request(const char *path, cJSON **args, char hash[65]) {
  static struct approval_request rq;
  *args = cJSON_CreateObject();
  cJSON_AddStringToObject(*args, "path", path);
  json_hash_hex(*args, hash);
  rq = (struct approval_request){.run_id = "r-1",
                                 .tool = "fs.delete",
                                 .caller_kind = "script",
                                 .caller_name = "d.lua",
                                 .impact = "high",
                                 .reason = "impact",
                                 .args = *args,
                                 .args_hash = hash};
  return &rq;
}

static void test_import_approvals(void) {
  char ws[300], url[600], h1[65], h2[65], h3[65];
  struct err e = {0};
  struct store *s = workspace("appr", ws, sizeof ws);
  cJSON *a1, *a2, *a3;
  long long id1, id2, id3;
  CHECK_INT(approver_queue_submit(s, request("a.txt", &a1, h1), &id1, &e), 0);
  CHECK_INT(approver_queue_submit(s, request("b.txt", &a2, h2), &id2, &e), 0);
  CHECK_INT(approver_queue_submit(s, request("c.txt", &a3, h3), &id3, &e), 0);
  CHECK_INT(approver_queue_decide(s, id2, 1, NULL, "op", NULL, &e), 0);
  schema_url("appr", url, sizeof url);
  struct cluster_opts o = opts_for(url, "n1");
  struct pg *p = NULL;
  CHECK_INT(cluster_open(&o, &p, &e), 0);
  long long n = -1;
  CHECK_INT(cluster_import_approvals(p, s, &n, &e), 0);
  CHECK_INT(n, 2); /* the pending ones */
  CHECK_INT(cluster_import_approvals(p, s, &n, &e), 0);
  CHECK_INT(n, 0);
  struct cluster_policy *cp = NULL;
  CHECK_INT(cluster_policy_new(&o, ws, &cp, &e), 0);
  struct approval_queue q = cluster_policy_queue(cp);
  cJSON *rows = NULL;
  CHECK_INT(q.ops->list(q.ud, 0, &rows, &e), 0);
  CHECK_INT(cJSON_GetArraySize(rows), 2);
  const cJSON *r0 = cJSON_GetArrayItem(rows, 0);
  CHECK_STR(cJSON_GetObjectItem(r0, "args_hash")->valuestring, h1);
  CHECK_STR(cJSON_GetObjectItem(cJSON_GetObjectItem(r0, "args"), "path")->valuestring, "a.txt");
  /* An imported row decides with the same hash checks. */
  long long cid = (long long)cJSON_GetObjectItem(r0, "id")->valuedouble;
  CHECK_INT(q.ops->decide(q.ud, cid, 1, NULL, "op", NULL, &e), 0);
  struct approval_result res;
  cJSON *a4;
  CHECK_INT(q.ops->await(q.ud, cid, request("a.txt", &a4, h2), 5, 0, NULL, &res, &e), 0);
  CHECK_INT(res.verdict, APPROVAL_APPROVED);
  cJSON_Delete(rows);
  cJSON_Delete(a1);
  cJSON_Delete(a2);
  cJSON_Delete(a4);
  cJSON_Delete(a3);
  cluster_policy_free(cp);
  pg_close(p);
  store_close(s);
}

static void test_queue_semantics(void) {
  char ws[300], url[600], h[65], h2[65];
  struct err e = {0};
  struct store *s = workspace("sem", ws, sizeof ws);
  schema_url("sem", url, sizeof url);
  struct cluster_opts o = opts_for(url, "n1");
  struct cluster_policy *cp = NULL;
  CHECK_INT(cluster_policy_new(&o, ws, &cp, &e), 0);
  struct approval_queue q = cluster_policy_queue(cp);
  cJSON *args, *other;
  struct approval_request base = *request("x.txt", &args, h); /* request() reuses its struct */
  const struct approval_request *rq = &base;
  long long id = 0;
  struct approval_result res;
  CHECK_INT(q.ops->submit(q.ud, rq, &id, &e), 0);
  /* Modified arguments: the waiting run gets exactly them. */
  cJSON *mod = cJSON_Parse("{\"path\":\"y.txt\"}");
  CHECK_INT(q.ops->decide(q.ud, id, 1, NULL, "op", mod, &e), 0);
  CHECK(q.ops->decide(q.ud, id, 0, "late", "op", NULL, &e) != 0);
  CHECK_CONTAINS(e.msg, "already modified");
  CHECK_INT(q.ops->await(q.ud, id, rq, 5, 0, NULL, &res, &e), 0);
  CHECK_INT(res.verdict, APPROVAL_MODIFIED);
  CHECK(res.new_args && !strcmp(cJSON_GetObjectItem(res.new_args, "path")->valuestring, "y.txt"));
  cJSON_Delete(res.new_args);
  /* A run holding other arguments is refused the approval. */
  struct approval_request rq2 = *request("z.txt", &other, h2);
  CHECK_INT(q.ops->submit(q.ud, rq, &id, &e), 0);
  CHECK_INT(q.ops->decide(q.ud, id, 1, NULL, "op", NULL, &e), 0);
  CHECK_INT(q.ops->await(q.ud, id, &rq2, 5, 0, NULL, &res, &e), 0);
  CHECK_INT(res.verdict, APPROVAL_DENIED);
  CHECK_CONTAINS(res.reason, "other arguments");
  /* No decision: expired after the timeout, then undecidable. */
  CHECK_INT(q.ops->submit(q.ud, rq, &id, &e), 0);
  CHECK_INT(q.ops->await(q.ud, id, rq, 0.3, 0, NULL, &res, &e), 0);
  CHECK_INT(res.verdict, APPROVAL_DENIED);
  CHECK_CONTAINS(res.reason, "timed out");
  CHECK(q.ops->decide(q.ud, id, 1, NULL, "op", NULL, &e) != 0);
  CHECK_CONTAINS(e.msg, "already expired");
  /* Stopped while waiting. */
  volatile int stop = 1;
  CHECK_INT(q.ops->submit(q.ud, rq, &id, &e), 0);
  CHECK_INT(q.ops->await(q.ud, id, rq, 10, 0, &stop, &res, &e), 0);
  CHECK_CONTAINS(res.reason, "run stopped");
  /* Unknown ids. */
  cJSON *row = NULL;
  CHECK_INT(q.ops->get(q.ud, 99999, &row, &e), ERR_NOTFOUND);
  CHECK_INT(q.ops->decide(q.ud, 99999, 1, NULL, "op", NULL, &e), ERR_NOTFOUND);
  cJSON_Delete(mod);
  cJSON_Delete(args);
  cJSON_Delete(other);
  cluster_policy_free(cp);
  store_close(s);
}

struct waiter {
  struct cluster_policy *cp;
  const struct approval_request *rq;
  long long id;
  struct approval_result res;
  int rc;
};

static void *wait_thread(void *ud) {
  struct waiter *w = ud;
  struct approval_queue q = cluster_policy_queue(w->cp);
  struct err e = {0};
  w->rc = q.ops->await(q.ud, w->id, w->rq, 60, 0, NULL, &w->res, &e);
  return NULL;
}

/* The waiter's fallback re-check is 1000 s and its timeout 60 s: an
 * approval it sees at all reached it through NOTIFY. The decision comes
 * from another handle (another connection: another host). */
static void test_notify_wakes(void) {
  char ws[300], url[600], h[65];
  struct err e = {0};
  struct store *s = workspace("ntf", ws, sizeof ws);
  schema_url("ntf", url, sizeof url);
  struct cluster_opts o = opts_for(url, "host-a"), o2 = opts_for(url, "host-b");
  struct cluster_policy *a = NULL, *b = NULL;
  CHECK_INT(cluster_policy_new(&o, ws, &a, &e), 0);
  CHECK_INT(cluster_policy_new(&o2, ws, &b, &e), 0);
  setenv("LUAGENT_TEST_APPROVAL_RECHECK_S", "1000", 1);
  cJSON *args;
  struct waiter w = {.cp = a, .rq = request("n.txt", &args, h)};
  struct approval_queue qa = cluster_policy_queue(a), qb = cluster_policy_queue(b);
  CHECK_INT(qa.ops->submit(qa.ud, w.rq, &w.id, &e), 0);
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  util_sleep(0.3); /* let it LISTEN and sleep (it works either way: it reads the row first) */
  double t0 = util_monotonic();
  CHECK_INT(qb.ops->decide(qb.ud, w.id, 1, NULL, "op", NULL, &e), 0);
  pthread_join(t, NULL);
  CHECK_INT(w.rc, 0);
  CHECK_INT(w.res.verdict, APPROVAL_APPROVED);
  printf("woken %.3f s after the decision (fallback re-check: 1000 s)\n", util_monotonic() - t0);
  unsetenv("LUAGENT_TEST_APPROVAL_RECHECK_S");
  cJSON_Delete(args);
  cluster_policy_free(a);
  cluster_policy_free(b);
  store_close(s);
}

/* A lost notification only delays: a decision written without NOTIFY (as
 * if the notification were lost) is found by the fallback re-check. */
static void test_fallback_recheck(void) {
  char ws[300], url[600], h[65];
  struct err e = {0};
  struct store *s = workspace("fbk", ws, sizeof ws);
  schema_url("fbk", url, sizeof url);
  struct cluster_opts o = opts_for(url, "host-a");
  struct cluster_policy *a = NULL;
  CHECK_INT(cluster_policy_new(&o, ws, &a, &e), 0);
  setenv("LUAGENT_TEST_APPROVAL_RECHECK_S", "0.5", 1);
  cJSON *args;
  struct waiter w = {.cp = a, .rq = request("f.txt", &args, h)};
  struct approval_queue qa = cluster_policy_queue(a);
  CHECK_INT(qa.ops->submit(qa.ud, w.rq, &w.id, &e), 0);
  pthread_t t;
  pthread_create(&t, NULL, wait_thread, &w);
  util_sleep(0.3);
  struct pg *p = NULL;
  CHECK_INT(pg_connect(url, "t", &p, &e), 0);
  char sql[300];
  snprintf(sql, sizeof sql,
           "UPDATE luagent_approvals SET status = 'approved', decided_by = 'sql',"
           " approved_hash = args_hash WHERE id = %lld",
           w.id);
  CHECK_INT(pg_exec(p, sql, &e), 0);
  pthread_join(t, NULL);
  CHECK_INT(w.rc, 0);
  CHECK_INT(w.res.verdict, APPROVAL_APPROVED);
  unsetenv("LUAGENT_TEST_APPROVAL_RECHECK_S");
  pg_close(p);
  cJSON_Delete(args);
  cluster_policy_free(a);
  store_close(s);
}

static void test_text_and_batches(void) {
  char ws[300], url[600];
  struct err e = {0};
  struct store *s = workspace("txt", ws, sizeof ws);
  schema_url("txt", url, sizeof url);
  struct cluster_opts o = opts_for(url, "n1");
  struct cluster_policy *cp = NULL;
  CHECK_INT(cluster_policy_new(&o, ws, &cp, &e), 0);
  struct audit_sink sink = cluster_policy_sink(cp);
  /* Bytes PostgreSQL would refuse: stored as '?', and the row verifies. */
  struct audit_entry bad = {
      .decision = "exec", .tool = "t", .detail = "bad \xff\xfe end", .duration_ms = -1};
  CHECK_INT(sink.ops->append_batch(sink.ud, NULL, &bad, 1, NULL, &e), 0);
  struct pg *p = NULL;
  CHECK_INT(pg_connect(url, "t", &p, &e), 0);
  CHECK_INT(count(p, "SELECT count(*) FROM luagent_audit WHERE detail = 'bad ?? end'"), 1);
  /* A batch over one INSERT's worth of rows. */
  enum { N = 1500 };
  struct audit_entry *rows = calloc(N, sizeof *rows);
  for (int i = 0; i < N; i++)
    rows[i] = (struct audit_entry){.decision = "allow", .tool = "fs.read", .duration_ms = i};
  long long seq = 0;
  CHECK_INT(sink.ops->append_batch(sink.ud, NULL, rows, N, &seq, &e), 0);
  CHECK_INT(seq, N + 1);
  free(rows);
  verify_ok(cp, N + 1);
  CHECK_INT(count(p, "SELECT rows FROM luagent_audit_head"), N + 1);
  /* An anchor is written for this process's head. */
  CHECK_INT(sink.ops->anchor(sink.ud, NULL, 1, &e), 0);
  struct audit_report r;
  CHECK_INT(cluster_audit_verify(cp, NULL, NULL, &r, &e), 0);
  CHECK_STR(r.problem, "");
  CHECK_INT(r.anchored, N + 1);
  pg_close(p);
  cluster_policy_free(cp);
  store_close(s);
}

/* A long-lived process appends in one statement while the head is the one
 * it wrote last; a chain changed behind its back since must still stop it
 * (the fast path falls back to the locking one, which names the damage). */
static void test_append_after_tamper(void) {
  char ws[300], url[600];
  struct err e = {0};
  struct store *s = workspace("tam", ws, sizeof ws);
  schema_url("tam", url, sizeof url);
  struct cluster_opts o = opts_for(url, "n1");
  struct cluster_policy *cp = NULL, *other = NULL;
  CHECK_INT(cluster_policy_new(&o, ws, &cp, &e), 0);
  CHECK_INT(cluster_policy_new(&o, ws, &other, &e), 0);
  struct audit_sink sink = cluster_policy_sink(cp), sink2 = cluster_policy_sink(other);
  struct audit_entry a = {.decision = "allow", .tool = "t", .duration_ms = -1};
  long long seq = 0;
  for (int i = 0; i < 3; i++) CHECK_INT(sink.ops->append_batch(sink.ud, NULL, &a, 1, &seq, &e), 0);
  CHECK_INT(seq, 3);
  /* Another host appends: this process's next append must go after it. */
  CHECK_INT(sink2.ops->append_batch(sink2.ud, NULL, &a, 1, &seq, &e), 0);
  CHECK_INT(seq, 4);
  CHECK_INT(sink.ops->append_batch(sink.ud, NULL, &a, 1, &seq, &e), 0);
  CHECK_INT(seq, 5);
  verify_ok(cp, 5);
  struct pg *p = NULL;
  CHECK_INT(pg_connect(url, "t", &p, &e), 0);
  /* The last row deleted, the head left alone. */
  CHECK_INT(pg_exec(p,
                    "CREATE TABLE saved AS SELECT * FROM luagent_audit WHERE seq = 5;"
                    "DELETE FROM luagent_audit WHERE seq = 5",
                    &e),
            0);
  CHECK(sink.ops->append_batch(sink.ud, NULL, &a, 1, &seq, &e) != 0);
  CHECK_CONTAINS(e.msg, "does not match the chain's last row");
  CHECK_INT(count(p, "SELECT count(*) FROM luagent_audit"), 4);
  /* Put back, then a forged head hash. */
  CHECK_INT(pg_exec(p, "INSERT INTO luagent_audit SELECT * FROM saved", &e), 0);
  CHECK_INT(sink.ops->append_batch(sink.ud, NULL, &a, 1, &seq, &e), 0);
  CHECK_INT(seq, 6);
  CHECK_INT(pg_exec(p, "UPDATE luagent_audit_head SET hash = repeat('ab', 32)", &e), 0);
  CHECK(sink.ops->append_batch(sink.ud, NULL, &a, 1, &seq, &e) != 0);
  CHECK_CONTAINS(e.msg, "does not match the chain's last row");
  CHECK_INT(count(p, "SELECT count(*) FROM luagent_audit"), 6);
  pg_close(p);
  cluster_policy_free(cp);
  cluster_policy_free(other);
  store_close(s);
}

int main(int argc, char **argv) {
  (void)argc;
  if (!getenv("PG_URL")) {
    /* Start a server for this run: with_pg.sh runs us again with PG_URL. */
    const char *src = getenv("LUAGENT_SOURCE_DIR");
    char script[1024], self[1024];
    snprintf(script, sizeof script, "%s/tests/unit/cluster/with_pg.sh", src ? src : ".");
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = 0;
    execl("/bin/bash", "bash", script, self, (char *)NULL);
    fprintf(stderr, "FAIL: cannot run %s (%s)\n", script, argv[0]);
    return 1;
  }
  snprintf(dir, sizeof dir, "/tmp/luagent-test-cq-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_import_audit();
  test_import_refused_and_prefix();
  test_import_approvals();
  test_queue_semantics();
  test_notify_wakes();
  test_fallback_recheck();
  test_text_and_batches();
  test_append_after_tamper();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "cleanup failed\n");
  return TEST_END();
}
