/* security.c - the policy kernel: rules, hooks, impact, taint, approval,
 * audit. See security.h and the Security section of README.md.
 *
 * The decision for one call is the strictest of everything that has an
 * opinion (deny > escalate > allow): the matching rules, the before_tool
 * hook, the impact gate and the taint gate. Only the approver turns an
 * escalation into an allow, and only for the exact arguments it saw (their
 * canonical-JSON hash). Nothing here ever loosens a decision: a hook's
 * "allow" means "no objection", a missing terminal means deny, a failure
 * anywhere (a hook error, a pattern over budget, the audit store) means deny.
 */
#include "security.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "approver.h"
#include "audit.h"
#include "audit_queue.h"
#include "call.h"
#include "events.h"
#include "hooks.h"
#include "json.h"
#include "rules.h"
#include "schema.h"
#include "secrets.h"
#include "util.h"

/* Rounds of "approver modified the arguments, run the pipeline again". */
#define MAX_ROUNDS 4

struct security {
  struct runtime *rt;
  struct ruleset *rules;
  struct hooks *hooks;
  enum impact threshold;
  enum approver_kind approver;
  double approval_timeout_s;
  int taint_on;
  enum impact taint_threshold;
  struct audit_opts audit;
  int interactive;          /* -1: decide by isatty(stdin); 0: never prompt; 1: may prompt */
  struct audit_queue *aq; /* the audit rows on their way (audit_queue.h) */
  /* The ReAct loop runs read-only tools of one round in parallel threads:
   * ask_mu lets one approval prompt at a time reach the operator. */
  pthread_mutex_t ask_mu;
  /* Where requests go when not to the store (sec_set_backend). */
  struct approval_queue queue;
  void (*release)(void *ud);
  void *release_ud;
};

/* --- setup -------------------------------------------------------------- */

static int cfg_error(const struct config *cfg, const char *key, struct err *e, const char *fmt,
                     const char *val) {
  int line = cfg->path[0] ? config_line_of(cfg->path, key) : 0;
  char where[64] = "";
  if (line > 0) snprintf(where, sizeof where, ":%d", line);
  char msg[600];
  snprintf(msg, sizeof msg, fmt, val);
  return err_set(e, ERR_INVALID, "config", "luagent.lua%s: %s: %s", where, key, msg);
}

static int parse_taint(const struct config *cfg, struct security *s, struct err *e) {
  const cJSON *t = config_get(cfg, "taint");
  s->taint_on = 1;
  s->taint_threshold = IMPACT_MEDIUM;
  if (!t || cJSON_IsNull(t)) return 0;
  if (cJSON_IsBool(t)) {
    s->taint_on = cJSON_IsTrue(t);
    return 0;
  }
  const cJSON *lvl = t;
  if (cJSON_IsObject(t)) {
    for (const cJSON *f = t->child; f; f = f->next)
      if (strcmp(f->string, "enabled") && strcmp(f->string, "threshold"))
        return cfg_error(cfg, "taint", e, "unknown field '%s' (expected enabled, threshold)",
                         f->string);
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(t, "enabled");
    if (en && !cJSON_IsBool(en))
      return cfg_error(cfg, "taint", e, "enabled must be a boolean%s", "");
    if (en) s->taint_on = cJSON_IsTrue(en);
    lvl = cJSON_GetObjectItemCaseSensitive(t, "threshold");
    if (!lvl) return 0;
  }
  if (!cJSON_IsString(lvl) || impact_parse(lvl->valuestring, &s->taint_threshold))
    return cfg_error(cfg, "taint", e,
                     "expected true, false, an impact level (read, low, medium, high, critical) "
                     "or { enabled =, threshold = }%s",
                     "");
  return 0;
}

