/* cluster_queue.h - the approval queue and the audit chain in PostgreSQL,
 * shared by every host of a workspace (issue 17).
 *
 * With `cluster = {...}` in luagent.lua, runtime.c makes one cluster_policy
 * per runtime and installs its queue and sink into the security pipeline
 * (sec_set_backend): policy/ keeps every rule, hash check and decision, and
 * only the storage moves here.
 *
 * Approvals (table luagent_approvals): a call escalated to the queue
 * approver on one host is a row any host lists and decides (`luagent
 * approvals`, the console), with the SQLite queue's semantics
 * (approver_row_verdict, approver_decision_hash: the run proceeds only with
 * arguments whose hash was approved). With audit.sign on, an approval
 * (approved or modified) is signed by the deciding host with the
 * workspace's audit key (.luagent/audit.key, the same on every host, or
 * the pinned audit.public_key) over its id, the run, the asking node, the
 * verdict and both hashes; the waiting run takes an approval only with a
 * valid signature, so someone who can write the database but not read a
 * host's key cannot approve a call or choose its arguments. (Without
 * signing the database is trusted with decisions.) A decision NOTIFYs channel
 * CLUSTER_APPROVAL_CHANNEL in its transaction; the waiting run LISTENs and
 * sleeps in poll() on the connection's socket, re-reading its row when a
 * notification arrives, and anyway every CLUSTER_APPROVAL_RECHECK_S (so a
 * lost notification only delays). A database that goes away while a run
 * waits is retried until the wait's timeout; then the call is denied.
 *
 * Audit (tables luagent_audit, luagent_audit_head): one chain per
 * workspace. An append locks the head row (SELECT ... FOR UPDATE), checks
 * that the head still names the chain's last row, inserts the batch and
 * moves the head, in one transaction: appends from every host serialise
 * there, so the chain stays linear. Rows hash as the local chain's do
 * (audit_fields_hash) with the appending host's node as one more framed
 * field (an imported row has node NULL and hashes exactly as it did in
 * SQLite). ts is the appending host's clock when the call happened (as in
 * the local chain); the head's `updated` is the database's. Each host also
 * appends the heads it wrote to its own anchor file,
 * <workspace>/.luagent/cluster-audit.anchor (format as audit.anchor), so a
 * verify on that host catches rows cut off the end with the head rewritten
 * to match, as far as that host has seen the chain.
 *
 * Failing closed: every row the pipeline must have on record before a call
 * runs is written here synchronously; when the database cannot be reached
 * the write fails with "cluster database HOST:PORT/DB: ..." and the call is
 * denied (policy/security.c), and the next call tries a new connection.
 *
 * Threads: a cluster_policy may be used from several threads; it keeps one
 * connection for the chain and one for the queue, each behind a mutex, both
 * opened on first use (a process that never audits never connects).
 */
#ifndef LUAGENT_CLUSTER_QUEUE_H
#define LUAGENT_CLUSTER_QUEUE_H

#include <stdio.h>

#include "approver.h"
#include "audit.h"
#include "cluster.h"
#include "err.h"
#include "pg.h"
#include "store.h"

#define CLUSTER_APPROVAL_CHANNEL "luagent_approvals"
/* The fallback re-read of a waiting approval's row, in seconds. The
 * environment variable LUAGENT_TEST_APPROVAL_RECHECK_S overrides it (for
 * tests that show a NOTIFY wakes the run long before this would). */
#define CLUSTER_APPROVAL_RECHECK_S 5.0

struct cluster_policy;

/* Makes the handle for workspace ws (the anchor file's folder; the store
 * for the audit signing key, opened when signing needs it). o is copied.
 * Nothing connects yet. *out freed with cluster_policy_free. */
int cluster_policy_new(const struct cluster_opts *o, const char *ws, struct cluster_policy **out,
                       struct err *e);
void cluster_policy_free(struct cluster_policy *cp); /* NULL is a no-op */
/* For the callers that are not a runtime (`luagent approvals`, `audit`, the
 * console): reads cfg's `cluster` table; *out = NULL when there is none
 * (the store's queue and chain are the ones to use). */
int cluster_policy_for(const char *ws, const struct config *cfg, struct cluster_policy **out,
                       struct err *e);

/* The approval queue and the audit sink (the chain decisions go to) that
 * commands use: the cluster's when cfg has `cluster` (*cp set), else those
 * of the workspace's store (*st opened). The caller frees both
 * (cluster_policy_free, store_close; NULL is fine). ERR_INVALID: the
 * cluster table is wrong; ERR_IO: the store would not open. */
struct store;
int cluster_policy_open(const char *ws, const struct config *cfg, struct store **st,
                        struct cluster_policy **cp, struct approval_queue *q,
                        struct audit_sink *sink, struct err *e);

/* The queue and the sink; ud is cp, which must outlive them. */
struct approval_queue cluster_policy_queue(struct cluster_policy *cp);
struct audit_sink cluster_policy_sink(struct cluster_policy *cp);

/* "cluster database HOST:PORT/DB" once connected, else "the cluster
 * database" (for messages; the errors of pg.h name the server anyway). */
const char *cluster_policy_where(struct cluster_policy *cp);

/* The cluster chain, as audit.h's functions of the same names do for the
 * store's: the head, the last n rows (text or JSON, oldest first), and a
 * full verification (every row's hash and link, seq without gaps from 1,
 * the head, this host's anchor file and a pinned head expect, may be NULL;
 * a signed head when signing is on). The report's problem names the first
 * bad seq. */
int cluster_audit_head(struct cluster_policy *cp, struct audit_head *h, struct err *e);
int cluster_audit_tail(struct cluster_policy *cp, int n, int json, FILE *out, struct err *e);
int cluster_audit_verify(struct cluster_policy *cp, const struct audit_opts *o,
                         const struct audit_head *expect, struct audit_report *r, struct err *e);

/* `luagent cluster migrate`: copies store st's pending approvals (each
 * once: a row remembers where it came from, so a second import adds
 * nothing) and its audit chain (verbatim, so it still verifies: refused
 * when the SQLite chain does not verify, when it was compacted, or when the
 * cluster chain already holds rows that are not these; rows already there
 * are skipped, so importing twice adds nothing). *n gets the rows added.
 * One transaction each. */
int cluster_import_approvals(struct pg *p, struct store *st, long long *n, struct err *e);
int cluster_import_audit(struct pg *p, struct store *st, long long *n, struct err *e);

#endif
