/* testapi.c - the host half of the test API: the fakes, what a test
 * records and the scripted model (testauto.c has the runs: automations,
 * the clock, ask). See testrun_impl.h and harness.lua.
 *
 * Everything a test can observe is recorded here, under tf->mu: the tool
 * calls the pipeline saw (calls()), the run events (events()), the model
 * requests (model.requests()) and the escalations (approvals()). The fakes
 * sit at the edges of the real code paths: the pipeline, http_allow and the
 * secret checks run as always, and only the network transfer, the approver
 * and the model's answer come from the test.
 */
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "llm.h"
#include "runtime.h"
#include "security.h"
#include "store.h"
#include "testrun_impl.h"
#include "util.h"

/* What one test may record; past this the oldest entries stay and new
 * ones are dropped (a runaway loop must not eat the runner's memory). */
#define MAX_RECORDS 20000

static void record(cJSON *list, cJSON *item) {
  if (cJSON_GetArraySize(list) >= MAX_RECORDS) {
    cJSON_Delete(item);
    return;
  }
  cJSON_AddItemToArray(list, item);
}

/* --------------------------------------------- who may run the test's Lua
 *
 * Callbacks into the test's sandbox (model.fn, fake.http, fake.approver)
 * come from whichever thread needs them: the test's own, or the threads of
 * parallel read-only tools. They run on top of the frame of the host
 * function that is waiting (sandbox_callback), so they must nest strictly:
 * one runs at a time, and a thread returns into the script only when
 * everything started above it has finished. tf->own is that stack. A
 * thread may start a callback when the stack is empty, when the top is its
 * own (recursion), or when the top thread is inside a host function (it
 * waits in C, for instance for the very tools that call back: model.fn ->
 * delegate() -> parallel tools -> fake.http). Otherwise it waits, at most
 * until the test's deadline. */

static int own_push(struct tfile *tf, struct err *e) {
  pthread_t self = pthread_self();
  double deadline = tf->ctx.limits.deadline_at;
  pthread_mutex_lock(&tf->own_mu);
  for (;;) {
    if (tf->nown == TEST_MAX_NESTING) {
      pthread_mutex_unlock(&tf->own_mu);
      return err_set(e, ERR_LIMIT, "limit_depth",
                     "callbacks into the test nest more than %d deep", TEST_MAX_NESTING);
    }
    const struct town *top = tf->nown ? &tf->own[tf->nown - 1] : NULL;
    if (!top || top->in_host || pthread_equal(top->th, self)) break;
    double left = deadline > 0 ? deadline - util_monotonic() : 1;
    if (left <= 0) {
      pthread_mutex_unlock(&tf->own_mu);
      return err_set(e, ERR_LIMIT, "limit_deadline",
                     "the test's Lua stayed busy until the test's deadline");
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double at = (double)ts.tv_sec + ts.tv_nsec / 1e9 + (left < 0.2 ? left : 0.2);
    ts.tv_sec = (time_t)at;
    ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&tf->own_cv, &tf->own_mu, &ts);
  }
  tf->own[tf->nown++] = (struct town){.th = self, .in_host = 0};
  pthread_mutex_unlock(&tf->own_mu);
  return 0;
}

static void own_pop(struct tfile *tf) {
  pthread_mutex_lock(&tf->own_mu);
  if (tf->nown > 0) tf->nown--;
  pthread_cond_broadcast(&tf->own_cv);
  pthread_mutex_unlock(&tf->own_mu);
}

int testapi__host_hook(void *ud, int enter, int token) {
  struct tfile *tf = ud;
  pthread_mutex_lock(&tf->own_mu);
  if (enter) {
    token = 0;
    /* The script on top is ours (else the test's own thread with no
     * callback running, which needs nothing here). */
    if (tf->nown && pthread_equal(tf->own[tf->nown - 1].th, pthread_self())) {
      tf->own[tf->nown - 1].in_host++;
      token = tf->nown;
    }
  } else if (token > 0) {
    /* Back into the script only once what started above has finished;
     * those callbacks end by themselves or at the test's deadline. */
    while (tf->nown > token) pthread_cond_wait(&tf->own_cv, &tf->own_mu);
    if (tf->nown == token) tf->own[token - 1].in_host--;
  }
  pthread_mutex_unlock(&tf->own_mu);
  return token;
}