int sec_new(struct runtime *rt, struct security **out, struct err *e) {
  *out = NULL;
  struct security *s = xcalloc(1, sizeof *s);
  pthread_mutex_init(&s->ask_mu, NULL);
  s->aq = audit_queue_new(rt, &s->audit);
  const struct config *cfg = rt->cfg;
  int rc = 0;
  s->rt = rt;
  s->threshold = IMPACT_HIGH;
  s->approver = APPROVER_AUTO;
  s->approval_timeout_s = 300;
  s->interactive = -1;
  if (cfg) {
    const char *th = config_string(cfg, "approval_threshold", "high");
    if (impact_parse(th, &s->threshold)) {
      rc = cfg_error(cfg, "approval_threshold", e,
                     "'%s' is not an impact level (read, low, medium, high, critical)", th);
      goto fail;
    }
    const char *ap = config_string(cfg, "approver", "auto");
    if (approver_parse(ap, &s->approver)) {
      rc = cfg_error(cfg, "approver", e, "'%s' is not \"auto\", \"queue\" or \"deny\"", ap);
      goto fail;
    }
    s->approval_timeout_s = config_number(cfg, "approval_timeout_s", 300);
    if (!(s->approval_timeout_s >= 0 && s->approval_timeout_s <= 7 * 86400)) {
      rc = cfg_error(cfg, "approval_timeout_s", e, "must be between 0 and 604800 seconds%s", "");
      goto fail;
    }
    if ((rc = parse_taint(cfg, s, e))) goto fail;
    const cJSON *au = config_get(cfg, "audit");
    if (au) {
      for (const cJSON *f = au->child; f; f = f->next)
        if (strcmp(f->string, "sign") && strcmp(f->string, "public_key")) {
          rc = cfg_error(cfg, "audit", e, "unknown field '%s' (expected sign, public_key)",
                         f->string);
          goto fail;
        }
      const cJSON *pk = cJSON_GetObjectItemCaseSensitive(au, "public_key");
      if (pk && !(cJSON_IsString(pk) && strlen(pk->valuestring) == 64 &&
                  strspn(pk->valuestring, "0123456789abcdefABCDEF") == 64)) {
        rc = cfg_error(cfg, "audit", e,
                       "public_key must be the 64 hex digits `luagent audit key` prints%s", "");
        goto fail;
      }
      s->audit.public_key = pk ? pk->valuestring : NULL; /* borrowed from the config */
      const cJSON *sg = cJSON_GetObjectItemCaseSensitive(au, "sign");
      if (sg && !cJSON_IsBool(sg)) {
        rc = cfg_error(cfg, "audit", e, "sign must be a boolean%s", "");
        goto fail;
      }
      s->audit.sign = cJSON_IsTrue(sg);
    }
    const char *file = cfg->path[0] ? "luagent.lua" : NULL;
    if ((rc = rules_parse(config_get(cfg, "rules"), file, &s->rules, e))) {
      int line = cfg->path[0] ? config_line_of(cfg->path, "rules") : 0;
      if (line > 0 && !strncmp(e->msg, "luagent.lua: ", 13)) {
        char rest[sizeof e->msg];
        snprintf(rest, sizeof rest, "%s", e->msg + 13);
        err_set(e, ERR_INVALID, "config", "luagent.lua:%d: %s", line, rest);
      }
      goto fail;
    }
  }
  if ((rc = hooks_load(rt->workspace, &s->hooks, e))) goto fail;
  *out = s;
  return 0;
fail:
  sec_free(s);
  return rc;
}

void sec_set_interactive(struct security *s, int on) {
  if (s) s->interactive = on ? 1 : 0;
}

void sec_set_backend(struct security *s, const struct audit_sink *sink,
                     const struct approval_queue *queue, void (*release)(void *ud), void *ud) {
  if (!s) return;
  /* The new sink first: the queue's rows already on their way to the old
   * one are written when this returns, so it can go. */
  if (sink) audit_queue_set_sink(s->aq, sink->ops ? sink : NULL);
  if (s->release) s->release(s->release_ud); /* installed again: the previous one goes */
  if (queue) s->queue = *queue;
  s->release = release;
  s->release_ud = ud;
}

void sec_free(struct security *s) {
  if (!s) return;
  audit_queue_flush(s->aq, 1);
  audit_queue_free(s->aq); /* no more writes through the sink... */
  if (s->release) s->release(s->release_ud); /* ...so it can go */
  rules_free(s->rules);
  hooks_free(s->hooks);
  pthread_mutex_destroy(&s->ask_mu);
  free(s);
}

/* --- helpers ------------------------------------------------------------ */

/* snprintf(dst, n, "%s", src) without the formatter (on every call's path). */
static void copy_str(char *dst, size_t n, const char *src) {
  size_t k = strlen(src);
  if (k >= n) k = n - 1;
  memcpy(dst, src, k);
  dst[k] = 0;
}

static const char *action_name(int a) {
  return a == RULE_DENY ? "deny" : a == RULE_ESCALATE ? "escalate" : "allow";
}

/* --- audit rows ---------------------------------------------------------
 *
 * Rows go through the audit queue (audit_queue.h): the calling thread
 * copies its row, the store writer's thread (store/writer.h) hashes,
 * chains and writes it. A row that must be on record before something
 * happens (every decision that is not a plain allowed read) is written
 * together with every row queued before it before audit_row returns, and
 * a failure there denies the call. Plain allowed reads only queue their
 * row: it is written with the next row that matters, once half of
 * AUDIT_QUEUE_MAX rows wait or the oldest is AUDIT_QUEUE_AGE seconds old (a
 * timer of the writer, even when no further call comes), whenever the
 * writer is made to write everything (a run's start and end, sec_flush)
 * and on sec_free.
 * So every read is on record before any call with side effects runs; a
 * crash can lose only the last reads' rows. When the queue is full and
 * cannot be written, reads are refused too (nothing is ever dropped from
 * it).
 */

void sec_flush(struct security *s) {
  if (s) audit_queue_flush(s->aq, 0);
}

/* Appends one audit row (reason text redacted first). defer != 0: a plain
 * allowed read, queued (see above). args (args_len bytes), when not NULL,
 * is a flat copy of the arguments (json_flat_copy), which the audit
 * writer's thread hashes into the row's args_hash instead of args_hash.
 * Returns <0 when a row that must be on record could not be written. */
static int audit_row_args(struct call_ctx *ctx, const struct tool *t, const char *args_hash,
                          const void *args, size_t args_len, const char *decision,
                          const char *by, const char *approver, const char *status, double ms,
                          const char *detail, int defer, struct err *e) {
  char *redacted = detail ? secrets_redact(detail, strlen(detail), NULL) : NULL;
  struct audit_entry a = {.run_id = ctx->run_id[0] ? ctx->run_id : NULL,
                          .caller_kind = caller_kind_name(ctx->caller.kind),
                          .caller_name = ctx->caller.name[0] ? ctx->caller.name : NULL,
                          .tool = t->name,
                          .args_hash = args_hash,
                          .decision = decision,
                          .decided_by = by,
                          .approver = approver,
                          .status = status,
                          .duration_ms = ms,
                          .detail = redacted};
  int rc = audit_queue_add_args(ctx->rt->sec->aq, &a, args, args_len, defer, e);
  free(redacted);
  return rc;
}

