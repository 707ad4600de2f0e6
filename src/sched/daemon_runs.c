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
#include <sched.h>
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
#include "proc.h"
#include "sandbox.h"
#include "security.h"
#include "skills.h"
#include "store.h"
#include "util.h"

/* ------------------------------------------------------------- workers */

/* A worker gets two pipes, not a socketpair: jobs on fd 3, its replies and
 * events on fd 5 (DAEMON_REPLY_FD). Reading a reply off a unix socket
 * wakes the peer sleeping in read() on its own end ("write space"), so
 * every run woke its worker twice; a pipe's reader wakes only a writer
 * that found the pipe full. */
/* An upgrade that renames a new binary over ours changes what d->exe
 * names, not what this daemon runs: workers run this daemon's own binary
 * (/proc/self/exe, which stays while we run), since a worker of another
 * version may not speak this scheduler's job records. Said once, so the
 * operator knows a restart is what takes the new version. */
static void exe_check(struct daemon *d) {
  if (d->exe_changed || strcmp(d->exe, d->self_exe)) return;
  struct stat ours, there;
  if (d->self_fd >= 0 ? fstat(d->self_fd, &ours) : stat("/proc/self/exe", &ours)) return;
  if (stat(d->exe, &there) == 0 && there.st_ino == ours.st_ino && there.st_dev == ours.st_dev)
    return;
  d->exe_changed = 1;
  daemon__say(d, "the luagent binary at %s changed on disk; workers go on running this "
              "daemon's version until the daemon restarts", d->exe);
}

int daemon__spawn_worker(struct daemon *d, struct worker **out) {
  exe_check(d);
  int jobs[2], replies[2];
  if (pipe2(jobs, O_CLOEXEC)) return -1;
  if (pipe2(replies, O_CLOEXEC)) {
    close(jobs[0]);
    close(jobs[1]);
    return -1;
  }
  /* the child's fds, moved above 3..5 first so no dup2 below clobbers another */
  int cj = fcntl(jobs[0], F_DUPFD_CLOEXEC, 10), cr = fcntl(replies[1], F_DUPFD_CLOEXEC, 10);
  int ffd = daemon__cl_fence_fd(d); /* the cluster's fence deadline, for the worker */
  int cf = ffd >= 0 ? fcntl(ffd, F_DUPFD_CLOEXEC, 10) : -1;
  close(jobs[0]);
  close(replies[1]);
  pid_t ppid = getpid();
  pid_t pid = cj < 0 || cr < 0 || (ffd >= 0 && cf < 0) ? -1 : fork();
  if (pid < 0) {
    int saved = errno;
    close(jobs[1]);
    close(replies[0]);
    if (cj >= 0) close(cj);
    if (cr >= 0) close(cr);
    if (cf >= 0) close(cf);
    errno = saved;
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
    /* SCHED_BATCH: a worker woken by its job does not preempt the
     * scheduler, which goes on handing out the burst instead of being
     * switched out after every write (most of its CPU per run, in the
     * kernel); a worker still gets its fair share of the CPU. */
    struct sched_param sp = {0};
    sched_setscheduler(0, SCHED_BATCH, &sp);
    /* dup2 leaves the new descriptors without CLOEXEC: they survive exec */
    if (dup2(cj, 3) < 0 || dup2(cr, DAEMON_REPLY_FD) < 0) _exit(127);
    if (cf >= 0 && dup2(cf, DAEMON_FENCE_FD) < 0) _exit(127);
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
    if (!strcmp(d->exe, d->self_exe)) { /* our own binary, whatever d->exe names now */
      if (d->self_fd >= 0) execveat(d->self_fd, "", argv, environ, AT_EMPTY_PATH);
      execv("/proc/self/exe", argv);
    }
    execv(d->exe, argv); /* no /proc, or another worker binary (tests) */
    _exit(127);
  }
  close(cj);
  close(cr);
  if (cf >= 0) close(cf);
  fcntl(replies[0], F_SETFL, fcntl(replies[0], F_GETFL) | O_NONBLOCK);
  fcntl(jobs[1], F_SETFL, fcntl(jobs[1], F_GETFL) | O_NONBLOCK);
  struct worker *w = xcalloc(1, sizeof *w);
  w->pid = pid;
  /* Read once per worker, not per run: the child exists from fork() on,
   * and exec keeps its start time. */
  struct proc_stat ps;
  w->start = proc_stat_read(pid, &ps) ? 0 : ps.start;
  w->fd = replies[0];
  w->wfd = jobs[1];
  w->idle_since = util_monotonic();
  w->next = d->workers;
  d->workers = w;
  d->nworkers++;
  *out = w;
  return 0;
}

/* Which idle workers idle_worker picks from: any, the burst workers
 * (rank_workers) or the others. */
enum pool { ANY, BURST, OTHER };

/* An idle worker for a run of ent, from pool: the one ent's last run went
 * to when that one is idle, else the first idle one; NULL when none is
 * idle. Each worker keeps the automations it ran compiled
 * (sandbox_run_cached): with 32 workers and no preference, an automation
 * was compiled in up to 32 of them, once per run for most runs of a
 * daemon's first minute (and after every reload: new workers), and each
 * worker's collections walked chunks of every automation. */
static struct worker *idle_worker(struct daemon *d, const struct entry *ent, enum pool pool) {
  struct worker *first = NULL;
  for (struct worker *w = d->workers; w; w = w->next) {
    if (w->run || w->killed || w->stale || w->fd < 0) continue;
    if ((pool == BURST && !w->burst) || (pool == OTHER && w->burst)) continue;
    if (w->pid == ent->last_pid) return w;
    if (!first) first = w;
  }
  return first;
}

/* A new worker, or NULL at the limit or when none can be started. */
static struct worker *new_worker(struct daemon *d) {
  if (d->nworkers >= d->o.max_workers) return NULL;
  struct worker *w;
  if (daemon__spawn_worker(d, &w)) {
    daemon__complain("cannot start a worker process: %s", strerror(errno));
    return NULL;
  }
  return w;
}

