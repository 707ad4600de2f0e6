/* cli_autocheck.c - `luagent automations check` and `automations next`,
 * and the automation part of `luagent check`.
 *
 * A problem is a record {file, line, message, level}: level "error" for a
 * file that does not load, "warning" for a schedule that can never fire
 * (a cron on a date that does not exist, an `at` in the past). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "automation.h"
#include "cli.h"
#include "config.h"
#include "cli_check.h"
#include "cron.h"
#include "util.h"

void cli_problem_add(cJSON *problems, const char *what, const char *msg, const char *dflt_file,
                     const char *level) {
  /* "automations/x.lua:3: text" -> file, line, message: a leading word
   * with a dot and no space before the first ':' is the file. */
  char file[512] = "";
  int line = 0;
  const char *rest = msg;
  size_t k = strcspn(msg, ": ");
  size_t dl = dflt_file ? strlen(dflt_file) : 0;
  if (dl && !strncmp(msg, dflt_file, dl) && msg[dl] == ':') k = dl; /* a file name with a space */
  if (msg[k] == ':' && k && k < sizeof file && memchr(msg, '.', k)) {
    snprintf(file, sizeof file, "%.*s", (int)k, msg);
    rest = msg + k + 1;
    char *end;
    long l = strtol(rest, &end, 10);
    if (end != rest && *end == ':') {
      line = (int)l;
      rest = end + 1;
    }
    while (*rest == ' ') rest++;
  } else if (dflt_file) {
    snprintf(file, sizeof file, "%s", dflt_file);
  }
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "what", what);
  cJSON_AddStringToObject(p, "file", file);
  cJSON_AddNumberToObject(p, "line", line);
  cJSON_AddStringToObject(p, "message", rest);
  cJSON_AddStringToObject(p, "level", level);
  cJSON_AddItemToArray(problems, p);
}

void cli_problem_print(const cJSON *p) {
  const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(p, "file"));
  const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(p, "message"));
  const char *level = cJSON_GetStringValue(cJSON_GetObjectItem(p, "level"));
  int line = cJSON_GetObjectItem(p, "line")->valueint;
  struct sbuf m = {0};
  util_escape_text(&m, msg, strlen(msg), 2000);
  const char *w = level && !strcmp(level, "warning") ? "warning: " : "";
  if (line)
    printf("%s:%d: %s%s\n", file, line, w, m.s ? m.s : "");
  else
    printf("%s: %s%s\n", file[0] ? file : "luagent", w, m.s ? m.s : "");
  sbuf_free(&m);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

char **cli_automation_files(const char *ws, size_t *n) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/automations", ws);
  *n = 0;
  DIR *dh = opendir(dir);
  if (!dh) return NULL;
  char **names = NULL;
  struct dirent *de;
  while ((de = readdir(dh))) {
    size_t len = strlen(de->d_name);
    if (de->d_name[0] == '.' || len < 5 || strcmp(de->d_name + len - 4, ".lua")) continue;
    names = xrealloc(names, (*n + 1) * sizeof *names);
    names[(*n)++] = xstrdup(de->d_name);
  }
  closedir(dh);
  if (*n) qsort(names, *n, sizeof *names, cmp_str);
  return names;
}

int cli_automation_load(const char *ws, const char *fname, struct automation **a, struct err *e) {
  char name[128], chunk[300], path[4400];
  size_t len = strlen(fname);
  snprintf(name, sizeof name, "%.*s", (int)(len > 4 ? len - 4 : len), fname);
  snprintf(chunk, sizeof chunk, "automations/%s", fname);
  snprintf(path, sizeof path, "%s/automations/%s", ws, fname);
  if (!automation_name_valid(name))
    return err_set(e, ERR_INVALID, "config",
                   "%s: the file name is not a valid automation name ([a-z][a-z0-9_-]*.lua); "
                   "the daemon ignores it",
                   chunk);
  return automation_load_file(path, chunk, name, a, e);
}

size_t cli_automations_problems(const char *ws, cJSON *problems, size_t *loaded) {
  size_t n = 0, before = (size_t)cJSON_GetArraySize(problems);
  char **files = cli_automation_files(ws, &n);
  *loaded = 0;
  double now = util_now();
  for (size_t i = 0; i < n; i++) {
    struct automation *a = NULL;
    struct err e = {0};
    char chunk[300];
    snprintf(chunk, sizeof chunk, "automations/%s", files[i]);
    if (cli_automation_load(ws, files[i], &a, &e)) {
      cli_problem_add(problems, "automation", e.msg, chunk, "error");
    } else {
      (*loaded)++;
      char why[300];
      if (automation_never_fires(a, now, why, sizeof why))
        cli_problem_add(problems, "automation", why, chunk, "warning");
    }
    automation_free(a);
    free(files[i]);
  }
  free(files);
  return (size_t)cJSON_GetArraySize(problems) - before;
}

