/* cli_daemon.c - `luagent daemon`. Placeholder until issue 6 lands. */
#include "cli.h"

int cli_daemon(const struct cli_opts *o, int argc, char **argv) {
  (void)o; (void)argc; (void)argv;
  return cli_fail(2, "'daemon' is not available in this build yet");
}
