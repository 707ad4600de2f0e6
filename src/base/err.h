/* err.h - error reporting shared by every module.
 *
 * A function that can fail returns int: 0 on success or a negative ERR_*
 * code, and fills a caller-supplied struct err with a message that names
 * what failed and where. `code` is the machine-readable kind that reaches
 * Lua as err.code (for example "invalid_args", "denied", "limit_memory").
 */
#ifndef LUAGENT_ERR_H
#define LUAGENT_ERR_H

#include <stdarg.h>

enum {
  ERR_OK = 0,
  ERR_FAIL = -1,     /* generic failure; see code/msg */
  ERR_NOMEM = -2,
  ERR_NOTFOUND = -3,
  ERR_INVALID = -4,  /* bad input: arguments, config, file contents */
  ERR_DENIED = -5,   /* refused by the security pipeline */
  ERR_LIMIT = -6,    /* a resource limit was hit */
  ERR_IO = -7,
  ERR_STOPPED = -8,  /* the operator stopped the run */
};

struct err {
  int rc;          /* the ERR_* value last set */
  char code[32];   /* short machine-readable kind, e.g. "invalid_args" */
  char msg[1024];  /* human-readable, names what and where */
  char subject[128]; /* optional: what the error is about (a tool name) */
};

/* err_set fills e (which may be NULL) and returns rc, so callers can write
 * `return err_set(e, ERR_INVALID, "invalid_args", "...", ...)`. */
int err_set(struct err *e, int rc, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int err_setv(struct err *e, int rc, const char *code, const char *fmt, va_list ap);
/* err_prefix prepends "prefix: " to the message, keeping rc and code. */
void err_prefix(struct err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void err_clear(struct err *e);

#endif
