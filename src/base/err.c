/* err.c - see err.h. */
#include "err.h"

#include <stdio.h>
#include <string.h>

int err_setv(struct err *e, int rc, const char *code, const char *fmt, va_list ap) {
  if (!e) return rc;
  e->rc = rc;
  snprintf(e->code, sizeof e->code, "%s", code ? code : "error");
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  return rc;
}

int err_set(struct err *e, int rc, const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  err_setv(e, rc, code, fmt, ap);
  va_end(ap);
  return rc;
}

void err_prefix(struct err *e, const char *fmt, ...) {
  if (!e) return;
  char pre[256], old[sizeof e->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  memcpy(old, e->msg, sizeof old);
  size_t n = (size_t)snprintf(e->msg, sizeof e->msg, "%s: ", pre);
  if (n < sizeof e->msg) snprintf(e->msg + n, sizeof e->msg - n, "%.*s", (int)(sizeof e->msg - n - 1), old);
}

void err_clear(struct err *e) {
  if (!e) return;
  e->rc = 0;
  e->code[0] = 0;
  e->msg[0] = 0;
  e->subject[0] = 0;
}
