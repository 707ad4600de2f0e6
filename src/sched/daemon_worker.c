/* daemon_worker.c - the worker process: one job at a time, each in a fresh
 * sandbox (see daemon_impl.h). */
#define _GNU_SOURCE
#include "daemon_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/mman.h>

#include "automation.h"
#include "call.h"
#include "config.h"
#include "events.h"
#include "json.h"
#include "mcp_proc.h"
#include "sandbox.h"
#include "security.h"
#include "skills.h"
#include "store.h"
#include "util.h"

/* ================================================================ worker */

struct wctx {
  struct runtime *rt;
  const char *ws;
  char name[65];
  int tool_calls;
  /* What the run's journal keeps (RUN_LOG_BYTES of print/log text,
   * RUN_LOG_CALLS script tool calls), sent to the scheduler as it happens
   * so a run that crashes or times out keeps what it printed. */
  int fd;
  const char *run_id;
  size_t log_bytes, dropped_bytes;
  int log_calls, dropped_calls;
};

/* Sends one event of the run to the scheduler: {"run_id", "ev": {type,
 * ts, data}}. Takes data. */
static void w_send_event(struct wctx *w, const char *type, cJSON *data) {
  cJSON *f = cJSON_CreateObject();
  cJSON_AddStringToObject(f, "run_id", w->run_id ? w->run_id : "");
  cJSON *ev = cJSON_AddObjectToObject(f, "ev");
  cJSON_AddStringToObject(ev, "type", type);
  cJSON_AddNumberToObject(ev, "ts", util_now());
  cJSON_AddItemToObject(ev, "data", data);
  char *text = json_print(f, 0);
  if (text && w->fd >= 0) daemon__send_frame(w->fd, text); /* a lost scheduler ends us anyway */
  free(text);
  cJSON_Delete(f);
}

/* print and log lines for the journal, within the run's bound. */
static void w_keep_output(struct wctx *w, const char *stream, const char *text, size_t len) {
  size_t room = w->log_bytes < RUN_LOG_BYTES ? RUN_LOG_BYTES - w->log_bytes : 0;
  size_t keep = len <= room ? len : room;
  while (keep < len && keep > 0 && ((unsigned char)text[keep] & 0xC0) == 0x80) keep--;
  w->dropped_bytes += len - keep;
  if (!keep && len) return;
  w->log_bytes += keep;
  cJSON *d = cJSON_CreateObject();
  struct sbuf b = {0};
  sbuf_append(&b, text, keep);
  if (!strcmp(stream, "print")) {
    sbuf_append(&b, "\n", 1); /* replayed as the line it was */
    cJSON_AddStringToObject(d, "text", b.s ? b.s : "");
    if (keep < len) cJSON_AddTrueToObject(d, "cut");
    w_send_event(w, "print", d);
  } else {
    cJSON_AddStringToObject(d, "level", stream);
    cJSON_AddStringToObject(d, "text", b.s ? b.s : "");
    if (keep < len) cJSON_AddTrueToObject(d, "cut");
    w_send_event(w, "log", d);
  }
  sbuf_free(&b);
}

void daemon__clock_hms(char *out, size_t n) {
  time_t t = time(NULL);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(out, n, "%H:%M:%S", &tm);
}

static void w_output(void *ud, const char *stream, const char *text, size_t len) {
  struct wctx *w = ud;
  char ts[16];
  daemon__clock_hms(ts, sizeof ts);
  struct sbuf b = {0};
  /* text is already escaped by the sandbox; cut trailing newlines */
  while (len && text[len - 1] == '\n') len--;
  if (!strcmp(stream, "print"))
    sbuf_printf(&b, "%s   %s: %.*s\n", ts, w->name, (int)len, text);
  else
    sbuf_printf(&b, "%s   %s [%s] %.*s\n", ts, w->name, stream, (int)len, text);
  if (daemon__write_all(1, b.s, b.len)) { /* stdout gone: nothing to do */
  }
  sbuf_free(&b);
  w_keep_output(w, stream, text, len);
}

static void w_event(void *ud, const char *run_id, const char *type, const cJSON *data) {
  struct wctx *w = ud;
  (void)run_id;
  if (!strcmp(type, "tool_call_start")) w->tool_calls++;
  if (!strcmp(type, "script_tool_call")) {
    if (w->log_calls >= RUN_LOG_CALLS) {
      w->dropped_calls++;
      return;
    }
    w->log_calls++;
    w_send_event(w, type, cJSON_Duplicate(data, 1));
  }
}

