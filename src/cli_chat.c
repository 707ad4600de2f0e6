/* cli_chat.c - `luagent chat`. Placeholder until issue 7 lands. */
#include "cli.h"

int cli_chat(const struct cli_opts *o, int argc, char **argv) {
  (void)o; (void)argc; (void)argv;
  return cli_fail(2, "'chat' is not available in this build yet");
}
