/* cluster_queue_impl.h - what cluster_approvals.c, cluster_audit.c and
 * cluster_audit_verify.c share; no one else includes it. */
#ifndef LUAGENT_CLUSTER_QUEUE_IMPL_H
#define LUAGENT_CLUSTER_QUEUE_IMPL_H

#include <limits.h>
#include <pthread.h>

#include "cluster_queue.h"

struct cluster_policy {
  struct cluster_opts o; /* url owned */
  char ws[PATH_MAX];
  char where[300];
  /* The chain's connection and what this process last wrote to it. */
  pthread_mutex_t audit_mu;
  struct pg *audit_pg;
  struct store *store;       /* for the signing key only; opened when needed */
  struct audit_head written; /* the head of this process's last append */
  struct audit_head vouched; /* the anchor file's last line when it started */
  int vouched_read;
  long long anchored_seq;    /* the last head it put in the anchor file */
  int anchored_synced;       /* ... and whether that line was fsync'd */
  /* The queue's connection (the waiting run LISTENs on it). */
  pthread_mutex_t queue_mu;
  struct pg *queue_pg;
  /* audit.sign and audit.public_key (owned): with signing on, approvals
   * are signed by the deciding host and checked by the waiting one. */
  int sign;
  char *public_key;
};

/* *slot, connected (and the schema migrated) on first use; a connection
 * that broke is reopened by pg.c before the next statement (one the server
 * closed while idle is noticed here first, so the statement does not fail
 * on it). */
int cluster__conn(struct cluster_policy *cp, struct pg **slot, struct err *e);
/* The workspace's store (the audit key lives beside it), opened once. */
int cluster__store(struct cluster_policy *cp, struct store **out, struct err *e);
/* <workspace>/.luagent/cluster-audit.anchor */
void cluster__anchor_path(const struct cluster_policy *cp, char *out, size_t n);
/* A chain row's hash from its columns as PostgreSQL returns them (seq, ts,
 * run_id .. detail, node: text; NULL for SQL NULL; ts and duration_ms as
 * decimal text that strtod reads back exactly). */
void cluster__row_hash(const char *prev, const char *const cols[AUDIT_NFIELDS], const char *node,
                       char out[65]);

#define CLUSTER_ANCHOR_FILE "cluster-audit.anchor"
#define ZERO_HASH "0000000000000000000000000000000000000000000000000000000000000000"

/* luagent_audit's columns as the code reads and writes them: the hashed
 * fields in audit.h's order (enum audit_field), then the link, the hash
 * and the node. */
#define CHAIN_COLS                                                                    \
  "seq, ts, run_id, caller_kind, caller_name, tool, args_hash, decision, decided_by," \
  " approver, status, duration_ms, detail, prev_hash, hash, node"
enum { K_PREV = AUDIT_NFIELDS, K_HASH, K_NODE, K_N };

#endif
