/* console_api.c - the routes under /api/ (docs/console-api.md lists them).
 * Runs and approvals are read from the state database here; decisions go
 * through approver_decide_audited; automations, skills, tools and audit
 * answers are the luagent binary's own --json output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "approver.h"
#include "automation.h"
#include "cluster_queue.h"
#include "cluster_runs_read.h"
#include "config.h"
#include "console_impl.h"
#include "json.h"
#include "run_row.h"
#include "secrets.h"
#include "store.h"

/* ------------------------------------------------------------------ */
/* child commands */

/* Strips "luagent: " and the trailing newline from a child's stderr. */
static void tidy(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = 0;
  if (!strncmp(s, "luagent: ", 9)) memmove(s, s + 9, n - 9 + 1);
}

/* Runs a --json command; ok_mask has bit k set for each exit code k that
 * still means "here is the answer" (skills check exits 1 with problems).
 * The parsed output goes into r (with list, always an array: JSON lines
 * of one row are one value), else an error naming what the command
 * said. */
static int cli_reply_as(struct console *c, struct console_reply *r, const char *const *argv,
                        unsigned ok_mask, double timeout_s, int list) {
  char *out = NULL, *err_text = NULL;
  int code = -1;
  struct err e = {0};
  if (console__cli(c, argv, timeout_s, &out, &err_text, &code, &e))
    return console__error(r, 500, "%s", e.msg);
  tidy(err_text);
  if (code < 0) {
    console__error(r, 504, "`luagent %s` did not finish within %gs", argv[0], timeout_s);
  } else if (code < 31 && (ok_mask >> code) & 1u) {
    cJSON *j = console__parse_output(out);
    if (!j) {
      console__error(r, 500, "`luagent %s` printed something that is not JSON", argv[0]);
    } else if (list && !cJSON_IsArray(j)) {
      r->json = cJSON_CreateArray();
      cJSON_AddItemToArray(r->json, j);
    } else {
      r->json = j;
    }
  } else {
    console__error(r, code == 2 ? 400 : 500, "%s", *err_text ? err_text : "failed");
  }
  free(out);
  free(err_text);
  return 0;
}

/* A command that prints rows (JSON lines). */
static int cli_reply(struct console *c, struct console_reply *r, const char *const *argv,
                     unsigned ok_mask, double timeout_s) {
  return cli_reply_as(c, r, argv, ok_mask, timeout_s, 1);
}

/* A command that prints one object. */
static int cli_reply1(struct console *c, struct console_reply *r, const char *const *argv,
                      unsigned ok_mask, double timeout_s) {
  return cli_reply_as(c, r, argv, ok_mask, timeout_s, 0);
}

/* ------------------------------------------------------------------ */
/* runs */

static const char *col(sqlite3_stmt *st, int i) {
  const unsigned char *s = sqlite3_column_text(st, i);
  return s ? (const char *)s : "";
}

/* A run's columns, as `runs list --json` shows them, and its session. */
#define RUN_COLS RUN_ROW_COLS ", coalesce(session, '')"

cJSON *console__cluster_events(const char *run_id, const cJSON *kept, long long after) {
  cJSON *out = cJSON_CreateArray();
  long long n = 0;
  const cJSON *ev;
  cJSON_ArrayForEach(ev, kept) {
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ev, "type"));
    if (!type || ++n <= after) continue; /* not an event: another writer's row */
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(ev, "ts");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(ev, "data");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "cursor", (double)n);
    cJSON_AddStringToObject(o, "run_id", run_id);
    cJSON_AddNumberToObject(o, "seq", (double)n);
    cJSON_AddNumberToObject(o, "ts", cJSON_IsNumber(ts) ? ts->valuedouble : 0);
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddItemToObject(o, "data", data ? cJSON_Duplicate(data, 1) : cJSON_CreateNull());
    cJSON_AddItemToArray(out, o);
  }
  return out;
}

/* The workspace's cluster, when luagent.lua has one: 1 (*pg set), 0 (none),
 * or an error reply already made (-1). */
static int cluster_of(struct console *c, struct pg **pg, struct console_reply *r) {
  struct err e = {0};
  int on = cluster_connect(c->workspace, pg, NULL, 0, &e);
  if (on >= 0) return on;
  console__error(r, on == ERR_IO ? 502 : 500, "%s", e.msg);
  return -1;
}

/* This host's runs; with a cluster, its automation runs are the cluster's
 * (every host's, each with its node), as `luagent runs list` shows them. */
