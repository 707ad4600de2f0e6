/* cli_run.c - `luagent run FILE.lua [--arg key=value ...]`. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "json.h"
#include "skills.h"
#include "runtime.h"
#include "util.h"

int cli_run(const struct cli_opts *o, int argc, char **argv) {
  const char *file = NULL;
  cJSON *args = cJSON_CreateObject();
  int code = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--arg")) {
      if (i + 1 >= argc) {
        code = cli_fail(2, "run: --arg needs key=value");
        goto out;
      }
      const char *kv = argv[++i], *eq = strchr(kv, '=');
      if (!eq || eq == kv) {
        code = cli_fail(2, "run: --arg '%s' is not key=value", kv);
        goto out;
      }
      char key[256];
      snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
      cJSON_DeleteItemFromObjectCaseSensitive(args, key);
      cJSON_AddStringToObject(args, key, eq + 1);
    } else if (!strncmp(argv[i], "--arg=", 6)) {
      const char *kv = argv[i] + 6, *eq = strchr(kv, '=');
      if (!eq || eq == kv) {
        code = cli_fail(2, "run: --arg '%s' is not key=value", kv);
        goto out;
      }
      char key[256];
      snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
      cJSON_AddStringToObject(args, key, eq + 1);
    } else if (argv[i][0] == '-' && argv[i][1]) {
      code = cli_usage_fail("run", "run: unknown option %s", argv[i]);
      goto out;
    } else if (!file) {
      file = argv[i];
    } else {
      code = cli_fail(2, "run: only one script at a time (got %s and %s)", file, argv[i]);
      goto out;
    }
  }
  if (!file) {
    code = cli_usage_fail("run", "run needs a script: FILE.lua");
    goto out;
  }
  /* A script that is not there, or a folder, is the operator's typo: a
   * usage error before anything loads (the path is relative to the current
   * folder, as a shell user expects). */
  struct stat sst;
  if (stat(file, &sst) != 0) {
    code = cli_fail(2, "run: %s: %s", file,
                    errno == ENOENT ? "no such file (run takes a path to a .lua script)"
                                    : strerror(errno));
    goto out;
  }
  if (S_ISDIR(sst.st_mode)) {
    code = cli_fail(2, "run: %s is a folder, not a Lua script (run takes FILE.lua)", file);
    goto out;
  }
  if (!S_ISREG(sst.st_mode)) {
    code = cli_fail(2, "run: %s is not a regular file", file);
    goto out;
  }

  struct err e = {0};
  struct runtime *rt = NULL;
  if (runtime_open(o->workspace, &rt, &e)) {
    code = cli_fail(2, "%s", e.msg);
    goto out;
  }
  /* Skill tools (notes.add, ...) are callable from scripts. */
  if (skills_ensure(rt, &e)) {
    code = cli_fail(2, "%s", e.msg);
    runtime_free(rt);
    goto out;
  }
  if (skillset_nproblems(rt->skills))
    fprintf(stderr, "luagent: warning: %zu problem(s) in skills; see `luagent skills check`\n",
            skillset_nproblems(rt->skills));
  /* An ad-hoc script is caller kind "script", named by where it lives:
   * rules written for automations (kind and name) never apply to it. */
  struct call_ctx ctx;
  char script_name[sizeof ctx.caller.name];
  runtime_script_name(rt, file, script_name, sizeof script_name);
  call_ctx_init(&ctx, rt, CALLER_SCRIPT, script_name);
  ctx.limits.deadline_at = util_monotonic() + ctx.limits.deadline_s;
  /* Hooks stop Lua code; the watchdog covers a C call that no hook reaches. */
  char shown[1024], msg[1200];
  runtime_display_path(rt, file, shown, sizeof shown);
  snprintf(msg, sizeof msg, "luagent: error: %s: wall-clock deadline of %gs exceeded inside a call "
           "that could not be interrupted; stopped by the watchdog", shown, ctx.limits.deadline_s);
  watchdog_arm(ctx.limits.deadline_at, 2.0, 1, msg);
  cJSON *ret = NULL;
  int rc = runtime_run_script(rt, &ctx, file, args, &ret, &e);
  watchdog_disarm();
  if (rc) {
    fflush(stdout);
    /* Kinds other than a plain Lua error are named, e.g. [limit_memory]. */
    if (e.code[0] && strcmp(e.code, "error") != 0)
      fprintf(stderr, "luagent: error: %s [%s]\n", e.msg, e.code);
    else
      fprintf(stderr, "luagent: error: %s\n", e.msg);
    code = 1;
  } else if (ret && !cJSON_IsNull(ret)) {
    if (cJSON_IsString(ret)) {
      puts(ret->valuestring);
    } else if (o->json) { /* --json: the one-line rule */
      cli_print_json(ret);
    } else {
      char *s = json_print(ret, JSON_PRETTY);
      puts(s);
      free(s);
    }
  }
  cJSON_Delete(ret);
  runtime_free(rt);
out:
  cJSON_Delete(args);
  return code;
}
