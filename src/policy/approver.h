/* approver.h - who decides an escalated tool call.
 *
 * Three approvers (config `approver`):
 *   "auto"  - a terminal prompt when stdin is a terminal, else deny with a
 *             reason that says so (the default; never an allow headless);
 *   "queue" - a row in table `approvals`; the run waits (polling, up to
 *             `approval_timeout_s`) while `luagent approvals approve|deny ID`
 *             decides from another process;
 *   "deny"  - always deny.
 * Every request carries the exact arguments and their hash (the hash of the
 * canonical JSON); an approval is only valid for that hash, and modified
 * arguments come back as new JSON that the pipeline validates and gates
 * again.
 */
#ifndef LUAGENT_APPROVER_H
#define LUAGENT_APPROVER_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "err.h"
#include "store.h"

enum approver_kind { APPROVER_AUTO, APPROVER_QUEUE, APPROVER_DENY };
/* "auto" | "queue" | "deny" -> kind; <0 for anything else. */
int approver_parse(const char *s, enum approver_kind *out);

struct approval_request {
  const char *run_id;
  const char *tool;
  const char *caller_kind;
  const char *caller_name;
  const char *impact;
  const char *reason;    /* why it escalated */
  const cJSON *args;     /* exactly what would run (secrets never resolved here) */
  const char *args_hash; /* json_hash_hex(args) */
};

enum approval_verdict { APPROVAL_APPROVED, APPROVAL_DENIED, APPROVAL_MODIFIED };

struct approval_result {
  enum approval_verdict verdict;
  char reason[512]; /* a denial's reason (the caller sees it) */
  char by[128];     /* "terminal", "queue:12", "policy" */
  cJSON *new_args;  /* APPROVAL_MODIFIED: the edited arguments (caller frees) */
};

/* Asks on a terminal: in is read line by line, prompts go to out.
 * Answers: y(es) / n(o) [then a reason] / e(dit) [then one line of JSON].
 * End of input denies. */
int approver_terminal(const struct approval_request *rq, FILE *in, FILE *out,
                      struct approval_result *res, struct err *e);

/* Sharing the terminal (luagent chat's steer reader, issue 7): when set,
 * approver_terminal calls fn(ud, 1) before its first prompt and fn(ud, 0)
 * after its last read, so another reader of stdin pauses while a prompt
 * owns the terminal. Process-wide; NULL clears it. */
void approver_set_terminal_hook(void (*fn)(void *ud, int owning), void *ud);

/* Queue: adds a pending row; *id gets its id. */
int approver_queue_submit(struct store *s, const struct approval_request *rq, long long *id,
                          struct err *e);
/* Queue: one look at row id. *decided = 0 while pending; else res filled.
 * An approval whose approved_hash differs from expect_hash (the hash of the
 * arguments the waiting run holds) is turned into a denial. */
int approver_queue_check(struct store *s, long long id, const char *expect_hash, int *decided,
                         struct approval_result *res, struct err *e);
/* Queue: submit and wait until decided, timeout_s passes, deadline_at
 * (util_monotonic; 0 = none) passes, or *stop is set. A timeout marks the
 * row "expired" and denies with a reason that says so. */
int approver_queue_wait(struct store *s, const struct approval_request *rq, double timeout_s,
                        double deadline_at, volatile int *stop, struct approval_result *res,
                        struct err *e);
/* Queue: the wait part of approver_queue_wait, for a row id already
 * submitted (so the caller can say which request waits before blocking). */
int approver_queue_await(struct store *s, long long id, const struct approval_request *rq,
                         double timeout_s, double deadline_at, volatile int *stop,
                         struct approval_result *res, struct err *e);
/* Queue, for `luagent approvals`: decides a pending row. approve != 0
 * approves the arguments stored in the row (their hash is recorded as the
 * approved hash) or, when new_args is not NULL, those instead (status
 * "modified"); approve == 0 denies with reason. by names who decided. Fails
 * with ERR_NOTFOUND for an unknown id and ERR_INVALID when already decided
 * or when the stored arguments no longer match their hash. */
int approver_queue_decide(struct store *s, long long id, int approve, const char *reason,
                          const char *by, const cJSON *new_args, struct err *e);
