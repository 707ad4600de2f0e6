/* cli_automations.c - `luagent automations`. Placeholder until issue 6 lands. */
#include "cli.h"

int cli_automations(const struct cli_opts *o, int argc, char **argv) {
  (void)o; (void)argc; (void)argv;
  return cli_fail(2, "'automations' is not available in this build yet");
}
