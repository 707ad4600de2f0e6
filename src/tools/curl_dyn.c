/* curl_dyn.c - libcurl's functions, forwarded to libcurl loaded on first
 * use (curl_dyn.h). */
#include "curl_dyn.h"

#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>

#include "dynlib.h"

#ifndef LUAGENT_CURL_SONAME
#define LUAGENT_CURL_SONAME "libcurl.so.4"
#endif
/* curl_url_get and curl_url_dup take a const handle in newer libcurl;
 * CMake finds out which the installed header declares. */
#ifndef LUAGENT_CURLU_CONST
#define LUAGENT_CURLU_CONST
#endif

/* X(return type, name, (parameters), (arguments), value when libcurl is
 * missing); V(...) the same for functions returning nothing. The variadic
 * ones (curl_easy_setopt, curl_easy_getinfo, curl_multi_setopt,
 * curl_share_setopt) are written out below. */
#define CURL_FNS(X, V)                                                                            \
  V(curl_global_cleanup, (void), ())                                                              \
  X(CURL *, curl_easy_init, (void), (), NULL)                                                     \
  X(CURLcode, curl_easy_perform, (CURL * h), (h), CURLE_FAILED_INIT)                              \
  V(curl_easy_cleanup, (CURL * h), (h))                                                           \
  V(curl_easy_reset, (CURL * h), (h))                                                             \
  X(CURL *, curl_easy_duphandle, (CURL * h), (h), NULL)                                           \
  X(CURLcode, curl_easy_pause, (CURL * h, int mask), (h, mask), CURLE_FAILED_INIT)                \
  X(CURLcode, curl_easy_upkeep, (CURL * h), (h), CURLE_FAILED_INIT)                               \
  X(char *, curl_easy_escape, (CURL * h, const char *s, int n), (h, s, n), NULL)                  \
  X(char *, curl_easy_unescape, (CURL * h, const char *s, int n, int *out), (h, s, n, out), NULL) \
  X(struct curl_slist *, curl_slist_append, (struct curl_slist * l, const char *s), (l, s), NULL) \
  V(curl_slist_free_all, (struct curl_slist * l), (l))                                            \
  V(curl_free, (void *p), (p))                                                                    \
  X(char *, curl_version, (void), (), NULL)                                                       \
  X(curl_version_info_data *, curl_version_info, (CURLversion v), (v), NULL)                      \
  X(CURLU *, curl_url, (void), (), NULL)                                                          \
  V(curl_url_cleanup, (CURLU * u), (u))                                                           \
  X(CURLU *, curl_url_dup, (LUAGENT_CURLU_CONST CURLU * u), (u), NULL)                            \
  X(CURLUcode, curl_url_get,                                                                      \
    (LUAGENT_CURLU_CONST CURLU * u, CURLUPart what, char **part, unsigned int flags),             \
    (u, what, part, flags), CURLUE_OUT_OF_MEMORY)                                                 \
  X(CURLUcode, curl_url_set, (CURLU * u, CURLUPart what, const char *part, unsigned int flags),   \
    (u, what, part, flags), CURLUE_OUT_OF_MEMORY)                                                 \
  X(CURLSH *, curl_share_init, (void), (), NULL)                                                  \
  X(CURLSHcode, curl_share_cleanup, (CURLSH * s), (s), CURLSHE_NOT_BUILT_IN)                      \
  X(const char *, curl_share_strerror, (CURLSHcode c), (c), curl_dyn_why())                       \
  X(CURLM *, curl_multi_init, (void), (), NULL)                                                   \
  X(CURLMcode, curl_multi_add_handle, (CURLM * m, CURL * h), (m, h), CURLM_INTERNAL_ERROR)         \
  X(CURLMcode, curl_multi_remove_handle, (CURLM * m, CURL * h), (m, h), CURLM_INTERNAL_ERROR)      \
  X(CURLMcode, curl_multi_perform, (CURLM * m, int *running), (m, running), CURLM_INTERNAL_ERROR)  \
  X(CURLMcode, curl_multi_poll,                                                                   \
    (CURLM * m, struct curl_waitfd * fds, unsigned int n, int ms, int *numfds),                   \
    (m, fds, n, ms, numfds), CURLM_INTERNAL_ERROR)                                                \
  X(CURLMcode, curl_multi_wait, (CURLM * m, struct curl_waitfd * fds, unsigned int n, int ms,     \
                                 int *numfds),                                                    \
    (m, fds, n, ms, numfds), CURLM_INTERNAL_ERROR)                                                \
  X(CURLMcode, curl_multi_wakeup, (CURLM * m), (m), CURLM_INTERNAL_ERROR)                         \
  X(CURLMcode, curl_multi_timeout, (CURLM * m, long *ms), (m, ms), CURLM_INTERNAL_ERROR)          \
  X(CURLMsg *, curl_multi_info_read, (CURLM * m, int *left), (m, left), NULL)                     \
  X(CURLMcode, curl_multi_cleanup, (CURLM * m), (m), CURLM_INTERNAL_ERROR)                        \
  X(const char *, curl_multi_strerror, (CURLMcode c), (c), curl_dyn_why())

static const char *curl_dyn_why(void);

/* the real functions, filled by dynlib_load */
#define PTR_X(ret, name, params, args, fail) static ret(*p_##name) params;
#define PTR_V(name, params, args) static void(*p_##name) params;
CURL_FNS(PTR_X, PTR_V)
static CURLcode (*p_curl_global_init)(long);
static CURLcode (*p_curl_easy_setopt)(CURL *, CURLoption, ...);
static CURLcode (*p_curl_easy_getinfo)(CURL *, CURLINFO, ...);
static CURLMcode (*p_curl_multi_setopt)(CURLM *, CURLMoption, ...);
static CURLSHcode (*p_curl_share_setopt)(CURLSH *, CURLSHoption, ...);
static const char *(*p_curl_easy_strerror)(CURLcode);

