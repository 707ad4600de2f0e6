/* test_daemon.c - the daemon's exported helpers: the event queue, the lock
 * probe and manual runs' argument errors. The scheduler itself is exercised
 * end to end by tests/e2e/daemon_*.sh with the real binary. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "store.h"
#include "test.h"

static char ws[] = "/tmp/luagent-test-daemon.XXXXXX";

static int queued(void) {
  struct store *st;
  struct err e;
  if (daemon_store_open(ws, &st, &e)) return -1;
  sqlite3_stmt *s;
  int n = -1;
  if (!store_prepare(st, "SELECT count(*) FROM event_queue", &s, &e)) {
    if (sqlite3_step(s) == SQLITE_ROW) n = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
  }
  store_close(st);
  return n;
}

static void test_emit(void) {
  struct err e;
  long long id = 0;
  CHECK_INT(daemon_emit(ws, "deploy.done", "{\"version\":\"1.2\"}", &id, &e), 0);
  CHECK(id > 0);
  long long id2 = 0;
  CHECK_INT(daemon_emit(ws, "ping", NULL, &id2, &e), 0);
  CHECK(id2 > id);
  CHECK_INT(queued(), 2);
  /* the wake file a running daemon watches */
  char p[256];
  snprintf(p, sizeof p, "%s/.luagent/wake", ws);
  struct stat st;
  CHECK_INT(stat(p, &st), 0);

  static const struct {
    const char *name, *payload, *want;
  } bad[] = {
      {"", NULL, "event name '' is invalid"},
      {"has space", NULL, "event name 'has space' is invalid"},
      {"x\ny", NULL, "is invalid"},
      {"ok", "{nope", "event payload is not valid JSON"},
      {"ok", "{\"a\":1,\"a\":2}", "event payload is not valid JSON: invalid JSON at byte 7: duplicate key \"a\""},
      {"ok", "[1]x", "event payload is not valid JSON: invalid JSON at byte 3: unexpected content after the value"},
      {NULL, NULL, "event name '' is invalid"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err_clear(&e);
    CHECK_INT(daemon_emit(ws, bad[i].name, bad[i].payload, NULL, &e), ERR_INVALID);
    CHECK_CONTAINS(e.msg, bad[i].want);
  }
  /* a valid JSON string over the 256 KiB payload cap */
  size_t n = 300 * 1024;
  char *big = malloc(n + 3);
  big[0] = '"';
  memset(big + 1, 'x', n);
  big[n + 1] = '"';
  big[n + 2] = 0;
  CHECK_INT(daemon_emit(ws, "big", big, NULL, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "larger than");
  free(big);
  CHECK_INT(queued(), 2);
}

static void test_running(void) {
  int pid = -1;
  CHECK_INT(daemon_running(ws, &pid), 0);
  CHECK_INT(daemon_running("/nonexistent/workspace", &pid), 0);
}

static void test_manual_errors(void) {
  struct err e;
  char *status, *result, *error;
  CHECK(daemon_run_manual(ws, "nosuch", NULL, -1, &status, &result, &error, &e) < 0);
  CHECK_CONTAINS(e.msg, "no automation 'nosuch' (automations/nosuch.lua not found)");
  CHECK(daemon_run_manual(ws, "../etc", NULL, -1, &status, &result, &error, &e) < 0);
  CHECK_CONTAINS(e.msg, "not a valid automation name");
  CHECK(status == NULL && result == NULL && error == NULL);
  char p[256];
  snprintf(p, sizeof p, "%s/automations", ws);
  mkdir(p, 0700);
  snprintf(p, sizeof p, "%s/automations/broken.lua", ws);
  FILE *f = fopen(p, "w");
  fputs("return {\n  every = 'soon',\n  run = function() end }\n", f);
  fclose(f);
  CHECK(daemon_run_manual(ws, "broken", NULL, -1, &status, &result, &error, &e) < 0);
  CHECK_CONTAINS(e.msg, "automations/broken.lua:2: every: bad duration 'soon'");
  CHECK(daemon_run_manual("/nonexistent/ws", "x", NULL, -1, &status, &result, &error, &e) < 0);
  CHECK_CONTAINS(e.msg, "workspace '/nonexistent/ws' not found");
}

int main(void) {
  if (!mkdtemp(ws)) return 1;
  test_emit();
  test_running();
  test_manual_errors();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", ws);
  if (system(cmd)) {
  }
  return TEST_END();
}
