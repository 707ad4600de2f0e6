/* sandbox_watchdog.c - the process watchdog for C calls no hook can reach
 * (see sandbox.c). */
#include "sandbox.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox_impl.h"
#include <lualib.h>
#include "util.h"

/* -------------------------------------------------------------- watchdog */

/* One watchdog thread per process watches a small table of deadlines: slot
 * 0 is a command's whole run (watchdog_arm), the others are Lua calls in
 * progress (protected_call enters one for its sandbox's deadline, on any
 * thread, so parallel tool threads and nested skill tools each have their
 * own). It fires at the earliest one plus the grace: a C call that no hook
 * or budget check could interrupt. Sandbox slots are used only once a
 * command enabled them (watchdog_enable); the daemon supervises its
 * workers itself and never exits this way. */
#define WD_SLOTS 64
#define WD_GRACE_S 2.0

static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cv = PTHREAD_COND_INITIALIZER;
static struct {
  double at; /* monotonic time to fire; 0 = free */
  char msg[512];
} wd_slot[WD_SLOTS];
static int wd_code = 1, wd_enabled, wd_started, wd_held;

/* The slot due first, or -1. Called with wd_mu held. */
static int wd_due(void) {
  int best = -1;
  if (wd_held) return -1;
  for (int i = 0; i < WD_SLOTS; i++)
    if (wd_slot[i].at > 0 && (best < 0 || wd_slot[i].at < wd_slot[best].at)) best = i;
  return best;
}

static void *wd_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&wd_mu);
  int fire;
  for (;;) {
    fire = wd_due();
    if (fire < 0) {
      pthread_cond_wait(&wd_cv, &wd_mu);
      continue;
    }
    double now = util_monotonic(), at = wd_slot[fire].at;
    if (now >= at) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wait = at - now;
    ts.tv_sec += (time_t)wait;
    ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&wd_cv, &wd_mu, &ts);
  }
  /* Still inside the run past its deadline and grace: a C call no hook can
   * reach. Say so and leave; the process state is not trustworthy. */
  if (ftrylockfile(stdout) == 0) {
    fflush_unlocked(stdout);
    funlockfile(stdout);
  }
  ssize_t w = write(2, wd_slot[fire].msg, strlen(wd_slot[fire].msg));
  (void)w;
  _exit(wd_code);
  return NULL;
}

/* Starts the thread once. Called with wd_mu held. */
static void wd_start_locked(void) {
  if (wd_started) return;
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &a, wd_thread, NULL) == 0) wd_started = 1;
  pthread_attr_destroy(&a);
}

void watchdog_enable(int exit_code) {
  pthread_mutex_lock(&wd_mu);
  wd_enabled = 1;
  wd_code = exit_code;
  pthread_mutex_unlock(&wd_mu);
}

void watchdog_arm(double deadline_at, double grace_s, int exit_code, const char *message) {
  pthread_mutex_lock(&wd_mu);
  wd_start_locked();
  wd_slot[0].at = deadline_at + grace_s;
  wd_code = exit_code;
  snprintf(wd_slot[0].msg, sizeof wd_slot[0].msg, "%s\n", message);
  pthread_cond_signal(&wd_cv);
  pthread_mutex_unlock(&wd_mu);
}

/* A Lua call of chunk `who` starts under deadline_at: returns its slot
 * (0 = none taken: not enabled, no deadline, or the table is full). */
int sandbox__wd_enter(double deadline_at, const char *who) {
  if (!wd_enabled || deadline_at <= 0) return 0;
  pthread_mutex_lock(&wd_mu);
  int slot = 0;
  for (int i = 1; i < WD_SLOTS && !slot; i++)
    if (wd_slot[i].at <= 0) slot = i;
  if (slot) {
    wd_start_locked();
    wd_slot[slot].at = deadline_at + WD_GRACE_S;
    snprintf(wd_slot[slot].msg, sizeof wd_slot[slot].msg,
             "luagent: error: %s: wall-clock deadline exceeded inside a call that could not be "
             "interrupted; stopped by the watchdog\n",
             who && *who ? who : "a Lua call");
    pthread_cond_signal(&wd_cv);
  }
  pthread_mutex_unlock(&wd_mu);
  return slot;
}

void sandbox__wd_leave(int slot) {
  if (!slot) return;
  pthread_mutex_lock(&wd_mu);
  wd_slot[slot].at = 0;
  pthread_cond_signal(&wd_cv);
  pthread_mutex_unlock(&wd_mu);
}

void watchdog_hold(int on) {
  pthread_mutex_lock(&wd_mu);
  if (on) {
    wd_held++;
  } else if (wd_held > 0 && --wd_held == 0) {
    /* Deadlines that passed while a human answered: a little room to wind
     * the run down through its own deadline checks. */
    double floor_at = util_monotonic() + WD_GRACE_S;
    for (int i = 0; i < WD_SLOTS; i++)
      if (wd_slot[i].at > 0 && wd_slot[i].at < floor_at) wd_slot[i].at = floor_at;
  }
  pthread_cond_signal(&wd_cv);
  pthread_mutex_unlock(&wd_mu);
}

void watchdog_disarm(void) {
  pthread_mutex_lock(&wd_mu);
  wd_slot[0].at = 0;
  pthread_cond_signal(&wd_cv);
  pthread_mutex_unlock(&wd_mu);
}
