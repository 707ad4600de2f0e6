/* dynlib.c - shared libraries loaded on first use (dynlib.h). */
#include "dynlib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(struct dynlib *d, struct err *e) {
  return err_set(e, ERR_FAIL, "library", "%s", d->error);
}

/* The advice that ends a message: where to get the library, and the
 * variable that names another file. */
static void advice(const struct dynlib *d, char *out, size_t n) {
  if (d->package && d->env)
    snprintf(out, n, " (install %s, or name the library's file in %s)", d->package, d->env);
  else if (d->package)
    snprintf(out, n, " (install %s)", d->package);
  else if (d->env)
    snprintf(out, n, " (name the library's file in %s)", d->env);
  else
    out[0] = 0;
}

/* Under d->lock, d->state == 0: one attempt, its outcome kept in d. */
static void attempt(struct dynlib *d) {
  const char *env = d->env ? getenv(d->env) : NULL;
  const char *file = env && *env ? env : d->soname;
  char tip[256];
  advice(d, tip, sizeof tip);
  /* RTLD_LOCAL: its symbols stay out of the global scope, so nothing else
   * in the process binds to them by accident. RTLD_LAZY, as the loader
   * does at start: the libraries it pulls in that are not linked with
   * -z now (Kerberos, SASL... under libcurl) bind a function when it is
   * first called, not all of them now (RTLD_NOW made loading libcurl cost
   * 16.2M instructions instead of 13.4M). What we call is resolved below,
   * so a library without it still fails here, with a message. */
  void *h = dlopen(file, RTLD_LAZY | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    snprintf(d->error, sizeof d->error, "%s could not be loaded: %s%s", d->what, why ? why : file,
             tip);
    __atomic_store_n(&d->state, -1, __ATOMIC_RELEASE);
    return;
  }
  for (size_t i = 0; i < d->nsyms; i++) {
    void *p = dlsym(h, d->syms[i].name);
    if (!p) {
      snprintf(d->error, sizeof d->error,
               "%s could not be loaded: %s has no %s (older than luagent needs)%s", d->what, file,
               d->syms[i].name, tip);
      for (size_t k = 0; k < i; k++) *d->syms[k].slot = NULL;
      dlclose(h);
      __atomic_store_n(&d->state, -1, __ATOMIC_RELEASE);
      return;
    }
    *d->syms[i].slot = p;
  }
  /* never closed: the pointers stay valid for the life of the process */
  if (d->on_load) d->on_load();
  __atomic_store_n(&d->state, 1, __ATOMIC_RELEASE);
}

int dynlib_load(struct dynlib *d, struct err *e) {
  int s = __atomic_load_n(&d->state, __ATOMIC_ACQUIRE);
  if (s > 0) return 0;
  if (s < 0) return fail(d, e);
  pthread_mutex_lock(&d->lock);
  if (__atomic_load_n(&d->state, __ATOMIC_ACQUIRE) == 0) attempt(d);
  pthread_mutex_unlock(&d->lock);
  return dynlib_load(d, e);
}

int dynlib_loaded(struct dynlib *d) {
  return __atomic_load_n(&d->state, __ATOMIC_ACQUIRE) > 0;
}

const char *dynlib_error(struct dynlib *d) {
  return __atomic_load_n(&d->state, __ATOMIC_ACQUIRE) < 0 ? d->error : "";
}

int dynlib_ready(struct dynlib *d, int say) {
  if (dynlib_loaded(d)) return 1;
  struct err e = {0};
  if (!dynlib_load(d, &e)) return 1;
  if (say && !__atomic_exchange_n(&d->told, 1, __ATOMIC_ACQ_REL))
    fprintf(stderr, "luagent: %s\n", e.msg);
  return 0;
}
