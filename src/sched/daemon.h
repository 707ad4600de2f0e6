/* daemon.h - the automation scheduler and its supervised workers.
 *
 * One daemon per workspace (flock on .luagent/daemon.lock). The scheduler
 * process never runs user code of a run itself: each run goes to a worker
 * process from a pool (the luagent binary re-executed as
 * `daemon --worker`), which runs it in a fresh sandbox. A worker that
 * crashes or overstays its run's deadline is killed and replaced; the run is
 * recorded as crashed or timeout and every other run carries on.
 *
 * The run journal is the store's `runs` table (kind "automation"); schedules
 * and ctx.state live in `automations`; `event_queue` holds events for `on`
 * automations until the daemon consumes them.
 *
 * With a `cluster` table in luagent.lua (cluster.h), all of that lives in
 * the cluster's PostgreSQL instead, shared by the daemons of several hosts
 * (daemon_cluster*.c): each time slot runs on one host, runs hold leases
 * their host renews and fences, and events, ctx.state and the journal are
 * the cluster's. daemon_emit and events.emit queue there too.
 */
#ifndef LUAGENT_DAEMON_H
#define LUAGENT_DAEMON_H

#include <cjson/cJSON.h>

#include "err.h"

struct daemon_opts {
  const char *workspace;
  double grace_s;      /* SIGTERM: how long running runs may finish (default 10) */
  double kill_grace_s; /* after a run's timeout before its worker is killed (default 2) */
  int max_workers;     /* worker processes at most (default 32) */
  int keep_runs;       /* journal rows kept per automation (default 5000) */
  double retain_s;     /* finished runs older than this are pruned with their
                          events (0: config daemon.retain, else keep) */
  int quiet;           /* no per-run lines on stdout */
  /* Loads the skill folders under dir (messages say skills/...) as a
   * worker would, and sets *bad to a JSON object {folder: "file:line:
   * message"} of the folders that did not load wholly (caller frees).
   * Returns <0 (e set) when it cannot try, e.g. luagent.lua is broken. The
   * command sets it (it needs a runtime); NULL: workers load skills/ as it
   * is, and a broken skill.lua takes its skill out of new workers. */
  int (*skills_probe)(const char *workspace, const char *dir, cJSON **bad, struct err *e);
  /* What runs beside the scheduler in this process (the console: cli/
   * passes it down, sched/ knows nothing of it). on_start is called once
   * the daemon holds the workspace, before the first run; nonzero (with e
   * filled) stops the daemon from starting. on_stop is called after the
   * scheduler stopped. Either may be NULL. */
  int (*on_start)(void *ud, struct err *e);
  void (*on_stop)(void *ud);
  void *hook_ud;
};

/* Runs the scheduler until SIGTERM/SIGINT. Returns 0 after a clean stop,
 * ERR_* (with e filled) when it cannot start, e.g. another daemon holds the
 * workspace. */
int daemon_main(const struct daemon_opts *o, struct err *e);

/* The worker process's loop: reads jobs from fd, runs each in a fresh
 * sandbox, writes results back. Returns the process exit code. rt is the
 * workspace the caller opened (with skills loaded), borrowed; NULL when
 * opening failed, and then every job is answered with rt_err. */
struct runtime;
int daemon_worker_main(const char *workspace, int fd, struct runtime *rt, const struct err *rt_err);

/* Runs automation `name` once now, through the same worker path, with
 * trigger kind "manual" and args (a JSON object, may be NULL). Records the
 * run in the journal and persists ctx.state on success. While another
 * process (the daemon, another manual run) runs it, waits for that run to
 * end, at most wait_s seconds (0: not at all; < 0: the automation's
 * timeout + 10 s), saying so on stderr: the run holds the automation's
 * lock (autolock.h) from before it reads ctx.state until the state is
 * saved. *status gets "ok"/"failed"/..., *result and *error the run's text
 * (each malloc'd or NULL; caller frees). Returns 0 if the run happened
 * (whatever its status), <0 if it could not start: unknown or broken
 * automation (ERR_NOTFOUND, ERR_INVALID), still held when the wait ended
 * (ERR_LIMIT), stopped by a signal while waiting (ERR_STOPPED), ERR_IO. */
int daemon_run_manual(const char *workspace, const char *name, const cJSON *args, double wait_s,
                      char **status, char **result, char **error, struct err *e);

/* Queues an event (payload: JSON text or NULL) for `on` automations and
 * wakes a running daemon. *id gets the queue row id (may be NULL). */
int daemon_emit(const char *workspace, const char *name, const char *payload, long long *id,
                struct err *e);

/* Installs events.emit(name [, payload]) into a sandbox: the event is queued
 * in the workspace of ctx->rt (which must outlive the sandbox) and a running
 * daemon is woken. runtime_install_api calls this for every script. */
struct sandbox;
struct call_ctx;
int daemon_events_install(struct sandbox *sb, struct call_ctx *ctx, struct err *e);

/* The skills the daemon's newest checked generation runs in a kept last
 * good version because skills/<folder> does not load: *kept gets
 * {folder: "file:line: message"} (caller frees; NULL when no daemon ever
 * made a generation here). Read by `luagent check` and `skills check`. */
int daemon_skills_kept(const char *workspace, cJSON **kept, struct err *e);

/* 1 if a daemon holds the workspace's lock (and *pid its pid), else 0. */
int daemon_running(const char *workspace, int *pid);

/* Wakes a running daemon so it re-reads events and enabled flags. */
void daemon_wake(const char *workspace);

/* Ensures the daemon's tables/columns exist (store migrations) and returns
 * an open store; helper for the CLI. */
struct store;
int daemon_store_open(const char *workspace, struct store **out, struct err *e);

#endif
