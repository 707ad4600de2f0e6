/* store.h - the workspace state database (SQLite, WAL).
 *
 * One file per workspace: <workspace>/.luagent/state.db. It holds runs and
 * their events, automation state and schedules, memory, approvals, the audit
 * chain, secrets and the embedding cache.
 *
 * A store from store_open is one connection: one thread at a time uses
 * it (the owner serialises, and may then step a statement on whichever
 * thread holds its lock). A store from store_open_shared may be used by any
 * number of threads at once: each thread that uses it gets an SQLite
 * connection of its own (SQLite forbids two threads on one connection),
 * kept with its prepared statements until the thread ends and then reused
 * by the next thread that needs one. So everything a caller gets from a
 * shared store belongs to the calling thread: statements from
 * store_prepare and store_cached, store_db's handle, sqlite3_changes and
 * sqlite3_errmsg on it, and a transaction from store_begin (it holds this
 * thread's statements only; another thread's writes wait for it,
 * busy_timeout 5 s). Never step its statements on another thread. WAL
 * mode lets the connections read concurrently. Either kind: store_close
 * must not race another thread's use.
 *
 * The schema is versioned with PRAGMA user_version and migrated forward on
 * open; a file written by a newer luagent is refused with a clear error
 * rather than risked.
 */
#ifndef LUAGENT_STORE_H
#define LUAGENT_STORE_H

#include <sqlite3.h>

#include "err.h"

struct store;

/* Opens (creating if needed) <workspace>/.luagent/state.db. *out must be
 * released with store_close. Errors name the file and the cause (unreadable,
 * not a database, newer schema). */
int store_open(const char *workspace, struct store **out, struct err *e);
/* The same, as a store threads share (above): the runtime's. */
int store_open_shared(const char *workspace, struct store **out, struct err *e);
/* Same for an explicit database path. */
int store_open_path(const char *path, struct store **out, struct err *e);
void store_close(struct store *s); /* NULL is a no-op */

/* The connection (shared: this thread's), for modules that own their
 * tables' queries. Borrowed. Shared: for this thread only, and NULL
 * (SQLite's calls then fail) only when a thread's first use cannot open
 * one (out of files or memory); store_prepare and the others report that
 * as an error. */
sqlite3 *store_db(struct store *s);
const char *store_path(const struct store *s);

/* Runs one or more statements without results. */
int store_exec(struct store *s, const char *sql, struct err *e);
/* Prepares sql; errors carry SQLite's message and the file name. */
int store_prepare(struct store *s, const char *sql, sqlite3_stmt **st, struct err *e);
/* Fills e from the connection's last error with a prefix. Returns ERR_IO. */
int store_error(struct store *s, struct err *e, const char *what);

/* The statement for sql, prepared once for this connection and kept by the
 * store until store_close (pass a string literal: it is cached by address
 * first). *st comes reset with no bindings; give it back with
 * store_release as soon as you are done (a SELECT left mid-way holds its
 * read snapshot open), never sqlite3_finalize it. One user at a time, like
 * the connection: on a shared store each thread has its own cache, so two
 * threads asking for the same SQL get two statements. */
int store_cached(struct store *s, const char *sql, sqlite3_stmt **st, struct err *e);
/* Ends the use of a statement from store_cached: resets it and drops its
 * bindings (NULL is a no-op). */
void store_release(struct store *s, sqlite3_stmt *st);
/* The same pair for a caller that binds every parameter of the statement
 * before each step (a hot INSERT): *st comes reset with its last use's
 * bindings, and store_release_bound resets it without dropping them.
 * Dropping them costs a pass over every parameter, twice per use, and
 * buys nothing: a reset statement never reads its bindings, and its next
 * user either rebinds them all or gets them dropped by store_cached. */
int store_cached_bound(struct store *s, const char *sql, sqlite3_stmt **st, struct err *e);
void store_release_bound(struct store *s, sqlite3_stmt *st);
/* BEGIN IMMEDIATE / COMMIT / ROLLBACK (prepared once per connection). */
int store_begin(struct store *s, struct err *e);
int store_commit(struct store *s, struct err *e);
void store_rollback(struct store *s);

/* Marks every run (other than the daemon's automation runs) that is still
 * "running" although the process that ran it is gone (killed, crashed) as
 * "interrupted". Commands call it when they open a workspace. Returns the
 * number marked, or <0 with e filled. */
int store_mark_interrupted(struct store *s, struct err *e);
/* Expires the pending approval requests whose waiting process is gone
 * (its pid no longer runs with the start time it recorded): nothing would
 * act on their decision. Returns how many, or <0 with e set. */
int store_expire_orphan_approvals(struct store *s, struct err *e);
/* The start time of process pid in clock ticks since boot (/proc/PID/stat
 * field 22), or -1 when it does not exist. */
long long store_proc_start(int pid);

/* Deletes finished runs (any status but running and queued) that ended
 * before `before` (util_now() seconds), with their events, in short
 * batches. *runs and *events get the counts. The audit chain is not
 * touched: it stays verifiable whatever the journal keeps. */
int store_prune_runs(struct store *s, double before, long long *runs, long long *events,
                     struct err *e);

/* How many SQLite connections s holds (shared: at most one per thread
 * using it at the same time): for tests and benchmarks. */
int store_connections(struct store *s);
/* Rows changed through s since it was opened, by every thread's
 * connection (sqlite3_total_changes summed). Exact when no other thread
 * is writing at the time of the call. */
long long store_total_changes(struct store *s);

/* The schema version this build writes. */
int store_schema_version(void);

#endif
