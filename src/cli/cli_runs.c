/* cli_runs.c - `luagent runs list [--limit N]` and `luagent runs show ID`:
 * the run journal. `show` replays the stored events through the same
 * renderers a live run uses (--json for JSON lines). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_cluster.h"
#include "cluster_runs_read.h"
#include "cron.h"
#include "journal.h"
#include "json.h"
#include "render.h"
#include "run_row.h"
#include "store.h"
#include "util.h"

/* The workspace of this command, for runs show's look in the cluster. */
static const char *store_workspace_hint = ".";

static const char *col(sqlite3_stmt *st, int i) {
  const unsigned char *s = sqlite3_column_text(st, i);
  return s ? (const char *)s : "";
}

static int runs_list(struct store *s, int json, int limit) {
  sqlite3_stmt *st = NULL;
  struct err e = {0};
  if (store_prepare(s, "SELECT " RUN_ROW_COLS " FROM runs ORDER BY started DESC, id DESC LIMIT ?",
                    &st, &e))
    return cli_fail(1, "%s", e.msg);
  sqlite3_bind_int(st, 1, limit);
  if (!json)
    printf("%-28s %-10s %-11s %-19s %7s %5s  %s\n", "ID", "KIND", "STATUS", "STARTED", "SECS",
           "TOOLS", "RESULT");
  cJSON *arr = cJSON_CreateArray();
  while (sqlite3_step(st) == SQLITE_ROW) {
    double started = sqlite3_column_double(st, 4), finished = sqlite3_column_double(st, 5);
    if (json) {
      cJSON_AddItemToArray(arr, run_row_json(st, 0));
      continue;
    }
    char when[32];
    time_t tt = (time_t)started;
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&tt, &tm));
    char secs[16] = "-";
    if (sqlite3_column_type(st, 5) != SQLITE_NULL)
      snprintf(secs, sizeof secs, "%.2f", finished - started);
    const char *summary = *col(st, 8) ? col(st, 8) : col(st, 9);
    struct sbuf b = {0};
    util_escape_text(&b, summary, strlen(summary), 60);
    printf("%-28s %-10s %-11s %-19s %7s %5d  %s\n", col(st, 0), col(st, 1), col(st, 3), when, secs,
           sqlite3_column_int(st, 6), b.s ? b.s : "");
    sbuf_free(&b);
  }
  sqlite3_finalize(st);
  if (json) cli_print_json(arr);
  cJSON_Delete(arr);
  return 0;
}

static double num_of(const cJSON *o, const char *k) {
  return cJSON_GetNumberValue(cJSON_GetObjectItem(o, k));
}

/* One row of the table: a local run, or another host's (escaped). */
static void print_cluster_row(const cJSON *o) {
  double started = num_of(o, "started");
  char when[32], secs[16] = "-";
  time_t tt = (time_t)started;
  struct tm tm;
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&tt, &tm));
  if (cJSON_GetObjectItem(o, "finished"))
    snprintf(secs, sizeof secs, "%.2f", num_of(o, "finished") - started);
  const char *er = cJSON_GetStringValue(cJSON_GetObjectItem(o, "error"));
  const char *summary = er ? er : cJSON_GetStringValue(cJSON_GetObjectItem(o, "result"));
  const char *node = cJSON_GetStringValue(cJSON_GetObjectItem(o, "node"));
  struct sbuf b = {0};
  util_escape_text(&b, summary ? summary : "", summary ? strlen(summary) : 0, 60);
  printf("%-28s %-10s %-11s %-19s %7s %5d %-12s %s\n",
         cJSON_GetStringValue(cJSON_GetObjectItem(o, "id")),
         cJSON_GetStringValue(cJSON_GetObjectItem(o, "kind")),
         cJSON_GetStringValue(cJSON_GetObjectItem(o, "status")), when, secs,
         (int)num_of(o, "tool_calls"), node ? node : "(here)", b.s ? b.s : "");
  sbuf_free(&b);
}

/* With a cluster: this host's own runs (ask, chat, scripts) and the
 * cluster's automation runs, newest first, with the node of each. */
