/* daemon_impl.h - what the daemon_*.c files share; no one else includes it.
 *
 * daemon.c: framing, the event queue, the scheduler's state, database
 * helpers, schedules and loading automations; daemon_worker.c: the worker
 * process; daemon_runs.c: worker supervision and runs; daemon_loop.c:
 * events, timing, inotify and reload, the loop, daemon_main. The names
 * below lost their `static` when daemon.c was split, unchanged otherwise.
 * daemon_cluster*.c: the same daemon as one host of a cluster (see the
 * cluster section below).
 */
#ifndef LUAGENT_DAEMON_IMPL_H
#define LUAGENT_DAEMON_IMPL_H

#include <signal.h>
#include <sqlite3.h>
#include <sys/types.h>

#include "daemon.h"
#include "store.h"
#include "util.h"

struct config;

#define MAX_FRAME (64u << 20)
#define MAX_PAYLOAD (256 * 1024)
#define MAX_RESULT (64 * 1024)      /* journaled result text */
#define MAX_STATE (8 * 1024 * 1024) /* ctx.state as JSON */
/* What the journal keeps of one run (daemon_worker.c sends it, the
 * scheduler stores it as the run's events): print/log text, script tool
 * calls, and a bound on the events' JSON that a misbehaving worker cannot
 * pass. */
#define RUN_LOG_BYTES (64u * 1024)
#define RUN_LOG_CALLS 256
#define RUN_LOG_MAX_JSON (1024u * 1024)

/* ============================================================= scheduler */

struct entry;

/* Jobs a worker holds at most: the run it is busy with and up to
 * DAEMON_PIPE - 1 sent behind it, which it starts the moment it replied
 * to the one before (no round trip through the scheduler, no sleep and
 * wake-up of either process per run: in a burst those were most of a
 * run's CPU). Only when no burst worker is idle and no new one may be
 * started (daemon_runs.c, rank_workers and pick_worker; any worker once
 * every one is busy at --workers), only behind a run of an
 * automation whose last run took under DAEMON_PIPE_FAST_S and that has
 * run for less than that so far (a slow run holds up at most the few
 * queued behind it), never in a cluster or for mode "restart" (a queued
 * run cannot be taken back). A queued run has r->w set and r->queued; its
 * row is written when it is queued, and the time the worker began it (its
 * reply says) with its end (r->row_early). */
#define DAEMON_PIPE 4
#define DAEMON_PIPE_FAST_S 0.020

struct worker {
  struct worker *next;
  pid_t pid;
  long long start; /* its start time (proc.h; 0: unknown), journaled with pid */
  int fd;          /* its replies and events (read end); -1 once closed */
  int wfd;         /* its jobs (write end); -1 once closed */
  struct run *run; /* the run it is busy with, or NULL */
  struct run *wq[DAEMON_PIPE - 1]; /* sent behind it, in order */
  int nwq;
  struct sbuf in;
  struct sbuf out; /* jobs handed to it, sent once their rows are committed */
  /* Of out: bytes written to its job pipe, and bytes committed (may be
   * written). The pipe is written without blocking: a busy worker reads
   * it only between runs, and jobs queued behind its run (their sources
   * and ctx.state) can outgrow the pipe's 64 KiB; the rest goes as the
   * pipe drains (loop_once, POLLOUT). Review 19: the scheduler stopped for
   * up to 10 s there, then journaled the worker's run crashed. */
  size_t out_sent, out_ready;
  unsigned long long out_total, sent_total; /* bytes put in out, and written, in all */
  int stale;  /* config or skills changed: retire when idle */
  int burst;  /* short runs go to it (daemon_runs.c, rank_workers: set each pass) */
  int killed; /* we sent SIGKILL; waiting for the reap */
  int reaped; /* waitpid took it: its pid may be another process's now */
  double idle_since;
};

