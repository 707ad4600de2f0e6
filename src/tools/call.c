/* call.c - caller kinds, call contexts, run ids, the lazily opened store. */
#include "call.h"

#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

static const char *const caller_names[CALLER_KIND_COUNT] = {"operator",  "model",  "automation",
                                                           "skill",     "script", "mcp"};

const char *caller_kind_name(enum caller_kind k) {
  return (unsigned)k < CALLER_KIND_COUNT ? caller_names[k] : "?";
}

int caller_kind_parse(const char *s, enum caller_kind *out) {
  for (int i = 0; s && i < CALLER_KIND_COUNT; i++)
    if (!strcmp(s, caller_names[i])) {
      *out = (enum caller_kind)i;
      return 0;
    }
  return ERR_INVALID;
}

bool call_ctx_may_reach(const struct call_ctx *c, const char *name) {
  if (!c->chunk) return true;
  for (const char *const *t = c->chunk->tools; t && *t; t++)
    if (!strcmp(*t, name)) return true;
  return false;
}

/* Serialises the first open of any runtime's store: two tool threads
 * that both found it NULL would otherwise open two, one leaked and its
 * writes outside the store the runtime closes. Held only on that first
 * open; afterwards the acquire load below is all a call costs. */
static pthread_mutex_t store_open_mu = PTHREAD_MUTEX_INITIALIZER;

int runtime_store(struct runtime *rt, struct store **out, struct err *e) {
  struct store *s = atomic_load_explicit(&rt->store, memory_order_acquire);
  if (!s) {
    pthread_mutex_lock(&store_open_mu);
    s = atomic_load_explicit(&rt->store, memory_order_relaxed);
    if (!s && !store_open_shared(rt->workspace, &s, e))
      atomic_store_explicit(&rt->store, s, memory_order_release);
    pthread_mutex_unlock(&store_open_mu);
    if (!s) {
      *out = NULL;
      return ERR_IO;
    }
  }
  *out = s;
  return 0;
}

void call_ctx_init_run(struct call_ctx *ctx, struct runtime *rt, enum caller_kind kind,
                       const char *name, const char *run_id) {
  memset(ctx, 0, sizeof *ctx);
  if (run_id) util_copy(ctx->run_id, sizeof ctx->run_id, run_id);
  ctx->rt = rt;
  ctx->caller.kind = kind;
  util_copy(ctx->caller.name, sizeof ctx->caller.name, name ? name : "");
  ctx->limits = rt->cfg->limits;
  ctx->run = &ctx->run_own;
}

void call_ctx_init(struct call_ctx *ctx, struct runtime *rt, enum caller_kind kind,
                   const char *name) {
  call_ctx_init_run(ctx, rt, kind, name, NULL);
  runtime_new_run_id(ctx->run_id);
}

void runtime_new_run_id(char out[40]) {
  unsigned char rnd[6];
  char hex[13];
  randombytes_buf(rnd, sizeof rnd);
  util_hex(rnd, sizeof rnd, hex);
  util_run_id_text(out, (unsigned long)util_now(), hex);
}