static int runs_list_cluster(struct store *s, struct pg *pg, int json, int limit) {
  sqlite3_stmt *st = NULL;
  struct err e = {0};
  cJSON *all = cJSON_CreateArray();
  if (store_prepare(s,
                    "SELECT id, kind, name, status, started, finished, tool_calls,"
                    " coalesce(parent, ''), coalesce(error, ''), coalesce(result, '') FROM runs"
                    " WHERE kind != 'automation' ORDER BY started DESC, id DESC LIMIT ?",
                    &st, &e)) {
    cJSON_Delete(all);
    return cli_fail(1, "%s", e.msg);
  }
  sqlite3_bind_int(st, 1, limit);
  while (sqlite3_step(st) == SQLITE_ROW) {
    cJSON_AddItemToArray(all, run_row_json(st, 0));
  }
  sqlite3_finalize(st);
  if (cluster_runs_merge(pg, limit, all, &e)) {
    cJSON_Delete(all);
    return cli_fail(1, "runs list: %s", e.msg);
  }
  if (json) {
    cli_print_json(all);
  } else {
    printf("%-28s %-10s %-11s %-19s %7s %5s %-12s %s\n", "ID", "KIND", "STATUS", "STARTED",
           "SECS", "TOOLS", "NODE", "RESULT");
    const cJSON *o;
    cJSON_ArrayForEach(o, all) print_cluster_row(o);
  }
  cJSON_Delete(all);
  return 0;
}

struct piece_out {
  struct render *rd;
  const char *run_id, *type;
};

static void render_piece(void *ud, const char *text, size_t len) {
  const struct piece_out *po = ud;
  (void)len;
  cJSON *data = json_parse_str(text, 0, NULL);
  render_event(po->rd, po->run_id, po->type, data);
  cJSON_Delete(data);
}

static int runs_show(struct store *s, int json, const char *id) {
  sqlite3_stmt *st = NULL;
  struct err e = {0};
  if (store_prepare(s,
                    "SELECT kind, status, started, finished, coalesce(error,''), "
                    "coalesce(parent,''), coalesce(result,''), name, trigger, tool_calls "
                    "FROM runs WHERE id=?",
                    &st, &e))
    return cli_fail(1, "%s", e.msg);
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  if (sqlite3_step(st) != SQLITE_ROW) {
    sqlite3_finalize(st);
    /* an automation run of the cluster (any host's) */
    struct pg *pg = NULL;
    int on = cluster_connect(store_workspace_hint, &pg, NULL, 0, &e);
    if (on < 0) return cli_fail(1, "runs show: %s", e.msg);
    if (on) {
      int rc = cli_cluster_run_show(pg, id, json, &e);
      pg_close(pg);
      if (rc < 0) return cli_fail(1, "runs show: %s", e.msg);
      if (rc == 0) return 0;
    }
    return cli_fail(1, "runs show: no run with id '%s' (see `luagent runs list`)", id);
  }
  if (!json) {
    fprintf(stderr, "run %s (%s), %s", id, col(st, 0), col(st, 1));
    if (*col(st, 5)) fprintf(stderr, ", inside run %s", col(st, 5));
    if (sqlite3_column_type(st, 3) != SQLITE_NULL)
      fprintf(stderr, ", %.2f s", sqlite3_column_double(st, 3) - sqlite3_column_double(st, 2));
    fputc('\n', stderr);
  }
  char status[32], error[1024], kind[32];
  snprintf(status, sizeof status, "%s", col(st, 1));
  snprintf(error, sizeof error, "%s", col(st, 4));
  snprintf(kind, sizeof kind, "%s", col(st, 0));
  char *result = xstrdup(col(st, 6)); /* an automation's result is not in an answer's text */
  /* what a run without events (a quiet automation run, a skipped slot) replays as */
  cJSON *start = cJSON_CreateObject(), *end = cJSON_CreateObject();
  cJSON_AddStringToObject(start, "kind", kind);
  cJSON_AddStringToObject(start, "name", col(st, 7));
  if (*col(st, 8)) cJSON_AddItemToObject(start, "trigger", json_parse_str(col(st, 8), 0, NULL));
  cJSON_AddStringToObject(end, "status", status);
  if (result[0]) cJSON_AddStringToObject(end, "result", result);
  if (error[0]) cJSON_AddStringToObject(end, "error", error);
  cJSON_AddNumberToObject(end, "tool_calls", sqlite3_column_int(st, 9));
  sqlite3_finalize(st);
  /* the run's events, and those of runs nested in it (delegate), in time order */
  if (store_prepare(s,
                    "SELECT run_id, type, data, pieces FROM events WHERE run_id=?1 OR run_id IN "
                    "(SELECT id FROM runs WHERE parent=?1) ORDER BY ts, run_id=?1 DESC, seq",
                    &st, &e)) {
    cJSON_Delete(start);
    cJSON_Delete(end);
    free(result);
    return cli_fail(1, "%s", e.msg);
  }
  sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
  struct render rd = {.out = stdout, .info = stderr, .json = json};
  struct event_sink sink;
  render_sink(&rd, &sink);
  snprintf(rd.top_run, sizeof rd.top_run, "%s", id);
  rd.replay = 1;
  int shown = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    if (sqlite3_column_type(st, 3) != SQLITE_NULL && sqlite3_column_type(st, 2) != SQLITE_NULL) {
      /* streamed pieces the journal stored as one row: each as it came */
      struct piece_out po = {&rd, col(st, 0), col(st, 1)};
      shown += journal_pieces(col(st, 2), col(st, 3), render_piece, &po);
      continue;
    }
    cJSON *data = json_parse_str(col(st, 2), 0, NULL);
    render_event(&rd, col(st, 0), col(st, 1), data);
    cJSON_Delete(data);
    shown++;
  }
  sqlite3_finalize(st);
  if (!shown && json) { /* its row, never nothing */
    render_event(&rd, id, "run_start", start);
    render_event(&rd, id, "run_end", end);
  }
  cJSON_Delete(start);
  cJSON_Delete(end);
  fflush(stdout);
  if (!json && !strcmp(kind, "automation") && result[0]) {
    struct sbuf b = {0};
    util_escape_text(&b, result, strlen(result), 4000);
    printf("-> %s\n", b.s ? b.s : "");
    sbuf_free(&b);
  }
  free(result);
  if (!json && error[0]) fprintf(stderr, "luagent: run %s %s: %s\n", id, status, error);
  return 0;
}

