/* testrun.h - `luagent test`: runs a workspace's *_test.lua files offline.
 *
 * Each test file runs against a fresh temporary copy of the workspace (its
 * luagent.lua, hooks, top-level files, skills/ and automations/; never its
 * data/ or .luagent/), so the tests get their own data/ and state database
 * and the user's are never touched. The file's tests share one sandbox
 * with the real skills, hooks and rules, plus the test API (harness.lua):
 * test/describe/expect, the scripted model, fake.http/approver/clock,
 * automation.run, calls()/audit()/events(). The model, http.request and the
 * approver are always the test's: a test never reaches the network. Each
 * test gets the timeout; a test that hits a limit is failed with it and
 * the file's remaining tests go on in a new sandbox.
 */
#ifndef LUAGENT_TESTRUN_H
#define LUAGENT_TESTRUN_H

#include <stddef.h>

#include "err.h"

struct test_result {
  const char *file;    /* the test file, workspace-relative ("tests/x_test.lua") */
  const char *name;    /* "describe > test"; "(file)" when the file failed to load */
  int passed;
  const char *message; /* the failure (may hold several lines: a diff); NULL on a pass */
  const char *where;   /* "file:line" the failure points at; NULL on a pass */
  const char *output;  /* what the code under test printed or logged ("" if nothing) */
  double seconds;
};

struct testrun_opts {
  const char *workspace;    /* the real workspace */
  const char *const *paths; /* files or folders (relative to the current folder); NULL/0: the
                               workspace's test_paths, default tests/ and skills/ */
  size_t npaths;
  const char *filter;       /* run only tests whose full name contains it (NULL: all) */
  double timeout_s;         /* per test; 0: the workspace's limits.deadline_s */
  /* Called for every test as it finishes (borrowed strings, valid during the call). */
  void (*on_result)(void *ud, const struct test_result *r);
  /* Called when a file starts (may be NULL). */
  void (*on_file)(void *ud, const char *file);
  void *ud;
  /* Set (from a signal handler) to stop: the running test is stopped, no
   * further test starts, and the temporary workspaces are removed. */
  volatile int *stop;
};

struct testrun_summary {
  int files;   /* test files run */
  int passed, failed;
  double seconds;
  int stopped; /* *opts.stop ended the run early */
};

/* Finds and runs the tests. Returns 0 when they ran (whatever they
 * found; see sum), <0 with e filled when they could not (no workspace, a
 * path that does not exist, no test files). */
int testrun_run(const struct testrun_opts *o, struct testrun_summary *sum, struct err *e);

#endif
