/* daemon.c - see daemon.h.
 *
 * Shape: one single-threaded scheduler process sleeps in poll() until the
 * next due time, a signal (self-pipe), an inotify change (automations/,
 * skills/, luagent.lua, and .luagent/wake, which `luagent emit` touches), or
 * a worker's reply. Runs go to worker processes over a socketpair with
 * length-prefixed JSON frames: the job carries the automation's validated
 * source text, so a broken edit on disk never reaches a worker. Workers are
 * exec'd (never just forked), so no SQLite or Lua state crosses a fork, and
 * they die with the scheduler (PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE
#include "daemon.h"

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
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "automation.h"
#include "config.h"
#include "events.h"
#include "json.h"
#include "call.h"
#include "sandbox.h"
#include "security.h"
#include "skills.h"
#include "store.h"
#include "util.h"

#define MAX_FRAME (64u << 20)
#define MAX_PAYLOAD (256 * 1024)
#define MAX_RESULT (64 * 1024)      /* journaled result text */
#define MAX_STATE (8 * 1024 * 1024) /* ctx.state as JSON */

/* ================================================================ framing */

static int write_all(int fd, const char *p, size_t n) {
  double give_up = util_monotonic() + 10;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (util_monotonic() > give_up) return -1;
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        poll(&pf, 1, 100);
        continue;
      }
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int send_frame(int fd, const char *json) {
  size_t n = strlen(json);
  struct sbuf b = {0};
  unsigned char h[4] = {(unsigned char)n, (unsigned char)(n >> 8), (unsigned char)(n >> 16),
                        (unsigned char)(n >> 24)};
  sbuf_append(&b, (const char *)h, 4);
  sbuf_append(&b, json, n);
  int rc = write_all(fd, b.s, b.len);
  sbuf_free(&b);
  return rc;
}

/* Takes one complete frame off the front of b, or returns NULL. */
static cJSON *take_frame(struct sbuf *b, int *bad) {
  *bad = 0;
  if (b->len < 4) return NULL;
  const unsigned char *h = (const unsigned char *)b->s;
  size_t n = (size_t)h[0] | (size_t)h[1] << 8 | (size_t)h[2] << 16 | (size_t)h[3] << 24;
  if (n > MAX_FRAME) {
    *bad = 1;
    return NULL;
  }
  if (b->len < 4 + n) return NULL;
  cJSON *j = NULL;
  json_parse(b->s + 4, n, 0, &j, NULL);
  memmove(b->s, b->s + 4 + n, b->len - 4 - n);
  b->len -= 4 + n;
  if (!j) *bad = 1;
  return j;
}

/* Blocking read of exactly n bytes; 0 on EOF before any byte. */
static int read_full(int fd, char *p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return got ? -1 : 0;
    got += (size_t)r;
  }
  return 1;
}

static cJSON *read_frame_blocking(int fd) {
  unsigned char h[4];
  if (read_full(fd, (char *)h, 4) != 1) return NULL;
  size_t n = (size_t)h[0] | (size_t)h[1] << 8 | (size_t)h[2] << 16 | (size_t)h[3] << 24;
  if (n > MAX_FRAME) return NULL;
  char *buf = xmalloc(n + 1);
  if (read_full(fd, buf, n) != 1) {
    free(buf);
    return NULL;
  }
  cJSON *j = NULL;
  json_parse(buf, n, 0, &j, NULL);
  free(buf);
  return j;
}

/* ================================================================= store */

int daemon_store_open(const char *workspace, struct store **out, struct err *e) {
  return store_open(workspace, out, e);
}

static void lock_path(const char *ws, char *out, size_t n) {
  snprintf(out, n, "%s/.luagent/daemon.lock", ws);
}

int daemon_running(const char *workspace, int *pid) {
  char p[4200];
  lock_path(workspace, p, sizeof p);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  int running = 0;
  if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
    running = 1;
    if (pid) {
      char buf[32] = {0};
      ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
      *pid = r > 0 ? atoi(buf) : 0;
    }
  }
  close(fd);
  return running;
}

void daemon_wake(const char *workspace) {
  char p[4200];
  snprintf(p, sizeof p, "%s/.luagent/wake", workspace);
  int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) close(fd); /* IN_CLOSE_WRITE wakes the daemon */
}

static int event_name_valid(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n > 127) return 0;
  for (size_t i = 0; i < n; i++)
    if (!(s[i] == '.' || s[i] == '_' || s[i] == '-' || s[i] == ':' || s[i] == '/' ||
          (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
          (s[i] >= '0' && s[i] <= '9')))
      return 0;
  return 1;
}

static int queue_event(struct store *st, const char *name, const char *payload, long long *id,
                       struct err *e) {
  if (!event_name_valid(name))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "event name '%s' is invalid (1-127 characters of letters, digits, . _ - : /)",
                   name ? name : "");
  if (payload && strlen(payload) > MAX_PAYLOAD)
    return err_set(e, ERR_INVALID, "invalid_args", "event payload is larger than %d bytes",
                   MAX_PAYLOAD);
  sqlite3_stmt *s;
  if (store_prepare(st, "INSERT INTO event_queue(name, payload, created) VALUES (?,?,?)", &s, e))
    return ERR_IO;
  sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
  if (payload)
    sqlite3_bind_text(s, 2, payload, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(s, 2);
  sqlite3_bind_double(s, 3, util_now());
  int rc = sqlite3_step(s);
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) return store_error(st, e, "queue event");
  if (id) *id = sqlite3_last_insert_rowid(store_db(st));
  return 0;
}

int daemon_emit(const char *workspace, const char *name, const char *payload, long long *id,
                struct err *e) {
  if (payload) {
    struct err pe = {0};
    cJSON *j = json_parse_str(payload, JSON_NO_DUPLICATES, &pe);
    if (!j)
      return err_set(e, ERR_INVALID, "invalid_args", "event payload is not valid JSON: %s", pe.msg);
    cJSON_Delete(j);
  }
  struct store *st;
  if (store_open(workspace, &st, e)) return ERR_IO;
  int rc = queue_event(st, name, payload, id, e);
  store_close(st);
  if (!rc) daemon_wake(workspace);
  return rc;
}

/* ================================================================ worker */

struct wctx {
  struct runtime *rt;
  const char *ws;
  char name[65];
  int tool_calls;
};

static void clock_hms(char *out, size_t n) {
  time_t t = time(NULL);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(out, n, "%H:%M:%S", &tm);
}

static void w_output(void *ud, const char *stream, const char *text, size_t len) {
  struct wctx *w = ud;
  char ts[16];
  clock_hms(ts, sizeof ts);
  struct sbuf b = {0};
  /* text is already escaped by the sandbox; cut trailing newlines */
  while (len && text[len - 1] == '\n') len--;
  if (!strcmp(stream, "print"))
    sbuf_printf(&b, "%s   %s: %.*s\n", ts, w->name, (int)len, text);
  else
    sbuf_printf(&b, "%s   %s [%s] %.*s\n", ts, w->name, stream, (int)len, text);
  if (write_all(1, b.s, b.len)) { /* stdout gone: nothing to do */
  }
  sbuf_free(&b);
}