/* The same for the chain: only a script_tool_call's data is read, so the
 * loop's text events (events.h) never have a tree built for this sink. */
static void w_event_ev(void *ud, struct event *ev) {
  if (!strcmp(ev->type, "script_tool_call")) w_event(ud, ev->run_id, ev->type, event_data(ev));
  else w_event(ud, ev->run_id, ev->type, NULL);
}

/* events.emit(name [, payload]) -> queue id. [-0, +1, e] */
static int l_events_emit(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                         struct err *e) {
  struct call_ctx *ctx = ud;
  (void)sb;
  const cJSON *name = cJSON_GetArrayItem(args, 0), *payload = cJSON_GetArrayItem(args, 1);
  if (!cJSON_IsString(name))
    return err_set(e, ERR_INVALID, "invalid_args", "events.emit: expected an event name (string)");
  char *text = payload && !cJSON_IsNull(payload) ? json_print(payload, 0) : NULL;
  struct store *st;
  long long id = 0;
  int rc;
  if (config_get(ctx->rt->cfg, "cluster")) { /* the cluster's queue, for any daemon */
    rc = daemon__cluster_event_check(name->valuestring, text, e);
    if (!rc)
      rc = daemon__cl_emit(ctx->rt->workspace, ctx->rt->cfg, name->valuestring, text,
                           call_ctx_tainted(ctx), &id, e);
    rc = rc < 0 ? rc : 0;
    free(text);
    if (rc) {
      err_prefix(e, "events.emit");
      return rc;
    }
    *ret = cJSON_CreateNumber((double)id);
    return 0;
  }
  rc = runtime_store(ctx->rt, &st, e);
  if (!rc) rc = daemon__queue_event(st, name->valuestring, text, call_ctx_tainted(ctx), &id, e);
  free(text);
  if (rc) {
    err_prefix(e, "events.emit");
    return rc;
  }
  daemon_wake(ctx->rt->workspace);
  *ret = cJSON_CreateNumber((double)id);
  return 0;
}

int daemon_events_install(struct sandbox *sb, struct call_ctx *ctx, struct err *e) {
  if (sandbox_add_function(sb, "events", "emit", l_events_emit, ctx))
    return err_set(e, ERR_FAIL, "internal", "cannot install events.emit");
  return 0;
}

/* ------------------------------------------------------------- fence */

/* In a cluster the scheduler shares its fence deadline (daemon_cluster.c):
 * past it, another host may soon take the run over, so the run stops at
 * its next tool call or Lua hook. A thread watches the deadline because
 * the scheduler may be unable to act (stopped, starved): the worker fences
 * itself. */
static const volatile double *fence_at;
static volatile int fence_stop;

static void *fence_watch(void *ud) {
  (void)ud;
  for (;;) {
    double at = *fence_at;
    if (at > 0 && util_monotonic() > at) fence_stop = 1;
    util_sleep(0.02);
  }
  return NULL;
}

static void fence_open(void) {
  char link[256] = "";
  ssize_t n = readlink("/proc/self/fd/" "4", link, sizeof link - 1);
  if (n <= 0 || strncmp(link, "/memfd:" DAEMON_FENCE_NAME, strlen("/memfd:" DAEMON_FENCE_NAME)))
    return; /* not a cluster's worker */
  void *m = mmap(NULL, sizeof(double), PROT_READ, MAP_SHARED, DAEMON_FENCE_FD, 0);
  if (m == MAP_FAILED) return;
  fence_at = m;
  pthread_t th;
  if (pthread_create(&th, NULL, fence_watch, NULL) == 0)
    pthread_detach(th);
  else
    fence_at = NULL;
}

static int is_timeout_code(const char *code) {
  return strstr(code, "deadline") || strstr(code, "timeout");
}

/* One sandbox serves a worker's runs one after the other: between two
 * runs sandbox_recycle makes it as clean as a new one (collected,
 * reseeded, fresh limits; every chunk run gets a fresh _ENV; the shared
 * libraries are read-only), and each automation's chunk stays compiled
 * there (sandbox_run_cached, keyed by its name and exact source, so an
 * edit is compiled anew). Its API is bound to w_cc, which each run sets
 * afresh. Creating a state, its libraries and the API, and compiling the
 * automation, was most of a run's cost (issue 20). A run that fails or
 * times out drops the sandbox; a crash ends the worker. */
static struct sandbox *w_sb;
static struct call_ctx w_cc;
static pid_t w_pid; /* ours, for the replies */