static int audit_row(struct call_ctx *ctx, const struct tool *t, const char *args_hash,
                     const char *decision, const char *by, const char *approver, const char *status,
                     double ms, const char *detail, int defer, struct err *e) {
  return audit_row_args(ctx, t, args_hash, NULL, 0, decision, by, approver, status, ms, detail,
                        defer, e);
}

/* Before a read whose row will only queue: a full queue that cannot be
 * written refuses the read (audit_queue_backlog). */
static int audit_backlog(struct security *s, struct err *e) {
  return audit_queue_backlog(s->aq, e);
}

static cJSON *call_json(struct call_ctx *ctx, const struct tool *t, const cJSON *args) {
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "tool", t->name);
  cJSON *who = cJSON_AddObjectToObject(c, "caller");
  cJSON_AddStringToObject(who, "kind", caller_kind_name(ctx->caller.kind));
  cJSON_AddStringToObject(who, "name", ctx->caller.name);
  cJSON_AddItemToObject(c, "args", cJSON_Duplicate(args, 1));
  cJSON_AddStringToObject(c, "impact", impact_name(t->impact));
  if (ctx->run_id[0]) cJSON_AddStringToObject(c, "run_id", ctx->run_id);
  return c;
}

struct verdict {
  int action; /* RULE_ALLOW / RULE_ESCALATE / RULE_DENY */
  char by[128];
  char reason[512];
};

static void raise_to(struct verdict *v, int action, const char *by, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void raise_to(struct verdict *v, int action, const char *by, const char *fmt, ...) {
  if (action <= v->action) return;
  v->action = action;
  snprintf(v->by, sizeof v->by, "%s", by);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->reason, sizeof v->reason, fmt, ap);
  va_end(ap);
}

static void apply_rules(struct security *s, struct call_ctx *ctx, const struct tool *t,
                        const cJSON *args, struct verdict *v, int *explicit_allow) {
  if (!rules_count(s->rules)) return; /* what rules_eval says of no rules: no opinion */
  struct rule_match m;
  struct err re;
  err_clear(&re); /* the header only: the 1 KiB message is written on failure */
  if (rules_eval(s->rules, t->name, caller_kind_name(ctx->caller.kind), ctx->caller.name, args, &m,
                 &re)) {
    raise_to(v, RULE_DENY, "rules", "a rule could not be evaluated: %s", re.msg);
    return;
  }
  if (m.explicit_allow) *explicit_allow = 1;
  if (m.action == RULE_NONE) return;
  char by[32];
  snprintf(by, sizeof by, "rule %d", m.rule);
  if (m.action == RULE_ALLOW) {
    if (v->action == RULE_ALLOW && !v->by[0]) snprintf(v->by, sizeof v->by, "%s", by);
    return;
  }
  raise_to(v, m.action, by, "%s",
           m.reason[0]             ? m.reason
           : m.action == RULE_DENY ? "a rule denies this call"
                                   : "a rule requires approval");
}

/* Stages 2-5 for one set of arguments. *rewritten gets a hook's validated
 * rewrite (caller frees) when there is one; the verdict then covers both
 * the original and the rewritten arguments (rules are checked on both). */
static void evaluate(struct security *s, struct call_ctx *ctx, const struct tool *t,
                     const cJSON *args, struct verdict *v, cJSON **rewritten) {
  int explicit_allow = 0;
  v->action = RULE_ALLOW;
  v->by[0] = v->reason[0] = 0;
  *rewritten = NULL;

  /* 2. rules */
  apply_rules(s, ctx, t, args, v, &explicit_allow);

  /* 3. hooks: stricter only. */
  if (hooks_has_before(s->hooks)) {
    struct hook_verdict hv;
    struct err he = {0};
    cJSON *call = call_json(ctx, t, args);
    int hrc = hooks_before(s->hooks, call, ctx->limits.deadline_at, &hv, &he);
    cJSON_Delete(call);
    if (hrc) {
      raise_to(v, RULE_DENY, "hook", "%s", he.msg);
    } else {
      if (hv.action == RULE_DENY || hv.action == RULE_ESCALATE)
        raise_to(v, hv.action, "hook", "%s",
                 hv.reason[0]             ? hv.reason
                 : hv.action == RULE_DENY ? "denied by hooks.lua"
                                          : "hooks.lua asks for approval");
      if (hv.args) {
        struct err se = {0};
        char where[200];
        snprintf(where, sizeof where, "%s: args rewritten by hooks.lua", t->name);
        if (tool_args_check(hv.args, where, &se)) {
          raise_to(v, RULE_DENY, "hook", "%s", se.msg);
          cJSON_Delete(hv.args);
        } else if (schema_run(t->schema, hv.args, "args", &se)) {
          raise_to(v, RULE_DENY, "hook", "%s: args rewritten by hooks.lua are invalid: %s", t->name,
                   se.msg);
          cJSON_Delete(hv.args);
        } else {
          /* The rules see what will actually run; an allow rule that only
           * matched the original arguments does not count for the gate. */
          int ea2 = 0;
          apply_rules(s, ctx, t, hv.args, v, &ea2);
          explicit_allow = explicit_allow && ea2;
          *rewritten = hv.args;
        }
      }
    }
  }

  /* 4. impact */
  if (t->impact >= s->threshold && !explicit_allow)
    raise_to(v, RULE_ESCALATE, "impact",
             "impact %s is at or above the approval threshold (%s) and no rule allows %s for "
             "%s callers",
             impact_name(t->impact), impact_name(s->threshold), t->name,
             caller_kind_name(ctx->caller.kind));

  /* 5. taint: the run's flag, for the model's calls and for everything a
   * model's call runs underneath (a skill tool cannot launder it). */
  if (s->taint_on && call_ctx_model_chain(ctx) && call_ctx_tainted(ctx) &&
      t->impact >= s->taint_threshold)
    raise_to(v, RULE_ESCALATE, "taint",
             "%s has read outside content (an open_world tool result) in this %s, and "
             "%s has impact %s",
             ctx->caller.kind == CALLER_MCP ? "the MCP client" : "the model",
             ctx->caller.kind == CALLER_MCP ? "session" : "run", t->name, impact_name(t->impact));
}