static int runs_list(struct console *c, const struct console_req *q, struct console_reply *r) {
  const char *ls = console__query(q, "limit");
  int limit = ls ? atoi(ls) : 50;
  if (limit < 1 || limit > 1000) return console__error(r, 400, "limit must be 1-1000");
  const char *top = console__query(q, "nested");
  struct pg *pg = NULL;
  int cluster = cluster_of(c, &pg, r);
  if (cluster < 0) return 0;
  struct store *s = NULL;
  struct err e = {0};
  if (store_open(c->workspace, &s, &e)) {
    pg_close(pg);
    return console__error(r, 500, "%s", e.msg);
  }
  sqlite3_stmt *st = NULL;
  char sql[1200];
  int nested = top && !strcmp(top, "1");
  snprintf(sql, sizeof sql, "SELECT " RUN_COLS " FROM runs WHERE %s AND %s ORDER BY started DESC, id DESC "
           "LIMIT ?", nested ? "1" : "parent IS NULL", cluster ? "kind != 'automation'" : "1");
  if (store_prepare(s, sql, &st, &e)) {
    store_close(s);
    pg_close(pg);
    return console__error(r, 500, "%s", e.msg);
  }
  sqlite3_bind_int(st, 1, limit);
  cJSON *all = cJSON_CreateArray();
  while (sqlite3_step(st) == SQLITE_ROW) {
    cJSON_AddItemToArray(all, run_row_json(st, RUN_ROW_FINISHED_NULL));
  }
  sqlite3_finalize(st);
  store_close(s);
  if (cluster) {
    int rc = cluster_runs_merge(pg, limit, all, &e);
    pg_close(pg);
    if (rc) {
      cJSON_Delete(all);
      return console__error(r, 502, "%s", e.msg);
    }
    cJSON *o; /* a run still going has finished: null, as a local one has */
    cJSON_ArrayForEach(o, all) {
      if (!cJSON_GetObjectItem(o, "finished")) cJSON_AddNullToObject(o, "finished");
    }
  }
  r->json = all;
  return 0;
}

/* A run of another host (with a cluster): its row and the events it kept,
 * in the shape of a local run's. 1 when the cluster has no such run. */
static int cluster_run_show(struct console *c, const char *id, struct console_reply *r) {
  struct pg *pg = NULL;
  int cluster = cluster_of(c, &pg, r);
  if (cluster <= 0) return cluster < 0 ? 0 : 1;
  cJSON *run = NULL;
  struct err e = {0};
  int rc = cluster_run_get(pg, id, &run, &e);
  pg_close(pg);
  if (rc < 0) {
    console__error(r, 502, "%s", e.msg);
    return 0;
  }
  if (rc) return 1;
  cJSON *kept = cJSON_DetachItemFromObject(run, "events");
  if (!cJSON_GetObjectItem(run, "finished")) cJSON_AddNullToObject(run, "finished");
  r->json = cJSON_CreateObject();
  cJSON_AddItemToObject(r->json, "run", run);
  cJSON_AddItemToObject(r->json, "events", console__cluster_events(id, kept, 0));
  cJSON_Delete(kept);
  return 0;
}

static int run_show(struct console *c, const char *id, struct console_reply *r) {
  struct store *s = NULL;
  struct err e = {0};
  if (store_open(c->workspace, &s, &e)) return console__error(r, 500, "%s", e.msg);
  sqlite3_stmt *st = NULL;
  int rc = 0;
  if (store_prepare(s, "SELECT " RUN_COLS " FROM runs WHERE id = ?", &st, &e)) {
    rc = console__error(r, 500, "%s", e.msg);
    goto out;
  }
  sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
  if (sqlite3_step(st) != SQLITE_ROW) {
    if (cluster_run_show(c, id, r)) rc = console__error(r, 404, "no run with id '%s'", id);
    goto out;
  }
  r->json = cJSON_CreateObject();
  cJSON_AddItemToObject(r->json, "run", run_row_json(st, RUN_ROW_FINISHED_NULL));
  sqlite3_finalize(st);
  st = NULL;
  /* the run's events and those of runs nested in it (delegate), as the
   * stream sends them: cursor is the row's rowid */
  if (store_prepare(s,
                    "SELECT rowid, run_id, seq, ts, type, data FROM events WHERE run_id=?1 OR "
                    "run_id IN (SELECT id FROM runs WHERE parent=?1) ORDER BY rowid LIMIT 20000",
                    &st, &e)) {
    rc = console__error(r, 500, "%s", e.msg);
    goto out;
  }
  sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
  cJSON *evs = cJSON_AddArrayToObject(r->json, "events");
  while (sqlite3_step(st) == SQLITE_ROW) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "cursor", (double)sqlite3_column_int64(st, 0));
    cJSON_AddStringToObject(o, "run_id", col(st, 1));
    cJSON_AddNumberToObject(o, "seq", sqlite3_column_int(st, 2));
    cJSON_AddNumberToObject(o, "ts", sqlite3_column_double(st, 3));
    cJSON_AddStringToObject(o, "type", col(st, 4));
    cJSON *d = json_parse_str(col(st, 5), 0, NULL);
    cJSON_AddItemToObject(o, "data", d ? d : cJSON_CreateNull());
    cJSON_AddItemToArray(evs, o);
  }