/* How many workers short runs go to: one per CPU this process may run on
 * (at least 2, at most --workers). A short run (pipeable) waits in a busy
 * burst worker's pipe, or for one to reply, rather than go to another
 * worker: 32 processes taking turns on 2 cores ran each run with cold
 * caches; the 1,000-automation burst cost the workers 44-49 us of CPU per
 * run on all 32 against 18-19 us on 2 (bench/README.md, "Burst
 * workers"). The other workers take the runs that are slow or of unknown
 * length, up to --workers, and retire after 30 s idle (retire_workers). */
static int burst_workers(const struct daemon *d) {
  cpu_set_t set;
  int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 2) n = 2;
  return n < d->o.max_workers ? n : d->o.max_workers;
}

void daemon__close_worker_fd(struct worker *w) {
  if (w->fd >= 0) close(w->fd);
  if (w->wfd >= 0) close(w->wfd); /* EOF on its job pipe: an idle worker exits */
  w->fd = w->wfd = -1;
}

/* SIGKILL, unless the reap has it already (the reply it left is read
 * after waitpid, and a malformed one must not kill whatever process has
 * the pid since). */
static void kill_worker(struct worker *w) {
  if (!w->reaped) kill(w->pid, SIGKILL);
  w->killed = 1;
  daemon__close_worker_fd(w);
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
  /* Not outside the transaction the run's end is in: one SQLite rolled
   * back (a statement before failed so) takes the end with it, and the
   * end is written again, events and all (write_end) */
  if (d->in_tx && sqlite3_get_autocommit(store_db(d->st))) return;
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

static int begin_run(struct daemon *d, struct run *r, double now);
static int run_row(struct daemon *d, struct run *r, double started);

/* w's run, when its job never reached w whole (a ctx.state bigger than
 * the pipe; w is gone): w cannot have begun it. NULL otherwise, and for a
 * cluster's run, which its claim's rules journal crashed. */
static struct run *job_unread(const struct worker *w) {
  struct run *r = w->run;
  return r && !r->cl && r->job_end > w->sent_total ? r : NULL;
}

/* r, handed to a worker that went before it began r, goes back to
 * pending; a stopping daemon journals it as never started. */
static void unstart(struct daemon *d, struct run *r) {
  r->queued = 0;
  r->row_early = 0; /* its row names the worker that went: written again */
  r->w = NULL;
  r->ent->running--;
  daemon__lock_idle(d, r->ent); /* taken again, checked again, when it is handed out */
  if (d->stopping) {
    daemon__journal_unstarted(d, r, "the daemon stopped before the run could start");
    r->finished = 1;
    r->status = xstrdup("skipped");
    d->nfinished++;
  } else {
    r->ent->pending++;
  }
}

/* The runs queued in w go back to pending (w is gone or killed: none of
 * them started). */
static void requeue(struct daemon *d, struct worker *w) {
  for (int i = 0; i < w->nwq; i++) unstart(d, w->wq[i]);
  w->nwq = 0;
}

/* The end of r, finished: its runs row and its events, in the open
 * transaction (end_gen), or again (end_redo) when the one they went in was
 * rolled back (daemon__unsend): r is kept until that commits
 * (sweep_finished), so a full disk for a while does not leave the row of a
 * run that ended saying `running` (review 21). Its ctx.state save is not
 * written again: the automation's next run may have read the state before
 * by then. */
static void write_end(struct daemon *d, struct run *r) {
  daemon__tx(d);
  /* Two statements: started is in an index (runs_by_name), which a row
   * whose start is not written again should not cost an update. */
  sqlite3_stmt *s =
      r->row_early
          ? daemon__prep(d, "UPDATE runs SET status = ?1, finished = ?2, result = ?3, "
                            "error = ?4, tool_calls = ?5, started = ?8 WHERE rowid = ?7 AND id = ?6")
          : daemon__prep(d, "UPDATE runs SET status = ?1, finished = ?2, result = ?3, "
                            "error = ?4, tool_calls = ?5 WHERE rowid = ?7 AND id = ?6");
  int rc = -1;
  if (s) {
    sqlite3_bind_text(s, 1, r->status, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 2, r->finished_at);
    if (r->row_early) sqlite3_bind_double(s, 8, r->started);
    daemon__bind_text_or_null(s, 3, r->result);
    daemon__bind_text_or_null(s, 4, r->error);
    sqlite3_bind_int(s, 5, r->tool_calls);
    sqlite3_bind_text(s, 6, r->id, -1, SQLITE_STATIC);
    rc = daemon__step_row(d, s, 7, &r->rowid, DAEMON_RUN_ROWID, r->id, "journal update");
  }
  /* its events with the row's end, or neither: written again, a
   * committed half would be there twice */
  if (!rc) journal_run_events(d, r, r->status, r->result, r->error, r->tool_calls, r->finished_at);
  r->end_gen = d->in_tx ? d->tx_gen : 0;
  r->end_redo = rc != 0;
  if (rc) daemon__hold_starts(d); /* and the next try a second from now */
}

/* Records the end of an active run; state (JSON text, may be NULL) is
 * persisted only for status "ok". Detaches the run from its worker. */
static void finish_run(struct daemon *d, struct run *r, const char *status, const char *result,
                       const char *error, const char *state, int tool_calls, int tainted) {
  double now = util_now();
  struct entry *ent = r->ent;
  int ok = !strcmp(status, "ok");
  if (ok && state && !strcmp(state, "[]")) state = "{}"; /* an empty table comes back as an array */
  if (!ok) state = NULL;
  if (r->cl) { /* the cluster's journal and ctx.state, if this host still owns it */
    daemon__cl_finish(d, r, status, result, error, state, tainted, tool_calls);
    if (r->fenced) status = "interrupted";
  }
  r->finished = 1;
  d->nfinished++;
  r->status = xstrdup(status);
  r->result = result ? xstrdup(result) : NULL;
  r->error = error ? xstrdup(error) : NULL;
  cJSON *cl_events = NULL;
  if (r->cl) {
    cl_events = r->events;
    r->events = NULL;
    goto printed;
  }
  r->tool_calls = tool_calls;
  r->finished_at = now;
  write_end(d, r);
  /* The saved state carries the run's taint to the next run: one row
   * update for both. A state the run left as it found it (and its taint)
   * is not written again. */
  if (state && ent->state_known && ent->state && !strcmp(state, ent->state) &&
      ent->state_tainted == (tainted != 0))
    state = NULL;
  /* ... and the schedule its firing changed, if not written yet. */
  int sched = ent->sched_dirty && ent->a && !d->oneshot;
  daemon__tx(d); /* still open (write_end's statements may have ended it) */
  sqlite3_stmt *s =
      daemon__prep(d, "UPDATE automations SET last_run = ?1, last_status = ?2,"
                      " state = coalesce(?3, state),"
                      " state_tainted = CASE WHEN ?3 IS NULL THEN state_tainted ELSE ?4 END,"
                      " next_fire = CASE WHEN ?5 THEN ?6 ELSE next_fire END,"
                      " trigger_key = CASE WHEN ?5 THEN ?7 ELSE trigger_key END"
                      " WHERE rowid = ?9 AND name = ?8");
  int saved = -1;
  if (s) {
    sqlite3_bind_double(s, 1, r->started);
    sqlite3_bind_text(s, 2, status, -1, SQLITE_STATIC);
    daemon__bind_text_or_null(s, 3, state);
    sqlite3_bind_int(s, 4, tainted ? 1 : 0);
    sqlite3_bind_int(s, 5, sched);
    if (sched && ent->next_fire > 0) sqlite3_bind_double(s, 6, ent->next_fire);
    else sqlite3_bind_null(s, 6);
    sqlite3_bind_text(s, 7, sched ? ent->key : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 8, ent->name, -1, SQLITE_STATIC);
    saved = daemon__step_row(d, s, 9, &ent->rowid, DAEMON_AUTOMATION_ROWID, ent->name,
                             "save automation state");
    if (!saved && sqlite3_changes(store_db(d->st)) != 1) saved = -1; /* no row: not cached */
    if (!saved) ent->sched_dirty = 0;
  }
  if (saved) { /* the row is not what the cache would say: read it again */
    daemon__state_forget(ent);
  } else if (ent->state_known || state) {
    /* a known row, or one whose every cached column was just written */
    if (state) {
      free(ent->state);
      ent->state = xstrdup(state);
      ent->state_tainted = tainted != 0;
    }
    ent->last_run = r->started;
    util_copy(ent->last_status, sizeof ent->last_status, status);
    ent->state_known = 1;
  }
printed:
  cJSON_Delete(cl_events);
  /* with --quiet the line is not made at all (it was escaped, then dropped) */
  if (!r->lost && !d->o.quiet) print_finish(d, r, (now - r->started) * 1000);
  /* how long it ran, on the monotonic clock (a wall clock step would make
   * it look slow, or of unknown length); a run that crashed, timed out or
   * was stopped says nothing of how long the next takes: unknown, so none
   * is queued behind that one (review 19: one that crashed fast looked
   * short, and took the runs queued behind it down with it) */
  int ended = ok || !strcmp(status, "failed");
  ent->last_s = !ended || r->lost || r->started_mono <= 0 ? -1 : util_monotonic() - r->started_mono;
  ent->running--;
  daemon__lock_idle(d, ent);
  struct worker *w = r->w;
  r->w = NULL;
  if (w && w->run == r) {
    w->run = NULL;
    w->idle_since = util_monotonic();
    if (w->killed || w->fd < 0) { /* what was queued behind it never started */
      requeue(d, w);
    } else if (w->nwq) { /* the worker went on to the next one as it replied */
      struct run *nx = w->wq[0];
      memmove(w->wq, w->wq + 1, (size_t)--w->nwq * sizeof w->wq[0]);
      nx->queued = 0;
      nx->row_early = nx->row_in_db && !nx->cl; /* its row, naming w, written at the hand-off */
      w->run = nx;
      /* writes nothing: nx's row went in with the commit that let its
       * job out (send_jobs, daemon__unsend) */
      begin_run(d, nx, now);
    }
  }
}

void daemon__unlink_run(struct daemon *d, struct run *r) {
  struct run *prev = NULL;
  for (struct run **p = &d->runs; *p; prev = *p, p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      if (d->runs_last == r) d->runs_last = prev;
      break;
    }
}

void daemon__free_run(struct run *r) {
  free(r->trig_text);
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
  if (r->w) kill_worker(r->w);
  finish_run(d, r, status, NULL, error, NULL, 0, 0);
}

void daemon__journal_unstarted(struct daemon *d, struct run *r, const char *why) {
  if (!r->row_in_db) {
    journal_skipped(d, r->ent, r->trigger, why);
    return;
  }
  daemon__tx(d);
  sqlite3_stmt *s = daemon__prep(d, "UPDATE runs SET status = 'skipped', finished = ?1, "
                                    "error = ?2 WHERE id = ?3");
  if (s) {
    sqlite3_bind_double(s, 1, util_now());
    sqlite3_bind_text(s, 2, why, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, r->id, -1, SQLITE_STATIC);
    daemon__step_done(d, s, "journal update");
  }
  daemon__say(d, "%s: skipped: %s", r->ent->name, why);
}

void daemon__drop_pending(struct daemon *d, struct entry *ent) {
  for (struct run *r = d->runs, *nx; r; r = nx) {
    nx = r->next;
    if (r->ent == ent && !r->w && !r->finished) {
      if (r->row_in_db) /* queued on a worker that went, then dropped */
        daemon__journal_unstarted(d, r, "the run was dropped before it could start");
      ent->pending--;
      daemon__unlink_run(d, r);
      daemon__free_run(r);
    }
  }
}

/* A job that cannot reach w (its frame over the limit, the pipe gone):
 * the worker goes, its run is journaled crashed (or goes back to pending
 * when its own job never reached the worker whole), what was queued
 * behind it goes back to pending. */
static void send_failed(struct daemon *d, struct worker *w) {
  struct run *r = job_unread(w);
  if (r) { /* the pipe broke (a job over the frame limit was never in out: crashed below) */
    kill_worker(w);
    unstart(d, r);
    w->run = NULL;
    requeue(d, w);
    return;
  }
  if (w->run) {
    daemon__kill_run(d, w->run, "crashed", "could not hand the run to a worker process");
  } else if (!w->killed) { /* cannot happen: a queue has a run in front */
    kill_worker(w);
  }
}

double daemon__run_timeout(const struct daemon *d, const struct automation *a) {
  double t = a->timeout_s > 0 ? a->timeout_s : (d->cfg ? d->cfg->limits.deadline_s : 30);
  return t > 0 ? t : 30;
}

/* No run starts for DAEMON_JOURNAL_RETRY_S: the journal cannot take
 * their rows now (a full disk, a database that fails its writes), and
 * trying at every pass would only fill the log. */
void daemon__hold_starts(struct daemon *d) {
  d->journal_retry = util_monotonic() + DAEMON_JOURNAL_RETRY_S;
}

int daemon__held(const struct daemon *d) {
  return d->journal_retry > 0 && util_monotonic() < d->journal_retry;
}

/* r, handed out, goes back to pending: its row is not on disk. */
static void take_back(struct daemon *d, struct run *r) {
  daemon__complain("%s: run %s not started: the journal could not record it (trying again in %gs)",
                   r->ent->name, r->id, DAEMON_JOURNAL_RETRY_S);
  unstart(d, r);
}

/* r was just handed to its worker (start_run) and its row could not be
 * written: its job is never made, and r goes back to pending. */
static void not_recorded(struct daemon *d, struct run *r) {
  struct worker *w = r->w;
  if (w->run == r) {
    w->run = NULL;
    w->idle_since = util_monotonic();
  } else if (w->nwq && w->wq[w->nwq - 1] == r) {
    w->nwq--;
  }
  /* the statement's error, still the connection's (said by the step) */
  util_copy(d->journal_why, sizeof d->journal_why, sqlite3_errmsg(store_db(d->st)));
  take_back(d, r);
  daemon__hold_starts(d);
}

/* Transaction gen went in after the commit point `before` and did not
 * commit (daemon__unsend). */
static int gone_gen(const struct daemon *d, unsigned long long gen, unsigned long long before) {
  return gen > before && gen != d->committed_gen;
}

void daemon__unsend(struct daemon *d, unsigned long long before) {
  int n = 0;
  for (struct worker *w = d->workers; w; w = w->next) {
    if (w->out.len <= w->out_ready) continue;
    /* What waits is the end of out: the runs handed to w since its last
     * jobs went, in order: its run, when it was idle, and the end of its
     * queue. A cluster's run is the cluster's to record (its claim), and
     * a cluster never queues: its job goes. */
    unsigned long long ready = w->out_total - (w->out.len - w->out_ready);
    if (w->run && w->run->cl && w->run->job_end > ready) continue;
    struct run *back[DAEMON_PIPE];
    int nb = 0;
    while (w->nwq && w->wq[w->nwq - 1]->job_end > ready) back[nb++] = w->wq[--w->nwq];
    if (w->run && w->run->job_end > ready) {
      back[nb++] = w->run;
      w->run = NULL;
      w->idle_since = util_monotonic();
    }
    w->out_total -= w->out.len - w->out_ready;
    w->out.len = w->out_ready;
    while (nb) { /* in the order they were handed out */
      struct run *r = back[--nb];
      if (r->row_in_db && gone_gen(d, r->row_gen, before)) {
        /* its INSERT went in a transaction that did not commit */
        r->row_in_db = 0;
        r->rowid = 0;
      }
      take_back(d, r);
      n++;
    }
  }
  /* Ends of runs written in it: again, once the hold is over */
  int ends = 0;
  for (struct run *r = d->runs; r; r = r->next)
    if (r->finished && !r->cl && gone_gen(d, r->end_gen, before)) {
      r->end_redo = 1;
      ends++;
    }
  if (ends)
    daemon__complain("the end of %d run(s) was not recorded (written again in %gs)", ends,
                     DAEMON_JOURNAL_RETRY_S);
  if (n || ends) daemon__hold_starts(d);
}

int daemon__end_pending(struct daemon *d, struct run *r) {
  if (r->cl || !r->finished) return 0;
  if (r->end_redo) {
    if (!daemon__held(d)) write_end(d, r);
    return 1;
  }
  return r->end_gen > d->committed_gen;
}

/* Hands r to w: one job record, one write. ctx's parts go as JSON text the
 * worker turns into Lua: ctx.state as the automations row holds it (read
 * once, then kept: daemon__state_load), the trigger as the journal row
 * has it (the worker makes its slot whole seconds). */
static int start_run(struct daemon *d, struct run *r, struct worker *w, int queue) {
  struct entry *ent = r->ent;
  const struct automation *a = ent->a;
  double now = util_now();
  int tainted = cJSON_IsTrue(cJSON_GetObjectItem(r->trigger, "tainted"));
  char *cl_state = NULL, cl_last[64];
  const char *state = NULL, *last_status = NULL;
  double last_time = 0;
  if (r->cl) {
    cJSON *ctx = cJSON_CreateObject();
    if (daemon__cl_load_state(d, r, ctx, &tainted)) {
      cJSON_Delete(ctx);
      r->w = w;
      w->run = r;
      ent->running++;
      r->started = now;
      daemon__kill_run(d, r, "crashed", "could not read ctx.state from the cluster database");
      return 0;
    }
    cl_state = json_print(cJSON_GetObjectItem(ctx, "state"), 0);
    state = cl_state;
    const cJSON *lr = cJSON_GetObjectItem(ctx, "last_run");
    if (lr) {
      const char *ls = cJSON_GetStringValue(cJSON_GetObjectItem(lr, "status"));
      last_time = cJSON_GetNumberValue(cJSON_GetObjectItem(lr, "time"));
      snprintf(cl_last, sizeof cl_last, "%s", ls ? ls : "");
      last_status = cl_last;
    }
    cJSON_Delete(ctx);
  } else {
    daemon__state_load(d, ent);
    if (ent->state_tainted) tainted = 1;
    state = ent->state;
    if (ent->last_run > 0) {
      last_time = ent->last_run;
      last_status = ent->last_status;
    }
  }
  char *trig = daemon__trigger_text(r->trigger);
  r->timeout = daemon__run_timeout(d, a);
  struct sbuf *b = &d->job;
  daemon__rec_begin(b, 'J');
  daemon__rec_str(b, REC_RUN_ID, r->id);
  daemon__rec_str(b, REC_NAME, ent->name);
  daemon__rec_str(b, REC_CHUNK, a->chunk);
  daemon__rec_put(b, REC_SOURCE, a->source, a->source_len);
  daemon__rec_num(b, REC_TIMEOUT, r->timeout);
  if (tainted) daemon__rec_put(b, REC_TAINTED, "", 0);
  /* Times a script sees are whole seconds: they arrive in Lua as integers,
   * which os.date requires ("number has no integer representation"). */
  daemon__rec_num(b, REC_NOW, floor(now));
  if (d->cl) daemon__rec_str(b, REC_NODE, daemon__cl_node(d)); /* which host runs it */
  daemon__rec_str(b, REC_STATE, state);
  daemon__rec_str(b, REC_TRIGGER, trig);
  if (r->args) {
    char *args = json_print(r->args, 0);
    daemon__rec_str(b, REC_ARGS, args);
    free(args);
  }
  if (last_status) {
    daemon__rec_num(b, REC_LAST_TIME, floor(last_time));
    daemon__rec_str(b, REC_LAST_STATUS, last_status);
  }
  free(cl_state);
  free(r->trig_text);
  r->trig_text = trig;
  r->w = w;
  r->handed_mono = util_monotonic();
  ent->last_pid = w->pid;
  ent->running++;
  int unrecorded;
  if (queue) { /* behind w's run: it starts when that one ends */
    r->queued = 1;
    w->wq[w->nwq++] = r;
    /* Its row now, since the worker starts it the moment it replies for
     * the one in front, before this process hears of it. */
    unrecorded = !r->cl && run_row(d, r, now);
  } else {
    w->run = r;
    unrecorded = begin_run(d, r, now);
  }
  if (unrecorded) { /* its job is not made: the run waits for the journal */
    if (b->cap > (1u << 20)) sbuf_free(b);
    else b->len = 0;
    not_recorded(d, r);
    return 0;
  }
  int big = daemon__rec_end(b);
  if (!big) { /* sent by send_jobs, after the commit */
    sbuf_append(&w->out, b->s, b->len);
    r->job_end = w->out_total += b->len;
  }
  if (b->cap > (1u << 20)) sbuf_free(b); /* a big automation's job: not kept around */
  else b->len = 0;
  if (big) send_failed(d, w);
  return 0;
}

/* Forgets what w had still to be sent. */
static void drop_out(struct worker *w) {
  if (w->out.cap > (1u << 20)) sbuf_free(&w->out);
  else w->out.len = 0;
  w->out_sent = w->out_ready = 0;
}

void daemon__send_more(struct daemon *d, struct worker *w) {
  if (w->wfd < 0 || w->killed) {
    drop_out(w);
    send_failed(d, w);
    return;
  }
  while (w->out_sent < w->out_ready) {
    ssize_t n = write(w->wfd, w->out.s + w->out_sent, w->out_ready - w->out_sent);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return; /* the rest on POLLOUT */
    if (n <= 0) {
      /* The worker has gone. What it replied before it went is read
       * first: the run in front may have ended, and the one it went on
       * to is the one that crashed, or, its job not all sent, that never
       * began (send_failed). */
      if (w->fd >= 0) daemon__read_worker(d, w);
      drop_out(w);
      send_failed(d, w);
      return;
    }
    w->out_sent += (size_t)n;
    w->sent_total += (size_t)n;
  }
  if (w->out_sent == w->out.len) {
    drop_out(w);
  } else { /* jobs handed out since, not committed yet: keep them, at the front */
    memmove(w->out.s, w->out.s + w->out_sent, w->out.len - w->out_sent);
    w->out.len -= w->out_sent;
    w->out_sent = w->out_ready = 0;
  }
}

/* Sends the jobs start_run handed out, once the transaction holding their
 * rows is committed: a run the worker has begun (and whose tools may have
 * written) always has its row, so a kill -9 of the daemon leaves it to be
 * marked interrupted, never unrecorded (red team 8). One commit for all the
 * runs a pass starts. */
static void send_jobs(struct daemon *d) {
  int any = 0;
  for (struct worker *w = d->workers; w && !any; w = w->next) any = w->out.len > w->out_ready;
  if (!any) return;
  daemon__tx_commit(d);
  for (struct worker *w = d->workers; w; w = w->next) {
    if (w->out.len <= w->out_ready) continue; /* nothing new (what is left goes on POLLOUT) */
    w->out_ready = w->out.len;
    daemon__send_more(d, w);
  }
}

/* The run's row, status running on its worker since `started`: inserted
 * the first time, updated when a run queued behind another starts or a
 * run whose worker died before starting it is handed to another. Written
 * in the open transaction, which is committed before the job is sent
 * (send_jobs): a worker never runs what the journal could lose. */
static int run_row(struct daemon *d, struct run *r, double started) {
  if (!r->row_in_db) {
    r->rowid = daemon__journal_insert_text(d, r->id, r->ent->name, r->trig_text, "running",
                                           started, 0, NULL, r->w->pid, r->w->start);
    /* a trigger's RAISE(IGNORE) "succeeds" with no row (review 22) */
    if (!r->rowid || sqlite3_changes(store_db(d->st)) != 1) return -1; /* said, if it failed */
    r->row_in_db = 1;
    r->row_gen = d->in_tx ? d->tx_gen : 0;
    return 0;
  }
  daemon__tx(d);
  sqlite3_stmt *s =
      daemon__prep(d, "UPDATE runs SET status = 'running', started = ?1, worker_pid = ?2, "
                      "proc_start = ?4 WHERE id = ?3");
  if (!s) return -1;
  sqlite3_bind_double(s, 1, started);
  sqlite3_bind_int64(s, 2, r->w->pid);
  sqlite3_bind_text(s, 3, r->id, -1, SQLITE_STATIC);
  if (r->w->start > 0)
    sqlite3_bind_int64(s, 4, r->w->start);
  else
    sqlite3_bind_null(s, 4);
  if (daemon__step_done(d, s, "journal update")) return -1;
  if (sqlite3_changes(store_db(d->st)) == 1) return 0;
  /* Not there: a row this process took for written was not (review 22:
   * its transaction was lost unnoticed). Written now, or the run waits. */
  r->row_in_db = 0;
  return run_row(d, r, started);
}

/* r starts on r->w now: its deadline, its journal row, its line. A run
 * that was queued behind another on w has its row, naming w, already: it
 * is not written again, and the time it began, which the worker's reply
 * says (handle_reply), goes in with its end. */
static int begin_run(struct daemon *d, struct run *r, double now) {
  struct worker *w = r->w;
  r->started = now;
  r->started_mono = util_monotonic();
  r->kill_at = r->started_mono + r->timeout + d->o.kill_grace_s;
  if (r->cl)
    daemon__cl_guard(d, w->pid); /* the fence kills it if renewals stop */
  else if (!r->row_early && run_row(d, r, now)) /* row_early: queued on w (finish_run) */
    return -1;
  if (!d->o.quiet) {
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(r->trigger, "kind"));
    daemon__say(d, "%s: started %s (%s, worker %d)", r->ent->name, r->id, kind ? kind : "?",
                (int)w->pid);
  }
  return 0;
}