/* Stage 6 under `luagent test`: the test's fake.approver decides. */
static int ask_fake(struct call_ctx *ctx, const struct approval_request *rq,
                    struct approval_result *res, struct err *e) {
  const struct rt_fakes *f = ctx->rt->fakes;
  cJSON *q = cJSON_CreateObject();
  cJSON_AddStringToObject(q, "tool", rq->tool);
  cJSON_AddItemToObject(q, "args", cJSON_Duplicate(rq->args, 1));
  cJSON_AddStringToObject(q, "args_hash", rq->args_hash);
  cJSON *c = cJSON_AddObjectToObject(q, "caller");
  cJSON_AddStringToObject(c, "kind", rq->caller_kind);
  cJSON_AddStringToObject(c, "name", rq->caller_name);
  cJSON_AddStringToObject(q, "impact", rq->impact);
  cJSON_AddStringToObject(q, "reason", rq->reason);
  cJSON_AddStringToObject(q, "run_id", rq->run_id);
  cJSON *v = NULL;
  int rc = f->approve(f->ud, ctx, q, &v, e);
  cJSON_Delete(q);
  if (rc) return rc;
  const char *dec = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "decision"));
  const char *why = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "reason"));
  const char *by = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "by"));
  snprintf(res->by, sizeof res->by, "%s", by ? by : "test");
  snprintf(res->reason, sizeof res->reason, "%s", why ? why : "");
  if (dec && !strcmp(dec, "approve")) {
    res->verdict = APPROVAL_APPROVED;
  } else if (dec && !strcmp(dec, "edit")) {
    cJSON *na = cJSON_GetObjectItemCaseSensitive(v, "args");
    res->verdict = APPROVAL_MODIFIED;
    res->new_args = cJSON_Duplicate(na, 1); /* validated and gated again */
  } else {
    res->verdict = APPROVAL_DENIED;
    if (!why) snprintf(res->reason, sizeof res->reason, "denied by the test's fake.approver");
  }
  cJSON_Delete(v);
  return 0;
}

/* Stage 6: ask the configured approver (one request at a time). */
static int ask_locked(struct security *s, struct call_ctx *ctx, const struct tool *t,
                      const cJSON *args, const char *hash, const struct verdict *v,
                      struct approval_result *res, struct err *e);
static int ask(struct security *s, struct call_ctx *ctx, const struct tool *t, const cJSON *args,
               const char *hash, const struct verdict *v, struct approval_result *res,
               struct err *e) {
  /* The test runner's fake approver serialises itself, recursively: it may
   * call tools that escalate again, which this lock would deadlock. */
  if (ctx->rt->fakes && ctx->rt->fakes->approve) return ask_locked(s, ctx, t, args, hash, v, res, e);
  pthread_mutex_lock(&s->ask_mu);
  int rc = ask_locked(s, ctx, t, args, hash, v, res, e);
  pthread_mutex_unlock(&s->ask_mu);
  return rc;
}
static int ask_rq(struct security *s, struct call_ctx *ctx, const struct approval_request *rq,
                  struct approval_result *res, struct err *e);
static int ask_locked(struct security *s, struct call_ctx *ctx, const struct tool *t,
                      const cJSON *args, const char *hash, const struct verdict *v,
                      struct approval_result *res, struct err *e) {
  memset(res, 0, sizeof *res);
  res->verdict = APPROVAL_DENIED;
  struct approval_request rq = {.run_id = ctx->run_id,
                                .tool = t->name,
                                .caller_kind = caller_kind_name(ctx->caller.kind),
                                .caller_name = ctx->caller.name,
                                .impact = impact_name(t->impact),
                                .reason = v->reason,
                                .args = args,
                                .args_hash = hash};
  return ask_rq(s, ctx, &rq, res, e);
}

