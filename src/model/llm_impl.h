/* llm_impl.h - what llm.c and llm_provider.c share; no one else includes
 * it (the wire formats use the llm__ part of llm.h). The functions below
 * lost their `static` when llm.c was split, unchanged otherwise. */
#ifndef LUAGENT_LLM_IMPL_H
#define LUAGENT_LLM_IMPL_H

#include "llm.h"

struct llm_client {
  struct llm_provider *p;
  size_t n;
};

/* llm_provider.c */
int llm__no_provider(struct err *e);

#endif