struct run {
  struct run *next;
  struct entry *ent;
  char id[40];
  cJSON *trigger; /* {kind, name, slot, payload} */
  cJSON *args;    /* manual args or NULL */
  double slot, started, timeout, kill_at;
  double started_mono; /* monotonic: whether it still looks short (daemon_runs.c, short_busy) */
  double handed_mono;  /* monotonic: when it was handed to its worker */
  struct worker *w;              /* NULL while pending */
  char *status, *result, *error; /* set when finished (manual runs read them) */
  cJSON *events;                 /* what the worker sent for the journal, or NULL */
  size_t events_json;            /* their size, against RUN_LOG_MAX_JSON */
  int events_cut;                /* some were refused over that bound */
  int finished;
  int queued;       /* sent to r->w behind its run; not started yet */
  int row_in_db;    /* its runs row is written (in the open transaction at least) */
  unsigned long long row_gen; /* the transaction (d->tx_gen) its INSERT went in; 0: none open */
  /* Its end: the runs row's columns and its events went in transaction
   * end_gen (0: none open), to be written again (end_redo) when that was
   * rolled back; kept until then (daemon_runs.c, write_end) */
  unsigned long long end_gen;
  int end_redo;
  int tool_calls;
  double finished_at;
  unsigned long long job_end; /* its job's end in its worker's out_total */
  int row_early;    /* started on the worker it was queued on: the row's start is the
                       hand-off's, written again with its end (the worker's word) */
  long long rowid;  /* that row's rowid, as its INSERT made it (0: not known) */
  char *trig_text;  /* the trigger as printed for the journal and the job */
  /* cluster (d->cl): the run has a row in luagent_runs that this host
   * claimed (cl), another host or a fence took it (lost: nothing of it is
   * recorded here any more), the fence thread killed its worker (fenced). */
  int cl, lost, fenced, attempt;
};

struct entry {
  struct entry *next;
  char name[65];
  char chunk[256];
  char path[4352];
  struct automation *a; /* the last good version, or NULL */
  char key[256];        /* automation_trigger_key(a), made when a is set: not per run */
  long long rowid;      /* of its automations row, as last read (0: not known) */
  char *bad_source;     /* text of the last failed load (not re-reported) */
  char *load_error;
  double next_fire; /* 0: none */
  int enabled;
  int running, pending; /* running counts runs queued in a worker too */
  double last_s;         /* how long its last run here took (-1: none yet) */
  pid_t last_pid; /* the worker its last run went to (0: none), which has its chunk
                   * compiled: the next run goes there when it is idle (idle_worker) */
  int sched_dirty;       /* next_fire changed; written by its run's end or the commit */
  int deleted;
  char hash[17]; /* the first 16 hex digits of the SHA-256 of a->source */
  /* The automations row as this scheduler last read or wrote it
   * (state_known), so a run starts without reading it: ctx.state's JSON
   * text, its taint, last_run and last_status. Forgotten whenever another
   * connection committed to the store (daemon__state_check). */
  int state_known;
  int state_tainted;
  char *state;    /* JSON text */
  double last_run; /* 0: none */
  char last_status[24];
  /* Its lock (autolock.h), held by this process from before a run reads
   * ctx.state until the save of the last run of a stretch is committed
   * (-1: not held); lock_release: it is on d->unlock, to go at the
   * commit; lock_said: the wait for another process's run was said. */
  int lock_fd;
  int lock_release;
  int lock_said;
};

