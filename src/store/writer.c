/* writer.c - see writer.h. */
#include "writer.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

struct writer {
  char *workspace;
  int refs;
  pid_t pid; /* the process the thread and connection belong to */
  pthread_mutex_t mu;
  pthread_cond_t wake, done; /* wake: the thread; done: writer_sync's waiters */
  pthread_t thread;
  int running, stop;
  int started;        /* the thread is past its start: it has taken mu once */
  int passing;        /* a pass runs (on the thread or a syncing caller) */
  int forking;        /* a fork waits: no pass starts until it is done */
  int waiting;        /* the thread sleeps until sleep_until */
  double sleep_until; /* monotonic */
  struct store *st;
  struct writer_client *clients;
  struct writer *next; /* the registry */
};

/* Every writer of the process: writer_get shares them by workspace, and
 * fork and exit need to find them. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct writer *reg;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

/* fork() while another thread holds a client's lock or a writer's would
 * leave the child's copy locked for good: they are held across the fork
 * (registry, then each writer's clients, then the writer). */
static void before_fork(void) {
  pthread_mutex_lock(&reg_mu);
  /* No pass may be inside SQLite at the fork: the child would inherit
   * SQLite's process-wide mutexes (the unix VFS's, the allocator's) held
   * by a thread it does not have, and hang at its first open. A pass in
   * progress ends first (it takes its client's lock as it ends, so this
   * waits before taking those), and none starts until the fork is done.
   * A thread just created waits too, until it has taken its lock: before
   * that it runs the C library's (or a sanitizer's) start of a thread,
   * which allocates, and an allocator that does not lock itself across
   * fork (ASan's in GCC 12) left the child hanging at its first malloc. */
  for (struct writer *w = reg; w; w = w->next) {
    pthread_mutex_lock(&w->mu);
    while (w->passing || (w->running && !w->started))
      pthread_cond_wait(&w->done, &w->mu);
    w->forking = 1;
    pthread_mutex_unlock(&w->mu);
  }
  for (struct writer *w = reg; w; w = w->next) {
    for (struct writer_client *c = w->clients; c; c = c->next)
      if (c->lock) pthread_mutex_lock(c->lock);
    pthread_mutex_lock(&w->mu);
  }
}
static void after_fork_parent(void) {
  for (struct writer *w = reg; w; w = w->next) {
    w->forking = 0;
    pthread_cond_broadcast(&w->done); /* a pass held back by the fork */
    pthread_mutex_unlock(&w->mu);
    for (struct writer_client *c = w->clients; c; c = c->next)
      if (c->lock) pthread_mutex_unlock(c->lock);
  }
  pthread_mutex_unlock(&reg_mu);
}

static int cond_init_mono(pthread_cond_t *c);

/* In the child (every lock held, one thread): the thread is the parent's,
 * and so is the connection (an SQLite connection must not be used across
 * fork: it is left open, never closed here, so nothing of the parent's
 * files is touched). What the clients had queued is the parent's to
 * write: forget drops it. The child starts its own thread and connection
 * when it first needs them. */
static void after_fork_child(void) {
  for (struct writer *w = reg; w; w = w->next) {
    w->pid = getpid();
    w->running = w->started = w->stop = w->passing = w->waiting = w->forking = 0;
    w->st = NULL;
    cond_init_mono(&w->wake);
    cond_init_mono(&w->done);
    for (struct writer_client *c = w->clients; c; c = c->next) {
      c->busy = 0;
      c->due = HUGE_VAL;
      if (c->forget) c->forget(c);
    }
  }
  after_fork_parent();
}

static void sync_all_at_exit(void);

static void reg_init(void) {
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
  atexit(sync_all_at_exit);
}

static int cond_init_mono(pthread_cond_t *c) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(c, &a);
  pthread_condattr_destroy(&a);
  return rc;
}

struct writer *writer_get(const char *workspace) {
  pthread_once(&reg_once, reg_init);
  pthread_mutex_lock(&reg_mu);
  struct writer *w = reg;
  while (w && strcmp(w->workspace, workspace)) w = w->next;
  if (w) {
    pthread_mutex_lock(&w->mu);
    w->refs++;
    pthread_mutex_unlock(&w->mu);
  } else {
    w = xcalloc(1, sizeof *w);
    w->workspace = xstrdup(workspace);
    w->refs = 1;
    w->pid = getpid();
    pthread_mutex_init(&w->mu, NULL);
    cond_init_mono(&w->wake);
    cond_init_mono(&w->done);
    w->next = reg;
    reg = w;
  }
  pthread_mutex_unlock(&reg_mu);
  return w;
}

int writer_conn(struct writer *w, struct store **st, struct err *e) {
  if (!w->st && store_open(w->workspace, &w->st, e)) {
    w->st = NULL;
    *st = NULL;
    return ERR_IO;
  }
  *st = w->st;
  return 0;
}

/* One pass (w->mu held; released around each drain): every client that is
 * due, or every client when force. */
static void pass(struct writer *w, int force) {
  double now = util_monotonic();
  for (struct writer_client *c = w->clients; c; c = c->next) {
    if (!force && c->due > now) continue;
    c->due = HUGE_VAL; /* a writer_due from here on counts again */
    c->busy = 1;
    pthread_mutex_unlock(&w->mu);
    double left = c->drain(c, w, force);
    pthread_mutex_lock(&w->mu);
    c->busy = 0;
    if (left >= 0) {
      double at = util_monotonic() + left;
      if (at < c->due) c->due = at;
    }
  }
  pthread_cond_broadcast(&w->done); /* writer_detach waits for !busy */
}

