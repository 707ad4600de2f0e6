/* testrun_impl.h - shared by testrun.c (files, sandboxes, results),
 * testapi.c (the fakes, the recorders, the scripted model) and testauto.c
 * (automation.run, the clock, ask). Not for other modules: they use
 * testrun.h. */
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

/* How deep callbacks into a test's Lua may nest (model.fn -> delegate ->
 * tools -> fake.http -> ...). */
#define TEST_MAX_NESTING 64

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
  /* Guards what the test records (everything below); held only for short
   * steps, never across a callback into the test's Lua. */
  pthread_mutex_t mu;
  /* Who runs the test's Lua now (testapi.c, own_push): a stack of the
   * threads with a callback running, innermost last. */
  pthread_mutex_t own_mu;
  pthread_cond_t own_cv;
  struct town {
    pthread_t th;
    int in_host; /* inside a host function (waiting in C) */
  } own[TEST_MAX_NESTING];
  int nown;
  char shown[512];          /* the file as messages name it: "tests/x_test.lua" */
  char template_db[4096];   /* an empty, migrated state.db each test starts from ("" if none) */
  int db_fresh;             /* rt->store is db_store, opened on a fresh copy of it */
  struct store *db_store;   /* to tell a test that wrote nothing (no reset needed) */
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
/* sb_host_hook for the test's sandbox (see own_push in testapi.c). */
int testapi__host_hook(void *tf, int enter, int token);
/* The test's clock: the fake one when set, else the real one (unix s). */
double testapi__now(void *tf);

/* testauto.c: host functions of `__test` (see harness.lua). */
int testauto__clock_set(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e);
int testauto__clock_now(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e);
int testauto__clock_advance(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                            struct err *e);
int testauto__automation_run(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                             struct err *e);
int testauto__ask(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e);

/* Removes dir and everything under it (never following links). */
void testrun__remove_tree(const char *dir);
/* Copies a regular file (at most 16 MiB). */
int testrun__copy_file(const char *from, const char *to, struct err *e);
/* Frees what testapi_* allocated in tf. */
void testapi_free(struct tfile *tf);

#endif
