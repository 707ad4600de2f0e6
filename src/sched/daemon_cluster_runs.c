/* daemon_cluster_runs.c - a cluster run after its claim: ctx.state, the
 * run's end in the journal (and a queued automation's next run handed on
 * with it), leases and their renewal, runs whose lease expired (marked
 * interrupted, taken over when on_lost = "rerun"), queued runs left
 * waiting, the fenced runs after an outage, and retention (see
 * daemon_impl.h; claims are daemon_cluster_claim.c's).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "automation.h"
#include "cluster.h"
#include "daemon_cluster_impl.h"
#include "daemon_impl.h"
#include "json.h"
#include "util.h"

/* ---------------------------------------------------------------- runs */

int daemon__cl_load_state(struct daemon *d, struct run *r, cJSON *ctx, int *tainted) {
  struct err e = {0};
  PGresult *res;
  const char *p[] = {r->ent->name};
  if (pg_query(daemon__cl_pg(d),
               "SELECT state, tainted, last_run, last_status FROM luagent_state"
               " WHERE automation = $1",
               1, p, &res, &e)) {
    daemon__cl_failed(d, &e);
    return ERR_IO;
  }
  cJSON *state = NULL;
  if (PQntuples(res)) {
    state = json_parse_str(pg_text(res, 0, 0), 0, NULL);
    if (!strcmp(pg_text(res, 0, 1), "t")) *tainted = 1;
    if (*pg_text(res, 0, 2)) {
      cJSON *lr = cJSON_CreateObject();
      cJSON_AddNumberToObject(lr, "time", floor(pg_number(res, 0, 2, 0)));
      cJSON_AddStringToObject(lr, "status", pg_text(res, 0, 3));
      cJSON_AddItemToObject(ctx, "last_run", lr);
    }
  }
  PQclear(res);
  if (!cJSON_IsObject(state) && !cJSON_IsArray(state)) {
    cJSON_Delete(state);
    state = cJSON_CreateObject();
  }
  cJSON_AddItemToObject(ctx, "state", state);
  return 0;
}

/* Inside a transaction holding ent's schedule lock: when no run of ent is
 * running, the oldest queued one becomes this host's. */
static int promote_in_tx(struct daemon *d, struct entry *ent, struct claims *c, struct err *e) {
  struct pg *pg = daemon__cl_pg(d);
  char lease[32];
  fmt_num(lease, sizeof lease, daemon__cl_lease(d));
  const char *p[] = {ent->name, daemon__cl_node(d), lease, ent->hash};
  PGresult *r;
  if (pg_query(pg,
               "UPDATE luagent_runs SET status = 'running', node = $2, started = " NOW
               ", lease_until = " NOW " + $3::float8, file_hash = $4 WHERE id = (SELECT id FROM"
               " luagent_runs q WHERE q.automation = $1 AND q.status = 'queued' AND NOT EXISTS"
               " (SELECT 1 FROM luagent_runs x WHERE x.automation = $1 AND x.status = 'running')"
               " ORDER BY q.queued, q.id LIMIT 1 FOR UPDATE SKIP LOCKED)"
               " RETURNING id, trigger, args, attempt",
               4, p, &r, e))
    return ERR_IO;
  if (PQntuples(r) && c->n < MAX_WON) {
    struct won *w = &c->w[c->n++];
    w->ent = ent;
    snprintf(w->id, sizeof w->id, "%s", pg_text(r, 0, 0));
    w->trigger = json_parse_str(pg_text(r, 0, 1), 0, NULL);
    if (!w->trigger) w->trigger = daemon__make_trigger(ent, "every", 0);
    w->args = *pg_text(r, 0, 2) ? json_parse_str(pg_text(r, 0, 2), 0, NULL) : NULL;
    w->attempt = (int)pg_number(r, 0, 3, 1);
    daemon__say(d, "%s: queued run %s starts here", ent->name, w->id);
  }
  PQclear(r);
  return 0;
}

