/* cluster_runs_read.h - reading the cluster's automation runs
 * (luagent_runs): every host's runs, each with the node it ran on. The
 * CLI's `runs list|show` and the console read them through here, so both
 * show one workspace the same way on any host.
 *
 * The rows are other hosts' writing: every text comes back as stored
 * (callers escape it for a terminal; the console's JSON is escaped by its
 * printer), and a row's events column that is not a JSON array reads as
 * no events. */
#ifndef LUAGENT_CLUSTER_RUNS_READ_H
#define LUAGENT_CLUSTER_RUNS_READ_H

#include <stddef.h>

#include "err.h"
#include "pg.h"

struct cJSON;

/* Connects when ws's luagent.lua has a cluster: 1 (*pg set; pg_close it;
 * node, when not NULL, gets this host's cluster.node), 0 (no cluster), <0
 * (e set: the config is wrong, ERR_INVALID, or the database is
 * unreachable, ERR_IO). */
int cluster_connect(const char *ws, struct pg **pg, char *node, size_t n, struct err *e);

/* Appends the cluster's latest limit automation runs, newest first, to
 * arr as `runs list --json` objects: id, kind ("automation"), name,
 * status, started, finished (when over), tool_calls, error (when any),
 * result, node, attempt (when over 1). */
int cluster_runs_list(struct pg *pg, int limit, struct cJSON *arr, struct err *e);

/* One run list for a host in a cluster: arr holds this host's own runs
 * (at most limit, newest first, in the shape above); the cluster's latest
 * limit automation runs are added, and arr ends as the limit newest of
 * both, sorted by started, newest first (equal starts keep the order they
 * came in: local rows before the cluster's). The rows past limit are
 * freed. 0, or <0 with e set (the cluster did not answer; arr is then as
 * it was). */
int cluster_runs_merge(struct pg *pg, int limit, struct cJSON *arr, struct err *e);

/* One run: 0 and *run (the fields above plus trigger (parsed, when any),
 * takeover_of and file_hash (when set) and events: the kept events, an
 * array of {type, data}; caller frees), 1 when there is no such run, <0
 * with e set. */
int cluster_run_get(struct pg *pg, const char *id, struct cJSON **run, struct err *e);

/* One run's status alone, the cheap look at a run that is not over (its
 * row's events are written when it ends): 0 and the status copied into
 * status (n bytes, cut to fit), 1 when there is no such run, <0 with e
 * set. */
int cluster_run_status(struct pg *pg, const char *id, char *status, size_t n, struct err *e);

#endif
