/* security.c - minimal policy kernel: allows every validated call. The full
 * pipeline (rules, hooks, impact, taint, approvals, audit) replaces this. */
#include "security.h"

#include <stdlib.h>

#include "runtime.h"
#include "util.h"

struct security {
  int unused;
};

int sec_new(struct runtime *rt, struct security **out, struct err *e) {
  (void)rt, (void)e;
  *out = xcalloc(1, sizeof **out);
  return 0;
}

void sec_free(struct security *s) { free(s); }

int sec_before(struct call_ctx *ctx, const struct tool *t, cJSON **args, int *args_owned,
               struct sec_decision *d, struct err *e) {
  (void)ctx, (void)t, (void)e;
  *args_owned = 0;
  d->action = SEC_ALLOW;
  d->started = util_monotonic();
  json_hash_hex(*args, d->args_hash);
  return 0;
}

void sec_after(struct call_ctx *ctx, const struct tool *t, const cJSON *args,
               struct sec_decision *d, int rc, cJSON **result, const struct err *herr) {
  (void)ctx, (void)t, (void)args, (void)d, (void)rc, (void)result, (void)herr;
}
