/* llm_conn.c - see llm_impl.h: the process's idle HTTP clients, so model
 * calls reuse their provider connections.
 *
 * A libcurl easy handle keeps the connections it used open in its own
 * cache (up to CURLOPT_MAXCONNECTS, default 5) once a response ends
 * cleanly. Parking the handle here after each llm_complete, instead of
 * cleaning it up, keeps the TCP (and TLS) connection for the next turn,
 * the next delegate() and the next client made from the same config: a
 * 10-turn task opens one connection, not eleven. A handle is only ever
 * used by the thread that took it, so parallel tool threads (delegate()
 * from several at once) each get their own and libcurl needs no locks;
 * an aborted or broken transfer makes libcurl close that connection
 * itself, and a connection the server closed while idle is noticed and
 * replaced by libcurl on the next request.
 *
 * fork(): a daemon worker inherits the parked handles, and with them
 * sockets the parent still uses. A child must never write on those (two
 * processes on one TCP stream, or one TLS session, garble both), nor
 * clean them up (closing a TLS handle sends close_notify on the parent's
 * session). So a child forgets the parent's handles without touching them
 * (they stay referenced, unused) and builds its own.
 *
 * Each parked client also keeps the URL it was last used with, parsed
 * (CURLOPT_CURLU): libcurl would otherwise parse the URL text again on
 * every request, and a client mostly serves one provider's endpoint.
 *
 * The proxy environment is read once per llm_client (llm_impl.h, struct
 * llm__proxy_env), not by libcurl on every transfer: llm__conn_proxy
 * sets what libcurl would have found. */
#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "llm_impl.h"
#include "util.h"

#define IDLE_MAX 8 /* parked clients kept; more parallel calls clean theirs up */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct llm__conn *idle[IDLE_MAX];
static int nidle;
static pid_t owner; /* the process the parked clients belong to */
/* A child's copy of its parent's clients: referenced, never used. */
static struct llm__conn *inherited[IDLE_MAX];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* fork() while another thread holds mu would leave the child's copy
 * locked for good: hold it across the fork instead. */
static void before_fork(void) { pthread_mutex_lock(&mu); }
static void after_fork_parent(void) { pthread_mutex_unlock(&mu); }
static void after_fork_child(void) { pthread_mutex_unlock(&mu); }