struct daemon {
  char ws[4096];
  char exe[4096];  /* the workers' binary: ours, unless a test put another */
  char self_exe[4096]; /* our binary's path at start: while exe is it, workers
                        * run self_fd (this very binary) */
  /* our own binary, opened at start (O_PATH, /proc/self/exe): what workers
   * exec, this binary's inode whatever its path names after an upgrade.
   * Exec'ing the path /proc/self/exe runs valgrind's launcher under
   * valgrind (it fakes the open and the readlink of that path, not the
   * exec), and every run crashed there. -1: not opened, workers exec
   * /proc/self/exe. */
  int self_fd;
  int exe_changed; /* a new binary is at exe's path: said once */
  struct daemon_opts o;
  struct store *st;
  int in_tx;
  double tx_since; /* monotonic time of its BEGIN */
  unsigned long long tx_gen; /* counts the BEGINs: which transaction a run's row went in */
  int tx_lost; /* a transaction was rolled back since the last commit point */
  unsigned long long committed_gen; /* the last transaction committed */
  struct config *cfg;
  int cfg_broken; /* the latest luagent.lua on disk did not load */
  struct entry *entries;
  struct worker *workers;
  struct run *runs; /* pending and active, in arrival order */
  struct run *runs_last; /* the last of them, where a new one goes (NULL: none) */
  int nworkers;
  int burst; /* the workers short runs use (daemon_runs.c, burst_workers; 0: not yet known) */
  int sigpipe[2];
  int ino, wd_auto, wd_root, wd_state, wd_skills;
  double reload_at; /* debounced reload time, 0 = none */
  int reload_full;
  int stopping;
  double stop_deadline;
  double next_scan; /* earliest next_fire */
  int oneshot;      /* manual-run mode: no schedule */
  int lock_fd;
  struct {
    const char *sql; /* a string literal: looked up by address */
    sqlite3_stmt *st;
  } stmts[32]; /* prepared once, reset between uses */
  int nstmts;
  double next_prune; /* monotonic time of the next journal prune */
  char skills_gen[4300]; /* the skills generation workers load ("": skills/ itself) */
  cJSON *skills_bad;     /* {folder: "file:line: message"} last reported */
  struct dcl *cl;        /* the cluster (daemon_cluster.c), NULL on one host */
  /* the cluster's live nodes (refreshed each tick) and the due slots this
   * host leaves to their preferred node for a moment (daemon_cluster_batch.c) */
  char (*cl_alive)[64];
  int ncl_alive;
  struct daemon_due *cl_later;
  size_t ncl_later, cap_later;
  int evicted;           /* the cluster gave this node's name to another daemon */
  double cl_skew;        /* the database's clock minus this host's (each heartbeat) */
  /* The entries' fire times as a min-heap (scan_due pops the due ones
   * instead of walking every entry each pass); scan_full asks for a walk
   * of all entries, which rebuilds it: set wherever next_fire changes
   * outside scan_due. A node whose time is no longer its entry's
   * next_fire is stale and dropped when it comes up. */
  struct daemon_fire { double t; struct entry *ent; } *fires;
  size_t nfires, cap_fires;
  int scan_full;
  long long data_version; /* PRAGMA data_version when the entries' rows were last checked */
  int nfinished;          /* finished runs not yet swept */
  struct sbuf job;        /* the job record being sent (kept between runs) */
  struct entry **dirty;   /* entries with sched_dirty set */
  size_t ndirty, cap_dirty;
  int tx_checked;         /* PRAGMA data_version was read inside the open transaction */
  struct entry **unlock;  /* entries whose lock goes once the transaction is committed */
  size_t nunlock, cap_unlock;
  double lock_retry;      /* monotonic: when to try again for a run held back by a lock (0: none) */
  int lock_dir;           /* .luagent/locks, open during a pass that starts runs (-1: not) */
  double pool_retry;      /* monotonic: when a short run waiting for a burst worker looks again (0: none) */
  double journal_retry;   /* monotonic: a run's row could not be written; none starts before (0: none) */
  char journal_why[256];  /* what the store said when it could not (a manual run's error) */
  int events_again;       /* queued events could not be consumed: read them again */
};

/* The wall clock the schedule is read against: this host's, or in a
 * cluster the database's (this host's plus the skew its heartbeats
 * measure): a host whose clock runs ahead must not claim slots early, nor
 * find slots missed that are not due yet. */
static inline double daemon__now(const struct daemon *d) {
  return util_now() + (d->cl ? d->cl_skew : 0);
}

/* ================================================================ cluster
 * daemon_cluster.c (membership, leases, the fence, outages, notifications),
 * daemon_cluster_claim.c (claims), daemon_cluster_schedule.c (the shared
 * schedule), daemon_cluster_runs.c (the journal, ctx.state, leases of
 * runs), daemon_cluster_events.c (the event queue); what those share is
 * daemon_cluster_impl.h. Only called when d->cl is set, except
 * daemon__cl_start. */
