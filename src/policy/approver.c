/* approver.c - see approver.h. */
#include "approver.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit.h"
#include "sandbox.h"
#include "json.h"
#include "secrets.h"
#include "tool.h"
#include "util.h"

int approver_parse(const char *s, enum approver_kind *out) {
  if (!s) return ERR_INVALID;
  if (!strcmp(s, "auto"))
    *out = APPROVER_AUTO;
  else if (!strcmp(s, "queue"))
    *out = APPROVER_QUEUE;
  else if (!strcmp(s, "deny"))
    *out = APPROVER_DENY;
  else
    return ERR_INVALID;
  return 0;
}

static void res_init(struct approval_result *res) {
  memset(res, 0, sizeof *res);
  res->verdict = APPROVAL_DENIED;
}

/* One line of text, escaped and redacted, for the operator's eyes. */
static void put_escaped(FILE *out, const char *label, const char *s) {
  struct sbuf b = {0};
  size_t rl = 0;
  char *red = secrets_redact(s ? s : "", s ? strlen(s) : 0, &rl);
  util_escape_text(&b, red, rl, 65536);
  fprintf(out, "  %-8s %s\n", label, b.s ? b.s : "");
  sbuf_free(&b);
  free(red);
}

/* --- terminal ----------------------------------------------------------- */

static int read_line(FILE *in, char *buf, size_t n) {
  if (!fgets(buf, (int)n, in)) return -1;
  size_t l = strlen(buf);
  if (l && buf[l - 1] != '\n' && !feof(in)) {
    /* Longer than the buffer: drain and refuse rather than act on a part. */
    int c;
    while ((c = fgetc(in)) != EOF && c != '\n') {
    }
    return -2;
  }
  while (l && (buf[l - 1] == '\n' || buf[l - 1] == '\r')) buf[--l] = 0;
  return 0;
}

static void (*term_hook)(void *ud, int owning);
static void *term_hook_ud;

void approver_set_terminal_hook(void (*fn)(void *ud, int owning), void *ud) {
  term_hook = fn;
  term_hook_ud = ud;
}

static int terminal_prompt(const struct approval_request *rq, FILE *in, FILE *out,
                           struct approval_result *res, struct err *e);

int approver_terminal(const struct approval_request *rq, FILE *in, FILE *out,
                      struct approval_result *res, struct err *e) {
  void (*hook)(void *, int) = term_hook;
  void *ud = term_hook_ud;
  if (hook) hook(ud, 1);
  watchdog_hold(1); /* the operator may take their time */
  int rc = terminal_prompt(rq, in, out, res, e);
  watchdog_hold(0);
  if (hook) hook(ud, 0);
  return rc;
}

