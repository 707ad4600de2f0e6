/* daemon_cluster_batch.c - claiming a burst of due time slots in a few
 * statements (see daemon_impl.h).
 *
 * When many automations are due at once (1,000 at `every = "1s"` are all
 * due in the same instant), claiming them one transaction each costs six
 * round trips per slot on every host, and a host busy claiming reads no
 * worker replies: under load it would claim, skip and never finish. A batch
 * does the same decisions as daemon__cl_claim_in_tx (daemon_cluster_claim.c)
 * for up to BATCH slots in one transaction of six statements: the slot
 * rows, the schedule locks and next fires, the running/queued counts,
 * restarts, the run rows. Slot rows and schedule rows are taken in name order on every
 * host, so two hosts' batches wait for each other instead of deadlocking.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
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
#define BATCH 64

/* Appends one element to a PostgreSQL array literal ("{a,"b c",NULL}"). */
static void arr_add(struct sbuf *b, const char *v) {
  sbuf_puts(b, b->len > 1 ? "," : "");
  if (!v) {
    sbuf_puts(b, "NULL");
    return;
  }
  sbuf_puts(b, "\"");
  for (const char *p = v; *p; p++) {
    if (*p == '"' || *p == '\\') sbuf_append(b, "\\", 1);
    sbuf_append(b, p, 1);
  }
  sbuf_puts(b, "\"");
}

static void arr_num(struct sbuf *b, double v) {
  char t[32];
  snprintf(t, sizeof t, "%.3f", v);
  arr_add(b, t);
}

struct item {
  struct daemon_due *due;
  char id[40];
  int won, running, queued;
  const char *status; /* running, queued, skipped */
  char why[200];
};

static int by_name(const void *a, const void *b) {
  const struct item *x = a, *y = b;
  int c = strcmp(x->due->ent->name, y->due->ent->name);
  return c ? c : (x->due->slot < y->due->slot ? -1 : x->due->slot > y->due->slot);
}

static struct item *find(struct item *it, int n, const char *name, const char *id) {
  for (int i = 0; i < n; i++)
    if (!strcmp(it[i].due->ent->name, name) && (!id || !strcmp(it[i].id, id))) return &it[i];
  return NULL;
}