/* The scheduler's next job frame, read with as few read(2) calls as the
 * socket allows (one when the job arrived whole). 1 with *p, *n its
 * payload (in `in`, valid until the next call), 0 when the scheduler
 * closed us or sent what is not a frame. */
static int w_read_job(int fd, struct sbuf *in, size_t *off, const char **p, size_t *n) {
  daemon__frame_drop(in, *off);
  *off = 0;
  char buf[16384];
  for (;;) {
    int got = daemon__frame_next(in, off, p, n);
    if (got) return got > 0;
    ssize_t k = read(fd, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return 0;
    sbuf_append(in, buf, (size_t)k);
  }
}

/* The run's ctx goes to Lua as one JSON text, which the sandbox decodes
 * straight into Lua tables (a cJSON_Raw node, sandbox__push_json_text)
 * instead of a cJSON tree made here, copied into Lua and freed (most of a
 * worker's time per run, issue 20). The job's JSON texts (state, trigger,
 * args) are spliced in as they are, each checked first by json_scan (the
 * grammar and errors of json_parse), so each is refused or replaced
 * exactly as a tree of it was; the other fields are written so that they
 * decode to the values a tree of them gave (below). */

/* What trig_event learns of the trigger's text: its kind, and its "slot"
 * as cJSON_GetObjectItem found it in json_parse's tree (the first
 * top-level key equal to "slot" but for case, with the value of that
 * key's last occurrence, as json_parse keeps it). */
struct trig_scan {
  const char *text;
  int kind;    /* of the value: JSON_EV_OBJECT, ... (-1: none yet) */
  int level;   /* containers open */
  char key[5]; /* the slot member's exact key ("" until one is seen) */
  int at_slot; /* the value that comes next is that member's */
  int have;    /* that value is a number: */
  double slot;
  int digits;      /* an integer json_parse keeps as text */
  size_t at, len;  /* its text in the trigger's */
};

static int trig_event(void *ud, const struct json_event *ev) {
  struct trig_scan *t = ud;
  if (t->kind < 0) t->kind = ev->kind;
  if (ev->kind == JSON_EV_END) {
    t->level--;
    return 0;
  }
  if (ev->kind == JSON_EV_KEY) {
    if (t->level == 1 && ev->n == 4 && !strncasecmp(ev->s, "slot", 4) &&
        (!t->key[0] || !memcmp(t->key, ev->s, 4))) {
      memcpy(t->key, ev->s, 4);
      t->at_slot = 1;
    }
    return 0;
  }
  if (t->at_slot) { /* the member's value (a later occurrence replaces it) */
    t->at_slot = 0;
    t->have = ev->kind == JSON_EV_NUMBER;
    if (t->have) {
      t->slot = ev->d;
      t->digits = ev->digits != NULL;
      t->at = (size_t)(ev->s - t->text);
      t->len = ev->n;
    }
  }
  if (ev->kind == JSON_EV_OBJECT || ev->kind == JSON_EV_ARRAY) t->level++;
  return 0;
}

/* d as JSON text that decodes to what a cJSON number node of d pushes: an
 * integer when d is whole and below 2^53, else a float (a whole number
 * beyond 2^53 gets an exponent, or its digits would decode as an integer).
 * Locale-free: no decimal point is printed but json_put_number's. */
static void ctx_number(struct sbuf *b, double d) {
  if (fabs(d) < 9007199254740992.0 && d == (double)(long long)d) {
    char num[24], *end = num + sizeof num;
    long long i = (long long)d;
    char *at = util_dec_before(end, i < 0 ? 0ULL - (unsigned long long)i : (unsigned long long)i);
    if (i < 0) *--at = '-';
    sbuf_append(b, at, (size_t)(end - at));
  } else if (d == floor(d))
    sbuf_printf(b, "%.0fe0", d);
  else
    json_put_number(b, d);
}

/* 1 when s (a host string: C0 80 stands for U+0000) is UTF-8, so that
 * json_put_string's text of it decodes back to its bytes. */
static int host_utf8(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);
  for (size_t i = 0; i < n;) {
    if (p[i] < 0x80) {
      i++;
    } else if (p[i] == 0xC0 && i + 1 < n && p[i + 1] == 0x80) {
      i += 2;
    } else {
      size_t len = util_utf8_len(p + i, n - i, NULL);
      if (!len) return 0;
      i += len;
    }
  }
  return 1;
}