static void w_event(void *ud, const char *run_id, const char *type, const cJSON *data) {
  struct wctx *w = ud;
  (void)run_id;
  (void)data;
  if (!strcmp(type, "tool_call_start")) w->tool_calls++;
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
  int rc = runtime_store(ctx->rt, &st, e);
  if (!rc) rc = queue_event(st, name->valuestring, text, &id, e);
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

static int is_timeout_code(const char *code) {
  return strstr(code, "deadline") || strstr(code, "timeout");
}

static cJSON *w_run_job(struct runtime *rt, const struct err *rt_err, const char *ws,
                        const cJSON *job) {
  cJSON *reply = cJSON_CreateObject();
  const char *run_id = cJSON_GetStringValue(cJSON_GetObjectItem(job, "run_id"));
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(job, "name"));
  const char *chunk = cJSON_GetStringValue(cJSON_GetObjectItem(job, "chunk"));
  const char *source = cJSON_GetStringValue(cJSON_GetObjectItem(job, "source"));
  const cJSON *ctxj = cJSON_GetObjectItem(job, "ctx");
  double timeout = cJSON_GetNumberValue(cJSON_GetObjectItem(job, "timeout"));
  cJSON_AddStringToObject(reply, "run_id", run_id ? run_id : "");
  cJSON_AddNumberToObject(reply, "pid", (double)getpid());
  if (rt_err) {
    cJSON_AddStringToObject(reply, "status", "failed");
    cJSON_AddStringToObject(reply, "error", rt_err->msg);
    return reply;
  }
  if (!run_id || !name || !chunk || !source || !cJSON_IsObject(ctxj)) {
    cJSON_AddStringToObject(reply, "status", "failed");
    cJSON_AddStringToObject(reply, "error", "worker: malformed job");
    return reply;
  }
  struct wctx wc = {.rt = rt, .ws = ws};
  snprintf(wc.name, sizeof wc.name, "%s", name);
  struct event_sink sink = {.emit = w_event, .ud = &wc};
  struct call_ctx cc;
  call_ctx_init(&cc, rt, CALLER_AUTOMATION, name);
  snprintf(cc.run_id, sizeof cc.run_id, "%s", run_id);
  if (timeout > 0) cc.limits.deadline_s = timeout;
  /* nested sandboxes (Lua tools, delegate) inherit the run's deadline */
  cc.limits.deadline_at = util_monotonic() + cc.limits.deadline_s;
  sink.next = cc.events;
  cc.events = &sink;
  rt->out = (struct sb_output){.write = w_output, .ud = &wc};

  struct err e;
  err_clear(&e);
  struct sandbox *sb = NULL;
  cJSON *ret = NULL, *after = NULL, *args = cJSON_CreateArray();
  cJSON_AddItemToArray(args, cJSON_Duplicate(ctxj, 1));
  const char *const path[] = {"run", NULL};
  int rc = runtime_sandbox(rt, &cc, &sb, &e); /* output goes to rt->out */
  if (!rc) rc = sandbox_run_string(sb, source, strlen(source), chunk, NULL, &e);
  if (!rc) rc = sandbox_call(sb, path, args, &ret, &after, &e);
  if (!rc) {
    const cJSON *c0 = cJSON_GetArrayItem(after, 0);
    const cJSON *state = c0 ? cJSON_GetObjectItem(c0, "state") : NULL;
    char *st = state && (cJSON_IsObject(state) || cJSON_IsArray(state))
                   ? json_print(state, 0)
                   : NULL;
    if (st && strlen(st) > MAX_STATE) {
      /* refuse rather than store a runaway state: the old one stays */
      cJSON_AddStringToObject(reply, "status", "failed");
      char msg[160];
      snprintf(msg, sizeof msg, "ctx.state is %zu bytes of JSON, over the limit of %d; not saved",
               strlen(st), MAX_STATE);
      cJSON_AddStringToObject(reply, "error", msg);
    } else {
      cJSON_AddStringToObject(reply, "status", "ok");
      if (ret) {
        char *t = cJSON_IsString(ret) ? xstrdup(ret->valuestring) : json_print(ret, 0);
        size_t n = t ? strlen(t) : 0;
        if (n > MAX_RESULT) { /* the journal keeps the head */
          snprintf(t + MAX_RESULT - 64, 64, "... [result cut: %zu bytes]", n);
        }
        cJSON_AddStringToObject(reply, "result", t ? t : "");
        free(t);
      }
      if (st) cJSON_AddItemToObject(reply, "state", cJSON_Duplicate(state, 1));
    }
    free(st);
  } else {
    cJSON_AddStringToObject(reply, "status", is_timeout_code(e.code) ? "timeout" : "failed");
    cJSON_AddStringToObject(reply, "error", e.msg[0] ? e.msg : "run failed");
    cJSON_AddStringToObject(reply, "code", e.code);
  }
  cJSON_AddNumberToObject(reply, "tool_calls", (double)(cc.tool_calls + (unsigned)wc.tool_calls));
  cJSON_Delete(ret);
  cJSON_Delete(after);
  cJSON_Delete(args);
  sandbox_free(sb);
  sec_flush(rt->sec); /* the run's queued audit rows, before the reply */
  rt->out = (struct sb_output){0};
  return reply;
}

int daemon_worker_main(const char *workspace, int fd, struct runtime *rt, const struct err *rt_err) {
  signal(SIGPIPE, SIG_IGN);
  if (rt) {
    /* never prompt: escalations are denied, or wait in the approval queue
     * with approver = "queue" (bounded by the run's deadline) */
    sec_set_interactive(rt->sec, 0);
  }
  for (;;) {
    cJSON *job = read_frame_blocking(fd);
    if (!job) break; /* the scheduler closed us, or died */
    cJSON *reply = w_run_job(rt, rt ? NULL : rt_err, workspace, job);
    char *text = json_print(reply, 0);
    int wrc = text ? send_frame(fd, text) : -1;
    free(text);
    cJSON_Delete(reply);
    cJSON_Delete(job);
    if (wrc) break;
  }
  return 0;
}

/* ============================================================= scheduler */

struct entry;

struct worker {
  struct worker *next;
  pid_t pid;
  int fd;          /* -1 once closed */
  struct run *run; /* the run it is busy with, or NULL */
  struct sbuf in;
  int stale;  /* config or skills changed: retire when idle */
  int killed; /* we sent SIGKILL; waiting for the reap */
  double idle_since;
};

struct run {
  struct run *next;
  struct entry *ent;
  char id[40];
  cJSON *trigger; /* {kind, name, slot, payload} */
  cJSON *args;    /* manual args or NULL */
  double slot, started, timeout, kill_at;
  struct worker *w;              /* NULL while pending */
  char *status, *result, *error; /* set when finished (manual runs read them) */
  int finished;
};

struct entry {
  struct entry *next;
  char name[65];
  char chunk[256];
  char path[4352];
  struct automation *a; /* the last good version, or NULL */
  char *bad_source;     /* text of the last failed load (not re-reported) */
  char *load_error;
  double next_fire; /* 0: none */
  int enabled;
  int running, pending;
  int deleted;
};

struct daemon {
  char ws[4096];
  char exe[4096];
  struct daemon_opts o;
  struct store *st;
  int in_tx;
  struct config *cfg;
  struct entry *entries;
  struct worker *workers;
  struct run *runs; /* pending and active, in arrival order */
  int nworkers;
  int sigpipe[2];
  int ino, wd_auto, wd_root, wd_state, wd_skills;
  double reload_at; /* debounced reload time, 0 = none */
  int reload_full;
  int stopping;
  double stop_deadline;
  double next_scan; /* earliest next_fire */
  int oneshot;      /* manual-run mode: no schedule */
  int lock_fd;
  struct {
    const char *sql; /* a string literal: looked up by address */
    sqlite3_stmt *st;
  } stmts[32]; /* prepared once, reset between uses */
  int nstmts;
  double next_prune; /* monotonic time of the next journal prune */
};

static volatile sig_atomic_t sig_term, sig_hup, sig_chld;
static int sig_wfd = -1;

static void on_signal(int sig) {
  int saved = errno;
  if (sig == SIGTERM || sig == SIGINT) sig_term++;
  if (sig == SIGHUP) sig_hup = 1;
  if (sig == SIGCHLD) sig_chld = 1;
  char c = (char)sig;
  if (sig_wfd >= 0 && write(sig_wfd, &c, 1) < 0) { /* pipe full: already awake */
  }
  errno = saved;
}

static void say(struct daemon *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct daemon *d, const char *fmt, ...) {
  if (d->o.quiet) return;
  char ts[16];
  clock_hms(ts, sizeof ts);
  struct sbuf b = {0};
  sbuf_printf(&b, "%s ", ts);
  va_list ap;
  va_start(ap, fmt);
  char msg[2048];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  sbuf_puts(&b, msg);
  sbuf_puts(&b, "\n");
  if (write_all(1, b.s, b.len)) {
  }
  sbuf_free(&b);
}

static void complain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void complain(const char *fmt, ...) {
  char ts[16], msg[2048];
  clock_hms(ts, sizeof ts);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s luagent daemon: %s\n", ts, msg);
  fflush(stderr);
}

/* ---------------------------------------------------------- db helpers */

static void tx(struct daemon *d) {
  if (d->in_tx) return;
  struct err e;
  if (store_begin(d->st, &e) == 0)
    d->in_tx = 1;
  else
    complain("%s", e.msg);
}

static void tx_commit(struct daemon *d) {
  if (!d->in_tx) return;
  struct err e;
  if (store_commit(d->st, &e)) {
    complain("%s", e.msg);
    store_rollback(d->st);
  }
  d->in_tx = 0;
}

/* A prepared statement for a literal sql, cached for the daemon's life
 * (preparing costs more than running these). Release with done(). */
