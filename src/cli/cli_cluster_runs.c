/* cli_cluster_runs.c - the cluster's run journal and automation rows for
 * `runs list|show`, `automations list|history|enable|disable` (see
 * cli_cluster.h). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_cluster.h"
#include "cluster_runs_read.h"
#include "json.h"
#include "render.h"
#include "util.h"

#define NOW "extract(epoch from clock_timestamp())"

/* A field of a row cluster_run_get built (its strings and numbers). */
static const char *json_str(const cJSON *o, const char *k, const char *dflt) {
  const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
  return v ? v : dflt;
}
static double json_num(const cJSON *o, const char *k, double dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

int cli_cluster_run_show(struct pg *pg, const char *id, int json, struct err *e) {
  cJSON *run = NULL;
  int rc = cluster_run_get(pg, id, &run, e);
  if (rc) return rc;
  const char *status = json_str(run, "status", ""), *error = json_str(run, "error", "");
  const char *result = json_str(run, "result", "");
  double started = json_num(run, "started", 0), attempt = json_num(run, "attempt", 1);
  if (!json) { /* the row is any host's (or any database writer's): escaped */
    char *st = cli_safe(status, 40), *nd = cli_safe(json_str(run, "node", ""), 80);
    fprintf(stderr, "run %s (automation), %s, on node %s", id, st, nd);
    free(st);
    free(nd);
    if (cJSON_GetObjectItem(run, "finished"))
      fprintf(stderr, ", %.2f s", json_num(run, "finished", 0) - started);
    if (attempt > 1) {
      char *tk = cli_safe(json_str(run, "takeover_of", ""), 80);
      fprintf(stderr, ", attempt %.0f (after %s)", attempt, tk);
      free(tk);
    }
    if (*json_str(run, "file_hash", "")) {
      char *fh = cli_safe(json_str(run, "file_hash", ""), 12);
      fprintf(stderr, ", file %.12s", fh);
      free(fh);
    }
    fputc('\n', stderr);
  }
  cJSON *start = cJSON_CreateObject(), *end = cJSON_CreateObject();
  cJSON_AddStringToObject(start, "kind", "automation");
  cJSON_AddStringToObject(start, "name", json_str(run, "name", ""));
  cJSON_AddStringToObject(start, "node", json_str(run, "node", ""));
  cJSON *trigger = cJSON_GetObjectItem(run, "trigger");
  if (trigger) cJSON_AddItemToObject(start, "trigger", cJSON_Duplicate(trigger, 1));
  cJSON_AddStringToObject(end, "status", status);
  if (*result) cJSON_AddStringToObject(end, "result", result);
  if (*error) cJSON_AddStringToObject(end, "error", error);
  cJSON_AddNumberToObject(end, "tool_calls", json_num(run, "tool_calls", 0));
  struct render rd = {.out = stdout, .info = stderr, .json = json};
  struct event_sink sink;
  render_sink(&rd, &sink);
  snprintf(rd.top_run, sizeof rd.top_run, "%s", id);
  rd.replay = 1;
  const cJSON *evs = cJSON_GetObjectItem(run, "events");
  if (json || cJSON_GetArraySize(evs)) render_event(&rd, id, "run_start", start);
  const cJSON *ev;
  cJSON_ArrayForEach(ev, evs) {
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(ev, "type"));
    if (type) render_event(&rd, id, type, cJSON_GetObjectItem(ev, "data"));
  }
  if (json || cJSON_GetArraySize(evs)) render_event(&rd, id, "run_end", end);
  cJSON_Delete(start);
  cJSON_Delete(end);
  fflush(stdout);
  if (!json && *result) {
    struct sbuf b = {0};
    util_escape_text(&b, result, strlen(result), 4000);
    printf("-> %s\n", b.s ? b.s : "");
    sbuf_free(&b);
  }
  if (!json && *error) {
    char *safe = cli_safe(error, 2000), *st = cli_safe(status, 40);
    fprintf(stderr, "luagent: run %s %s: %s\n", id, st, safe);
    free(safe);
    free(st);
  }
  cJSON_Delete(run);
  return 0;
}

