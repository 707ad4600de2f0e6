/* cluster_migrate.c - see cluster_migrate.h. */
#include "cluster_migrate.h"

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "store.h"
#include "util.h"

#define NOW "extract(epoch from clock_timestamp())"

static const char *col(sqlite3_stmt *s, int i) {
  return (const char *)sqlite3_column_text(s, i);
}

/* A column as text for a parameter: NULL stays NULL; numbers as %.6f so
 * they compare equal to what the cluster stores. */
static const char *num(sqlite3_stmt *s, int i, char *buf, size_t n) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return NULL;
  snprintf(buf, n, "%.6f", sqlite3_column_double(s, i));
  return buf;
}

/* 1 when (what, key) was copied before; 0 not; <0 error. */
static int imported(struct pg *p, const char *what, const char *key, struct err *e) {
  const char *q[] = {what, key};
  PGresult *r;
  if (pg_query(p, "SELECT 1 FROM luagent_imports WHERE what = $1 AND key = $2", 2, q, &r, e))
    return ERR_IO;
  int n = PQntuples(r);
  PQclear(r);
  return n > 0;
}

static int remember(struct pg *p, const char *what, const char *key, struct err *e) {
  const char *q[] = {what, key};
  return pg_query(p,
                  "INSERT INTO luagent_imports (what, key, imported) VALUES ($1, $2, " NOW
                  ") ON CONFLICT DO NOTHING",
                  2, q, NULL, e);
}

static void conflict(struct cluster_migrate_counts *n, const char *fmt, const char *a) {
  if (!n->conflicts++) snprintf(n->first_conflict, sizeof n->first_conflict, fmt, a);
}

/* One local row into one cluster table. ins: INSERT ... ON CONFLICT DO
 * NOTHING RETURNING 1; same: SELECT 1 ... when the cluster's row equals
 * the local one; upd: the forced replacement. All take the same params. */
static int copy_row(struct pg *p, const char *what, const char *key, const char *ins,
                    const char *same, const char *upd, int np, const char *const *params, int force,
                    long long *copied, struct cluster_migrate_counts *n, struct err *e) {
  int was = imported(p, what, key, e);
  if (was < 0) return ERR_IO;
  if (was) {
    n->already++;
    return 0;
  }
  PGresult *r;
  if (pg_query(p, ins, np, params, &r, e)) return ERR_IO;
  int inserted = PQntuples(r);
  PQclear(r);
  if (!inserted) {
    if (pg_query(p, same, np, params, &r, e)) return ERR_IO;
    int eq = PQntuples(r);
    PQclear(r);
    if (eq) {
      n->same++;
    } else {
      char label[200];
      snprintf(label, sizeof label, "%s %s", what, key);
      conflict(n, "%s differs from the cluster's", label);
      if (!force) return 0;
      if (pg_query(p, upd, np, params, NULL, e)) return ERR_IO;
      (*copied)++;
    }
  } else {
    (*copied)++;
  }
  return remember(p, what, key, e);
}

