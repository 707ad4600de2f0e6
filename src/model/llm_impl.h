/* llm_impl.h - what llm.c and llm_provider.c share; no one else includes
 * it (the wire formats use the llm__ part of llm.h). The functions below
 * lost their `static` when llm.c was split, unchanged otherwise. */
#ifndef LUAGENT_LLM_IMPL_H
#define LUAGENT_LLM_IMPL_H

#include <curl/curl.h>

#include "llm.h"

/* The proxy environment variables as libcurl reads them (libcurl-env(3),
 * CURLOPT_PROXY, CURLOPT_NOPROXY), read once when a client is made
 * (llm_conn.c). libcurl looks them up itself on every transfer when
 * CURLOPT_PROXY is not set: five getenv calls per request. Each attempt
 * instead sets CURLOPT_PROXY and CURLOPT_NOPROXY from these, with
 * libcurl's own precedence, so a proxy from the environment is used, and
 * bypassed, exactly as before. NULL: the variable is not set, or set to
 * "" (which curl_getenv reports as not set). */
struct llm__proxy_env {
  bool read;      /* false: leave the lookup to libcurl */
  char *no_proxy; /* no_proxy, else NO_PROXY */
  char *http;     /* http_proxy: lower case only, never HTTP_PROXY (CGI) */
  char *https;    /* https_proxy, else HTTPS_PROXY */
  char *all;      /* all_proxy, else ALL_PROXY */
};
void llm__proxy_env_read(struct llm__proxy_env *pe);
void llm__proxy_env_free(struct llm__proxy_env *pe);

struct llm_client {
  struct llm_provider *p;
  size_t n;
  struct llm__proxy_env env; /* read when the client is made */
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
 * client (holding only the options every attempt sets alike: base_set)
 * or a new one (NULL when out of memory); the caller alone uses it until
 * it gives it back with give,
 * which parks it or cleans it up (NULL is a no-op). Thread-safe; a forked
 * child never reuses its parent's clients. */
struct llm__conn {
  CURL *h;
  CURLU *u;  /* the URL last asked for, parsed (NULL: none) */
  char *url; /* its text */
  int scheme; /* u's scheme: 1 http, 2 https, 0 another or none */
  /* The options every attempt sets alike are set (llm.c attempt); false
   * after curl_easy_reset. A parked handle keeps these and nothing else:
   * an attempt clears every option that points at its own memory. */
  bool base_set;
};
/* curl_easy_reset of c's handle (its connections stay). */
void llm__conn_reset(struct llm__conn *c);
/* Sets CURLOPT_PROXY and CURLOPT_NOPROXY on c's handle from pe for the
 * URL last parsed (llm__conn_url), as libcurl would have chosen them from
 * the environment. With pe NULL or not read, or a URL that is not http or
 * https, both go back to their defaults (NULL): libcurl then looks itself
 * (and refuses any other scheme). */
void llm__conn_proxy(struct llm__conn *c, const struct llm__proxy_env *pe);
struct llm__conn *llm__conn_take(void);
void llm__conn_give(struct llm__conn *c);
/* The parsed URL base followed by path, for CURLOPT_CURLU: the client's
 * own (valid until the next call or give), parsed only when it is not the
 * one the client last used; c->url is then its text. NULL when libcurl
 * refuses it (out of memory, a malformed URL): then set CURLOPT_URL to
 * c->url instead, and libcurl says what is wrong with it. */
CURLU *llm__conn_url(struct llm__conn *c, const char *base, const char *path);

#endif