void daemon__cl_finish(struct daemon *d, struct run *r, const char *status, const char *result,
                       const char *error, const char *state, int tainted, int tool_calls) {
  struct pg *pg = daemon__cl_pg(d);
  struct err e = {0};
  if (r->w) {
    daemon__cl_unguard(d, r->w->pid);
    if (daemon__cl_was_fenced(d, r->w->pid)) {
      r->fenced = 1;
      r->w->killed = 1; /* dying of the fence's SIGKILL: never given another run */
      daemon__close_worker_fd(r->w);
    }
  }
  if (r->lost) return; /* another host or a restart ended it there */
  if (r->fenced) {
    status = "interrupted";
    result = NULL;
    state = NULL;
    error =
        "this host lost the cluster database; its worker was killed before the run's lease "
        "could expire";
  }
  if (!daemon__cl_up(d)) {
    daemon__complain(
        "%s: run %s ended %s while the cluster database is unreachable; recorded "
        "as interrupted when it is back",
        r->ent->name, r->id, status);
    return;
  }
  char tc[16];
  snprintf(tc, sizeof tc, "%d", tool_calls);
  char *ev = r->events || r->events_cut ? json_print(r->events ? r->events : cJSON_CreateArray(), 0)
                                        : NULL;
  if (r->events_cut && ev) { /* say what was not kept, as the local journal does */
    cJSON *arr = json_parse_str(ev, 0, NULL);
    cJSON *n = cJSON_CreateObject(), *dd = cJSON_AddObjectToObject(n, "data");
    cJSON_AddStringToObject(n, "type", "note");
    cJSON_AddNumberToObject(n, "ts", util_now());
    cJSON_AddStringToObject(
        dd, "text", "the worker sent more than the journal keeps per run; the rest was not kept");
    cJSON_AddTrueToObject(dd, "truncated");
    cJSON_AddItemToArray(arr, n);
    free(ev);
    ev = json_print(arr, 0);
    cJSON_Delete(arr);
  }
  int ok = !strcmp(status, "ok");
  const char *st = ok ? state : NULL; /* finish_run made "[]" "{}" */
  struct claims c = {.n = 0};
  const char *p[] = {r->id, daemon__cl_node(d), status, result, error, ev, tc, r->ent->name,
                     st,    tainted ? "t" : "f"};
  PGresult *res;
  int queued = r->ent->a && r->ent->a->mode == MODE_QUEUED;
  /* One statement: the finish, conditional on this host still owning the
   * run, and ctx.state with it (only then: the INSERT takes its row from
   * the UPDATE). A queued automation's next run is handed on in the same
   * transaction, under the schedule's lock. */
  int rc = queued ? pg_begin(pg, &e) : 0;
  if (!rc && queued) rc = daemon__cl_lock_schedule(d, r->ent->name, &e);
  if (!rc)
    rc = pg_query(pg,
                  "WITH u AS (UPDATE luagent_runs SET status = $3, finished = " NOW
                  ","
                  " result = $4, error = $5, events = $6, tool_calls = $7::int,"
                  " lease_until = NULL WHERE id = $1 AND node = $2 AND status = 'running'"
                  " RETURNING started)"
                  " INSERT INTO luagent_state AS s (automation, state, updated, run_id, tainted,"
                  " last_run, last_status) SELECT $8, coalesce($9::text, '{}'), " NOW
                  ", $1,"
                  " $10::boolean, u.started, $3 FROM u ON CONFLICT (automation) DO UPDATE SET"
                  " state = coalesce($9::text, s.state),"
                  " tainted = CASE WHEN $9::text IS NULL THEN s.tainted ELSE $10::boolean END,"
                  " run_id = CASE WHEN $9::text IS NULL THEN s.run_id ELSE $1 END,"
                  " updated = excluded.updated, last_run = excluded.last_run, last_status = $3"
                  " RETURNING 1",
                  10, p, &res, &e);
  if (!rc) {
    int owned = PQntuples(res);
    PQclear(res);
    if (!owned) {
      pg_rollback(pg);
      daemon__say(d,
                  "%s: run %s ended %s here, but it was no longer this host's (its lease "
                  "expired or a restart ended it); not recorded",
                  r->ent->name, r->id, status);
      goto out;
    }
  }
  if (!rc && queued) rc = promote_in_tx(d, r->ent, &c, &e);
  if (rc) {
    pg_rollback(pg);
    daemon__cl_drop_won(&c);
    daemon__cl_failed(d, &e);
    goto out;
  }
  if (queued) daemon__cl_commit_or_fail(d, &c, &e);
out:
  free(ev);
}

