/* daemon_runs.c - worker supervision: spawning, runs, replies, reaping
 * (see daemon_impl.h). */
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
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "automation.h"
#include "call.h"
#include "config.h"
#include "events.h"
#include "json.h"
#include "sandbox.h"
#include "security.h"
#include "skills.h"
#include "store.h"
#include "util.h"

/* ------------------------------------------------------------- workers */

int daemon__spawn_worker(struct daemon *d, struct worker **out) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) return -1;
  pid_t ppid = getpid();
  int ffd = daemon__cl_fence_fd(d); /* the cluster's fence deadline, for the worker */
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
    if (ffd >= 0) {
      if (ffd == DAEMON_FENCE_FD) fcntl(ffd, F_SETFD, 0); /* dup2 would keep CLOEXEC */
      else if (dup2(ffd, DAEMON_FENCE_FD) < 0) _exit(127);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      dup2(devnull, 0);
      if (devnull != 0) close(devnull);
    }
    char *argv[] = {d->exe, "--workspace", d->ws, "daemon", "--worker", NULL, NULL, NULL};
    if (d->skills_gen[0]) { /* the checked copy of skills/ (daemon_skills.c) */
      argv[5] = "--skills-dir";
      argv[6] = d->skills_gen;
    }
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
  if (daemon__spawn_worker(d, &w)) {
    daemon__complain("cannot start a worker process: %s", strerror(errno));
    return NULL;
  }
  return w;
}

void daemon__close_worker_fd(struct worker *w) {
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
      daemon__say(d, "%s: ok in %.0f ms -> %s", r->ent->name, ms, b.s ? b.s : "");
      sbuf_free(&b);
    } else {
      daemon__say(d, "%s: ok in %.0f ms", r->ent->name, ms);
    }
  } else {
    struct sbuf b = {0};
    const char *er = r->error ? r->error : "";
    util_escape_text(&b, er, strlen(er), 400);
    daemon__say(d, "%s: %s after %.0f ms: %s", r->ent->name, st, ms, b.s ? b.s : "");
    sbuf_free(&b);
  }
}

/* Records the end of an active run; state_json (may be NULL) is persisted
 * only for status "ok". Detaches the run from its worker. */
/* One row of the run's events; seq follows whatever the run already has
 * (a delegate's approval events may be there). */
static void journal_event(struct daemon *d, const char *run_id, double ts, const char *type,
                          const cJSON *data) {
  sqlite3_stmt *s =
      daemon__prep(d,
                   "INSERT INTO events(run_id, seq, ts, type, data) VALUES (?1, "
                   "(SELECT coalesce(max(seq), 0) + 1 FROM events WHERE run_id = ?1), "
                   "?2, ?3, ?4)");
  if (!s) return;
  char *text = data ? json_print(data, 0) : NULL;
  sqlite3_bind_text(s, 1, run_id, -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(s, 2, ts);
  sqlite3_bind_text(s, 3, type, -1, SQLITE_TRANSIENT);
  daemon__bind_text_or_null(s, 4, text);
  daemon__step_done(d, s, "journal event");
  free(text);
}

/* The run as events, so `runs show` replays an automation run like any
 * other: run_start, what the worker sent (print, log, script tool calls,
 * a note on what was not kept), run_end. The events' seq starts after any
 * the run has (journal_event). */
static void journal_run_events(struct daemon *d, struct run *r, const char *status,
                               const char *result, const char *error, int tool_calls, double now) {
  /* A quiet run (no output, no tool calls) costs no rows: `runs show`
   * makes its run_start and run_end from the runs row. */
  if (!r->events && !r->events_cut) return;
  cJSON *start = cJSON_CreateObject();
  cJSON_AddStringToObject(start, "kind", "automation");
  cJSON_AddStringToObject(start, "name", r->ent->name);
  if (r->trigger) cJSON_AddItemToObject(start, "trigger", cJSON_Duplicate(r->trigger, 1));
  journal_event(d, r->id, r->started, "run_start", start);
  cJSON_Delete(start);
  const cJSON *ev;
  cJSON_ArrayForEach(ev, r->events) {
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(ev, "type"));
    const cJSON *ts = cJSON_GetObjectItem(ev, "ts");
    journal_event(d, r->id, cJSON_IsNumber(ts) ? ts->valuedouble : now, type,
                  cJSON_GetObjectItem(ev, "data"));
  }
  if (r->events_cut) {
    cJSON *n = cJSON_CreateObject();
    cJSON_AddStringToObject(
        n, "text", "the worker sent more than the journal keeps per run; the rest was not kept");
    cJSON_AddTrueToObject(n, "truncated");
    journal_event(d, r->id, now, "note", n);
    cJSON_Delete(n);
  }
  cJSON *end = cJSON_CreateObject();
  cJSON_AddStringToObject(end, "status", status);
  if (result) cJSON_AddStringToObject(end, "result", result);
  if (error) cJSON_AddStringToObject(end, "error", error);
  cJSON_AddNumberToObject(end, "tool_calls", tool_calls);
  journal_event(d, r->id, now, "run_end", end);
  cJSON_Delete(end);
}

