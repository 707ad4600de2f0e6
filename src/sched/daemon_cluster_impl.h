/* daemon_cluster_impl.h - what the parts of the scheduler's cluster code
 * share: the claim (daemon_cluster_claim.c) and its callers
 * (daemon_cluster_schedule.c, daemon_cluster_runs.c,
 * daemon_cluster_events.c); no one else includes it. The functions below
 * lost their `static` when daemon_cluster_runs.c was split, unchanged
 * otherwise. Every call is made with d->cl set.
 */
#ifndef LUAGENT_DAEMON_CLUSTER_IMPL_H
#define LUAGENT_DAEMON_CLUSTER_IMPL_H

#include <stdio.h>
#include <stdlib.h>

#include "cluster.h"
#include "daemon_impl.h"

/* Every time in the cluster is the database's clock. */
#define NOW "extract(epoch from clock_timestamp())"

/* A run this host won in a transaction, started locally once it commits. */
struct won {
  struct entry *ent;
  cJSON *trigger, *args;
  char id[40];
  int attempt;
};
#define MAX_WON 64

struct claims {
  struct won w[MAX_WON];
  int n;
};

/* A time or a duration as a statement's parameter. */
static inline void fmt_num(char *out, size_t n, double v) {
  snprintf(out, n, "%.3f", v);
}

static inline int rows_changed(PGresult *r) {
  return atoi(PQcmdTuples(r));
}

/* Drops the runs c holds without starting them (the transaction failed). */
void daemon__cl_drop_won(struct claims *c);
/* Takes the automation's schedule row lock (see daemon_cluster_claim.c). */
int daemon__cl_lock_schedule(struct daemon *d, const char *name, struct err *e);
/* Inside a transaction: claims a run of ent into out (see
 * daemon_cluster_claim.c for slot, skip_why and force). Takes trigger and
 * args in every case. */
int daemon__cl_claim_in_tx(struct daemon *d, struct entry *ent, cJSON *trigger, cJSON *args,
                           double slot, double next, const char *skip_why, int force, int attempt,
                           const char *takeover_of, struct claims *out, struct err *e);
/* Commits the transaction and starts the runs c won here; on a failure
 * rolls back, drops them and reports it (ERR_IO). */
int daemon__cl_commit_or_fail(struct daemon *d, struct claims *c, struct err *e);

#endif