/* Sets the test's pending failure (the first one wins), pointing at the
 * test's line that is waiting for the call (tools.call, delegate, ask).
 * Takes tf->mu: never called with it held. */
static void set_pending(struct tfile *tf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_pending(struct tfile *tf, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char tmp[2048], where[600] = "";
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  struct err oe = {0};
  if (own_push(tf, &oe) == 0) { /* the script's stack is read: be its only user */
    if (!sandbox_where(tf->sb, where, sizeof where)) where[0] = 0;
    own_pop(tf);
  }
  struct sbuf b = {0};
  if (where[0]) sbuf_printf(&b, "%s: ", where);
  sbuf_puts(&b, tmp);
  pthread_mutex_lock(&tf->mu);
  if (!tf->pending) tf->pending = sbuf_take(&b);
  pthread_mutex_unlock(&tf->mu);
  sbuf_free(&b);
}

static cJSON *caller_json(const struct call_ctx *ctx) {
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "kind", caller_kind_name(ctx->caller.kind));
  cJSON_AddStringToObject(c, "name", ctx->caller.name);
  return c;
}

/* ------------------------------------------------------------- the fakes */

static void f_observe(void *ud, struct call_ctx *ctx, const char *tool, const cJSON *args,
                      const char *decision, const char *decided_by, const char *status) {
  struct tfile *tf = ud;
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "tool", tool);
  cJSON_AddItemToObject(c, "args", args ? cJSON_Duplicate(args, 1) : cJSON_CreateObject());
  cJSON_AddStringToObject(c, "decision", decision);
  cJSON_AddStringToObject(c, "decided_by", decided_by ? decided_by : "");
  cJSON_AddStringToObject(c, "status", status);
  cJSON_AddItemToObject(c, "caller", caller_json(ctx));
  cJSON_AddStringToObject(c, "run_id", ctx->run_id);
  pthread_mutex_lock(&tf->mu);
  record(tf->calls, c);
  pthread_mutex_unlock(&tf->mu);
}

static void f_event(void *ud, const char *run_id, const char *type, const cJSON *data) {
  struct tfile *tf = ud;
  cJSON *ev = cJSON_CreateObject();
  cJSON_AddStringToObject(ev, "type", type);
  cJSON_AddStringToObject(ev, "run_id", run_id ? run_id : "");
  cJSON_AddItemToObject(ev, "data", data ? cJSON_Duplicate(data, 1) : cJSON_CreateObject());
  pthread_mutex_lock(&tf->mu);
  record(tf->events, ev);
  pthread_mutex_unlock(&tf->mu);
}

double testapi__now(void *ud) {
  struct tfile *tf = ud;
  pthread_mutex_lock(&tf->mu);
  double t = tf->clock_fake ? tf->clock : util_now();
  pthread_mutex_unlock(&tf->mu);
  return t;
}

/* Calls harness.<fn>(arg) in the test's sandbox; *ret is its answer (NULL
 * for nil). Called without tf->mu: the callback may call back into the
 * host (calls(), tools that record) from this and other threads. */
static int call_harness(struct tfile *tf, const char *fn, const cJSON *arg, cJSON **ret,
                        struct err *e) {
  const char *const path[] = {fn, NULL};
  int rc = own_push(tf, e);
  if (rc) return rc;
  cJSON *args = cJSON_CreateArray();
  cJSON_AddItemToArray(args, cJSON_Duplicate(arg, 1));
  rc = sandbox_callback(tf->sb, path, args, ret, e);
  cJSON_Delete(args);
  own_pop(tf);
  return rc;
}

static int f_http(void *ud, struct call_ctx *ctx, const cJSON *request, cJSON **response,
                  struct err *e) {
  struct tfile *tf = ud;
  (void)ctx;
  const char *method = cJSON_GetStringValue(cJSON_GetObjectItem(request, "method"));
  const char *url = cJSON_GetStringValue(cJSON_GetObjectItem(request, "url"));
  struct err ce = {0};
  cJSON *res = NULL;
  int rc = call_harness(tf, "http", request, &res, &ce);
  if (rc) {
    set_pending(tf, "fake.http: %s %s: %s", method, url, ce.msg);
    rc = err_set(e, ERR_FAIL, "http_error", "http.request: %s %s: the test's fake.http failed: %s",
                 method, url, ce.msg);
  } else if (!cJSON_IsObject(res)) {
    set_pending(tf, "unmatched request %s %s: no fake.http entry answers it (a test never "
                "reaches the network)", method, url);
    rc = err_set(e, ERR_DENIED, "fake_unmatched",
                 "http.request: %s %s: no fake.http entry answers this request (a test never "
                 "reaches the network)",
                 method, url);
  } else {
    *response = res;
    res = NULL;
  }
  cJSON_Delete(res);
  return rc;
}

