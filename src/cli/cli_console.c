/* cli_console.c - `luagent console [ADDR] [--allow-remote] [--host NAME]`:
 * the operator console without the scheduler (`luagent daemon --console`
 * runs it inside the daemon). Both parse their console options here. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "console.h"


int cli_console_option(struct cli_console_opts *co, int argc, char **argv, int *i) {
  const char *a = argv[*i];
  if (!strcmp(a, "--allow-remote")) {
    co->allow_remote = 1;
    return 1;
  }
  if (!strcmp(a, "--host")) {
    if (*i + 1 >= argc) return cli_fail(2, "--host needs a name (HOST or HOST:PORT)");
    if (co->nhosts >= CLI_CONSOLE_MAX_HOSTS) return cli_fail(2, "--host: at most %d", CLI_CONSOLE_MAX_HOSTS);
    co->hosts[co->nhosts++] = argv[++*i];
    co->hosts[co->nhosts] = NULL;
    return 1;
  }
  return 0;
}

int cli_console(const struct cli_opts *o, int argc, char **argv) {
  struct cli_console_opts co = {0};
  const char *addr = NULL;
  int quiet = 0;
  for (int i = 1; i < argc; i++) {
    int r = cli_console_option(&co, argc, argv, &i);
    if (r == 2) return 2;
    if (r) continue;
    if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
      quiet = 1;
    } else if (argv[i][0] == '-') {
      return cli_usage_fail("console", "console: unknown option %s", argv[i]);
    } else if (!addr) {
      addr = argv[i];
    } else {
      return cli_fail(2, "console: one address at a time");
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* SIGINT/SIGTERM are taken with sigwait in this thread (blocked before
   * the server's threads exist, so they inherit the block). */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  struct console_opts copt = {.workspace = o->workspace,
                              .addr = addr,
                              .allow_remote = co.allow_remote,
                              .hosts = co.hosts,
                              .quiet = quiet};
  struct console *c = NULL;
  struct err e = {0};
  if (console_start(&copt, &c, &e))
    return cli_fail(e.rc == ERR_INVALID || e.rc == ERR_NOTFOUND ? 2 : 1, "%s", e.msg);
  int sig = 0;
  sigwait(&set, &sig);
  printf("console: stopping (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  console_stop(c);
  return 0;
}
