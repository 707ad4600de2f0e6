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
/* llm_client_from_json with the folder a script's `file` is relative to. */
int llm__client_from_json(const cJSON *providers, const char *where, const char *basedir,
                          struct llm_client **out, struct err *e);

struct llm__stream;
/* llm.c: the error an llm__ helper recorded (a cap crossed), or 0. */
int llm__stream_error(struct llm__stream *s, struct err *e);

/* llm_script.c */
/* Reads and checks the script of provider p from its table o (`turns` or
 * `file`, the latter relative to basedir, NULL meaning the current
 * folder); where names the entry in messages. */
int llm__script_config(const cJSON *o, const char *where, const char *basedir,
                       struct llm_provider *p, struct err *e);
/* Checks a list of turns or alternatives; where names it in messages. */
int llm__script_check(const cJSON *turns, const char *where, struct err *e);
/* One scripted answer, reported through the llm__ helpers of llm.h.
 * Returns 0, or ERR_STOPPED / ERR_LIMIT (not worth another provider) or
 * another code (the next provider may answer). */
int llm__script_attempt(const struct llm_provider *p, const struct llm_request *req,
                        struct llm__stream *s, struct err *e);

/* llm_conn.c: the idle HTTP clients of the process, whose connections to
 * the providers stay open between model calls. take returns a parked
 * client (its handle reset: no options set) or a new one (NULL when out
 * of memory); the caller alone uses it until it gives it back with give,
 * which parks it or cleans it up (NULL is a no-op). Thread-safe; a forked
 * child never reuses its parent's clients. */
struct llm__conn {
  CURL *h;
  CURLU *u;  /* the URL last asked for, parsed (NULL: none) */
  char *url; /* its text */
};
struct llm__conn *llm__conn_take(void);
void llm__conn_give(struct llm__conn *c);
/* The parsed URL base followed by path, for CURLOPT_CURLU: the client's
 * own (valid until the next call or give), parsed only when it is not the
 * one the client last used; c->url is then its text. NULL when libcurl
 * refuses it (out of memory, a malformed URL): then set CURLOPT_URL to
 * c->url instead, and libcurl says what is wrong with it. */
CURLU *llm__conn_url(struct llm__conn *c, const char *base, const char *path);

#endif