/* Appends "key":"s" to the ctx text; a string that is not UTF-8 goes as a
 * member of raw set over the decoded ones (a tree of it pushed its bytes). */
static void ctx_string(struct sbuf *b, cJSON *over, const char *key, const char *s) {
  if (!host_utf8(s)) {
    cJSON_AddStringToObject(over, key, s);
    return;
  }
  sbuf_puts(b, ",\"");
  sbuf_puts(b, key); /* ours: no escape needed */
  sbuf_puts(b, "\":");
  json_put_string(b, s);
}

static struct sbuf w_ctx_text; /* the ctx's text, kept between runs */

/* The run's ctx from the job's fields: state, last_run, now, run_id,
 * node, trigger (its slot in whole seconds) and args, as a cJSON_Raw node
 * (see above). NULL (why set) when a field the ctx needs is missing or
 * not what it must be. */
static cJSON *w_make_ctx(const struct daemon_rec *job, const char *run_id, char *why, size_t nwhy) {
  double now, last;
  const char *trig = job->f[REC_TRIGGER].p;
  struct trig_scan ts = {.text = trig, .kind = -1};
  if (!(job->have & (1u << REC_TRIGGER)) ||
      json_scan(trig, job->f[REC_TRIGGER].n, trig_event, &ts, NULL, NULL) ||
      ts.kind != JSON_EV_OBJECT || daemon__rec_number(job, REC_NOW, &now)) {
    snprintf(why, nwhy, "no trigger object or time");
    return NULL;
  }
  if (job->have & (1u << REC_ARGS) &&
      json_kind(job->f[REC_ARGS].p, job->f[REC_ARGS].n, NULL) != JSON_EV_OBJECT) {
    snprintf(why, nwhy, "args that are not a JSON object");
    return NULL;
  }
  struct sbuf *b = &w_ctx_text;
  cJSON *over = cJSON_CreateObject(); /* members the text cannot hold */
  b->len = 0;
  /* A state the store holds that is not a table (edited by hand) starts
   * over as {}, as it always did. */
  int sk = job->have & (1u << REC_STATE)
               ? json_kind(job->f[REC_STATE].p, job->f[REC_STATE].n, NULL)
               : -1;
  sbuf_puts(b, "{\"state\":");
  if (sk == JSON_EV_OBJECT || sk == JSON_EV_ARRAY)
    sbuf_append(b, job->f[REC_STATE].p, job->f[REC_STATE].n);
  else
    sbuf_puts(b, "{}");
  sbuf_puts(b, ",\"now\":");
  ctx_number(b, now);
  ctx_string(b, over, "run_id", run_id);
  const char *node = daemon__rec_text(job, REC_NODE);
  if (node) ctx_string(b, over, "node", node);
  const char *ls = daemon__rec_text(job, REC_LAST_STATUS);
  if (ls && !daemon__rec_number(job, REC_LAST_TIME, &last)) {
    if (host_utf8(ls)) {
      sbuf_puts(b, ",\"last_run\":{\"time\":");
      ctx_number(b, last);
      sbuf_puts(b, ",\"status\":");
      json_put_string(b, ls);
      sbuf_puts(b, "}");
    } else {
      cJSON *lr = cJSON_AddObjectToObject(over, "last_run");
      cJSON_AddNumberToObject(lr, "time", last);
      cJSON_AddStringToObject(lr, "status", ls);
    }
  }
  /* the trigger with its slot in whole seconds: the number's text
   * replaced (an integer is whole already, and one kept as text must stay
   * exact) */
  sbuf_puts(b, ",\"trigger\":");
  if (ts.have && !ts.digits && floor(ts.slot) != ts.slot) {
    sbuf_append(b, trig, ts.at);
    ctx_number(b, floor(ts.slot));
    sbuf_append(b, trig + ts.at + ts.len, job->f[REC_TRIGGER].n - ts.at - ts.len);
  } else {
    sbuf_append(b, trig, job->f[REC_TRIGGER].n);
  }
  sbuf_puts(b, ",\"args\":");
  if (job->have & (1u << REC_ARGS))
    sbuf_append(b, job->f[REC_ARGS].p, job->f[REC_ARGS].n);
  else
    sbuf_puts(b, "{}");
  sbuf_puts(b, "}");
  cJSON *ctx = cJSON_CreateRaw(b->s);
  if (ctx) {
    ctx->child = over->child; /* the members set over the decoded ones */
    over->child = NULL;
  }
  cJSON_Delete(over);
  if (b->cap > (1u << 20)) sbuf_free(b); /* a big state's: not kept around */
  return ctx;
}

