/* daemon_cluster_schedule.c - the shared schedule in the cluster database:
 * when each automation fires next (the first host to load a new trigger
 * resets it), one trigger fired and claimed, slots missed while no daemon
 * ran, the cluster-wide enabled flags, and which version of each file the
 * hosts run (see daemon_impl.h, daemon__cl_schedule and its neighbours).
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
#include "util.h"

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
      daemon__cl_claim_in_tx(d, ent, trigger, args, slot, next, skip_why, force, 1, NULL, &c, &e)) {
    pg_rollback(daemon__cl_pg(d));
    daemon__cl_drop_won(&c);
    daemon__cl_failed(d, &e);
    return;
  }
  int n = c.n;
  char id[40] = "";
  if (n) snprintf(id, sizeof id, "%s", c.w[0].id);
  if (daemon__cl_commit_or_fail(d, &c, &e)) return;
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
