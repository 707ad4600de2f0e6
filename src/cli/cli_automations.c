/* cli_automations.c - `luagent automations list|run|enable|disable|history`
 * (check and next are in cli_autocheck.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "automation.h"
#include "cli.h"
#include "cli_check.h"
#include "cli_cluster.h"
#include "cluster_runs_read.h"
#include "config.h"
#include "cron.h"
#include "daemon.h"
#include "json.h"
#include "store.h"
#include "util.h"

static void fmt_time(double t, char *out, size_t n) {
  if (t <= 0) {
    snprintf(out, n, "-");
    return;
  }
  time_t x = (time_t)floor(t);
  struct tm tm;
  localtime_r(&x, &tm);
  strftime(out, n, "%Y-%m-%d %H:%M:%S", &tm);
}

static int list(const struct cli_opts *o, int json) {
  /* The same config every other command refuses is refused here too. */
  struct config *cfg = NULL;
  struct err ce = {0};
  if (config_load(o->workspace, &cfg, &ce)) return cli_fail(2, "%s", ce.msg);
  config_free(cfg);
  /* No automations/ folder is an empty list, as for skills/ ([] in JSON). */
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/automations", o->workspace);
  struct stat dst;
  if (stat(dir, &dst) || !S_ISDIR(dst.st_mode)) {
    if (json) puts("[]");
    else printf("no automations (add automations/NAME.lua)\n");
    return 0;
  }
  size_t nn = 0;
  char **names = cli_automation_files(o->workspace, &nn);
  struct store *st = NULL;
  struct err e;
  if (daemon_store_open(o->workspace, &st, &e)) {
    for (size_t i = 0; i < nn; i++) free(names[i]);
    free(names);
    return cli_fail(1, "%s", e.msg);
  }
  cJSON *arr = cJSON_CreateArray();
  size_t nbad = 0, nwarn = 0;
  int pid = 0, running = daemon_running(o->workspace, &pid);
  /* With a cluster its schedule, flags and last runs are the cluster's,
   * and the versions each host runs are shown. */
  struct pg *pg = NULL;
  int cluster = cluster_connect(o->workspace, &pg, NULL, 0, &e);
  if (cluster < 0) {
    for (size_t i = 0; i < nn; i++) free(names[i]);
    free(names);
    store_close(st);
    cJSON_Delete(arr);
    return cli_fail(1, "%s", e.msg);
  }
  if (cluster) running = 1; /* some host may be: show the shared next run */
  if (!json)
    printf("%-24s %-34s %-8s %-8s %-23s %s\n", "NAME", "TRIGGER", "MODE", "ENABLED", "NEXT RUN",
           "LAST");
  for (size_t i = 0; i < nn; i++) {
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(strlen(names[i]) - 4), names[i]);
    struct automation *a = NULL;
    struct err le = {0};
    int bad = cli_automation_load(o->workspace, names[i], &a, &le);
    nbad += bad != 0;
    char warning[300] = "";
    if (a && automation_never_fires(a, util_now(), warning, sizeof warning)) nwarn++;
    const char *tz = a ? automation_zone(a) : NULL;
    double next = 0, last = 0;
    int enabled = a ? a->enabled : 0, have_en = 0;
    char last_status[32] = "", load_error[1024] = "";
    sqlite3_stmt *s;
    if (!store_prepare(st,
                       "SELECT next_fire, enabled, last_run, last_status, load_error "
                       "FROM automations WHERE name = ?",
                       &s, &e)) {
      sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
      if (sqlite3_step(s) == SQLITE_ROW) {
        next = sqlite3_column_double(s, 0);
        if (sqlite3_column_type(s, 1) != SQLITE_NULL) {
          enabled = sqlite3_column_int(s, 1);
          have_en = 1;
        }
        last = sqlite3_column_double(s, 2);
        const char *ls = (const char *)sqlite3_column_text(s, 3);
        snprintf(last_status, sizeof last_status, "%s", ls ? ls : "");
        const char *er = (const char *)sqlite3_column_text(s, 4);
        snprintf(load_error, sizeof load_error, "%s", er ? er : "");
      }
      sqlite3_finalize(s);
    }
    (void)have_en;
    struct cli_cluster_auto ca = {0};
    if (cluster && !cli_cluster_automation(pg, name, &ca, &e)) {
      next = ca.next;
      if (ca.have_enabled) enabled = ca.enabled;
      last = ca.last;
      snprintf(last_status, sizeof last_status, "%s", ca.last_status);
      if (a && a->trig == TRIG_EVERY && next > 0 && next < util_now()) next = util_now();
    }
    if (!running && a) { /* without a daemon, show when it would fire */
      double now = util_now();
      if (next <= 0 || next < now)
        next = a->trig == TRIG_EVERY ? now : automation_next_after(a, now);
    }
    const char *err_text = bad ? le.msg : load_error;
    if (json) {
      cJSON *j = cJSON_CreateObject();
      cJSON_AddStringToObject(j, "name", name);
      cJSON_AddStringToObject(j, "trigger", a ? a->trigger_text : "");
      cJSON_AddStringToObject(j, "mode", a ? automation_mode_name(a->mode) : "");
      cJSON_AddBoolToObject(j, "enabled", enabled);
      if (next > 0 && enabled) {
        char iso[64];
        cron_format_zoned(next, tz, 1, iso, sizeof iso);
        cJSON_AddNumberToObject(j, "next_run", next);
        cJSON_AddStringToObject(j, "next_run_at", iso);
      } else {
        cJSON_AddNullToObject(j, "next_run");
        cJSON_AddNullToObject(j, "next_run_at");
      }
      if (tz) cJSON_AddStringToObject(j, "zone", tz);
      else cJSON_AddNullToObject(j, "zone");
      if (last > 0)
        cJSON_AddNumberToObject(j, "last_run", last);
      else
        cJSON_AddNullToObject(j, "last_run");
      if (last_status[0])
        cJSON_AddStringToObject(j, "last_status", last_status);
      else
        cJSON_AddNullToObject(j, "last_status");
      if (a && a->description[0]) cJSON_AddStringToObject(j, "description", a->description);
      if (err_text[0]) cJSON_AddStringToObject(j, "error", err_text);
      if (warning[0]) cJSON_AddStringToObject(j, "warning", warning);
      if (ca.versions) {
        cJSON_AddItemToObject(j, "versions", ca.versions);
        ca.versions = NULL;
        cJSON_AddBoolToObject(j, "versions_differ", ca.differ);
      }
      cJSON_AddItemToArray(arr, j);
    } else {
      char nx[64], ls[64];
      if (next > 0) cron_format_zoned(next, tz, 0, nx, sizeof nx);
      else snprintf(nx, sizeof nx, "-");
      if (last > 0) {
        char lt[32];
        fmt_time(last, lt, sizeof lt);
        snprintf(ls, sizeof ls, "%s %s", last_status, lt + 11);
      } else {
        snprintf(ls, sizeof ls, "-");
      }
      printf("%-24s %-34s %-8s %-8s %-23s %s\n", name, a ? a->trigger_text : "(does not load)",
             a ? automation_mode_name(a->mode) : "-", enabled ? "yes" : "no", enabled ? nx : "-",
             ls);
      if (err_text[0]) printf("  error: %s\n", err_text);
      if (warning[0]) printf("  warning: %s\n", warning);
      if (ca.differ) { /* hosts run different files of this automation */
        printf("  versions differ:");
        const cJSON *v;
        cJSON_ArrayForEach(v, ca.versions) printf(" %s=%.12s", v->string, v->valuestring);
        printf("\n");
      }
    }
    cJSON_Delete(ca.versions);
    automation_free(a);
    free(names[i]);
  }
  free(names);
  store_close(st);
  pg_close(pg);
  if (json) cli_print_json(arr);
  cJSON_Delete(arr);
  if (!json && !running) printf("(no daemon is running: start one with `luagent daemon`)\n");
  if (!json && cluster) printf("(cluster: next and last runs are the cluster's; see `luagent cluster status`)\n");
  /* list shows what loads; what does not is said on stderr, as skills list does */
  if (nbad || nwarn)
    fprintf(stderr, "luagent: %zu automation(s) do not load, %zu never fire; see `luagent "
            "automations check`\n", nbad, nwarn);
  return 0;
}