/* The configured approver decides rq (ask_mu held). */
static int ask_rq(struct security *s, struct call_ctx *ctx, const struct approval_request *rq,
                  struct approval_result *res, struct err *e) {
  if (ctx->rt->fakes && ctx->rt->fakes->approve) return ask_fake(ctx, rq, res, e);
  switch (s->approver) {
    case APPROVER_DENY:
      snprintf(res->by, sizeof res->by, "policy");
      snprintf(res->reason, sizeof res->reason,
               "needs approval (%.400s) and the approver is \"deny\"", rq->reason);
      return 0;
    case APPROVER_AUTO:
      if (s->interactive == 0 || !isatty(STDIN_FILENO)) {
        snprintf(res->by, sizeof res->by, "auto");
        snprintf(res->reason, sizeof res->reason,
                 "needs approval (%.300s) but there is no terminal to ask (%s); "
                 "set approver = \"queue\" or add a rule",
                 rq->reason,
                 s->interactive == 0 ? "this process never prompts" : "stdin is not a tty");
        return 0;
      }
      return approver_terminal(rq, stdin, stderr, res, e);
    case APPROVER_QUEUE: {
      struct approval_queue q = s->queue;
      int rc = 0;
      if (!q.ops) {
        struct store *st = NULL;
        if ((rc = runtime_store(ctx->rt, &st, e))) return rc;
        q = approver_sqlite_queue(st);
      }
      long long id = 0;
      if ((rc = q.ops->submit(q.ud, rq, &id, e))) return rc;
      /* Say which request waits, so whoever watches the run can decide it
       * (`luagent approvals approve ID`) without listing the queue. */
      if (ctx->events) {
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddNumberToObject(ev, "id", (double)id);
        cJSON_AddStringToObject(ev, "tool", rq->tool);
        cJSON_AddStringToObject(ev, "args_hash", rq->args_hash);
        events_emit(ctx->events, ctx->run_id, "approval_queued", ev);
        cJSON_Delete(ev);
      }
      return q.ops->await(q.ud, id, rq, s->approval_timeout_s, ctx->limits.deadline_at,
                          ctx->stop, res, e);
    }
  }
  return err_set(e, ERR_FAIL, "denied", "unknown approver");
}

int sec_record(struct call_ctx *ctx, const char *tool, const char *args_hash, const char *decision,
               const char *decided_by, const char *status, const char *detail, struct err *e) {
  struct tool t = {0};
  t.name = (char *)tool;
  return audit_row(ctx, &t, args_hash, decision, decided_by, NULL, status, -1, detail, 0, e);
}

int sec_ask(struct call_ctx *ctx, const struct approval_request *rq, struct approval_result *res,
            struct err *e) {
  struct security *s = ctx->rt->sec;
  memset(res, 0, sizeof *res);
  res->verdict = APPROVAL_DENIED;
  pthread_mutex_lock(&s->ask_mu);
  int rc = ask_rq(s, ctx, rq, res, e);
  pthread_mutex_unlock(&s->ask_mu);
  /* A decision made here (the terminal, approver deny or auto) goes on
   * record as a call's escalation does; the queue's are recorded where
   * they are made (approver_decide_audited). */
  if (strncmp(res->by, "queue:", 6)) {
    struct tool t = {.name = (char *)rq->tool};
    char mh[65];
    const char *hash = rq->args_hash;
    if (!rc && res->verdict == APPROVAL_MODIFIED && res->new_args) {
      json_hash_hex(res->new_args, mh);
      hash = mh;
    }
    const char *dec = rc || res->verdict == APPROVAL_DENIED ? "deny"
                      : res->verdict == APPROVAL_MODIFIED    ? "modified"
                                                             : "approved";
    struct err ae = {0};
    audit_row(ctx, &t, hash, dec, "ask", res->by[0] ? res->by : "approver", NULL, -1,
              rc ? e->msg : res->reason[0] ? res->reason : rq->reason, 0, &ae);
  }
  return rc;
}

/* Removes every "<workspace>/" from msg in place: callers (and the model)
 * see workspace-relative paths, never host paths. */
static void strip_workspace(const struct runtime *rt, char *msg) {
  if (!rt || !rt->workspace || !rt->workspace[0]) return;
  size_t wl = strlen(rt->workspace);
  char *p;
  while ((p = strstr(msg, rt->workspace)) && p[wl] == '/')
    memmove(p, p + wl + 1, strlen(p + wl + 1) + 1);
}

static int deny(struct call_ctx *ctx, struct sec_decision *d, const struct tool *t, const char *by,
                const char *reason, struct err *e) {
  d->action = SEC_DENY;
  snprintf(d->decided_by, sizeof d->decided_by, "%.127s", by);
  snprintf(d->reason, sizeof d->reason, "%s", reason);
  strip_workspace(ctx->rt, d->reason);
  char *red = secrets_redact(d->reason, strlen(d->reason), NULL);
  err_set(e, ERR_DENIED, "denied", "%s: denied (%s): %s", t->name, by, red);
  free(red);
  return ERR_DENIED;
}

/* --- the pipeline ------------------------------------------------------- */

/* An empty decision: every field set, its strings empty (cheaper than
 * clearing the 700 bytes of text on every call). */
static void decision_init(struct sec_decision *d) {
  d->action = SEC_ALLOW;
  d->decided_by[0] = d->reason[0] = d->args_hash[0] = 0;
  d->args_len = 0;
  d->started = 0;
  d->audit_deferred = 0;
  d->decided = NULL;
}