/* Runs one job; the reply record goes into out. */
static void w_run_job(struct runtime *rt, const struct err *rt_err, const char *ws, int fd,
                      const char *jp, size_t jn, struct sbuf *out) {
  struct daemon_rec job;
  char why[200] = "";
  /* when the run began, for the journal: a job queued behind another
   * begins here, before the scheduler reads the reply in front */
  double began = util_monotonic();
  int bad = daemon__rec_parse(jp, jn, 'J', &job, why, sizeof why);
  const char *run_id = bad ? NULL : daemon__rec_text(&job, REC_RUN_ID);
  const char *name = bad ? NULL : daemon__rec_text(&job, REC_NAME);
  const char *chunk = bad ? NULL : daemon__rec_text(&job, REC_CHUNK);
  double timeout = 0;
  daemon__rec_begin(out, 'R');
  daemon__rec_str(out, REC_RUN_ID, run_id ? run_id : "");
  daemon__rec_num(out, REC_PID, (double)w_pid);
  daemon__rec_num(out, REC_STARTED, began);
  if (rt_err) {
    daemon__rec_str(out, REC_STATUS, "failed");
    daemon__rec_str(out, REC_ERROR, rt_err->msg);
    return;
  }
  cJSON *ctxj = NULL;
  if (!bad && (!run_id || !name || !chunk || !(job.have & (1u << REC_SOURCE)) ||
               daemon__rec_number(&job, REC_TIMEOUT, &timeout)))
    snprintf(why, sizeof why, "a field is missing");
  if (!bad && !why[0]) ctxj = w_make_ctx(&job, run_id, why, sizeof why);
  if (!ctxj) {
    char msg[300];
    snprintf(msg, sizeof msg, "worker: malformed job: %s", why);
    daemon__rec_str(out, REC_STATUS, "failed");
    daemon__rec_str(out, REC_ERROR, msg);
    return;
  }
  const char *source = job.f[REC_SOURCE].p;
  size_t source_len = job.f[REC_SOURCE].n;
  struct wctx wc = {.rt = rt, .ws = ws, .fd = fd, .run_id = run_id};
  util_copy(wc.name, sizeof wc.name, name);
  struct event_sink sink = {.emit = w_event, .emit_event = w_event_ev, .ud = &wc};
  call_ctx_init_run(&w_cc, rt, CALLER_AUTOMATION, name, run_id);
  if (timeout > 0) w_cc.limits.deadline_s = timeout;
  /* A tainted event or ctx.state: this run starts where the last one left off. */
  if (job.have & (1u << REC_TAINTED)) call_ctx_taint(&w_cc);
  /* nested sandboxes (Lua tools, delegate) inherit the run's deadline */
  w_cc.limits.deadline_at = util_monotonic() + w_cc.limits.deadline_s;
  sink.next = w_cc.events;
  w_cc.events = &sink;
  if (fence_at) { /* a cluster's run: it stops when its lease can no longer be trusted */
    fence_stop = *fence_at > 0 && util_monotonic() > *fence_at;
    w_cc.stop = &fence_stop;
  }
  rt->out = (struct sb_output){.write = w_output, .ud = &wc};

  struct err e;
  err_clear(&e);
  struct sandbox *sb = NULL;
  cJSON *ret = NULL, *after = NULL, *args = cJSON_CreateArray();
  cJSON_AddItemToArray(args, ctxj);
  const char *const path[] = {"run", NULL};
  int rc;
  if (w_sb) { /* the last run's sandbox, made as clean as a new one */
    sb = w_sb;
    w_sb = NULL;
    rc = runtime_sandbox_reuse(rt, &w_cc, sb, &e);
    if (rc) { /* refused (a limit was hit): a new one */
      sandbox_free(sb);
      sb = NULL;
      err_clear(&e);
    }
  }
  rc = sb ? 0 : runtime_sandbox(rt, &w_cc, &sb, &e); /* output goes to rt->out */
  if (!rc) rc = sandbox_run_cached(sb, source, source_len, chunk, NULL, &e);
  if (!rc) rc = sandbox_call_pick(sb, path, args, "state", &ret, &after, &e);
  int reusable = !rc;
  if (!rc) {
    const cJSON *state = after; /* ctx.state as the run left it */
    char *st = state && (cJSON_IsObject(state) || cJSON_IsArray(state))
                   ? json_print(state, 0)
                   : NULL;
    if (st && strlen(st) > MAX_STATE) {
      /* refuse rather than store a runaway state: the old one stays */
      daemon__rec_str(out, REC_STATUS, "failed");
      char msg[160];
      snprintf(msg, sizeof msg, "ctx.state is %zu bytes of JSON, over the limit of %d; not saved",
               strlen(st), MAX_STATE);
      daemon__rec_str(out, REC_ERROR, msg);
    } else {
      daemon__rec_str(out, REC_STATUS, "ok");
      if (ret) {
        char *t = cJSON_IsString(ret) ? xstrdup(ret->valuestring) : json_print(ret, 0);
        size_t n = t ? strlen(t) : 0;
        if (n > MAX_RESULT) { /* the journal keeps the head */
          snprintf(t + MAX_RESULT - 64, 64, "... [result cut: %zu bytes]", n);
        }
        daemon__rec_str(out, REC_RESULT, t ? t : "");
        free(t);
      }
      daemon__rec_str(out, REC_STATE, st);
    }
    free(st);
  } else {
    daemon__rec_str(out, REC_STATUS, is_timeout_code(e.code) ? "timeout" : "failed");
    daemon__rec_str(out, REC_ERROR, e.msg[0] ? e.msg : "run failed");
    daemon__rec_str(out, REC_CODE, e.code);
  }
  daemon__rec_num(out, REC_TOOL_CALLS,
                  (double)(call_ctx_run(&w_cc)->script_calls + (unsigned)wc.tool_calls));
  if (call_ctx_tainted(&w_cc)) daemon__rec_put(out, REC_TAINTED, "", 0);
  cJSON_Delete(ret);
  cJSON_Delete(after);
  cJSON_Delete(args);
  /* A run that failed in any way may have left its sandbox half done:
   * never reused (as skill tools, skill_tool.c). */
  if (reusable && sb) {
    w_sb = sb;
    w_cc.sb = NULL;
  } else {
    sandbox_free(sb);
  }
  if (wc.dropped_bytes || wc.dropped_calls) { /* the journal says what it lacks */
    char note[300];
    snprintf(note, sizeof note,
             "the journal kept %zu bytes of print/log output and %d tool call(s) of this run; "
             "not kept: %zu bytes, %d tool call(s) (at most %u bytes and %u calls per run)",
             wc.log_bytes, wc.log_calls, wc.dropped_bytes, wc.dropped_calls,
             (unsigned)RUN_LOG_BYTES, (unsigned)RUN_LOG_CALLS);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "text", note);
    cJSON_AddBoolToObject(d, "truncated", 1);
    w_send_event(&wc, "note", d);
  }
  sec_flush(rt->sec); /* the run's queued audit rows, before the reply */
  rt->out = (struct sb_output){0};
}

