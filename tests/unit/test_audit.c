/* test_audit.c - the audit hash chain: append, verify, tamper detection
 * (edit, delete, reorder, truncate, whole-table rewrite with signing), tail. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit.h"
#include "secrets.h"
#include "store.h"
#include "test.h"
#include "util.h"

static char dir[256];

static struct store *fresh(const char *name) {
  char path[400];
  struct store *s = NULL;
  struct err e = {0};
  snprintf(path, sizeof path, "%s/%s.db", dir, name);
  CHECK_INT(store_open_path(path, &s, &e), 0);
  return s;
}

static void add(struct store *s, const struct audit_opts *o, const char *tool, const char *dec) {
  struct audit_entry a = {.run_id = "r-1",
                          .caller_kind = "automation",
                          .caller_name = "t",
                          .tool = tool,
                          .args_hash = "abc",
                          .decision = dec,
                          .decided_by = "rule 1",
                          .approver = "none",
                          .status = NULL,
                          .duration_ms = -1,
                          .detail = "why"};
  struct err e = {0};
  long long seq = 0;
  CHECK_INT(audit_append(s, o, &a, &seq, &e), 0);
  CHECK(seq > 0);
}

static void exec_sql(struct store *s, const char *sql) {
  struct err e = {0};
  CHECK_INT(store_exec(s, sql, &e), 0);
}

static void test_intact_and_edit(void) {
  struct store *s = fresh("edit");
  struct audit_report r;
  struct err e = {0};
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.rows, 0);
  CHECK_STR(r.problem, "");
  for (int i = 0; i < 5; i++) add(s, NULL, "fs.read", i % 2 ? "allow" : "deny");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.rows, 5);
  CHECK_STR(r.problem, "");
  /* An edit of one field of row 3 is named. */
  exec_sql(s, "UPDATE audit SET decision = 'allow' WHERE seq = 3");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 3);
  CHECK_CONTAINS(r.problem, "row 3");
  CHECK_CONTAINS(r.problem, "edited");
  store_close(s);

  /* Recomputing nothing but setting a NULL to '' also changes the hash. */
  s = fresh("nulls");
  add(s, NULL, "x", "allow");
  exec_sql(s, "UPDATE audit SET status = '' WHERE seq = 1");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 1);
  store_close(s);
}

static void test_delete_reorder_truncate(void) {
  struct store *s = fresh("del");
  struct audit_report r;
  struct err e = {0};
  for (int i = 0; i < 5; i++) add(s, NULL, "echo", "allow");
  exec_sql(s, "DELETE FROM audit WHERE seq = 2");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 2);
  CHECK_CONTAINS(r.problem, "row 2 is missing");
  store_close(s);

  /* Deleting and renumbering to hide the gap breaks the prev_hash link. */
  s = fresh("renumber");
  for (int i = 0; i < 4; i++) add(s, NULL, "echo", "allow");
  exec_sql(s, "DELETE FROM audit WHERE seq = 2; UPDATE audit SET seq = seq - 1 WHERE seq > 2");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 2);
  store_close(s);

  /* Swapping two rows' contents (keeping seq) is caught at the first one. */
  s = fresh("reorder");
  add(s, NULL, "a", "allow");
  add(s, NULL, "b", "deny");
  add(s, NULL, "c", "allow");
  exec_sql(s,
           "UPDATE audit SET seq = 100 WHERE seq = 2;"
           "UPDATE audit SET seq = 2 WHERE seq = 3;"
           "UPDATE audit SET seq = 3 WHERE seq = 100;");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 2);
  store_close(s);

  /* Cutting the last row off is caught by the head. */
  s = fresh("trunc");
  for (int i = 0; i < 3; i++) add(s, NULL, "echo", "allow");
  exec_sql(s, "DELETE FROM audit WHERE seq = 3");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 3);
  CHECK_CONTAINS(r.problem, "deleted at the end");
  store_close(s);
}

