/* journal_fixture.h - the setup test_journal.c and test_writer.c share: a
 * scratch workspace, the run journal opened on it with its event sink, and
 * an event emitted from JSON text.
 *
 * Static functions in a header, included by each test after test.h: CMake
 * builds one executable per tests/unit/<layer>/test_*.c, and this file,
 * not named test_*.c, is none of them. */
#ifndef LUAGENT_TEST_JOURNAL_FIXTURE_H
#define LUAGENT_TEST_JOURNAL_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

#include "journal.h"
#include "test.h"

/* The scratch workspace (its state.db is the journal's), made by
 * fixture_start. */
static char dir[64];

/* Makes dir as /tmp/luagent-test-<name>-XXXXXX: 0, or -1 when it cannot. */
static int fixture_start(const char *name) {
  snprintf(dir, sizeof dir, "/tmp/luagent-test-%s-XXXXXX", name);
  return mkdtemp(dir) ? 0 : -1;
}

/* Removes dir and all in it. */
static void fixture_end(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "cleanup failed\n");
}

/* Opens the journal on dir (one check: that it opens) and points *s at it.
 * NULL when it did not open: the calling test has nothing to test then. */
static struct journal *fixture_journal(struct event_sink *s) {
  struct journal *j = NULL;
  struct err e = {0};
  CHECK_INT(journal_open(dir, &j, &e), 0);
  if (!j) {
    fprintf(stderr, "  journal_open(%s): %s\n", dir, e.msg);
    return NULL;
  }
  *s = (struct event_sink){0};
  journal_sink(j, s);
  return j;
}

/* Emits one event of run with json (NULL: no data) as its data. */
static void emit(struct event_sink *s, const char *run, const char *type, const char *json) {
  cJSON *d = json ? cJSON_Parse(json) : NULL;
  s->emit(s->ud, run, type, d);
  cJSON_Delete(d);
}

#endif