/* One batch (n <= BATCH), in one transaction. */
static void claim_batch(struct daemon *d, struct daemon_due *due, int n) {
  struct pg *pg = daemon__cl_pg(d);
  const char *node = daemon__cl_node(d);
  struct err e = {0};
  struct item it[BATCH];
  PGresult *r = NULL;
  struct sbuf names = {0}, slots = {0}, ids = {0}, nexts = {0};
  for (int i = 0; i < n; i++) {
    memset(&it[i], 0, sizeof it[i]);
    it[i].due = &due[i];
    runtime_new_run_id(it[i].id);
  }
  qsort(it, (size_t)n, sizeof it[0], by_name);
  sbuf_puts(&names, "{");
  sbuf_puts(&slots, "{");
  sbuf_puts(&ids, "{");
  for (int i = 0; i < n; i++) {
    arr_add(&names, it[i].due->ent->name);
    arr_num(&slots, it[i].due->slot);
    arr_add(&ids, it[i].id);
  }
  sbuf_puts(&names, "}");
  sbuf_puts(&slots, "}");
  sbuf_puts(&ids, "}");
  const char *p1[] = {names.s, slots.s, ids.s, node};
  if (pg_begin(pg, &e) ||
      pg_query(pg,
               "INSERT INTO luagent_slots (automation, slot, node, claimed, run_id)"
               " SELECT a, s, $4, " NOW ", id FROM unnest($1::text[], $2::float8[], $3::text[])"
               " AS t(a, s, id) ORDER BY a, s ON CONFLICT DO NOTHING RETURNING automation, run_id",
               4, p1, &r, &e))
    goto fail;
  int won = 0;
  for (int i = 0; i < PQntuples(r); i++) {
    struct item *x = find(it, n, pg_text(r, i, 0), pg_text(r, i, 1));
    if (x && !x->won) x->won = 1, won++;
  }
  PQclear(r);
  r = NULL;
  if (!won) { /* other hosts had them all */
    pg_rollback(pg);
    goto out;
  }
  /* The won automations' schedule locks (name order) and next fires. */
  sbuf_free(&names);
  sbuf_puts(&names, "{");
  sbuf_puts(&nexts, "{");
  for (int i = 0; i < n; i++) {
    if (!it[i].won) continue;
    const struct automation *a = it[i].due->ent->a;
    double nx = a->trig == TRIG_EVERY  ? it[i].due->slot + a->every_s
                : a->trig == TRIG_CRON ? automation_next_after(a, it[i].due->slot)
                                       : 0;
    arr_add(&names, it[i].due->ent->name);
    if (nx > 0)
      arr_num(&nexts, nx);
    else
      arr_add(&nexts, NULL);
  }
  sbuf_puts(&names, "}");
  sbuf_puts(&nexts, "}");
  const char *p2[] = {names.s, nexts.s, node};
  if (pg_query(pg,
               "INSERT INTO luagent_schedules AS s (automation, next_fire, updated, updated_by)"
               " SELECT a, max(n), " NOW ", $3 FROM unnest($1::text[], $2::float8[]) AS t(a, n)"
               " GROUP BY a ORDER BY a ON CONFLICT (automation) DO UPDATE SET next_fire ="
               " GREATEST(coalesce(s.next_fire, 0), coalesce(excluded.next_fire, s.next_fire)),"
               " updated = excluded.updated, updated_by = $3",
               3, p2, NULL, &e) ||
      pg_query(pg,
               "SELECT automation, count(*) FILTER (WHERE status = 'running'), count(*) FILTER"
               " (WHERE status = 'queued') FROM luagent_runs WHERE automation = ANY($1::text[])"
               " AND status IN ('running', 'queued') GROUP BY automation",
               1, p2, &r, &e))
    goto fail;
  for (int i = 0; i < PQntuples(r); i++)
    for (int k = 0; k < n; k++)
      if (it[k].won && !strcmp(it[k].due->ent->name, pg_text(r, i, 0))) {
        it[k].running = (int)pg_number(r, i, 1, 0);
        it[k].queued = (int)pg_number(r, i, 2, 0);
      }
  PQclear(r);
  r = NULL;
  /* The modes, as daemon__cl_claim_in_tx decides them; two slots of one
   * automation in one batch see each other. */
  struct sbuf restart = {0};
  sbuf_puts(&restart, "{");
  for (int i = 0; i < n; i++) {
    struct item *x = &it[i];
    if (!x->won) continue;
    const struct automation *a = x->due->ent->a;
    x->status = "running";
    switch (a->mode) {
      case MODE_SINGLE:
        if (x->running + x->queued)
          snprintf(x->why, sizeof x->why, "the previous run is still running (mode single)");
        break;
      case MODE_QUEUED:
        if (x->queued >= a->max)
          snprintf(x->why, sizeof x->why, "%d run(s) already queued (mode queued, max %d)",
                   x->queued, a->max);
        else if (x->running + x->queued)
          x->status = "queued";
        break;
      case MODE_PARALLEL:
        if (x->running + x->queued >= a->max)
          snprintf(x->why, sizeof x->why, "%d run(s) already running (mode parallel, max %d)",
                   x->running + x->queued, a->max);
        break;
      case MODE_RESTART:
        arr_add(&restart, x->due->ent->name);
        break;
    }
    if (x->why[0]) x->status = "skipped";
    for (int k = i + 1; k < n; k++) /* a later slot of the same automation */
      if (it[k].won && it[k].due->ent == x->due->ent) {
        if (!strcmp(x->status, "running")) it[k].running++;
        if (!strcmp(x->status, "queued")) it[k].queued++;
      }
  }
  sbuf_puts(&restart, "}");
  if (restart.len > 2) {
    char msg[200];
    snprintf(msg, sizeof msg, "stopped for a newer run (mode restart) by node %s", node);
    const char *p3[] = {restart.s, msg};
    if (pg_query(pg,
                 "UPDATE luagent_runs SET status = 'interrupted', finished = " NOW
                 ", lease_until = NULL, error = $2 WHERE automation = ANY($1::text[]) AND status"
                 " IN ('running', 'queued')",
                 2, p3, NULL, &e) ||
        pg_exec(pg, "SELECT pg_notify('luagent_cancel', '')", &e)) {
      sbuf_free(&restart);
      goto fail;
    }
  }
  sbuf_free(&restart);
  /* the run rows */
  struct sbuf c_id = {0}, c_a = {0}, c_slot = {0}, c_trig = {0}, c_st = {0}, c_why = {0},
              c_hash = {0}, c_rerun = {0};
  struct sbuf *cols[] = {&c_id, &c_a, &c_slot, &c_trig, &c_st, &c_why, &c_hash, &c_rerun};
  for (int k = 0; k < 8; k++) sbuf_puts(cols[k], "{");
  for (int i = 0; i < n; i++) {
    struct item *x = &it[i];
    if (!x->won) continue;
    char *tj = json_print(x->due->trig, 0);
    arr_add(&c_id, x->id);
    arr_add(&c_a, x->due->ent->name);
    arr_num(&c_slot, x->due->slot);
    arr_add(&c_trig, tj);
    arr_add(&c_st, x->status);
    arr_add(&c_why, x->why[0] ? x->why : NULL);
    arr_add(&c_hash, x->due->ent->hash);
    arr_add(&c_rerun, x->due->ent->a->rerun_lost ? "t" : "f");
    free(tj);
  }
  for (int k = 0; k < 8; k++) sbuf_puts(cols[k], "}");
  char lease[32];
  snprintf(lease, sizeof lease, "%.3f", daemon__cl_lease(d));
  const char *p4[] = {c_id.s,  c_a.s,    c_slot.s,  c_trig.s, c_st.s,
                      c_why.s, c_hash.s, c_rerun.s, node,     lease};
  int rc = pg_query(pg,
                    "INSERT INTO luagent_runs (id, automation, slot, trigger, node, status, queued,"
                    " started, finished, lease_until, error, file_hash, rerun)"
                    " SELECT id, a, s, tr, CASE WHEN st = 'queued' THEN NULL ELSE $9 END, st, " NOW
                    ", CASE WHEN st = 'queued' THEN NULL ELSE " NOW
                    " END,"
                    " CASE WHEN st = 'skipped' THEN " NOW
                    " END,"
                    " CASE WHEN st = 'running' THEN " NOW
                    " + $10::float8 END, why, h, rr"
                    " FROM unnest($1::text[], $2::text[], $3::float8[], $4::text[], $5::text[],"
                    " $6::text[], $7::text[], $8::boolean[]) AS t(id, a, s, tr, st, why, h, rr)",
                    10, p4, NULL, &e);
  for (int k = 0; k < 8; k++) sbuf_free(cols[k]);
  if (rc || pg_commit(pg, &e)) goto fail;
  /* committed: the local runs, and what this host's log says */
  for (int i = 0; i < n; i++) {
    struct item *x = &it[i];
    if (!x->won) continue;
    struct entry *ent = x->due->ent;
    if (!strcmp(x->status, "skipped")) {
      daemon__say(d, "%s: skipped: %s", ent->name, x->why);
      continue;
    }
    if (!strcmp(x->status, "queued")) {
      daemon__say(d, "%s: queued %s (mode queued; a host starts it in turn)", ent->name, x->id);
      continue;
    }
    if (ent->a->mode == MODE_RESTART) daemon__cl_stop_restarted(d, ent, x->id);
    struct run *run = daemon__new_run(d, ent, x->due->trig, NULL);
    x->due->trig = NULL; /* the run has it */
    snprintf(run->id, sizeof run->id, "%s", x->id);
    run->cl = 1;
    run->attempt = 1;
  }
  goto out;
fail:
  PQclear(r);
  pg_rollback(pg);
  daemon__cl_failed(d, &e);
out:
  sbuf_free(&names);
  sbuf_free(&slots);
  sbuf_free(&ids);
  sbuf_free(&nexts);
}

