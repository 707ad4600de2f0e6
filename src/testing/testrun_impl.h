/* testrun_impl.h - shared by testrun.c (files, sandboxes, results) and
 * testapi.c (the test API's host half and the fakes). Not for other
 * modules: they use testrun.h. */
#ifndef LUAGENT_TESTRUN_IMPL_H
#define LUAGENT_TESTRUN_IMPL_H

#include <cjson/cJSON.h>
#include <pthread.h>

#include "call.h"
#include "events.h"
#include "sandbox.h"
#include "util.h"

/* print/log output kept per test; past this it is cut. */
#define TEST_MAX_OUTPUT ((size_t)64 << 10)

enum tmodel { TMODEL_NONE, TMODEL_SCRIPT, TMODEL_FN };

/* One test file's world: a temporary copy of the workspace, its runtime
 * and the sandbox the file's tests run in, plus what the current test has
 * recorded. */
struct tfile {
  struct runtime *rt;       /* opened on the temporary workspace */
  struct sandbox *sb;       /* the test file's sandbox (the harness is its module) */
  struct call_ctx ctx;      /* the test code's caller: script, named by the file */
  struct rt_fakes fakes;    /* rt->fakes points here */
  struct event_sink sink;   /* records events() */
  /* Recursive: a callback into the test (model.fn) may call tools that
   * call back again (http.request -> fake.http); parallel tool threads
   * take turns. Guards everything below. */
  pthread_mutex_t mu;
  char shown[512];          /* the file as messages name it: "tests/x_test.lua" */
  /* per test (testapi_reset) */
  cJSON *calls, *events, *requests, *approvals;
  char *pending;            /* a failure the fakes saw (unmatched request, no model) */
  struct sbuf output;       /* print/log of the code under test, shown with a failure */
  enum tmodel model;
  cJSON *turns;             /* TMODEL_SCRIPT */
  int clock_fake;
  double clock;             /* unix seconds, when clock_fake */
  cJSON *autos;             /* automation name -> { state, last_run } */
  cJSON *sched;             /* automation name -> next fire time on the fake clock */
  long long audit_base;     /* audit rows after this seq belong to the test */
};

/* Installs the host library `__test` (used by the harness) into sb and
 * points tf->rt's fakes and model at tf. */
int testapi_install(struct tfile *tf, struct sandbox *sb, struct err *e);
/* Hooks tf->rt up to tf: fakes, the scripted model, the event sink. */
void testapi_wire(struct tfile *tf);
/* Clears what one test recorded (calls, events, model, clock, ...). */
void testapi_reset(struct tfile *tf);
/* Removes dir and everything under it (never following links). */
void testrun__remove_tree(const char *dir);
/* Frees what testapi_* allocated in tf. */
void testapi_free(struct tfile *tf);

#endif