/* Renews the lease of every run this host holds; a run the database no
 * longer gives this host is stopped here without a word to the journal. */
void daemon__cl_renew(struct daemon *d) {
  struct sbuf ids = {0};
  int n = 0;
  sbuf_puts(&ids, "{");
  for (struct run *r = d->runs; r; r = r->next)
    if (r->cl && !r->finished && !r->lost) sbuf_printf(&ids, "%s%s", n++ ? "," : "", r->id);
  sbuf_puts(&ids, "}");
  if (!n) {
    sbuf_free(&ids);
    return;
  }
  char lease[32];
  fmt_num(lease, sizeof lease, daemon__cl_lease(d));
  const char *p[] = {daemon__cl_node(d), ids.s, lease};
  PGresult *res;
  struct err e = {0};
  int rc = pg_query(daemon__cl_pg(d),
                    "UPDATE luagent_runs SET lease_until = " NOW
                    " + $3::float8 WHERE node = $1"
                    " AND status = 'running' AND id = ANY($2::text[]) RETURNING id",
                    3, p, &res, &e);
  sbuf_free(&ids);
  if (rc) return daemon__cl_failed(d, &e);
  int kept = PQntuples(res);
  for (struct run *r = d->runs, *nx; r; r = nx) {
    nx = r->next;
    if (!r->cl || r->finished || r->lost) continue;
    int found = 0;
    for (int i = 0; i < PQntuples(res) && !found; i++) found = !strcmp(pg_text(res, i, 0), r->id);
    if (found) continue;
    r->lost = 1;
    daemon__say(d, "%s: run %s is no longer this host's (ended elsewhere); stopping it",
                r->ent->name, r->id);
    if (r->w) {
      daemon__kill_run(d, r, "interrupted", "ended elsewhere");
    } else {
      r->ent->pending--;
      daemon__unlink_run(d, r);
      daemon__free_run(r);
    }
  }
  PQclear(res);
  (void)kept;
}

/* Runs whose lease expired (their host died or lost the database): marked
 * interrupted, and run again here when the automation says on_lost =
 * "rerun" and this host has it. */
