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
 * (they stay referenced, unused) and builds its own. */
#include <curl/curl.h>
#include <pthread.h>
#include <unistd.h>

#include "llm_impl.h"
#include "util.h"

#define IDLE_MAX 8 /* parked handles kept; more parallel calls clean theirs up */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static CURL *idle[IDLE_MAX];
static int nidle;
static pid_t owner; /* the process the parked handles belong to */
/* A child's copy of its parent's handles: referenced, never used. */
static CURL *inherited[IDLE_MAX];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* fork() while another thread holds mu would leave the child's copy
 * locked for good: hold it across the fork instead. */
static void before_fork(void) { pthread_mutex_lock(&mu); }
static void after_fork_parent(void) { pthread_mutex_unlock(&mu); }
static void after_fork_child(void) { pthread_mutex_unlock(&mu); }

static void init_once(void) {
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* Drops the parent's handles in a forked child (mu held). */
static void adopt_locked(void) {
  pid_t me = getpid();
  if (owner == me) return;
  for (int i = 0; i < nidle; i++) inherited[i] = idle[i];
  nidle = 0;
  owner = me;
}

CURL *llm__conn_take(void) {
  pthread_once(&once, init_once);
  pthread_mutex_lock(&mu);
  adopt_locked();
  CURL *h = nidle ? idle[--nidle] : NULL;
  pthread_mutex_unlock(&mu);
  return h ? h : curl_easy_init();
}

void llm__conn_give(CURL *h) {
  if (!h) return;
  /* Parked without the last call's options: they point at its buffers
   * and callbacks (freed by now). The connections stay. */
  curl_easy_reset(h);
  pthread_mutex_lock(&mu);
  adopt_locked();
  if (nidle < IDLE_MAX) {
    idle[nidle++] = h;
    h = NULL;
  }
  pthread_mutex_unlock(&mu);
  if (h) curl_easy_cleanup(h); /* more in flight at once than kept idle */
}
