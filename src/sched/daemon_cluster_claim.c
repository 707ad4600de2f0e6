/* daemon_cluster_claim.c - claiming a run in the cluster database, the one
 * way any host comes to run anything there (see daemon_cluster_impl.h; the
 * schema is cluster.c's entry 1 -> 2).
 *
 * A claim is one transaction that first locks the automation's row in
 * luagent_schedules: every decision about one automation (a slot, a mode, a
 * queued run's turn, a takeover) is made by one host at a time, on what the
 * others committed. A time slot is won by inserting its (automation, slot)
 * row; the host whose insert lands runs it, and a host that loses does
 * nothing. Every time is the database's clock. The callers: the schedule
 * (daemon_cluster_schedule.c), takeovers and queued runs
 * (daemon_cluster_runs.c), events (daemon_cluster_events.c); a burst of
 * due slots goes through daemon_cluster_batch.c, which makes the same
 * decisions in fewer statements.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "automation.h"
#include "call.h"
#include "cluster.h"
#include "daemon_cluster_impl.h"
#include "daemon_impl.h"
#include "json.h"

/* The run rows this host won become local runs (pending until a worker is
 * free; start_pending starts cluster runs whatever the local counts). */
static void add_won(struct daemon *d, struct claims *c) {
  for (int i = 0; i < c->n; i++) {
    struct won *w = &c->w[i];
    struct run *r = daemon__new_run(d, w->ent, w->trigger, w->args);
    snprintf(r->id, sizeof r->id, "%s", w->id);
    r->cl = 1;
    r->attempt = w->attempt;
  }
  c->n = 0;
}

void daemon__cl_drop_won(struct claims *c) {
  for (int i = 0; i < c->n; i++) {
    cJSON_Delete(c->w[i].trigger);
    cJSON_Delete(c->w[i].args);
  }
  c->n = 0;
}

/* Takes the automation's schedule row lock (making the row if need be):
 * one statement, since an upsert that updates locks the row it updates. */
int daemon__cl_lock_schedule(struct daemon *d, const char *name, struct err *e) {
  const char *p[] = {name, daemon__cl_node(d)};
  return pg_query(daemon__cl_pg(d),
                  "INSERT INTO luagent_schedules AS s (automation, updated, updated_by) VALUES"
                  " ($1, " NOW
                  ", $2) ON CONFLICT (automation) DO UPDATE SET updated ="
                  " s.updated",
                  2, p, NULL, e);
}

/* Inserts one run row. status "running" (this host, with a lease),
 * "queued" (any host starts it in turn) or "skipped" (why). */
static int insert_run(struct daemon *d, struct entry *ent, const char *id, const cJSON *trigger,
                      const cJSON *args, double slot, const char *status, const char *why,
                      int attempt, const char *takeover_of, struct err *e) {
  char sl[32], lease[32], att[16];
  fmt_num(sl, sizeof sl, slot);
  fmt_num(lease, sizeof lease, daemon__cl_lease(d));
  snprintf(att, sizeof att, "%d", attempt);
  char *tj = trigger ? json_print(trigger, 0) : NULL;
  char *aj = args ? json_print(args, 0) : NULL;
  int running = !strcmp(status, "running"), queued = !strcmp(status, "queued");
  const char *p[] = {id,
                     ent->name,
                     slot > 0 ? sl : NULL,
                     tj,
                     aj,
                     queued ? NULL : daemon__cl_node(d),
                     status,
                     lease,
                     why,
                     ent->hash,
                     att,
                     takeover_of,
                     ent->a && ent->a->rerun_lost ? "t" : "f",
                     running ? "t" : "f",
                     queued ? "t" : "f"};
  int rc = pg_query(daemon__cl_pg(d),
                    "INSERT INTO luagent_runs (id, automation, slot, trigger, args, node, status,"
                    " queued, started, finished, lease_until, error, file_hash, attempt,"
                    " takeover_of, rerun) VALUES ($1, $2, $3::float8, $4, $5, $6, $7, " NOW
                    ", CASE WHEN $15::boolean THEN NULL ELSE " NOW
                    " END, CASE WHEN $14::boolean OR $15::boolean THEN NULL ELSE " NOW
                    " END, CASE WHEN $14::boolean THEN " NOW
                    " + $8::float8 END, $9, $10,"
                    " $11::int, $12, $13::boolean)",
                    15, p, NULL, e);
  free(tj);
  free(aj);
  return rc;
}

/* Inside a transaction: claims a run of ent. slot > 0: the (ent, slot)
 * row decides who runs it (none when lost: *won stays). skip_why: the slot
 * is recorded as skipped (missed, catch_up = false). force: no mode check
 * (a manual run, as on one host). Takes trigger and args in every case. */
