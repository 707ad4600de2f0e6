/* audit_queue.c - see audit_queue.h. Moved out of security.c unchanged in
 * what it does. */
#include "audit_queue.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "util.h"

struct audit_queue {
  struct runtime *rt;
  const struct audit_opts *opts;
  struct audit_sink sink; /* ops NULL: the store's chain */
  pthread_mutex_t mu;     /* the queue, and the connection it is written through */
  struct audit_entry *pend;
  char **pendmem; /* pend[i]'s strings, one block each */
  size_t npend, cappend;
  double pend_oldest;
  int unanchored; /* 1: rows written since the last anchor; 2: anchored, not synced */
};

struct audit_queue *audit_queue_new(struct runtime *rt, const struct audit_opts *opts) {
  struct audit_queue *q = xcalloc(1, sizeof *q);
  q->rt = rt;
  q->opts = opts;
  pthread_mutex_init(&q->mu, NULL);
  return q;
}

/* A queued row's strings live in one block (pendmem[i], parallel to
 * pend[i]): one allocation and one free per row instead of ten. */
static void pend_drop_front(struct audit_queue *q, size_t k) {
  if (!k) return;
  for (size_t i = 0; i < k; i++) free(q->pendmem[i]);
  if (q->npend > k) {
    memmove(q->pend, q->pend + k, (q->npend - k) * sizeof *q->pend);
    memmove(q->pendmem, q->pendmem + k, (q->npend - k) * sizeof *q->pendmem);
  }
  q->npend -= k;
}

void audit_queue_free(struct audit_queue *q) {
  if (!q) return;
  pend_drop_front(q, q->npend);
  free(q->pend);
  free(q->pendmem);
  pthread_mutex_destroy(&q->mu);
  free(q);
}

void audit_queue_set_sink(struct audit_queue *q, const struct audit_sink *sink) {
  pthread_mutex_lock(&q->mu);
  q->sink = sink ? *sink : (struct audit_sink){0};
  pthread_mutex_unlock(&q->mu);
}

/* The chain rows go to: the installed sink, else the store's chain. */
static int sink_of(struct audit_queue *q, struct audit_sink *out, struct err *e) {
  if (q->sink.ops) {
    *out = q->sink;
    return 0;
  }
  struct store *st = NULL;
  int rc = runtime_store(q->rt, &st, e);
  if (!rc) *out = audit_sqlite_sink(st);
  return rc;
}

static int pend_flush(struct audit_queue *q, struct err *e) {
  if (!q->npend) return 0;
  struct audit_sink sk;
  int rc = sink_of(q, &sk, e);
  if (!rc) rc = sk.ops->append_batch(sk.ud, q->opts, q->pend, q->npend, NULL, e);
  if (!rc) pend_drop_front(q, q->npend);
  if (!rc) q->unanchored = 1;
  return rc;
}

void audit_queue_flush(struct audit_queue *q, int durable) {
  if (!q) return;
  struct err e = {0};
  pthread_mutex_lock(&q->mu);
  if (pend_flush(q, &e))
    fprintf(stderr, "luagent: audit: %zu rows could not be written: %s\n", q->npend, e.msg);
  struct audit_sink sk;
  if (q->unanchored == 1 || (durable && q->unanchored)) {
    if (sink_of(q, &sk, &e) || (sk.ops->anchor && sk.ops->anchor(sk.ud, q->opts, durable, &e)))
      fprintf(stderr, "luagent: audit: the head was not anchored: %s\n", e.msg);
    q->unanchored = durable ? 0 : 2;
  }
  pthread_mutex_unlock(&q->mu);
}

enum { NSTR = 10 }; /* the string fields of an audit_entry */

int audit_queue_add(struct audit_queue *q, const struct audit_entry *a, int defer, struct err *e) {
  pthread_mutex_lock(&q->mu);
  if (q->npend == q->cappend) {
    q->cappend = q->cappend ? 2 * q->cappend : 16;
    q->pend = xrealloc(q->pend, q->cappend * sizeof *q->pend);
    q->pendmem = xrealloc(q->pendmem, q->cappend * sizeof *q->pendmem);
  }
  double now = util_now();
  if (!q->npend) q->pend_oldest = now;
  const char *src[NSTR] = {a->run_id,    a->caller_kind, a->caller_name, a->tool,
                           a->args_hash, a->decision,    a->decided_by,  a->approver,
                           a->status,    a->detail};
  size_t len[NSTR], total = 0;
  for (int i = 0; i < NSTR; i++) total += src[i] ? (len[i] = strlen(src[i])) + 1 : 0;
  char *mem = xmalloc(total ? total : 1), *p = mem;
  const char *dst[NSTR];
  for (int i = 0; i < NSTR; i++) {
    dst[i] = NULL;
    if (!src[i]) continue;
    memcpy(p, src[i], len[i] + 1);
    dst[i] = p;
    p += len[i] + 1;
  }
  q->pendmem[q->npend] = mem;
  q->pend[q->npend++] = (struct audit_entry){.run_id = dst[0],
                                             .caller_kind = dst[1],
                                             .caller_name = dst[2],
                                             .tool = dst[3],
                                             .args_hash = dst[4],
                                             .decision = dst[5],
                                             .decided_by = dst[6],
                                             .approver = dst[7],
                                             .status = dst[8],
                                             .duration_ms = a->duration_ms,
                                             .detail = dst[9],
                                             .ts = a->ts > 0 ? a->ts : now};
  int rc = 0;
  if (defer) {
    if (q->npend >= AUDIT_QUEUE_MAX || now - q->pend_oldest >= AUDIT_QUEUE_AGE) {
      struct err fe = {0};
      /* A failure keeps the rows: the next read is refused until they are
       * written (audit_queue_backlog). */
      (void)pend_flush(q, &fe);
    }
  } else if ((rc = pend_flush(q, e))) {
    /* This row's call is denied for it; the queued reads stay queued. */
    free(q->pendmem[--q->npend]);
  }
  pthread_mutex_unlock(&q->mu);
  return rc;
}

/* A full queue that cannot be written (the database is unreachable)
 * refuses the read, so no read runs whose row is not on its way to the
 * chain and none is ever dropped. At most AUDIT_QUEUE_MAX reads (and those
 * of threads already past this check) wait unwritten. */
int audit_queue_backlog(struct audit_queue *q, struct err *e) {
  pthread_mutex_lock(&q->mu);
  int rc = q->npend >= AUDIT_QUEUE_MAX ? pend_flush(q, e) : 0;
  pthread_mutex_unlock(&q->mu);
  return rc;
}