static int runs_prune(struct store *s, int json, const char *older) {
  double secs;
  struct err e = {0};
  if (duration_parse(older, &secs, &e))
    return cli_fail(2, "runs prune: --older-than %s: %s", older, e.msg);
  long long runs, events;
  if (store_prune_runs(s, util_now() - secs, &runs, &events, &e))
    return cli_fail(1, "runs prune: %s", e.msg);
  /* with a cluster, its automation runs too (every host's) */
  struct pg *pg = NULL;
  long long cruns = 0;
  int on = cluster_connect(store_workspace_hint, &pg, NULL, 0, &e);
  if (on < 0) return cli_fail(1, "runs prune: %s", e.msg);
  if (on) {
    int rc = cli_cluster_prune(pg, util_now() - secs, &cruns, &e);
    pg_close(pg);
    if (rc) return cli_fail(1, "runs prune: %s", e.msg);
  }
  if (json && on)
    printf("{\"runs\":%lld,\"events\":%lld,\"cluster_runs\":%lld}\n", runs, events, cruns);
  else if (json)
    printf("{\"runs\":%lld,\"events\":%lld}\n", runs, events);
  else
    printf("pruned %lld run(s) and %lld event(s) older than %s\n", runs, events, older);
  if (!json && on) printf("pruned %lld automation run(s) of the cluster older than %s\n", cruns, older);
  return 0;
}

int cli_runs(const struct cli_opts *o, int argc, char **argv) {
  int json = o->json, limit = 20;
  const char *sub = NULL, *id = NULL, *older = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (!strcmp(argv[i], "--older-than") && i + 1 < argc)
      older = argv[++i];
    else if (!strcmp(argv[i], "--limit") && i + 1 < argc)
      limit = atoi(argv[++i]);
    else if (argv[i][0] == '-')
      return cli_usage_fail("runs", "runs: unknown option %s", argv[i]);
    else if (!sub)
      sub = argv[i];
    else if (!id)
      id = argv[i];
    else
      return cli_fail(2, "runs: too many arguments");
  }
  if (sub && strcmp(sub, "list") && strcmp(sub, "show") && strcmp(sub, "prune"))
    return cli_unknown_sub("runs", sub);
  if (!sub || (!strcmp(sub, "show") && !id) || (!strcmp(sub, "prune") && !older))
    return cli_usage_fail("runs", NULL);
  if (limit < 1) limit = 20;
  struct store *s = NULL;
  struct err e = {0};
  /* exit 1: the disk said no; 2: the file is not ours to read */
  if (store_open(o->workspace, &s, &e)) return cli_fail(e.rc == ERR_IO ? 1 : 2, "%s", e.msg);
  store_mark_interrupted(s, &e); /* runs whose process was killed */
  store_workspace_hint = o->workspace;
  struct pg *pg = NULL;
  int on = !strcmp(sub, "list") ? cluster_connect(o->workspace, &pg, NULL, 0, &e) : 0;
  if (on < 0) {
    store_close(s);
    return cli_fail(1, "runs list: %s", e.msg);
  }
  if (on) {
    int code = runs_list_cluster(s, pg, json, limit);
    pg_close(pg);
    store_close(s);
    return code;
  }
  int code = !strcmp(sub, "list")    ? runs_list(s, json, limit)
             : !strcmp(sub, "prune") ? runs_prune(s, json, older)
                                     : runs_show(s, json, id);
  store_close(s);
  return code;
}