/* An event frame from a worker: kept for the journal, within bounds the
 * worker cannot widen. */
static void handle_event(struct run *r, cJSON *frame) {
  const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(frame, "run_id"));
  cJSON *ev = cJSON_GetObjectItem(frame, "ev");
  const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(ev, "type"));
  if (!r || r->finished || !id || strcmp(id, r->id) || !type) return;
  if (strcmp(type, "print") && strcmp(type, "log") && strcmp(type, "script_tool_call") &&
      strcmp(type, "note"))
    return;
  char *text = json_print(ev, 0);
  size_t n = text ? strlen(text) : 0;
  free(text);
  if (r->events_json + n > RUN_LOG_MAX_JSON) {
    r->events_cut = 1;
    return;
  }
  r->events_json += n;
  if (!r->events) r->events = cJSON_CreateArray();
  cJSON_AddItemToArray(r->events, cJSON_DetachItemFromObject(frame, "ev"));
}

static void finish_run(struct daemon *d, struct run *r, const char *status, const char *result,
                       const char *error, const cJSON *state, int tool_calls, int tainted) {
  double now = util_now();
  if (r->cl) { /* the cluster's journal and ctx.state, if this host still owns it */
    daemon__cl_finish(d, r, status, result, error, state, tainted, tool_calls);
    if (r->fenced) status = "interrupted";
  }
  r->finished = 1;
  r->status = xstrdup(status);
  r->result = result ? xstrdup(result) : NULL;
  r->error = error ? xstrdup(error) : NULL;
  cJSON *cl_events = NULL;
  if (r->cl) {
    cl_events = r->events;
    r->events = NULL;
    goto printed;
  }
  daemon__tx(d);
  sqlite3_stmt *s = daemon__prep(d,
                         "UPDATE runs SET status = ?, finished = ?, result = ?, error = ?, "
                         "tool_calls = ? WHERE id = ?");
  if (s) {
    sqlite3_bind_text(s, 1, status, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(s, 2, now);
    daemon__bind_text_or_null(s, 3, result);
    daemon__bind_text_or_null(s, 4, error);
    sqlite3_bind_int(s, 5, tool_calls);
    sqlite3_bind_text(s, 6, r->id, -1, SQLITE_TRANSIENT);
    daemon__step_done(d, s, "journal update");
  }
  journal_run_events(d, r, status, result, error, tool_calls, now);
  cJSON_Delete(r->events);
  r->events = NULL;
  int ok = !strcmp(status, "ok");
  char *st = ok && state ? json_print(state, 0) : NULL;
  if (st && !strcmp(st, "[]")) { /* an empty table comes back as an array */
    free(st);
    st = xstrdup("{}");
  }
  /* The saved state carries the run's taint to the next run: one row
   * update for both. */
  s = daemon__prep(d, st ? "UPDATE automations SET last_run = ?, last_status = ?, state = ?, "
                           "state_tainted = ? WHERE name = ?"
                 : "UPDATE automations SET last_run = ?, last_status = ? WHERE name = ?");
  if (s) {
    int i = 1;
    sqlite3_bind_double(s, i++, r->started);
    sqlite3_bind_text(s, i++, status, -1, SQLITE_TRANSIENT);
    if (st) sqlite3_bind_text(s, i++, st, -1, SQLITE_TRANSIENT);
    if (st) sqlite3_bind_int(s, i++, tainted ? 1 : 0);
    sqlite3_bind_text(s, i++, r->ent->name, -1, SQLITE_TRANSIENT);
    daemon__step_done(d, s, "save automation state");
  }
  free(st);
printed:
  cJSON_Delete(cl_events);
  if (!r->lost) print_finish(d, r, (now - r->started) * 1000);
  if (r->w) {
    r->w->run = NULL;
    r->w->idle_since = util_monotonic();
    r->w = NULL;
  }
  r->ent->running--;
}

void daemon__unlink_run(struct daemon *d, struct run *r) {
  for (struct run **p = &d->runs; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      break;
    }
}

void daemon__free_run(struct run *r) {
  cJSON_Delete(r->events);
  cJSON_Delete(r->trigger);
  cJSON_Delete(r->args);
  free(r->status);
  free(r->result);
  free(r->error);
  free(r);
}

/* Kills the worker of an active run and records it with status/error. */
void daemon__kill_run(struct daemon *d, struct run *r, const char *status, const char *error) {
  struct worker *w = r->w;
  if (w) {
    kill(w->pid, SIGKILL);
    w->killed = 1;
    daemon__close_worker_fd(w);
  }
  finish_run(d, r, status, NULL, error, NULL, 0, 0);
}

void daemon__drop_pending(struct daemon *d, struct entry *ent) {
  for (struct run *r = d->runs, *nx; r; r = nx) {
    nx = r->next;
    if (r->ent == ent && !r->w && !r->finished) {
      ent->pending--;
      daemon__unlink_run(d, r);
      daemon__free_run(r);
    }
  }
}

static int start_run(struct daemon *d, struct run *r, struct worker *w) {
  struct entry *ent = r->ent;
  const struct automation *a = ent->a;
  double now = util_now();
  cJSON *ctx = cJSON_CreateObject();
  cJSON *state = NULL;
  int tainted = cJSON_IsTrue(cJSON_GetObjectItem(r->trigger, "tainted"));
  sqlite3_stmt *s = d->cl ? NULL : daemon__prep(
      d, "SELECT state, last_run, last_status, state_tainted FROM automations WHERE name = ?");
  if (r->cl && daemon__cl_load_state(d, r, ctx, &tainted)) {
    cJSON_Delete(ctx);
    r->w = w;
    w->run = r;
    ent->running++;
    r->started = now;
    daemon__kill_run(d, r, "crashed", "could not read ctx.state from the cluster database");
    return 0;
  }
  if (s) {
    sqlite3_bind_text(s, 1, ent->name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(s) == SQLITE_ROW) {
      const char *t = (const char *)sqlite3_column_text(s, 0);
      state = json_parse_str(t, 0, NULL);
      if (sqlite3_column_int(s, 3)) tainted = 1; /* ctx.state a tainted run saved */
      if (sqlite3_column_type(s, 1) != SQLITE_NULL) {
        cJSON *lr = cJSON_CreateObject();
        cJSON_AddNumberToObject(lr, "time", floor(sqlite3_column_double(s, 1)));
        const char *ls = (const char *)sqlite3_column_text(s, 2);
        cJSON_AddStringToObject(lr, "status", ls ? ls : "");
        cJSON_AddItemToObject(ctx, "last_run", lr);
      }
    }
    daemon__done(d, s);
  }
  if (!r->cl) {
    if (!cJSON_IsObject(state) && !cJSON_IsArray(state)) {
      cJSON_Delete(state);
      state = cJSON_CreateObject();
    }
    cJSON_AddItemToObject(ctx, "state", state);
  }
  /* Times a script sees are whole seconds: they arrive in Lua as integers,
   * which os.date requires ("number has no integer representation"). */
  cJSON_AddNumberToObject(ctx, "now", floor(now));
  cJSON_AddStringToObject(ctx, "run_id", r->id);
  if (d->cl) cJSON_AddStringToObject(ctx, "node", daemon__cl_node(d)); /* which host runs it */
  cJSON *trig = cJSON_Duplicate(r->trigger, 1);
  cJSON *slot = cJSON_GetObjectItem(trig, "slot");
  if (cJSON_IsNumber(slot)) cJSON_SetNumberValue(slot, floor(slot->valuedouble));
  cJSON_AddItemToObject(ctx, "trigger", trig);
  cJSON_AddItemToObject(ctx, "args", r->args ? cJSON_Duplicate(r->args, 1) : cJSON_CreateObject());
  cJSON *job = cJSON_CreateObject();
  cJSON_AddStringToObject(job, "run_id", r->id);
  cJSON_AddStringToObject(job, "name", ent->name);
  cJSON_AddStringToObject(job, "chunk", a->chunk);
  cJSON_AddStringToObject(job, "source", a->source);
  cJSON_AddItemToObject(job, "ctx", ctx);
  if (tainted) cJSON_AddTrueToObject(job, "tainted");
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
  if (r->cl)
    daemon__cl_guard(d, w->pid); /* the fence kills it if renewals stop */
  else
    journal_insert(d, r->id, ent->name, r->trigger, "running", now, 0, NULL, w->pid);
  const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(r->trigger, "kind"));
  daemon__say(d, "%s: started %s (%s, worker %d)", ent->name, r->id, kind ? kind : "?", (int)w->pid);
  int rc = text ? daemon__send_frame(w->fd, text) : -1;
  free(text);
  if (rc) daemon__kill_run(d, r, "crashed", "could not hand the run to a worker process");
  return 0;
}

