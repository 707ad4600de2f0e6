/* cli_audit.c - `luagent audit`. Placeholder until issue 4 lands. */
#include "cli.h"

int cli_audit(const struct cli_opts *o, int argc, char **argv) {
  (void)o; (void)argc; (void)argv;
  return cli_fail(2, "'audit' is not available in this build yet");
}
