/* writer.h - the store writer: one thread per process and workspace that
 * writes and commits what its clients queue (the run journal's events, the
 * security pipeline's audit rows), with its own SQLite connection, so the
 * threads that produce rows (the ReAct loop, parallel tool calls) do not
 * spend their time in SQLite, and whatever has arrived by the time the
 * writer gets to it goes in one transaction per client (group commit).
 *
 * A client is a queue its module keeps (journal.c, policy/audit_queue.c).
 * It says when its rows are due (writer_due); the writer thread then calls
 * its drain, which takes what is queued under the client's own lock and
 * writes it through the writer's connection. Drains of one writer run one
 * at a time, in passes over the clients, in the order they attached.
 * writer_sync is the barrier: when it returns, every client was drained,
 * due or not, by a pass that began after the call, so everything queued
 * before the call is on disk (or its failure is known to its client). The
 * caller makes that pass itself (once a pass already running ends): it
 * waits for it anyway, and so waits for no thread to be scheduled.
 *
 * Processes: the thread starts with the first writer_due,
 * in the process that calls it. A forked child inherits the structures but
 * not the thread, nor a connection it may use: at the fork each client's
 * forget drops what the parent had queued (the parent writes that), and
 * the child starts its own thread and connection when it first needs
 * them. At exit (atexit),
 * every writer of the process is synced, so rows queued by code that never
 * closed its journal are still written.
 */
#ifndef LUAGENT_WRITER_H
#define LUAGENT_WRITER_H

#include <pthread.h>

#include "err.h"
#include "store.h"

struct writer;

/* A client, embedded in its module's struct; the module fills the first
 * three fields before writer_attach, the writer owns the rest. */
struct writer_client {
  /* On the writer thread, without the writer's lock: writes what is due
   * (everything queued when force != 0: a sync, the end). w is for
   * writer_conn. Returns the seconds until what is left becomes due, or
   * < 0 when nothing is left to write. */
  double (*drain)(struct writer_client *c, struct writer *w, int force);
  /* In a forked child, from its pthread_atfork handler, with the
   * client's lock and the writer's held (take neither, call no writer_*
   * function): drop what is queued, unwritten: it is the parent's. May be
   * NULL. */
  void (*forget)(struct writer_client *c);
  /* The lock that guards the client's queue, or NULL: held across fork()
   * (pthread_atfork) so a child never inherits it locked. Never hold it
   * while calling a writer_* function. */
  pthread_mutex_t *lock;
  /* the writer's */
  double due; /* monotonic time its rows are due, HUGE_VAL: none */
  int busy;   /* its drain is running */
  struct writer_client *next;
};

/* The writer of <workspace>/.luagent/state.db in this process, shared by
 * every caller that names the same workspace string (one reference per
 * call; give it back with writer_put). Starts no thread and opens no
 * connection yet. Never fails. */
struct writer *writer_get(const char *workspace);
/* Gives a reference back; the last one syncs, stops the thread and closes
 * the connection. Detach every client first. NULL is a no-op. */
void writer_put(struct writer *w);

/* Adds c (its first three fields filled) to the clients drained in each
 * pass, after those already there. */
void writer_attach(struct writer *w, struct writer_client *c);
/* Drains c one last time (writer_sync) and removes it: no drain of c runs
 * after this returns. */
void writer_detach(struct writer *w, struct writer_client *c);

/* c has rows due at monotonic time `at` (0 or the past: now). Wakes the
 * thread (starting it if needed) only when that is earlier than it would
 * wake anyway. */
void writer_due(struct writer *w, struct writer_client *c, double at);
/* The barrier (see above), the pass made on the caller's thread. Must not
 * be called from a drain, nor with a client's lock held. */
void writer_sync(struct writer *w);

/* From a drain: the writer's own connection, opened on first use. <0 with
 * e filled (the store's message, naming the file) when it cannot be
 * opened; the next call tries again. */
int writer_conn(struct writer *w, struct store **st, struct err *e);

#endif
