/* cli_common.c - helpers shared by the CLI commands. */
#include <stdarg.h>
#include <stdio.h>

#include "cli.h"

int cli_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("luagent: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return code;
}