int sec_before(struct call_ctx *ctx, const struct tool *t, cJSON **args, int *args_owned,
               struct sec_decision *d, struct err *e) {
  struct security *s = ctx->rt ? ctx->rt->sec : NULL;
  decision_init(d);
  d->started = util_monotonic();
  *args_owned = 0;
  if (!s) return deny(ctx, d, t, "pipeline", "the security pipeline is not initialised", e);

  cJSON *cur = *args; /* borrowed until own is set */
  int own = 0, rc = 0;
  char hash[65], approved_hash[65], approved_by[128];
  approved_hash[0] = approved_by[0] = 0;
  struct err ae;
  err_clear(&ae);
  hash[0] = 0; /* the arguments' hash, once it is needed */

  for (int round = 0; round < MAX_ROUNDS; round++) {
    struct verdict v;
    cJSON *rw = NULL;
    evaluate(s, ctx, t, cur, &v, &rw);
    if (rw) {
      if (own) cJSON_Delete(cur);
      cur = rw;
      own = 1;
      json_hash_hex(cur, hash);
    } else if (round > 0) {
      memcpy(hash, approved_hash, sizeof hash); /* cur is the approver's object */
    }

    /* A read-impact call that is simply allowed changes nothing in the
     * world, so its decision and execution share one row written after it
     * ran (half the audit cost of the most frequent calls). Everything else
     * is on record before the tool runs. */
    int plain_read = v.action == RULE_ALLOW && t->impact == IMPACT_READ && round == 0 && !own;
    /* Hashed once (a rewrite was hashed above), after the rules and hooks
     * saw these very arguments. A plain read's row needs the hash only
     * when the writer chains it: it gets a copy of these arguments, taken
     * now, before the handler runs, which the writer prints and hashes
     * (arguments too big for d->args are hashed here). */
    if (plain_read && !hash[0]) {
      d->args_len = json_flat_copy(cur, d->args, sizeof d->args);
      if (!d->args_len) json_hash_hex(cur, hash);
    } else if (!hash[0]) {
      json_hash_hex(cur, hash);
    }

    /* Arguments the approver edited were approved as exactly these bytes:
     * that settles an escalation, never a deny. */
    int pre_approved = approved_hash[0] && !strcmp(approved_hash, hash);
    if (v.action == RULE_ESCALATE && pre_approved) {
      v.action = RULE_ALLOW;
      snprintf(v.by, sizeof v.by, "approver:%.100s", approved_by);
      snprintf(v.reason, sizeof v.reason, "modified arguments approved");
    }
    if (!v.by[0]) copy_str(v.by, sizeof v.by, "default");

    if (plain_read) {
      if (audit_backlog(s, &ae)) {
        rc = deny(ctx, d, t, "audit", ae.msg, e);
        goto fail;
      }
      d->action = SEC_ALLOW;
      d->audit_deferred = 1;
      copy_str(d->decided_by, sizeof d->decided_by, v.by);
      copy_str(d->reason, sizeof d->reason, v.reason);
      if (!d->args_len) memcpy(d->args_hash, hash, sizeof hash);
      d->decided = cur;
      return 0;
    }

    if (audit_row(ctx, t, hash, action_name(v.action), v.by, pre_approved ? approved_by : NULL,
                  NULL, -1, v.reason, 0, &ae)) {
      rc = deny(ctx, d, t, "audit", ae.msg, e);
      goto fail;
    }
    if (v.action == RULE_DENY) {
      rc = deny(ctx, d, t, v.by, v.reason, e);
      goto fail;
    }
    if (v.action == RULE_ALLOW) {
      d->action = SEC_ALLOW;
      copy_str(d->decided_by, sizeof d->decided_by, v.by);
      copy_str(d->reason, sizeof d->reason, v.reason);
      memcpy(d->args_hash, hash, sizeof hash);
      d->decided = cur;
      *args = cur;
      *args_owned = own;
      return 0;
    }

    /* 6. escalate */
    struct approval_result res;
    struct err qe = {0};
    if (ctx->events) {
      cJSON *ev = call_json(ctx, t, cur);
      secrets_redact_json(ev);
      cJSON_AddStringToObject(ev, "args_hash", hash);
      cJSON_AddStringToObject(ev, "reason", v.reason);
      cJSON_AddStringToObject(ev, "decided_by", v.by);
      events_emit(ctx->events, ctx->run_id, "approval_requested", ev);
      cJSON_Delete(ev);
    }
    int arc = ask(s, ctx, t, cur, hash, &v, &res, &qe);
    if (ctx->events) {
      cJSON *ev = cJSON_CreateObject();
      cJSON_AddStringToObject(ev, "tool", t->name);
      cJSON_AddStringToObject(ev, "args_hash", hash);
      cJSON_AddStringToObject(ev, "verdict",
                              arc                                ? "error"
                              : res.verdict == APPROVAL_APPROVED ? "approved"
                              : res.verdict == APPROVAL_MODIFIED ? "modified"
                                                                 : "denied");
      cJSON_AddStringToObject(ev, "by", res.by);
      cJSON_AddStringToObject(ev, "reason", arc ? qe.msg : res.reason);
      events_emit(ctx->events, ctx->run_id, "approval_decided", ev);
      cJSON_Delete(ev);
    }
    if (arc) {
      audit_row(ctx, t, hash, "deny", "approver", NULL, NULL, -1, qe.msg, 0, &ae);
      rc = deny(ctx, d, t, "approver", qe.msg, e);
      goto fail;
    }
    char by[160];
    snprintf(by, sizeof by, "approver:%s", res.by);
    if (res.verdict == APPROVAL_DENIED) {
      audit_row(ctx, t, hash, "deny", by, res.by, NULL, -1, res.reason, 0, &ae);
      rc = deny(ctx, d, t, by, res.reason, e);
      goto fail;
    }
    if (res.verdict == APPROVAL_APPROVED) {
      if (audit_row(ctx, t, hash, "approved", by, res.by, NULL, -1, v.reason, 0, &ae)) {
        rc = deny(ctx, d, t, "audit", ae.msg, e);
        goto fail;
      }
      d->action = SEC_ALLOW;
      snprintf(d->decided_by, sizeof d->decided_by, "%.127s", by);
      snprintf(d->reason, sizeof d->reason, "approved: %.480s", v.reason);
      memcpy(d->args_hash, hash, sizeof hash);
      d->decided = cur;
      *args = cur;
      *args_owned = own;
      return 0;
    }
    /* Modified: validate, then the whole pipeline again on the new args. */
    struct err se = {0};
    char where[200];
    snprintf(where, sizeof where, "%s: args modified by the approver", t->name);
    int bad = tool_args_check(res.new_args, where, &se);
    if (!bad && (bad = schema_run(t->schema, res.new_args, "args", &se)))
      err_prefix(&se, "%s: args modified by the approver are invalid", t->name);
    if (bad) {
      char mh[65];
      json_hash_hex(res.new_args, mh);
      cJSON_Delete(res.new_args);
      audit_row(ctx, t, mh, "deny", by, res.by, NULL, -1, se.msg, 0, &ae);
      char why[sizeof se.msg + 64];
      snprintf(why, sizeof why, "modified arguments rejected: %s", se.msg);
      rc = deny(ctx, d, t, by, why, e);
      goto fail;
    }
    if (own) cJSON_Delete(cur);
    cur = res.new_args;
    own = 1;
    json_hash_hex(cur, approved_hash);
    snprintf(approved_by, sizeof approved_by, "%s", res.by);
    audit_row(ctx, t, approved_hash, "modified", by, res.by, NULL, -1,
              "the approver modified the arguments; checking them again", 0, &ae);
  }
  rc = deny(ctx, d, t, "approver", "too many rounds of modified arguments", e);
fail:
  if (own) cJSON_Delete(cur);
  return rc;
}

