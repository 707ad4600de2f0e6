/* dynlib.h - a shared library loaded on its first use (dlopen), not by the
 * dynamic loader at start.
 *
 * Why: libcurl alone brings ~30 shared libraries (TLS, Kerberos, LDAP,
 * SSH...) and the loader spent most of a `luagent version` relocating
 * them. A command that never makes an HTTP request (version, tools list,
 * runs, audit...) should not pay for that, nor for libmicrohttpd (the
 * console, `mcp serve --http`). The layer that owns such a library keeps
 * a table of function pointers filled by dynlib_load and forwards to it
 * (tools/curl_dyn.c, mcp/mhd_dyn.c, store/pq_dyn.c): the forwarders keep
 * the library's own function names, so callers use its headers and call it
 * as before; only the link changes (the library is linked nowhere).
 *
 * A struct dynlib is a static object, one per library:
 *   static struct dynlib curl = {.what = "libcurl", .soname = "libcurl.so.4",
 *                                .env = "LUAGENT_LIBCURL", .syms = syms, ...,
 *                                .lock = PTHREAD_MUTEX_INITIALIZER};
 */
#ifndef LUAGENT_DYNLIB_H
#define LUAGENT_DYNLIB_H

#include <pthread.h>
#include <stddef.h>

#include "err.h"

struct dynlib_sym {
  const char *name; /* the exported symbol */
  void **slot;      /* where its address goes: (void **)&fn_pointer */
};

struct dynlib {
  const char *what;    /* named in messages: "libcurl" */
  const char *soname;  /* what dlopen looks for: "libcurl.so.4" */
  const char *env;     /* optional: an environment variable naming another file to load */
  const char *package; /* optional: what to install, said in the error ("the libcurl4 package") */
  const struct dynlib_sym *syms;
  size_t nsyms;
  void (*on_load)(void); /* optional: run once, right after every symbol resolved */
  pthread_mutex_t lock;  /* PTHREAD_MUTEX_INITIALIZER */
  /* state, zero-initialised */
  int state; /* 0 not tried, 1 loaded, -1 failed (read atomically) */
  int told;  /* dynlib_ready said the failure */
  char error[512];
};

/* Loads d once per process (thread-safe; later calls cost one atomic
 * load). Returns 0 when every symbol of d->syms resolved, else ERR_FAIL
 * with a message naming the library, the file and why (which symbol is
 * missing, dlerror's text) and the package that provides it. A failure is
 * final: every later call returns the same error without trying again. */
int dynlib_load(struct dynlib *d, struct err *e);

/* 1 when d is loaded (no attempt made), else 0. */
int dynlib_loaded(struct dynlib *d);

/* Why d failed to load ("" when it did not fail). The string lives in d. */
const char *dynlib_error(struct dynlib *d);
/* For a forwarder: 1 when d's functions may be called (loading d on first
 * use). say != 0: the first failure is written to stderr, once per
 * library, because a caller may only see NULL or an error code that does
 * not say the library itself is missing. */
int dynlib_ready(struct dynlib *d, int say);

/* The forwarders, one per function of a library's X-macro table, in the
 * file that owns the library's `static struct dynlib LIB` and the pointers
 * p_NAME it fills. The names are in parentheses: a library's header may
 * define some of them as macros (curl's type checks), which must not
 * expand here. A function returning void never loads the library (what it
 * frees or stops can only exist if it is loaded). */
#define DYNLIB_FORWARD(lib, say, ret, name, params, args, fail) \
  ret(name) params {                                            \
    if (!dynlib_ready(&(lib), say)) return fail;                \
    return p_##name args;                                       \
  }
#define DYNLIB_FORWARD_VOID(lib, name, params, args) \
  void(name) params {                                \
    if (dynlib_loaded(&(lib))) p_##name args;        \
  }

#endif