static int schedules(struct pg *p, struct store *st, int force, struct cluster_migrate_counts *n,
                     struct err *e) {
  sqlite3_stmt *s;
  if (store_prepare(st,
                    "SELECT name, next_fire, trigger_key, enabled, state, state_tainted, last_run,"
                    " last_status FROM automations ORDER BY name",
                    &s, e))
    return ERR_IO;
  int rc = 0;
  while (!rc && sqlite3_step(s) == SQLITE_ROW) {
    char nf[64], lr[64];
    const char *en = sqlite3_column_type(s, 3) == SQLITE_NULL ? NULL
                     : sqlite3_column_int(s, 3)               ? "t"
                                                              : "f";
    const char *sp[] = {col(s, 0), num(s, 1, nf, sizeof nf), col(s, 2), en};
    rc = copy_row(p, "schedule", col(s, 0),
                  "INSERT INTO luagent_schedules (automation, next_fire, trigger_key, enabled,"
                  " updated, updated_by) VALUES ($1, $2::float8, $3, $4::boolean, " NOW
                  ", 'migrate') ON CONFLICT DO NOTHING RETURNING 1",
                  "SELECT 1 FROM luagent_schedules WHERE automation = $1 AND trigger_key IS NOT"
                  " DISTINCT FROM $3 AND enabled IS NOT DISTINCT FROM $4::boolean"
                  " AND ($2::float8 IS NULL OR true)",
                  "UPDATE luagent_schedules SET next_fire = $2::float8, trigger_key = $3,"
                  " enabled = $4::boolean, updated = " NOW
                  ", updated_by = 'migrate'"
                  " WHERE automation = $1",
                  4, sp, force, &n->schedules, n, e);
    if (rc) break;
    const char *state = col(s, 4) ? col(s, 4) : "{}";
    /* An automation that never ran and has no state has nothing to copy. */
    if (!strcmp(state, "{}") && sqlite3_column_type(s, 6) == SQLITE_NULL) continue;
    const char *tp[] = {col(s, 0), state, sqlite3_column_int(s, 5) ? "t" : "f",
                        num(s, 6, lr, sizeof lr), col(s, 7)};
    rc = copy_row(p, "state", col(s, 0),
                  "INSERT INTO luagent_state (automation, state, updated, tainted, last_run,"
                  " last_status) VALUES ($1, $2, " NOW
                  ", $3::boolean, $4::float8, $5)"
                  " ON CONFLICT DO NOTHING RETURNING 1",
                  "SELECT 1 FROM luagent_state WHERE automation = $1 AND state::jsonb = $2::jsonb"
                  " AND tainted = $3::boolean AND ($4::float8 IS NULL OR true)"
                  " AND ($5::text IS NULL OR true)",
                  "UPDATE luagent_state SET state = $2, updated = " NOW
                  ", tainted = $3::boolean,"
                  " last_run = $4::float8, last_status = $5 WHERE automation = $1",
                  5, tp, force, &n->states, n, e);
  }
  sqlite3_finalize(s);
  return rc;
}

static int events(struct pg *p, struct store *st, const char *node,
                  struct cluster_migrate_counts *n, struct err *e) {
  sqlite3_stmt *s;
  if (store_prepare(st, "SELECT id, name, payload, created, tainted FROM event_queue ORDER BY id",
                    &s, e))
    return ERR_IO;
  int rc = 0;
  while (!rc && sqlite3_step(s) == SQLITE_ROW) {
    char key[32], cr[64];
    snprintf(key, sizeof key, "%lld", (long long)sqlite3_column_int64(s, 0));
    int was = imported(p, "event", key, e);
    if (was < 0) {
      rc = ERR_IO;
      break;
    }
    if (was) {
      n->already++;
      continue;
    }
    const char *q[] = {col(s, 1), col(s, 2), num(s, 3, cr, sizeof cr),
                       sqlite3_column_int(s, 4) ? "t" : "f", node};
    rc = pg_query(p,
                  "INSERT INTO luagent_events (name, payload, created, tainted, node) VALUES"
                  " ($1, $2, $3::float8, $4::boolean, $5)",
                  5, q, NULL, e);
    if (!rc) rc = remember(p, "event", key, e);
    if (!rc) n->events++;
  }
  sqlite3_finalize(s);
  if (!rc && n->events) rc = pg_exec(p, "SELECT pg_notify('luagent_events', '')", e);
  return rc;
}

/* The run's kept events as the cluster stores them: [{type, ts, data}]
 * without run_start/run_end (`runs show` makes those from the row). */
static char *run_events(struct store *st, const char *id) {
  sqlite3_stmt *s;
  struct err e = {0};
  if (store_prepare(st,
                    "SELECT type, ts, data FROM events WHERE run_id = ? AND type NOT IN"
                    " ('run_start', 'run_end') ORDER BY seq",
                    &s, &e))
    return NULL;
  sqlite3_bind_text(s, 1, id, -1, SQLITE_TRANSIENT);
  cJSON *arr = cJSON_CreateArray();
  while (sqlite3_step(s) == SQLITE_ROW) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", col(s, 0));
    cJSON_AddNumberToObject(ev, "ts", sqlite3_column_double(s, 1));
    cJSON *d = col(s, 2) ? json_parse_str(col(s, 2), 0, NULL) : NULL;
    cJSON_AddItemToObject(ev, "data", d ? d : cJSON_CreateNull());
    cJSON_AddItemToArray(arr, ev);
  }
  sqlite3_finalize(s);
  char *text = cJSON_GetArraySize(arr) ? json_print(arr, 0) : NULL;
  cJSON_Delete(arr);
  return text;
}