void daemon__cl_sweep(struct daemon *d) {
  struct pg *pg = daemon__cl_pg(d);
  struct err e = {0};
  struct claims c = {.n = 0};
  PGresult *r = NULL;
  /* A run to be rerun is left a while to the hosts that have its
   * automation: marking it here, where it cannot run again (deleted or
   * renamed on this host, not copied yet, disabled), would lose the rerun
   * for good. After three lease periods any host marks it, so a run no
   * host can take over is still recorded. */
  struct sbuf mine = {0};
  int nmine = 0;
  sbuf_puts(&mine, "{");
  for (struct entry *ent = d->entries; ent; ent = ent->next)
    if (ent->a && !ent->deleted && ent->enabled && !d->stopping) {
      sbuf_puts(&mine, nmine++ ? ",\"" : "\"");
      for (const char *q = ent->name; *q; q++) {
        if (*q == '"' || *q == '\\') sbuf_append(&mine, "\\", 1);
        sbuf_append(&mine, q, 1);
      }
      sbuf_puts(&mine, "\"");
    }
  sbuf_puts(&mine, "}");
  char grace[32];
  fmt_num(grace, sizeof grace, 3 * daemon__cl_lease(d));
  const char *sp[] = {mine.s, grace};
  int qrc = pg_begin(pg, &e) ||
            pg_query(pg,
                     "SELECT id, automation, slot, trigger, args, attempt, rerun, node FROM"
                     " luagent_runs WHERE status = 'running' AND lease_until < " NOW
                     " AND (NOT rerun OR automation = ANY($1::text[]) OR lease_until < " NOW
                     " - $2::float8) ORDER BY lease_until LIMIT 50 FOR UPDATE SKIP LOCKED",
                     2, sp, &r, &e);
  sbuf_free(&mine);
  if (qrc) goto fail;
  int n = PQntuples(r);
  for (int i = 0; i < n; i++) {
    const char *id = pg_text(r, i, 0), *name = pg_text(r, i, 1), *node = pg_text(r, i, 7);
    int attempt = (int)pg_number(r, i, 5, 1);
    char msg[300];
    snprintf(msg, sizeof msg,
             "node %s stopped renewing the lease (it died or lost the cluster database); "
             "marked interrupted by node %s",
             node, daemon__cl_node(d));
    const char *p[] = {id, msg};
    if (pg_query(pg,
                 "UPDATE luagent_runs SET status = 'interrupted', finished = " NOW
                 ", lease_until = NULL, error = $2 WHERE id = $1",
                 2, p, NULL, &e))
      goto fail;
    struct entry *ent = daemon__find_entry(d, name);
    int rerun = !strcmp(pg_text(r, i, 6), "t") && attempt < CLUSTER_MAX_ATTEMPTS && ent && ent->a &&
                !ent->deleted && ent->enabled && !d->stopping;
    daemon__say(d, "%s: run %s on node %s lost its lease; marked interrupted%s", name, id, node,
                rerun ? "; running it again here (on_lost = \"rerun\")" : "");
    if (!rerun) continue;
    cJSON *trig = json_parse_str(pg_text(r, i, 3), 0, NULL);
    if (!trig) trig = daemon__make_trigger(ent, automation_trig_name(ent->a->trig), 0);
    cJSON_DeleteItemFromObject(trig, "attempt");
    cJSON_DeleteItemFromObject(trig, "takeover_of");
    cJSON_AddNumberToObject(trig, "attempt", attempt + 1);
    cJSON_AddStringToObject(trig, "takeover_of", id);
    cJSON *args = *pg_text(r, i, 4) ? json_parse_str(pg_text(r, i, 4), 0, NULL) : NULL;
    /* slot 0: the slot's row stays the first run's; no second slot row */
    if (daemon__cl_claim_in_tx(d, ent, trig, args, 0, 0, NULL, 0, attempt + 1, id, &c, &e))
      goto fail;
  }
  PQclear(r);
  r = NULL;
  daemon__cl_commit_or_fail(d, &c, &e);
  return;
fail:
  PQclear(r);
  pg_rollback(pg);
  daemon__cl_drop_won(&c);
  daemon__cl_failed(d, &e);
}

/* Queued runs waiting with nothing running (their host finished or died
 * before it could hand them on): one host starts each in turn. */
void daemon__cl_promote(struct daemon *d) {
  struct pg *pg = daemon__cl_pg(d);
  struct err e = {0};
  PGresult *r;
  if (d->stopping || d->oneshot) return;
  if (pg_query(pg,
               "SELECT DISTINCT q.automation FROM luagent_runs q WHERE q.status = 'queued' AND"
               " NOT EXISTS (SELECT 1 FROM luagent_runs x WHERE x.automation = q.automation AND"
               " x.status = 'running')",
               0, NULL, &r, &e))
    return daemon__cl_failed(d, &e);
  for (int i = 0; i < PQntuples(r); i++) {
    struct entry *ent = daemon__find_entry(d, pg_text(r, i, 0));
    if (!ent || !ent->a || ent->deleted) continue;
    struct claims c = {.n = 0};
    if (pg_begin(pg, &e) || daemon__cl_lock_schedule(d, ent->name, &e) ||
        promote_in_tx(d, ent, &c, &e)) {
      pg_rollback(pg);
      daemon__cl_drop_won(&c);
      daemon__cl_failed(d, &e);
      break;
    }
    if (daemon__cl_commit_or_fail(d, &c, &e)) break;
  }
  PQclear(r);
}

