/* cluster_approvals.c - the handle (cluster_policy) and the approval queue
 * in PostgreSQL (see cluster_queue.h). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster_queue_impl.h"
#include "config.h"
#include "json.h"
#include "util.h"

/* ================================================================ handle */

int cluster_policy_new(const struct cluster_opts *o, const char *ws, struct cluster_policy **out,
                       struct err *e) {
  *out = NULL;
  struct cluster_policy *cp = xcalloc(1, sizeof *cp);
  cp->o = *o;
  cp->o.url = xstrdup(o->url ? o->url : "");
  snprintf(cp->ws, sizeof cp->ws, "%s", ws ? ws : ".");
  snprintf(cp->where, sizeof cp->where, "the cluster database");
  pthread_mutex_init(&cp->audit_mu, NULL);
  pthread_mutex_init(&cp->queue_mu, NULL);
  (void)e;
  *out = cp;
  return 0;
}

void cluster_policy_free(struct cluster_policy *cp) {
  if (!cp) return;
  pg_close(cp->audit_pg);
  pg_close(cp->queue_pg);
  store_close(cp->store);
  cluster_opts_free(&cp->o);
  free(cp->public_key);
  pthread_mutex_destroy(&cp->audit_mu);
  pthread_mutex_destroy(&cp->queue_mu);
  free(cp);
}

int cluster_policy_for(const char *ws, const struct config *cfg, struct cluster_policy **out,
                       struct err *e) {
  struct cluster_opts o;
  int on = 0;
  *out = NULL;
  if (cluster_opts_load(ws, cfg, &o, &on, e)) return ERR_INVALID;
  if (!on) return 0;
  int rc = cluster_policy_new(&o, ws, out, e);
  cluster_opts_free(&o);
  if (!rc) {
    const char *pk = config_string(cfg, "audit.public_key", NULL);
    (*out)->sign = config_bool(cfg, "audit.sign", 0);
    (*out)->public_key = pk ? xstrdup(pk) : NULL;
  }
  return rc;
}

int cluster_policy_open(const char *ws, const struct config *cfg, struct store **st,
                        struct cluster_policy **cp, struct approval_queue *q,
                        struct audit_sink *sink, struct err *e) {
  *st = NULL;
  *cp = NULL;
  if (cluster_policy_for(ws, cfg, cp, e)) return ERR_INVALID;
  if (!*cp && store_open(ws, st, e)) return ERR_IO;
  *q = *cp ? cluster_policy_queue(*cp) : approver_sqlite_queue(*st);
  *sink = *cp ? cluster_policy_sink(*cp) : audit_sqlite_sink(*st);
  return 0;
}

const char *cluster_policy_where(struct cluster_policy *cp) {
  return cp->where;
}

int cluster__conn(struct cluster_policy *cp, struct pg **slot, struct err *e) {
  if (*slot) return 0; /* pg.c notices a connection the server closed */
  if (cluster_open(&cp->o, slot, e)) return ERR_IO;
  snprintf(cp->where, sizeof cp->where, "cluster database %s", pg_where(*slot));
  return 0;
}

int cluster__store(struct cluster_policy *cp, struct store **out, struct err *e) {
  if (!cp->store && store_open(cp->ws, &cp->store, e)) return ERR_IO;
  *out = cp->store;
  return 0;
}

void cluster__anchor_path(const struct cluster_policy *cp, char *out, size_t n) {
  snprintf(out, n, "%s/.luagent/" CLUSTER_ANCHOR_FILE, cp->ws);
}

/* ================================================================ queue */

static const char *nz(const char *s) {
  return s ? s : "";
}

/* A text column or NULL. */
static const char *col(const PGresult *r, int row, int c) {
  return PQgetisnull(r, row, c) ? NULL : PQgetvalue(r, row, c);
}

/* What a signed approval says: which request (id, the run and the node
 * that asked), the verdict and the hashes it binds (see cluster_queue.h). */
static void decision_message(long long id, const char *run_id, const char *node, const char *status,
                             const char *args_hash, const char *approved, struct sbuf *out) {
  sbuf_printf(out, "luagent-approval:v1:%lld:%zu:%s:%zu:%s:%s:%s:%s", id, strlen(nz(run_id)),
              nz(run_id), strlen(nz(node)), nz(node), nz(status), nz(args_hash), nz(approved));
}

static struct audit_opts sign_opts(const struct cluster_policy *cp) {
  return (struct audit_opts){.sign = cp->sign, .public_key = cp->public_key};
}

/* With out: signs msg with the audit key into out; else checks sig
 * against it (1 valid, 0 not, <0 no key to check with: e says why). The
 * store the key lives beside is the chain's too, hence audit_mu. */
