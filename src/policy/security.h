/* security.h - the policy kernel every tool call passes.
 *
 * tool_call() (the pipeline; it lives here, in security.c) asks
 * sec_before() for a decision after schema validation and calls
 * sec_after() once the handler ran. The stages (rules, Lua hooks,
 * impact, taint, approval, audit) live behind this header.
 */
#ifndef LUAGENT_SECURITY_H
#define LUAGENT_SECURITY_H

#include <cjson/cJSON.h>

#include "err.h"

struct runtime;
struct call_ctx;
struct tool;
struct security;

enum sec_action { SEC_ALLOW, SEC_ESCALATE, SEC_DENY };

struct sec_decision {
  enum sec_action action;
  char decided_by[128];  /* "rule 3", "hook", "impact", "approver:operator", ... */
  char reason[512];
  char args_hash[65];    /* hash of the arguments that will run, or "" when
                            args_len > 0: */
  /* A plain allowed read's arguments, copied whole into args (when they
   * fit): its one audit row carries the copy, and the audit writer's
   * thread prints and hashes it (audit_queue_add_args), so the calling
   * thread does neither. 0: args_hash is set. */
  size_t args_len;
  double started;        /* monotonic start, for the audit duration */
  int audit_deferred;    /* a plain allow of a read-impact tool: sec_after
                            writes one row for the decision and the execution */
  const void *decided;   /* the argument object decided on; sec_after checks
                            that the handler ran exactly that object */
  _Alignas(16) unsigned char args[1024]; /* json_flat_copy's block, args_len bytes */
};

/* Builds the kernel from the runtime's config (rules, hooks, threshold).
 * *out freed with sec_free. */
int sec_new(struct runtime *rt, struct security **out, struct err *e);
void sec_free(struct security *s);

/* Replaces where the audit rows and the queued approval requests go (the
 * store's chain and table by default) with sink and queue (either may be
 * NULL: that one stays the store's). Both are copied; what their ud point
 * to must live until sec_free, which calls release(ud) (may be NULL) after
 * its last flush. Install before the first call; installing again
 * releases the previous backend (a zeroed sink or queue is the store's
 * again). runtime.c installs the cluster's (cluster_queue.h) this way when
 * luagent.lua has `cluster`: policy/ never sees PostgreSQL. */
struct audit_sink;
struct approval_queue;
void sec_set_backend(struct security *s, const struct audit_sink *sink,
                     const struct approval_queue *queue, void (*release)(void *ud), void *ud);

/* Whether the "auto" approver may prompt on the terminal (default: when
 * stdin is a tty). Daemons and workers call this with 0, so an escalation
 * there is denied (or queued with approver = "queue"), never prompted. */
void sec_set_interactive(struct security *s, int on);

/* Writes the audit rows still queued (plain allowed reads are queued and
 * written in batches; see security.c): they are on disk when this returns.
 * Runners call it when a run ends; sec_free does it too. */
void sec_flush(struct security *s);

/* Decides whether the call may run. *args is the call's one argument
 * object, already checked (tool_args_check, schema) by the caller; it is
 * hashed (json_hash_hex) once, here, after the rules and hooks saw it (a
 * plain allowed read's is copied into d->args instead, see struct
 * sec_decision). *args may be replaced (rewritten by a hook or modified by
 * the approver; a new object is checked, validated and hashed again); the
 * caller then owns the new value if *args_owned is set. Returns 0 when the
 * call may run; ERR_DENIED with e filled (code "denied") otherwise. */
int sec_before(struct call_ctx *ctx, const struct tool *t, cJSON **args, int *args_owned,
               struct sec_decision *d, struct err *e);
/* After the handler: after-hooks may replace *result; the execution is
 * audited with status ("ok" or the error code). lent (may be NULL): a
 * result borrowed from args (tool_handler_lent) in place of *result
 * (NULL then); when a secret must be redacted from it or an after hook
 * sees it, it is copied into *result first and *lent becomes NULL. */
void sec_after(struct call_ctx *ctx, const struct tool *t, const cJSON *args,
               struct sec_decision *d, int rc, cJSON **result, const cJSON **lent,
               const struct err *herr);

/* Asks the configured approver (terminal, queue or deny; luagent test's
 * fake) to decide rq as it would an escalated call, for questions that are
 * not a tool call of their own (an MCP server's elicitation). res is
 * filled; res->new_args (APPROVAL_MODIFIED) is the caller's to free. */
struct approval_request;
struct approval_result;
int sec_ask(struct call_ctx *ctx, const struct approval_request *rq, struct approval_result *res,
            struct err *e);

/* Appends one audit row for something a run did that is not a tool call
 * of its own (an MCP server's sampling request, named by tool, e.g.
 * "mcp.NAME.sampling"): decision ("allow", "approved", "deny"), decided_by,
 * status ("ok" or an error code), detail (redacted before it is stored).
 * Returns <0 when the row could not be written. */
int sec_record(struct call_ctx *ctx, const char *tool, const char *args_hash, const char *decision,
               const char *decided_by, const char *status, const char *detail, struct err *e);

/* The single entry point for every tool call: lookup, schema validation,
 * security pipeline, handler, after-hooks, audit. args is borrowed. On
 * success *result is a new JSON value (caller frees). Errors: code
 * "unknown_tool", "invalid_args", "denied", "tool_error", a limit code... */
int tool_call(struct call_ctx *ctx, const char *name, const cJSON *args, cJSON **result,
              struct err *e);
/* tool_call that also says what ran: when a hook or the approver rewrote
 * the arguments, *ran gets a copy of the rewritten ones (caller frees);
 * NULL when the call ran (or was refused) with args as given. */
int tool_call_ran(struct call_ctx *ctx, const char *name, const cJSON *args, cJSON **result,
                  cJSON **ran, struct err *e);
/* tool_call for a caller that can take a result it does not own: when the
 * tool has a lent handler (tool.h) and the call ran with args as given,
 * nothing to redact and no after hook, *lent is set to a value borrowed
 * from args (read-only, valid as long as args is) and *result to NULL;
 * otherwise *lent is NULL and *result as tool_call sets it (caller
 * frees). Everything else (every stage, the audit row) is tool_call's. */
int tool_call_lent(struct call_ctx *ctx, const char *name, const cJSON *args, cJSON **result,
                   const cJSON **lent, struct err *e);

#endif
