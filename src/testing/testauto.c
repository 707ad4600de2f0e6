/* testauto.c - the test API's runs: automation.run, the fake clock and
 * clock.advance (the time triggers that fall due), and ask() (the ReAct
 * loop as `luagent ask` runs it). See testrun_impl.h and harness.lua. */
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
#include "react.h"
#include "runtime.h"
#include "security.h"
#include "testrun_impl.h"
#include "util.h"

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
int testauto__clock_set(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
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

int testauto__clock_now(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                       struct err *e) {
  (void)sb, (void)args, (void)e;
  *ret = cJSON_CreateNumber(testapi__now(ud));
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
  /* a tainted event: the run starts where its sender left off (as in the daemon) */
  if (cJSON_IsTrue(cJSON_GetObjectItem(trigger, "tainted"))) call_ctx_taint(&acx);

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
int testauto__automation_run(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
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
  int rc = run_automation(tf, a, opts, testapi__now(tf), trig, ret, e);
  automation_free(a);
  return rc;
}

/* Delivers the queued events (events.emit) the way the daemon does, oldest
 * first: each event runs every enabled `on` automation in all whose
 * pattern matches its name (none: it is dropped), at time now. Runs go to
 * runs; *left bounds them (runs can queue further events). */
static int deliver_events(struct tfile *tf, struct automation **all, size_t nall, double now,
                          cJSON *runs, int *left, struct err *e) {
  struct store *st;
  if (runtime_store(tf->rt, &st, e)) return ERR_IO;
  for (;;) {
    sqlite3_stmt *s = NULL;
    if (store_prepare(st, "SELECT id, name, payload, tainted FROM event_queue ORDER BY id LIMIT 1", &s, e))
      return ERR_IO;
    if (sqlite3_step(s) != SQLITE_ROW) {
      sqlite3_finalize(s);
      return 0;
    }
    long long id = sqlite3_column_int64(s, 0);
    char *name = xstrdup((const char *)sqlite3_column_text(s, 1));
    const char *ptxt = (const char *)sqlite3_column_text(s, 2);
    cJSON *payload = ptxt ? json_parse_str(ptxt, 0, NULL) : NULL;
    int tainted = sqlite3_column_int(s, 3);
    sqlite3_finalize(s);
    char del[80];
    snprintf(del, sizeof del, "DELETE FROM event_queue WHERE id = %lld", id);
    int rc = store_exec(st, del, e);
    for (size_t i = 0; i < nall && !rc; i++) {
      const struct automation *a = all[i];
      if (!a->enabled || a->trig != TRIG_EVENT || fnmatch(a->event, name, 0) != 0) continue;
      if (--*left < 0) {
        rc = err_set(e, ERR_LIMIT, "invalid_args",
                     "clock.advance: more than %d automation runs (do events keep queueing events?)",
                     MAX_FIRES);
        break;
      }
      cJSON *trig = cJSON_CreateObject();
      cJSON_AddStringToObject(trig, "kind", "event");
      cJSON_AddStringToObject(trig, "name", name);
      cJSON_AddItemToObject(trig, "payload", payload ? cJSON_Duplicate(payload, 1) : cJSON_CreateNull());
      cJSON_AddNumberToObject(trig, "event_id", (double)id);
      if (tainted) cJSON_AddTrueToObject(trig, "tainted");
      cJSON *run = NULL;
      rc = run_automation(tf, a, NULL, now, trig, &run, e);
      if (run) cJSON_AddItemToArray(runs, run);
    }
    free(name);
    cJSON_Delete(payload);
    if (rc) return rc;
  }
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
int testauto__clock_advance(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
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
  double start = testapi__now(tf), end = start + secs;
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
  int left = MAX_FIRES; /* event runs, which can queue more events */
  if (!rc) rc = deliver_events(tf, all, nall, start, runs, &left, e);
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
      if (!rc) rc = deliver_events(tf, all, nall, fires[i].at, runs, &left, e);
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

/* ask(message [, {tools = {...}}]) -> {answer, status, error, code,
 * iterations, model_calls, tool_calls}: the ReAct loop as `luagent ask`
 * runs it (the operator's message, skill selection, the selected skills'
 * tools), with the test's model. A failed run is a status, not an error. */
int testauto__ask(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  struct tfile *tf = ud;
  (void)sb;
  const cJSON *msg = cJSON_GetArrayItem(args, 0), *opts = cJSON_GetArrayItem(args, 1);
  if (!cJSON_IsString(msg) || !*msg->valuestring)
    return err_set(e, ERR_INVALID, "invalid_args", "ask: argument #1 must be a message");
  const cJSON *tools = NULL;
  if (cJSON_IsObject(opts)) {
    static const char *const known[] = {"tools", NULL};
    if (config_check_keys(opts, "ask: opts", known, e)) return ERR_INVALID;
    tools = cJSON_GetObjectItem(opts, "tools");
    const cJSON *it;
    int bad = tools && !cJSON_IsArray(tools);
    cJSON_ArrayForEach(it, tools) bad |= !cJSON_IsString(it);
    if (bad) return err_set(e, ERR_INVALID, "invalid_args", "ask: opts.tools must be a list of tool names or patterns");
  } else if (opts && !cJSON_IsNull(opts) && !(cJSON_IsArray(opts) && !opts->child)) {
    return err_set(e, ERR_INVALID, "invalid_args", "ask: argument #2 must be a table { tools = ... }");
  }
  struct runtime *rt = tf->rt;
  struct react_opts ro = {.message = msg->valuestring, .kind = "ask", .tool_patterns = tools};
  if (react_limits_load(rt->cfg, &ro.limits, e)) return ERR_INVALID;
  double left = tf->ctx.limits.deadline_at - util_monotonic(); /* never outlives the test */
  if (left < 0.001) left = 0.001;
  if (ro.limits.deadline_s <= 0 || left < ro.limits.deadline_s) ro.limits.deadline_s = left;
  struct llm_client *llm = NULL;
  int rc = llm_client_for(rt, &llm, e);
  if (rc) return rc;
  struct call_ctx actx;
  call_ctx_init(&actx, rt, CALLER_OPERATOR, "ask");
  actx.events = &tf->sink;
  actx.stop = tf->ctx.stop;
  actx.limits.deadline_at = tf->ctx.limits.deadline_at;
  struct react_result res;
  struct err re = {0};
  rc = react_run(&actx, llm, &ro, &res, &re);
  llm_client_free(llm);
  sec_flush(rt->sec);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "answer", res.answer ? res.answer : "");
  cJSON_AddStringToObject(o, "status", rc ? res.status : "ok");
  if (rc) {
    cJSON_AddStringToObject(o, "error", re.msg);
    cJSON_AddStringToObject(o, "code", re.code);
  }
  cJSON_AddNumberToObject(o, "iterations", res.iterations);
  cJSON_AddNumberToObject(o, "model_calls", (double)res.model_calls);
  cJSON_AddNumberToObject(o, "tool_calls", (double)res.tool_calls);
  cJSON_AddStringToObject(o, "run_id", actx.run_id);
  react_result_free(&res);
  *ret = o;
  return 0;
}

