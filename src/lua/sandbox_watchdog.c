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

static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cv = PTHREAD_COND_INITIALIZER;
static double wd_at;        /* monotonic time to fire; 0 = disarmed */
static int wd_code;
static char wd_msg[512];
static int wd_started;

static void *wd_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&wd_mu);
  for (;;) {
    if (wd_at <= 0) {
      pthread_cond_wait(&wd_cv, &wd_mu);
      continue;
    }
    double now = util_monotonic();
    if (now >= wd_at) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wait = wd_at - now;
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
  ssize_t w = write(2, wd_msg, strlen(wd_msg));
  (void)w;
  _exit(wd_code);
  return NULL;
}

void watchdog_arm(double deadline_at, double grace_s, int exit_code, const char *message) {
  pthread_mutex_lock(&wd_mu);
  if (!wd_started) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, wd_thread, NULL) == 0) wd_started = 1;
    pthread_attr_destroy(&a);
  }
  wd_at = deadline_at + grace_s;
  wd_code = exit_code;
  snprintf(wd_msg, sizeof wd_msg, "%s\n", message);
  pthread_cond_signal(&wd_cv);
  pthread_mutex_unlock(&wd_mu);
}

void watchdog_hold(int on) {
  pthread_mutex_lock(&wd_mu);
  static double held_at; /* the deadline put aside while a human answers */
  if (on && wd_at > 0) {
    held_at = wd_at;
    wd_at = 0;
  } else if (!on && held_at > 0) {
    double floor_at = util_monotonic() + 2.0; /* room to wind the run down */
    wd_at = held_at > floor_at ? held_at : floor_at;
    held_at = 0;
  }
  pthread_cond_signal(&wd_cv);
  pthread_mutex_unlock(&wd_mu);
}

void watchdog_disarm(void) {
  pthread_mutex_lock(&wd_mu);
  wd_at = 0;
  pthread_cond_signal(&wd_cv);
  pthread_mutex_unlock(&wd_mu);
}