static int decision_sig(struct cluster_policy *cp, const struct sbuf *msg, const char *sig,
                        char out[129], struct err *e) {
  struct store *st = NULL;
  struct audit_opts ao = sign_opts(cp);
  pthread_mutex_lock(&cp->audit_mu);
  int rc = cluster__store(cp, &st, e);
  if (rc)
    rc = out ? rc : -1;
  else if (out)
    rc = audit_msg_sign(st, &ao, msg->s, out, e);
  else
    rc = audit_msg_sig_check(st, &ao, msg->s, sig, e);
  pthread_mutex_unlock(&cp->audit_mu);
  return rc;
}

static int q_submit(void *ud, const struct approval_request *rq, long long *id, struct err *e) {
  struct cluster_policy *cp = ud;
  char *args = json_print(rq->args, 0);
  const char *params[] = {cp->o.node,          rq->run_id,           rq->tool,
                          nz(rq->caller_kind), rq->caller_name,      rq->impact,
                          rq->reason,          args ? args : "null", rq->args_hash};
  PGresult *r = NULL;
  pthread_mutex_lock(&cp->queue_mu);
  int rc = cluster__conn(cp, &cp->queue_pg, e);
  if (!rc)
    rc = pg_query(cp->queue_pg,
                  "INSERT INTO luagent_approvals (created, node, run_id, tool, caller_kind,"
                  " caller_name, impact, reason, args, args_hash)"
                  " VALUES (extract(epoch from clock_timestamp()), $1, $2, $3, $4, $5, $6, $7,"
                  " $8, $9) RETURNING id",
                  9, params, &r, e);
  pthread_mutex_unlock(&cp->queue_mu);
  free(args);
  if (rc) return ERR_IO;
  *id = (long long)pg_number(r, 0, 0, 0);
  PQclear(r);
  return 0;
}

/* One look at row id (queue_mu held): LISTEN first, so a decision made
 * after this read is announced to this connection. With signing on, an
 * approval counts only with a valid decision_sig. */
static int q_check(struct cluster_policy *cp, long long id, const struct approval_request *rq,
                   int *decided, struct approval_result *res, struct err *e) {
  const char *expect_hash = rq->args_hash;
  char ids[32];
  snprintf(ids, sizeof ids, "%lld", id);
  const char *params[] = {ids};
  PGresult *r = NULL;
  if (cluster__conn(cp, &cp->queue_pg, e) ||
      pg_exec(cp->queue_pg, "LISTEN " CLUSTER_APPROVAL_CHANNEL, e) ||
      pg_query(cp->queue_pg,
               "SELECT status, decided_by, decision_reason, new_args, approved_hash, args_hash,"
               " decision_sig FROM luagent_approvals WHERE id = $1::bigint",
               1, params, &r, e))
    return ERR_IO;
  if (PQntuples(r) == 0) {
    approver_row_verdict(id, NULL, expect_hash, decided, res);
  } else {
    struct approval_row row = {.status = col(r, 0, 0),
                               .decided_by = col(r, 0, 1),
                               .decision_reason = col(r, 0, 2),
                               .new_args = col(r, 0, 3),
                               .approved_hash = col(r, 0, 4),
                               .args_hash = col(r, 0, 5)};
    approver_row_verdict(id, &row, expect_hash, decided, res);
    if (cp->sign && *decided && res->verdict != APPROVAL_DENIED) {
      struct sbuf m = {0};
      struct err ke = {0};
      decision_message(id, rq->run_id, cp->o.node, row.status, expect_hash, row.approved_hash, &m);
      int ok = decision_sig(cp, &m, nz(col(r, 0, 6)), NULL, &ke);
      sbuf_free(&m);
      if (ok != 1) {
        cJSON_Delete(res->new_args);
        res->new_args = NULL;
        res->verdict = APPROVAL_DENIED;
        if (ok < 0)
          snprintf(res->reason, sizeof res->reason,
                   "approval %lld: its signature cannot be checked on this host: %.300s", id,
                   ke.msg);
        else
          snprintf(res->reason, sizeof res->reason,
                   "approval %lld is not signed with the workspace's audit key (audit.sign is "
                   "on): it was %s outside luagent, or on a host with another .luagent/audit.key",
                   id, col(r, 0, 6) ? "changed" : "decided");
      }
    }
  }
  PQclear(r);
  return 0;
}

