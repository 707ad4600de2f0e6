/* cli_ask.c - `luagent ask`. Placeholder until issue 5 lands. */
#include "cli.h"

int cli_ask(const struct cli_opts *o, int argc, char **argv) {
  (void)o; (void)argc; (void)argv;
  return cli_fail(2, "'ask' is not available in this build yet");
}