static int set_enabled(const struct cli_opts *o, const char *name, int on) {
  char path[4400];
  snprintf(path, sizeof path, "%s/automations/%s.lua", o->workspace, name);
  struct stat sst;
  if (!automation_name_valid(name) || stat(path, &sst))
    return cli_fail(2, "automations: no automation '%s' (automations/%s.lua not found)", name,
                    name);
  struct store *st;
  struct err e;
  struct pg *pg = NULL;
  char node[64] = "";
  int cluster = cluster_connect(o->workspace, &pg, node, sizeof node, &e);
  if (cluster < 0) return cli_fail(1, "%s", e.msg);
  if (cluster) { /* every host's daemon follows the cluster's flag */
    int rc = cli_cluster_set_enabled(pg, name, on, node, &e);
    pg_close(pg);
    if (rc) return cli_fail(1, "%s", e.msg);
    printf("%s %s (on every host of the cluster)\n", name, on ? "enabled" : "disabled");
    return 0;
  }
  if (daemon_store_open(o->workspace, &st, &e)) return cli_fail(1, "%s", e.msg);
  sqlite3_stmt *s;
  int rc = store_exec(st, "BEGIN IMMEDIATE", &e);
  if (!rc) {
    if (!store_prepare(st, "INSERT OR IGNORE INTO automations(name) VALUES (?)", &s, &e)) {
      sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
      sqlite3_step(s);
      sqlite3_finalize(s);
    }
    if (!store_prepare(st, "UPDATE automations SET enabled = ? WHERE name = ?", &s, &e)) {
      sqlite3_bind_int(s, 1, on);
      sqlite3_bind_text(s, 2, name, -1, SQLITE_TRANSIENT);
      if (sqlite3_step(s) != SQLITE_DONE) rc = store_error(st, &e, "update");
      sqlite3_finalize(s);
    }
    if (!rc)
      rc = store_commit(st, &e);
    else
      store_rollback(st);
  }
  store_close(st);
  if (rc) return cli_fail(1, "%s", e.msg);
  daemon_wake(o->workspace);
  printf("%s %s\n", name, on ? "enabled" : "disabled");
  return 0;
}