static int terminal_prompt(const struct approval_request *rq, FILE *in, FILE *out,
                           struct approval_result *res, struct err *e) {
  res_init(res);
  snprintf(res->by, sizeof res->by, "terminal");
  char *args = json_print(rq->args, 0);
  char who[300];
  snprintf(who, sizeof who, "%s%s%s", rq->caller_kind ? rq->caller_kind : "?",
           rq->caller_name && *rq->caller_name ? " " : "", rq->caller_name ? rq->caller_name : "");
  char tool[300];
  snprintf(tool, sizeof tool, "%s (impact %s)", rq->tool, rq->impact ? rq->impact : "?");
  fprintf(out, "\nluagent: a tool call needs approval\n");
  put_escaped(out, "tool:", tool);
  put_escaped(out, "caller:", who);
  put_escaped(out, "reason:", rq->reason);
  put_escaped(out, "args:", args);
  fprintf(out, "  %-8s %.16s\n", "hash:", rq->args_hash ? rq->args_hash : "");
  free(args);
  static char line[65536];
  for (int tries = 0; tries < 10; tries++) {
    fprintf(out, "approve? [y]es / [n]o / [e]dit arguments: ");
    fflush(out);
    int r = read_line(in, line, sizeof line);
    if (r == -1) {
      snprintf(res->reason, sizeof res->reason, "no answer from the terminal (end of input)");
      fprintf(out, "\n");
      return 0;
    }
    if (r == -2) continue;
    if (!strcmp(line, "y") || !strcmp(line, "yes")) {
      res->verdict = APPROVAL_APPROVED;
      return 0;
    }
    if (!strcmp(line, "n") || !strcmp(line, "no")) {
      fprintf(out, "reason (shown to the caller, optional): ");
      fflush(out);
      if (read_line(in, line, sizeof line) == 0 && line[0])
        snprintf(res->reason, sizeof res->reason, "denied by the operator: %.400s", line);
      else
        snprintf(res->reason, sizeof res->reason, "denied by the operator");
      return 0;
    }
    if (!strcmp(line, "e") || !strcmp(line, "edit")) {
      fprintf(out, "new arguments as one line of JSON: ");
      fflush(out);
      if (read_line(in, line, sizeof line) != 0) continue;
      struct err pe = {0};
      cJSON *j = json_parse_str(line, JSON_NO_DUPLICATES, &pe);
      if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        if (pe.rc) put_escaped(out, "error:", pe.msg);
        fprintf(out, "not a JSON object; try again\n");
        continue;
      }
      res->verdict = APPROVAL_MODIFIED;
      res->new_args = j;
      return 0;
    }
    fprintf(out, "please answer y, n or e\n");
  }
  snprintf(res->reason, sizeof res->reason, "no valid answer from the terminal");
  (void)e;
  return 0;
}

/* --- queue -------------------------------------------------------------- */

int approver_queue_submit(struct store *s, const struct approval_request *rq, long long *id,
                          struct err *e) {
  sqlite3_stmt *st = NULL;
  char *args = json_print(rq->args, 0);
  int rc = store_prepare(s,
                         "INSERT INTO approvals (created, run_id, tool, caller_kind, caller_name, "
                         "impact, reason, args, args_hash, status, waiter_pid, waiter_start) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'pending', ?10, ?11)",
                         &st, e);
  if (!rc) {
    sqlite3_bind_double(st, 1, util_now());
    sqlite3_bind_text(st, 2, rq->run_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, rq->tool, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, rq->caller_kind ? rq->caller_kind : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, rq->caller_name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, rq->impact, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, rq->reason, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 8, args ? args : "null", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 9, rq->args_hash, -1, SQLITE_STATIC);
    /* this process waits on it: when it is gone, nothing acts on a decision */
    sqlite3_bind_int64(st, 10, (sqlite3_int64)getpid());
    long long start = store_proc_start((int)getpid());
    if (start > 0) sqlite3_bind_int64(st, 11, start);
    if (sqlite3_step(st) != SQLITE_DONE)
      rc = store_error(s, e, "approvals: add");
    else
      *id = sqlite3_last_insert_rowid(store_db(s));
    sqlite3_finalize(st);
  }
  free(args);
  return rc;
}