static uint32_t fnv(const char *a, const char *b) {
  uint32_t h = 2166136261u;
  for (const char *p = a; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
  h = (h ^ '/') * 16777619u;
  for (const char *p = b; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
  h ^= h >> 15; /* FNV's low bits mix poorly */
  h *= 0x2c1b3c6du;
  h ^= h >> 12;
  return h;
}

/* 1 when this host is name's preferred node (or the live list is empty or
 * lacks this host: then it does not defer). */
static int preferred(struct daemon *d, const char *name) {
  const char *me = daemon__cl_node(d);
  int in = 0;
  uint32_t best = 0, mine = fnv(me, name);
  for (int i = 0; i < d->ncl_alive; i++) {
    uint32_t h = fnv(d->cl_alive[i], name);
    if (!strcmp(d->cl_alive[i], me))
      in = 1;
    else if (h > best)
      best = h;
  }
  return !in || mine >= best;
}

static void claim_all(struct daemon *d, struct daemon_due *due, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) /* what a reload took away meanwhile */
    if (due[i].ent->a && !due[i].ent->deleted && due[i].ent->enabled)
      due[k++] = due[i];
    else
      cJSON_Delete(due[i].trig);
  n = k;
  for (size_t i = 0; i < n; i += BATCH) {
    if (!daemon__cl_up(d)) break; /* the outage was said; other hosts run them */
    claim_batch(d, due + i, (int)(n - i < BATCH ? n - i : BATCH));
    daemon__cl_keepalive(d);
  }
  for (size_t i = 0; i < n; i++) cJSON_Delete(due[i].trig);
}

void daemon__cl_fire_due(struct daemon *d, struct daemon_due *due, size_t n) {
  size_t now_n = 0;
  double mono = util_monotonic();
  for (size_t i = 0; i < n; i++) {
    const struct automation *a = due[i].ent->a;
    if (a->trig == TRIG_EVERY) due[i].slot = floor(due[i].slot / a->every_s + 1e-6) * a->every_s;
    if (a->trig == TRIG_AT) due[i].slot = a->at; /* one slot, whenever it fires */
    if (preferred(d, due[i].ent->name)) {
      due[now_n++] = due[i];
      continue;
    }
    /* a backup: a quarter of the period, at most 250 ms, after the slot */
    double wait = a->trig == TRIG_EVERY ? fmin(0.25, a->every_s / 4) : 0.25;
    if (d->ncl_later == d->cap_later)
      d->cl_later = xrealloc(
          d->cl_later, (d->cap_later = d->cap_later ? d->cap_later * 2 : 64) * sizeof *d->cl_later);
    due[i].at = mono + wait;
    d->cl_later[d->ncl_later++] = due[i];
  }
  claim_all(d, due, now_n);
}

void daemon__cl_fire_later(struct daemon *d) {
  if (!d->ncl_later) return;
  double mono = util_monotonic();
  struct daemon_due *go = xmalloc(d->ncl_later * sizeof *go);
  size_t n = 0, k = 0;
  for (size_t i = 0; i < d->ncl_later; i++)
    if (d->cl_later[i].at <= mono)
      go[n++] = d->cl_later[i];
    else
      d->cl_later[k++] = d->cl_later[i];
  d->ncl_later = k;
  claim_all(d, go, n);
  free(go);
}

double daemon__cl_later_wait(struct daemon *d) {
  double w = 3600, mono = util_monotonic();
  for (size_t i = 0; i < d->ncl_later; i++) w = fmin(w, d->cl_later[i].at - mono);
  return w < 0 ? 0 : w;
}

void daemon__cl_forget_later(struct daemon *d, struct entry *ent) {
  size_t k = 0;
  for (size_t i = 0; i < d->ncl_later; i++)
    if (!ent || d->cl_later[i].ent == ent)
      cJSON_Delete(d->cl_later[i].trig);
    else
      d->cl_later[k++] = d->cl_later[i];
  d->ncl_later = k;
}
