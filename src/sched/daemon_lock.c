/* daemon_lock.c - the daemon's and `automations run`'s side of an
 * automation's lock (autolock.h): taken before a run reads ctx.state,
 * released once the save of its last run is committed; what a daemon does
 * with a run whose automation another process holds (see daemon_impl.h). */
#define _GNU_SOURCE
#include "daemon_impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "automation.h"
#include "autolock.h"

/* How often a daemon tries again for a run it holds back, and how often
 * `automations run` looks while it waits. */
#define RETRY_S 0.05
#define WAIT_POLL_S 0.02

/* Who else has ent's lock, for messages; fd is open on its file. */
static void holder_text(int fd, char *out, size_t n) {
  int pid = autolock_holder(fd);
  if (pid)
    snprintf(out, n, "another process is running it (luagent automations run, pid %d)", pid);
  else
    snprintf(out, n, "another process is running it or about to (luagent automations run)");
}

static void release(struct daemon *d, struct entry *ent);

/* A run of ent waits for the lock: said once per wait (failed: as a
 * complaint), tried again in a moment. */
static void hold_back(struct daemon *d, struct entry *ent, int failed, const char *why) {
  if (!ent->lock_said) {
    ent->lock_said = 1;
    if (failed) daemon__complain("%s: %s", ent->name, why);
    else daemon__say(d, "%s: waiting: %s", ent->name, why);
  }
  double at = util_monotonic() + RETRY_S;
  if (d->lock_retry <= 0 || at < d->lock_retry) d->lock_retry = at;
}

/* ent's lock file, opened in d->lock_dir, which is opened for the first
 * run of a pass and closed at its end (daemon__lock_pass_end). In a burst
 * a pass starts runs of many automations: the directory's path was
 * walked, opened and closed again for each (two of the nine system calls
 * of a run's lock, and the longest). Only for the pass, not the daemon's
 * life: a .luagent/locks made anew (removed, or moved away and replaced)
 * is the one every other process opens, and it would not be this
 * daemon's until it restarted. A directory removed during the pass
 * (ENOENT in it) is opened again, made anew, once; one moved away and
 * replaced during the pass is this daemon's until the pass ends, which
 * is milliseconds, or as long as a BEGIN waits for the database (its
 * busy timeout) when another process holds it. Moving the directory of
 * a running daemon is not something luagent does; a lock held across
 * passes (ent->lock_fd) stays on its file anyway. */
static int open_lock(struct daemon *d, const struct entry *ent, struct err *e) {
  for (int again = 0;; again = 1) {
    if (d->lock_dir < 0 && (d->lock_dir = autolock_dir(d->ws, ent->name, e)) < 0) {
      d->lock_dir = -1;
      return ERR_IO;
    }
    int fd = autolock_open_at(d->lock_dir, ent->name, e);
    if (fd >= 0 || errno != ENOENT || again) return fd;
    daemon__lock_pass_end(d);
  }
}

void daemon__lock_pass_end(struct daemon *d) {
  if (d->lock_dir >= 0) close(d->lock_dir);
  d->lock_dir = -1;
}

int daemon__lock_run(struct daemon *d, struct run *r) {
  struct entry *ent = r->ent;
  if (d->cl) return 1; /* the cluster's claims apply the mode across hosts */
  if (ent->lock_fd >= 0) {
    /* Held still: by runs of it in progress (parallel), or by one that
     * just ended, whose save is not committed yet. While a process waits
     * for the lock, no new run joins those in progress, and the next run
     * after them (a queue of them) first lets that process in: the commit
     * hands the lock over (daemon__lock_committed), and this run asks for
     * it again below, like any other. */
    if (d->oneshot || !autolock_wanted(ent->lock_fd)) return 1;
    if (ent->running > 0) {
      hold_back(d, ent, 0, "another process waits to run it (luagent automations run)");
      return 0;
    }
    daemon__tx_commit(d);
    if (ent->lock_fd >= 0) release(d, ent); /* not queued for the commit: done with it */
  }
  /* What this scheduler keeps of the row (ent->state) must be checked
   * after the lock is taken: a process that held it committed its save
   * before letting go. Inside the transaction (BEGIN IMMEDIATE) nobody
   * commits, so one check in it covers every lock taken in it. */
  if (!d->in_tx || !d->tx_checked) {
    daemon__tx(d);
    daemon__state_check(d);
  }
  struct err e; /* set only where it fails */
  int fd = open_lock(d, ent, &e);
  int got = fd >= 0 ? autolock_try(fd, 1) : fd;
  if (got > 0) {
    ent->lock_fd = fd;
    ent->lock_said = 0;
    /* No transaction (BEGIN failed: another connection held the database
     * past the busy timeout): a holder may have committed and let go
     * between the check above and the lock, so check again, now that the
     * lock is ours (review 15 F5). */
    if (!d->in_tx) daemon__state_check(d);
    return 1;
  }
  char why[sizeof e.msg];
  if (got < 0) {
    if (fd >= 0) snprintf(e.msg, sizeof e.msg, "cannot lock .luagent/locks/%s.lock: %s", ent->name,
                          strerror(errno));
    snprintf(why, sizeof why, "%s", e.msg);
  } else {
    holder_text(fd, why, sizeof why);
  }
  if (fd >= 0) close(fd);
  if (ent->a->mode == MODE_SINGLE) { /* as for a run of its own still running */
    char msg[sizeof why + 16];
    snprintf(msg, sizeof msg, "%s (mode single)", why);
    journal_skipped(d, ent, r->trigger, msg);
    ent->pending--;
    r->finished = 1;
    r->status = xstrdup("skipped");
    d->nfinished++;
    return 0;
  }
  /* queued, parallel, restart: it waits, as a queued run does (restart
   * cannot stop another process's run) */
  hold_back(d, ent, got < 0, why);
  return 0;
}