#define CLUSTER_MAX_ATTEMPTS 3
struct dcl;
/* Reads luagent.lua's cluster table; when there is one, connects, checks the
 * schema and joins (refusing a node name a live daemon holds). 0 with
 * d->cl NULL when there is no cluster. */
int daemon__cl_start(struct daemon *d, struct err *e);
/* Leaves the cluster (stopped), stops the fence thread, closes. */
void daemon__cl_stop(struct daemon *d);
/* The socket to poll (-1: none) and the seconds until the next tick. */
int daemon__cl_fd(struct daemon *d);
double daemon__cl_wait(struct daemon *d);
/* Notifications, renewal, heartbeat, expiry sweep, queued runs, events,
 * enabled flags, reconnecting: whatever is due. */
void daemon__cl_tick(struct daemon *d, int readable);
/* Renews leases (and the heartbeat) if that is due: called between the
 * claims of a long burst, so a busy loop never lets its own runs' leases
 * lapse into the fence. */
void daemon__cl_keepalive(struct daemon *d);
/* 1 when the database can be used now (not in an outage). */
int daemon__cl_up(struct daemon *d);
/* Records a failed statement: a lost connection starts an outage (said
 * once); anything else is complained about. */
void daemon__cl_failed(struct daemon *d, const struct err *e);
struct pg *daemon__cl_pg(struct daemon *d);
const char *daemon__cl_node(struct daemon *d);
double daemon__cl_lease(struct daemon *d);
/* The fence: a run's worker is killed when renewals stop being confirmed. */
void daemon__cl_guard(struct daemon *d, pid_t pid);
void daemon__cl_unguard(struct daemon *d, pid_t pid);
/* A successful claim or renewal sent at monotonic time t0 holds every run
 * of this host until t0 + lease_s by the database's clock. */
void daemon__cl_confirmed(struct daemon *d, double t0);
/* The memfd holding the fence deadline (monotonic seconds) that workers
 * get as fd 4 (-1: none); a worker recognizes it by its name. */
#define DAEMON_FENCE_NAME "luagent-fence"
#define DAEMON_FENCE_FD 4
/* A worker reads jobs on fd 3 and writes to DAEMON_REPLY_FD (a pipe);
 * without one (a test driving it over a socketpair) it writes to fd 3. */
#define DAEMON_REPLY_FD 5
int daemon__cl_fence_fd(struct daemon *d);
/* How many workers the fence killed since the last call. */
int daemon__cl_take_fenced(struct daemon *d);
/* 1 (once) when the fence killed pid: its run ends as interrupted. */
int daemon__cl_was_fenced(struct daemon *d, pid_t pid);

/* daemon_cluster_schedule.c */
void daemon__cl_schedule(struct daemon *d, struct entry *ent, int startup);
void daemon__cl_file(struct daemon *d, struct entry *ent, int removed);
/* One trigger fired, claimed in its own transaction (slot > 0 for a time
 * trigger; `automations run` passes 0 and, being oneshot, skips the mode
 * as on one host). The scheduler's time slots go through
 * daemon__cl_fire_due instead. Takes trigger and args. */
void daemon__cl_fire(struct daemon *d, struct entry *ent, cJSON *trigger, cJSON *args, double slot);
/* daemon_cluster_claim.c: local runs of ent other than keep that a restart
 * ended in the database are stopped (their end is not recorded: it is). */
void daemon__cl_stop_restarted(struct daemon *d, struct entry *ent, const char *keep);

/* daemon_cluster_batch.c: the due time slots of one scan, claimed in
 * batches (takes every trig). */
struct daemon_due {
  struct entry *ent;
  cJSON *trig;
  double slot;
  double at; /* monotonic: when a host that is not its preferred one tries it */
};
/* Each slot has a preferred node among the live ones (rendezvous hashing
 * of node and automation): it claims at once, the others a moment later
 * if it has not (so a dead or slow node's share still runs). */
