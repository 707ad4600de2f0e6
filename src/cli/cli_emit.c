/* cli_emit.c - `luagent emit NAME [JSON]`: queue an event for `on` automations. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "daemon.h"

int cli_emit(const struct cli_opts *o, int argc, char **argv) {
  if (argc < 2 || argc > 3 || argv[1][0] == '-')
    return cli_fail(2,
                    "usage: luagent emit NAME [JSON]   e.g. luagent emit deploy.done "
                    "'{\"version\":\"1.2\"}'");
  struct err e = {0};
  long long id = 0;
  if (daemon_emit(o->workspace, argv[1], argc == 3 ? argv[2] : NULL, &id, &e))
    return cli_fail(e.rc == ERR_INVALID ? 2 : 1, "emit: %s", e.msg);
  int pid = 0;
  if (daemon_running(o->workspace, &pid))
    printf("queued event %s (#%lld); the daemon (pid %d) picks it up now\n", argv[1], id, pid);
  else
    printf("queued event %s (#%lld); no daemon is running, it waits in the queue\n", argv[1], id);
  return 0;
}