/* A pass, one at a time whoever makes it (w->mu held): the thread, or a
 * caller of writer_sync. */
static void pass_excl(struct writer *w, int force) {
  while (w->passing || w->forking) pthread_cond_wait(&w->done, &w->mu);
  w->passing = 1;
  pass(w, force);
  w->passing = 0;
  pthread_cond_broadcast(&w->done);
}

static double earliest_due(const struct writer *w) {
  double at = HUGE_VAL;
  for (const struct writer_client *c = w->clients; c; c = c->next)
    if (c->due < at) at = c->due;
  return at;
}

static void *thread_main(void *arg) {
  struct writer *w = arg;
  pthread_mutex_lock(&w->mu);
  w->started = 1;
  pthread_cond_broadcast(&w->done); /* a fork waits for it */
  for (;;) {
    int force = w->stop; /* the last pass writes everything */
    double at = earliest_due(w), now = util_monotonic();
    if (force || at <= now) {
      pass_excl(w, force);
      if (force) break;
      continue;
    }
    w->waiting = 1;
    w->sleep_until = at;
    if (at == HUGE_VAL) {
      pthread_cond_wait(&w->wake, &w->mu);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      double d = at - now;
      if (d > 3600) d = 3600; /* a far due time: wake now and then to look again */
      ts.tv_sec += (time_t)d;
      ts.tv_nsec += (long)((d - floor(d)) * 1e9);
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&w->wake, &w->mu, &ts);
    }
    w->waiting = 0;
  }
  w->running = 0;
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* Starts the thread (w->mu held). 0 when it runs. */
static int ensure_thread(struct writer *w) {
  if (w->running) return 0;
  w->stop = 0;
  w->started = 0;
  /* No signal of the process is the writer's to take. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&w->thread, NULL, thread_main, w);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc) return -1;
  w->running = 1;
  return 0;
}


void writer_due(struct writer *w, struct writer_client *c, double at) {
  pthread_mutex_lock(&w->mu);
  if (at < c->due) c->due = at;
  if (ensure_thread(w)) {
    if (at <= util_monotonic()) pass_excl(w, 1); /* no thread: the caller writes */
  } else if (w->waiting && at < w->sleep_until) {
    w->sleep_until = at; /* one signal per wake-up */
    pthread_cond_signal(&w->wake);
  }
  pthread_mutex_unlock(&w->mu);
}

/* The caller waits for a whole pass anyway, so it makes that pass itself
 * (after the one running, if any, ends): handing it to the thread would
 * add a wake-up and a switch each way, and on a busy machine the wait for
 * the thread to be scheduled, to every run_start, run_end, row that must
 * be on record and flush. The thread is for what nobody waits on. */
static void sync_locked(struct writer *w) { pass_excl(w, 1); }

void writer_sync(struct writer *w) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  sync_locked(w);
  pthread_mutex_unlock(&w->mu);
}

void writer_attach(struct writer *w, struct writer_client *c) {
  c->due = HUGE_VAL;
  c->busy = 0;
  c->next = NULL;
  /* The registry lock too: before_fork walks the client lists. */
  pthread_mutex_lock(&reg_mu);
  pthread_mutex_lock(&w->mu);
  struct writer_client **p = &w->clients;
  while (*p) p = &(*p)->next;
  *p = c;
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_unlock(&reg_mu);
}

void writer_detach(struct writer *w, struct writer_client *c) {
  if (!w || !c) return;
  pthread_mutex_lock(&w->mu);
  sync_locked(w);
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_lock(&reg_mu);
  pthread_mutex_lock(&w->mu);
  while (c->busy) pthread_cond_wait(&w->done, &w->mu);
  for (struct writer_client **p = &w->clients; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_unlock(&reg_mu);
}

void writer_put(struct writer *w) {
  if (!w) return;
  pthread_mutex_lock(&reg_mu);
  pthread_mutex_lock(&w->mu);
  if (--w->refs > 0) {
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_unlock(&reg_mu);
    return;
  }
  for (struct writer **p = &reg; *p; p = &(*p)->next)
    if (*p == w) {
      *p = w->next;
      break;
    }
  pthread_mutex_unlock(&reg_mu);
  if (w->running) {
    w->stop = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_lock(&w->mu);
  }
  pthread_mutex_unlock(&w->mu);
  store_close(w->st);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->wake);
  pthread_cond_destroy(&w->done);
  free(w->workspace);
  free(w);
}

/* exit() with rows still queued (a command that returned without closing
 * its journal, an error path): they are written before the process goes.
 * Not from the writer thread itself, and not for a forked child's
 * inherited writers (nothing of theirs is queued). */
static void sync_all_at_exit(void) {
  pthread_mutex_lock(&reg_mu);
  for (struct writer *w = reg; w; w = w->next) {
    pthread_mutex_lock(&w->mu);
    if (w->pid == getpid() && w->clients &&
        !(w->running && pthread_equal(w->thread, pthread_self())))
      sync_locked(w);
    pthread_mutex_unlock(&w->mu);
  }
  pthread_mutex_unlock(&reg_mu);
}
