/* cli_approvals.c - `luagent approvals`. Placeholder until issue 4 lands. */
#include "cli.h"

int cli_approvals(const struct cli_opts *o, int argc, char **argv) {
  (void)o; (void)argc; (void)argv;
  return cli_fail(2, "'approvals' is not available in this build yet");
}
