/* cli_sessions.c - `luagent sessions`. Placeholder until issue 7 lands. */
#include "cli.h"

int cli_sessions(const struct cli_opts *o, int argc, char **argv) {
  (void)o; (void)argc; (void)argv;
  return cli_fail(2, "'sessions' is not available in this build yet");
}
