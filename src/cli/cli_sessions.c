/* cli_sessions.c - `luagent sessions list [--json]`, `sessions show NAME
 * [--json]`, `sessions delete NAME`: the chat sessions of the workspace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "json.h"
#include "runtime.h"
#include "session.h"
#include "util.h"

static int usage(void) { return cli_usage_fail("sessions", NULL); }

static void put_line(const char *s, size_t max) {
  struct sbuf b = {0};
  util_escape_text(&b, s, strlen(s), max);
  fputs(b.s ? b.s : "", stdout);
  sbuf_free(&b);
}

static int list(struct store *db, int json) {
  struct err e = {0};
  cJSON *arr = NULL;
  if (session_list(db, &arr, &e)) return cli_fail(1, "%s", e.msg);
  if (json) {
    char *s = json_print(arr, 0);
    puts(s);
    free(s);
  } else if (!cJSON_GetArraySize(arr)) {
    printf("no sessions yet (start one with `luagent chat --session NAME`)\n");
  } else {
    printf("%-32s %-19s %8s %5s  %s\n", "NAME", "UPDATED (UTC)", "MESSAGES", "RUNS", "LAST");
    const cJSON *o;
    cJSON_ArrayForEach(o, arr) {
      time_t t = (time_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "updated"));
      struct tm tm;
      gmtime_r(&t, &tm);
      char when[32];
      strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
      printf("%-32s %-19s %8d %5d  ", cJSON_GetStringValue(cJSON_GetObjectItem(o, "name")), when,
             (int)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "messages")),
             (int)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "runs")));
      put_line(cJSON_GetStringValue(cJSON_GetObjectItem(o, "last_user")), 60);
      putchar('\n');
    }
  }
  cJSON_Delete(arr);
  return 0;
}

static int show(struct store *db, const char *name, int json) {
  struct err e = {0};
  cJSON *msgs = NULL;
  int exists = 0;
  if (session_check_name(name, &e)) return cli_fail(2, "sessions show: %s", e.msg);
  if (session_load(db, name, &msgs, &exists, &e)) {
    cJSON_Delete(msgs);
    return cli_fail(1, "%s", e.msg);
  }
  if (!exists) {
    cJSON_Delete(msgs);
    return cli_fail(1, "sessions show: no session named '%s' (see `luagent sessions list`)", name);
  }
  if (json) {
    char *s = json_print(msgs, 0);
    puts(s);
    free(s);
  } else {
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
      const char *role = cJSON_GetStringValue(cJSON_GetObjectItem(m, "role"));
      const char *c = cJSON_GetStringValue(cJSON_GetObjectItem(m, "content"));
      printf("[%s] ", role ? role : "?");
      put_line(c ? c : "", 2000);
      const cJSON *tc;
      cJSON_ArrayForEach(tc, cJSON_GetObjectItem(m, "tool_calls")) {
        const char *tname = cJSON_GetStringValue(cJSON_GetObjectItem(tc, "name"));
        fputs("\n  -> ", stdout);
        put_line(tname ? tname : "", 160); /* the model chose it: escaped */
        fputc(' ', stdout);
        const char *args = cJSON_GetStringValue(cJSON_GetObjectItem(tc, "arguments"));
        put_line(args ? args : "", 300);
      }
      putchar('\n');
    }
  }
  cJSON_Delete(msgs);
  return 0;
}

int cli_sessions(const struct cli_opts *o, int argc, char **argv) {
  const char *sub = NULL, *name = NULL;
  int json = o->json;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (argv[i][0] == '-')
      return usage();
    else if (!sub)
      sub = argv[i];
    else if (!name)
      name = argv[i];
    else
      return usage();
  }
  if (!sub) sub = "list";
  int is_list = !strcmp(sub, "list");
  if (!is_list && strcmp(sub, "show") && strcmp(sub, "delete"))
    return cli_unknown_sub("sessions", sub);
  if (is_list ? name != NULL : name == NULL) return usage();
  struct err e = {0};
  struct runtime *rt = NULL;
  if (runtime_open(o->workspace, &rt, &e)) return cli_fail(2, "%s", e.msg);
  struct store *db = NULL;
  int code, held = -1;
  if (runtime_store(rt, &db, &e)) {
    code = cli_fail(1, "%s", e.msg);
  } else if (is_list) {
    code = list(db, json);
  } else if (!strcmp(sub, "show")) {
    code = show(db, name, json);
  } else if (session_check_name(name, &e) || session_hold(rt->workspace, name, &held, &e) ||
             session_delete(db, name, &e)) {
    code = cli_fail(e.code[0] && !strcmp(e.code, "invalid_args") ? 2 : 1, "sessions delete: %s",
                    e.msg);
  } else {
    printf("deleted session %s\n", name);
    code = 0;
  }
  session_release(held);
  runtime_free(rt);
  return code;
}