void daemon__cl_fire_due(struct daemon *d, struct daemon_due *due, size_t n);
/* The deferred slots whose moment came; the seconds until the next one
 * (a large number when none). */
void daemon__cl_fire_later(struct daemon *d);
double daemon__cl_later_wait(struct daemon *d);
/* Drops the deferred slots of ent (its file changed or went). */
void daemon__cl_forget_later(struct daemon *d, struct entry *ent);
/* daemon_cluster_runs.c */
int daemon__cl_load_state(struct daemon *d, struct run *r, cJSON *ctx, int *tainted);
/* state: the JSON text to save (status ok only), or NULL. */
void daemon__cl_finish(struct daemon *d, struct run *r, const char *status, const char *result,
                       const char *error, const char *state, int tainted, int tool_calls);
void daemon__cl_renew(struct daemon *d);
void daemon__cl_sweep(struct daemon *d);
void daemon__cl_promote(struct daemon *d);
void daemon__cl_events(struct daemon *d); /* daemon_cluster_events.c */
void daemon__cl_refresh_enabled(struct daemon *d); /* daemon_cluster_schedule.c */
/* After an outage: this node's rows still "running" that no local run
 * owns any more are marked interrupted (they were fenced). */
void daemon__cl_reconcile(struct daemon *d);
/* Journal retention in the cluster: --keep runs per automation, --retain,
 * and slot rows older than a week (each automation's latest stays). */
void daemon__cl_prune(struct daemon *d);
/* Queues an event in the cluster when ws's luagent.lua has one: 1 (done,
 * *id set), 0 (no cluster: use the store), <0 (e set). */
int daemon__cl_emit(const char *ws, const struct config *cfg, const char *name,
                    const char *payload, int tainted, long long *id, struct err *e);

/* daemon_skills.c: checks skills/ into a new generation for the workers
 * (last good version of each skill kept), reporting what changed. */
void daemon__skills_refresh(struct daemon *d, int startup);

/* ================================================================== wire
 * daemon_wire.c: frames, and the binary job ('J') and reply ('R') records
 * (the format is described there). */
enum {
  REC_RUN_ID = 1, REC_NAME, REC_CHUNK, REC_SOURCE, REC_TIMEOUT, REC_TAINTED, REC_NOW, REC_NODE,
  REC_STATE,       /* ctx.state as JSON text (job; reply: the state to save) */
  REC_TRIGGER,     /* ctx.trigger as JSON text */
  REC_ARGS,        /* ctx.args as JSON text (absent: {}) */
  REC_LAST_TIME, REC_LAST_STATUS, /* ctx.last_run */
  REC_PID, REC_STATUS, REC_RESULT, REC_ERROR, REC_CODE, REC_TOOL_CALLS,
  REC_STARTED,     /* reply: CLOCK_MONOTONIC when the worker began the job */
  REC_NTAGS
};
struct daemon_rec {
  unsigned have; /* bit tag: the field is present */
  struct { const char *p; size_t n; } f[REC_NTAGS];
};
/* A record in b (emptied first), framed: begin, put fields, send. */
void daemon__rec_begin(struct sbuf *b, char kind);
void daemon__rec_put(struct sbuf *b, int tag, const char *p, size_t n);
void daemon__rec_str(struct sbuf *b, int tag, const char *s); /* NULL: left out */
void daemon__rec_num(struct sbuf *b, int tag, double v);
/* Fills in the frame's length: 0, or -1 when it is over MAX_FRAME. */
int daemon__rec_end(struct sbuf *b);
/* rec_end, then writes the frame in one write(2) when the pipe takes it.
 * 0 or -1. */
int daemon__rec_send(int fd, struct sbuf *b);
/* Reads a record of kind from p (n bytes); its fields point into p. <0
 * with why set when it is not one: another kind, a field cut off or
 * longer than what is left, unterminated, unknown or repeated. */
int daemon__rec_parse(const char *p, size_t n, char kind, struct daemon_rec *r, char *why,
                      size_t nwhy);