int daemon__cl_claim_in_tx(struct daemon *d, struct entry *ent, cJSON *trigger, cJSON *args,
                           double slot, double next, const char *skip_why, int force, int attempt,
                           const char *takeover_of, struct claims *out, struct err *e) {
  struct pg *pg = daemon__cl_pg(d);
  const struct automation *a = ent->a;
  char id[40], sl[32], nx[32];
  runtime_new_run_id(id);
  int rc = 0;
  /* The slot's row first: a host that loses it stops there, without
   * waiting for the schedule's lock (every host tries every slot). */
  if (slot > 0) {
    fmt_num(sl, sizeof sl, slot);
    fmt_num(nx, sizeof nx, next);
    const char *p[] = {ent->name, sl, daemon__cl_node(d), id, nx};
    PGresult *r;
    if ((rc = pg_query(pg,
                       "INSERT INTO luagent_slots (automation, slot, node, claimed, run_id)"
                       " VALUES ($1, $2::float8, $3, " NOW ", $4) ON CONFLICT DO NOTHING",
                       4, p, &r, e)))
      goto out;
    int won = rows_changed(r);
    PQclear(r);
    if (!won) goto out; /* another host has this slot */
    /* the schedule's lock, and its next fire advanced past this slot */
    const char *u[] = {ent->name, next > 0 ? nx : NULL, daemon__cl_node(d)};
    if ((rc = pg_query(pg,
                       "INSERT INTO luagent_schedules AS s (automation, next_fire, updated,"
                       " updated_by) VALUES ($1, $2::float8, " NOW ", $3) ON CONFLICT (automation)"
                       " DO UPDATE SET next_fire = GREATEST(coalesce(s.next_fire, 0),"
                       " coalesce($2::float8, s.next_fire)), updated = excluded.updated,"
                       " updated_by = $3",
                       3, u, NULL, e)))
      goto out;
  } else if ((rc = daemon__cl_lock_schedule(d, ent->name, e))) {
    goto out;
  }
  const char *status = "running";
  char why[200] = "";
  if (skip_why) {
    status = "skipped";
    snprintf(why, sizeof why, "%s", skip_why);
  } else if (!force) {
    const char *p[] = {ent->name};
    PGresult *r;
    if ((rc = pg_query(pg,
                       "SELECT count(*) FILTER (WHERE status = 'running'),"
                       " count(*) FILTER (WHERE status = 'queued') FROM luagent_runs"
                       " WHERE automation = $1 AND status IN ('running', 'queued')",
                       1, p, &r, e)))
      goto out;
    int running = (int)pg_number(r, 0, 0, 0), queued = (int)pg_number(r, 0, 1, 0);
    PQclear(r);
    switch (a->mode) {
      case MODE_SINGLE:
        if (running + queued)
          snprintf(why, sizeof why, "the previous run is still running (mode single)");
        break;
      case MODE_QUEUED:
        if (queued >= a->max)
          snprintf(why, sizeof why, "%d run(s) already queued (mode queued, max %d)", queued,
                   a->max);
        else if (running + queued)
          status = "queued";
        break;
      case MODE_PARALLEL:
        if (running + queued >= a->max)
          snprintf(why, sizeof why, "%d run(s) already running (mode parallel, max %d)",
                   running + queued, a->max);
        break;
      case MODE_RESTART: {
        char msg[200];
        snprintf(msg, sizeof msg, "stopped for a newer run (mode restart) by node %s",
                 daemon__cl_node(d));
        const char *q[] = {ent->name, msg};
        if ((rc = pg_query(pg,
                           "UPDATE luagent_runs SET status = 'interrupted', finished = " NOW
                           ", lease_until = NULL, error = $2 WHERE automation = $1 AND status IN"
                           " ('running', 'queued') RETURNING id",
                           2, q, &r, e)))
          goto out;
        int n = PQntuples(r);
        PQclear(r);
        if (n && (rc = pg_exec(pg, "SELECT pg_notify('luagent_cancel', '')", e))) goto out;
        break;
      }
    }
    if (why[0]) status = "skipped";
  }
  if ((rc = insert_run(d, ent, id, trigger, args, slot, status, why[0] ? why : NULL, attempt,
                       takeover_of, e)))
    goto out;
  if (!strcmp(status, "skipped")) {
    daemon__say(d, "%s: skipped: %s", ent->name, why);
  } else if (!strcmp(status, "queued")) {
    daemon__say(d, "%s: queued %s (mode queued; a host starts it in turn)", ent->name, id);
  } else if (out->n >= MAX_WON) { /* callers size their batches below this */
    rc = err_set(e, ERR_LIMIT, "cluster", "%s: more than %d runs claimed in one transaction",
                 ent->name, MAX_WON);
  } else {
    struct won *w = &out->w[out->n++];
    w->ent = ent;
    w->trigger = trigger;
    w->args = args;
    w->attempt = attempt;
    snprintf(w->id, sizeof w->id, "%s", id);
    return 0;
  }
out:
  cJSON_Delete(trigger);
  cJSON_Delete(args);
  return rc;
}

int daemon__cl_commit_or_fail(struct daemon *d, struct claims *c, struct err *e) {
  if (pg_commit(daemon__cl_pg(d), e)) {
    pg_rollback(daemon__cl_pg(d));
    daemon__cl_drop_won(c);
    daemon__cl_failed(d, e);
    return ERR_IO;
  }
  add_won(d, c);
  return 0;
}

/* Local runs of ent that a restart elsewhere (or here) ended in the
 * database: their workers stop now. */
void daemon__cl_stop_restarted(struct daemon *d, struct entry *ent, const char *keep) {
  for (struct run *r = d->runs, *nx; r; r = nx) {
    nx = r->next;
    if (r->ent != ent || !r->cl || r->finished || !strcmp(r->id, keep)) continue;
    r->lost = 1;
    if (r->w) {
      daemon__kill_run(d, r, "interrupted", "stopped for a newer run (mode restart)");
    } else {
      ent->pending--;
      daemon__unlink_run(d, r);
      daemon__free_run(r);
    }
  }
}