static sqlite3_stmt *prep(struct daemon *d, const char *sql) {
  for (int i = 0; i < d->nstmts; i++)
    if (d->stmts[i].sql == sql) return d->stmts[i].st;
  sqlite3_stmt *s = NULL;
  struct err e;
  if (store_prepare(d->st, sql, &s, &e)) {
    complain("%s", e.msg);
    return NULL;
  }
  if (d->nstmts < (int)(sizeof d->stmts / sizeof d->stmts[0])) {
    d->stmts[d->nstmts].sql = sql;
    d->stmts[d->nstmts++].st = s;
  }
  return s;
}

/* Resets a statement from prep() (finalizes one that did not fit the cache). */
static void done(struct daemon *d, sqlite3_stmt *s) {
  if (!s) return;
  for (int i = 0; i < d->nstmts; i++)
    if (d->stmts[i].st == s) {
      sqlite3_reset(s);
      sqlite3_clear_bindings(s);
      return;
    }
  sqlite3_finalize(s);
}

static void step_done(struct daemon *d, sqlite3_stmt *s, const char *what) {
  if (!s) return;
  int rc = sqlite3_step(s);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW)
    complain("state.db: %s: %s", what, sqlite3_errmsg(store_db(d->st)));
  done(d, s);
}

static void bind_text_or_null(sqlite3_stmt *s, int i, const char *t) {
  if (t)
    sqlite3_bind_text(s, i, t, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(s, i);
}

static void ensure_row(struct daemon *d, const char *name) {
  tx(d);
  sqlite3_stmt *s = prep(d, "INSERT OR IGNORE INTO automations(name) VALUES (?)");
  if (!s) return;
  sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
  step_done(d, s, "add automation");
}

static void save_schedule(struct daemon *d, struct entry *ent) {
  if (d->oneshot || !ent->a) return;
  char key[256];
  automation_trigger_key(ent->a, key, sizeof key);
  tx(d);
  sqlite3_stmt *s = prep(d, "UPDATE automations SET next_fire = ?, trigger_key = ? WHERE name = ?");
  if (!s) return;
  if (ent->next_fire > 0)
    sqlite3_bind_double(s, 1, ent->next_fire);
  else
    sqlite3_bind_null(s, 1);
  sqlite3_bind_text(s, 2, key, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 3, ent->name, -1, SQLITE_TRANSIENT);
  step_done(d, s, "save schedule");
}

static void save_load_error(struct daemon *d, struct entry *ent) {
  if (d->oneshot) return;
  tx(d);
  sqlite3_stmt *s = prep(d, "UPDATE automations SET load_error = ? WHERE name = ?");
  if (!s) return;
  bind_text_or_null(s, 1, ent->load_error);
  sqlite3_bind_text(s, 2, ent->name, -1, SQLITE_TRANSIENT);
  step_done(d, s, "save load error");
}

static void journal_insert(struct daemon *d, const char *id, const char *name, const cJSON *trigger,
                           const char *status, double started, double finished, const char *error,
                           pid_t pid) {
  tx(d);
  sqlite3_stmt *s = prep(d,
                         "INSERT INTO runs(id, kind, name, trigger, status, started, finished, "
                         "error, worker_pid) VALUES (?, 'automation', ?, ?, ?, ?, ?, ?, ?)");
  if (!s) return;
  char *tj = trigger ? json_print(trigger, 0) : NULL;
  sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, name, -1, SQLITE_TRANSIENT);
  bind_text_or_null(s, 3, tj);
  sqlite3_bind_text(s, 4, status, -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(s, 5, started);
  if (finished > 0)
    sqlite3_bind_double(s, 6, finished);
  else
    sqlite3_bind_null(s, 6);
  bind_text_or_null(s, 7, error);
  if (pid > 0)
    sqlite3_bind_int64(s, 8, pid);
  else
    sqlite3_bind_null(s, 8);
  step_done(d, s, "journal insert");
  free(tj);
}

static void journal_skipped(struct daemon *d, struct entry *ent, const cJSON *trigger,
                            const char *why) {
  char id[40];
  runtime_new_run_id(id);
  double now = util_now();
  journal_insert(d, id, ent->name, trigger, "skipped", now, now, why, 0);
  say(d, "%s: skipped: %s", ent->name, why);
}

/* ------------------------------------------------------------ schedule */

static struct entry *find_entry(struct daemon *d, const char *name) {
  for (struct entry *x = d->entries; x; x = x->next)
    if (!strcmp(x->name, name)) return x;
  return NULL;
}

/* First slot after now on an `every` grid anchored at slot. */
static double every_after(const struct automation *a, double slot, double now) {
  if (slot > now) return slot;
  double k = floor((now - slot) / a->every_s) + 1;
  return slot + k * a->every_s;
}

static double fresh_next(struct daemon *d, struct entry *ent, double now) {
  const struct automation *a = ent->a;
  (void)d;
  switch (a->trig) {
    case TRIG_EVERY:
      return now; /* a new or re-enabled automation runs at once */
    case TRIG_CRON:
      return automation_next_after(a, now);
    case TRIG_AT:
      return a->at > now ? a->at : (a->catch_up ? now : 0);
    default:
      return 0;
  }
}

static cJSON *make_trigger(const struct entry *ent, const char *kind, double slot) {
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "kind", kind);
  if (!strcmp(kind, "manual"))
    cJSON_AddStringToObject(t, "name", "manual");
  else if (!strcmp(kind, "event"))
    cJSON_AddStringToObject(t, "name", ent->a ? ent->a->event : "");
  else
    cJSON_AddStringToObject(t, "name", ent->a ? ent->a->trigger_text : "");
  if (slot > 0) cJSON_AddNumberToObject(t, "slot", slot);
  return t;
}

static void fire(struct daemon *d, struct entry *ent, cJSON *trigger, cJSON *args);

/* Reads the persisted schedule and decides the next fire; at startup,
 * handles slots missed while the daemon was down (catch_up). */
static void schedule_entry(struct daemon *d, struct entry *ent, int startup) {
  double now = util_now();
  const struct automation *a = ent->a;
  char key[256];
  automation_trigger_key(a, key, sizeof key);
  ensure_row(d, ent->name);
  double nf = 0;
  int have_nf = 0, same_key = 0, enabled = a->enabled;
  sqlite3_stmt *s =
      prep(d, "SELECT next_fire, trigger_key, enabled FROM automations WHERE name = ?");
  if (s) {
    sqlite3_bind_text(s, 1, ent->name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(s) == SQLITE_ROW) {
      have_nf = sqlite3_column_type(s, 0) != SQLITE_NULL;
      nf = sqlite3_column_double(s, 0);
      const char *k = (const char *)sqlite3_column_text(s, 1);
      same_key = k && !strcmp(k, key);
      if (sqlite3_column_type(s, 2) != SQLITE_NULL) enabled = sqlite3_column_int(s, 2);
    }
    done(d, s);
  }
  ent->enabled = enabled;
  if (!same_key || (!have_nf && a->trig != TRIG_AT)) {
    ent->next_fire = fresh_next(d, ent, now);
  } else if (!have_nf) {
    ent->next_fire = 0; /* an `at` that already fired */
  } else if (nf <= now && startup && enabled) {
    /* missed while the daemon was down */
    int missed = 0;
    double next = 0;
    if (a->trig == TRIG_EVERY) {
      next = every_after(a, nf, now);
      missed = (int)fmin(1e9, floor((now - nf) / a->every_s) + 1);
    } else if (a->trig == TRIG_CRON) {
      double t = nf;
      missed = 1;
      for (int i = 0; i < 100000; i++) {
        double x = automation_next_after(a, t);
        if (x <= 0 || x > now) {
          next = x;
          break;
        }
        t = x;
        missed++;
      }
    } else if (a->trig == TRIG_AT) {
      missed = 1;
      next = 0;
    }
    cJSON *trig = make_trigger(ent, automation_trig_name(a->trig), nf);
    cJSON_AddNumberToObject(trig, "missed", missed);
    ent->next_fire = next;
    if (a->catch_up) {
      say(d, "%s: catching up %d missed slot(s) with one run", ent->name, missed);
      fire(d, ent, trig, NULL);
    } else {
      char why[160];
      snprintf(why, sizeof why, "missed %d slot(s) while the daemon was down (catch_up = false)",
               missed);
      journal_skipped(d, ent, trig, why);
      cJSON_Delete(trig);
    }
  } else {
    ent->next_fire = nf;
    if (nf <= now && a->trig == TRIG_EVERY && !startup) ent->next_fire = now;
  }
  save_schedule(d, ent);
  if (ent->next_fire > 0 && (d->next_scan == 0 || ent->next_fire < d->next_scan))
    d->next_scan = ent->next_fire;
}

