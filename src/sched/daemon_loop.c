/* daemon_loop.c - the daemon loop: events, timing, inotify and reload,
 * signals, daemon_main and manual runs (see daemon_impl.h). */
#define _GNU_SOURCE
#include "daemon_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
#include "proc.h"
#include "sandbox.h"
#include "security.h"
#include "skills.h"
#include "store.h"
#include "util.h"

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


/* ------------------------------------------------------------- events */

/* The queued events, fired once each: a batch is read, deleted and
 * committed, and only then fired. Firing first (as before) made runs of a
 * batch whose DELETE or COMMIT then failed, and the batch, still queued,
 * fired again on the next round: one `luagent emit` ran an automation up to
 * 100 times (review 22). A daemon that dies between the commit and the
 * runs' start loses them, as it loses any pending run. */
struct queued_event {
  long long id;
  char *name, *payload;
  int tainted;
};

static void process_events(struct daemon *d) {
  if (d->cl) return; /* the cluster's queue: daemon__cl_events */
  d->events_again = 0;
  for (int round = 0; round < 100; round++) {
    sqlite3_stmt *s = daemon__prep(d, "SELECT id, name, payload, tainted FROM event_queue ORDER BY id LIMIT 200");
    if (!s) return;
    struct queued_event ev[200];
    int n = 0;
    daemon__tx(d);
    while (n < 200 && sqlite3_step(s) == SQLITE_ROW) {
      const char *name = (const char *)sqlite3_column_text(s, 1);
      const char *payload = (const char *)sqlite3_column_text(s, 2);
      ev[n].id = sqlite3_column_int64(s, 0);
      ev[n].name = xstrdup(name ? name : "");
      ev[n].payload = payload ? xstrdup(payload) : NULL;
      ev[n].tainted = sqlite3_column_int(s, 3);
      n++;
    }
    daemon__done(d, s);
    if (!n) return;
    s = daemon__prep(d, "DELETE FROM event_queue WHERE id <= ?");
    int bad = !s;
    if (s) {
      sqlite3_bind_int64(s, 1, ev[n - 1].id);
      bad = daemon__step_done(d, s, "consume events") != 0;
    }
    if (!bad) bad = daemon__tx_commit(d) != 0;
    for (int i = 0; i < n; i++) {
      if (!bad) {
        int matched = 0;
        DAEMON_EACH_LISTENER(ent, d, ev[i].name) {
          matched++;
          cJSON *t = daemon__event_trigger(ent, ev[i].name, ev[i].payload, (double)ev[i].id,
                                           ev[i].tainted);
          daemon__say(d, "%s: event %s", ent->name, ev[i].name);
          daemon__fire(d, ent, t, NULL);
        }
        if (!matched) daemon__say(d, "event %s: no automation listens for it", ev[i].name);
      }
      free(ev[i].name);
      free(ev[i].payload);
    }
    if (bad) { /* still queued: again once the hold is over, woken or not */
      d->events_again = 1;
      daemon__hold_starts(d);
      return;
    }
  }
}

/* ------------------------------------------------------------- timing */

/* How many `every` slots a cluster daemon that fell behind still claims
 * one by one (scan_due). */
#define CL_LATE_SLOTS 10

/* The fire-time heap (d->fires, ordered by t). */
static void fires_push(struct daemon *d, double t, struct entry *ent) {
  if (d->nfires == d->cap_fires)
    d->fires = xrealloc(d->fires, (d->cap_fires = d->cap_fires ? 2 * d->cap_fires : 64) *
                                      sizeof *d->fires);
  size_t i = d->nfires++;
  while (i > 0 && d->fires[(i - 1) / 2].t > t) {
    d->fires[i] = d->fires[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  d->fires[i] = (struct daemon_fire){t, ent};
}

static void fires_pop(struct daemon *d) {
  struct daemon_fire last = d->fires[--d->nfires];
  size_t i = 0, n = d->nfires;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && d->fires[c + 1].t < d->fires[c].t) c++;
    if (d->fires[c].t >= last.t) break;
    d->fires[i] = d->fires[c];
    i = c;
  }
  if (n) d->fires[i] = last;
}