/* A text field as a C string (NULL: absent, or a NUL inside). */
const char *daemon__rec_text(const struct daemon_rec *r, int tag);
/* A number field: 0, or -1 when absent, not 8 bytes, or not finite. */
int daemon__rec_number(const struct daemon_rec *r, int tag, double *out);
/* The next whole frame in b at *off: 1 (*p, *n its payload, *off moved
 * past it), 0 (not all there yet), -1 (announces more than MAX_FRAME).
 * daemon__frame_drop then removes the frames read. */
int daemon__frame_next(const struct sbuf *b, size_t *off, const char **p, size_t *n);
void daemon__frame_drop(struct sbuf *b, size_t off);
/* The trigger as json_print(t, 0) prints it, byte for byte, without its
 * number formatting for a time slot (most of printing one). Caller frees. */
char *daemon__trigger_text(const cJSON *t);

/* daemon.c */
int daemon__write_all(int fd, const char *p, size_t n);
int daemon__send_frame(int fd, const char *json);
void daemon__lock_path(const char *ws, char *out, size_t n);
/* tainted != 0: the emitting run had read outside content (see call.h's
 * run_state); the automation the event starts begins tainted. */
/* The checks daemon__queue_event makes, for the cluster's queue. */
int daemon__cluster_event_check(const char *name, const char *payload, struct err *e);
int daemon__queue_event(struct store *st, const char *name, const char *payload, int tainted,
                        long long *id, struct err *e);
