/* cli_runs.c - `luagent runs`. Placeholder until issue 5 lands. */
#include "cli.h"

int cli_runs(const struct cli_opts *o, int argc, char **argv) {
  (void)o; (void)argc; (void)argv;
  return cli_fail(2, "'runs' is not available in this build yet");
}