static int startable(const struct run *r) {
  const struct entry *ent = r->ent;
  if (!ent->a) return 0;
  if (r->cl) return 1; /* the cluster's claim already applied the mode */
  if (ent->a->mode == MODE_PARALLEL) return ent->running < ent->a->max;
  return ent->running == 0;
}

/* ent's runs are short: its last took DAEMON_PIPE_FAST_S or less (-1:
 * unknown, or it did not end by itself). */
static int short_ent(const struct entry *ent) {
  return ent->last_s >= 0 && ent->last_s <= DAEMON_PIPE_FAST_S;
}

/* Runs queued behind another are of automations whose runs are short,
 * never in a cluster or for mode "restart" (daemon_impl.h, DAEMON_PIPE). */
static int pipeable(const struct daemon *d, const struct run *r) {
  return !d->cl && !d->oneshot && !r->cl && r->ent->a->mode != MODE_RESTART && short_ent(r->ent);
}

/* w is busy with a short run that has not run long yet and has only
 * short runs behind it: it replies soon. mono is the monotonic clock: a
 * wall clock stepped back would make a stuck run look short for as long
 * as the step, and hold runs behind it. */
static int short_busy(const struct worker *w, double mono) {
  const struct run *h = w->run;
  if (!h || w->killed || w->stale || w->fd < 0) return 0;
  if (h->cl || !h->ent->a || h->ent->a->mode == MODE_RESTART)
    return 0; /* a newer run may kill it (review 19): nothing waits on it */
  if (!short_ent(h->ent) || mono - h->started_mono > DAEMON_PIPE_FAST_S)
    return 0; /* it may be slow: do not hold a run up behind it */
  return !w->nwq || short_ent(w->wq[w->nwq - 1]->ent);
}

