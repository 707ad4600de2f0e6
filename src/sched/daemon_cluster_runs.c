/* daemon_cluster_runs.c - what the scheduler keeps in the cluster database:
 * schedules, slot claims, the modes, the run journal, ctx.state, leases and
 * their expiry, events (see daemon_impl.h; the schema is cluster.c's entry
 * 1 -> 2).
 *
 * A claim is one transaction that first locks the automation's row in
 * luagent_schedules: every decision about one automation (a slot, a mode, a
 * queued run's turn, a takeover) is made by one host at a time, on what the
 * others committed. A time slot is won by inserting its (automation, slot)
 * row; the host whose insert lands runs it, and a host that loses does
 * nothing. Every time is the database's clock.
 */
#define _GNU_SOURCE
#include <fnmatch.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "automation.h"
#include "call.h"
#include "cluster.h"
#include "daemon_impl.h"
#include "json.h"
#include "util.h"

#define NOW "extract(epoch from clock_timestamp())"

/* A run this host won in a transaction, started locally once it commits. */
struct won {
  struct entry *ent;
  cJSON *trigger, *args;
  char id[40];
  int attempt;
};
#define MAX_WON 64

struct claims {
  struct won w[MAX_WON];
  int n;
};

static void fmt_num(char *out, size_t n, double v) {
  snprintf(out, n, "%.3f", v);
}

static int rows_changed(PGresult *r) {
  return atoi(PQcmdTuples(r));
}

/* The run rows this host won become local runs (pending until a worker is
 * free; start_pending starts cluster runs whatever the local counts). */
static void add_won(struct daemon *d, struct claims *c) {
  for (int i = 0; i < c->n; i++) {
    struct won *w = &c->w[i];
    daemon__new_run(d, w->ent, w->trigger, w->args);
    struct run *r = d->runs;
    while (r->next) r = r->next;
    snprintf(r->id, sizeof r->id, "%s", w->id);
    r->cl = 1;
    r->attempt = w->attempt;
  }
  c->n = 0;
}

static void drop_won(struct claims *c) {
  for (int i = 0; i < c->n; i++) {
    cJSON_Delete(c->w[i].trigger);
    cJSON_Delete(c->w[i].args);
  }
  c->n = 0;
}

/* Takes the automation's schedule row lock (making the row if need be):
 * one statement, since an upsert that updates locks the row it updates. */