out:
  sqlite3_finalize(st);
  store_close(s);
  return rc;
}

/* ------------------------------------------------------------------ */
/* approvals */

static int approvals_list(struct console *c, const struct console_req *q,
                          struct console_reply *r) {
  const char *all = console__query(q, "all");
  struct config *cfg = NULL;
  struct store *s = NULL;
  struct cluster_policy *cp = NULL;
  struct approval_queue aq;
  struct audit_sink sink;
  struct err e = {0};
  if (config_load(c->workspace, &cfg, &e)) return console__error(r, 500, "%s", e.msg);
  cJSON *arr = NULL;
  if (cluster_policy_open(c->workspace, cfg, &s, &cp, &aq, &sink, &e) ||
      aq.ops->list(aq.ud, all && !strcmp(all, "1"), &arr, &e))
    console__error(r, 500, "%s", e.msg);
  else {
    secrets_redact_json(arr);
    r->json = arr;
  }
  cluster_policy_free(cp);
  store_close(s);
  config_free(cfg);
  return 0;
}

static int approval_decide(struct console *c, const struct console_req *q, long long id,
                           int approve, struct console_reply *r) {
  const cJSON *reason = cJSON_GetObjectItemCaseSensitive(q->body, "reason");
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(q->body, "args");
  for (const cJSON *k = q->body->child; k; k = k->next)
    if (strcmp(k->string, approve ? "args" : "reason"))
      return console__error(r, 400, "unknown field '%s' (%s takes only %s)", k->string,
                            approve ? "approve" : "deny", approve ? "args" : "reason");
  if (reason && !cJSON_IsString(reason))
    return console__error(r, 400, "reason must be a string");
  if (reason && strlen(reason->valuestring) > 400)
    return console__error(r, 400, "reason is over 400 bytes");
  if (args && !cJSON_IsObject(args))
    return console__error(r, 400, "args must be a JSON object (the modified arguments)");
  struct config *cfg = NULL;
  struct store *s = NULL;
  struct cluster_policy *cp = NULL;
  struct approval_queue aq;
  struct audit_sink sink;
  struct err e = {0};
  if (config_load(c->workspace, &cfg, &e)) return console__error(r, 500, "%s", e.msg);
  if (cluster_policy_open(c->workspace, cfg, &s, &cp, &aq, &sink, &e)) {
    cluster_policy_free(cp);
    store_close(s);
    config_free(cfg);
    return console__error(r, 500, "%s", e.msg);
  }
  struct approver_decision d = {.id = id,
                                .approve = approve,
                                .reason = reason ? reason->valuestring : NULL,
                                .new_args = args,
                                .caller_kind = "operator",
                                .caller_name = "console",
                                .by = "console",
                                .decided_by = "console",
                                .sign = config_bool(cfg, "audit.sign", 0)};
  char warning[800];
  int rc = approver_decide_audited_in(&aq, &sink, &d, warning, sizeof warning, &e);
  if (rc)
    console__error(r, rc == ERR_NOTFOUND ? 404 : rc == ERR_INVALID ? 409 : 500, "%s", e.msg);
  else {
    r->json = cJSON_CreateObject();
    cJSON_AddNumberToObject(r->json, "id", (double)id);
    cJSON_AddStringToObject(r->json, "status",
                            approve ? (args ? "modified" : "approved") : "denied");
    if (warning[0]) cJSON_AddStringToObject(r->json, "warning", warning);
  }
  cluster_policy_free(cp);
  store_close(s);
  config_free(cfg);
  return 0;
}