/* Re-reads the enabled flags that `automations enable/disable` write. */
static void refresh_enabled(struct daemon *d) {
  sqlite3_stmt *s = prep(d, "SELECT name, enabled FROM automations WHERE enabled IS NOT NULL");
  if (!s) return;
  while (sqlite3_step(s) == SQLITE_ROW) {
    struct entry *ent = find_entry(d, (const char *)sqlite3_column_text(s, 0));
    if (!ent || !ent->a) continue;
    int en = sqlite3_column_int(s, 1);
    if (en == ent->enabled) continue;
    ent->enabled = en;
    say(d, "%s: %s", ent->name, en ? "enabled" : "disabled");
    if (en) {
      ent->next_fire = fresh_next(d, ent, util_now());
      save_schedule(d, ent);
      d->next_scan = util_now();
    }
  }
  done(d, s);
}

/* ------------------------------------------------------------- loading */

static void load_one(struct daemon *d, const char *fname, int startup) {
  char name[128];
  size_t n = strlen(fname);
  if (n < 5 || strcmp(fname + n - 4, ".lua") || n - 4 >= sizeof name) return;
  memcpy(name, fname, n - 4);
  name[n - 4] = 0;
  struct entry *ent = find_entry(d, name);
  if (!automation_name_valid(name)) {
    if (!ent) {
      complain(
          "automations/%s: the file name is not a valid automation name "
          "([a-z][a-z0-9_-]*.lua); ignored",
          fname);
      ent = xcalloc(1, sizeof *ent);
      snprintf(ent->name, sizeof ent->name, "%.64s", name);
      ent->deleted = 1; /* remembered only so the message is not repeated */
      ent->next = d->entries;
      d->entries = ent;
    }
    return;
  }
  if (!ent) {
    ent = xcalloc(1, sizeof *ent);
    snprintf(ent->name, sizeof ent->name, "%.64s", name);
    snprintf(ent->chunk, sizeof ent->chunk, "automations/%s", fname);
    snprintf(ent->path, sizeof ent->path, "%s/automations/%s", d->ws, fname);
    ent->next = d->entries;
    d->entries = ent;
  }
  int was_deleted = ent->deleted;
  ent->deleted = 0;
  char *src = NULL;
  size_t len = 0;
  struct err e;
  if (util_read_file(ent->path, 1024 * 1024, &src, &len, &e)) {
    complain("%s: cannot read the file", ent->chunk);
    return;
  }
  if (ent->a && !was_deleted && ent->a->source_len == len && !memcmp(ent->a->source, src, len)) {
    free(src);
    if (ent->load_error) { /* reverted to the good version */
      free(ent->load_error);
      ent->load_error = NULL;
      free(ent->bad_source);
      ent->bad_source = NULL;
      save_load_error(d, ent);
    }
    return;
  }
  if (ent->bad_source && !strcmp(ent->bad_source, src)) {
    free(src);
    return; /* the same broken text: already reported */
  }
  struct automation *a = NULL;
  if (automation_load_source(src, len, ent->chunk, name, &a, &e)) {
    free(ent->load_error);
    ent->load_error = xstrdup(e.msg);
    free(ent->bad_source);
    ent->bad_source = src;
    if (!d->oneshot) /* a manual run reports the error itself */
      complain("%s%s", e.msg, ent->a ? " (keeping the last good version running)" : "");
    save_load_error(d, ent);
    ensure_row(d, ent->name);
    save_load_error(d, ent);
    return;
  }
  free(src);
  free(ent->bad_source);
  ent->bad_source = NULL;
  char oldkey[256] = "";
  if (ent->a) automation_trigger_key(ent->a, oldkey, sizeof oldkey);
  int had = ent->a != NULL;
  automation_free(ent->a);
  ent->a = a;
  if (ent->load_error) {
    free(ent->load_error);
    ent->load_error = NULL;
  }
  ensure_row(d, ent->name);
  save_load_error(d, ent);
  if (!d->oneshot) {
    say(d, "%s: %s (%s, mode %s)", ent->name, had ? "reloaded" : "loaded", a->trigger_text,
        automation_mode_name(a->mode));
    schedule_entry(d, ent, startup);
  }
}

static void drop_pending(struct daemon *d, struct entry *ent);

static void reload_automations(struct daemon *d, int startup) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/automations", d->ws);
  for (struct entry *x = d->entries; x; x = x->next) x->deleted |= 2; /* mark */
  DIR *dh = opendir(dir);
  if (dh) {
    struct dirent *de;
    /* sorted order makes startup output stable */
    char **names = NULL;
    size_t nn = 0;
    while ((de = readdir(dh))) {
      if (de->d_name[0] == '.') continue;
      names = xrealloc(names, (nn + 1) * sizeof *names);
      names[nn++] = xstrdup(de->d_name);
    }
    closedir(dh);
    for (size_t i = 0; i < nn; i++)
      for (size_t j = i + 1; j < nn; j++)
        if (strcmp(names[i], names[j]) > 0) {
          char *t = names[i];
          names[i] = names[j];
          names[j] = t;
        }
    for (size_t i = 0; i < nn; i++) {
      char base[4096];
      snprintf(base, sizeof base, "%s", names[i]);
      struct entry *ent = NULL;
      size_t n = strlen(base);
      if (n > 4 && !strcmp(base + n - 4, ".lua")) {
        base[n - 4] = 0;
        ent = find_entry(d, base);
      }
      if (ent) ent->deleted &= ~2;
      load_one(d, names[i], startup);
      free(names[i]);
    }
    free(names);
  }
  for (struct entry *x = d->entries; x; x = x->next)
    if (x->deleted & 2) {
      x->deleted = 1;
      if (x->a) {
        say(d, "%s: removed (its file is gone)", x->name);
        drop_pending(d, x);
        automation_free(x->a);
        x->a = NULL;
        x->next_fire = 0;
      }
    }
}

/* ------------------------------------------------------------- workers */

static int spawn_worker(struct daemon *d, struct worker **out) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) return -1;
  pid_t ppid = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return -1;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != ppid) _exit(0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_IGN); /* Ctrl-C goes to the scheduler, which decides */
    signal(SIGHUP, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    if (dup2(sv[1], 3) < 0) _exit(127);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      dup2(devnull, 0);
      if (devnull != 0) close(devnull);
    }
    char *argv[] = {d->exe, "--workspace", d->ws, "daemon", "--worker", NULL};
    execv(d->exe, argv);
    _exit(127);
  }
  close(sv[1]);
  fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  struct worker *w = xcalloc(1, sizeof *w);
  w->pid = pid;
  w->fd = sv[0];
  w->idle_since = util_monotonic();
  w->next = d->workers;
  d->workers = w;
  d->nworkers++;
  *out = w;
  return 0;
}

static struct worker *idle_worker(struct daemon *d) {
  for (struct worker *w = d->workers; w; w = w->next)
    if (!w->run && !w->killed && !w->stale && w->fd >= 0) return w;
  if (d->nworkers >= d->o.max_workers) return NULL;
  struct worker *w;
  if (spawn_worker(d, &w)) {
    complain("cannot start a worker process: %s", strerror(errno));
    return NULL;
  }
  return w;
}

static void close_worker_fd(struct worker *w) {
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
}

/* --------------------------------------------------------------- runs */

static void print_finish(struct daemon *d, struct run *r, double ms) {
  const char *st = r->status;
  if (!strcmp(st, "ok")) {
    if (r->result) {
      struct sbuf b = {0};
      util_escape_text(&b, r->result, strlen(r->result), 160);
      say(d, "%s: ok in %.0f ms -> %s", r->ent->name, ms, b.s ? b.s : "");
      sbuf_free(&b);
    } else {
      say(d, "%s: ok in %.0f ms", r->ent->name, ms);
    }
  } else {
    struct sbuf b = {0};
    const char *er = r->error ? r->error : "";
    util_escape_text(&b, er, strlen(er), 400);
    say(d, "%s: %s after %.0f ms: %s", r->ent->name, st, ms, b.s ? b.s : "");
    sbuf_free(&b);
  }
}

/* Records the end of an active run; state_json (may be NULL) is persisted
 * only for status "ok". Detaches the run from its worker. */