void approver_row_verdict(long long id, const struct approval_row *row, const char *expect_hash,
                          int *decided, struct approval_result *res) {
  *decided = 0;
  res_init(res);
  snprintf(res->by, sizeof res->by, "queue:%lld", id);
  if (!row) {
    /* The row vanished: treat as a denial, never as an approval. */
    *decided = 1;
    snprintf(res->reason, sizeof res->reason, "approval request %lld disappeared", id);
    return;
  }
  const char *status = row->status, *by = row->decided_by, *why = row->decision_reason;
  const char *ahash = row->approved_hash, *rowhash = row->args_hash;
  if (!status || !strcmp(status, "pending")) return;
  *decided = 1;
  if (by && *by) snprintf(res->by, sizeof res->by, "queue:%lld:%s", id, by);
  if (!strcmp(status, "approved") || !strcmp(status, "modified")) {
    if (!rowhash || !expect_hash || strcmp(rowhash, expect_hash) != 0) {
      snprintf(res->reason, sizeof res->reason,
               "approval %lld was given for other arguments than the ones waiting to run", id);
    } else if (!strcmp(status, "approved")) {
      if (ahash && !strcmp(ahash, expect_hash))
        res->verdict = APPROVAL_APPROVED;
      else
        snprintf(res->reason, sizeof res->reason,
                 "approval %lld does not match the arguments' hash", id);
    } else {
      cJSON *j = row->new_args ? json_parse_str(row->new_args, 0, NULL) : NULL;
      char h[65] = "";
      if (j) json_hash_hex(j, h);
      if (!j || !ahash || strcmp(h, ahash) != 0) {
        cJSON_Delete(j);
        snprintf(res->reason, sizeof res->reason,
                 "approval %lld: the modified arguments do not match the approved hash", id);
      } else {
        res->verdict = APPROVAL_MODIFIED;
        res->new_args = j;
      }
    }
  } else if (!strcmp(status, "expired")) {
    snprintf(res->reason, sizeof res->reason, "approval request %lld expired", id);
  } else {
    snprintf(res->reason, sizeof res->reason, "denied by %s%s%s", by && *by ? by : "the approver",
             why && *why ? ": " : "", why && *why ? why : "");
  }
}

int approver_queue_check(struct store *s, long long id, const char *expect_hash, int *decided,
                         struct approval_result *res, struct err *e) {
  sqlite3_stmt *st = NULL;
  *decided = 0;
  res_init(res);
  snprintf(res->by, sizeof res->by, "queue:%lld", id);
  if (store_prepare(s,
                    "SELECT status, decided_by, decision_reason, new_args, approved_hash, "
                    "args_hash FROM approvals WHERE id = ?1",
                    &st, e))
    return ERR_IO;
  sqlite3_bind_int64(st, 1, id);
  int step = sqlite3_step(st);
  if (step != SQLITE_ROW) {
    sqlite3_finalize(st);
    if (step == SQLITE_DONE) {
      approver_row_verdict(id, NULL, expect_hash, decided, res);
      return 0;
    }
    return store_error(s, e, "approvals: read");
  }
  struct approval_row row = {.status = (const char *)sqlite3_column_text(st, 0),
                             .decided_by = (const char *)sqlite3_column_text(st, 1),
                             .decision_reason = (const char *)sqlite3_column_text(st, 2),
                             .new_args = (const char *)sqlite3_column_text(st, 3),
                             .approved_hash = (const char *)sqlite3_column_text(st, 4),
                             .args_hash = (const char *)sqlite3_column_text(st, 5)};
  approver_row_verdict(id, &row, expect_hash, decided, res);
  sqlite3_finalize(st);
  return 0;
}

static int expire(struct store *s, long long id, struct err *e) {
  sqlite3_stmt *st = NULL;
  if (store_prepare(s,
                    "UPDATE approvals SET status = 'expired', decided = ?2, decided_by = 'timeout' "
                    "WHERE id = ?1 AND status = 'pending'",
                    &st, e))
    return ERR_IO;
  sqlite3_bind_int64(st, 1, id);
  sqlite3_bind_double(st, 2, util_now());
  int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : store_error(s, e, "approvals: expire");
  sqlite3_finalize(st);
  return rc;
}

int approver_queue_wait(struct store *s, const struct approval_request *rq, double timeout_s,
                        double deadline_at, volatile int *stop, struct approval_result *res,
                        struct err *e) {
  long long id = 0;
  int rc = approver_queue_submit(s, rq, &id, e);
  if (rc) return rc;
  return approver_queue_await(s, id, rq, timeout_s, deadline_at, stop, res, e);
}