/* ------------------------------------------------------------------ */
/* routing */

/* "/api/x/NAME/verb" -> NAME (into buf) and verb; 0 when it has that shape. */
static int split2(const char *rest, char *name, size_t n, const char **verb) {
  const char *sl = strchr(rest, '/');
  size_t len = sl ? (size_t)(sl - rest) : strlen(rest);
  if (!len || len >= n) return -1;
  memcpy(name, rest, len);
  name[len] = 0;
  *verb = sl ? sl + 1 : "";
  return 0;
}

static int is_get(const struct console_req *q) { return !strcmp(q->method, "GET"); }

static int automations(struct console *c, const struct console_req *q, const char *rest,
                       struct console_reply *r) {
  if (!*rest) {
    if (!is_get(q)) return console__error(r, 405, "GET /api/automations");
    const char *argv[] = {"automations", "list", NULL};
    return cli_reply(c, r, argv, 1u, 30);
  }
  char name[128];
  const char *verb;
  if (split2(rest, name, sizeof name, &verb) || !automation_name_valid(name))
    return console__error(r, 404, "no automation named '%.100s'", rest);
  if (!strcmp(verb, "history") && is_get(q)) {
    const char *n = console__query(q, "n");
    char nb[16];
    snprintf(nb, sizeof nb, "%d", n && atoi(n) > 0 && atoi(n) <= 1000 ? atoi(n) : 20);
    const char *argv[] = {"automations", "history", name, "-n", nb, NULL};
    return cli_reply(c, r, argv, 1u, 30);
  }
  if (is_get(q)) return console__error(r, 404, "no such route");
  if (!strcmp(verb, "enable") || !strcmp(verb, "disable")) {
    const char *argv[] = {"automations", verb, name, NULL};
    char *out = NULL, *err_text = NULL;
    int code;
    struct err e = {0};
    if (console__cli(c, argv, 30, &out, &err_text, &code, &e))
      return console__error(r, 500, "%s", e.msg);
    tidy(err_text);
    if (code)
      console__error(r, code == 2 ? 404 : 500, "%s", err_text);
    else {
      r->json = cJSON_CreateObject();
      cJSON_AddStringToObject(r->json, "name", name);
      cJSON_AddBoolToObject(r->json, "enabled", !strcmp(verb, "enable"));
    }
    free(out);
    free(err_text);
    return 0;
  }
  if (!strcmp(verb, "run")) {
    const char *argv[] = {"automations", "run", name, NULL};
    char *out = NULL, *err_text = NULL;
    int code;
    struct err e = {0};
    if (console__cli(c, argv, 600, &out, &err_text, &code, &e))
      return console__error(r, 500, "%s", e.msg);
    tidy(err_text);
    if (code == 2)
      console__error(r, 404, "%s", err_text);
    else {
      r->json = cJSON_CreateObject();
      cJSON_AddStringToObject(r->json, "name", name);
      cJSON_AddStringToObject(r->json, "status", code == 0 ? "ok" : "failed");
      size_t n = strlen(out);
      while (n && out[n - 1] == '\n') out[--n] = 0;
      cJSON_AddStringToObject(r->json, "result", out);
      if (code) cJSON_AddStringToObject(r->json, "error", err_text);
    }
    free(out);
    free(err_text);
    return 0;
  }
  return console__error(r, 404, "no such route");
}

static int skills(struct console *c, const struct console_req *q, const char *rest,
                  struct console_reply *r) {
  if (!is_get(q)) return console__error(r, 405, "the skills routes are GET only");
  if (!*rest) {
    const char *argv[] = {"skills", "list", NULL};
    return cli_reply(c, r, argv, 1u, 30);
  }
  if (!strcmp(rest, "check")) {
    const char *argv[] = {"skills", "check", NULL};
    return cli_reply(c, r, argv, 3u, 30);
  }
  if (!strcmp(rest, "select")) {
    const char *m = console__query(q, "message");
    if (!m || !*m) return console__error(r, 400, "select needs ?message=...");
    if (strlen(m) > 4000) return console__error(r, 400, "message over 4000 bytes");
    const char *argv[] = {"skills", "select", "--explain", "--", m, NULL};
    return cli_reply1(c, r, argv, 1u, 60);
  }
  return console__error(r, 404, "no such route");
}