size_t cli_problems_count(const cJSON *problems, const char *level) {
  size_t n = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, problems) {
    const char *l = cJSON_GetStringValue(cJSON_GetObjectItem(p, "level"));
    if (l && !strcmp(l, level)) n++;
  }
  return n;
}

int cli_automations_check(const struct cli_opts *o, int json) {
  cJSON *problems = cJSON_CreateArray();
  size_t loaded = 0;
  cli_automations_problems(o->workspace, problems, &loaded);
  size_t errors = cli_problems_count(problems, "error");
  if (json) {
    cli_print_json(problems);
  } else {
    const cJSON *p;
    cJSON_ArrayForEach(p, problems) cli_problem_print(p);
    printf("%zu automation(s) loaded; %zu problem(s), %zu warning(s)\n", loaded, errors,
           (size_t)cJSON_GetArraySize(problems) - errors);
  }
  cJSON_Delete(problems);
  return errors ? 1 : 0;
}

/* "in 3h 4m" for a span of seconds. */
static void fmt_in(double s, char *out, size_t n) {
  long long t = (long long)(s + 0.5);
  if (t < 60)
    snprintf(out, n, "in %llds", t);
  else if (t < 3600)
    snprintf(out, n, "in %lldm %llds", t / 60, t % 60);
  else if (t < 86400)
    snprintf(out, n, "in %lldh %lldm", t / 3600, t % 3600 / 60);
  else
    snprintf(out, n, "in %lldd %lldh", t / 86400, t % 86400 / 3600);
}

int cli_automations_next(const struct cli_opts *o, const char *name, int count, int json) {
  char fname[200];
  snprintf(fname, sizeof fname, "%s.lua", name);
  char path[4400];
  struct stat sst;
  snprintf(path, sizeof path, "%s/automations/%s", o->workspace, fname);
  if (!automation_name_valid(name) || stat(path, &sst))
    return cli_fail(2, "automations next: no automation '%s' (automations/%s not found)", name,
                    fname);
  struct automation *a = NULL;
  struct err e = {0};
  if (cli_automation_load(o->workspace, fname, &a, &e)) return cli_fail(1, "%s", e.msg);
  const char *tz = automation_zone(a);
  double now = util_now(), t = now;
  cJSON *arr = cJSON_CreateArray();
  int code = 0;
  if (a->trig == TRIG_MANUAL || a->trig == TRIG_EVENT) {
    if (!json)
      printf("%s has no schedule: it runs %s\n", name,
             a->trig == TRIG_EVENT ? a->trigger_text : "only when started (automations run)");
  } else {
    char why[300];
    if (automation_never_fires(a, now, why, sizeof why)) {
      fprintf(stderr, "luagent: automations/%s: warning: %s\n", fname, why);
      code = 1;
    }
    /* `every` counts from the daemon's last run; without one, from now. In
     * a cluster its slots are multiples of the period since the epoch. */
    struct config *cfg = NULL;
    struct err ce = {0};
    int cluster = !config_load(o->workspace, &cfg, &ce) && config_get(cfg, "cluster");
    config_free(cfg);
    for (int k = 0; k < count; k++) {
      if (a->trig == TRIG_EVERY && k == 0)
        t = cluster ? ceil(now / a->every_s) * a->every_s : now;
      else
        t = automation_next_after(a, t);
      if (t <= 0) break;
      char iso[64], text[64], in[32];
      cron_format_zoned(t, tz, 1, iso, sizeof iso);
      if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "time", t);
        cJSON_AddStringToObject(j, "at", iso);
        if (tz)
          cJSON_AddStringToObject(j, "zone", tz);
        else
          cJSON_AddNullToObject(j, "zone");
        cJSON_AddItemToArray(arr, j);
      } else {
        cron_format_zoned(t, tz, 0, text, sizeof text);
        fmt_in(t - now, in, sizeof in);
        printf("%s  (%s, %s)\n", text, iso, in);
      }
      if (a->trig == TRIG_AT) break;
    }
    if (!json && tz) printf("(times in %s, the automation's zone)\n", tz);
  }
  if (json) cli_print_json(arr);
  cJSON_Delete(arr);
  automation_free(a);
  return code;
}
