/* cli_daemon.c - `luagent daemon [--grace DUR] [--workers N] [--quiet]`.
 *
 * The same command, with the internal flag --worker, is how the scheduler
 * starts its worker processes (the job socket is fd 3).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "console.h"
#include "cron.h"
#include "daemon.h"
#include "runtime.h"
#include "skills.h"
#include "util.h"

/* A worker process: the workspace is opened here, above sched/, and lent
 * to the daemon's job loop. skills_dir: the daemon's checked copy of
 * skills/ (daemon_skills.c), or NULL for skills/ itself. */
static int worker_main(const char *workspace, const char *skills_dir) {
  struct runtime *rt = NULL;
  struct err re;
  err_clear(&re);
  int rt_rc = runtime_open(workspace, &rt, &re);
  if (!rt_rc) {
    /* skill tools are callable from runs; problems are listed by
     * `luagent skills check` (and reported by the daemon), the rest load */
    struct err se;
    if (skills_dir ? skills_load_from(rt, skills_dir, &rt->skills, &se) : skills_ensure(rt, &se))
    {
      struct sbuf m = {0}; /* the message may quote a skill's error() */
      util_escape_text(&m, se.msg, strlen(se.msg), 2000);
      fprintf(stderr, "luagent worker: skills: %s\n", m.s ? m.s : "");
      sbuf_free(&m);
    }
  }
  int rc = daemon_worker_main(workspace, 3, rt_rc ? NULL : rt, &re);
  runtime_free(rt);
  return rc;
}

/* --console: the console starts once the daemon holds the workspace and
 * stops after the scheduler (sched/ calls these through daemon_opts). */
struct console_hook {
  struct console_opts opts;
  struct console *c;
};

static int console_on_start(void *ud, struct err *e) {
  struct console_hook *h = ud;
  return console_start(&h->opts, &h->c, e);
}

static void console_on_stop(void *ud) {
  struct console_hook *h = ud;
  console_stop(h->c);
  h->c = NULL;
}

static void drop_output(void *ud, const char *stream, const char *text, size_t len) {
  (void)ud, (void)stream, (void)text, (void)len;
}

/* daemon_opts.skills_probe: loads dir in a scratch runtime of the
 * workspace, as a worker would, and collects the first fatal problem of
 * each folder. */
static int probe_skills(const char *workspace, const char *dir, cJSON **bad, struct err *e) {
  *bad = NULL;
  struct runtime *rt = NULL;
  if (runtime_open(workspace, &rt, e)) return -1;
  rt->out.write = drop_output; /* a skill file's top-level print() shows in the workers */
  rt->out.ud = NULL;
  struct skillset *set = NULL;
  if (skills_load_from(rt, dir, &set, e)) {
    runtime_free(rt);
    return -1;
  }
  cJSON *o = cJSON_CreateObject();
  for (size_t i = 0; i < skillset_nproblems(set); i++) {
    const struct skill_problem *p = skillset_problem(set, i);
    if (!p->fatal || strncmp(p->file, "skills/", 7)) continue;
    char folder[256];
    const char *f = p->file + 7, *slash = strchr(f, '/');
    size_t n = slash ? (size_t)(slash - f) : strlen(f);
    if (n == 0 || n >= sizeof folder) continue;
    memcpy(folder, f, n);
    folder[n] = '\0';
    if (cJSON_GetObjectItemCaseSensitive(o, folder)) continue; /* the first one says it */
    char msg[2048];
    if (p->line > 0)
      snprintf(msg, sizeof msg, "%s:%d: %s", p->file, p->line, p->msg);
    else
      snprintf(msg, sizeof msg, "%s: %s", p->file, p->msg);
    cJSON_AddStringToObject(o, folder, msg);
  }
  skillset_free(set);
  runtime_free(rt);
  *bad = o;
  return 0;
}

int cli_daemon(const struct cli_opts *o, int argc, char **argv) {
  struct daemon_opts d = {.workspace = o->workspace, .skills_probe = probe_skills};
  struct cli_console_opts co = {0};
  struct console_hook hook = {.opts = {.workspace = o->workspace}};
  int console = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--worker"))
      return worker_main(o->workspace,
                         i + 2 < argc && !strcmp(argv[i + 1], "--skills-dir") ? argv[i + 2] : NULL);
    int r = cli_console_option(&co, argc, argv, &i);
    if (r == 2) return 2;
    if (r) continue;
    if (!strcmp(a, "--console")) {
      console = 1;
      if (i + 1 < argc && argv[i + 1][0] != '-') hook.opts.addr = argv[++i];
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
      d.quiet = 1;
    } else if (!strcmp(a, "--grace") || !strcmp(a, "--kill-grace")) {
      struct err e;
      double s;
      if (i + 1 >= argc) return cli_fail(2, "daemon: %s needs a duration like 10s", a);
      if (duration_parse(argv[++i], &s, &e)) return cli_fail(2, "daemon: %s: %s", a, e.msg);
      if (!strcmp(a, "--grace"))
        d.grace_s = s;
      else
        d.kill_grace_s = s;
    } else if (!strcmp(a, "--workers")) {
      if (i + 1 >= argc) return cli_fail(2, "daemon: --workers needs a number");
      char *end;
      long n = strtol(argv[++i], &end, 10);
      if (*end || n < 1 || n > 250) return cli_fail(2, "daemon: --workers must be 1-250");
      d.max_workers = (int)n;
    } else if (!strcmp(a, "--retain")) {
      double s;
      struct err e = {0};
      if (i + 1 >= argc) return cli_fail(2, "daemon: --retain needs a duration (e.g. 30d)");
      if (duration_parse(argv[++i], &s, &e)) return cli_fail(2, "daemon: --retain: %s", e.msg);
      d.retain_s = s;
    } else if (!strcmp(a, "--keep")) {
      if (i + 1 >= argc) return cli_fail(2, "daemon: --keep needs a number of runs");
      char *end;
      long n = strtol(argv[++i], &end, 10);
      if (*end || n < 1 || n > 100000000) return cli_fail(2, "daemon: --keep must be 1-100000000");
      d.keep_runs = (int)n;
    } else {
      return cli_usage_fail("daemon", "daemon: unknown option %s", a);
    }
  }
  if ((co.allow_remote || co.nhosts) && !console)
    return cli_fail(2, "daemon: --allow-remote and --host go with --console");
  if (console) {
    hook.opts.allow_remote = co.allow_remote;
    hook.opts.hosts = co.hosts;
    hook.opts.quiet = d.quiet;
    d.on_start = console_on_start;
    d.on_stop = console_on_stop;
    d.hook_ud = &hook;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct err e = {0};
  int rc = daemon_main(&d, &e);
  if (rc) return cli_fail(rc == ERR_INVALID || rc == ERR_NOTFOUND ? 2 : 1, "%s", e.msg);
  return 0;
}