static int q_expire(struct cluster_policy *cp, long long id, struct err *e) {
  char ids[32];
  snprintf(ids, sizeof ids, "%lld", id);
  const char *params[] = {ids};
  if (cluster__conn(cp, &cp->queue_pg, e)) return ERR_IO;
  return pg_query(cp->queue_pg,
                  "UPDATE luagent_approvals SET status = 'expired',"
                  " decided = extract(epoch from clock_timestamp()), decided_by = 'timeout'"
                  " WHERE id = $1::bigint AND status = 'pending'",
                  1, params, NULL, e);
}

/* Reads what arrived on the connection; 1 when a notification names id,
 * -1 when the connection is gone (the next check reopens it). */
static int q_notified(struct cluster_policy *cp, long long id) {
  PGconn *c = cp->queue_pg ? pg_conn(cp->queue_pg) : NULL;
  if (!c) return -1;
  if (!PQconsumeInput(c)) return -1;
  int hit = 0;
  PGnotify *n;
  while ((n = PQnotifies(c))) {
    if (!strcmp(n->relname, CLUSTER_APPROVAL_CHANNEL) && n->extra &&
        strtoll(n->extra, NULL, 10) == id)
      hit = 1;
    PQfreemem(n);
  }
  return hit;
}

static double recheck_interval(void) {
  const char *v = getenv("LUAGENT_TEST_APPROVAL_RECHECK_S");
  double d = v && *v ? strtod(v, NULL) : 0;
  return d > 0 ? d : CLUSTER_APPROVAL_RECHECK_S;
}