static void test_signed_head(void) {
  char key[400];
  snprintf(key, sizeof key, "%s/audit-test.key", dir);
  struct audit_opts o = {.sign = 1, .key_path = key};
  struct store *s = fresh("signed");
  struct audit_report r;
  struct err e = {0};
  for (int i = 0; i < 3; i++) add(s, &o, "echo", "allow");
  struct stat sb;
  CHECK_INT(stat(key, &sb), 0);
  CHECK_INT(sb.st_mode & 0777, 0600);
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_STR(r.problem, "");
  CHECK_INT(r.signed_head, 1);
  CHECK_INT(r.rows, 3);

  /* An attacker without the key rewrites the table: drops the last row and
   * rebuilds the head consistently, but cannot sign it. */
  exec_sql(s,
           "DELETE FROM audit WHERE seq = 3;"
           "UPDATE audit_head SET seq = 2, rows = 2, hash = (SELECT hash FROM audit WHERE seq = 2);");
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_CONTAINS(r.problem, "signature is invalid");
  /* Without signing configured, the same rewrite would pass: the signature is
   * what catches it. A present signature is still checked. */
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_CONTAINS(r.problem, "signature");
  /* Removing the signature is caught when signing is on. */
  exec_sql(s, "UPDATE audit_head SET sig = NULL");
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_CONTAINS(r.problem, "not signed");
  store_close(s);
}

static void test_tail(void) {
  struct store *s = fresh("tail");
  struct err e = {0};
  for (int i = 0; i < 4; i++) add(s, NULL, i == 3 ? "last.tool" : "echo", "allow");
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  CHECK_INT(audit_tail(s, 2, 0, f, &e), 0);
  fclose(f);
  CHECK_CONTAINS(buf, "3 ");
  CHECK_CONTAINS(buf, "tool=last.tool");
  CHECK(strstr(buf, "\n1 ") == NULL && strncmp(buf, "1 ", 2) != 0);
  free(buf);
  f = open_memstream(&buf, &len);
  CHECK_INT(audit_tail(s, 10, 1, f, &e), 0);
  fclose(f);
  cJSON *j = cJSON_Parse(buf);
  CHECK(cJSON_IsArray(j));
  CHECK_INT(cJSON_GetArraySize(j), 4);
  CHECK_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 3), "tool")->valuestring, "last.tool");
  cJSON_Delete(j);
  free(buf);
  store_close(s);
}

static void test_two_connections(void) {
  /* Two connections (as two processes would) append alternately; the chain
   * stays one chain. */
  struct store *a = fresh("multi"), *b = fresh("multi");
  struct audit_report r;
  struct err e = {0};
  for (int i = 0; i < 6; i++) add(i % 2 ? a : b, NULL, "echo", "allow");
  CHECK_INT(audit_verify(a, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.rows, 6);
  CHECK_STR(r.problem, "");
  store_close(a);
  store_close(b);
}

static void test_batch(void) {
  struct store *s = fresh("batch");
  struct audit_report r;
  struct err e = {0};
  add(s, NULL, "first", "allow");
  struct audit_entry rows[3] = {
      {.tool = "a", .decision = "allow", .duration_ms = 1.5, .ts = 1000.25},
      {.tool = "b", .decision = "exec", .status = "ok", .duration_ms = -1},
      {.tool = "c", .decision = "deny", .detail = "no", .duration_ms = -1},
  };
  long long seq = 0;
  CHECK_INT(audit_append_batch(s, NULL, rows, 3, &seq, &e), 0);
  CHECK_INT(seq, 4);
  CHECK_INT(audit_append_batch(s, NULL, rows, 0, &seq, &e), 0);
  struct audit_entry bad = {.tool = "x"};
  CHECK_INT(audit_append_batch(s, NULL, &bad, 1, &seq, &e), ERR_INVALID);
  add(s, NULL, "last", "allow");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.rows, 5);
  CHECK_STR(r.problem, "");
  /* The given timestamp is kept (and hashed). */
  sqlite3_stmt *q;
  CHECK_INT(store_prepare(s, "SELECT ts FROM audit WHERE seq = 2", &q, &e), 0);
  CHECK_INT(sqlite3_step(q), SQLITE_ROW);
  CHECK(sqlite3_column_double(q, 0) == 1000.25);
  sqlite3_finalize(q);
  exec_sql(s, "UPDATE audit SET ts = 1000.5 WHERE seq = 2");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 2);
  store_close(s);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/luagent-test-audit-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_intact_and_edit();
  test_delete_reorder_truncate();
  test_signed_head();
  test_tail();
  test_two_connections();
  test_batch();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "cleanup failed\n");
  return TEST_END();
}