static int f_approve(void *ud, struct call_ctx *ctx, const cJSON *request, cJSON **verdict,
                     struct err *e) {
  struct tfile *tf = ud;
  (void)ctx;
  struct err ce = {0};
  cJSON *v = NULL;
  int rc = call_harness(tf, "approve", request, &v, &ce);
  const char *tool = cJSON_GetStringValue(cJSON_GetObjectItem(request, "tool"));
  cJSON *rec = cJSON_Duplicate(request, 1);
  if (rc || !cJSON_IsObject(v)) {
    set_pending(tf, "fake.approver: %s: %s", tool, rc ? ce.msg : "gave no decision");
    cJSON_AddStringToObject(rec, "decision", "error");
    rc = err_set(e, ERR_FAIL, "denied", "the test's fake.approver failed: %s",
                 rc ? ce.msg : "no decision");
  } else {
    const cJSON *d = cJSON_GetObjectItem(v, "decision");
    cJSON_AddStringToObject(rec, "decision", cJSON_IsString(d) ? d->valuestring : "deny");
    const cJSON *why = cJSON_GetObjectItem(v, "reason");
    if (cJSON_IsString(why)) cJSON_AddStringToObject(rec, "decision_reason", why->valuestring);
    *verdict = v;
    v = NULL;
  }
  pthread_mutex_lock(&tf->mu);
  record(tf->approvals, rec);
  pthread_mutex_unlock(&tf->mu);
  cJSON_Delete(v);
  return rc;
}

/* ----------------------------------------------------- the scripted model */

static cJSON *request_json(const struct llm_request *req) {
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "system", req->system ? req->system : "");
  cJSON_AddItemToObject(r, "messages",
                        req->messages ? cJSON_Duplicate(req->messages, 1) : cJSON_CreateArray());
  cJSON_AddItemToObject(r, "tools", req->tools ? cJSON_Duplicate(req->tools, 1) : cJSON_CreateArray());
  return r;
}

/* llm_script_fn: every model call of the test comes here. */
static int f_model_turn(void *ud, const struct llm_request *req, cJSON **turn, struct err *e) {
  struct tfile *tf = ud;
  int rc = 0;
  cJSON *rq = request_json(req);
  pthread_mutex_lock(&tf->mu);
  record(tf->requests, cJSON_Duplicate(rq, 1));
  enum tmodel model = tf->model;
  cJSON *turns = model == TMODEL_SCRIPT ? cJSON_Duplicate(tf->turns, 1) : NULL;
  pthread_mutex_unlock(&tf->mu);
  /* No lock is held from here on: model.fn may run a whole loop (delegate)
   * whose tools call back from other threads. */
  if (model == TMODEL_SCRIPT) {
    const cJSON *t = NULL;
    if ((rc = llm_script_pick(turns, "model.script", req, &t, e)) == 0)
      *turn = cJSON_Duplicate(t, 1);
    else
      set_pending(tf, "%s", e->msg);
  } else if (model == TMODEL_FN) {
    struct err ce = {0};
    cJSON *t = NULL;
    if (call_harness(tf, "model_turn", rq, &t, &ce)) {
      set_pending(tf, "model.fn: %s", ce.msg);
      rc = err_set(e, ERR_FAIL, "provider_error", "model.fn: %s", ce.msg);
    } else if (!cJSON_IsObject(t)) {
      cJSON_Delete(t);
      set_pending(tf, "model.fn returned no turn (return { text = \"...\" } or a tool call)");
      rc = err_set(e, ERR_FAIL, "provider_error", "model.fn returned no turn");
    } else {
      /* the provider's own check of a turn; a bad one is the test's mistake */
      cJSON *one = cJSON_CreateArray();
      cJSON_AddItemToArray(one, cJSON_Duplicate(t, 1));
      struct llm_client *c = NULL;
      if (llm_client_scripted(one, NULL, NULL, &c, &ce)) {
        set_pending(tf, "model.fn returned a bad turn: %s", ce.msg);
        rc = err_set(e, ERR_FAIL, "provider_error", "model.fn returned a bad turn: %s", ce.msg);
        cJSON_Delete(t);
      } else {
        *turn = t;
      }
      llm_client_free(c);
      cJSON_Delete(one);
    }
  } else {
    set_pending(tf, "the model was called, and outside a test it would have reached the "
                "provider in luagent.lua: give the test a model with model.script { ... } or "
                "model.fn(function(request) ... end) (a test never reaches a real provider)");
    rc = err_set(e, ERR_DENIED, "provider_error",
                 "a test never reaches a real provider, and this test set no model "
                 "(model.script or model.fn)");
  }
  cJSON_Delete(rq);
  cJSON_Delete(turns);
  return rc;
}

