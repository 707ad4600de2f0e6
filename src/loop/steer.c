/* steer.c - see steer.h. */
#include "steer.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define STEER_MAX_LINE 65536

struct steer {
  int fd;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char **q; /* queued lines, oldest first */
  size_t nq, cap;
  bool eof, quit, owned, reading;
  struct sbuf partial; /* a line being read */
};

static void push(struct steer *st, char *line) {
  if (st->nq == st->cap) {
    st->cap = st->cap ? st->cap * 2 : 8;
    st->q = xrealloc(st->q, st->cap * sizeof *st->q);
  }
  st->q[st->nq++] = line;
}

/* Reads what is there of the current line, one byte at a time, without
 * blocking. Returns 1 when a line is complete (in partial), 0 when more is
 * to come, -1 at end of input. */
static int read_some(struct steer *st) {
  for (;;) {
    char c;
    ssize_t n = read(st->fd, &c, 1);
    if (n == 0) return -1;
    if (n < 0) return errno == EINTR || errno == EAGAIN ? 0 : -1;
    if (c == '\n') return 1;
    if (c != '\r' && st->partial.len < STEER_MAX_LINE) sbuf_append(&st->partial, &c, 1);
    struct pollfd p = {.fd = st->fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0) return 0; /* the rest of the line comes later */
  }
}

static void *reader(void *p) {
  struct steer *st = p;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  for (;;) {
    pthread_mutex_lock(&st->mu);
    while (st->owned && !st->quit) pthread_cond_wait(&st->cv, &st->mu);
    bool quit = st->quit;
    pthread_mutex_unlock(&st->mu);
    if (quit) break;
    struct pollfd pf = {.fd = st->fd, .events = POLLIN};
    int pr = poll(&pf, 1, 100);
    if (pr <= 0) continue;
    pthread_mutex_lock(&st->mu);
    if (st->owned) { /* a prompt took the terminal meanwhile: its input */
      pthread_mutex_unlock(&st->mu);
      continue;
    }
    st->reading = true;
    pthread_mutex_unlock(&st->mu);
    int r = (pf.revents & (POLLIN | POLLHUP)) ? read_some(st) : -1;
    pthread_mutex_lock(&st->mu);
    st->reading = false;
    if (r == 1 || (r < 0 && st->partial.len)) {
      char *line = sbuf_take(&st->partial);
      push(st, line ? line : xstrdup(""));
    }
    if (r < 0) st->eof = true;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    if (r < 0) break;
  }
  return NULL;
}

int steer_start(int fd, struct steer **out, struct err *e) {
  struct steer *st = xcalloc(1, sizeof *st);
  st->fd = fd;
  pthread_mutex_init(&st->mu, NULL);
  pthread_cond_init(&st->cv, NULL);
  if (pthread_create(&st->th, NULL, reader, st)) {
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
    free(st);
    return err_set(e, ERR_IO, "steer", "cannot start the input reader thread");
  }
  *out = st;
  return 0;
}

void steer_free(struct steer *st) {
  if (!st) return;
  pthread_mutex_lock(&st->mu);
  st->quit = true;
  pthread_cond_broadcast(&st->cv);
  pthread_mutex_unlock(&st->mu);
  pthread_join(st->th, NULL);
  for (size_t i = 0; i < st->nq; i++) free(st->q[i]);
  free(st->q);
  sbuf_free(&st->partial);
  pthread_cond_destroy(&st->cv);
  pthread_mutex_destroy(&st->mu);
  free(st);
}

static char *pop(struct steer *st) {
  char *line = st->q[0];
  memmove(st->q, st->q + 1, (st->nq - 1) * sizeof *st->q);
  st->nq--;
  return line;
}

int steer_next_line(struct steer *st, volatile int *stop, char **line) {
  pthread_mutex_lock(&st->mu);
  int rc;
  for (;;) {
    if (st->nq) {
      *line = pop(st);
      rc = 1;
      break;
    }
    if (st->eof) {
      rc = 0;
      break;
    }
    if (stop && *stop) {
      rc = -1;
      break;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&st->cv, &st->mu, &ts);
  }
  pthread_mutex_unlock(&st->mu);
  return rc;
}

int steer_drain(void *ud, struct sbuf *out) {
  struct steer *st = ud;
  pthread_mutex_lock(&st->mu);
  int n = 0;
  while (st->nq) {
    char *line = pop(st);
    if (*line) {
      if (n++) sbuf_puts(out, "\n");
      sbuf_puts(out, line);
    }
    free(line);
  }
  pthread_mutex_unlock(&st->mu);
  return n;
}

void steer_terminal(void *ud, int owning) {
  struct steer *st = ud;
  pthread_mutex_lock(&st->mu);
  if (owning) {
    st->owned = true;
    while (st->reading) pthread_cond_wait(&st->cv, &st->mu);
  } else {
    st->owned = false;
    pthread_cond_broadcast(&st->cv);
  }
  pthread_mutex_unlock(&st->mu);
}