/* A busy worker a pipeable run may be queued behind (DAEMON_PIPE), among
 * the burst workers only when burst_only: the one with the fewest queued;
 * NULL when none may take it. */
static struct worker *pipe_worker(struct daemon *d, double mono, int burst_only) {
  struct worker *best = NULL;
  for (struct worker *w = d->workers; w; w = w->next) {
    if ((burst_only && !w->burst) || w->nwq >= DAEMON_PIPE - 1 || !short_busy(w, mono)) continue;
    if (!best || w->nwq < best->nwq) best = w;
  }
  return best;
}

/* A short (pipeable) run waits for a burst worker when one of them
 * replies soon (short_busy), and looks again when that one's run stops
 * looking short: the next pass then finds another burst worker in its
 * place (rank_workers), or, when none can be, sends it to another worker.
 * Returns whether it waits. */
static int wait_for_burst(struct daemon *d, double mono) {
  double first = 0;
  for (struct worker *w = d->workers; w; w = w->next) {
    if (!w->burst || !short_busy(w, mono)) continue;
    double at = w->run->started_mono + DAEMON_PIPE_FAST_S;
    if (!first || at < first) first = at;
  }
  if (!first) return 0;
  double retry = first + 0.001;
  if (d->pool_retry <= 0 || retry < d->pool_retry) d->pool_retry = retry;
  return 1;
}

