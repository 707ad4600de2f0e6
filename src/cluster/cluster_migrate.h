/* cluster_migrate.h - copying one host's SQLite state into the cluster.
 *
 * `luagent cluster migrate` moves a workspace that ran on one host into a
 * cluster: the schedules and ctx.state of its automations, the events still
 * queued, and the automation run journal (with each run's kept events). It
 * copies; the local state.db is left as it was.
 *
 * Idempotent: what was copied is remembered in luagent_imports, so a second
 * migrate copies nothing again (not even an event consumed since). A row
 * the cluster already has that was not copied from here and differs from
 * the local one is a conflict: nothing is written unless force is set, and
 * then the local row replaces the cluster's.
 */
#ifndef LUAGENT_CLUSTER_MIGRATE_H
#define LUAGENT_CLUSTER_MIGRATE_H

#include "err.h"
#include "pg.h"

struct store;

struct cluster_migrate_counts {
  long long schedules, states, events, runs; /* copied now */
  long long already;                         /* copied by an earlier migrate */
  long long same;                            /* already in the cluster, equal */
  long long conflicts;                       /* differ (replaced when force) */
  char first_conflict[256];                  /* what the first one was */
};

/* Copies st's state into p inside the caller's transaction (the caller
 * BEGINs and COMMITs, so the approvals and audit importers can join it).
 * Takes a transaction-scoped advisory lock first: concurrent migrates
 * run one after the other, so none copies a row twice.
 * node: recorded as the node of the copied runs and events. Returns
 * ERR_INVALID with e naming the first conflict when there are conflicts and
 * !force (the caller rolls back), ERR_IO on a database error. */
int cluster_migrate_store(struct pg *p, struct store *st, const char *node, int force,
                          struct cluster_migrate_counts *n, struct err *e);

#endif
