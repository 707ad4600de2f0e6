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

/* A worker process: the workspace is opened here, above sched/, and lent
 * to the daemon's job loop. */
static int worker_main(const char *workspace) {
  struct runtime *rt = NULL;
  struct err re;
  err_clear(&re);
  int rt_rc = runtime_open(workspace, &rt, &re);
  if (!rt_rc) {
    /* skill tools are callable from runs; problems are listed by
     * `luagent skills check`, the rest load */
    struct err se;
    if (skills_ensure(rt, &se)) fprintf(stderr, "luagent worker: skills: %s\n", se.msg);
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

int cli_daemon(const struct cli_opts *o, int argc, char **argv) {
  struct daemon_opts d = {.workspace = o->workspace};
  struct cli_console_opts co = {0};
  struct console_hook hook = {.opts = {.workspace = o->workspace}};
  int console = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--worker")) return worker_main(o->workspace);
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
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      printf(
          "usage: luagent [--workspace DIR] daemon [--grace 10s] [--kill-grace 2s] "
          "[--workers 32] [--keep 5000] [--retain 30d] [--quiet]\n"
          "       [--console [ADDR]] [--allow-remote] [--host NAME]\n"
          "Runs the workspace's automations on their triggers until SIGTERM or Ctrl-C;\n"
          "--console also serves the operator console (default 127.0.0.1:8765).\n");
      return 0;
    } else {
      return cli_fail(2, "daemon: unknown option %s (try --help)", a);
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