static int q_await(void *ud, long long id, const struct approval_request *rq, double timeout_s,
                   double deadline_at, volatile int *stop, struct approval_result *res,
                   struct err *e) {
  struct cluster_policy *cp = ud;
  double until = util_monotonic() + (timeout_s > 0 ? timeout_s : 0);
  const char *why = "approval_timeout_s";
  if (deadline_at > 0 && deadline_at - 0.2 < until) {
    until = deadline_at - 0.2; /* answer before the run's own deadline kills it */
    why = "the run's deadline";
  }
  const double recheck = recheck_interval();
  double next_check = 0;
  int woken = 1, rc = 0, decided = 0;
  struct err lost = {0}; /* the last database error while waiting */
  pthread_mutex_lock(&cp->queue_mu);
  for (;;) {
    double now = util_monotonic();
    if (woken || now >= next_check) {
      struct err ce = {0};
      woken = 0;
      if (!q_check(cp, id, rq, &decided, res, &ce)) {
        if (decided) goto out;
        err_clear(&lost);
        next_check = now + recheck;
        /* A notification read along with the answer may be newer than the
         * row just read: look again at once. */
        if (q_notified(cp, id) > 0) woken = 1;
      } else {
        lost = ce;
        next_check = now + 1.0; /* the database went away: try again each second */
      }
    }
    if (stop && *stop) {
      q_expire(cp, id, NULL);
      memset(res, 0, sizeof *res);
      res->verdict = APPROVAL_DENIED;
      snprintf(res->by, sizeof res->by, "queue:%lld", id);
      snprintf(res->reason, sizeof res->reason, "run stopped while approval %lld was pending", id);
      goto out;
    }
    if (util_monotonic() >= until) {
      if (lost.rc && (rc = q_expire(cp, id, e))) {
        /* Still unreachable: the call is denied with why. */
        err_prefix(e, "approval %lld: no decision could be read", id);
        goto out;
      }
      if (!lost.rc && (rc = q_expire(cp, id, e))) goto out;
      /* It may have been decided between the check and the update. */
      if ((rc = q_check(cp, id, rq, &decided, res, e))) goto out;
      if (decided && (res->verdict != APPROVAL_DENIED || strstr(res->reason, "expired") == NULL))
        goto out;
      memset(res, 0, sizeof *res);
      res->verdict = APPROVAL_DENIED;
      snprintf(res->by, sizeof res->by, "queue:%lld", id);
      snprintf(res->reason, sizeof res->reason,
               "approval request %lld timed out (no decision within %s)", id, why);
      goto out;
    }
    if (woken) continue;
    /* Sleep on the socket: a NOTIFY wakes us; 100 ms slices keep the
     * stop flag and the deadline prompt. */
    double wait = next_check - util_monotonic();
    if (until - util_monotonic() < wait) wait = until - util_monotonic();
    if (wait > 0.1) wait = 0.1;
    if (wait < 0) wait = 0;
    PGconn *c = cp->queue_pg && !lost.rc ? pg_conn(cp->queue_pg) : NULL;
    int fd = c ? PQsocket(c) : -1;
    if (fd < 0) {
      util_sleep(wait);
      continue;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int pr = poll(&pfd, 1, (int)(wait * 1000) + 1);
    if (pr > 0) {
      int hit = q_notified(cp, id);
      if (hit > 0) woken = 1;
      if (hit < 0) next_check = 0; /* broken: the check reopens it */
    } else if (pr < 0 && errno != EINTR) {
      util_sleep(wait);
    }
  }
out:
  pthread_mutex_unlock(&cp->queue_mu);
  return rc;
}

static int q_decide(void *ud, long long id, int approve, const char *reason, const char *by,
                    const cJSON *new_args, struct err *e) {
  struct cluster_policy *cp = ud;
  char ids[32];
  snprintf(ids, sizeof ids, "%lld", id);
  const char *p1[] = {ids};
  PGresult *r = NULL;
  char *newtxt = NULL;
  int rc;
  pthread_mutex_lock(&cp->queue_mu);
  if ((rc = cluster__conn(cp, &cp->queue_pg, e))) goto out;
  struct pg *p = cp->queue_pg;
  if ((rc = pg_begin(p, e))) goto out;
  /* The row lock: two hosts deciding at once, one wins, the other is told
   * it is already decided. */
  if ((rc = pg_query(p,
                     "SELECT status, args, args_hash, run_id, node FROM luagent_approvals"
                     " WHERE id = $1::bigint FOR UPDATE",
                     1, p1, &r, e)))
    goto fail;
  if (PQntuples(r) == 0) {
    rc = err_set(e, ERR_NOTFOUND, "not_found", "approval %lld does not exist", id);
    goto fail;
  }
  const char *status = col(r, 0, 0);
  if (!status || strcmp(status, "pending") != 0) {
    rc = err_set(e, ERR_INVALID, "invalid", "approval %lld is already %s", id,
                 status ? status : "decided");
    goto fail;
  }
  char approved[65];
  if ((rc = approver_decision_hash(id, approve, col(r, 0, 1), col(r, 0, 2), new_args, approved, e)))
    goto fail;
  const char *verdict = !approve ? "denied" : new_args ? "modified" : "approved";
  char sig[129] = "";
  if (approve && cp->sign) {
    struct sbuf m = {0};
    decision_message(id, col(r, 0, 3), col(r, 0, 4), verdict, col(r, 0, 2), approved, &m);
    rc = decision_sig(cp, &m, NULL, sig, e);
    sbuf_free(&m);
    if (rc) {
      err_prefix(e, "approval %lld: cannot sign the decision", id);
      goto fail;
    }
  }
  PQclear(r);
  r = NULL;
  newtxt = approve && new_args ? json_print(new_args, 0) : NULL;
  const char *p2[] = {ids,
                      verdict,
                      by ? by : "operator",
                      reason,
                      newtxt,
                      approve ? approved : NULL,
                      sig[0] ? sig : NULL};
  if ((rc = pg_query(p,
                     "UPDATE luagent_approvals SET status = $2,"
                     " decided = extract(epoch from clock_timestamp()), decided_by = $3,"
                     " decision_reason = $4, new_args = $5, approved_hash = $6, decision_sig = $7"
                     " WHERE id = $1::bigint",
                     7, p2, NULL, e)))
    goto fail;
  /* Delivered when the transaction commits, to every host's waiting run. */
  if ((rc = pg_query(p, "SELECT pg_notify('" CLUSTER_APPROVAL_CHANNEL "', $1)", 1, p1, NULL, e)))
    goto fail;
  rc = pg_commit(p, e);
  if (rc) pg_rollback(p);
  goto out;
fail:
  PQclear(r);
  pg_rollback(p);
out:
  free(newtxt);
  pthread_mutex_unlock(&cp->queue_mu);
  return rc;
}

/* The columns of a listed row, as approver_queue_list names them, then
 * the node that asked. */
static const char *const list_names[] = {
    "id",          "created",    "run_id",          "tool",     "caller_kind",
    "caller_name", "impact",     "reason",          "args",     "args_hash",
    "status",      "decided_by", "decision_reason", "new_args", "node"};
#define LIST_COLS                                                                         \
  "id, created, run_id, tool, caller_kind, caller_name, impact, reason, args, args_hash," \
  " status, decided_by, decision_reason, new_args, node"

static cJSON *row_json(const PGresult *r, int i) {
  cJSON *o = cJSON_CreateObject();
  for (int c = 0; c < 15; c++) {
    const char *v = col(r, i, c);
    if (!v)
      cJSON_AddNullToObject(o, list_names[c]);
    else if (c <= 1)
      cJSON_AddNumberToObject(o, list_names[c], strtod(v, NULL));
    else if (c == 8 || c == 13) {
      cJSON *j = json_parse_str(v, 0, NULL);
      if (j)
        cJSON_AddItemToObject(o, list_names[c], j);
      else
        cJSON_AddStringToObject(o, list_names[c], v);
    } else {
      cJSON_AddStringToObject(o, list_names[c], v);
    }
  }
  return o;
}

static int q_select(struct cluster_policy *cp, const char *sql, int n, const char *const *params,
                    PGresult **r, struct err *e) {
  pthread_mutex_lock(&cp->queue_mu);
  int rc = cluster__conn(cp, &cp->queue_pg, e);
  if (!rc) rc = pg_query(cp->queue_pg, sql, n, params, r, e);
  pthread_mutex_unlock(&cp->queue_mu);
  return rc;
}

static int q_list(void *ud, int all, cJSON **out, struct err *e) {
  PGresult *r = NULL;
  *out = NULL;
  if (q_select(ud,
               all ? "SELECT " LIST_COLS " FROM luagent_approvals ORDER BY id"
                   : "SELECT " LIST_COLS " FROM luagent_approvals WHERE status = 'pending'"
                     " ORDER BY id",
               0, NULL, &r, e))
    return ERR_IO;
  cJSON *arr = cJSON_CreateArray();
  for (int i = 0; i < PQntuples(r); i++) cJSON_AddItemToArray(arr, row_json(r, i));
  PQclear(r);
  *out = arr;
  return 0;
}

static int q_get(void *ud, long long id, cJSON **row, struct err *e) {
  char ids[32];
  snprintf(ids, sizeof ids, "%lld", id);
  const char *params[] = {ids};
  PGresult *r = NULL;
  *row = NULL;
  if (q_select(ud, "SELECT " LIST_COLS " FROM luagent_approvals WHERE id = $1::bigint", 1, params,
               &r, e))
    return ERR_IO;
  if (PQntuples(r) > 0) *row = row_json(r, 0);
  PQclear(r);
  return *row ? 0 : err_set(e, ERR_NOTFOUND, "not_found", "approval %lld does not exist", id);
}

static const struct approval_queue_ops queue_ops = {
    .submit = q_submit, .await = q_await, .decide = q_decide, .list = q_list, .get = q_get};

struct approval_queue cluster_policy_queue(struct cluster_policy *cp) {
  return (struct approval_queue){.ops = &queue_ops, .ud = cp};
}

/* ================================================================ import */

int cluster_import_approvals(struct pg *p, struct store *st, long long *n, struct err *e) {
  cJSON *rows = NULL;
  *n = 0;
  if (approver_queue_list(st, 0, &rows, e)) return ERR_IO;
  /* Where a row came from, so a second import finds it: the SQLite file
   * and the row's id there. */
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  int rc = pg_begin(p, e);
  if (!rc) rc = pg_exec(p, "SET LOCAL idle_in_transaction_session_timeout = 0", e);
  const cJSON *o;
  cJSON_ArrayForEach(o, rows) {
    if (rc) break;
    char src[4400], created[64];
    const cJSON *id = cJSON_GetObjectItem(o, "id"), *cr = cJSON_GetObjectItem(o, "created");
    snprintf(src, sizeof src, "sqlite:%s:%s#%.0f", host, store_path(st),
             cJSON_IsNumber(id) ? id->valuedouble : 0);
    snprintf(created, sizeof created, "%.17g", cJSON_IsNumber(cr) ? cr->valuedouble : 0);
    const cJSON *a = cJSON_GetObjectItem(o, "args");
    char *args = cJSON_IsString(a) ? xstrdup(a->valuestring) : json_print(a, 0);
#define S(k) \
  (cJSON_IsString(cJSON_GetObjectItem(o, k)) ? cJSON_GetObjectItem(o, k)->valuestring : NULL)
    const char *params[] = {created,          S("run_id"), S("tool"),   nz(S("caller_kind")),
                            S("caller_name"), S("impact"), S("reason"), args ? args : "null",
                            S("args_hash"),   src};
#undef S
    PGresult *r = NULL;
    rc = pg_query(p,
                  "INSERT INTO luagent_approvals (created, run_id, tool, caller_kind, caller_name,"
                  " impact, reason, args, args_hash, source)"
                  " VALUES ($1::float8, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
                  " ON CONFLICT (source) DO NOTHING RETURNING id",
                  10, params, &r, e);
    free(args);
    if (!rc) *n += PQntuples(r);
    PQclear(r);
  }
  cJSON_Delete(rows);
  if (!rc) rc = pg_commit(p, e);
  if (rc) {
    pg_rollback(p);
    *n = 0;
    err_prefix(e, "import approvals");
  }
  return rc;
}
