/* filecache.c - see filecache.h. */
#include "filecache.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "util.h"

enum { SLOTS = 4 };
#define KEEP_MAX ((size_t)1 << 20)
/* How long a file must have been still before its times are trusted. */
#define STILL_S 2

struct kept {
  char *path; /* NULL: a free slot */
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime, ctime;
  char *text;
  size_t len;
  unsigned long used; /* for replacing the least recently used */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct kept kept[SLOTS];
static unsigned long clock_;
static long hits;
static pthread_once_t once = PTHREAD_ONCE_INIT;
/* fork() while another thread holds mu would leave the child's copy
 * locked for good: held across the fork instead (as llm_conn.c). */
static void before_fork(void) {
  pthread_mutex_lock(&mu);
}
static void after_fork(void) {
  pthread_mutex_unlock(&mu);
}
static void init_once(void) {
  pthread_atfork(before_fork, after_fork, after_fork);
}

static bool same_time(struct timespec a, struct timespec b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static bool same_state(const struct kept *k, const struct stat *st) {
  return k->dev == st->st_dev && k->ino == st->st_ino && k->size == st->st_size &&
         same_time(k->mtime, st->st_mtim) && same_time(k->ctime, st->st_ctim);
}

static double secs(struct timespec t) {
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Whether both times are more than STILL_S before now (a time ahead of
 * the clock is not still either). */
static bool still(const struct stat *st) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return secs(now) - secs(st->st_mtim) > STILL_S && secs(now) - secs(st->st_ctim) > STILL_S;
}

static char *copy(const char *s, size_t n) {
  char *t = xmalloc(n + 1);
  memcpy(t, s, n);
  t[n] = 0;
  return t;
}

long filecache_hits(void) {
  pthread_mutex_lock(&mu);
  long h = hits;
  pthread_mutex_unlock(&mu);
  return h;
}

int filecache_read(const char *path, size_t max, char **out, size_t *len, struct err *e) {
  *out = NULL;
  if (len) *len = 0;
  struct stat st;
  if (stat(path, &st)) {
    if (errno == ENOENT) return err_set(e, ERR_NOTFOUND, "io", "%s: %s", path, strerror(errno));
    return util_read_file(path, max, out, len, e); /* it names the error */
  }
  if (!S_ISREG(st.st_mode) || (size_t)st.st_size > max || (size_t)st.st_size > KEEP_MAX)
    return util_read_file(path, max, out, len, e); /* never kept: read as always */
  pthread_once(&once, init_once);
  pthread_mutex_lock(&mu);
  for (int i = 0; i < SLOTS; i++) {
    struct kept *k = &kept[i];
    if (k->path && !strcmp(k->path, path) && same_state(k, &st)) {
      k->used = ++clock_;
      hits++;
      *out = copy(k->text, k->len);
      if (len) *len = k->len;
      pthread_mutex_unlock(&mu);
      return 0;
    }
  }
  pthread_mutex_unlock(&mu);
  size_t n = 0;
  int rc = util_read_file(path, max, out, &n, e);
  if (len) *len = n;
  /* kept only when what was read is the file as stat saw it (the same
   * size) and its times can be trusted: read after the stat, so a later
   * change shows in the next stat */
  if (rc || n != (size_t)st.st_size || !still(&st)) return rc;
  pthread_mutex_lock(&mu);
  struct kept *slot = NULL;
  for (int i = 0; i < SLOTS; i++) { /* the path's own slot, else a free one, else the oldest */
    struct kept *k = &kept[i];
    if (k->path && !strcmp(k->path, path)) {
      slot = k;
      break;
    }
    if (!slot || (slot->path && (!k->path || k->used < slot->used))) slot = k;
  }
  free(slot->path);
  free(slot->text);
  slot->path = xstrdup(path);
  slot->dev = st.st_dev;
  slot->ino = st.st_ino;
  slot->size = st.st_size;
  slot->mtime = st.st_mtim;
  slot->ctime = st.st_ctim;
  slot->text = copy(*out, n);
  slot->len = n;
  slot->used = ++clock_;
  pthread_mutex_unlock(&mu);
  return 0;
}
