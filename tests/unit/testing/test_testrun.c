/* test_testrun.c - testrun_run through its C API: what each result says
 * (name, where, message), a file that does not load, the filter, the stop
 * flag, and that the real workspace is left as it was. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "testrun.h"
#include "util.h"

static char ws[256];

static void put(const char *rel, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", ws, rel);
  FILE *f = fopen(p, "w");
  fputs(text, f);
  fclose(f);
}

struct seen {
  int n;
  char names[16][128], wheres[16][128], msgs[16][512];
  int passed[16];
};

static void on_result(void *ud, const struct test_result *r) {
  struct seen *s = ud;
  if (s->n >= 16) return;
  snprintf(s->names[s->n], sizeof s->names[0], "%s", r->name);
  snprintf(s->wheres[s->n], sizeof s->wheres[0], "%s", r->where ? r->where : "");
  snprintf(s->msgs[s->n], sizeof s->msgs[0], "%s", r->message ? r->message : "");
  s->passed[s->n] = r->passed;
  s->n++;
}

static int run(const char *filter, volatile int *stop, struct seen *s, struct testrun_summary *sum,
               struct err *e) {
  memset(s, 0, sizeof *s);
  struct testrun_opts o = {.workspace = ws, .filter = filter, .timeout_s = 5,
                           .on_result = on_result, .ud = s, .stop = stop};
  return testrun_run(&o, sum, e);
}

int main(void) {
  snprintf(ws, sizeof ws, "/tmp/luagent-unit-testrun.XXXXXX");
  if (!mkdtemp(ws)) return 1;
  char p[512];
  snprintf(p, sizeof p, "%s/tests", ws);
  mkdir(p, 0700);
  put("luagent.lua", "return {}\n");
  struct seen s;
  struct testrun_summary sum;
  struct err e = {0};

  /* no test files: an error that says where it looked */
  CHECK_INT(run(NULL, NULL, &s, &sum, &e), ERR_NOTFOUND);
  CHECK_STR(e.code, "no_tests");

  put("tests/a_test.lua",
      "describe(\"outer\", function()\n"
      "  test(\"ok\", function() expect({1, 2}).to_equal({1, 2}) end)\n"
      "  test(\"bad\", function()\n"
      "    expect({ x = 1 }).to_equal({ x = 2 })\n"
      "  end)\n"
      "end)\n"
      "test(\"raises\", function() error({ code = \"boom\", message = \"no\" }) end)\n");
  put("tests/b_test.lua", "test(\"x\", function()\n");
  CHECK_INT(run(NULL, NULL, &s, &sum, &e), 0);
  CHECK_INT(sum.files, 2);
  CHECK_INT(sum.passed, 1);
  CHECK_INT(sum.failed, 3);
  CHECK_INT(s.n, 4);
  CHECK_STR(s.names[0], "outer > ok");
  CHECK(s.passed[0]);
  CHECK_STR(s.names[1], "outer > bad");
  CHECK_STR(s.wheres[1], "tests/a_test.lua:4");
  CHECK_CONTAINS(s.msgs[1], "at .x: expected 2, got 1");
  CHECK_STR(s.names[2], "raises");
  CHECK_STR(s.wheres[2], "tests/a_test.lua:7");
  CHECK_CONTAINS(s.msgs[2], "no [boom]");
  CHECK_STR(s.names[3], "(file)");
  CHECK_CONTAINS(s.wheres[3], "tests/b_test.lua:");
  CHECK_CONTAINS(s.msgs[3], "expected");

  /* the filter matches the full name */
  CHECK_INT(run("outer >", NULL, &s, &sum, &e), 0);
  CHECK_INT(sum.passed + sum.failed, 3); /* two in a_test.lua, plus b_test.lua's load failure */

  /* stop set: nothing more starts */
  volatile int stop = 1;
  CHECK_INT(run(NULL, &stop, &s, &sum, &e), 0);
  CHECK(sum.stopped);
  CHECK_INT(s.n, 0);

  /* the real workspace got no data/ and no .luagent/ */
  struct stat st;
  snprintf(p, sizeof p, "%s/data", ws);
  CHECK(stat(p, &st) != 0);
  snprintf(p, sizeof p, "%s/.luagent", ws);
  CHECK(stat(p, &st) != 0);

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", ws);
  if (system(cmd)) return 1;
  return TEST_END();
}