/* rt->llm_fn: delegate(), ask and the loop get the test's model. With
 * none set, a workspace without providers fails as it would outside a
 * test (no_provider: code that handles that can be tested); one with
 * providers gets a model that refuses every call and fails the test. */
static int f_llm(struct runtime *rt, struct llm_client **out, struct err *e) {
  struct tfile *tf = rt->fakes->ud;
  pthread_mutex_lock(&tf->mu);
  int none = tf->model == TMODEL_NONE;
  pthread_mutex_unlock(&tf->mu);
  if (none) {
    struct llm_client *real = NULL;
    int rc = llm_client_new(rt->cfg, &real, e); /* only looks at the config: no request */
    llm_client_free(real);
    if (rc == ERR_NOTFOUND) return rc;
    err_clear(e);
  }
  return llm_client_scripted(NULL, f_model_turn, tf, out, e);
}

/* Print and log lines of the code under test are kept with the test's
 * result (shown with a failure, or with -v), never mixed into the
 * runner's own output. */
static void t_output(void *ud, const char *stream, const char *text, size_t len) {
  struct tfile *tf = ud;
  pthread_mutex_lock(&tf->mu);
  struct sbuf *b = &tf->output;
  if (b->len < TEST_MAX_OUTPUT) {
    if (len > TEST_MAX_OUTPUT - b->len) len = TEST_MAX_OUTPUT - b->len;
    if (strcmp(stream, "print")) sbuf_printf(b, "[%s] ", stream);
    sbuf_append(b, text, len);
    sbuf_puts(b, "\n");
    if (b->len >= TEST_MAX_OUTPUT) sbuf_puts(b, "[output cut]\n");
  }
  pthread_mutex_unlock(&tf->mu);
}

void testapi_wire(struct tfile *tf) {
  tf->fakes = (struct rt_fakes){.http = f_http, .approve = f_approve, .now = testapi__now,
                                .observe = f_observe, .ud = tf};
  tf->rt->fakes = &tf->fakes;
  tf->rt->llm_fn = f_llm;
  tf->rt->out = (struct sb_output){.write = t_output, .ud = tf};
  tf->sink = (struct event_sink){.emit = f_event, .ud = tf};
  if (!tf->calls) {
    tf->calls = cJSON_CreateArray();
    tf->events = cJSON_CreateArray();
    tf->requests = cJSON_CreateArray();
    tf->approvals = cJSON_CreateArray();
    tf->autos = cJSON_CreateObject();
    tf->sched = cJSON_CreateObject();
  }
}