/* An entry that fires at t: loaded, present, enabled, and t still its time. */
static int fires_live(const struct entry *ent, double t) {
  return ent->a && !ent->deleted && ent->enabled && ent->next_fire > 0 && ent->next_fire == t;
}

/* ent's slot came: its next fire time is set and it fires (or, in a
 * cluster, joins due to be claimed). */
static void fire_slot(struct daemon *d, struct entry *ent, double now, struct daemon_due **due,
                      size_t *ndue, size_t *cap) {
  double slot = ent->next_fire;
  const struct automation *a = ent->a;
  if (a->trig == TRIG_EVERY && d->cl && now - slot < CL_LATE_SLOTS * a->every_s)
    /* A cluster runs each slot once: a loop that fell behind (a starved
     * machine) claims the slots it is late for one by one, so none is
     * silently passed over (mode single journals the ones it skips).
     * Further behind than CL_LATE_SLOTS it skips ahead as one host does. */
    ent->next_fire = slot + a->every_s;
  else if (a->trig == TRIG_EVERY)
    ent->next_fire = daemon__every_after(a, slot, now);
  else if (a->trig == TRIG_CRON)
    ent->next_fire = automation_next_after(a, fmax(slot, now));
  else
    ent->next_fire = 0;
  daemon__defer_schedule(d, ent);
  cJSON *trig = daemon__make_trigger(ent, automation_trig_name(a->trig), slot);
  if (d->cl) {
    if (*ndue == *cap) *due = xrealloc(*due, (*cap = *cap ? *cap * 2 : 64) * sizeof **due);
    (*due)[(*ndue)++] = (struct daemon_due){ent, trig, slot, 0};
  } else {
    daemon__fire(d, ent, trig, NULL);
  }
}

/* Fires what is due. Normally it pops the due entries off the fire-time
 * heap (a burst of 1,000 automations due within a second made a walk of
 * every entry on each pass of the loop its largest cost); after a change
 * made elsewhere (daemon__rescan) it walks all entries, as a scan always
 * did, and rebuilds the heap. */
static void scan_due(struct daemon *d) {
  double now = daemon__now(d);
  if (d->next_scan > now && !d->scan_full) return;
  struct daemon_due *due = NULL;
  size_t ndue = 0, cap = 0;
  if (d->scan_full) {
    d->scan_full = 0;
    d->nfires = 0;
    for (struct entry *ent = d->entries; ent; ent = ent->next) {
      if (!ent->a || ent->deleted || ent->next_fire <= 0) continue;
      if (ent->enabled && ent->next_fire <= now) fire_slot(d, ent, now, &due, &ndue, &cap);
      if (fires_live(ent, ent->next_fire)) fires_push(d, ent->next_fire, ent);
    }
  } else {
    while (d->nfires && d->fires[0].t <= now) {
      struct daemon_fire f = d->fires[0];
      fires_pop(d);
      if (!fires_live(f.ent, f.t)) continue; /* stale: its time changed, or it went */
      fire_slot(d, f.ent, now, &due, &ndue, &cap);
      if (fires_live(f.ent, f.ent->next_fire)) fires_push(d, f.ent->next_fire, f.ent);
    }
  }
  while (d->nfires && !fires_live(d->fires[0].ent, d->fires[0].t)) fires_pop(d);
  d->next_scan = d->nfires ? d->fires[0].t : 0;
  if (ndue) daemon__cl_fire_due(d, due, ndue); /* the host whose claim lands runs each */
  free(due);
}

/* Active runs are the workers' (at most max_workers): walked instead of
 * every run, since a burst queues a thousand pending ones. */
void daemon__check_deadlines(struct daemon *d, double *wake_mono) {
  double mono = util_monotonic();
  for (struct worker *w = d->workers; w; w = w->next) {
    struct run *r = w->run;
    if (!r || r->w != w || r->finished) continue;
    if (mono >= r->kill_at && w->fd >= 0 && w->nwq) {
      /* Its reply may be waiting to be read, and the worker on the run
       * queued behind: read first, or the kill puts that one back to
       * pending and it runs twice (review 20). */
      daemon__read_worker(d, w);
      r = w->run; /* the next one, if it replied: its deadline is its own */
      if (!r || r->w != w || r->finished) continue;
    }
    if (mono >= r->kill_at) {
      char why[200];
      snprintf(why, sizeof why,
               "the run overstayed its timeout of %gs and its worker was killed "
               "(stuck in a call the sandbox cannot interrupt)",
               r->timeout);
      daemon__kill_run(d, r, "timeout", why);
    } else if (*wake_mono == 0 || r->kill_at < *wake_mono) {
      *wake_mono = r->kill_at;
    }
  }
}