/* Queue: approver_queue_decide, then the decision appended to the audit
 * chain with the request's tool and run and the hash of the arguments
 * decided on: what `luagent approvals approve|deny` and the console both
 * call, so a decision is made and recorded one way whoever makes it.
 * caller_kind/caller_name name the person ("operator", $USER), by the
 * approver recorded in the row and the chain ("operator:alice",
 * "console"), decided_by the surface ("approvals-cli", "console"). sign is
 * config audit.sign. When the decision is stored but the audit append
 * fails, returns 0 and fills *warning (may be NULL, 256+ bytes) with why. */
struct approver_decision {
  long long id;
  int approve;
  const char *reason;     /* a denial's reason, or NULL */
  const cJSON *new_args;  /* modified arguments, or NULL */
  const char *caller_kind, *caller_name, *by, *decided_by;
  int sign;
};
int approver_decide_audited(struct store *s, const struct approver_decision *d, char *warning,
                            size_t warning_n, struct err *e);
/* Queue: rows as a JSON array of objects (newest last); all = 0 for pending
 * only. *out freed by the caller. */
int approver_queue_list(struct store *s, int all, cJSON **out, struct err *e);

/* --- another queue -------------------------------------------------------
 *
 * The pipeline (security.c), `luagent approvals` and the console reach the
 * queue through an approval_queue: by default the store's table above
 * (approver_sqlite_queue); runtime.c installs the cluster's (PostgreSQL,
 * shared by every host) when luagent.lua has `cluster`. Each op has the
 * contract of the approver_queue_* function of the same name; get fills
 * *row with the one row as list shows it (ERR_NOTFOUND when there is
 * none). An implementation keeps these semantics by building on the two
 * helpers below, which hold every hash check. */
struct approval_queue_ops {
  int (*submit)(void *ud, const struct approval_request *rq, long long *id, struct err *e);
  int (*await)(void *ud, long long id, const struct approval_request *rq, double timeout_s,
               double deadline_at, volatile int *stop, struct approval_result *res,
               struct err *e);
  int (*decide)(void *ud, long long id, int approve, const char *reason, const char *by,
                const cJSON *new_args, struct err *e);
  int (*list)(void *ud, int all, cJSON **out, struct err *e);
  int (*get)(void *ud, long long id, cJSON **row, struct err *e);
};
struct approval_queue {
  const struct approval_queue_ops *ops;
  void *ud;
};
/* The queue in store s (borrowed: s must outlive it). */
struct approval_queue approver_sqlite_queue(struct store *s);

/* A stored row as the waiting run reads it (strings may be NULL). */
struct approval_row {
  const char *status;        /* "pending", "approved", "modified", "denied", "expired" */
  const char *decided_by;
  const char *decision_reason;
  const char *new_args;      /* JSON text (status "modified") */
  const char *approved_hash; /* the hash the decision was given for */
  const char *args_hash;     /* the hash the run submitted */
};
/* What row id means for a run holding arguments with hash expect_hash:
 * *decided = 0 while pending; else res filled (res->by = "queue:ID[:BY]").
 * An approval for other arguments, or whose modified arguments do not hash
 * to the approved hash, is a denial. row NULL: the row vanished (a
 * denial). */
void approver_row_verdict(long long id, const struct approval_row *row, const char *expect_hash,
                          int *decided, struct approval_result *res);
/* Before a decision on a pending row with stored arguments args (JSON text)
 * and hash rowhash: approved gets the hash the approval is bound to (that
 * of new_args when given, else of the stored arguments). Fails with
 * ERR_INVALID, approve != 0, when the stored arguments no longer match
 * their hash; a denial is always possible. */
int approver_decision_hash(long long id, int approve, const char *args, const char *rowhash,
                           const cJSON *new_args, char approved[65], struct err *e);
/* approver_decide_audited through queue q and audit sink (the decision's
 * row goes to the same chain as the pipeline's). */
struct audit_sink;
int approver_decide_audited_in(const struct approval_queue *q, const struct audit_sink *sink,
                               const struct approver_decision *d, char *warning,
                               size_t warning_n, struct err *e);

#endif
