/* testapi.c - the host half of the test API and the fakes (see
 * testrun_impl.h and harness.lua).
 *
 * Everything a test can observe is recorded here, under tf->mu: the tool
 * calls the pipeline saw (calls()), the run events (events()), the model
 * requests (model.requests()) and the escalations (approvals()). The fakes
 * sit at the edges of the real code paths: the pipeline, http_allow and the
 * secret checks run as always, and only the network transfer, the approver
 * and the model's answer come from the test.
 */
#include <dirent.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "automation.h"
#include "cron.h"
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

/* Sets the test's pending failure (the first one wins). */
static void set_pending(struct tfile *tf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_pending(struct tfile *tf, const char *fmt, ...) {
  if (tf->pending) return;
  va_list ap;
  va_start(ap, fmt);
  char tmp[2048];
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  tf->pending = xstrdup(tmp);
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

static double f_now(void *ud) {
  struct tfile *tf = ud;
  pthread_mutex_lock(&tf->mu);
  double t = tf->clock_fake ? tf->clock : util_now();
  pthread_mutex_unlock(&tf->mu);
  return t;
}

/* Calls harness.<fn>(arg) in the test's sandbox; *ret is its answer (NULL
 * for nil). Called with tf->mu held. */
static int call_harness(struct tfile *tf, const char *fn, const cJSON *arg, cJSON **ret,
                        struct err *e) {
  const char *const path[] = {fn, NULL};
  cJSON *args = cJSON_CreateArray();
  cJSON_AddItemToArray(args, cJSON_Duplicate(arg, 1));
  int rc = sandbox_callback(tf->sb, path, args, ret, e);
  cJSON_Delete(args);
  return rc;
}

static int f_http(void *ud, struct call_ctx *ctx, const cJSON *request, cJSON **response,
                  struct err *e) {
  struct tfile *tf = ud;
  (void)ctx;
  const char *method = cJSON_GetStringValue(cJSON_GetObjectItem(request, "method"));
  const char *url = cJSON_GetStringValue(cJSON_GetObjectItem(request, "url"));
  pthread_mutex_lock(&tf->mu);
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
  pthread_mutex_unlock(&tf->mu);
  cJSON_Delete(res);
  return rc;
}

static int f_approve(void *ud, struct call_ctx *ctx, const cJSON *request, cJSON **verdict,
                     struct err *e) {
  struct tfile *tf = ud;
  (void)ctx;
  pthread_mutex_lock(&tf->mu);
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
  pthread_mutex_lock(&tf->mu);
  cJSON *rq = request_json(req);
  record(tf->requests, cJSON_Duplicate(rq, 1));
  if (tf->model == TMODEL_SCRIPT) {
    const cJSON *t = NULL;
    if ((rc = llm_script_pick(tf->turns, "model.script", req, &t, e)) == 0)
      *turn = cJSON_Duplicate(t, 1);
    else
      set_pending(tf, "%s", e->msg);
  } else if (tf->model == TMODEL_FN) {
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
      *turn = t;
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
  pthread_mutex_unlock(&tf->mu);
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
  tf->fakes = (struct rt_fakes){.http = f_http, .approve = f_approve, .now = f_now,
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

static long long audit_max(struct tfile *tf) {
  struct store *st;
  struct err e = {0};
  long long n = 0;
  sec_flush(tf->rt->sec);
  if (runtime_store(tf->rt, &st, &e)) return 0;
  sqlite3_stmt *s = NULL;
  if (!store_prepare(st, "SELECT COALESCE(MAX(seq), 0) FROM audit", &s, &e) &&
      sqlite3_step(s) == SQLITE_ROW)
    n = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  return n;
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
  store_close(tf->rt->store);
  tf->rt->store = NULL;
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/data", tf->rt->workspace);
  testrun__remove_tree(dir);
  snprintf(dir, sizeof dir, "%s/.luagent", tf->rt->workspace);
  testrun__remove_tree(dir);
  tf->audit_base = audit_max(tf);
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

/* ------------------------------------------------------------- the clock */

/* A time argument: unix seconds or an ISO-8601 timestamp with a zone. */
static int time_arg(const cJSON *v, const char *what, double *t, struct err *e) {
  if (cJSON_IsNumber(v)) {
    *t = v->valuedouble;
    return 0;
  }
  if (cJSON_IsString(v)) {
    if (timestamp_parse(v->valuestring, t, e)) {
      err_prefix(e, "%s", what);
      return ERR_INVALID;
    }
    return 0;
  }
  return err_set(e, ERR_INVALID, "invalid_args",
                 "%s: expected unix seconds or a timestamp like \"2026-12-01T07:00:00Z\"", what);
}

/* fake.clock(t) -> t */
static int h_clock_set(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                       struct err *e) {
  struct tfile *tf = ud;
  (void)sb;
  double t;
  if (time_arg(cJSON_GetArrayItem(args, 0), "fake.clock", &t, e)) return ERR_INVALID;
  pthread_mutex_lock(&tf->mu);
  tf->clock_fake = 1;
  tf->clock = t;
  /* the schedules start over from the new time, as in a daemon started then */
  cJSON_Delete(tf->sched);
  tf->sched = cJSON_CreateObject();
  pthread_mutex_unlock(&tf->mu);
  *ret = cJSON_CreateNumber(t);
  return 0;
}

static int h_clock_now(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                       struct err *e) {
  (void)sb, (void)args, (void)e;
  *ret = cJSON_CreateNumber(f_now(ud));
  return 0;
}

/* --------------------------------------------------------- automations */

#define MAX_FIRES 1000

static int load_automation(struct tfile *tf, const char *name, const char *what,
                           struct automation **a, struct err *e) {
  if (!automation_name_valid(name))
    return err_set(e, ERR_INVALID, "invalid_args", "%s: '%s' is not an automation name", what, name);
  char path[PATH_MAX], chunk[128];
  snprintf(path, sizeof path, "%s/automations/%s.lua", tf->rt->workspace, name);
  snprintf(chunk, sizeof chunk, "automations/%s.lua", name);
  struct stat st;
  if (stat(path, &st) != 0)
    return err_set(e, ERR_NOTFOUND, "not_found", "%s: no automation '%s' (automations/%s.lua)", what,
                   name, name);
  if (automation_load_file(path, chunk, name, a, e)) {
    err_prefix(e, "%s", what);
    return ERR_INVALID;
  }
  return 0;
}

/* A trigger argument: a kind ("every", "event", ...) or a table; default
 * the manual trigger `luagent automations run` uses. */
static cJSON *trigger_of(const struct automation *a, const cJSON *v) {
  if (cJSON_IsObject(v)) {
    cJSON *t = cJSON_Duplicate(v, 1);
    if (!cJSON_GetObjectItem(t, "kind")) cJSON_AddStringToObject(t, "kind", "manual");
    if (!cJSON_GetObjectItem(t, "name")) {
      const char *k = cJSON_GetObjectItem(t, "kind")->valuestring;
      cJSON_AddStringToObject(t, "name", !k || !strcmp(k, "manual") ? "manual"
                                         : !strcmp(k, "event")     ? a->event
                                                                   : a->trigger_text);
    }
    return t;
  }
  const char *k = cJSON_IsString(v) ? v->valuestring : "manual";
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "kind", k);
  cJSON_AddStringToObject(t, "name", !strcmp(k, "manual") ? "manual"
                                     : !strcmp(k, "event") ? a->event
                                                           : a->trigger_text);
  return t;
}

/* Runs automation a once at time now, the way a daemon worker does, as
 * caller automation in a fresh sandbox; *out: {name, status, result, state,
 * error, code, calls, trigger, run_id, time}. opts: {trigger, args, state}. */
static int run_automation(struct tfile *tf, const struct automation *a, const cJSON *opts,
                          double now, cJSON *trigger, cJSON **out, struct err *e) {
  struct runtime *rt = tf->rt;
  const cJSON *oargs = cJSON_GetObjectItem(opts, "args");
  const cJSON *ostate = cJSON_GetObjectItem(opts, "state");
  if (oargs && !cJSON_IsObject(oargs) && !(cJSON_IsArray(oargs) && !oargs->child)) {
    cJSON_Delete(trigger);
    return err_set(e, ERR_INVALID, "invalid_args", "automation.run: opts.args must be a table");
  }
  pthread_mutex_lock(&tf->mu);
  const cJSON *saved = cJSON_GetObjectItem(tf->autos, a->name);
  cJSON *ctxj = cJSON_CreateObject();
  const cJSON *st0 = ostate ? ostate : cJSON_GetObjectItem(saved, "state");
  cJSON_AddItemToObject(ctxj, "state", cJSON_IsObject(st0) || cJSON_IsArray(st0)
                                           ? cJSON_Duplicate(st0, 1)
                                           : cJSON_CreateObject());
  /* whole seconds, as the daemon gives them (os.date("!%Y-%m-%d", ctx.now)) */
  now = floor(now);
  cJSON_AddNumberToObject(ctxj, "now", now);
  const cJSON *lr = cJSON_GetObjectItem(saved, "last_run");
  if (lr) cJSON_AddItemToObject(ctxj, "last_run", cJSON_Duplicate(lr, 1));
  int first_call = cJSON_GetArraySize(tf->calls);
  pthread_mutex_unlock(&tf->mu);

  struct call_ctx acx;
  call_ctx_init(&acx, rt, CALLER_AUTOMATION, a->name);
  runtime_new_run_id(acx.run_id);
  cJSON_AddStringToObject(ctxj, "run_id", acx.run_id);
  cJSON_AddItemToObject(ctxj, "trigger", cJSON_Duplicate(trigger, 1));
  cJSON_AddItemToObject(ctxj, "args", oargs ? cJSON_Duplicate(oargs, 1) : cJSON_CreateObject());
  if (a->timeout_s > 0) acx.limits.deadline_s = a->timeout_s;
  double at = util_monotonic() + acx.limits.deadline_s;
  if (tf->ctx.limits.deadline_at > 0 && tf->ctx.limits.deadline_at < at) at = tf->ctx.limits.deadline_at;
  acx.limits.deadline_at = at; /* never outlives the test */
  acx.events = &tf->sink;

  struct err re = {0};
  struct sandbox *asb = NULL;
  cJSON *ret = NULL, *after = NULL, *cargs = cJSON_CreateArray();
  cJSON_AddItemToArray(cargs, ctxj);
  const char *const path[] = {"run", NULL};
  int rc = runtime_sandbox(rt, &acx, &asb, &re);
  if (!rc) rc = sandbox_run_string(asb, a->source, a->source_len, a->chunk, NULL, &re);
  if (!rc) rc = sandbox_call(asb, path, cargs, &ret, &after, &re);
  sandbox_free(asb);
  sec_flush(rt->sec);

  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", a->name);
  cJSON_AddStringToObject(o, "run_id", acx.run_id);
  cJSON_AddNumberToObject(o, "time", now);
  cJSON_AddItemToObject(o, "trigger", trigger);
  const char *status = "ok";
  if (rc) status = strstr(re.code, "deadline") || strstr(re.code, "timeout") ? "timeout" : "failed";
  cJSON_AddStringToObject(o, "status", status);
  const cJSON *c0 = cJSON_GetArrayItem(after, 0);
  const cJSON *state = c0 ? cJSON_GetObjectItem(c0, "state") : NULL;
  if (rc) {
    cJSON_AddStringToObject(o, "error", re.msg);
    cJSON_AddStringToObject(o, "code", re.code);
  } else {
    if (ret) cJSON_AddItemToObject(o, "result", cJSON_Duplicate(ret, 1));
    if (state) cJSON_AddItemToObject(o, "state", cJSON_Duplicate(state, 1));
  }
  pthread_mutex_lock(&tf->mu);
  cJSON *calls = cJSON_CreateArray();
  for (int i = first_call; i < cJSON_GetArraySize(tf->calls); i++)
    cJSON_AddItemToArray(calls, cJSON_Duplicate(cJSON_GetArrayItem(tf->calls, i), 1));
  cJSON_AddItemToObject(o, "calls", calls);
  /* Like the daemon: a run that failed keeps the state it started from. */
  cJSON *rec = cJSON_CreateObject();
  const cJSON *keep = !rc ? state : cJSON_GetObjectItem(cJSON_GetArrayItem(cargs, 0), "state");
  cJSON_AddItemToObject(rec, "state", cJSON_IsObject(keep) || cJSON_IsArray(keep)
                                          ? cJSON_Duplicate(keep, 1)
                                          : cJSON_CreateObject());
  cJSON *lrn = cJSON_AddObjectToObject(rec, "last_run");
  cJSON_AddNumberToObject(lrn, "time", now);
  cJSON_AddStringToObject(lrn, "status", status);
  cJSON_DeleteItemFromObjectCaseSensitive(tf->autos, a->name);
  cJSON_AddItemToObject(tf->autos, a->name, rec);
  pthread_mutex_unlock(&tf->mu);
  cJSON_Delete(ret);
  cJSON_Delete(after);
  cJSON_Delete(cargs);
  *out = o;
  (void)e;
  return 0;
}

/* automation.run(name [, {trigger =, args =, state =}]) -> the run */
static int h_automation_run(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                            struct err *e) {
  struct tfile *tf = ud;
  (void)sb;
  const cJSON *name = cJSON_GetArrayItem(args, 0), *opts = cJSON_GetArrayItem(args, 1);
  if (!cJSON_IsString(name))
    return err_set(e, ERR_INVALID, "invalid_args", "automation.run: argument #1 must be a name");
  if (opts && !cJSON_IsNull(opts) && !cJSON_IsObject(opts) && !(cJSON_IsArray(opts) && !opts->child))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "automation.run: argument #2 must be a table { trigger =, args =, state = }");
  if (opts && !cJSON_IsObject(opts)) opts = NULL;
  static const char *const known[] = {"trigger", "args", "state", NULL};
  if (opts && config_check_keys(opts, "automation.run: opts", known, e)) return ERR_INVALID;
  struct automation *a = NULL;
  if (load_automation(tf, name->valuestring, "automation.run", &a, e)) return ERR_INVALID;
  cJSON *trig = trigger_of(a, cJSON_GetObjectItem(opts, "trigger"));
  int rc = run_automation(tf, a, opts, f_now(tf), trig, ret, e);
  automation_free(a);
  return rc;
}

struct fire {
  double at;
  struct automation *a;
};

static int fire_cmp(const void *x, const void *y) {
  const struct fire *p = x, *q = y;
  if (p->at != q->at) return p->at < q->at ? -1 : 1;
  return strcmp(p->a->name, q->a->name);
}

/* True when opts.only (a name or a list of names; absent: all) names a. */
static int only_has(const cJSON *only, const char *name) {
  if (!only) return 1;
  if (cJSON_IsString(only)) return !strcmp(only->valuestring, name);
  const cJSON *it;
  cJSON_ArrayForEach(it, only) {
    if (cJSON_IsString(it) && !strcmp(it->valuestring, name)) return 1;
  }
  return 0;
}

/* clock.advance(d [, {only = name(s)}]) -> the automation runs whose time
 * triggers fell due, in order ({name, time, status, result, state, calls,
 * ...}). */
static int h_clock_advance(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                           struct err *e) {
  struct tfile *tf = ud;
  (void)sb;
  const cJSON *d = cJSON_GetArrayItem(args, 0);
  double secs = 0;
  if (cJSON_IsNumber(d)) {
    secs = d->valuedouble;
  } else if (!cJSON_IsString(d) || duration_parse(d->valuestring, &secs, e)) {
    if (cJSON_IsString(d)) err_prefix(e, "clock.advance");
    else err_set(e, ERR_INVALID, "invalid_args", "clock.advance: expected seconds or a duration like \"15m\"");
    return ERR_INVALID;
  }
  const cJSON *opts = cJSON_GetArrayItem(args, 1), *only = NULL;
  if (cJSON_IsObject(opts)) {
    static const char *const known[] = {"only", NULL};
    if (config_check_keys(opts, "clock.advance: opts", known, e)) return ERR_INVALID;
    only = cJSON_GetObjectItem(opts, "only");
    if (only && !cJSON_IsString(only) && !cJSON_IsArray(only))
      return err_set(e, ERR_INVALID, "invalid_args", "clock.advance: opts.only must be a name or a list of names");
  } else if (opts && !cJSON_IsNull(opts) && !cJSON_IsArray(opts)) {
    return err_set(e, ERR_INVALID, "invalid_args", "clock.advance: argument #2 must be a table { only = ... }");
  }
  /* a misspelt name must not quietly run nothing */
  for (const cJSON *it = cJSON_IsArray(only) ? only->child : only; it;
       it = cJSON_IsArray(only) ? it->next : NULL) {
    char p[PATH_MAX];
    struct stat st;
    if (!cJSON_IsString(it))
      return err_set(e, ERR_INVALID, "invalid_args", "clock.advance: opts.only must hold names");
    snprintf(p, sizeof p, "%s/automations/%s.lua", tf->rt->workspace, it->valuestring);
    if (!automation_name_valid(it->valuestring) || stat(p, &st) != 0)
      return err_set(e, ERR_NOTFOUND, "not_found", "clock.advance: no automation '%s' (automations/%s.lua)",
                     it->valuestring, it->valuestring);
  }
  if (!(secs >= 0) || secs > 10 * 366 * 86400.0)
    return err_set(e, ERR_INVALID, "invalid_args", "clock.advance: %g s is not a duration it can move", secs);
  double start = f_now(tf), end = start + secs;
  /* Every automation file, as the daemon would load them. */
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/automations", tf->rt->workspace);
  struct automation **all = NULL;
  size_t nall = 0;
  struct fire *fires = NULL;
  size_t nf = 0;
  int rc = 0;
  DIR *dh = opendir(dir);
  struct dirent *de;
  while (dh && (de = readdir(dh))) {
    size_t n = strlen(de->d_name);
    if (de->d_name[0] == '.' || n < 5 || strcmp(de->d_name + n - 4, ".lua")) continue;
    char name[80];
    snprintf(name, sizeof name, "%.*s", (int)(n - 4), de->d_name);
    if (!only_has(only, name)) continue;
    struct automation *a = NULL;
    if ((rc = load_automation(tf, name, "clock.advance", &a, e))) break;
    all = xrealloc(all, (nall + 1) * sizeof *all);
    all[nall++] = a;
    if (!a->enabled) continue;
    pthread_mutex_lock(&tf->mu);
    const cJSON *nx = cJSON_GetObjectItem(tf->sched, a->name);
    double t = cJSON_IsNumber(nx) ? nx->valuedouble : automation_next_after(a, start);
    pthread_mutex_unlock(&tf->mu);
    for (; t > 0 && t <= end; t = automation_next_after(a, t)) {
      if (nf >= MAX_FIRES) {
        rc = err_set(e, ERR_LIMIT, "invalid_args",
                     "clock.advance: more than %d automation runs fall in %g s; advance in "
                     "smaller steps",
                     MAX_FIRES, secs);
        break;
      }
      fires = xrealloc(fires, (nf + 1) * sizeof *fires);
      fires[nf++] = (struct fire){t, a};
    }
    if (rc) break;
    pthread_mutex_lock(&tf->mu); /* where this schedule stands after end */
    cJSON_DeleteItemFromObjectCaseSensitive(tf->sched, a->name);
    cJSON_AddNumberToObject(tf->sched, a->name, t);
    pthread_mutex_unlock(&tf->mu);
  }
  if (dh) closedir(dh);
  cJSON *runs = cJSON_CreateArray();
  if (!rc) {
    if (nf) qsort(fires, nf, sizeof *fires, fire_cmp);
    for (size_t i = 0; i < nf && !rc; i++) {
      pthread_mutex_lock(&tf->mu);
      tf->clock_fake = 1;
      tf->clock = fires[i].at;
      pthread_mutex_unlock(&tf->mu);
      cJSON *trig = cJSON_CreateObject();
      cJSON_AddStringToObject(trig, "kind", automation_trig_name(fires[i].a->trig));
      cJSON_AddStringToObject(trig, "name", fires[i].a->trigger_text);
      cJSON_AddNumberToObject(trig, "slot", floor(fires[i].at));
      cJSON *run = NULL;
      rc = run_automation(tf, fires[i].a, NULL, fires[i].at, trig, &run, e);
      if (run) cJSON_AddItemToArray(runs, run);
    }
    pthread_mutex_lock(&tf->mu);
    tf->clock_fake = 1;
    tf->clock = end;
    pthread_mutex_unlock(&tf->mu);
  }
  for (size_t i = 0; i < nall; i++) automation_free(all[i]);
  free(all);
  free(fires);
  if (rc) {
    cJSON_Delete(runs);
    return rc;
  }
  *ret = runs;
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
      {"clock_set", h_clock_set},   {"clock_now", h_clock_now}, {"clock_advance", h_clock_advance},
      {"automation_run", h_automation_run},
  };
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
    if (sandbox_add_function(sb, "__test", fns[i].name, fns[i].fn, tf))
      return err_set(e, ERR_FAIL, "internal", "cannot install the test API (%s)", fns[i].name);
  return 0;
}
