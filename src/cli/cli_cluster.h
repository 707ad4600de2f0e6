/* cli_cluster.h - what the CLI's commands read from and write to the
 * cluster database when luagent.lua has `cluster` (cli_cluster.c,
 * cli_cluster_runs.c). */
#ifndef LUAGENT_CLI_CLUSTER_H
#define LUAGENT_CLI_CLUSTER_H

#include <stddef.h>

#include "err.h"
#include "pg.h"

struct cJSON;

/* Connecting (cluster_connect) and the runs list (cluster_runs_list) are
 * cluster_runs_read.h's, shared with the console. */
/* `runs show ID` of a cluster run: 0 shown, 1 no such run, <0 error. */
int cli_cluster_run_show(struct pg *pg, const char *id, int json, struct err *e);
/* `runs prune`: the cluster's finished automation runs older than before
 * (with their kept events, which are in the row). */
int cli_cluster_prune(struct pg *pg, double before, long long *runs, struct err *e);
/* `automations history NAME` from the cluster. */
int cli_cluster_history(struct pg *pg, const char *name, int n, int json);

/* The cluster's view of automation name for `automations list`. *next,
 * *last: 0 when none; *enabled untouched when the cluster has no flag.
 * *versions: {node: hash} of the nodes that loaded it (caller frees);
 * *differ: 1 when they are not all the same. */
struct cli_cluster_auto {
  double next, last;
  int enabled, have_enabled, differ;
  char last_status[32];
  struct cJSON *versions;
};
int cli_cluster_automation(struct pg *pg, const char *name, struct cli_cluster_auto *out,
                           struct err *e);
/* `automations enable|disable NAME` for every host (they are notified). */
int cli_cluster_set_enabled(struct pg *pg, const char *name, int on, const char *node,
                            struct err *e);

#endif