/* Marks the burst workers: the oldest d->burst live workers (the list is
 * newest first) that are idle or on a run that looks short. A worker
 * that is on a slow run, or on one that turned slow, is not one while
 * it is (red team 18: a slow automation that took a burst worker every
 * second left the short runs one worker while the others sat idle, and
 * with both stuck, the short runs spread over every worker); another
 * takes its place, or a new one is started (pick_worker). Returns how
 * many are marked. */
static int rank_workers(struct daemon *d, double mono) {
  int n = 0;
  for (struct worker *w = d->workers; w; w = w->next)
    n += w->burst = !w->killed && !w->stale && w->fd >= 0 && (!w->run || short_busy(w, mono));
  /* keep the oldest d->burst of the n marked */
  for (struct worker *w = d->workers; w && n > d->burst; w = w->next)
    if (w->burst) {
      w->burst = 0;
      n--;
    }
  return n;
}

/* The worker r starts on, *queue set when behind another's run; NULL when
 * it waits. A short run (pipeable), in order: an idle burst worker; a
 * new one while there are fewer than d->burst; queued behind a burst
 * worker, or waiting for one; an idle other worker; a new one up to
 * --workers; queued behind any (as before burst workers: at --workers,
 * every worker busy). Another run first takes an idle worker that is not
 * a burst worker, so that a slow automation keeps one of its own. In a
 * cluster or a one-shot scheduler, any idle worker, else a new one. */
