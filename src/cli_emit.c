/* cli_emit.c - `luagent emit`. Placeholder until issue 6 lands. */
#include "cli.h"

int cli_emit(const struct cli_opts *o, int argc, char **argv) {
  (void)o; (void)argc; (void)argv;
  return cli_fail(2, "'emit' is not available in this build yet");
}
