/* audit_queue.c - see audit_queue.h.
 *
 * The rows are chained, hashed and written by the store writer's thread
 * (store/writer.h), with its own connection, or through the installed
 * sink: the calling thread only copies its row into the queue. A row that
 * must be on record first (defer == 0) makes the queue due at once and
 * waits for the writer's barrier (writer_sync), then reads its own
 * outcome from the struct it queued with the row. The writer takes the
 * whole queue in one batch (one append_batch: one transaction); rows of a
 * batch that failed go back in front of the queue in their order, except
 * those whose callers wait (they are told, and their calls are denied),
 * as when the calling thread wrote them itself.
 *
 * What the calling thread does per row is kept small: its strings go into
 * one block, from a pool the writer refills as it finishes rows (no
 * allocation for a usual row); a row may carry a copy of its arguments
 * instead of their hash (audit_queue_add_args), which the writer prints
 * and hashes before the row is chained; a full queue waits for the batch the
 * writer has in hand instead of writing the rest itself.
 */
#include "audit_queue.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "call.h"
#include "json.h"
#include "util.h"
#include "writer.h"

/* What a waiting caller learns about its row (e only when rc != 0). */
struct row_wait {
  int done, rc;
  struct err e;
};

/* One row's strings, in one block. A block of ROW_BLOCK bytes goes back
 * to the queue's pool when its row is written (at most AUDIT_QUEUE_MAX of
 * them wait there); a larger row has its own block, freed. */
#define ROW_BLOCK 512
struct rowmem {
  struct rowmem *next; /* the pool */
  size_t size;         /* bytes in data */
  /* audit_queue_add_args: the arguments' flat copy (at the start of
   * data), which the writer hashes into hash (args_hash points there)
   * before the row is chained; NULL once hashed, or when the row came
   * with its hash. */
  const cJSON *args;
  char *hash;
  _Alignas(16) char data[];
};

struct audit_queue {
  struct writer_client wc; /* first: the writer hands it back */
  struct runtime *rt;
  const struct audit_opts *opts;
  pthread_mutex_t init_mu; /* the lazy writer_get */
  struct writer *w;
  pthread_mutex_t mu;     /* everything below */
  struct audit_sink sink; /* ops NULL: the store's chain, on the writer's connection */
  struct audit_entry *pend;
  struct rowmem **pendmem; /* pend[i]'s strings */
  struct row_wait **waits; /* pend[i]'s waiting caller, NULL for a deferred row */
  size_t npend, cappend;
  /* A batch's arrays, given back by the writer for the next batch (so a
   * queue does not grow from 16 rows again after every batch). */
  struct audit_entry *spare;
  struct rowmem **sparemem;
  struct row_wait **sparewaits;
  size_t sparecap;
  size_t inflight; /* rows the writer took and has not finished */
  /* npend + inflight, for audit_queue_backlog's look without the lock
   * (stored under it wherever either changes). */
  _Atomic size_t held;
  pthread_cond_t landed;  /* a batch the writer took is finished */
  struct rowmem *pool;    /* free ROW_BLOCK blocks */
  size_t npool;
  size_t nsync;    /* queued rows whose callers wait */
  double oldest;   /* monotonic time of pend[0] */
  double retry_at; /* after a failed write: no deferred batch before (monotonic) */
  int anchor;      /* anchor requested: 1, 2 durable */
  int unanchored;  /* 1: rows written since the last anchor; 2: anchored, not synced */
  struct err last; /* the last failure to write */
};

static double drain(struct writer_client *c, struct writer *w, int force);
static void forget(struct writer_client *c);

/* q->landed, on the monotonic clock: a step of the wall clock neither cuts
 * nor stretches audit_queue_backlog's wait. */
static void landed_init(struct audit_queue *q) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&q->landed, &ca);
  pthread_condattr_destroy(&ca);
}

struct audit_queue *audit_queue_new(struct runtime *rt, const struct audit_opts *opts) {
  struct audit_queue *q = xcalloc(1, sizeof *q);
  q->rt = rt;
  q->opts = opts;
  pthread_mutex_init(&q->mu, NULL);
  pthread_mutex_init(&q->init_mu, NULL);
  landed_init(q);
  q->wc.drain = drain;
  q->wc.forget = forget;
  q->wc.lock = &q->mu;
  return q;
}