static struct worker *pick_worker(struct daemon *d, const struct run *r, int *nburst, int *queue,
                                  double mono, int *waits) {
  struct worker *w;
  if (d->cl || d->oneshot) /* no burst workers: no run is queued behind another */
    return (w = idle_worker(d, r->ent, ANY)) ? w : new_worker(d);
  if (!pipeable(d, r)) {
    if ((w = idle_worker(d, r->ent, OTHER))) return w;
    if ((w = idle_worker(d, r->ent, BURST))) { /* one burst worker fewer until the next pass */
      w->burst = 0;
      --*nburst;
      return w;
    }
    return new_worker(d); /* never queued behind another (pipeable) */
  }
  if ((w = idle_worker(d, r->ent, BURST))) return w;
  if (*nburst < d->burst && (w = new_worker(d))) {
    w->burst = 1;
    ++*nburst;
    return w;
  }
  if ((w = pipe_worker(d, mono, 1))) {
    *queue = 1;
    return w;
  }
  if ((*waits = wait_for_burst(d, mono))) return NULL;
  if ((w = idle_worker(d, r->ent, OTHER)) || (w = new_worker(d))) return w;
  if ((w = pipe_worker(d, mono, 0))) *queue = 1;
  return w;
}

void daemon__start_pending(struct daemon *d) {
  d->lock_retry = 0; /* set again for a run still held back (none once stopping) */
  d->pool_retry = 0; /* set again for a short run that waits for a burst worker */
  if (d->stopping) { /* nothing starts any more: no wake-up for it (review 21: a spin) */
    d->journal_retry = 0;
    return;
  }
  if (daemon__held(d)) return; /* rows could not be written; loop_once wakes for the end */
  d->journal_retry = 0;
  if (!d->burst) d->burst = burst_workers(d); /* a syscall: once */
  double mono = util_monotonic();
  int nburst = rank_workers(d, mono);
  int checked = 0;
  int waiting = 0; /* a short run waits for a burst worker */
  for (struct run *r = d->runs; r; r = r->next) {
    if (r->w || r->finished || !startable(r)) continue;
    if (r->cl && !daemon__cl_up(d)) continue; /* held: it may be fenced off */
    /* Short runs after one that waits, wait too (in arrival order: an
     * automation's runs are all short or all not); the others behind it
     * still start (review 19: a slow run waited for the whole backlog of
     * short ones, and mode single skipped its next slot). */
    if (waiting && pipeable(d, r)) continue;
    int queue = 0, waits = 0;
    struct worker *w = pick_worker(d, r, &nburst, &queue, mono, &waits);
    if (!w && waits) {
      waiting = 1;
      continue;
    }
    if (!w) break; /* none at all: every worker busy at --workers */
    if (!checked++ && !d->cl) { /* once for the runs starting now, in the transaction */
      daemon__tx(d);           /* the locks they take are checked in (daemon__lock_run) */
      daemon__state_check(d);
    }
    int locked = daemon__lock_run(d, r);
    if (d->journal_retry > 0) { /* a commit in it failed and took jobs back: w may have changed */
      if (locked) daemon__lock_idle(d, r->ent);
      break;
    }
    if (!locked) continue; /* another process runs it: skipped or later */
    r->ent->pending--;
    start_run(d, r, w, queue);
    if (d->journal_retry > 0) break; /* its row, or a commit, failed: none starts for now */
  }
  daemon__lock_pass_end(d);
  send_jobs(d);
}

