/* cluster.h - several daemons on several hosts sharing one workspace
 * through PostgreSQL.
 *
 * Off unless luagent.lua has a `cluster` table; then whatever the hosts
 * must agree on lives in one PostgreSQL database per workspace (a schema
 * per workspace works too: put `options=-csearch_path=NAME` in the URL),
 * while each host keeps its own copy of the workspace's files:
 *
 *   cluster = {
 *     postgres = { secret = "PG_URL" },   -- or "postgresql://user@host/db"
 *     node = "web-1",                     -- default: the host name
 *     lease_s = 15,                       -- run lease period (2..3600)
 *     workspace = "prod",                 -- default: luagent.lua's `name`, else "default"
 *   }
 *
 * The schema is versioned (table luagent_schema) and migrated forward at
 * open under an advisory lock, so hosts starting together migrate once; a
 * database written by a newer luagent is refused with a message that says
 * to upgrade this host. Times in the cluster's tables are seconds since the
 * epoch by the database's clock (cluster_now), never a host's, so leases
 * do not depend on the hosts' clocks agreeing.
 *
 * A database serves one workspace: the first to open it writes its name
 * (luagent_workspace), and a workspace of another name is refused, so two
 * workspaces given one URL by mistake never share queues or a chain.
 */
#ifndef LUAGENT_CLUSTER_H
#define LUAGENT_CLUSTER_H

#include "err.h"
#include "pg.h"

struct config;

struct cluster_opts {
  char *url;      /* the connection string, secret resolved (malloc'd) */
  char node[64];  /* this host's name: [A-Za-z0-9_.-]{1,63} */
  double lease_s; /* how long a run's claim holds without renewal */
  char workspace[65]; /* which workspace the database serves ("": "default") */
};

#define CLUSTER_LEASE_DEFAULT 15.0

/* Reads cfg's `cluster` table into o. *on = 0 (o untouched) when there is
 * none. A { secret = "NAME" } URL is opened from the workspace's secrets.
 * Errors name the key and the line of luagent.lua. */
int cluster_opts_load(const char *workspace, const struct config *cfg, struct cluster_opts *o,
                      int *on, struct err *e);
void cluster_opts_free(struct cluster_opts *o); /* wipes the URL */

/* Connects as o->node and brings the schema up to date (see above). */
int cluster_open(const struct cluster_opts *o, struct pg **out, struct err *e);

/* The schema version this build writes, and the one the database has (0
 * for none). */
int cluster_schema_version(void);
int cluster_schema_read(struct pg *p, int *version, struct err *e);

/* The database's clock in seconds since the epoch. */
int cluster_now(struct pg *p, double *now, struct err *e);

#endif