#define SYM_X(ret, name, params, args, fail) {#name, (void **)&p_##name},
#define SYM_V(name, params, args) {#name, (void **)&p_##name},
static const struct dynlib_sym syms[] = {
    CURL_FNS(SYM_X, SYM_V){"curl_global_init", (void **)&p_curl_global_init},
    {"curl_easy_setopt", (void **)&p_curl_easy_setopt},
    {"curl_easy_getinfo", (void **)&p_curl_easy_getinfo},
    {"curl_multi_setopt", (void **)&p_curl_multi_setopt},
    {"curl_share_setopt", (void **)&p_curl_share_setopt},
    {"curl_easy_strerror", (void **)&p_curl_easy_strerror},
};

/* curl_global_init is not thread-safe in every libcurl: it runs here, once,
 * under the loader's lock, before any other call can reach libcurl, with
 * the flags of any curl_global_init call made before the load. */
static long init_flags = CURL_GLOBAL_DEFAULT;
static void on_load(void) { p_curl_global_init(__atomic_load_n(&init_flags, __ATOMIC_ACQUIRE)); }

static struct dynlib lib = {.what = "libcurl",
                            .soname = LUAGENT_CURL_SONAME,
                            .env = "LUAGENT_LIBCURL",
                            .package = "the libcurl4 package",
                            .syms = syms,
                            .nsyms = sizeof syms / sizeof syms[0],
                            .on_load = on_load,
                            .lock = PTHREAD_MUTEX_INITIALIZER};

static const char *curl_dyn_why(void) { return dynlib_error(&lib); }

int curl_dyn_load(struct err *e) { return dynlib_load(&lib, e); }

#define DEF_X(ret, name, params, args, fail) DYNLIB_FORWARD(lib, 1, ret, name, params, args, fail)
#define DEF_V(name, params, args) DYNLIB_FORWARD_VOID(lib, name, params, args)
CURL_FNS(DEF_X, DEF_V)

/* Initialising does not load libcurl: a curl_global_init at start (as
 * runtime_open had) must not bring back the cost this file removes. Before
 * the load it only notes the flags; on_load initialises with them. */
CURLcode(curl_global_init)(long flags) {
  if (dynlib_loaded(&lib)) return p_curl_global_init(flags);
  __atomic_or_fetch(&init_flags, flags, __ATOMIC_ACQ_REL);
  return CURLE_OK;
}

const char *(curl_easy_strerror)(CURLcode c) {
  if (!dynlib_ready(&lib, 1)) return curl_dyn_why();
  return p_curl_easy_strerror(c);
}

/* An option's number says the type of its one argument (libcurl's own
 * CURLOPTTYPE_ bands, which curl_multi_setopt shares); it is read as that
 * type and passed on. */
#define FORWARD_BY_TYPE(fn, h, opt, ap)                                              \
  ((opt) < CURLOPTTYPE_OBJECTPOINT     ? fn(h, opt, va_arg(ap, long))               \
   : (opt) < CURLOPTTYPE_FUNCTIONPOINT ? fn(h, opt, va_arg(ap, void *))             \
   : (opt) < CURLOPTTYPE_OFF_T         ? fn(h, opt, va_arg(ap, void (*)(void)))     \
   : (opt) < CURLOPTTYPE_BLOB          ? fn(h, opt, va_arg(ap, curl_off_t))         \
                                       : fn(h, opt, va_arg(ap, void *)))

CURLcode(curl_easy_setopt)(CURL *h, CURLoption opt, ...) {
  if (!dynlib_ready(&lib, 1)) return CURLE_FAILED_INIT;
  va_list ap;
  va_start(ap, opt);
  CURLcode rc = FORWARD_BY_TYPE(p_curl_easy_setopt, h, opt, ap);
  va_end(ap);
  return rc;
}

CURLMcode(curl_multi_setopt)(CURLM *m, CURLMoption opt, ...) {
  if (!dynlib_ready(&lib, 1)) return CURLM_INTERNAL_ERROR;
  va_list ap;
  va_start(ap, opt);
  CURLMcode rc = FORWARD_BY_TYPE(p_curl_multi_setopt, m, opt, ap);
  va_end(ap);
  return rc;
}

/* every CURLINFO_ takes a pointer to where the answer goes */
CURLcode(curl_easy_getinfo)(CURL *h, CURLINFO info, ...) {
  if (!dynlib_ready(&lib, 1)) return CURLE_FAILED_INIT;
  va_list ap;
  va_start(ap, info);
  CURLcode rc = p_curl_easy_getinfo(h, info, va_arg(ap, void *));
  va_end(ap);
  return rc;
}

/* SHARE and UNSHARE take an int (a curl_lock_data), the rest a pointer */
CURLSHcode(curl_share_setopt)(CURLSH *s, CURLSHoption opt, ...) {
  if (!dynlib_ready(&lib, 1)) return CURLSHE_NOT_BUILT_IN;
  va_list ap;
  va_start(ap, opt);
  CURLSHcode rc;
  if (opt == CURLSHOPT_SHARE || opt == CURLSHOPT_UNSHARE)
    rc = p_curl_share_setopt(s, opt, va_arg(ap, int));
  else if (opt == CURLSHOPT_LOCKFUNC || opt == CURLSHOPT_UNLOCKFUNC)
    rc = p_curl_share_setopt(s, opt, va_arg(ap, void (*)(void)));
  else
    rc = p_curl_share_setopt(s, opt, va_arg(ap, void *));
  va_end(ap);
  return rc;
}