int cli_cluster_history(struct pg *pg, const char *name, int n, int json) {
  char lim[16];
  snprintf(lim, sizeof lim, "%d", n);
  const char *p[] = {name, lim};
  PGresult *r;
  struct err e = {0};
  if (pg_query(pg,
               "SELECT id, status, coalesce(started, queued), finished, result, error, trigger,"
               " tool_calls, coalesce(node, '') FROM luagent_runs WHERE automation = $1"
               " ORDER BY coalesce(started, queued) DESC, id DESC LIMIT $2::int",
               2, p, &r, &e))
    return cli_fail(1, "%s", e.msg);
  cJSON *arr = cJSON_CreateArray();
  for (int i = 0; i < PQntuples(r); i++) {
    cJSON *tj = json_parse_str(pg_text(r, i, 6), 0, NULL);
    double started = pg_number(r, i, 2, 0);
    int fin = *pg_text(r, i, 3) != 0;
    if (json) {
      cJSON *j = cJSON_CreateObject();
      cJSON_AddStringToObject(j, "run_id", pg_text(r, i, 0));
      cJSON_AddStringToObject(j, "status", pg_text(r, i, 1));
      cJSON_AddNumberToObject(j, "started", started);
      if (fin)
        cJSON_AddNumberToObject(j, "finished", pg_number(r, i, 3, 0));
      else
        cJSON_AddNullToObject(j, "finished");
      if (!PQgetisnull(r, i, 4))
        cJSON_AddStringToObject(j, "result", pg_text(r, i, 4));
      else
        cJSON_AddNullToObject(j, "result");
      if (!PQgetisnull(r, i, 5))
        cJSON_AddStringToObject(j, "error", pg_text(r, i, 5));
      else
        cJSON_AddNullToObject(j, "error");
      if (tj) cJSON_AddItemToObject(j, "trigger", cJSON_Duplicate(tj, 1));
      cJSON_AddNumberToObject(j, "tool_calls", pg_number(r, i, 7, 0));
      cJSON_AddStringToObject(j, "node", pg_text(r, i, 8));
      cJSON_AddItemToArray(arr, j);
    } else {
      char ts[32], dur[32] = "";
      time_t t = (time_t)floor(started);
      struct tm tm;
      strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
      if (fin) snprintf(dur, sizeof dur, "%.0f ms", (pg_number(r, i, 3, 0) - started) * 1000);
      const char *kind = tj ? cJSON_GetStringValue(cJSON_GetObjectItem(tj, "kind")) : NULL;
      const char *txt = !PQgetisnull(r, i, 5) ? pg_text(r, i, 5) : pg_text(r, i, 4);
      struct sbuf b = {0};
      util_escape_text(&b, txt, strlen(txt), 200);
      char *st = cli_safe(pg_text(r, i, 1), 40), *kd = cli_safe(kind ? kind : "-", 40),
           *rid = cli_safe(pg_text(r, i, 0), 60), *nd = cli_safe(pg_text(r, i, 8), 80);
      printf("%s  %-11s %-8s %-9s %s  %-12s %s\n", ts, st, kd, dur, rid, nd, b.s ? b.s : "");
      free(st);
      free(kd);
      free(rid);
      free(nd);
      sbuf_free(&b);
    }
    cJSON_Delete(tj);
  }
  if (json)
    cli_print_json(arr);
  else if (!PQntuples(r))
    printf("no runs of %s yet\n", name);
  cJSON_Delete(arr);
  PQclear(r);
  return 0;
}

int cli_cluster_automation(struct pg *pg, const char *name, struct cli_cluster_auto *out,
                           struct err *e) {
  memset(out, 0, sizeof *out);
  const char *p[] = {name};
  PGresult *r;
  if (pg_query(pg,
               "SELECT s.next_fire, s.enabled, st.last_run, st.last_status FROM"
               " (SELECT $1::text AS automation) a LEFT JOIN luagent_schedules s USING"
               " (automation) LEFT JOIN luagent_state st USING (automation)",
               1, p, &r, e))
    return ERR_IO;
  out->next = pg_number(r, 0, 0, 0);
  if (*pg_text(r, 0, 1)) {
    out->have_enabled = 1;
    out->enabled = !strcmp(pg_text(r, 0, 1), "t");
  }
  out->last = pg_number(r, 0, 2, 0);
  snprintf(out->last_status, sizeof out->last_status, "%s", pg_text(r, 0, 3));
  PQclear(r);
  /* the versions the live nodes run (a stopped node's file may be old) */
  if (pg_query(pg,
               "SELECT f.node, f.hash FROM luagent_files f JOIN luagent_nodes n USING (node)"
               " WHERE f.automation = $1 AND n.stopped IS NULL ORDER BY f.node",
               1, p, &r, e))
    return ERR_IO;
  out->versions = cJSON_CreateObject();
  for (int i = 0; i < PQntuples(r); i++) {
    cJSON_AddStringToObject(out->versions, pg_text(r, i, 0), pg_text(r, i, 1));
    if (i && strcmp(pg_text(r, i, 1), pg_text(r, 0, 1))) out->differ = 1;
  }
  PQclear(r);
  return 0;
}

int cli_cluster_set_enabled(struct pg *pg, const char *name, int on, const char *node,
                            struct err *e) {
  const char *p[] = {name, on ? "t" : "f", node};
  if (pg_query(pg,
               "INSERT INTO luagent_schedules (automation, enabled, updated, updated_by) VALUES"
               " ($1, $2::boolean, " NOW ", $3) ON CONFLICT (automation) DO UPDATE SET"
               " enabled = $2::boolean, updated = excluded.updated, updated_by = $3",
               3, p, NULL, e))
    return ERR_IO;
  return pg_exec(pg, "SELECT pg_notify('luagent_wake', '')", e);
}

int cli_cluster_prune(struct pg *pg, double before, long long *runs, struct err *e) {
  char b[32];
  snprintf(b, sizeof b, "%.3f", before);
  const char *p[] = {b};
  PGresult *r;
  *runs = 0;
  if (pg_query(pg,
               "DELETE FROM luagent_runs WHERE status NOT IN ('running', 'queued') AND"
               " coalesce(finished, queued) < $1::float8",
               1, p, &r, e))
    return ERR_IO;
  *runs = atoll(PQcmdTuples(r));
  PQclear(r);
  return 0;
}