void testapi_reset(struct tfile *tf) {
  pthread_mutex_lock(&tf->mu);
  cJSON *lists[] = {tf->calls, tf->events, tf->requests, tf->approvals};
  for (size_t i = 0; i < 4; i++)
    while (cJSON_GetArraySize(lists[i])) cJSON_DeleteItemFromArray(lists[i], 0);
  free(tf->pending);
  tf->pending = NULL;
  tf->model = TMODEL_NONE;
  cJSON_Delete(tf->turns);
  tf->turns = NULL;
  tf->clock_fake = 0;
  cJSON_Delete(tf->autos);
  tf->autos = cJSON_CreateObject();
  cJSON_Delete(tf->sched);
  tf->sched = cJSON_CreateObject();
  pthread_mutex_unlock(&tf->mu);
  /* Every test starts with an empty data/ and a new state database (memory,
   * audit chain, approvals): what one test wrote never leaks into the next. */
  sec_flush(tf->rt->sec);
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/data", tf->rt->workspace);
  testrun__remove_tree(dir);
  tf->audit_base = 0;
  /* Everything that writes state goes through rt->store (events are
   * recorded by the test's sink, not the journal): if the last test wrote
   * nothing through it, from any thread (parallel tools have connections
   * of their own), it still holds the empty copy. */
  if (tf->db_fresh && tf->rt->store == tf->db_store && store_total_changes(tf->rt->store) == 0)
    return;
  store_close(tf->rt->store);
  tf->rt->store = tf->db_store = NULL;
  tf->db_fresh = 0;
  snprintf(dir, sizeof dir, "%s/.luagent", tf->rt->workspace);
  testrun__remove_tree(dir);
  if (tf->template_db[0] && mkdir(dir, 0700) == 0) {
    char db[PATH_MAX + 32];
    struct err e = {0};
    snprintf(db, sizeof db, "%s/state.db", dir);
    if (testrun__copy_file(tf->template_db, db, &e)) {
      unlink(db); /* then made when first used */
    } else if (!store_open_shared(tf->rt->workspace, &tf->db_store, &e)) {
      /* a test's database is thrown away after it: no fsync is worth it */
      store_exec(tf->db_store, "PRAGMA synchronous=OFF", &e);
      tf->rt->store = tf->db_store;
      tf->db_fresh = 1;
    }
  }
}

void testapi_free(struct tfile *tf) {
  cJSON_Delete(tf->calls);
  cJSON_Delete(tf->events);
  cJSON_Delete(tf->requests);
  cJSON_Delete(tf->approvals);
  cJSON_Delete(tf->turns);
  cJSON_Delete(tf->autos);
  cJSON_Delete(tf->sched);
  free(tf->pending);
  sbuf_free(&tf->output);
  tf->calls = tf->events = tf->requests = tf->approvals = tf->turns = tf->autos = tf->sched = NULL;
  tf->pending = NULL;
}

/* ------------------------------------------------------ host functions */

/* __test.reset() [-0, +0, -] */
static int h_reset(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)sb, (void)args, (void)ret, (void)e;
  testapi_reset(ud);
  return 0;
}

/* __test.pending() -> the fakes' failure message or nil, cleared. */
static int h_pending(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  struct tfile *tf = ud;
  (void)sb, (void)args, (void)e;
  pthread_mutex_lock(&tf->mu);
  if (tf->pending) *ret = cJSON_CreateString(tf->pending);
  free(tf->pending);
  tf->pending = NULL;
  pthread_mutex_unlock(&tf->mu);
  return 0;
}

/* model.script(turns) [-1, +0, e] */
static int h_model_script(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                          struct err *e) {
  struct tfile *tf = ud;
  (void)sb, (void)ret;
  const cJSON *turns = cJSON_GetArrayItem(args, 0);
  if (!cJSON_IsArray(turns) && !(cJSON_IsObject(turns) && !turns->child))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "model.script: expected a list of turns, e.g. { { text = \"done\" } }");
  cJSON *list = cJSON_IsArray(turns) ? cJSON_Duplicate(turns, 1) : cJSON_CreateArray();
  struct llm_client *c = NULL;
  int rc = llm_client_scripted(list, NULL, NULL, &c, e); /* the provider's own checks */
  llm_client_free(c);
  if (rc) {
    cJSON_Delete(list);
    err_prefix(e, "model.script");
    return rc;
  }
  pthread_mutex_lock(&tf->mu);
  cJSON_Delete(tf->turns);
  tf->turns = list;
  tf->model = TMODEL_SCRIPT;
  pthread_mutex_unlock(&tf->mu);
  return 0;
}

/* __test.model_fn(): the harness holds the function. */
static int h_model_fn(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  struct tfile *tf = ud;
  (void)sb, (void)args, (void)ret, (void)e;
  pthread_mutex_lock(&tf->mu);
  tf->model = TMODEL_FN;
  pthread_mutex_unlock(&tf->mu);
  return 0;
}

/* A copy of list, only the items whose field `key` matches the glob pat
 * (args[0], may be absent). */