void sec_after(struct call_ctx *ctx, const struct tool *t, const cJSON *args,
               struct sec_decision *d, int rc, cJSON **result, const cJSON **lent,
               const struct err *herr) {
  struct security *s = ctx->rt ? ctx->rt->sec : NULL;
  if (!s) return;
  double ms = (util_monotonic() - d->started) * 1000.0;
  char status[64] = "ok";
  char detail[1100];
  detail[0] = 0;
  struct err ae;
  err_clear(&ae);

  /* What ran must be what was decided on: the very object (hashed once,
   * by tool_call or after a rewrite), not a look-alike. */
  if (args != d->decided) {
    snprintf(status, sizeof status, "args_mismatch");
    snprintf(detail, sizeof detail, "the arguments that ran differ from the decided ones");
  }

  /* A borrowed result (tool_handler_lent) is the caller's to read only:
   * anything that may change it works on a copy, made here, where the
   * redaction below looks at the registered secrets. */
  if (lent && *lent && result && (secrets_registered() || (rc == 0 && hooks_has_after(s->hooks)))) {
    *result = cJSON_Duplicate(*lent, 1);
    *lent = NULL;
  }
  /* Secret values never travel back to Lua (the after_tool hook included)
   * or the model. */
  if (result && *result && secrets_registered()) secrets_redact_json(*result);
  if (rc == 0 && result && *result && hooks_has_after(s->hooks)) {
    cJSON *call = call_json(ctx, t, args), *nr = NULL;
    struct err he = {0};
    if (hooks_after(s->hooks, call, *result, ctx->limits.deadline_at, &nr, &he)) {
      /* Fail closed: the caller does not get a result the hook could not
       * inspect. */
      cJSON_Delete(*result);
      *result = cJSON_CreateObject();
      cJSON_AddStringToObject(*result, "withheld", "hooks.lua after_tool failed; result withheld");
      snprintf(status, sizeof status, "withheld");
      snprintf(detail, sizeof detail, "%s", he.msg);
    } else if (nr) {
      cJSON_Delete(*result);
      *result = nr;
    }
    cJSON_Delete(call);
  }
  /* Anything an open-world tool hands back at any depth under a
   * model-initiated call may reach the model (a skill returns what it
   * fetched), its error text too (a redirect URL, a host name the page
   * chose): taint the run whether the call succeeded or not. */
  if (t->open_world && call_ctx_model_chain(ctx)) call_ctx_taint(ctx);

  if (rc) {
    snprintf(status, sizeof status, "%s", herr && herr->code[0] ? herr->code : "tool_error");
    if (herr) snprintf(detail, sizeof detail, "%s", herr->msg);
  }
  /* A plain allowed read that ran fine is queued; anything else (an error,
   * a withheld result, an execution with side effects) is written now. */
  int defer = d->audit_deferred && rc == 0 && !strcmp(status, "ok");
  if (audit_row_args(ctx, t, d->args_hash, d->args_len ? d->args : NULL, d->args_len,
                     d->audit_deferred ? "allow" : "exec", d->decided_by, NULL, status, ms,
                     detail[0] ? detail : NULL, defer, &ae)) {
    strip_workspace(ctx->rt, ae.msg);
    fprintf(stderr, "luagent: audit: %s: %s\n", t->name, ae.msg);
  }
}

/* ------------------------------------------------------------ tool_call */

#define MAX_TOOL_DEPTH 16

static int call_tool(struct call_ctx *ctx, const char *name, const cJSON *args, cJSON **result,
                     cJSON **ran, const cJSON **lent, struct err *e);