static void release(struct daemon *d, struct entry *ent) {
  autolock_release(ent->lock_fd, d->oneshot); /* a manual run wrote its pid */
  ent->lock_fd = -1;
}

void daemon__lock_idle(struct daemon *d, struct entry *ent) {
  if (ent->lock_fd < 0 || ent->running > 0) return;
  if (!d->in_tx) { /* its save is written (or failed) already */
    release(d, ent);
    return;
  }
  if (ent->lock_release) return;
  ent->lock_release = 1;
  if (d->nunlock == d->cap_unlock)
    d->unlock = xrealloc(d->unlock, (d->cap_unlock = d->cap_unlock ? 2 * d->cap_unlock : 16) *
                                        sizeof *d->unlock);
  d->unlock[d->nunlock++] = ent;
}

void daemon__lock_committed(struct daemon *d) {
  for (size_t i = 0; i < d->nunlock; i++) {
    struct entry *ent = d->unlock[i];
    ent->lock_release = 0;
    if (ent->lock_fd >= 0 && ent->running == 0) release(d, ent); /* none started since */
  }
  d->nunlock = 0;
}

void daemon__lock_drop(struct daemon *d, struct entry *ent) {
  if (ent->lock_fd >= 0) release(d, ent);
}

int daemon__lock_wait(struct daemon *d, struct entry *ent, double wait_s,
                      volatile sig_atomic_t *stop, struct err *e) {
  if (d->cl) return 0; /* the cluster's journal: not covered (README) */
  /* Never wait holding the database: loading the file wrote its row, and
   * the holder's save needs the write lock that transaction keeps. */
  daemon__tx_commit(d);
  int fd = autolock_open(d->ws, ent->name, e);
  if (fd < 0) return fd;
  double until = util_monotonic() + wait_s;
  int queued = 0;
  char who[200] = "";
  for (;;) {
    int got = autolock_try(fd, 0);
    if (got > 0) break;
    if (got < 0) {
      err_set(e, ERR_IO, "lock", "cannot lock .luagent/locks/%s.lock: %s", ent->name,
              strerror(errno));
      autolock_release(fd, 1);
      return ERR_IO;
    }
    if (!who[0]) {
      int pid = autolock_holder(fd), dpid = 0;
      if (pid)
        snprintf(who, sizeof who, "another `luagent automations run` (pid %d)", pid);
      else if (daemon_running(d->ws, &dpid))
        snprintf(who, sizeof who, "the daemon (pid %d)", dpid);
      else
        snprintf(who, sizeof who, "another process");
      if (wait_s > 0)
        fprintf(stderr, "luagent: %s is running in %s; waiting up to %gs for that run to end\n",
                ent->name, who, wait_s);
    }
    if (!queued && (queued = autolock_want(fd)) < 0) queued = 0; /* not queued: still waits */
    if (*stop) {
      autolock_release(fd, 1);
      return err_set(e, ERR_STOPPED, "stopped",
                     "automations run: %s: stopped while waiting for its run in %s", ent->name,
                     who);
    }
    if (util_monotonic() >= until) {
      autolock_release(fd, 1);
      return err_set(e, ERR_LIMIT, "busy",
                     "automations run: %s is already running in %s; waited %gs for that run to "
                     "end (--wait DURATION waits longer)",
                     ent->name, who, wait_s);
    }
    util_sleep(WAIT_POLL_S);
  }
  autolock_stamp(fd); /* so that others can tell who runs it */
  ent->lock_fd = fd; /* released once the run's save is committed */
  return 0;
}
