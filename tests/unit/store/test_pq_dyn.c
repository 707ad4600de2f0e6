/* test_pq_dyn.c - libpq's functions reach libpq through the forwarders of
 * store/pq_dyn.c, which load it on the first call; no server needed: a
 * connection to a socket folder that does not exist fails with libpq's
 * own message, and the functions that need no connection (conninfo
 * parsing, bytea, status names) answer as libpq does. Without libpq (a
 * child told to load a file that is not there) every call fails as for a
 * missing connection and PQerrorMessage says which library, and why. */
#include <dlfcn.h>
#include <libpq-fe.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pq_dyn.h"
#include "test.h"

static int pq_in_process(void) {
  void *h = dlopen("libpq.so.5", RTLD_LAZY | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != NULL;
}

/* In a child: LUAGENT_LIBPQ names no file. Exit 0 when every check holds. */
static int child_without_libpq(void) {
  setenv("LUAGENT_LIBPQ", "/nonexistent/libpq.so.5", 1);
  int bad = 0;
  PGconn *c = PQconnectdb("host=/tmp");
  bad |= c != NULL;
  bad |= PQstatus(c) != CONNECTION_BAD;
  const char *m = PQerrorMessage(c);
  bad |= !m || !strstr(m, "libpq could not be loaded: /nonexistent/libpq.so.5");
  bad |= !strstr(m, "libpq5") || !strstr(m, "LUAGENT_LIBPQ");
  bad |= PQexec(c, "SELECT 1") != NULL;
  bad |= PQresultStatus(NULL) != PGRES_FATAL_ERROR;
  int err = 0;
  char to[8];
  bad |= PQescapeStringConn(c, to, "x", 1, &err) != 0 || err != 1;
  PQfinish(c); /* nothing to free, nothing loaded */
  struct err e = {0};
  bad |= pq_dyn_load(&e) != ERR_FAIL || !strstr(e.msg, "libpq could not be loaded");
  bad |= pq_in_process();
  return bad;
}

int main(void) {
  CHECK_INT(pq_in_process(), 0);
  pid_t pid = fork();
  if (pid == 0) _exit(child_without_libpq());
  int st = -1;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);

  CHECK(PQlibVersion() >= 100000);
  CHECK_INT(pq_in_process(), 1);
  struct err e = {0};
  CHECK_INT(pq_dyn_load(&e), 0);

  /* a server that is not there: libpq's own error, through the forwarders */
  PGconn *c = PQconnectdb("host=/nonexistent-luagent-socket-dir port=1 connect_timeout=2");
  CHECK(c != NULL);
  CHECK_INT(PQstatus(c), CONNECTION_BAD);
  CHECK_CONTAINS(PQerrorMessage(c), "/nonexistent-luagent-socket-dir");
  PQfinish(c);
  CHECK_INT(PQping("host=/nonexistent-luagent-socket-dir port=1"), PQPING_NO_RESPONSE);

  /* conninfo parsing: a good string, then a bad one with its message */
  char *errmsg = NULL;
  PQconninfoOption *o = PQconninfoParse("host=db.example port=5433 dbname=agents", &errmsg);
  CHECK(o != NULL);
  const char *db = NULL;
  for (PQconninfoOption *p = o; p && p->keyword; p++)
    if (!strcmp(p->keyword, "dbname")) db = p->val;
  CHECK_STR(db, "agents");
  PQconninfoFree(o);
  o = PQconninfoParse("nosuchkeyword=1", &errmsg);
  CHECK(o == NULL);
  CHECK_CONTAINS(errmsg, "nosuchkeyword");
  PQfreemem(errmsg);

  CHECK_STR(PQresStatus(PGRES_COMMAND_OK), "PGRES_COMMAND_OK");
  size_t n = 0;
  unsigned char *b = PQunescapeBytea((const unsigned char *)"\\x414243", &n);
  CHECK_INT(n, 3);
  CHECK(b && !memcmp(b, "ABC", 3));
  PQfreemem(b);
  return TEST_END();
}