static void init_once(void) {
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* Drops the parent's clients in a forked child (mu held). */
static void adopt_locked(void) {
  pid_t me = getpid();
  if (owner == me) return;
  for (int i = 0; i < nidle; i++) inherited[i] = idle[i];
  nidle = 0;
  owner = me;
}

static void conn_free(struct llm__conn *c) {
  if (!c) return;
  curl_url_cleanup(c->u); /* NULL is a no-op */
  free(c->url);
  if (c->h) curl_easy_cleanup(c->h);
  free(c);
}

struct llm__conn *llm__conn_take(void) {
  pthread_once(&once, init_once);
  pthread_mutex_lock(&mu);
  adopt_locked();
  struct llm__conn *c = nidle ? idle[--nidle] : NULL;
  pthread_mutex_unlock(&mu);
  if (c) return c;
  c = xcalloc(1, sizeof *c);
  if (!(c->h = curl_easy_init())) {
    free(c);
    return NULL;
  }
  return c;
}

/* Whether url is base followed by path. */
static bool url_is(const char *url, const char *base, const char *path) {
  size_t n = strlen(base);
  return !strncmp(url, base, n) && !strcmp(url + n, path);
}

CURLU *llm__conn_url(struct llm__conn *c, const char *base, const char *path) {
  if (c->u && url_is(c->url, base, path)) return c->u;
  curl_url_cleanup(c->u);
  c->u = NULL;
  free(c->url);
  size_t nb = strlen(base), np = strlen(path);
  c->url = xmalloc(nb + np + 1);
  memcpy(c->url, base, nb);
  memcpy(c->url + nb, path, np + 1);
  /* parsed as CURLOPT_URL parses a URL (the flags its parser gets), so
   * the request line and every check are the same */
  CURLU *u = curl_url();
  if (u && curl_url_set(u, CURLUPART_URL, c->url, CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME)) {
    curl_url_cleanup(u);
    u = NULL;
  }
  c->u = u;
  /* the scheme libcurl will pick the handler by (a guessed one included),
   * which names the proxy variable it would read */
  c->scheme = 0;
  char *sch = NULL;
  if (u && !curl_url_get(u, CURLUPART_SCHEME, &sch, 0) && sch)
    c->scheme = !strcasecmp(sch, "http") ? 1 : !strcasecmp(sch, "https") ? 2 : 0;
  curl_free(sch);
  return u;
}

/* getenv(lower), else getenv(upper) when upper is given, copied; an empty
 * variable counts as unset, as curl_getenv returns NULL for one. */
static char *env_dup(const char *lower, const char *upper) {
  const char *v = getenv(lower);
  if ((!v || !*v) && upper) v = getenv(upper);
  return v && *v ? xstrdup(v) : NULL;
}

void llm__proxy_env_read(struct llm__proxy_env *pe) {
  llm__proxy_env_free(pe);
  /* libcurl 7.88's order (url.c): no_proxy, then NO_PROXY; <scheme>_proxy
   * in lower case, then in upper case except for http (HTTP_PROXY is what
   * a CGI script gets from a request's Proxy: header); then all_proxy,
   * ALL_PROXY. A variable set to "" counts as unset (curl_getenv): an
   * empty http_proxy falls back to all_proxy, an empty no_proxy to
   * NO_PROXY. */
  pe->no_proxy = env_dup("no_proxy", "NO_PROXY");
  pe->http = env_dup("http_proxy", NULL);
  pe->https = env_dup("https_proxy", "HTTPS_PROXY");
  pe->all = env_dup("all_proxy", "ALL_PROXY");
  pe->read = true;
}

void llm__proxy_env_free(struct llm__proxy_env *pe) {
  free(pe->no_proxy);
  free(pe->http);
  free(pe->https);
  free(pe->all);
  memset(pe, 0, sizeof *pe);
}

void llm__conn_proxy(struct llm__conn *c, const struct llm__proxy_env *pe) {
  if (!pe || !pe->read || !c->u || !c->scheme) {
    /* libcurl's own lookup, as on a fresh handle: a parked one keeps
     * options between calls (llm__conn_give), an earlier call's included */
    curl_easy_setopt(c->h, CURLOPT_NOPROXY, NULL);
    curl_easy_setopt(c->h, CURLOPT_PROXY, NULL);
    return;
  }
  /* An explicit CURLOPT_NOPROXY is matched against the host just as the
   * variable would be, and applies to any proxy; "" matches no host. ""
   * as CURLOPT_PROXY means no proxy, as an unset environment does. */
  const char *px = c->scheme == 2 ? pe->https : pe->http;
  if (!px) px = pe->all;
  curl_easy_setopt(c->h, CURLOPT_NOPROXY, pe->no_proxy ? pe->no_proxy : "");
  curl_easy_setopt(c->h, CURLOPT_PROXY, px ? px : "");
}

void llm__conn_reset(struct llm__conn *c) {
  curl_easy_reset(c->h);
  c->base_set = false;
}

void llm__conn_give(struct llm__conn *c) {
  if (!c) return;
  /* Parked with none of the last call's pointers: attempt() (llm.c)
   * cleared every option pointing at its buffers, its stack or the URL
   * handle once the transfer ended, and sets the others anew for the next
   * call. What stays set are the options every call sets alike (static
   * callbacks, flags, libcurl's copies of constant strings), so a call
   * does not pay for curl_easy_reset and setting them again (~4k
   * instructions a request). The connections stay, and so does the parsed
   * URL (not an option: the client's own). */
  pthread_mutex_lock(&mu);
  adopt_locked();
  if (nidle < IDLE_MAX) {
    idle[nidle++] = c;
    c = NULL;
  }
  pthread_mutex_unlock(&mu);
  conn_free(c); /* more in flight at once than kept idle */
}