static int filtered(struct tfile *tf, cJSON *list, const char *key, const cJSON *args, cJSON **ret,
                    const char *what, struct err *e) {
  const cJSON *pat = cJSON_GetArrayItem(args, 0);
  if (pat && !cJSON_IsNull(pat) && !cJSON_IsString(pat))
    return err_set(e, ERR_INVALID, "invalid_args", "%s: the filter must be a string such as \"fs.*\"",
                   what);
  pthread_mutex_lock(&tf->mu);
  cJSON *out = cJSON_CreateArray();
  const cJSON *it;
  cJSON_ArrayForEach(it, list) {
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(it, key));
    if (cJSON_IsString(pat) && (!v || fnmatch(pat->valuestring, v, 0) != 0)) continue;
    cJSON_AddItemToArray(out, cJSON_Duplicate(it, 1));
  }
  pthread_mutex_unlock(&tf->mu);
  *ret = out;
  return 0;
}

/* calls([pattern]) -> { {tool, args, decision, decided_by, status, caller, run_id}, ... } */
static int h_calls(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  struct tfile *tf = ud;
  (void)sb;
  return filtered(tf, tf->calls, "tool", args, ret, "calls", e);
}

/* events([type]) -> { {type, run_id, data}, ... } */
static int h_events(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  struct tfile *tf = ud;
  (void)sb;
  return filtered(tf, tf->events, "type", args, ret, "events", e);
}

/* approvals([tool]) -> the escalations the fake approver decided. */
static int h_approvals(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                       struct err *e) {
  struct tfile *tf = ud;
  (void)sb;
  return filtered(tf, tf->approvals, "tool", args, ret, "approvals", e);
}

/* model.requests() -> { {system, messages, tools}, ... } */
static int h_requests(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                      struct err *e) {
  struct tfile *tf = ud;
  (void)sb, (void)args, (void)e;
  pthread_mutex_lock(&tf->mu);
  *ret = cJSON_Duplicate(tf->requests, 1);
  pthread_mutex_unlock(&tf->mu);
  return 0;
}

/* audit() -> the audit rows written since the test began. */
static int h_audit(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  struct tfile *tf = ud;
  (void)sb, (void)args;
  sec_flush(tf->rt->sec);
  struct store *st;
  if (runtime_store(tf->rt, &st, e)) return ERR_IO;
  sqlite3_stmt *s = NULL;
  if (store_prepare(st,
                    "SELECT seq, ts, run_id, caller_kind, caller_name, tool, decision, "
                    "decided_by, approver, status, detail FROM audit WHERE seq > ? ORDER BY seq",
                    &s, e))
    return ERR_IO;
  sqlite3_bind_int64(s, 1, tf->audit_base);
  static const char *const cols[] = {"seq",  "ts",       "run_id",   "caller_kind",
                                     "caller_name", "tool", "decision", "decided_by",
                                     "approver", "status", "detail"};
  cJSON *out = cJSON_CreateArray();
  while (sqlite3_step(s) == SQLITE_ROW) {
    cJSON *row = cJSON_CreateObject();
    for (int i = 0; i < 11; i++) {
      int t = sqlite3_column_type(s, i);
      if (t == SQLITE_NULL) continue;
      if (t == SQLITE_INTEGER) cJSON_AddNumberToObject(row, cols[i], (double)sqlite3_column_int64(s, i));
      else if (t == SQLITE_FLOAT) cJSON_AddNumberToObject(row, cols[i], sqlite3_column_double(s, i));
      else cJSON_AddStringToObject(row, cols[i], (const char *)sqlite3_column_text(s, i));
    }
    cJSON_AddItemToArray(out, row);
  }
  sqlite3_finalize(s);
  *ret = out;
  return 0;
}

int testapi_install(struct tfile *tf, struct sandbox *sb, struct err *e) {
  static const struct {
    const char *name;
    sb_hostfn fn;
  } fns[] = {
      {"reset", h_reset},           {"pending", h_pending},     {"model_script", h_model_script},
      {"model_fn", h_model_fn},     {"requests", h_requests},   {"calls", h_calls},
      {"events", h_events},         {"approvals", h_approvals}, {"audit", h_audit},
      {"clock_set", testauto__clock_set},   {"clock_now", testauto__clock_now},
      {"clock_advance", testauto__clock_advance}, {"automation_run", testauto__automation_run},
      {"ask", testauto__ask},
  };
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
    if (sandbox_add_function(sb, "__test", fns[i].name, fns[i].fn, tf))
      return err_set(e, ERR_FAIL, "internal", "cannot install the test API (%s)", fns[i].name);
  return 0;
}