/* The writer when one is attached already, else NULL. */
static struct writer *writer_if(struct audit_queue *q) {
  return __atomic_load_n(&q->w, __ATOMIC_ACQUIRE);
}

/* The writer, got and attached on first use (in the process that writes:
 * a command that never audits a call starts no thread). */
static struct writer *writer_of(struct audit_queue *q) {
  struct writer *w = writer_if(q);
  if (w) return w;
  pthread_mutex_lock(&q->init_mu);
  if (!(w = q->w)) {
    w = writer_get(q->rt->workspace);
    writer_attach(w, &q->wc);
    __atomic_store_n(&q->w, w, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&q->init_mu);
  return w;
}

/* q->held after npend or inflight changed (q->mu held). */
static void set_held(struct audit_queue *q) {
  atomic_store_explicit(&q->held, q->npend + q->inflight, memory_order_relaxed);
}

/* A block for a row of size bytes (q->mu held). */
static struct rowmem *rowmem_get(struct audit_queue *q, size_t size) {
  struct rowmem *m;
  if (size <= ROW_BLOCK && q->pool) {
    m = q->pool;
    q->pool = m->next;
    q->npool--;
    return m;
  }
  size_t n = size <= ROW_BLOCK ? ROW_BLOCK : size;
  m = xmalloc(sizeof *m + n);
  m->size = n;
  return m;
}

/* A row's block is done with (q->mu held). */
static void rowmem_put(struct audit_queue *q, struct rowmem *m) {
  if (m->size == ROW_BLOCK && q->npool < AUDIT_QUEUE_MAX) {
    m->next = q->pool;
    q->pool = m;
    q->npool++;
    return;
  }
  free(m);
}

static void grow(struct audit_queue *q, size_t need) {
  if (need <= q->cappend) return;
  if (!q->pend && q->sparecap >= need) {
    q->pend = q->spare, q->pendmem = q->sparemem, q->waits = q->sparewaits;
    q->cappend = q->sparecap;
    q->spare = NULL, q->sparemem = NULL, q->sparewaits = NULL, q->sparecap = 0;
    return;
  }
  /* The queue's bound at once: a batch leaves with the arrays, and growing
   * a new set row by row (copying 24 KiB at the end) cost every call more
   * than the memory does. */
  size_t cap = q->cappend ? 2 * q->cappend : AUDIT_QUEUE_MAX;
  while (cap < need) cap *= 2;
  q->pend = xrealloc(q->pend, cap * sizeof *q->pend);
  q->pendmem = xrealloc(q->pendmem, cap * sizeof *q->pendmem);
  q->waits = xrealloc(q->waits, cap * sizeof *q->waits);
  q->cappend = cap;
}

static void drop_all(struct audit_queue *q) {
  for (size_t i = 0; i < q->npend; i++) rowmem_put(q, q->pendmem[i]);
  q->npend = q->nsync = 0;
  set_held(q);
}

/* In a forked child: the parent writes what it queued (and no caller
 * waits here: the child has one thread, the one that forked; landed is
 * made anew, as a parent's thread may have been waiting on it, which a
 * broadcast in the child could wait for in turn). */
static void forget(struct writer_client *c) {
  struct audit_queue *q = (struct audit_queue *)c;
  landed_init(q);
  q->inflight = 0;
  drop_all(q);
  q->anchor = 0;
  q->unanchored = 0;
}

void audit_queue_free(struct audit_queue *q) {
  if (!q) return;
  if (q->w) {
    writer_detach(q->w, &q->wc); /* no drain runs after this */
    writer_put(q->w);
  }
  drop_all(q);
  while (q->pool) {
    struct rowmem *m = q->pool;
    q->pool = m->next;
    free(m);
  }
  free(q->pend);
  free(q->pendmem);
  free(q->waits);
  free(q->spare);
  free(q->sparemem);
  free(q->sparewaits);
  pthread_cond_destroy(&q->landed);
  pthread_mutex_destroy(&q->mu);
  pthread_mutex_destroy(&q->init_mu);
  free(q);
}

void audit_queue_set_sink(struct audit_queue *q, const struct audit_sink *sink) {
  /* What is queued goes where it was headed, and a drain still using the
   * old sink has finished when this returns (its ud may go next). */
  struct writer *w = writer_if(q);
  if (w) writer_sync(w);
  pthread_mutex_lock(&q->mu);
  q->sink = sink ? *sink : (struct audit_sink){0};
  pthread_mutex_unlock(&q->mu);
  if (w) writer_sync(w);
}

/* Deferred rows go to the writer once half the queue's bound waits (so a
 * batch is written while the next half fills, and a caller seldom finds
 * AUDIT_QUEUE_MAX unwritten rows and has to wait), or when the oldest is
 * AUDIT_QUEUE_AGE old; after a failure not before retry_at. */
#define AUDIT_QUEUE_BATCH (AUDIT_QUEUE_MAX / 2)

/* When the deferred rows are due (q->mu held, npend > 0). */
static double deferred_due(const struct audit_queue *q) {
  double at = q->npend >= AUDIT_QUEUE_BATCH ? 0 : q->oldest + AUDIT_QUEUE_AGE;
  return at > q->retry_at ? at : q->retry_at;
}

/* The writer's drain: the whole queue in one append_batch when something
 * is due (a waiting row, half a full queue, the oldest row's age, an
 * anchor request) or when forced; then the anchor, when asked. */
static double drain(struct writer_client *c, struct writer *w, int force) {
  struct audit_queue *q = (struct audit_queue *)c;
  pthread_mutex_lock(&q->mu);
  double now = util_monotonic();
  int due = force || q->nsync || q->anchor || (q->npend && deferred_due(q) <= now);
  if (!due) {
    double left = q->npend ? deferred_due(q) - now : -1;
    pthread_mutex_unlock(&q->mu);
    return left;
  }
  size_t n = q->npend, cap = q->cappend;
  struct audit_entry *rows = NULL;
  struct rowmem **mem = NULL;
  struct row_wait **waits = NULL;
  if (n) { /* the batch leaves the queue: callers keep adding meanwhile */
    rows = q->pend, mem = q->pendmem, waits = q->waits;
    q->pend = NULL, q->pendmem = NULL, q->waits = NULL;
    q->npend = q->cappend = q->nsync = 0;
    q->inflight = n;
    set_held(q);
  }
  struct audit_sink sk = q->sink;
  int anchor = q->anchor;
  q->anchor = 0;
  pthread_mutex_unlock(&q->mu);

  /* The arguments' hashes their callers left to this thread (rows put
   * back after a failed batch have theirs already). */
  for (size_t i = 0; i < n; i++)
    if (mem[i]->args) {
      json_hash_hex(mem[i]->args, mem[i]->hash);
      mem[i]->args = NULL;
    }
  struct err e;
  err_clear(&e);
  int rc = 0;
  struct store *st = NULL;
  if (!sk.ops && (n || anchor) && !(rc = writer_conn(w, &st, &e))) sk = audit_sqlite_sink(st);
  if (!rc && n) rc = sk.ops->append_batch(sk.ud, q->opts, rows, n, NULL, &e);

  pthread_mutex_lock(&q->mu);
  if (n) {
    size_t keep = 0;
    for (size_t i = 0; i < n; i++) {
      if (waits[i]) { /* its caller learns the outcome; a failed row is not kept */
        waits[i]->rc = rc;
        if (rc) waits[i]->e = e;
        waits[i]->done = 1;
      }
      if (!rc || waits[i]) {
        rowmem_put(q, mem[i]);
        continue;
      }
      rows[keep] = rows[i], mem[keep] = mem[i], waits[keep] = NULL;
      keep++;
    }
    if (keep) { /* in front of what came meanwhile, in their order */
      grow(q, keep + q->npend);
      memmove(q->pend + keep, q->pend, q->npend * sizeof *q->pend);
      memmove(q->pendmem + keep, q->pendmem, q->npend * sizeof *q->pendmem);
      memmove(q->waits + keep, q->waits, q->npend * sizeof *q->waits);
      memcpy(q->pend, rows, keep * sizeof *rows);
      memcpy(q->pendmem, mem, keep * sizeof *mem);
      memcpy(q->waits, waits, keep * sizeof *waits);
      q->npend += keep;
      q->oldest = now;
    }
    q->inflight = 0;
    set_held(q);
    pthread_cond_broadcast(&q->landed); /* audit_queue_backlog's waiters */
    if (!rc) q->unanchored = 1;
  }
  if (rc) q->last = e;
  /* A failed batch is tried again a second later (or at the next row that
   * must be on record, or a sync), not at every read that follows. */
  q->retry_at = rc ? now + AUDIT_QUEUE_AGE : 0;
  struct err ae = {0};
  int anchor_rc = 0;
  if (anchor && (q->unanchored == 1 || (anchor == 2 && q->unanchored))) {
    q->unanchored = anchor == 2 ? 0 : 2;
    pthread_mutex_unlock(&q->mu);
    if (!sk.ops && (anchor_rc = writer_conn(w, &st, &ae)) == 0) sk = audit_sqlite_sink(st);
    if (!anchor_rc && sk.ops->anchor) anchor_rc = sk.ops->anchor(sk.ud, q->opts, anchor == 2, &ae);
    if (anchor_rc) fprintf(stderr, "luagent: audit: the head was not anchored: %s\n", ae.msg);
    pthread_mutex_lock(&q->mu);
  }
  double left = q->npend ? deferred_due(q) - now : -1;
  if (left < 0 && q->npend) left = 0;
  if (rows && !q->spare) { /* the arrays serve the next batch */
    q->spare = rows, q->sparemem = mem, q->sparewaits = waits, q->sparecap = cap;
    rows = NULL, mem = NULL, waits = NULL;
  }
  pthread_mutex_unlock(&q->mu);
  free(rows);
  free(mem);
  free(waits);
  return left;
}

/* Rows a process's last flush could not write (audit_queue_lost). */
static _Atomic size_t lost_rows;

void audit_queue_flush(struct audit_queue *q, int durable) {
  if (!q) return;
  pthread_mutex_lock(&q->mu);
  int any = writer_if(q) || q->npend;
  if (any && q->anchor < 1 + !!durable) q->anchor = 1 + !!durable;
  pthread_mutex_unlock(&q->mu);
  if (!any) return; /* nothing was ever audited here */
  struct writer *w = writer_of(q);
  writer_sync(w);
  pthread_mutex_lock(&q->mu);
  if (q->npend) {
    fprintf(stderr, "luagent: audit: %zu rows could not be written: %s\n", q->npend, q->last.msg);
    if (durable) lost_rows += q->npend; /* the process's end: they go with it */
  }
  pthread_mutex_unlock(&q->mu);
}

size_t audit_queue_lost(void) { return lost_rows; }

enum { NSTR = 10 }; /* the string fields of an audit_entry */

int audit_queue_add(struct audit_queue *q, const struct audit_entry *a, int defer, struct err *e) {
  return audit_queue_add_args(q, a, NULL, 0, defer, e);
}

int audit_queue_add_args(struct audit_queue *q, const struct audit_entry *a, const void *args,
                         size_t args_len, int defer, struct err *e) {
  struct writer *w = writer_of(q);
  const char *src[NSTR] = {a->run_id,   a->caller_kind, a->caller_name, a->tool,
                           args ? NULL : a->args_hash,
                           a->decision, a->decided_by,  a->approver,    a->status, a->detail};
  /* the copy first (data is aligned for it), then the hash's place */
  size_t at = args ? (args_len + 15) / 16 * 16 : 0;
  size_t len[NSTR], total = args ? at + 65 : 0;
  for (int i = 0; i < NSTR; i++) total += src[i] ? (len[i] = strlen(src[i])) + 1 : 0;
  struct row_wait wait; /* e is written only with rc != 0 */
  wait.done = wait.rc = 0;
  double now = util_now(), due;
  pthread_mutex_lock(&q->mu);
  /* Copied under the lock: the block comes from the pool, and a row is a
   * few hundred bytes. */
  struct rowmem *m = rowmem_get(q, total);
  char *p = m->data + at;
  const char *dst[NSTR];
  for (int i = 0; i < NSTR; i++) {
    dst[i] = NULL;
    if (!src[i]) continue;
    memcpy(p, src[i], len[i] + 1);
    dst[i] = p;
    p += len[i] + 1;
  }
  m->args = NULL;
  if (args) { /* the writer hashes the copy into the hash's place */
    m->args = json_flat_move(m->data, args, args_len);
    m->hash = p;
    p[0] = 0;
    dst[4] = m->hash;
  }
  grow(q, q->npend + 1);
  if (!q->npend) q->oldest = util_monotonic(); /* once per batch */
  q->pendmem[q->npend] = m;
  q->waits[q->npend] = defer ? NULL : &wait;
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
  set_held(q);
  if (!defer) q->nsync++;
  /* A deferred row only tells the writer when it changes when the queue
   * is due (its first row, half the bound: once per batch, not per row). */
  int tell = !defer || q->npend == 1 || q->npend == AUDIT_QUEUE_BATCH;
  due = !defer ? 0 : deferred_due(q);
  pthread_mutex_unlock(&q->mu);
  if (tell) writer_due(w, &q->wc, due);
  if (defer) return 0;
  /* One barrier writes this row's batch (or fails it): the writer's pass
   * after the call drains the whole queue. &wait is in the queue until
   * then, so never return before. */
  int done = 0, rc = 0;
  while (!done) {
    writer_sync(w);
    pthread_mutex_lock(&q->mu);
    done = wait.done;
    rc = wait.rc;
    pthread_mutex_unlock(&q->mu);
  }
  if (rc) *e = wait.e;
  return rc;
}

/* How long a full queue waits for the writer's thread to take it. */
#define QUEUE_WAIT_NS 50000000L

/* A full queue that cannot be written (the database is unreachable)
 * refuses the read, so no read runs whose row is not on its way to the
 * chain and none is ever dropped. At most AUDIT_QUEUE_MAX reads (and those
 * of threads already past this check) wait unwritten. */
int audit_queue_backlog(struct audit_queue *q, struct err *e) {
  /* The usual answer without the lock: this thread's own rows are counted
   * exactly; another thread's add racing with this look is one of those
   * "already past this check". */
  if (atomic_load_explicit(&q->held, memory_order_relaxed) < AUDIT_QUEUE_MAX) return 0;
  pthread_mutex_lock(&q->mu);
  /* The writer's thread has a batch in hand, or is on its way to take
   * the due queue: wait for it to write one (then the rest is due)
   * instead of writing here after it (a writer_sync would), which made
   * this thread do the writer's work while the writer's thread sat idle.
   * A thread that does not come within QUEUE_WAIT, or a queue whose
   * last write failed, is written here (or refused) as before. */
  int waited = 0;
  while (q->npend + q->inflight >= AUDIT_QUEUE_MAX) {
    if (q->inflight) {
      pthread_cond_wait(&q->landed, &q->mu);
      continue;
    }
    if (waited || q->retry_at > util_monotonic()) break;
    waited = 1;
    struct timespec ts; /* landed waits on the monotonic clock (audit_queue_new) */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += QUEUE_WAIT_NS;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&q->landed, &q->mu, &ts);
  }
  int full = q->npend + q->inflight >= AUDIT_QUEUE_MAX;
  if (full && !q->inflight && q->retry_at > util_monotonic()) {
    /* The last write failed a moment ago (the database is unreachable):
     * refused at once, saying why. A write attempt per refused call (a
     * connection attempt each) made a run of refused reads crawl past its
     * deadline; the next attempt comes once retry_at has passed. */
    *e = q->last;
    pthread_mutex_unlock(&q->mu);
    return ERR_IO;
  }
  pthread_mutex_unlock(&q->mu);
  if (!full) return 0;
  /* Nothing in hand (no thread, or its batch failed): a pass here, which
   * writes the queue or says why it cannot. */
  struct writer *w = writer_of(q);
  writer_sync(w);
  pthread_mutex_lock(&q->mu);
  int rc = q->npend + q->inflight >= AUDIT_QUEUE_MAX ? ERR_IO : 0;
  if (rc) *e = q->last;
  pthread_mutex_unlock(&q->mu);
  return rc;
}