int tool_call(struct call_ctx *ctx, const char *name, const cJSON *args, cJSON **result,
              struct err *e) {
  return call_tool(ctx, name, args, result, NULL, NULL, e);
}

int tool_call_ran(struct call_ctx *ctx, const char *name, const cJSON *args, cJSON **result,
                  cJSON **ran, struct err *e) {
  return call_tool(ctx, name, args, result, ran, NULL, e);
}

int tool_call_lent(struct call_ctx *ctx, const char *name, const cJSON *args, cJSON **result,
                   const cJSON **lent, struct err *e) {
  return call_tool(ctx, name, args, result, NULL, lent, e);
}

/* The pipeline. lent != NULL: the caller takes a borrowed result
 * (tool_call_lent). */
static int call_tool(struct call_ctx *ctx, const char *name, const cJSON *args, cJSON **result,
                     cJSON **ran, const cJSON **lent, struct err *e) {
  *result = NULL;
  if (ran) *ran = NULL;
  if (lent) *lent = NULL;
  int rc;
  cJSON *empty = NULL, *a = NULL;
  struct sec_decision d;
  decision_init(&d);
  int owned = 0, decided = 0;
  if (!name) return err_set(e, ERR_INVALID, "invalid_args", "tool name missing");
  /* Exact match only: a name carrying U+0000 ("echo\0x", held as C0 80)
   * is another name, and the message shows it escaped. */
  const struct tool *t = toolreg_find(ctx->rt->tools, name);
  /* A code-mode chunk reaches only its scope; a tool outside it gets the
   * very answer a missing one gets (nothing tells the two apart). */
  if (t && !call_ctx_may_reach(ctx, name)) t = NULL;
  if (!t) {
    struct sbuf shown = {0};
    util_escape_text(&shown, name, strlen(name), 200);
    rc = err_set(e, ERR_NOTFOUND, "unknown_tool", "unknown tool '%s'", shown.s ? shown.s : "");
    sbuf_free(&shown);
    goto out;
  }
  if (ctx->stop && *ctx->stop) {
    rc = err_set(e, ERR_STOPPED, "stopped", "%s: the run was stopped", name);
    goto out;
  }
  if (ctx->depth >= MAX_TOOL_DEPTH) {
    rc = err_set(e, ERR_LIMIT, "limit_depth", "%s: tool calls nested deeper than %d", name, MAX_TOOL_DEPTH);
    goto out;
  }
  if (!args || cJSON_IsNull(args)) args = empty = cJSON_CreateObject();
  if ((rc = tool_args_check(args, "args", e)) || (rc = schema_run(t->schema, args, "args", e))) {
    err_prefix(e, "%s", name);
    goto out;
  }

  /* From here on this object is the call's arguments for every stage:
   * rules and hooks see it, the approval and audit bind its hash, the
   * handler gets it. It is hashed once (by sec_before); only a rewrite (a
   * hook, the approver) makes a new object, checked and hashed again. */
  a = (cJSON *)args;
  decided = 1;
  if ((rc = sec_before(ctx, t, &a, &owned, &d, e))) goto out;

  struct err herr;
  err_clear(&herr);
  /* A result borrowed from the arguments only when they are the caller's
   * own (not a rewrite this call owns, nor the empty object made here),
   * so it outlives this call as the caller's args do. */
  rc = 1;
  if (lent && t->lent && !owned && !empty) rc = t->lent(ctx, t, a, lent, &herr);
  if (rc == 1) {
    if (lent) *lent = NULL;
    rc = t->handler(ctx, t, a, result, &herr);
  }
  if (rc && !herr.code[0]) snprintf(herr.code, sizeof herr.code, "tool_error");
  sec_after(ctx, t, a, &d, rc, result, lent, rc ? &herr : NULL);
  if (rc) {
    if (lent) *lent = NULL;
    cJSON_Delete(*result);
    *result = NULL;
    /* A handler's message may quote what it was given (a header, a
     * response): scrub secret values before it travels anywhere. */
    if (secrets_registered()) {
      char *clean = secrets_redact(herr.msg, strlen(herr.msg), NULL);
      snprintf(herr.msg, sizeof herr.msg, "%s", clean ? clean : "[redacted]");
      free(clean);
    }
    err_set(e, rc, herr.code, "%s", herr.msg);
    if (!strstr(herr.msg, name)) err_prefix(e, "%s", name);
  } else if (!*result && !(lent && *lent)) {
    *result = cJSON_CreateNull();
  }
out:
  if (ctx->rt->fakes && ctx->rt->fakes->observe) {
    /* luagent test's calls(): what ran (or was refused) and who decided */
    const char *dec = !decided ? "invalid"
                      : d.action == SEC_DENY ? "deny"
                      : strncmp(d.decided_by, "approver:", 9) == 0 ? "approved"
                                                                : "allow";
    const char *status = !rc ? "ok" : e && e->code[0] ? e->code : "error";
    ctx->rt->fakes->observe(ctx->rt->fakes->ud, ctx, name, a ? a : args, dec, d.decided_by, status);
  }
  if (owned && ran) *ran = cJSON_Duplicate(a, 1); /* a rewrite: what ran */
  if (owned) cJSON_Delete(a);
  cJSON_Delete(empty);
  if (rc && e) snprintf(e->subject, sizeof e->subject, "%s", name);
  return rc;
}