int approver_queue_await(struct store *s, long long id, const struct approval_request *rq,
                         double timeout_s, double deadline_at, volatile int *stop,
                         struct approval_result *res, struct err *e) {
  int rc;
  res_init(res);
  double until = util_monotonic() + (timeout_s > 0 ? timeout_s : 0);
  const char *why = "approval_timeout_s";
  if (deadline_at > 0 && deadline_at - 0.2 < until) {
    until = deadline_at - 0.2; /* answer before the run's own deadline kills it */
    why = "the run's deadline";
  }
  for (;;) {
    int decided = 0;
    if ((rc = approver_queue_check(s, id, rq->args_hash, &decided, res, e))) return rc;
    if (decided) return 0;
    if (stop && *stop) {
      expire(s, id, NULL);
      snprintf(res->reason, sizeof res->reason, "run stopped while approval %lld was pending", id);
      return 0;
    }
    if (util_monotonic() >= until) {
      if ((rc = expire(s, id, e))) return rc;
      /* It may have been decided between the check and the update. */
      if ((rc = approver_queue_check(s, id, rq->args_hash, &decided, res, e))) return rc;
      if (decided && (res->verdict != APPROVAL_DENIED || strstr(res->reason, "expired") == NULL))
        return 0;
      res_init(res);
      snprintf(res->by, sizeof res->by, "queue:%lld", id);
      snprintf(res->reason, sizeof res->reason,
               "approval request %lld timed out (no decision within %s)", id, why);
      return 0;
    }
    util_sleep(0.1);
  }
}

int approver_decision_hash(long long id, int approve, const char *args, const char *rowhash,
                           const cJSON *new_args, char approved[65], struct err *e) {
  /* Bind the decision to the arguments as they are now: re-hash the stored
   * JSON and refuse when it no longer matches the hash the run submitted. */
  approved[0] = 0;
  cJSON *j = args ? json_parse_str(args, 0, NULL) : NULL;
  if (j) json_hash_hex(j, approved);
  cJSON_Delete(j);
  if ((!rowhash || strcmp(approved, rowhash) != 0) && approve)
    return err_set(e, ERR_INVALID, "invalid",
                   "approval %lld: the stored arguments do not match their hash (edited?); "
                   "deny it instead",
                   id);
  if (approve && new_args) json_hash_hex(new_args, approved);
  return 0;
}

