/* cli_skills.c - `luagent skills`. Placeholder until issue 3 lands. */
#include "cli.h"

int cli_skills(const struct cli_opts *o, int argc, char **argv) {
  (void)o; (void)argc; (void)argv;
  return cli_fail(2, "'skills' is not available in this build yet");
}