static void finish_run(struct daemon *d, struct run *r, const char *status, const char *result,
                       const char *error, const cJSON *state, int tool_calls) {
  double now = util_now();
  r->finished = 1;
  r->status = xstrdup(status);
  r->result = result ? xstrdup(result) : NULL;
  r->error = error ? xstrdup(error) : NULL;
  tx(d);
  sqlite3_stmt *s = prep(d,
                         "UPDATE runs SET status = ?, finished = ?, result = ?, error = ?, "
                         "tool_calls = ? WHERE id = ?");
  if (s) {
    sqlite3_bind_text(s, 1, status, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(s, 2, now);
    bind_text_or_null(s, 3, result);
    bind_text_or_null(s, 4, error);
    sqlite3_bind_int(s, 5, tool_calls);
    sqlite3_bind_text(s, 6, r->id, -1, SQLITE_TRANSIENT);
    step_done(d, s, "journal update");
  }
  int ok = !strcmp(status, "ok");
  char *st = ok && state ? json_print(state, 0) : NULL;
  if (st && !strcmp(st, "[]")) { /* an empty table comes back as an array */
    free(st);
    st = xstrdup("{}");
  }
  s = prep(d, st ? "UPDATE automations SET last_run = ?, last_status = ?, state = ? WHERE name = ?"
                 : "UPDATE automations SET last_run = ?, last_status = ? WHERE name = ?");
  if (s) {
    int i = 1;
    sqlite3_bind_double(s, i++, r->started);
    sqlite3_bind_text(s, i++, status, -1, SQLITE_TRANSIENT);
    if (st) sqlite3_bind_text(s, i++, st, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, i++, r->ent->name, -1, SQLITE_TRANSIENT);
    step_done(d, s, "save automation state");
  }
  free(st);
  print_finish(d, r, (now - r->started) * 1000);
  if (r->w) {
    r->w->run = NULL;
    r->w->idle_since = util_monotonic();
    r->w = NULL;
  }
  r->ent->running--;
}

static void unlink_run(struct daemon *d, struct run *r) {
  for (struct run **p = &d->runs; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      break;
    }
}

static void free_run(struct run *r) {
  cJSON_Delete(r->trigger);
  cJSON_Delete(r->args);
  free(r->status);
  free(r->result);
  free(r->error);
  free(r);
}

/* Kills the worker of an active run and records it with status/error. */
static void kill_run(struct daemon *d, struct run *r, const char *status, const char *error) {
  struct worker *w = r->w;
  if (w) {
    kill(w->pid, SIGKILL);
    w->killed = 1;
    close_worker_fd(w);
  }
  finish_run(d, r, status, NULL, error, NULL, 0);
}

static void drop_pending(struct daemon *d, struct entry *ent) {
  for (struct run *r = d->runs, *nx; r; r = nx) {
    nx = r->next;
    if (r->ent == ent && !r->w && !r->finished) {
      ent->pending--;
      unlink_run(d, r);
      free_run(r);
    }
  }
}

static int start_run(struct daemon *d, struct run *r, struct worker *w) {
  struct entry *ent = r->ent;
  const struct automation *a = ent->a;
  double now = util_now();
  cJSON *ctx = cJSON_CreateObject();
  cJSON *state = NULL;
  sqlite3_stmt *s = prep(d, "SELECT state, last_run, last_status FROM automations WHERE name = ?");
  if (s) {
    sqlite3_bind_text(s, 1, ent->name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(s) == SQLITE_ROW) {
      const char *t = (const char *)sqlite3_column_text(s, 0);
      state = json_parse_str(t, 0, NULL);
      if (sqlite3_column_type(s, 1) != SQLITE_NULL) {
        cJSON *lr = cJSON_CreateObject();
        cJSON_AddNumberToObject(lr, "time", sqlite3_column_double(s, 1));
        const char *ls = (const char *)sqlite3_column_text(s, 2);
        cJSON_AddStringToObject(lr, "status", ls ? ls : "");
        cJSON_AddItemToObject(ctx, "last_run", lr);
      }
    }
    done(d, s);
  }
  if (!cJSON_IsObject(state) && !cJSON_IsArray(state)) {
    cJSON_Delete(state);
    state = cJSON_CreateObject();
  }
  cJSON_AddItemToObject(ctx, "state", state);
  cJSON_AddNumberToObject(ctx, "now", now);
  cJSON_AddStringToObject(ctx, "run_id", r->id);
  cJSON_AddItemToObject(ctx, "trigger", cJSON_Duplicate(r->trigger, 1));
  cJSON_AddItemToObject(ctx, "args", r->args ? cJSON_Duplicate(r->args, 1) : cJSON_CreateObject());
  cJSON *job = cJSON_CreateObject();
  cJSON_AddStringToObject(job, "run_id", r->id);
  cJSON_AddStringToObject(job, "name", ent->name);
  cJSON_AddStringToObject(job, "chunk", a->chunk);
  cJSON_AddStringToObject(job, "source", a->source);
  cJSON_AddItemToObject(job, "ctx", ctx);
  r->timeout = a->timeout_s > 0 ? a->timeout_s : (d->cfg ? d->cfg->limits.deadline_s : 30);
  if (!(r->timeout > 0)) r->timeout = 30;
  cJSON_AddNumberToObject(job, "timeout", r->timeout);
  char *text = json_print(job, 0);
  cJSON_Delete(job);
  r->started = now;
  r->kill_at = util_monotonic() + r->timeout + d->o.kill_grace_s;
  r->w = w;
  w->run = r;
  ent->running++;
  journal_insert(d, r->id, ent->name, r->trigger, "running", now, 0, NULL, w->pid);
  const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(r->trigger, "kind"));
  say(d, "%s: started %s (%s, worker %d)", ent->name, r->id, kind ? kind : "?", (int)w->pid);
  int rc = text ? send_frame(w->fd, text) : -1;
  free(text);
  if (rc) kill_run(d, r, "crashed", "could not hand the run to a worker process");
  return 0;
}

static int startable(const struct run *r) {
  const struct entry *ent = r->ent;
  if (!ent->a) return 0;
  if (ent->a->mode == MODE_PARALLEL) return ent->running < ent->a->max;
  return ent->running == 0;
}

static void start_pending(struct daemon *d) {
  if (d->stopping) return;
  for (struct run *r = d->runs; r; r = r->next) {
    if (r->w || r->finished || !startable(r)) continue;
    struct worker *w = idle_worker(d);
    if (!w) return;
    r->ent->pending--;
    start_run(d, r, w);
  }
}

static void new_run(struct daemon *d, struct entry *ent, cJSON *trigger, cJSON *args) {
  struct run *r = xcalloc(1, sizeof *r);
  runtime_new_run_id(r->id);
  r->ent = ent;
  r->trigger = trigger;
  r->args = args;
  cJSON *slot = cJSON_GetObjectItem(trigger, "slot");
  r->slot = slot ? slot->valuedouble : util_now();
  struct run **p = &d->runs;
  while (*p) p = &(*p)->next;
  *p = r;
  ent->pending++;
}

/* A trigger fired: apply the automation's mode. Takes ownership of trigger
 * and args. */
static void fire(struct daemon *d, struct entry *ent, cJSON *trigger, cJSON *args) {
  const struct automation *a = ent->a;
  int busy = ent->running + ent->pending;
  char why[200];
  switch (a->mode) {
    case MODE_SINGLE:
      if (busy) {
        snprintf(why, sizeof why, "the previous run is still running (mode single)");
        journal_skipped(d, ent, trigger, why);
        goto drop;
      }
      break;
    case MODE_QUEUED:
      if (ent->pending >= a->max) {
        snprintf(why, sizeof why, "%d run(s) already queued (mode queued, max %d)", ent->pending,
                 a->max);
        journal_skipped(d, ent, trigger, why);
        goto drop;
      }
      break;
    case MODE_PARALLEL:
      if (busy >= a->max) {
        snprintf(why, sizeof why, "%d run(s) already running (mode parallel, max %d)", busy,
                 a->max);
        journal_skipped(d, ent, trigger, why);
        goto drop;
      }
      break;
    case MODE_RESTART:
      drop_pending(d, ent);
      for (struct run *r = d->runs; r; r = r->next)
        if (r->ent == ent && r->w && !r->finished)
          kill_run(d, r, "interrupted", "stopped for a newer run (mode restart)");
      break;
  }
  new_run(d, ent, trigger, args);
  return;
drop:
  cJSON_Delete(trigger);
  cJSON_Delete(args);
}

/* ------------------------------------------------------ worker replies */