static int lock_schedule(struct daemon *d, const char *name, struct err *e) {
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
static int claim_in_tx(struct daemon *d, struct entry *ent, cJSON *trigger, cJSON *args,
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
  } else if ((rc = lock_schedule(d, ent->name, e))) {
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

static int commit_or_fail(struct daemon *d, struct claims *c, struct err *e) {
  if (pg_commit(daemon__cl_pg(d), e)) {
    pg_rollback(daemon__cl_pg(d));
    drop_won(c);
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

static double snap_every(const struct automation *a, double t) {
  return floor(t / a->every_s + 1e-9) * a->every_s;
}

/* next_after: the schedule's next fire once this slot is claimed (0: the
 * slot after this one); a catch-up moves it past now, so a host starting
 * a moment later finds nothing missed. */
static void fire_slot(struct daemon *d, struct entry *ent, cJSON *trigger, cJSON *args, double slot,
                      double next_after, const char *skip_why, int force) {
  struct err e = {0};
  struct claims c = {.n = 0};
  const struct automation *a = ent->a;
  if (!daemon__cl_up(d)) { /* the outage was said once; other hosts run it */
    cJSON_Delete(trigger);
    cJSON_Delete(args);
    return;
  }
  double next = 0;
  if (slot > 0 && a->trig == TRIG_EVERY) next = slot + a->every_s;
  if (slot > 0 && a->trig == TRIG_CRON) next = automation_next_after(a, slot);
  if (next_after > 0) next = next_after;
  if (slot > 0 && !skip_why) {
    /* One cheap look first: most slots a host tries, another already has. */
    char sl[32];
    fmt_num(sl, sizeof sl, slot);
    const char *p[] = {ent->name, sl};
    PGresult *r;
    if (pg_query(daemon__cl_pg(d),
                 "SELECT 1 FROM luagent_slots WHERE automation = $1 AND slot = $2::float8", 2, p,
                 &r, &e)) {
      cJSON_Delete(trigger);
      cJSON_Delete(args);
      daemon__cl_failed(d, &e);
      return;
    }
    int taken = PQntuples(r) > 0;
    PQclear(r);
    if (taken) {
      cJSON_Delete(trigger);
      cJSON_Delete(args);
      return;
    }
  }
  if (pg_begin(daemon__cl_pg(d), &e) ||
      claim_in_tx(d, ent, trigger, args, slot, next, skip_why, force, 1, NULL, &c, &e)) {
    pg_rollback(daemon__cl_pg(d));
    drop_won(&c);
    daemon__cl_failed(d, &e);
    return;
  }
  int n = c.n;
  char id[40] = "";
  if (n) snprintf(id, sizeof id, "%s", c.w[0].id);
  if (commit_or_fail(d, &c, &e)) return;
  if (n && a->mode == MODE_RESTART && !force) daemon__cl_stop_restarted(d, ent, id);
}

void daemon__cl_fire(struct daemon *d, struct entry *ent, cJSON *trigger, cJSON *args,
                     double slot) {
  const struct automation *a = ent->a;
  if (slot > 0 && a->trig == TRIG_EVERY) slot = snap_every(a, slot + a->every_s * 1e-6);
  if (a->trig == TRIG_AT && slot > 0) slot = a->at; /* one slot, whenever it fires */
  fire_slot(d, ent, trigger, args, slot, 0, NULL, d->oneshot);
}

/* ------------------------------------------------------------ schedule */

void daemon__cl_schedule(struct daemon *d, struct entry *ent, int startup) {
  struct pg *pg = daemon__cl_pg(d);
  const struct automation *a = ent->a;
  double now = daemon__now(d);
  char key[256];
  automation_trigger_key(a, key, sizeof key);
  struct err e = {0};
  ent->enabled = a->enabled;
  ent->next_fire = 0;
  daemon__rescan(d);
  if (!daemon__cl_up(d)) return;
  double fresh = 0;
  if (a->trig == TRIG_EVERY) fresh = snap_every(a, now); /* the current slot: runs at once */
  if (a->trig == TRIG_CRON) fresh = automation_next_after(a, now);
  if (a->trig == TRIG_AT) fresh = a->at > now ? a->at : (a->catch_up ? now : 0);
  char fr[32];
  fmt_num(fr, sizeof fr, fresh);
  /* The first host to load a new trigger resets the shared next fire. */
  const char *p[] = {ent->name, key, fresh > 0 ? fr : NULL, daemon__cl_node(d)};
  PGresult *r;
  if (pg_query(pg,
               "INSERT INTO luagent_schedules AS s (automation, next_fire, trigger_key, updated,"
               " updated_by) VALUES ($1, $3::float8, $2, " NOW ", $4) ON CONFLICT (automation)"
               " DO UPDATE SET trigger_key = $2, next_fire = $3::float8, updated = " NOW
               ", updated_by = $4 WHERE s.trigger_key IS DISTINCT FROM $2"
               " RETURNING (xmax = 0) AS fresh",
               4, p, NULL, &e) ||
      pg_query(pg, "SELECT next_fire, enabled FROM luagent_schedules WHERE automation = $1", 1, p,
               &r, &e)) {
    daemon__cl_failed(d, &e);
    return;
  }
  double nf = pg_number(r, 0, 0, 0);
  if (*pg_text(r, 0, 1)) ent->enabled = !strcmp(pg_text(r, 0, 1), "t");
  PQclear(r);
  if (a->trig == TRIG_AT) {
    /* An `at` fires once: not again once its slot row exists. */
    char at[32];
    fmt_num(at, sizeof at, a->at);
    const char *q[] = {ent->name, at};
    if (pg_query(pg, "SELECT 1 FROM luagent_slots WHERE automation = $1 AND slot = $2::float8", 2,
                 q, &r, &e)) {
      daemon__cl_failed(d, &e);
      return;
    }
    int done = PQntuples(r) > 0;
    PQclear(r);
    ent->next_fire = done ? 0 : fresh;
  } else if (a->trig == TRIG_EVERY || a->trig == TRIG_CRON) {
    if (a->trig == TRIG_EVERY && nf > 0) nf = snap_every(a, nf + a->every_s * 1e-6);
    double after = nf > 0 ? automation_next_after(a, nf) : 0;
    if (startup && ent->enabled && nf > 0 && after > 0 && after <= now) {
      /* Slots no host claimed while no daemon ran (catch_up as on one
       * host: one run for all of them, or a skipped row). */
      int missed = 0;
      double next = 0;
      if (a->trig == TRIG_EVERY) {
        next = snap_every(a, now) + a->every_s;
        missed = (int)fmin(1e9, floor((now - nf) / a->every_s + 1e-9) + 1);
      } else {
        missed = daemon__cron_missed(a, nf, now, &next);
      }
      cJSON *trig = daemon__make_trigger(ent, automation_trig_name(a->trig), nf);
      cJSON_AddNumberToObject(trig, "missed", missed);
      ent->next_fire = next;
      char why[160];
      snprintf(why, sizeof why, "missed %d slot(s) while no daemon ran (catch_up = false)", missed);
      if (a->catch_up)
        daemon__say(d, "%s: catching up %d missed slot(s) with one run (if no other host does)",
                    ent->name, missed);
      fire_slot(d, ent, trig, NULL, nf, next, a->catch_up ? NULL : why, 0);
    } else if (nf > 0 && (nf > now || a->trig == TRIG_EVERY || !startup)) {
      ent->next_fire = nf > now ? nf : (a->trig == TRIG_EVERY ? snap_every(a, now) : nf);
    } else {
      ent->next_fire = fresh;
    }
  }
  if (ent->enabled && ent->next_fire > 0 && (d->next_scan == 0 || ent->next_fire < d->next_scan))
    d->next_scan = ent->next_fire;
  daemon__rescan(d);
}

void daemon__cl_refresh_enabled(struct daemon *d) {
  struct err e = {0};
  PGresult *r;
  if (pg_query(daemon__cl_pg(d),
               "SELECT automation, enabled FROM luagent_schedules WHERE enabled IS NOT NULL", 0,
               NULL, &r, &e))
    return daemon__cl_failed(d, &e);
  for (int i = 0; i < PQntuples(r); i++) {
    struct entry *ent = daemon__find_entry(d, pg_text(r, i, 0));
    if (!ent || !ent->a || ent->deleted) continue;
    int en = !strcmp(pg_text(r, i, 1), "t");
    if (en == ent->enabled) continue;
    ent->enabled = en;
    daemon__say(d, "%s: %s (cluster-wide)", ent->name, en ? "enabled" : "disabled");
    if (en) {
      const struct automation *a = ent->a;
      double now = daemon__now(d);
      ent->next_fire = a->trig == TRIG_EVERY  ? snap_every(a, now)
                       : a->trig == TRIG_CRON ? automation_next_after(a, now)
                                              : ent->next_fire;
      d->next_scan = now;
      daemon__rescan(d);
    }
  }
  PQclear(r);
}

/* ------------------------------------------------------------ versions */

void daemon__cl_file(struct daemon *d, struct entry *ent, int removed) {
  struct pg *pg = daemon__cl_pg(d);
  struct err e = {0};
  if (!daemon__cl_up(d)) return;
  const char *p[] = {ent->name, daemon__cl_node(d), ent->hash};
  if (removed) {
    if (pg_query(pg, "DELETE FROM luagent_files WHERE automation = $1 AND node = $2", 2, p, NULL,
                 &e))
      daemon__cl_failed(d, &e);
    return;
  }
  PGresult *r;
  if (pg_query(pg,
               "INSERT INTO luagent_files (automation, node, hash, seen) VALUES ($1, $2, $3, " NOW
               ") ON CONFLICT (automation, node) DO UPDATE SET hash = $3, seen = excluded.seen",
               3, p, NULL, &e) ||
      pg_query(pg,
               "SELECT f.node, f.hash FROM luagent_files f JOIN luagent_nodes n USING (node)"
               " WHERE f.automation = $1 AND f.node <> $2 AND f.hash <> $3 AND n.stopped IS NULL"
               " ORDER BY f.node",
               3, p, &r, &e))
    return daemon__cl_failed(d, &e);
  if (PQntuples(r)) {
    struct sbuf b = {0};
    for (int i = 0; i < PQntuples(r); i++)
      sbuf_printf(&b, "%s%s runs %.12s", i ? ", " : "", pg_text(r, i, 0), pg_text(r, i, 1));
    daemon__complain("%s: hosts run different versions: this host (%s) runs %.12s; %s", ent->chunk,
                     daemon__cl_node(d), ent->hash, b.s);
    sbuf_free(&b);
  }
  PQclear(r);
}

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
  if (!rc && queued) rc = lock_schedule(d, r->ent->name, &e);
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
    drop_won(&c);
    daemon__cl_failed(d, &e);
    goto out;
  }
  if (queued) commit_or_fail(d, &c, &e);
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
    if (claim_in_tx(d, ent, trig, args, 0, 0, NULL, 0, attempt + 1, id, &c, &e)) goto fail;
  }
  PQclear(r);
  r = NULL;
  commit_or_fail(d, &c, &e);
  return;
fail:
  PQclear(r);
  pg_rollback(pg);
  drop_won(&c);
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
    if (pg_begin(pg, &e) || lock_schedule(d, ent->name, &e) || promote_in_tx(d, ent, &c, &e)) {
      pg_rollback(pg);
      drop_won(&c);
      daemon__cl_failed(d, &e);
      break;
    }
    if (commit_or_fail(d, &c, &e)) break;
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

/* ---------------------------------------------------------------- events */

/* The array literal of this host's listeners' name filters. */
static void event_filters(struct daemon *d, struct sbuf *b) {
  sbuf_puts(b, "{");
  int n = 0;
  for (struct entry *ent = d->entries; ent; ent = ent->next) {
    if (!ent->a || ent->deleted || !ent->enabled || ent->a->trig != TRIG_EVENT) continue;
    struct sbuf re = {0};
    automation_event_regex(ent->a->event, &re);
    sbuf_puts(b, n++ ? ",\"" : "\"");
    for (const char *p = re.s; *p; p++) {
      if (*p == '"' || *p == '\\') sbuf_append(b, "\\", 1);
      sbuf_append(b, p, 1);
    }
    sbuf_puts(b, "\"");
    sbuf_free(&re);
  }
  sbuf_puts(b, "}");
}

void daemon__cl_events(struct daemon *d) {
  struct pg *pg = daemon__cl_pg(d);
  int nlisten = 0;
  for (struct entry *ent = d->entries; ent; ent = ent->next)
    if (ent->a && !ent->deleted && ent->enabled && ent->a->trig == TRIG_EVENT) nlisten++;
  /* A host with no `on` automation leaves the queue to those that have. */
  if (!nlisten || d->stopping) return;
  /* Events are taken a few at a time, each with the runs it starts in one
   * transaction; as many as the runs they can start fit in one. Only the
   * events one of this host's listeners matches are taken (and deleted):
   * another host may have automations this one lacks (a rename, a file
   * not copied yet), and an event it has no listener for is left to them.
   * The regex filter is a superset (automation_event_regex); fnmatch
   * decides, and the cursor moves past what it refused. */
  char lim[16], cur[32] = "0";
  snprintf(lim, sizeof lim, "%d",
           nlisten >= MAX_WON ? 1 : (MAX_WON / nlisten < 16 ? MAX_WON / nlisten : 16));
  struct sbuf filters = {0};
  event_filters(d, &filters);
  const char *lp[] = {lim, filters.s, cur};
  for (int round = 0; round < 100; round++) {
    struct err e = {0};
    struct claims c = {.n = 0};
    struct sbuf taken = {0};
    PGresult *r = NULL;
    int ntaken = 0;
    if (pg_begin(pg, &e) ||
        pg_query(pg,
                 "SELECT id, name, payload, tainted FROM luagent_events WHERE id > $3::bigint"
                 " AND name ~ ANY($2::text[]) ORDER BY id LIMIT $1::int FOR UPDATE SKIP LOCKED",
                 3, lp, &r, &e))
      goto fail;
    if (!PQntuples(r)) {
      PQclear(r);
      pg_rollback(pg);
      break;
    }
    sbuf_puts(&taken, "{");
    for (int row = 0; row < PQntuples(r); row++) {
      const char *name = pg_text(r, row, 1), *payload = pg_text(r, row, 2);
      int has_payload = !PQgetisnull(r, row, 2), matched = 0;
      snprintf(cur, sizeof cur, "%s", pg_text(r, row, 0));
      for (struct entry *ent = d->entries; ent; ent = ent->next) {
        if (!ent->a || ent->deleted || !ent->enabled || ent->a->trig != TRIG_EVENT) continue;
        if (fnmatch(ent->a->event, name, 0) != 0) continue;
        matched++;
        cJSON *t = daemon__make_trigger(ent, "event", 0);
        cJSON_ReplaceItemInObject(t, "name", cJSON_CreateString(name));
        cJSON *pj = has_payload ? json_parse_str(payload, 0, NULL) : NULL;
        cJSON_AddItemToObject(t, "payload", pj ? pj : cJSON_CreateObject());
        cJSON_AddNumberToObject(t, "event_id", pg_number(r, row, 0, 0));
        if (!strcmp(pg_text(r, row, 3), "t")) cJSON_AddTrueToObject(t, "tainted");
        daemon__say(d, "%s: event %s", ent->name, name);
        if (claim_in_tx(d, ent, t, NULL, 0, 0, NULL, 0, 1, NULL, &c, &e)) goto fail;
      }
      if (matched) sbuf_printf(&taken, "%s%s", ntaken++ ? "," : "", cur);
    }
    sbuf_puts(&taken, "}");
    PQclear(r);
    r = NULL;
    if (!ntaken) { /* the filter's superset only: nothing of ours here */
      pg_rollback(pg);
      sbuf_free(&taken);
      continue;
    }
    const char *tp[] = {taken.s};
    if (pg_query(pg, "DELETE FROM luagent_events WHERE id = ANY($1::bigint[])", 1, tp, NULL, &e))
      goto fail;
    sbuf_free(&taken);
    if (commit_or_fail(d, &c, &e)) break;
    daemon__cl_keepalive(d);
    continue;
  fail:
    sbuf_free(&taken);
    PQclear(r);
    pg_rollback(pg);
    drop_won(&c);
    daemon__cl_failed(d, &e);
    break;
  }
  sbuf_free(&filters);
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
