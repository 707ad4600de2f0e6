/* audit.h - the tamper-evident audit chain (table `audit` in the store).
 *
 * Every row carries prev_hash (the previous row's hash, 64 zeros for the
 * first) and hash = BLAKE2b-256(prev_hash || the row's fields, each framed
 * with its type and length). Editing, deleting or reordering any row breaks
 * the chain at that row. A head record (table audit_head) remembers the last
 * seq and hash, so rows cut off the end are caught too; with signing on, the
 * head is signed with an Ed25519 key kept in <workspace>/.luagent/audit.key
 * (0600), so someone who can rewrite the whole table but cannot read the key
 * is caught as well.
 */
#ifndef LUAGENT_AUDIT_H
#define LUAGENT_AUDIT_H

#include <stdio.h>

#include "err.h"
#include "store.h"

/* One row to append. Any string may be NULL (stored as NULL);
 * duration_ms < 0 is stored as NULL. decision is required. */
struct audit_entry {
  const char *run_id;
  const char *caller_kind;
  const char *caller_name;
  const char *tool;
  const char *args_hash;
  const char *decision;   /* "allow", "deny", "escalate", "approved", "exec", ... */
  const char *decided_by; /* "rule 3", "hook", "impact", "taint", "approver" */
  const char *approver;   /* "terminal", "queue:ID", "none" */
  const char *status;     /* for executions: "ok" or an error code */
  double duration_ms;
  const char *detail; /* a reason or short note; secrets already redacted */
  double ts;          /* when it happened (util_now); 0 = at append */
};

/* Signing options. key_path NULL = <workspace>/.luagent/audit.key. */
struct audit_opts {
  int sign;
  const char *key_path;
};

/* Appends one row atomically (BEGIN IMMEDIATE: safe across processes).
 * opts may be NULL (no signing). On success *seq_out (may be NULL) gets the
 * new row's seq. */
int audit_append(struct store *s, const struct audit_opts *opts, const struct audit_entry *a,
                 long long *seq_out, struct err *e);
/* Appends n rows, in order, in one transaction (one write instead of n).
 * *seq_out (may be NULL) gets the last row's seq. */
int audit_append_batch(struct store *s, const struct audit_opts *opts,
                       const struct audit_entry *rows, size_t n, long long *seq_out, struct err *e);

/* Result of a verification. */
struct audit_report {
  long long rows;    /* rows checked */
  long long bad_seq; /* first bad row (0 when intact or not row-specific) */
  int signed_head;   /* 1 when a valid head signature was checked */
  char problem[512]; /* what is wrong, "" when intact */
};

/* Walks the whole chain. Returns 0 and r->problem == "" when intact; 0 with
 * r->problem set and r->bad_seq when tampered; <0 only when the check itself
 * could not run (e filled). opts may be NULL. */
int audit_verify(struct store *s, const struct audit_opts *opts, struct audit_report *r,
                 struct err *e);

/* Prints the last n rows, oldest first: as text lines, or (json != 0) as a
 * JSON array. */
int audit_tail(struct store *s, int n, int json, FILE *out, struct err *e);

#endif
