/* cli_emit.c - `luagent emit NAME [JSON]`: queue an event for `on` automations.
 * Without JSON the run's ctx.trigger.payload is an empty table. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "daemon.h"

int cli_emit(const struct cli_opts *o, int argc, char **argv) {
  if (argc < 2) return cli_usage_fail("emit", "emit needs an event NAME");
  if (argv[1][0] == '-') return cli_usage_fail("emit", "emit: unknown option %s", argv[1]);
  if (argc > 3) return cli_usage_fail("emit", "emit takes NAME and one JSON payload (quote it)");
  struct err e = {0};
  long long id = 0;
  if (daemon_emit(o->workspace, argv[1], argc == 3 ? argv[2] : NULL, &id, &e))
    return cli_fail(e.rc == ERR_INVALID ? 2 : 1, "emit: %s", e.msg);
  int pid = 0;
  struct config *cfg = NULL;
  int cluster = !config_load(o->workspace, &cfg, &e) && config_get(cfg, "cluster");
  config_free(cfg);
  if (cluster)
    printf("queued event %s (#%lld) in the cluster; a daemon with an `on` automation for it "
           "takes it\n", argv[1], id);
  else if (daemon_running(o->workspace, &pid))
    printf("queued event %s (#%lld); the daemon (pid %d) picks it up now\n", argv[1], id, pid);
  else
    printf("queued event %s (#%lld); no daemon is running, it waits in the queue\n", argv[1], id);
  return 0;
}