static int runs(struct pg *p, struct store *st, const char *node, int force,
                struct cluster_migrate_counts *n, struct err *e) {
  sqlite3_stmt *s;
  if (store_prepare(st,
                    "SELECT id, name, trigger, status, started, finished, result, error,"
                    " tool_calls FROM runs WHERE kind = 'automation' ORDER BY started, id",
                    &s, e))
    return ERR_IO;
  int rc = 0;
  while (!rc && sqlite3_step(s) == SQLITE_ROW) {
    char sl[64] = "", stt[64], fin[64], tc[16];
    const char *trig = col(s, 2);
    cJSON *tj = trig ? json_parse_str(trig, 0, NULL) : NULL;
    const cJSON *slot = cJSON_GetObjectItem(tj, "slot");
    if (cJSON_IsNumber(slot)) snprintf(sl, sizeof sl, "%.6f", slot->valuedouble);
    cJSON_Delete(tj);
    /* a run a dead daemon left "running" is not running any more */
    const char *status = col(s, 3);
    if (status && !strcmp(status, "running")) status = "interrupted";
    snprintf(tc, sizeof tc, "%d", sqlite3_column_int(s, 8));
    char *ev = run_events(st, col(s, 0));
    const char *q[] = {col(s, 0),
                       col(s, 1),
                       sl[0] ? sl : NULL,
                       trig,
                       node,
                       status,
                       num(s, 4, stt, sizeof stt),
                       num(s, 5, fin, sizeof fin),
                       col(s, 6),
                       col(s, 7),
                       ev,
                       tc};
    rc = copy_row(p, "run", col(s, 0),
                  "INSERT INTO luagent_runs (id, automation, slot, trigger, node, status, queued,"
                  " started, finished, result, error, events, tool_calls) VALUES ($1, $2,"
                  " $3::float8, $4, $5, $6, $7::float8, $7::float8, $8::float8, $9, $10, $11,"
                  " $12::int) ON CONFLICT DO NOTHING RETURNING 1",
                  "SELECT 1 FROM luagent_runs WHERE id = $1 AND automation = $2 AND status = $6"
                  " AND result IS NOT DISTINCT FROM $9 AND error IS NOT DISTINCT FROM $10"
                  " AND $3::float8 IS NOT DISTINCT FROM slot AND $4 IS NOT DISTINCT FROM trigger"
                  " AND abs(started - $7::float8) < 0.001 AND finished IS NOT DISTINCT FROM"
                  " $8::float8 AND ($5::text IS NULL OR true) AND ($11::text IS NULL OR true)"
                  " AND ($12::int IS NULL OR true)",
                  "UPDATE luagent_runs SET automation = $2, slot = $3::float8, trigger = $4,"
                  " node = $5, status = $6, queued = $7::float8, started = $7::float8,"
                  " finished = $8::float8, result = $9, error = $10, events = $11,"
                  " tool_calls = $12::int, lease_until = NULL WHERE id = $1",
                  12, q, force, &n->runs, n, e);
    free(ev);
  }
  sqlite3_finalize(s);
  return rc;
}

int cluster_migrate_store(struct pg *p, struct store *st, const char *node, int force,
                          struct cluster_migrate_counts *n, struct err *e) {
  memset(n, 0, sizeof *n);
  /* One migrate at a time (the schema lock's key + 1): each row's "copied before?" check and its
   * copy are two statements, and two migrates at once would both copy the rows neither had marked
   * yet (an event queued twice runs twice). The lock is the transaction's: the second waits, then
   * finds everything copied. */
  int rc = pg_exec(p, "SELECT pg_advisory_xact_lock(7815616578233461)", e);
  if (!rc) rc = schedules(p, st, force, n, e);
  if (!rc) rc = events(p, st, node, n, e);
  if (!rc) rc = runs(p, st, node, force, n, e);
  if (rc) return rc;
  if (n->conflicts && !force)
    return err_set(e, ERR_INVALID, "conflict",
                   "cluster migrate: %lld row(s) of this workspace differ from what the cluster "
                   "already has (first: %s); nothing was copied; run again with --force to "
                   "replace the cluster's rows with this host's",
                   n->conflicts, n->first_conflict);
  return 0;
}