static void handle_reply(struct daemon *d, struct worker *w, cJSON *reply) {
  struct run *r = w->run;
  const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(reply, "run_id"));
  if (!r || !id || strcmp(id, r->id)) return; /* a run we already gave up on */
  const char *status = cJSON_GetStringValue(cJSON_GetObjectItem(reply, "status"));
  const char *result = cJSON_GetStringValue(cJSON_GetObjectItem(reply, "result"));
  const char *error = cJSON_GetStringValue(cJSON_GetObjectItem(reply, "error"));
  const cJSON *state = cJSON_GetObjectItem(reply, "state");
  int tc = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(reply, "tool_calls"));
  if (tc < 0) tc = 0;
  if (!status) status = "failed";
  finish_run(d, r, status, result, error, state, tc);
}

static void read_worker(struct daemon *d, struct worker *w) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(w->fd, buf, sizeof buf);
    if (n > 0) {
      sbuf_append(&w->in, buf, (size_t)n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) close_worker_fd(w); /* EOF: the reap tells us why */
    break;
  }
  int bad;
  cJSON *f;
  while ((f = take_frame(&w->in, &bad))) {
    handle_reply(d, w, f);
    cJSON_Delete(f);
  }
  if (bad) {
    complain("worker %d sent a malformed reply; replacing it", (int)w->pid);
    if (w->run)
      kill_run(d, w->run, "crashed", "the worker process sent a malformed reply");
    else {
      kill(w->pid, SIGKILL);
      w->killed = 1;
      close_worker_fd(w);
    }
  }
}

static void reap(struct daemon *d) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    struct worker **pp = &d->workers, *w = NULL;
    for (; *pp; pp = &(*pp)->next)
      if ((*pp)->pid == pid) {
        w = *pp;
        break;
      }
    if (!w) continue;
    if (w->fd >= 0) read_worker(d, w); /* a reply written just before exit */
    if (w->run) {
      char why[200];
      if (WIFSIGNALED(status))
        snprintf(why, sizeof why, "the worker process died: signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
      else
        snprintf(why, sizeof why, "the worker process exited with status %d during the run",
                 WEXITSTATUS(status));
      finish_run(d, w->run, "crashed", NULL, why, NULL, 0);
    } else if (!w->killed && !d->stopping && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      complain("worker %d ended unexpectedly (status %d)", (int)pid, status);
    }
    close_worker_fd(w);
    sbuf_free(&w->in);
    *pp = w->next;
    free(w);
    d->nworkers--;
  }
}

/* ------------------------------------------------------------- events */

static void process_events(struct daemon *d) {
  for (int round = 0; round < 100; round++) {
    sqlite3_stmt *s = prep(d, "SELECT id, name, payload FROM event_queue ORDER BY id LIMIT 200");
    if (!s) return;
    int n = 0;
    long long last = 0;
    tx(d);
    while (sqlite3_step(s) == SQLITE_ROW) {
      n++;
      last = sqlite3_column_int64(s, 0);
      const char *name = (const char *)sqlite3_column_text(s, 1);
      const char *payload = (const char *)sqlite3_column_text(s, 2);
      int matched = 0;
      for (struct entry *ent = d->entries; ent; ent = ent->next) {
        if (!ent->a || ent->deleted || !ent->enabled || ent->a->trig != TRIG_EVENT) continue;
        if (fnmatch(ent->a->event, name, 0) != 0) continue;
        matched++;
        cJSON *t = make_trigger(ent, "event", 0);
        cJSON_ReplaceItemInObject(t, "name", cJSON_CreateString(name));
        cJSON *p = json_parse_str(payload, 0, NULL);
        cJSON_AddItemToObject(t, "payload", p ? p : cJSON_CreateNull());
        cJSON_AddNumberToObject(t, "event_id", (double)last);
        say(d, "%s: event %s", ent->name, name);
        fire(d, ent, t, NULL);
      }
      if (!matched) say(d, "event %s: no automation listens for it", name);
    }
    done(d, s);
    if (!n) return;
    s = prep(d, "DELETE FROM event_queue WHERE id <= ?");
    if (s) {
      sqlite3_bind_int64(s, 1, last);
      step_done(d, s, "consume events");
    }
    tx_commit(d);
  }
}

/* ------------------------------------------------------------- timing */

static void scan_due(struct daemon *d) {
  double now = util_now();
  if (d->next_scan > now) return;
  double min = 0;
  for (struct entry *ent = d->entries; ent; ent = ent->next) {
    if (!ent->a || ent->deleted || ent->next_fire <= 0) continue;
    if (ent->enabled && ent->next_fire <= now) {
      double slot = ent->next_fire;
      const struct automation *a = ent->a;
      if (a->trig == TRIG_EVERY)
        ent->next_fire = every_after(a, slot, now);
      else if (a->trig == TRIG_CRON)
        ent->next_fire = automation_next_after(a, fmax(slot, now));
      else
        ent->next_fire = 0;
      save_schedule(d, ent);
      fire(d, ent, make_trigger(ent, automation_trig_name(a->trig), slot), NULL);
    }
    if (ent->enabled && ent->next_fire > 0 && (min == 0 || ent->next_fire < min))
      min = ent->next_fire;
  }
  d->next_scan = min;
}

static void check_deadlines(struct daemon *d, double *wake_mono) {
  double mono = util_monotonic();
  for (struct run *r = d->runs; r; r = r->next) {
    if (!r->w || r->finished) continue;
    if (mono >= r->kill_at) {
      char why[200];
      snprintf(why, sizeof why,
               "the run overstayed its timeout of %gs and its worker was killed "
               "(stuck in a call the sandbox cannot interrupt)",
               r->timeout);
      kill_run(d, r, "timeout", why);
    } else if (*wake_mono == 0 || r->kill_at < *wake_mono) {
      *wake_mono = r->kill_at;
    }
  }
}

static void sweep_finished(struct daemon *d) {
  for (struct run *r = d->runs, *nx; r; r = nx) {
    nx = r->next;
    if (r->finished && !d->oneshot) {
      unlink_run(d, r);
      free_run(r);
    }
  }
}

static int active_runs(struct daemon *d) {
  int n = 0;
  for (struct run *r = d->runs; r; r = r->next)
    if (r->w && !r->finished) n++;
  return n;
}

/* Journal retention: keeps the newest keep_runs rows of each automation.
 * Runs at startup and then every 10 minutes. */