void daemon__say(struct daemon *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void daemon__complain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void daemon__tx(struct daemon *d);
sqlite3_stmt *daemon__prep(struct daemon *d, const char *sql);
/* Commits the open transaction (none: 0). When the COMMIT fails it is
 * rolled back; when SQLite rolled it back by itself before (a statement in
 * it failed so, daemon__tx notices), it is gone: then what was written in
 * it is not on disk (-1). After either, or after an earlier transaction
 * was found gone since the last commit, the runs handed to workers since,
 * whose jobs wait for the commit (send_jobs), are taken back
 * (daemon__unsend). */
int daemon__tx_commit(struct daemon *d);
/* After a rollback: the jobs not sent yet go back, unsent; their runs go
 * back to pending (rows inserted in a transaction begun after the commit
 * point `before` that did not commit are inserted again when they start;
 * ends written in one are written again), and none starts for
 * DAEMON_JOURNAL_RETRY_S. A worker never runs what the journal does not
 * hold: a disk full for a while delays runs, it does not run them
 * unrecorded. (Review 22: one lost generation was remembered, a chain of
 * them, one per schedule save, left rows taken for written.) */
void daemon__unsend(struct daemon *d, unsigned long long before);
/* No run starts for DAEMON_JOURNAL_RETRY_S (d->journal_retry); held:
 * that time has not come yet. */
void daemon__hold_starts(struct daemon *d);
int daemon__held(const struct daemon *d);
/* r, finished, must be kept: its end is not committed yet, or is to be
 * written again (which this does once the hold is over). */
int daemon__end_pending(struct daemon *d, struct run *r);
#define DAEMON_JOURNAL_RETRY_S 1.0
/* The loop's group commit: what a pass of the loop writes (runs started
 * and finished, schedules, ctx.state) joins the open transaction, which is
 * committed before the loop waits for anything (so nothing it wrote waits
 * unseen while it sleeps) and, while a burst keeps it busy, once it is
 * DAEMON_TX_MAX_S old: a burst of a thousand runs commits a few dozen
 * times instead of twice per pass. Commits do not fsync (WAL, synchronous
 * NORMAL), so this saves the pages written per commit, not syncs. */
#define DAEMON_TX_MAX_S 0.010
void daemon__tx_due(struct daemon *d);
/* Write-behind inside the open transaction: a run's row is written once,
 * when it ends, and an automation's new next_fire with its run's end, if
 * both happen before the commit; daemon__tx_commit first writes what is
 * still pending (the rows of runs still running, schedules), so every
 * commit holds exactly what it held before. Without a transaction they
 * are written at once. */
void daemon__defer_schedule(struct daemon *d, struct entry *ent);
void daemon__flush(struct daemon *d);
void daemon__done(struct daemon *d, sqlite3_stmt *s);
/* Steps s once and resets it: 0, or -1 (complained about) when it failed. */
int daemon__step_done(struct daemon *d, sqlite3_stmt *s, const char *what);
/* daemon__step_done for an UPDATE of one row found by its rowid: s has
 * every parameter bound but ?ri, the rowid, and its WHERE checks the row's
 * key too (`rowid = ?N AND name = ?M`), so a renumbered rowid (VACUUM
 * renumbers the rows of a table without an INTEGER PRIMARY KEY) changes
 * nothing. When no row changed, *rowid is looked up again by key with
 * lookup (`SELECT rowid FROM t WHERE key = ?`) and s stepped once more.
 * Saves the key's index search that a `WHERE name = ?` makes per run.
 * sqlite3_changes() afterwards tells whether the row was there. */
int daemon__step_row(struct daemon *d, sqlite3_stmt *s, int ri, long long *rowid,
                     const char *lookup, const char *key, const char *what);
#define DAEMON_AUTOMATION_ROWID "SELECT rowid FROM automations WHERE name = ?"
#define DAEMON_RUN_ROWID "SELECT rowid FROM runs WHERE id = ?"
void daemon__bind_text_or_null(sqlite3_stmt *s, int i, const char *t);
void daemon__save_schedule(struct daemon *d, struct entry *ent);
void journal_insert(struct daemon *d, const char *id, const char *name, const cJSON *trigger,
                    const char *status, double started, double finished, const char *error,
                    pid_t pid);
/* journal_insert with the trigger already printed (trigger_json may be NULL)
 * and the worker's start time (proc.h) beside its pid (0: none), so that
 * a later look at the row tells that worker from a process that reused
 * its pid. Returns the new row's rowid, or 0 when it was not written. */
long long daemon__journal_insert_text(struct daemon *d, const char *id, const char *name,
                                 const char *trigger_json, const char *status, double started,
                                 double finished, const char *error, pid_t pid,
                                 long long pid_start);
/* Forgets the entries' cached automations rows when another connection
 * committed to the store since the last check. */
void daemon__state_check(struct daemon *d);
/* Reads ent's automations row into its cache unless it is known. */
void daemon__state_load(struct daemon *d, struct entry *ent);
void daemon__state_forget(struct entry *ent);
/* A new run id (runtime_new_run_id's form), its random part from a pool
 * refilled a few hundred ids at a time instead of a getrandom per run. */
void daemon__new_run_id(char out[40]);
/* daemon_loop.c: a fire time changed outside scan_due (schedule_entry,
 * enabling, reloads, the cluster's schedules): the next scan walks all. */
static inline void daemon__rescan(struct daemon *d) { d->scan_full = 1; }
void journal_skipped(struct daemon *d, struct entry *ent, const cJSON *trigger, const char *why);
struct entry *daemon__find_entry(struct daemon *d, const char *name);
double daemon__every_after(const struct automation *a, double slot, double now);
/* How many fire times of a's cron fell in [nf, now] (nf, the persisted next
 * fire, counts as one), and *next the first after now (0: none). */
int daemon__cron_missed(const struct automation *a, double nf, double now, double *next);
cJSON *daemon__make_trigger(const struct entry *ent, const char *kind, double slot);
/* The first entry from ent on (ent itself included) that is a live,
 * enabled `on` automation whose glob (fnmatch) matches the event name;
 * name NULL: any such entry. NULL when there is none. */
struct entry *daemon__event_listener(struct entry *ent, const char *name);
/* Each entry of d that listens for the event name (NULL: for any). */
#define DAEMON_EACH_LISTENER(ent, d, name)                                     \
  for (struct entry *ent = daemon__event_listener((d)->entries, (name)); ent; \
       ent = daemon__event_listener(ent->next, (name)))
/* ctx.trigger of ent's run for the event event_id, named name: kind
 * "event", name, payload (the JSON text parsed; NULL or not JSON: an empty
 * object), event_id, and tainted = true when the run that emitted it was.
 * Caller frees. */
cJSON *daemon__event_trigger(const struct entry *ent, const char *name, const char *payload,
                             double event_id, int tainted);
void daemon__refresh_enabled(struct daemon *d);
void daemon__load_one(struct daemon *d, const char *fname, int startup);
void daemon__reload_automations(struct daemon *d, int startup);
/* daemon_lock.c: the automations' locks (autolock.h). Not in a cluster.
 * Before r starts: 1 when this process holds r's automation (taking its
 * lock, and then checking what it keeps of the automations row, inside
 * the open transaction), 0 when another process holds it or waits for
 * it, or the lock cannot be taken: a run of mode single is then journaled
 * skipped and finished, any other stays pending and is tried again in a
 * moment (d->lock_retry). While another process waits, a run does not
 * join runs of its automation in progress (parallel), and one after them
 * lets that process go first. */
int daemon__lock_run(struct daemon *d, struct run *r);
/* The pass over the pending runs is done: closes the descriptor of
 * .luagent/locks that daemon__lock_run opened for it (none: nothing). */
void daemon__lock_pass_end(struct daemon *d);
/* ent ran its last run for now (running is 0): its lock goes when the
 * open transaction holding that run's save is committed (at once without
 * one), unless another run of it starts first. */
void daemon__lock_idle(struct daemon *d, struct entry *ent);
/* After a commit (or its rollback): releases what lock_idle queued. */
void daemon__lock_committed(struct daemon *d);
/* Releases ent's lock now, if held (the process is done with it). */
void daemon__lock_drop(struct daemon *d, struct entry *ent);
/* `automations run`: takes ent's lock, waiting up to wait_s seconds (0:
 * not at all) for another process's run to end, queued so that the
 * daemon lets it in next; says on stderr that it waits. 0 with the lock
 * held by ent; ERR_LIMIT when the time ran out, ERR_STOPPED when *stop
 * became nonzero, ERR_IO: each with e naming the automation and the
 * holder. */
int daemon__lock_wait(struct daemon *d, struct entry *ent, double wait_s,
                      volatile sig_atomic_t *stop, struct err *e);
/* daemon_runs.c: a run's wall-clock budget: the automation's timeout,
 * else luagent.lua's limits.deadline_s, else 30 s. */
double daemon__run_timeout(const struct daemon *d, const struct automation *a);
/* daemon_worker.c */
void daemon__clock_hms(char *out, size_t n);
/* daemon_runs.c */
int daemon__spawn_worker(struct daemon *d, struct worker **out);
void daemon__close_worker_fd(struct worker *w);
void daemon__unlink_run(struct daemon *d, struct run *r);
void daemon__free_run(struct run *r);
void daemon__kill_run(struct daemon *d, struct run *r, const char *status, const char *error);
void daemon__drop_pending(struct daemon *d, struct entry *ent);
/* r never started: journaled skipped, saying why; its row (written when it
 * was queued on a worker that then went, review 20's R-C) updated, or a
 * new one. */
void daemon__journal_unstarted(struct daemon *d, struct run *r, const char *why);
void daemon__start_pending(struct daemon *d);
/* Kills the workers of runs past their deadline (a reply waiting to be
 * read first); *wake_mono: the next deadline, if sooner. daemon_loop.c */
void daemon__check_deadlines(struct daemon *d, double *wake_mono);
/* A pending run of ent, last in d->runs; takes trigger and args. */
struct run *daemon__new_run(struct daemon *d, struct entry *ent, cJSON *trigger, cJSON *args);
void daemon__fire(struct daemon *d, struct entry *ent, cJSON *trigger, cJSON *args);
void daemon__read_worker(struct daemon *d, struct worker *w);
/* Writes what of w's committed jobs its job pipe takes now; a worker that
 * cannot be written to has its run crashed (send_failed). */
void daemon__send_more(struct daemon *d, struct worker *w);
void daemon__reap(struct daemon *d);

#endif