struct run *daemon__new_run(struct daemon *d, struct entry *ent, cJSON *trigger, cJSON *args) {
  struct run *r = xcalloc(1, sizeof *r);
  daemon__new_run_id(r->id);
  r->ent = ent;
  r->trigger = trigger;
  r->args = args;
  cJSON *slot = cJSON_GetObjectItem(trigger, "slot");
  r->slot = slot ? slot->valuedouble : util_now();
  /* at the end, without walking there: a burst appends a thousand */
  *(d->runs_last ? &d->runs_last->next : &d->runs) = r;
  d->runs_last = r;
  ent->pending++;
  return r;
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
        if (r->ent == ent && r->w && !r->finished && !r->queued) /* none: see pipe_worker */
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

/* Kills w (and records its run, if any, as crashed) for a reply that
 * breaks the protocol; why says how. */
static void bad_reply(struct daemon *d, struct worker *w, const char *why) {
  daemon__complain("worker %d sent a malformed reply (%s); replacing it", (int)w->pid, why);
  if (w->run) {
    char msg[300];
    snprintf(msg, sizeof msg, "the worker process sent a malformed reply: %s", why);
    daemon__kill_run(d, w->run, "crashed", msg);
  } else {
    kill_worker(w);
  }
}

/* A reply record: checked whole before anything of it is recorded. Returns
 * 0, or -1 with why set (the caller replaces the worker). */
static int handle_reply(struct daemon *d, struct worker *w, const char *p, size_t n, char *why,
                        size_t nwhy) {
  struct run *r = w->run;
  struct daemon_rec rec;
  if (daemon__rec_parse(p, n, 'R', &rec, why, nwhy)) return -1;
  const char *id = daemon__rec_text(&rec, REC_RUN_ID);
  if (!r || r->finished) {
    snprintf(why, nwhy, "a reply while it had no run");
    return -1;
  }
  if (!id || strcmp(id, r->id)) {
    snprintf(why, nwhy, "a reply for run %.40s, not for its run %s", id ? id : "(none)", r->id);
    return -1;
  }
  const char *status = daemon__rec_text(&rec, REC_STATUS);
  const char *result = daemon__rec_text(&rec, REC_RESULT);
  const char *error = daemon__rec_text(&rec, REC_ERROR);
  const char *state = daemon__rec_text(&rec, REC_STATE);
  double tc = 0;
  if (!status || (strcmp(status, "ok") && strcmp(status, "failed") && strcmp(status, "timeout"))) {
    snprintf(why, nwhy, "no status ok, failed or timeout");
    return -1;
  }
  if ((rec.have & (1u << REC_RESULT) && !result) || (rec.have & (1u << REC_ERROR) && !error) ||
      (rec.have & (1u << REC_STATE) && !state)) {
    snprintf(why, nwhy, "a text field with a NUL byte inside");
    return -1;
  }
  if (rec.have & (1u << REC_TOOL_CALLS) &&
      (daemon__rec_number(&rec, REC_TOOL_CALLS, &tc) || tc < 0 || tc > 1e9 || tc != floor(tc))) {
    snprintf(why, nwhy, "tool_calls is not a count");
    return -1;
  }
  double began = 0;
  if (rec.have & (1u << REC_STARTED) && (daemon__rec_number(&rec, REC_STARTED, &began) ||
                                         !isfinite(began))) {
    snprintf(why, nwhy, "started is not a time");
    return -1;
  }
  if (result && strlen(result) > MAX_RESULT) {
    snprintf(why, nwhy, "a result of %zu bytes (at most %d)", strlen(result), MAX_RESULT);
    return -1;
  }
  if (state) {
    /* What the store keeps must read back as ctx.state: JSON, an object
     * or an array, within the bound the worker applies too. */
    size_t sl = rec.f[REC_STATE].n;
    cJSON *j = NULL;
    if (sl > MAX_STATE) {
      snprintf(why, nwhy, "a ctx.state of %zu bytes (at most %d)", sl, MAX_STATE);
      return -1;
    }
    if (json_parse(state, sl, 0, &j, NULL) || !(cJSON_IsObject(j) || cJSON_IsArray(j))) {
      cJSON_Delete(j);
      snprintf(why, nwhy, "a ctx.state that is not a JSON object");
      return -1;
    }
    cJSON_Delete(j);
  }
  if (began > 0 && r->row_early) {
    /* When the worker began a run queued behind another (begin_run), on
     * the clock both processes share: it began before this process heard
     * of it, by as long as the reply in front waited to be read. Kept
     * between the hand-off and the reading of that reply, which the
     * worker wrote before it began. (One handed to an idle worker began
     * within a wake-up of the time its row has.) Only the journal's start:
     * how long the run took (last_s, whether it looks short) stays this
     * process's measure from one reply to the next, in which its own lag
     * in reading them cancels out and which a worker's word cannot
     * shorten (review 20: R-A, R-B). */
    double mono = util_monotonic();
    began = fmin(fmax(began, r->handed_mono), r->started_mono);
    r->started = util_now() - (mono - began);
  }
  finish_run(d, r, status, result, error, state, (int)tc, (rec.have >> REC_TAINTED) & 1);
  return 0;
}

/* The end of the pipe closes w only after the frames read with it are
 * handled (review 19's R2): a reply finishes its run while w is still
 * open, so the run queued behind starts on w, which had it; the reap then
 * journals that one crashed. Closed first, the run behind went back to
 * pending and ran twice. */
void daemon__read_worker(struct daemon *d, struct worker *w) {
  char buf[65536];
  int eof = 0;
  for (;;) {
    ssize_t n = read(w->fd, buf, sizeof buf);
    if (n > 0) {
      sbuf_append(&w->in, buf, (size_t)n);
      if ((size_t)n < sizeof buf) break; /* drained: no second read to learn EAGAIN */
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    eof = n == 0; /* the reap tells us why */
    break;
  }
  size_t off = 0;
  const char *p;
  size_t n;
  int got;
  char why[200] = "";
  while ((got = daemon__frame_next(&w->in, &off, &p, &n)) > 0) {
    if (n && p[0] == '{') { /* an event of the run, as JSON */
      cJSON *f = NULL;
      if (json_parse(p, n, 0, &f, NULL)) {
        snprintf(why, sizeof why, "an event frame that is not JSON");
        break;
      }
      handle_event(w->run, f);
      cJSON_Delete(f);
    } else if (handle_reply(d, w, p, n, why, sizeof why)) {
      break;
    }
  }
  if (got < 0) snprintf(why, sizeof why, "a frame announcing more than %u bytes", MAX_FRAME);
  if (why[0]) {
    w->in.len = 0;
    bad_reply(d, w, why);
    return;
  }
  daemon__frame_drop(&w->in, off);
  if (eof) daemon__close_worker_fd(w);
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
    w->reaped = 1;
    if (w->fd >= 0) daemon__read_worker(d, w); /* a reply written just before exit */
    daemon__close_worker_fd(w); /* nothing more goes to it, nor is promoted on it */
    struct run *unread = job_unread(w);
    if (unread) { /* not begun, so not crashed either */
      unstart(d, unread);
      w->run = NULL;
    }
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
    requeue(d, w); /* none left normally: finish_run took them */
    daemon__close_worker_fd(w);
    sbuf_free(&w->in);
    sbuf_free(&w->out);
    *pp = w->next;
    free(w);
    d->nworkers--;
  }
}