int approver_queue_decide(struct store *s, long long id, int approve, const char *reason,
                          const char *by, const cJSON *new_args, struct err *e) {
  sqlite3_stmt *st = NULL;
  int rc = store_begin(s, e);
  if (rc) return rc;
  /* A request whose waiter is gone is expired, not decided: an approval
   * would say yes to a call that never comes. */
  if (store_expire_orphan_approvals(s, e) < 0) {
    rc = ERR_IO;
    goto fail;
  }
  if ((rc = store_prepare(s,
                          "SELECT status, args, args_hash, coalesce(decision_reason, '') "
                          "FROM approvals WHERE id = ?1",
                          &st, e)))
    goto fail;
  sqlite3_bind_int64(st, 1, id);
  int step = sqlite3_step(st);
  if (step != SQLITE_ROW) {
    rc = step == SQLITE_DONE
             ? err_set(e, ERR_NOTFOUND, "not_found", "approval %lld does not exist", id)
             : store_error(s, e, "approvals: read");
    goto fail;
  }
  const char *status = (const char *)sqlite3_column_text(st, 0);
  if (!status || strcmp(status, "pending") != 0) {
    const char *why = (const char *)sqlite3_column_text(st, 3);
    int expired = status && !strcmp(status, "expired") && why && *why;
    rc = err_set(e, ERR_INVALID, "invalid", "approval %lld is already %s%s%s%s", id,
                 status ? status : "decided", expired ? " (" : "", expired ? why : "",
                 expired ? ")" : "");
    goto fail;
  }
  char approved[65];
  if ((rc = approver_decision_hash(id, approve, (const char *)sqlite3_column_text(st, 1),
                                   (const char *)sqlite3_column_text(st, 2), new_args, approved,
                                   e)))
    goto fail;
  sqlite3_finalize(st);
  st = NULL;
  char *newtxt = approve && new_args ? json_print(new_args, 0) : NULL;
  if ((rc = store_prepare(s,
                          "UPDATE approvals SET status = ?2, decided = ?3, decided_by = ?4, "
                          "decision_reason = ?5, new_args = ?6, approved_hash = ?7 WHERE id = ?1",
                          &st, e))) {
    free(newtxt);
    goto fail;
  }
  sqlite3_bind_int64(st, 1, id);
  sqlite3_bind_text(st, 2,
                    !approve   ? "denied"
                    : new_args ? "modified"
                               : "approved",
                    -1, SQLITE_STATIC);
  sqlite3_bind_double(st, 3, util_now());
  sqlite3_bind_text(st, 4, by ? by : "operator", -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 5, reason, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 6, newtxt, -1, SQLITE_STATIC);
  if (approve)
    sqlite3_bind_text(st, 7, approved, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(st, 7);
  step = sqlite3_step(st);
  free(newtxt);
  if (step != SQLITE_DONE) {
    rc = store_error(s, e, "approvals: decide");
    goto fail;
  }
  sqlite3_finalize(st);
  return store_commit(s, e);
fail:
  if (st) sqlite3_finalize(st);
  store_rollback(s);
  return rc;
}

int approver_queue_list(struct store *s, int all, cJSON **out, struct err *e) {
  sqlite3_stmt *st = NULL;
  *out = NULL;
  /* not offered: requests nobody waits on any more */
  if (store_expire_orphan_approvals(s, e) < 0) return ERR_IO;
  if (store_prepare(s,
                    all ? "SELECT id, created, run_id, tool, caller_kind, caller_name, impact, "
                          "reason, args, args_hash, status, decided_by, decision_reason, new_args "
                          "FROM approvals ORDER BY id"
                        : "SELECT id, created, run_id, tool, caller_kind, caller_name, impact, "
                          "reason, args, args_hash, status, decided_by, decision_reason, new_args "
                          "FROM approvals WHERE status = 'pending' ORDER BY id",
                    &st, e))
    return ERR_IO;
  static const char *const names[] = {
      "id",     "created", "run_id",    "tool",   "caller_kind", "caller_name",     "impact",
      "reason", "args",    "args_hash", "status", "decided_by",  "decision_reason", "new_args"};
  cJSON *arr = cJSON_CreateArray();
  int step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < 14; i++) {
      int t = sqlite3_column_type(st, i);
      if (t == SQLITE_NULL) {
        cJSON_AddNullToObject(o, names[i]);
      } else if (t == SQLITE_INTEGER || t == SQLITE_FLOAT) {
        cJSON_AddNumberToObject(o, names[i], sqlite3_column_double(st, i));
      } else if (i == 8 || i == 13) {
        cJSON *j = json_parse_str((const char *)sqlite3_column_text(st, i), 0, NULL);
        if (j)
          cJSON_AddItemToObject(o, names[i], j);
        else
          cJSON_AddStringToObject(o, names[i], (const char *)sqlite3_column_text(st, i));
      } else {
        cJSON_AddStringToObject(o, names[i], (const char *)sqlite3_column_text(st, i));
      }
    }
    cJSON_AddItemToArray(arr, o);
  }
  sqlite3_finalize(st);
  if (step != SQLITE_DONE) {
    cJSON_Delete(arr);
    return store_error(s, e, "approvals: list");
  }
  *out = arr;
  return 0;
}

static const char *row_str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : "";
}

/* --- the store's queue as an approval_queue ------------------------------ */