static void sweep_finished(struct daemon *d) {
  if (d->oneshot) return;
  /* stops once every finished run is found (the rest are pending) */
  struct run *prev = NULL;
  int kept = 0;
  for (struct run **p = &d->runs, *r; d->nfinished > kept && (r = *p);) {
    if (r->finished && daemon__end_pending(d, r)) { /* its end is not on disk yet */
      kept++;
      prev = r;
      p = &r->next;
    } else if (r->finished) {
      *p = r->next;
      if (d->runs_last == r) d->runs_last = prev;
      daemon__free_run(r);
      d->nfinished--;
    } else {
      prev = r;
      p = &r->next;
    }
  }
  d->nfinished = kept;
}

static int active_runs(struct daemon *d) {
  int n = 0;
  for (struct worker *w = d->workers; w; w = w->next)
    if (w->run && w->run->w == w && !w->run->finished) n++;
  return n;
}

/* Journal retention: keeps the newest keep_runs rows of each automation.
 * Runs at startup and then every 10 minutes. */
static void prune_journal(struct daemon *d) {
  double now = util_monotonic();
  if (d->next_prune > now) return;
  d->next_prune = now + 600;
  if (d->cl) daemon__cl_prune(d);
  int pruned = 0;
  for (struct entry *ent = d->entries; ent; ent = ent->next) {
    /* The events of the pruned runs go with them. */
    sqlite3_stmt *ev = daemon__prep(d,
                            "DELETE FROM events WHERE run_id IN (SELECT id FROM runs WHERE kind = "
                            "'automation' AND name = ?1 AND status != 'running' AND started < "
                            "(SELECT started FROM runs WHERE kind = 'automation' AND name = ?1 "
                            "ORDER BY started DESC LIMIT 1 OFFSET ?2))");
    sqlite3_stmt *s = daemon__prep(d,
                           "DELETE FROM runs WHERE kind = 'automation' AND name = ?1 AND "
                           "status != 'running' AND started < (SELECT started FROM runs WHERE "
                           "kind = 'automation' AND name = ?1 ORDER BY started DESC LIMIT 1 "
                           "OFFSET ?2)");
    if (!s || !ev) return;
    daemon__tx(d);
    sqlite3_bind_text(ev, 1, ent->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(ev, 2, d->o.keep_runs - 1);
    daemon__step_done(d, ev, "prune the journal's events");
    sqlite3_bind_text(s, 1, ent->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 2, d->o.keep_runs - 1);
    daemon__step_done(d, s, "prune the journal");
    pruned += sqlite3_changes(store_db(d->st));
  }
  daemon__tx_commit(d);
  if (pruned)
    daemon__say(d, "journal: pruned %d old run(s) (keeping %d per automation)", pruned, d->o.keep_runs);
  if (d->o.retain_s > 0) {
    long long runs, events;
    struct err e = {0};
    if (store_prune_runs(d->st, util_now() - d->o.retain_s, &runs, &events, &e))
      daemon__say(d, "journal: pruning by age failed: %s", e.msg);
    else if (runs)
      daemon__say(d, "journal: pruned %lld run(s) and %lld event(s) older than %gs", runs, events,
          d->o.retain_s);
  }
}

/* Idle workers past their use: stale ones at once, extra ones after 30 s,
 * burst workers (the oldest idle or short-busy ones, daemon_runs.c) after
 * 5 min: they keep the short automations compiled. */
static void retire_workers(struct daemon *d) {
  double mono = util_monotonic();
  int idle = 0;
  for (struct worker *w = d->workers; w; w = w->next) {
    if (w->run || w->killed || w->fd < 0) continue;
    idle++;
    if (w->stale || d->stopping ||
        (idle > 2 && mono - w->idle_since > (w->burst ? 300 : 30))) {
      daemon__close_worker_fd(w); /* EOF: the worker exits; reaped on SIGCHLD */
      w->killed = 1;
    }
  }
}

/* ------------------------------------------------------------ inotify */

/* Adds the watches (again): inotify_add_watch on a watched path returns
 * its watch, so this only picks up what is new (a skill folder, a
 * recreated automations/) and never drops an event already queued. */
static void watch_add(struct daemon *d) {
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

static void watch_setup(struct daemon *d) {
  d->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  d->wd_auto = d->wd_root = d->wd_state = d->wd_skills = -1;
  if (d->ino >= 0) watch_add(d);
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
      daemon__complain("%s (keeping the previous configuration)", e.msg);
      d->cfg_broken = 1;
    } else {
      /* Say so when the file changed, and above all when a broken file
       * was fixed: the operator saw the complaint and waits for this. */
      if (d->cfg_broken)
        daemon__say(d, "luagent.lua: loads again; reloaded (workers restart with it)");
      else if (!cJSON_Compare(c->root, d->cfg->root, 1))
        daemon__say(d, "luagent.lua: reloaded (workers restart with it)");
      d->cfg_broken = 0;
      config_free(d->cfg);
      d->cfg = c;
      daemon__skills_refresh(d, 0);
      for (struct worker *w = d->workers; w; w = w->next) w->stale = 1;
    }
    /* New skill folders get watches. Not a new inotify descriptor: an edit
     * made while this reload ran (a broken luagent.lua restored at once)
     * would fall between the old one and the new and never be seen. */
    if (d->ino >= 0) watch_add(d);
  }
  daemon__reload_automations(d, 0);
  d->next_scan = daemon__now(d);
  daemon__rescan(d);
}

