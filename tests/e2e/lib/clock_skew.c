/* clock_skew.c - an LD_PRELOAD shim for the e2e tests: CLOCK_REALTIME (and
 * time(), gettimeofday()) run SKEW_S seconds ahead; CLOCK_MONOTONIC is
 * untouched. Stands for a host whose clock is off. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
static double skew(void) { const char *s = getenv("SKEW_S"); return s ? atof(s) : 0; }
int clock_gettime(clockid_t c, struct timespec *ts) {
  static int (*real)(clockid_t, struct timespec *);
  if (!real) real = dlsym(RTLD_NEXT, "clock_gettime");
  int rc = real(c, ts);
  if (!rc && (c == CLOCK_REALTIME || c == CLOCK_REALTIME_COARSE)) {
    double t = ts->tv_sec + ts->tv_nsec / 1e9 + skew();
    ts->tv_sec = (time_t)t; ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
  }
  return rc;
}
int gettimeofday(struct timeval *tv, void *tz) {
  struct timespec ts; (void)tz;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
  return 0;
}
time_t time(time_t *t) { struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts); if (t) *t = ts.tv_sec; return ts.tv_sec; }