int daemon_worker_main(const char *workspace, int fd, struct runtime *rt,
                       const struct err *rt_err) {
  signal(SIGPIPE, SIG_IGN);
  fence_open();
  if (rt) {
    /* never prompt: escalations are denied, or wait in the approval queue
     * with approver = "queue" (bounded by the run's deadline) */
    sec_set_interactive(rt->sec, 0);
  }
  w_pid = getpid();
  struct stat rst;
  int wfd = fstat(DAEMON_REPLY_FD, &rst) == 0 && S_ISFIFO(rst.st_mode) ? DAEMON_REPLY_FD : fd;
  /* What a run starts (a tool's process) must not inherit the scheduler's
   * descriptors, or it could write replies of its own. */
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  fcntl(wfd, F_SETFD, FD_CLOEXEC);
  /* The scheduler made this process SCHED_BATCH (daemon_runs.c); the MCP
   * servers its runs start are the user's programs, with the usual policy. */
  mcp_proc_children_normal_policy();
  struct sbuf in = {0}, out = {0};
  size_t off = 0;
  const char *p;
  size_t n;
  while (w_read_job(fd, &in, &off, &p, &n)) { /* until the scheduler closes us, or dies */
    w_run_job(rt, rt ? NULL : rt_err, workspace, wfd, p, n, &out);
    if (daemon__rec_send(wfd, &out)) break;
    if (out.cap > (1u << 20)) sbuf_free(&out);
    if (in.cap > (1u << 20) && off == in.len) sbuf_free(&in), off = 0;
  }
  sbuf_free(&in);
  sbuf_free(&out);
  sandbox_free(w_sb);
  w_sb = NULL;
  sbuf_free(&w_ctx_text);
  return 0;
}
