/* cluster_runs_read.c - see cluster_runs_read.h. */
#include "cluster_runs_read.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "cluster.h"
#include "config.h"
#include "json.h"
#include "util.h"

int cluster_connect(const char *ws, struct pg **pg, char *node, size_t n, struct err *e) {
  struct config *cfg = NULL;
  *pg = NULL;
  if (config_load(ws, &cfg, e)) return ERR_INVALID;
  struct cluster_opts o;
  int on = 0, rc = cluster_opts_load(ws, cfg, &o, &on, e);
  config_free(cfg);
  if (rc) return rc;
  if (!on) return 0;
  if (node) snprintf(node, n, "%s", o.node);
  rc = cluster_open(&o, pg, e);
  cluster_opts_free(&o);
  return rc ? rc : 1;
}

/* The columns both readers share, in this order (run_cols). */
#define RUN_COLS                                                                          \
  "id, automation, status, coalesce(started, queued), finished, tool_calls,"              \
  " coalesce(error, ''), coalesce(result, ''), coalesce(node, ''), attempt"

static cJSON *run_cols(const PGresult *r, int i) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", pg_text(r, i, 0));
  cJSON_AddStringToObject(o, "kind", "automation");
  cJSON_AddStringToObject(o, "name", pg_text(r, i, 1));
  cJSON_AddStringToObject(o, "status", pg_text(r, i, 2));
  cJSON_AddNumberToObject(o, "started", pg_number(r, i, 3, 0));
  if (*pg_text(r, i, 4)) cJSON_AddNumberToObject(o, "finished", pg_number(r, i, 4, 0));
  cJSON_AddNumberToObject(o, "tool_calls", pg_number(r, i, 5, 0));
  if (*pg_text(r, i, 6)) cJSON_AddStringToObject(o, "error", pg_text(r, i, 6));
  cJSON_AddStringToObject(o, "result", pg_text(r, i, 7));
  cJSON_AddStringToObject(o, "node", pg_text(r, i, 8));
  if (pg_number(r, i, 9, 1) > 1) cJSON_AddNumberToObject(o, "attempt", pg_number(r, i, 9, 1));
  return o;
}

int cluster_runs_list(struct pg *pg, int limit, cJSON *arr, struct err *e) {
  char lim[16];
  snprintf(lim, sizeof lim, "%d", limit);
  const char *p[] = {lim};
  PGresult *r;
  if (pg_query(pg,
               "SELECT " RUN_COLS " FROM luagent_runs"
               " ORDER BY coalesce(started, queued) DESC, id DESC LIMIT $1::int",
               1, p, &r, e))
    return ERR_IO;
  for (int i = 0; i < PQntuples(r); i++) cJSON_AddItemToArray(arr, run_cols(r, i));
  PQclear(r);
  return 0;
}

/* A row and where it stood, so that equal starts sort stably. */
struct ranked {
  cJSON *row;
  double started;
  int at;
};

static int by_started_desc(const void *a, const void *b) {
  const struct ranked *x = a, *y = b;
  if (x->started != y->started) return x->started < y->started ? 1 : -1;
  return x->at - y->at;
}

int cluster_runs_merge(struct pg *pg, int limit, cJSON *arr, struct err *e) {
  if (cluster_runs_list(pg, limit, arr, e)) return ERR_IO; /* it added nothing */
  int n = cJSON_GetArraySize(arr);
  struct ranked *v = xmalloc((size_t)(n ? n : 1) * sizeof *v);
  for (int i = 0; i < n; i++) {
    cJSON *o = cJSON_DetachItemFromArray(arr, 0);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "started");
    v[i] = (struct ranked){o, cJSON_IsNumber(s) ? s->valuedouble : 0, i};
  }
  qsort(v, (size_t)n, sizeof *v, by_started_desc);
  for (int i = 0; i < n; i++) {
    if (i < limit)
      cJSON_AddItemToArray(arr, v[i].row);
    else
      cJSON_Delete(v[i].row);
  }
  free(v);
  return 0;
}

int cluster_run_get(struct pg *pg, const char *id, cJSON **run, struct err *e) {
  const char *p[] = {id};
  PGresult *r;
  *run = NULL;
  if (pg_query(pg,
               "SELECT " RUN_COLS ", coalesce(trigger, ''), coalesce(events, ''),"
               " coalesce(takeover_of, ''), coalesce(file_hash, '')"
               " FROM luagent_runs WHERE id = $1",
               1, p, &r, e))
    return ERR_IO;
  if (!PQntuples(r)) {
    PQclear(r);
    return 1;
  }
  cJSON *o = run_cols(r, 0);
  if (*pg_text(r, 0, 10)) {
    cJSON *t = json_parse_str(pg_text(r, 0, 10), 0, NULL);
    if (t) cJSON_AddItemToObject(o, "trigger", t);
  }
  cJSON *evs = *pg_text(r, 0, 11) ? json_parse_str(pg_text(r, 0, 11), 0, NULL) : NULL;
  if (!cJSON_IsArray(evs)) {
    cJSON_Delete(evs);
    evs = cJSON_CreateArray();
  }
  cJSON_AddItemToObject(o, "events", evs);
  if (*pg_text(r, 0, 12)) cJSON_AddStringToObject(o, "takeover_of", pg_text(r, 0, 12));
  if (*pg_text(r, 0, 13)) cJSON_AddStringToObject(o, "file_hash", pg_text(r, 0, 13));
  PQclear(r);
  *run = o;
  return 0;
}

int cluster_run_status(struct pg *pg, const char *id, char *status, size_t n, struct err *e) {
  const char *p[] = {id};
  PGresult *r;
  if (pg_query(pg, "SELECT status FROM luagent_runs WHERE id = $1", 1, p, &r, e)) return ERR_IO;
  int found = PQntuples(r) > 0;
  if (found) snprintf(status, n, "%s", pg_text(r, 0, 0));
  PQclear(r);
  return found ? 0 : 1;
}
