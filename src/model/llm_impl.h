/* llm_impl.h - what llm.c and llm_provider.c share; no one else includes
 * it (the wire formats use the llm__ part of llm.h). The functions below
 * lost their `static` when llm.c was split, unchanged otherwise. */
#ifndef LUAGENT_LLM_IMPL_H
#define LUAGENT_LLM_IMPL_H

#include <curl/curl.h>

#include "llm.h"

struct llm_client {
  struct llm_provider *p;
  size_t n;
};

/* llm_provider.c */
int llm__no_provider(struct err *e);

/* llm_conn.c: the idle HTTP clients of the process, whose connections to
 * the providers stay open between model calls. take returns a parked
 * handle (reset it before use) or a new one (NULL when out of memory);
 * the caller alone uses it until it gives it back with give, which parks
 * it or cleans it up (NULL is a no-op). Thread-safe; a forked child never
 * reuses its parent's handles. */
CURL *llm__conn_take(void);
void llm__conn_give(CURL *h);

#endif
