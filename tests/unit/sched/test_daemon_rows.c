/* test_daemon_rows.c - the scheduler's per-run row updates by rowid
 * (daemon__step_row): the row is found by its cached rowid, a rowid not
 * known yet or renumbered (VACUUM may) is looked up again by key, and a
 * stale rowid that now names another row never changes that row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon_impl.h"
#include "test.h"

static char ws[] = "/tmp/luagent-test-rows.XXXXXX";

static long long q_int(struct daemon *d, const char *sql, const char *arg) {
  sqlite3_stmt *s;
  struct err e;
  if (store_prepare(d->st, sql, &s, &e)) return -1;
  if (arg) sqlite3_bind_text(s, 1, arg, -1, SQLITE_TRANSIENT);
  long long v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
  sqlite3_finalize(s);
  return v;
}

static const char *set_status =
    "UPDATE automations SET last_status = ?1 WHERE rowid = ?3 AND name = ?2";

/* last_status of `name` set to `status` through daemon__step_row. */
static int set(struct daemon *d, const char *name, const char *status, long long *rowid) {
  sqlite3_stmt *s = daemon__prep(d, set_status);
  if (!s) return -1;
  sqlite3_bind_text(s, 1, status, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
  return daemon__step_row(d, s, 3, rowid, DAEMON_AUTOMATION_ROWID, name, "test");
}

static int status_is(struct daemon *d, const char *name, const char *want) {
  char sql[160];
  snprintf(sql, sizeof sql, "SELECT last_status = '%s' FROM automations WHERE name = ?", want);
  return q_int(d, sql, name) == 1;
}

static void test_step_row(void) {
  struct daemon d;
  memset(&d, 0, sizeof d);
  d.lock_fd = d.lock_dir = -1; /* as daemon_init leaves them: no descriptor */
  struct err e;
  CHECK_INT(store_open(ws, &d.st, &e), 0);
  CHECK_INT(store_exec(d.st,
                       "INSERT INTO automations(name) VALUES ('gone'), ('a'), ('b');", &e),
            0);
  long long ra = 0, rb = 0;
  /* not known yet: looked up by name */
  CHECK_INT(set(&d, "a", "one", &ra), 0);
  CHECK_INT(sqlite3_changes(store_db(d.st)), 1);
  CHECK_INT(ra, q_int(&d, "SELECT rowid FROM automations WHERE name = ?", "a"));
  CHECK_INT(set(&d, "b", "one", &rb), 0);
  CHECK(status_is(&d, "a", "one") && status_is(&d, "b", "one"));
  /* known: found by rowid */
  CHECK_INT(set(&d, "a", "two", &ra), 0);
  CHECK_INT(sqlite3_changes(store_db(d.st)), 1);
  CHECK(status_is(&d, "a", "two") && status_is(&d, "b", "one"));
  /* renumbered rows (VACUUM may renumber a table without an INTEGER
   * PRIMARY KEY; here by hand): a's old rowid is now b's */
  long long old_a = ra;
  char sql[200];
  snprintf(sql, sizeof sql,
           "UPDATE automations SET rowid = 100 WHERE name = 'a';"
           "UPDATE automations SET rowid = %lld WHERE name = 'b';", old_a);
  CHECK_INT(store_exec(d.st, sql, &e), 0);
  CHECK_INT(q_int(&d, "SELECT rowid FROM automations WHERE name = ?", "b"), old_a);
  CHECK_INT(set(&d, "a", "three", &ra), 0);
  CHECK_INT(sqlite3_changes(store_db(d.st)), 1);
  CHECK(status_is(&d, "a", "three"));
  CHECK(status_is(&d, "b", "one")); /* b, under a's old rowid, untouched */
  CHECK_INT(ra, q_int(&d, "SELECT rowid FROM automations WHERE name = ?", "a"));
  CHECK(ra != old_a);
  /* no such row: nothing changes, and sqlite3_changes() says so */
  long long rn = 0;
  CHECK_INT(set(&d, "nobody", "x", &rn), 0);
  CHECK_INT(sqlite3_changes(store_db(d.st)), 0);
  CHECK_INT(rn, 0);
  CHECK_INT(q_int(&d, "SELECT count(*) FROM automations WHERE last_status = 'x'", NULL), 0);
  /* a statement that fails is reported as failed */
  CHECK(daemon__step_row(&d, NULL, 3, &ra, DAEMON_AUTOMATION_ROWID, "a", "test") < 0);
  for (int i = 0; i < d.nstmts; i++) sqlite3_finalize(d.stmts[i].st);
  store_close(d.st);
}

int main(void) {
  if (!mkdtemp(ws)) return 1;
  test_step_row();
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", ws);
  if (system(cmd)) {
  }
  return TEST_END();
}