void daemon__cl_reconcile(struct daemon *d) {
  struct sbuf ids = {0};
  int n = 0;
  sbuf_puts(&ids, "{");
  for (struct run *r = d->runs; r; r = r->next)
    if (r->cl && !r->finished && !r->lost && !r->fenced)
      sbuf_printf(&ids, "%s%s", n++ ? "," : "", r->id);
  sbuf_puts(&ids, "}");
  const char *p[] = {daemon__cl_node(d), ids.s};
  PGresult *r;
  struct err e = {0};
  if (pg_query(daemon__cl_pg(d),
               "UPDATE luagent_runs SET status = 'interrupted', finished = " NOW
               ", lease_until = NULL, error = 'this host lost the cluster database; its worker"
               " was killed before the lease could expire' WHERE node = $1 AND status ="
               " 'running' AND NOT (id = ANY($2::text[])) RETURNING id",
               2, p, &r, &e)) {
    sbuf_free(&ids);
    return daemon__cl_failed(d, &e);
  }
  if (PQntuples(r))
    daemon__say(d, "cluster: recorded %d fenced run(s) of this host as interrupted", PQntuples(r));
  PQclear(r);
  sbuf_free(&ids);
}

/* ----------------------------------------------------------- retention */

void daemon__cl_prune(struct daemon *d) {
  struct pg *pg = daemon__cl_pg(d);
  struct err e = {0};
  char keep[16], retain[32];
  snprintf(keep, sizeof keep, "%d", d->o.keep_runs - 1);
  fmt_num(retain, sizeof retain, d->o.retain_s > 0 ? d->o.retain_s : 0);
  long long pruned = 0;
  if (!daemon__cl_up(d)) return;
  for (struct entry *ent = d->entries; ent; ent = ent->next) {
    if (!ent->a) continue;
    const char *p[] = {ent->name, keep};
    PGresult *r;
    /* the newest --keep runs of each automation stay (every host prunes
     * the automations it has; the same rows, so it does not matter who) */
    if (pg_query(pg,
                 "DELETE FROM luagent_runs WHERE automation = $1 AND status NOT IN ('running',"
                 " 'queued') AND queued < (SELECT queued FROM luagent_runs WHERE automation = $1"
                 " ORDER BY queued DESC OFFSET $2::int LIMIT 1)",
                 2, p, &r, &e))
      return daemon__cl_failed(d, &e);
    pruned += rows_changed(r);
    PQclear(r);
  }
  PGresult *r;
  const char *q[] = {retain};
  if (d->o.retain_s > 0) {
    if (pg_query(pg,
                 "DELETE FROM luagent_runs WHERE status NOT IN ('running', 'queued') AND"
                 " coalesce(finished, queued) < " NOW " - $1::float8",
                 1, q, &r, &e))
      return daemon__cl_failed(d, &e);
    pruned += rows_changed(r);
    PQclear(r);
  }
  /* Slot rows older than a week go, but never an automation's latest: an
   * `at` fires once because its one row stays. */
  if (pg_query(pg,
               "DELETE FROM luagent_slots s WHERE s.claimed < " NOW " - 604800 AND s.slot <"
               " (SELECT max(m.slot) FROM luagent_slots m WHERE m.automation = s.automation)",
               0, NULL, NULL, &e))
    return daemon__cl_failed(d, &e);
  if (pruned) daemon__say(d, "journal: pruned %lld old cluster run(s)", pruned);
}