static int audit(struct console *c, const struct console_req *q, const char *rest,
                 struct console_reply *r) {
  if (!is_get(q)) return console__error(r, 405, "the audit routes are GET only");
  if (!strcmp(rest, "tail")) {
    const char *n = console__query(q, "n");
    char nb[16];
    snprintf(nb, sizeof nb, "%d", n && atoi(n) > 0 && atoi(n) <= 5000 ? atoi(n) : 50);
    const char *argv[] = {"audit", "tail", "-n", nb, NULL};
    return cli_reply(c, r, argv, 1u, 30);
  }
  if (!strcmp(rest, "verify")) {
    const char *argv[] = {"audit", "verify", NULL};
    return cli_reply1(c, r, argv, 3u, 120);
  }
  if (!strcmp(rest, "head")) {
    const char *argv[] = {"audit", "head", NULL};
    return cli_reply1(c, r, argv, 1u, 30);
  }
  return console__error(r, 404, "no such route");
}

int console__api(struct console *c, const struct console_req *q, struct console_reply *r) {
  const char *p = q->path + 5; /* after "/api/" */
  if (!strcmp(p, "runs")) {
    if (!is_get(q)) return console__error(r, 405, "GET /api/runs");
    return runs_list(c, q, r);
  }
  if (!strncmp(p, "runs/", 5)) {
    char id[128];
    const char *verb;
    if (split2(p + 5, id, sizeof id, &verb) || !is_get(q))
      return console__error(r, 404, "no such route");
    if (!*verb) return run_show(c, id, r);
    if (!strcmp(verb, "stream")) {
      const char *a = console__query(q, "after");
      const char *lei = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "Last-Event-ID");
      long long after = lei ? atoll(lei) : a ? atoll(a) : 0;
      r->stream = console__run_stream(c, q->conn, id, after);
      return 0;
    }
    return console__error(r, 404, "no such route");
  }
  if (!strcmp(p, "approvals")) {
    if (!is_get(q)) return console__error(r, 405, "GET /api/approvals");
    return approvals_list(c, q, r);
  }
  if (!strncmp(p, "approvals/", 10)) {
    char ids[32];
    const char *verb;
    char *end;
    if (split2(p + 10, ids, sizeof ids, &verb)) return console__error(r, 404, "no such route");
    long long id = strtoll(ids, &end, 10);
    if (*end || id <= 0) return console__error(r, 404, "'%s' is not an approval id", ids);
    if (is_get(q)) return console__error(r, 405, "approve and deny are POST");
    if (!strcmp(verb, "approve")) return approval_decide(c, q, id, 1, r);
    if (!strcmp(verb, "deny")) return approval_decide(c, q, id, 0, r);
    return console__error(r, 404, "no such route");
  }
  if (!strcmp(p, "tools")) {
    if (!is_get(q)) return console__error(r, 405, "GET /api/tools");
    const char *argv[] = {"tools", "list", NULL};
    return cli_reply(c, r, argv, 1u, 30);
  }
  if (!strcmp(p, "automations")) return automations(c, q, "", r);
  if (!strncmp(p, "automations/", 12)) return automations(c, q, p + 12, r);
  if (!strcmp(p, "skills")) return skills(c, q, "", r);
  if (!strncmp(p, "skills/", 7)) return skills(c, q, p + 7, r);
  if (!strncmp(p, "audit/", 6)) return audit(c, q, p + 6, r);
  if (!strcmp(p, "chat") && !is_get(q)) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(q->body, "message");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(q->body, "mode");
    const cJSON *sess = cJSON_GetObjectItemCaseSensitive(q->body, "session");
    if (!cJSON_IsString(m) || !*m->valuestring)
      return console__error(r, 400, "message must be a non-empty string");
    if (mode && (!cJSON_IsString(mode) ||
                 (strcmp(mode->valuestring, "chat") && strcmp(mode->valuestring, "ask"))))
      return console__error(r, 400, "mode must be \"chat\" or \"ask\"");
    if (sess && !cJSON_IsString(sess)) return console__error(r, 400, "session must be a string");
    return console__chat_start(c, mode ? mode->valuestring : "chat", m->valuestring,
                               sess ? sess->valuestring : NULL, r);
  }
  if (!strcmp(p, "chat")) {
    r->json = console__chats_list(c);
    return 0;
  }
  if (!strncmp(p, "chat/", 5)) return console__chat_route(c, q, p + 5, r);
  return console__error(r, 404, "no route %s %s", q->method, q->path);
}