static int history(const struct cli_opts *o, const char *name, int n, int json) {
  struct store *st;
  struct err e;
  struct pg *pg = NULL;
  int cluster = cluster_connect(o->workspace, &pg, NULL, 0, &e);
  if (cluster < 0) return cli_fail(1, "%s", e.msg);
  if (cluster) {
    int code = cli_cluster_history(pg, name, n, json);
    pg_close(pg);
    return code;
  }
  if (daemon_store_open(o->workspace, &st, &e)) return cli_fail(1, "%s", e.msg);
  sqlite3_stmt *s;
  if (store_prepare(st,
                    "SELECT id, status, started, finished, result, error, trigger, tool_calls, "
                    "worker_pid FROM runs WHERE kind = 'automation' AND name = ? "
                    "ORDER BY started DESC, rowid DESC LIMIT ?",
                    &s, &e)) {
    store_close(st);
    return cli_fail(1, "%s", e.msg);
  }
  sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(s, 2, n);
  int rows = 0;
  cJSON *arr = cJSON_CreateArray();
  while (sqlite3_step(s) == SQLITE_ROW) {
    rows++;
    const char *id = (const char *)sqlite3_column_text(s, 0);
    const char *status = (const char *)sqlite3_column_text(s, 1);
    double started = sqlite3_column_double(s, 2);
    int has_fin = sqlite3_column_type(s, 3) != SQLITE_NULL;
    double finished = sqlite3_column_double(s, 3);
    const char *result = (const char *)sqlite3_column_text(s, 4);
    const char *error = (const char *)sqlite3_column_text(s, 5);
    const char *trigger = (const char *)sqlite3_column_text(s, 6);
    cJSON *tj = json_parse_str(trigger, 0, NULL);
    if (json) {
      cJSON *j = cJSON_CreateObject();
      cJSON_AddStringToObject(j, "run_id", id ? id : "");
      cJSON_AddStringToObject(j, "status", status ? status : "");
      cJSON_AddNumberToObject(j, "started", started);
      if (has_fin)
        cJSON_AddNumberToObject(j, "finished", finished);
      else
        cJSON_AddNullToObject(j, "finished");
      if (result)
        cJSON_AddStringToObject(j, "result", result);
      else
        cJSON_AddNullToObject(j, "result");
      if (error)
        cJSON_AddStringToObject(j, "error", error);
      else
        cJSON_AddNullToObject(j, "error");
      if (tj) cJSON_AddItemToObject(j, "trigger", cJSON_Duplicate(tj, 1));
      cJSON_AddNumberToObject(j, "tool_calls", sqlite3_column_int(s, 7));
      if (sqlite3_column_type(s, 8) != SQLITE_NULL)
        cJSON_AddNumberToObject(j, "worker_pid", sqlite3_column_int(s, 8));
      cJSON_AddItemToArray(arr, j);
    } else {
      char ts[32], dur[32] = "";
      fmt_time(started, ts, sizeof ts);
      if (has_fin) snprintf(dur, sizeof dur, "%.0f ms", (finished - started) * 1000);
      const char *kind = tj ? cJSON_GetStringValue(cJSON_GetObjectItem(tj, "kind")) : NULL;
      struct sbuf b = {0};
      const char *txt = error ? error : result ? result : "";
      util_escape_text(&b, txt, strlen(txt), 200);
      printf("%s  %-11s %-8s %-9s %s  %s\n", ts, status ? status : "?", kind ? kind : "-", dur,
             id ? id : "", b.s ? b.s : "");
      sbuf_free(&b);
    }
    cJSON_Delete(tj);
  }
  sqlite3_finalize(s);
  store_close(st);
  if (json) cli_print_json(arr);
  cJSON_Delete(arr);
  if (!rows && !json) printf("no runs of %s yet\n", name);
  return 0;
}

