/* cli_secrets.c - `luagent secrets`. Placeholder until issue 4 lands. */
#include "cli.h"

int cli_secrets(const struct cli_opts *o, int argc, char **argv) {
  (void)o; (void)argc; (void)argv;
  return cli_fail(2, "'secrets' is not available in this build yet");
}