/* ---------------------------------------------------------------- loop */

static void loop_once(struct daemon *d, double max_wait) {
  daemon__start_pending(d); /* runs that became due or startable since the last pass */
  daemon__tx_due(d);
  double now = daemon__now(d), mono = util_monotonic();
  double wake_mono = 0;
  daemon__check_deadlines(d, &wake_mono);
  double timeout = max_wait;
  if (!d->stopping && d->next_scan > 0) timeout = fmin(timeout, d->next_scan - now);
  if (wake_mono > 0) timeout = fmin(timeout, wake_mono - mono);
  if (d->reload_at > 0) timeout = fmin(timeout, d->reload_at - mono);
  if (d->lock_retry > 0) timeout = fmin(timeout, d->lock_retry - mono);
  if (d->pool_retry > 0) timeout = fmin(timeout, d->pool_retry - mono);
  if (d->journal_retry > 0) timeout = fmin(timeout, d->journal_retry - mono);
  if (d->events_again && !d->stopping && !daemon__held(d)) /* events to read again (review 23) */
    timeout = 0;
  if (d->stopping) timeout = fmin(timeout, d->stop_deadline - mono);
  if (d->ino < 0 && !d->oneshot) timeout = fmin(timeout, 2.0); /* no inotify: poll events */
  if (d->cl) timeout = fmin(timeout, daemon__cl_wait(d));
  if (timeout < 0) timeout = 0;

  struct pollfd pf[3 + 256 + 32];
  struct worker *pw[256];
  int n = 0;
  pf[n++] = (struct pollfd){.fd = d->sigpipe[0], .events = POLLIN};
  if (d->ino >= 0) pf[n++] = (struct pollfd){.fd = d->ino, .events = POLLIN};
  int clfd = d->cl ? daemon__cl_fd(d) : -1, cli = -1;
  if (clfd >= 0) { /* LISTEN/NOTIFY: events, enabled flags, restarts elsewhere */
    cli = n;
    pf[n++] = (struct pollfd){.fd = clfd, .events = POLLIN};
  }
  int base = n;
  for (struct worker *w = d->workers; w && n - base < (int)(sizeof pw / sizeof pw[0]); w = w->next)
    if (w->fd >= 0) {
      pw[n - base] = w;
      pf[n++] = (struct pollfd){.fd = w->fd, .events = POLLIN};
    }
  /* job pipes with committed jobs still to write (daemon_impl.h, out_sent) */
  int sbase = n;
  struct worker *sw[32];
  for (struct worker *w = d->workers; w && n - sbase < (int)(sizeof sw / sizeof sw[0]); w = w->next)
    if (w->wfd >= 0 && !w->killed && w->out_sent < w->out_ready) {
      sw[n - sbase] = w;
      pf[n++] = (struct pollfd){.fd = w->wfd, .events = POLLOUT};
    }
  int pr = d->in_tx ? poll(pf, (nfds_t)n, 0) : 0;
  if (pr == 0) { /* about to wait: commit what this loop wrote first */
    daemon__tx_commit(d);
    pr = poll(pf, (nfds_t)n, (int)ceil(timeout * 1000));
  }
  int wake = 0;
  if (pr > 0) {
    if (pf[0].revents) {
      char buf[256];
      while (read(d->sigpipe[0], buf, sizeof buf) > 0) {
      }
    }
    if (d->ino >= 0 && pf[1].revents) wake |= watch_read(d);
    for (int i = base; i < sbase; i++)
      if (pf[i].revents && pw[i - base]->fd >= 0) daemon__read_worker(d, pw[i - base]);
    for (int i = sbase; i < n; i++) { /* none is freed before the reap, below */
      struct worker *w = sw[i - sbase];
      if (pf[i].revents && w->wfd >= 0 && !w->killed && w->out_sent < w->out_ready)
        daemon__send_more(d, w);
    }
  }
  if (sig_chld) {
    sig_chld = 0;
    daemon__reap(d);
  }
  if (d->cl) daemon__cl_tick(d, cli >= 0 && pr > 0 && pf[cli].revents);
  if (d->evicted && !d->stopping) { /* a twin took this node's name: stop now */
    sig_term = 2;
    d->stopping = 1;
    d->stop_deadline = 0;
  }
  if (sig_term && !d->stopping && !d->oneshot) {
    d->stopping = 1;
    d->stop_deadline = util_monotonic() + d->o.grace_s;
    int act = active_runs(d);
    if (act)
      daemon__say(d, "stopping: %d run(s) in progress, waiting up to %gs", act, d->o.grace_s);
    else
      daemon__say(d, "stopping");
    for (struct run *r = d->runs, *nx; r; r = nx) {
      nx = r->next;
      if (!r->w && !r->finished) { /* queued, never started: journal, drop */
        if (r->cl)
          daemon__cl_finish(d, r, "interrupted", NULL,
                            "the daemon stopped before the run could start", NULL, 0, 0);
        else /* its row, if it was queued on a worker that went, or a new one */
          daemon__journal_unstarted(d, r, "the daemon stopped before the run could start");
        r->ent->pending--;
        daemon__unlink_run(d, r);
        daemon__free_run(r);
      }
    }
  } else if (sig_term > 1 && d->stopping) {
    d->stop_deadline = 0; /* a second Ctrl-C: stop now */
  }
  if (sig_hup && !d->oneshot) {
    sig_hup = 0;
    daemon__say(d, "SIGHUP: reloading");
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
    if (wake || d->ino < 0 || (d->events_again && !daemon__held(d))) {
      daemon__refresh_enabled(d);
      process_events(d);
    }
    scan_due(d);
  }
  if (d->stopping && util_monotonic() >= d->stop_deadline)
    for (struct run *r = d->runs; r; r = r->next)
      if (r->w && !r->finished && !r->queued) /* a queued one goes with its worker's run */
        daemon__kill_run(d, r, "interrupted", "the daemon stopped before the run finished");
  daemon__start_pending(d);
  retire_workers(d);
  sweep_finished(d);
  daemon__tx_due(d);
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
  d->lock_dir = -1;
  d->self_fd = -1;
  d->ino = -1;
  d->sigpipe[0] = d->sigpipe[1] = -1;
  if (!realpath(o->workspace, d->ws))
    return err_set(e, ERR_NOTFOUND, "workspace", "workspace '%s' not found", o->workspace);
  ssize_t n = readlink("/proc/self/exe", d->exe, sizeof d->exe - 1);
  if (n <= 0) return err_set(e, ERR_IO, "internal", "cannot find the luagent executable");
  d->exe[n] = 0;
  memcpy(d->self_exe, d->exe, (size_t)n + 1);
  /* above the descriptors a worker's are moved to (3 to 5) */
  int self = open("/proc/self/exe", O_PATH | O_CLOEXEC);
  d->self_fd = self >= 0 ? fcntl(self, F_DUPFD_CLOEXEC, 10) : -1;
  if (self >= 0) close(self);
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
  daemon__tx_commit(d); /* what is pending, while its runs and entries exist */
  /* close idle workers; they exit on EOF */
  for (struct worker *w = d->workers; w; w = w->next) {
    if (w->run) kill(w->pid, SIGKILL);
    daemon__close_worker_fd(w);
  }
  double until = util_monotonic() + 3;
  while (d->workers && util_monotonic() < until) {
    daemon__reap(d);
    if (d->workers) util_sleep(0.01);
  }
  for (struct worker *w = d->workers, *nx; w; w = nx) {
    nx = w->next;
    kill(w->pid, SIGKILL);
    waitpid(w->pid, NULL, 0);
    sbuf_free(&w->in);
    sbuf_free(&w->out);
    free(w);
  }
  d->workers = NULL;
  if (d->self_fd >= 0) close(d->self_fd);
  d->self_fd = -1;
  for (struct run *r = d->runs, *nx; r; r = nx) {
    nx = r->next;
    daemon__free_run(r);
  }
  d->runs = d->runs_last = NULL;
  cJSON_Delete(d->skills_bad);
  d->skills_bad = NULL;
  for (struct entry *x = d->entries, *nx; x; x = nx) {
    nx = x->next;
    daemon__lock_drop(d, x); /* its runs are over (killed just above) */
    automation_free(x->a);
    free(x->load_error);
    free(x->bad_source);
    free(x->state);
    free(x);
  }
  sbuf_free(&d->job);
  free(d->fires);
  d->fires = NULL;
  free(d->dirty);
  d->dirty = NULL;
  d->ndirty = 0;
  free(d->unlock);
  d->unlock = NULL;
  d->nunlock = 0;
  daemon__tx_commit(d);
  daemon__cl_stop(d);
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
  daemon__lock_path(d->ws, p, sizeof p);
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

/* Whether pid is a live worker of a live luagent process: it runs our
 * binary, is the process that started at start (the start time its run's
 * row recorded; 0: none was, as in rows of earlier versions), is no
 * zombie, and its parent runs our binary too. A worker of a
 * daemon that was killed keeps running for a moment (its parent-death
 * SIGKILL not yet taken) and then as a zombie; its parent is whoever
 * adopted it by then. Such a run can never finish (its scheduler writes
 * the row), so it is not alive (red team 8: such rows stayed "running"). */
static int worker_alive(pid_t pid, long long start, const char *exe) {
  struct proc_stat ps;
  if (!proc_exe_is(pid, exe) || proc_stat_read(pid, &ps)) return 0;
  if (start > 0 && ps.start != start) return 0; /* another process got its pid since */
  if (ps.state == 'Z' || ps.state == 'X' || ps.ppid <= 1) return 0;
  return proc_exe_is(ps.ppid, exe);
}

/* Marks runs a previous daemon left "running" as interrupted, unless their
 * worker is still alive (a concurrent `automations run`). */
static void mark_interrupted(struct daemon *d) {
  sqlite3_stmt *s = daemon__prep(d,
                         "SELECT id, worker_pid, coalesce(proc_start, 0) FROM runs WHERE "
                         "status = 'running' AND kind = 'automation'");
  if (!s) return;
  daemon__tx(d);
  int n = 0;
  while (sqlite3_step(s) == SQLITE_ROW) {
    if (worker_alive((pid_t)sqlite3_column_int64(s, 1), sqlite3_column_int64(s, 2), d->exe))
      continue;
    sqlite3_stmt *u = daemon__prep(d,
                           "UPDATE runs SET status = 'interrupted', finished = ?, error = "
                           "'the daemon stopped while this run was running' WHERE id = ?");
    if (!u) continue;
    sqlite3_bind_double(u, 1, util_now());
    sqlite3_bind_text(u, 2, (const char *)sqlite3_column_text(s, 0), -1, SQLITE_TRANSIENT);
    daemon__step_done(d, u, "mark interrupted");
    n++;
  }
  daemon__done(d, s);
  daemon__tx_commit(d);
  if (n) daemon__say(d, "marked %d run(s) left running by a previous daemon as interrupted", n);
}

int daemon_main(const struct daemon_opts *o, struct err *e) {
  struct daemon d;
  int rc = daemon_init(&d, o, e);
  if (!rc) rc = take_lock(&d, e);
  if (!rc) rc = store_open(d.ws, &d.st, e);
  if (!rc) rc = daemon__cl_start(&d, e); /* luagent.lua's cluster, if any */
  if (!rc && o->on_start) rc = o->on_start(o->hook_ud, e);
  if (rc) {
    daemon_cleanup(&d);
    return rc;
  }
  install_signals(&d);
  daemon__say(&d, "luagent daemon %s on %s (pid %d)", LUAGENT_VERSION, d.ws, (int)getpid());
  mark_interrupted(&d);
  char adir[4200];
  snprintf(adir, sizeof adir, "%s/automations", d.ws);
  struct stat sst;
  if (stat(adir, &sst)) daemon__say(&d, "no automations/ folder yet; waiting for one");
  watch_setup(&d);
  daemon__skills_refresh(&d, 1);
  daemon__reload_automations(&d, 1);
  process_events(&d);
  daemon__tx_commit(&d);
  /* two warm workers, so the first runs do not pay for a start */
  for (int i = 0; i < 2 && d.nworkers < d.o.max_workers; i++) {
    struct worker *w;
    if (daemon__spawn_worker(&d, &w)) break;
  }
  prune_journal(&d); /* retention at startup, then every 10 minutes */
  while (!d.stopping || active_runs(&d) > 0) loop_once(&d, 60);
  daemon__say(&d, "stopped");
  if (o->on_stop) o->on_stop(o->hook_ud);
  daemon_cleanup(&d);
  restore_signals();
  return 0;
}

int daemon_run_manual(const char *workspace, const char *name, const cJSON *args, double wait_s,
                      char **status, char **result, char **error, struct err *e) {
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
  /* With a cluster, the run is journaled there and ctx.state is the
   * cluster's (the process is no member: no heartbeat, no sweeping). */
  if ((rc = daemon__cl_start(&d, e))) {
    daemon_cleanup(&d);
    return rc;
  }
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
  daemon__load_one(&d, fname, 0);
  struct entry *ent = daemon__find_entry(&d, name);
  if (!ent || !ent->a) {
    err_set(e, ERR_INVALID, "invalid_automation", "%s",
            ent && ent->load_error ? ent->load_error : "cannot load the automation");
    daemon_cleanup(&d);
    return ERR_INVALID;
  }
  d.o.quiet = 1;
  install_signals(&d);
  /* Another process's run of it (the daemon's) ends within its timeout
   * and the kill grace; the margin covers its save. */
  if (wait_s < 0) wait_s = daemon__run_timeout(&d, ent->a) + 10;
  if ((rc = daemon__lock_wait(&d, ent, wait_s, &sig_term, e))) {
    daemon_cleanup(&d);
    restore_signals();
    return rc;
  }
  cJSON *trig = daemon__make_trigger(ent, "manual", 0);
  if (d.cl) {
    daemon__cl_fire(&d, ent, trig, args ? cJSON_Duplicate(args, 1) : NULL, 0);
    if (!d.runs) {
      daemon_cleanup(&d);
      restore_signals();
      return err_set(e, ERR_IO, "cluster", "cannot record the run in the cluster database");
    }
  } else {
    daemon__new_run(&d, ent, trig, args ? cJSON_Duplicate(args, 1) : NULL);
  }
  struct run *r = d.runs;
  daemon__start_pending(&d);
  daemon__tx_commit(&d);
  while (!r->finished) {
    if (!r->w && d.journal_retry > 0) { /* its row could not be written: it never ran */
      rc = err_set(e, ERR_IO, "store", "%s: not run: the journal could not record the run: %s",
                   name, d.journal_why);
      daemon_cleanup(&d);
      restore_signals();
      return rc;
    }
    loop_once(&d, 1);
    if (sig_term && !r->finished) {
      daemon__kill_run(&d, r, "interrupted", "stopped by the operator");
      daemon__tx_commit(&d);
    }
  }
  *status = xstrdup(r->status);
  *result = r->result ? xstrdup(r->result) : NULL;
  *error = r->error ? xstrdup(r->error) : NULL;
  daemon_cleanup(&d);
  restore_signals();
  return 0;
}