static int run_now(const struct cli_opts *o, int argc, char **argv) {
  const char *name = NULL;
  cJSON *args = cJSON_CreateObject();
  int code = 0;
  double wait_s = -1; /* the automation's timeout + 10 s */
  for (int i = 2; i < argc; i++) {
    const char *kv = NULL;
    if (!strcmp(argv[i], "--wait") && i + 1 == argc) {
      code = cli_fail(2, "automations run: --wait needs a DURATION (\"30s\", \"5m\"; 0: do not wait)");
      goto out;
    }
    const char *wv = !strcmp(argv[i], "--wait")         ? argv[++i]
                     : !strncmp(argv[i], "--wait=", 7) ? argv[i] + 7
                                                       : NULL;
    if (wv) {
      struct err de = {0};
      if (!strcmp(wv, "0")) {
        wait_s = 0;
      } else if (duration_parse(wv, &wait_s, &de)) {
        code = cli_fail(2, "automations run: --wait: %s", de.msg);
        goto out;
      }
      continue;
    }
    if (!strcmp(argv[i], "--arg") && i + 1 < argc)
      kv = argv[++i];
    else if (!strncmp(argv[i], "--arg=", 6))
      kv = argv[i] + 6;
    else if (argv[i][0] == '-') {
      code = cli_fail(2, "automations run: unknown option %s", argv[i]);
      goto out;
    } else if (!name) {
      name = argv[i];
      continue;
    } else {
      code = cli_fail(2, "automations run: one automation at a time");
      goto out;
    }
    const char *eq = kv ? strchr(kv, '=') : NULL;
    if (!eq || eq == kv) {
      code = cli_fail(2, "automations run: --arg '%s' is not key=value", kv ? kv : "");
      goto out;
    }
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
    cJSON_DeleteItemFromObjectCaseSensitive(args, key);
    cJSON_AddStringToObject(args, key, eq + 1);
  }
  if (!name) {
    code = cli_usage_fail("automations", "automations run needs an automation NAME");
    goto out;
  }
  struct err e = {0};
  char *status = NULL, *result = NULL, *error = NULL;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (daemon_run_manual(o->workspace, name, args, wait_s, &status, &result, &error, &e)) {
    /* 2: it cannot run as asked (no such automation, it does not load);
     * 1: it could not run now (busy elsewhere, stopped, I/O) */
    int busy = e.rc == ERR_IO || e.rc == ERR_LIMIT || e.rc == ERR_STOPPED;
    code = cli_fail(busy ? 1 : 2, "%s", e.msg);
    goto out;
  }
  if (!strcmp(status, "ok")) {
    if (result) printf("%s\n", result);
  } else {
    fprintf(stderr, "luagent: %s: %s: %s\n", name, status, error ? error : "");
    code = 1;
  }
  free(status);
  free(result);
  free(error);
out:
  cJSON_Delete(args);
  return code;
}

int cli_automations(const struct cli_opts *o, int argc, char **argv) {
  if (argc < 2) return cli_usage_fail("automations", NULL);
  const char *sub = argv[1];
  int json = o->json, n = 0;
  const char *name = NULL;
  if (!cli_usage_has("automations", sub)) return cli_unknown_sub("automations", sub);
  if (!strcmp(sub, "run")) return run_now(o, argc, argv);
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = 1;
    else if ((!strcmp(argv[i], "-n") || !strcmp(argv[i], "--limit")) &&
             (!strcmp(sub, "history") || !strcmp(sub, "next"))) {
      char *end;
      long v = i + 1 < argc ? strtol(argv[++i], &end, 10) : 0;
      if (v < 1 || *end || v > 100000)
        return cli_fail(2, "automations %s: -n needs a number from 1 to 100000", sub);
      n = (int)v;
    } else if (argv[i][0] == '-')
      return cli_usage_fail("automations", "automations %s: unknown option %s", sub, argv[i]);
    else if (!name)
      name = argv[i];
    else
      return cli_usage_fail("automations", "automations %s: unexpected argument '%s'", sub,
                            argv[i]);
  }
  int takes_name = strcmp(sub, "list") && strcmp(sub, "check");
  if (!takes_name && name)
    return cli_usage_fail("automations", "automations %s: unexpected argument '%s'", sub, name);
  if (takes_name && !name)
    return cli_usage_fail("automations", "automations %s needs an automation NAME", sub);
  if (!strcmp(sub, "list")) return list(o, json);
  if (!strcmp(sub, "check")) return cli_automations_check(o, json);
  if (!strcmp(sub, "next")) return cli_automations_next(o, name, n ? n : 5, json);
  if (!strcmp(sub, "enable")) return set_enabled(o, name, 1);
  if (!strcmp(sub, "disable")) return set_enabled(o, name, 0);
  return history(o, name, n ? n : 20, json);
}