static int startable(const struct run *r) {
  const struct entry *ent = r->ent;
  if (!ent->a) return 0;
  if (r->cl) return 1; /* the cluster's claim already applied the mode */
  if (ent->a->mode == MODE_PARALLEL) return ent->running < ent->a->max;
  return ent->running == 0;
}

void daemon__start_pending(struct daemon *d) {
  if (d->stopping) return;
  for (struct run *r = d->runs; r; r = r->next) {
    if (r->w || r->finished || !startable(r)) continue;
    if (r->cl && !daemon__cl_up(d)) continue; /* held: it may be fenced off */
    struct worker *w = idle_worker(d);
    if (!w) return;
    r->ent->pending--;
    start_run(d, r, w);
  }
}

void daemon__new_run(struct daemon *d, struct entry *ent, cJSON *trigger, cJSON *args) {
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
void daemon__fire(struct daemon *d, struct entry *ent, cJSON *trigger, cJSON *args) {
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
      daemon__drop_pending(d, ent);
      for (struct run *r = d->runs; r; r = r->next)
        if (r->ent == ent && r->w && !r->finished)
          daemon__kill_run(d, r, "interrupted", "stopped for a newer run (mode restart)");
      break;
  }
  daemon__new_run(d, ent, trigger, args);
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
  finish_run(d, r, status, result, error, state, tc,
             cJSON_IsTrue(cJSON_GetObjectItem(reply, "tainted")));
}

