/* audit_queue.h - the security pipeline's audit rows on their way to the
 * chain (the store's, or the sink sec_set_backend installed).
 *
 * The calling thread only copies its row into the queue; the store
 * writer's thread of the process (store/writer.h) takes the queue in
 * batches and hands each to the sink's append_batch, which hashes, chains
 * and writes the rows in the order they were added (so the chain is byte
 * for byte what writing them on the calling thread made of them).
 *
 * A row that must be on record before something happens (every decision
 * that is not a plain allowed read) is written, together with every row
 * queued before it, before audit_queue_add returns; when that fails the
 * caller is told (and denies its call). A plain allowed read's row only
 * queues: it is written with the next row that matters, once half of
 * AUDIT_QUEUE_MAX rows wait or the oldest is AUDIT_QUEUE_AGE seconds old
 * (the writer's timer sees to that without another call), whenever the
 * writer is synced (writer_sync: a run's start and end, a flush), and on
 * audit_queue_flush. So every read is on record before any call with side
 * effects runs, and a crash can lose only the last reads' rows. A queue
 * that is full and cannot be written refuses the next read
 * (audit_queue_backlog): nothing is ever dropped from it; rows of a batch
 * that failed go back in front, in their order. A full queue whose writer
 * is writing a batch makes the next read wait until that batch is written.
 *
 * Thread-safe: the ReAct loop runs the read-only tools of a round in
 * parallel threads, each adding its rows. Starts the writer's thread (in
 * the process that adds the first row) and no sooner.
 */
#ifndef LUAGENT_AUDIT_QUEUE_H
#define LUAGENT_AUDIT_QUEUE_H

#include "audit.h"
#include "err.h"

#define AUDIT_QUEUE_MAX 256
#define AUDIT_QUEUE_AGE 1.0

struct audit_queue;
struct runtime;

/* A queue whose rows go to the chain in rt's workspace (through the
 * writer's own connection) until a sink is set. opts is borrowed: it must
 * outlive the queue. Free with audit_queue_free. */
struct audit_queue *audit_queue_new(struct runtime *rt, const struct audit_opts *opts);
/* Detaches q from the writer (no write through its sink happens after
 * this returns) and frees it with whatever it still holds, unwritten: call
 * audit_queue_flush first. NULL is a no-op. */
void audit_queue_free(struct audit_queue *q);

/* Where rows go from now on: sink (copied; what its ud points to must
 * outlive the queue or the next call), or NULL for the store's chain
 * again. The rows queued before are written first, and no write through
 * the previous sink is under way when this returns. */
void audit_queue_set_sink(struct audit_queue *q, const struct audit_sink *sink);

/* Adds one row. a's strings are copied (detail must be redacted already);
 * a->ts <= 0 means now. defer != 0: a plain allowed read, only queued
 * (returns 0). defer == 0: written now with everything queued before it;
 * returns <0 with e filled (naming the chain's database) when that failed,
 * and then this row is not kept (its call is denied for it) while the
 * queued reads stay queued. */
int audit_queue_add(struct audit_queue *q, const struct audit_entry *a, int defer, struct err *e);
/* audit_queue_add for a row whose arguments' hash is not computed yet:
 * args (args_len bytes) is a flat copy of them (json.h, json_flat_copy),
 * copied in turn; a->args_hash is ignored. The writer's thread sets the
 * row's args_hash to json_hash_hex of that copy before the row is
 * chained, so the chain holds what audit_queue_add with json_hash_hex of
 * the arguments would have put there, and the calling thread neither
 * prints nor hashes them. */
int audit_queue_add_args(struct audit_queue *q, const struct audit_entry *a, const void *args,
                         size_t args_len, int defer, struct err *e);

/* Before a read whose row will only queue: 0 when it may run; <0 (e
 * filled) when AUDIT_QUEUE_MAX rows wait and cannot be written. */
int audit_queue_backlog(struct audit_queue *q, struct err *e);

/* Writes every queued row, then anchors the head outside the database at
 * the end of a unit of work: durable 0 at the end of a daemon run or a
 * test, durable 1 at process exit (see audit_anchor). Failures are
 * reported on stderr; rows that could not be written stay queued. The
 * rows are on record when this returns. */
void audit_queue_flush(struct audit_queue *q, int durable);
/* How many rows the last flushes of this process's queues (durable 1)
 * could not write: they are lost with the process, so its command must not
 * report success (cli/main.c). */
size_t audit_queue_lost(void);

#endif