static void prune_journal(struct daemon *d) {
  double now = util_monotonic();
  if (d->next_prune > now) return;
  d->next_prune = now + 600;
  int pruned = 0;
  for (struct entry *ent = d->entries; ent; ent = ent->next) {
    /* The events of the pruned runs go with them. */
    sqlite3_stmt *ev = prep(d,
                            "DELETE FROM events WHERE run_id IN (SELECT id FROM runs WHERE kind = "
                            "'automation' AND name = ?1 AND status != 'running' AND started < "
                            "(SELECT started FROM runs WHERE kind = 'automation' AND name = ?1 "
                            "ORDER BY started DESC LIMIT 1 OFFSET ?2))");
    sqlite3_stmt *s = prep(d,
                           "DELETE FROM runs WHERE kind = 'automation' AND name = ?1 AND "
                           "status != 'running' AND started < (SELECT started FROM runs WHERE "
                           "kind = 'automation' AND name = ?1 ORDER BY started DESC LIMIT 1 "
                           "OFFSET ?2)");
    if (!s || !ev) return;
    tx(d);
    sqlite3_bind_text(ev, 1, ent->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(ev, 2, d->o.keep_runs - 1);
    step_done(d, ev, "prune the journal's events");
    sqlite3_bind_text(s, 1, ent->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 2, d->o.keep_runs - 1);
    step_done(d, s, "prune the journal");
    pruned += sqlite3_changes(store_db(d->st));
  }
  tx_commit(d);
  if (pruned)
    say(d, "journal: pruned %d old run(s) (keeping %d per automation)", pruned, d->o.keep_runs);
  if (d->o.retain_s > 0) {
    long long runs, events;
    struct err e = {0};
    if (store_prune_runs(d->st, util_now() - d->o.retain_s, &runs, &events, &e))
      say(d, "journal: pruning by age failed: %s", e.msg);
    else if (runs)
      say(d, "journal: pruned %lld run(s) and %lld event(s) older than %gs", runs, events,
          d->o.retain_s);
  }
}

/* Idle workers past their use: stale ones at once, extra ones after 30 s. */
static void retire_workers(struct daemon *d) {
  double mono = util_monotonic();
  int idle = 0;
  for (struct worker *w = d->workers; w; w = w->next) {
    if (w->run || w->killed || w->fd < 0) continue;
    idle++;
    if (w->stale || d->stopping || (idle > 2 && mono - w->idle_since > 30)) {
      close_worker_fd(w); /* EOF: the worker exits; reaped on SIGCHLD */
      w->killed = 1;
    }
  }
}

/* ------------------------------------------------------------ inotify */

static void watch_setup(struct daemon *d) {
  d->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  d->wd_auto = d->wd_root = d->wd_state = d->wd_skills = -1;
  if (d->ino < 0) return;
  char p[4200];
  uint32_t m = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE;
  snprintf(p, sizeof p, "%s/automations", d->ws);
  d->wd_auto = inotify_add_watch(d->ino, p, m);
  d->wd_root = inotify_add_watch(
      d->ino, d->ws, IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE);
  snprintf(p, sizeof p, "%s/.luagent", d->ws);
  d->wd_state = inotify_add_watch(d->ino, p, IN_CLOSE_WRITE);
  snprintf(p, sizeof p, "%s/skills", d->ws);
  d->wd_skills = inotify_add_watch(d->ino, p, m | IN_MODIFY);
  /* skills/<name>/ folders too, so an edited skill.lua reloads */
  DIR *dh = opendir(p);
  if (dh) {
    struct dirent *de;
    while ((de = readdir(dh))) {
      if (de->d_name[0] == '.') continue;
      char sp[4600];
      snprintf(sp, sizeof sp, "%s/%s", p, de->d_name);
      inotify_add_watch(d->ino, sp, m | IN_ONLYDIR);
    }
    closedir(dh);
  }
}

/* Returns 1 if an event asks for a look at the event queue. */
static int watch_read(struct daemon *d) {
  char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
  int wake = 0;
  for (;;) {
    ssize_t n = read(d->ino, buf, sizeof buf);
    if (n <= 0) break;
    for (char *p = buf; p < buf + n;) {
      struct inotify_event *ev = (struct inotify_event *)p;
      p += sizeof *ev + ev->len;
      const char *nm = ev->len ? ev->name : "";
      if (ev->wd == d->wd_state) {
        if (!strcmp(nm, "wake")) wake = 1;
        continue;
      }
      if (ev->wd == d->wd_root) {
        if (!strcmp(nm, "luagent.lua") || !strcmp(nm, "hooks.lua") || !strcmp(nm, "automations") ||
            !strcmp(nm, "skills")) {
          d->reload_full = 1;
          d->reload_at = util_monotonic() + 0.2;
        }
        continue;
      }
      if (nm[0] == '.' || (ev->wd == d->wd_auto && !strstr(nm, ".lua"))) continue;
      if (ev->wd != d->wd_auto) d->reload_full = 1; /* a skill changed */
      d->reload_at = util_monotonic() + 0.2;
    }
  }
  return wake;
}

static void reload(struct daemon *d, int full) {
  if (full) {
    struct config *c = NULL;
    struct err e;
    if (config_load(d->ws, &c, &e)) {
      /* keep the workers that run with the last good configuration */
      complain("%s (keeping the previous configuration)", e.msg);
    } else {
      config_free(d->cfg);
      d->cfg = c;
      for (struct worker *w = d->workers; w; w = w->next) w->stale = 1;
    }
    if (d->ino >= 0) {
      close(d->ino);
      watch_setup(d); /* picks up new skill folders */
    }
  }
  reload_automations(d, 0);
  d->next_scan = util_now();
}

/* ---------------------------------------------------------------- loop */

static void loop_once(struct daemon *d, double max_wait) {
  start_pending(d); /* runs that became due or startable since the last pass */
  tx_commit(d);
  double now = util_now(), mono = util_monotonic();
  double wake_mono = 0;
  check_deadlines(d, &wake_mono);
  double timeout = max_wait;
  if (!d->stopping && d->next_scan > 0) timeout = fmin(timeout, d->next_scan - now);
  if (wake_mono > 0) timeout = fmin(timeout, wake_mono - mono);
  if (d->reload_at > 0) timeout = fmin(timeout, d->reload_at - mono);
  if (d->stopping) timeout = fmin(timeout, d->stop_deadline - mono);
  if (d->ino < 0 && !d->oneshot) timeout = fmin(timeout, 2.0); /* no inotify: poll events */
  if (timeout < 0) timeout = 0;

  struct pollfd pf[2 + 256];
  struct worker *pw[256];
  int n = 0;
  pf[n++] = (struct pollfd){.fd = d->sigpipe[0], .events = POLLIN};
  if (d->ino >= 0) pf[n++] = (struct pollfd){.fd = d->ino, .events = POLLIN};
  int base = n;
  for (struct worker *w = d->workers; w && n - base < (int)(sizeof pw / sizeof pw[0]); w = w->next)
    if (w->fd >= 0) {
      pw[n - base] = w;
      pf[n++] = (struct pollfd){.fd = w->fd, .events = POLLIN};
    }
  int pr = poll(pf, (nfds_t)n, (int)ceil(timeout * 1000));
  int wake = 0;
  if (pr > 0) {
    if (pf[0].revents) {
      char buf[256];
      while (read(d->sigpipe[0], buf, sizeof buf) > 0) {
      }
    }
    if (d->ino >= 0 && pf[1].revents) wake |= watch_read(d);
    for (int i = base; i < n; i++)
      if (pf[i].revents && pw[i - base]->fd >= 0) read_worker(d, pw[i - base]);
  }
  if (sig_chld) {
    sig_chld = 0;
    reap(d);
  }
  if (sig_term && !d->stopping && !d->oneshot) {
    d->stopping = 1;
    d->stop_deadline = util_monotonic() + d->o.grace_s;
    int act = active_runs(d);
    if (act)
      say(d, "stopping: %d run(s) in progress, waiting up to %gs", act, d->o.grace_s);
    else
      say(d, "stopping");
    for (struct run *r = d->runs, *nx; r; r = nx) {
      nx = r->next;
      if (!r->w && !r->finished) { /* queued, never started: journal, drop */
        journal_skipped(d, r->ent, r->trigger, "the daemon stopped before the run could start");
        r->ent->pending--;
        unlink_run(d, r);
        free_run(r);
      }
    }
  } else if (sig_term > 1 && d->stopping) {
    d->stop_deadline = 0; /* a second Ctrl-C: stop now */
  }
  if (sig_hup && !d->oneshot) {
    sig_hup = 0;
    say(d, "SIGHUP: reloading");
    reload(d, 1);
  }
  if (d->reload_at > 0 && util_monotonic() >= d->reload_at && !d->oneshot) {
    int full = d->reload_full;
    d->reload_at = 0;
    d->reload_full = 0;
    reload(d, full);
  }
  if (!d->oneshot && !d->stopping) {
    prune_journal(d);
    if (wake || d->ino < 0) {
      refresh_enabled(d);
      process_events(d);
    }
    scan_due(d);
  }
  if (d->stopping && util_monotonic() >= d->stop_deadline)
    for (struct run *r = d->runs; r; r = r->next)
      if (r->w && !r->finished)
        kill_run(d, r, "interrupted", "the daemon stopped before the run finished");
  start_pending(d);
  retire_workers(d);
  sweep_finished(d);
  tx_commit(d);
}

static void install_signals(struct daemon *d) {
  if (pipe2(d->sigpipe, O_CLOEXEC | O_NONBLOCK)) {
    d->sigpipe[0] = d->sigpipe[1] = -1;
  }
  sig_wfd = d->sigpipe[1];
  sig_term = sig_hup = sig_chld = 0;
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
}

static int daemon_init(struct daemon *d, const struct daemon_opts *o, struct err *e) {
  memset(d, 0, sizeof *d);
  d->o = *o;
  if (d->o.grace_s <= 0) d->o.grace_s = 10;
  if (d->o.kill_grace_s <= 0) d->o.kill_grace_s = 2;
  if (d->o.max_workers <= 0) d->o.max_workers = 32;
  if (d->o.max_workers > 250) d->o.max_workers = 250;
  if (d->o.keep_runs <= 0) d->o.keep_runs = 5000;
  d->lock_fd = -1;
  d->ino = -1;
  d->sigpipe[0] = d->sigpipe[1] = -1;
  if (!realpath(o->workspace, d->ws))
    return err_set(e, ERR_NOTFOUND, "workspace", "workspace '%s' not found", o->workspace);
  ssize_t n = readlink("/proc/self/exe", d->exe, sizeof d->exe - 1);
  if (n <= 0) return err_set(e, ERR_IO, "internal", "cannot find the luagent executable");
  d->exe[n] = 0;
  if (config_load(d->ws, &d->cfg, e)) return ERR_INVALID;
  /* daemon = { retain = "30d" } in luagent.lua, unless --retain was given. */
  const cJSON *dc = config_get(d->cfg, "daemon");
  for (const cJSON *k = dc ? dc->child : NULL; k; k = k->next) {
    int line = config_line_of(d->cfg->path, k->string);
    if (strcmp(k->string, "retain"))
      return err_set(e, ERR_INVALID, "config", "luagent.lua:%d: daemon: unknown key '%s' (known: retain)",
                     line, k->string);
    double s;
    struct err de = {0};
    if (!cJSON_IsString(k) || duration_parse(k->valuestring, &s, &de))
      return err_set(e, ERR_INVALID, "config",
                     "luagent.lua:%d: daemon.retain: expected a duration such as \"30d\"%s%s", line,
                     de.msg[0] ? ": " : "", de.msg);
    if (d->o.retain_s <= 0) d->o.retain_s = s;
  }
  return 0;
}

/* Undoes install_signals once the daemon (or a manual run) is done. */
static void restore_signals(void) {
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  signal(SIGCHLD, SIG_DFL);
}

static void daemon_cleanup(struct daemon *d) {
  /* close idle workers; they exit on EOF */
  for (struct worker *w = d->workers; w; w = w->next) {
    if (w->run) kill(w->pid, SIGKILL);
    close_worker_fd(w);
  }
  double until = util_monotonic() + 3;
  while (d->workers && util_monotonic() < until) {
    reap(d);
    if (d->workers) util_sleep(0.01);
  }
  for (struct worker *w = d->workers, *nx; w; w = nx) {
    nx = w->next;
    kill(w->pid, SIGKILL);
    waitpid(w->pid, NULL, 0);
    sbuf_free(&w->in);
    free(w);
  }
  d->workers = NULL;
  for (struct run *r = d->runs, *nx; r; r = nx) {
    nx = r->next;
    free_run(r);
  }
  for (struct entry *x = d->entries, *nx; x; x = nx) {
    nx = x->next;
    automation_free(x->a);
    free(x->load_error);
    free(x->bad_source);
    free(x);
  }
  tx_commit(d);
  for (int i = 0; i < d->nstmts; i++) sqlite3_finalize(d->stmts[i].st);
  d->nstmts = 0;
  store_close(d->st);
  config_free(d->cfg);
  if (d->ino >= 0) close(d->ino);
  if (d->sigpipe[0] >= 0) close(d->sigpipe[0]);
  if (d->sigpipe[1] >= 0) close(d->sigpipe[1]);
  sig_wfd = -1;
  if (d->lock_fd >= 0) close(d->lock_fd);
}

static int take_lock(struct daemon *d, struct err *e) {
  char p[4200], dir[4200];
  snprintf(dir, sizeof dir, "%s/.luagent", d->ws);
  if (util_mkdirs(dir, 0700, e)) return ERR_IO;
  lock_path(d->ws, p, sizeof p);
  d->lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (d->lock_fd < 0)
    return err_set(e, ERR_IO, "lock", "cannot open .luagent/daemon.lock: %s", strerror(errno));
  if (flock(d->lock_fd, LOCK_EX | LOCK_NB)) {
    char buf[32] = {0};
    ssize_t r = pread(d->lock_fd, buf, sizeof buf - 1, 0);
    int pid = r > 0 ? atoi(buf) : 0;
    return err_set(e, ERR_INVALID, "daemon_running",
                   "another daemon (pid %d) is already running on workspace %s; stop it first "
                   "(kill %d)",
                   pid, d->ws, pid);
  }
  char buf[32];
  int len = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
  if (ftruncate(d->lock_fd, 0) || pwrite(d->lock_fd, buf, (size_t)len, 0) != len) {
  }
  return 0;
}

/* Marks runs a previous daemon left "running" as interrupted, unless their
 * worker is still alive (a concurrent `automations run`). */
static void mark_interrupted(struct daemon *d) {
  sqlite3_stmt *s = prep(d,
                         "SELECT id, worker_pid FROM runs WHERE status = 'running' AND "
                         "kind = 'automation'");
  if (!s) return;
  tx(d);
  int n = 0;
  while (sqlite3_step(s) == SQLITE_ROW) {
    pid_t pid = (pid_t)sqlite3_column_int64(s, 1);
    if (pid > 0 && kill(pid, 0) == 0) {
      char p1[64], l1[4096] = "";
      snprintf(p1, sizeof p1, "/proc/%d/exe", (int)pid);
      ssize_t k = readlink(p1, l1, sizeof l1 - 1);
      if (k > 0) {
        l1[k] = 0;
        if (!strcmp(l1, d->exe)) continue;
      }
    }
    sqlite3_stmt *u = prep(d,
                           "UPDATE runs SET status = 'interrupted', finished = ?, error = "
                           "'the daemon stopped while this run was running' WHERE id = ?");
    if (!u) continue;
    sqlite3_bind_double(u, 1, util_now());
    sqlite3_bind_text(u, 2, (const char *)sqlite3_column_text(s, 0), -1, SQLITE_TRANSIENT);
    step_done(d, u, "mark interrupted");
    n++;
  }
  done(d, s);
  tx_commit(d);
  if (n) say(d, "marked %d run(s) left running by a previous daemon as interrupted", n);
}

int daemon_main(const struct daemon_opts *o, struct err *e) {
  struct daemon d;
  int rc = daemon_init(&d, o, e);
  if (!rc) rc = take_lock(&d, e);
  if (!rc) rc = store_open(d.ws, &d.st, e);
  if (rc) {
    daemon_cleanup(&d);
    return rc;
  }
  install_signals(&d);
  say(&d, "luagent daemon %s on %s (pid %d)", LUAGENT_VERSION, d.ws, (int)getpid());
  mark_interrupted(&d);
  char adir[4200];
  snprintf(adir, sizeof adir, "%s/automations", d.ws);
  struct stat sst;
  if (stat(adir, &sst)) say(&d, "no automations/ folder yet; waiting for one");
  watch_setup(&d);
  reload_automations(&d, 1);
  process_events(&d);
  tx_commit(&d);
  /* two warm workers, so the first runs do not pay for a start */
  for (int i = 0; i < 2 && d.nworkers < d.o.max_workers; i++) {
    struct worker *w;
    if (spawn_worker(&d, &w)) break;
  }
  prune_journal(&d); /* retention at startup, then every 10 minutes */
  while (!d.stopping || active_runs(&d) > 0) loop_once(&d, 60);
  say(&d, "stopped");
  daemon_cleanup(&d);
  restore_signals();
  return 0;
}

int daemon_run_manual(const char *workspace, const char *name, const cJSON *args, char **status,
                      char **result, char **error, struct err *e) {
  *status = *result = *error = NULL;
  struct daemon_opts o = {.workspace = workspace};
  struct daemon d;
  int rc = daemon_init(&d, &o, e);
  if (!rc) rc = store_open(d.ws, &d.st, e);
  if (rc) {
    daemon_cleanup(&d);
    return rc;
  }
  d.oneshot = 1;
  d.o.max_workers = 1;
  if (!automation_name_valid(name)) {
    daemon_cleanup(&d);
    return err_set(e, ERR_INVALID, "invalid_args", "'%s' is not a valid automation name", name);
  }
  char fname[128];
  snprintf(fname, sizeof fname, "%s.lua", name);
  char path[4400];
  snprintf(path, sizeof path, "%s/automations/%s", d.ws, fname);
  struct stat sst;
  if (stat(path, &sst)) {
    daemon_cleanup(&d);
    return err_set(e, ERR_NOTFOUND, "not_found", "no automation '%s' (automations/%s not found)",
                   name, fname);
  }
  load_one(&d, fname, 0);
  struct entry *ent = find_entry(&d, name);
  if (!ent || !ent->a) {
    err_set(e, ERR_INVALID, "invalid_automation", "%s",
            ent && ent->load_error ? ent->load_error : "cannot load the automation");
    daemon_cleanup(&d);
    return ERR_INVALID;
  }
  d.o.quiet = 1;
  install_signals(&d);
  cJSON *trig = make_trigger(ent, "manual", 0);
  new_run(&d, ent, trig, args ? cJSON_Duplicate(args, 1) : NULL);
  struct run *r = d.runs;
  start_pending(&d);
  tx_commit(&d);
  while (!r->finished) {
    loop_once(&d, 1);
    if (sig_term && !r->finished) {
      kill_run(&d, r, "interrupted", "stopped by the operator");
      tx_commit(&d);
    }
  }
  *status = xstrdup(r->status);
  *result = r->result ? xstrdup(r->result) : NULL;
  *error = r->error ? xstrdup(r->error) : NULL;
  daemon_cleanup(&d);
  restore_signals();
  return 0;
}