void daemon__read_worker(struct daemon *d, struct worker *w) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(w->fd, buf, sizeof buf);
    if (n > 0) {
      sbuf_append(&w->in, buf, (size_t)n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) daemon__close_worker_fd(w); /* EOF: the reap tells us why */
    break;
  }
  int bad;
  cJSON *f;
  while ((f = daemon__take_frame(&w->in, &bad))) {
    if (cJSON_GetObjectItem(f, "ev"))
      handle_event(w->run, f);
    else
      handle_reply(d, w, f);
    cJSON_Delete(f);
  }
  if (bad) {
    daemon__complain("worker %d sent a malformed reply; replacing it", (int)w->pid);
    if (w->run)
      daemon__kill_run(d, w->run, "crashed", "the worker process sent a malformed reply");
    else {
      kill(w->pid, SIGKILL);
      w->killed = 1;
      daemon__close_worker_fd(w);
    }
  }
}

void daemon__reap(struct daemon *d) {
  int status;
  /* Only our workers: waitpid(-1) would also reap the children of code
   * sharing the process (the console's commands and chats, which wait for
   * their own). */
  for (struct worker **pp = &d->workers, *w; (w = *pp);) {
    pid_t pid = waitpid(w->pid, &status, WNOHANG);
    if (pid != w->pid) {
      pp = &w->next;
      continue;
    }
    if (w->fd >= 0) daemon__read_worker(d, w); /* a reply written just before exit */
    if (w->run) {
      char why[200];
      if (WIFSIGNALED(status))
        snprintf(why, sizeof why, "the worker process died: signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
      else
        snprintf(why, sizeof why, "the worker process exited with status %d during the run",
                 WEXITSTATUS(status));
      finish_run(d, w->run, "crashed", NULL, why, NULL, 0, 0);
    } else if (!w->killed && !d->stopping && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      daemon__complain("worker %d ended unexpectedly (status %d)", (int)pid, status);
    }
    daemon__close_worker_fd(w);
    sbuf_free(&w->in);
    *pp = w->next;
    free(w);
    d->nworkers--;
  }
}