static int sq_submit(void *ud, const struct approval_request *rq, long long *id, struct err *e) {
  return approver_queue_submit(ud, rq, id, e);
}
static int sq_await(void *ud, long long id, const struct approval_request *rq, double timeout_s,
                    double deadline_at, volatile int *stop, struct approval_result *res,
                    struct err *e) {
  return approver_queue_await(ud, id, rq, timeout_s, deadline_at, stop, res, e);
}
static int sq_decide(void *ud, long long id, int approve, const char *reason, const char *by,
                     const cJSON *new_args, struct err *e) {
  return approver_queue_decide(ud, id, approve, reason, by, new_args, e);
}
static int sq_list(void *ud, int all, cJSON **out, struct err *e) {
  return approver_queue_list(ud, all, out, e);
}
static int sq_get(void *ud, long long id, cJSON **row, struct err *e) {
  cJSON *rows = NULL;
  *row = NULL;
  if (approver_queue_list(ud, 1, &rows, e)) return ERR_IO;
  const cJSON *r;
  cJSON_ArrayForEach(r, rows) {
    if ((long long)cJSON_GetObjectItem(r, "id")->valuedouble == id) {
      *row = cJSON_Duplicate(r, 1);
      break;
    }
  }
  cJSON_Delete(rows);
  return *row ? 0 : err_set(e, ERR_NOTFOUND, "not_found", "approval %lld does not exist", id);
}

static const struct approval_queue_ops sqlite_queue_ops = {
    .submit = sq_submit, .await = sq_await, .decide = sq_decide, .list = sq_list, .get = sq_get};

struct approval_queue approver_sqlite_queue(struct store *s) {
  return (struct approval_queue){.ops = &sqlite_queue_ops, .ud = s};
}

int approver_decide_audited(struct store *s, const struct approver_decision *d, char *warning,
                            size_t warning_n, struct err *e) {
  struct approval_queue q = approver_sqlite_queue(s);
  struct audit_sink sink = audit_sqlite_sink(s);
  return approver_decide_audited_in(&q, &sink, d, warning, warning_n, e);
}

int approver_decide_audited_in(const struct approval_queue *q, const struct audit_sink *sink,
                               const struct approver_decision *d, char *warning,
                               size_t warning_n, struct err *e) {
  if (warning && warning_n) warning[0] = 0;
  int rc = q->ops->decide(q->ud, d->id, d->approve, d->reason, d->by, d->new_args, e);
  if (rc) return rc;
  /* The chain row names the request's tool, run and the hash of the
   * arguments decided on (the modified ones when modified). */
  char detail[700], hash[65] = "", tool[160] = "", run[64] = "";
  cJSON *r = NULL;
  struct err le = {0};
  if (!q->ops->get(q->ud, d->id, &r, &le)) {
    snprintf(tool, sizeof tool, "%s", row_str(r, "tool"));
    snprintf(run, sizeof run, "%s", row_str(r, "run_id"));
    snprintf(hash, sizeof hash, "%s", row_str(r, "args_hash"));
    cJSON_Delete(r);
  }
  if (d->new_args) json_hash_hex(d->new_args, hash);
  snprintf(detail, sizeof detail, "approval %lld %s%s%s", d->id,
           d->approve ? (d->new_args ? "approved with modified arguments" : "approved")
                      : "denied",
           d->reason ? ": " : "", d->reason ? d->reason : "");
  struct audit_entry a = {.run_id = run[0] ? run : NULL,
                          .tool = tool[0] ? tool : NULL,
                          .caller_kind = d->caller_kind,
                          .caller_name = d->caller_name,
                          .decision = d->approve ? "approval_granted" : "approval_denied",
                          .decided_by = d->decided_by,
                          .approver = d->by,
                          .args_hash = hash[0] ? hash : NULL,
                          .duration_ms = -1,
                          .detail = detail};
  struct audit_opts ao = {.sign = d->sign};
  if (sink->ops->append_batch(sink->ud, &ao, &a, 1, NULL, &le) && warning && warning_n)
    snprintf(warning, warning_n, "decision stored but not audited: %s", le.msg);
  return 0;
}
