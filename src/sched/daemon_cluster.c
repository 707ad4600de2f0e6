/* daemon_cluster.c - the daemon as one member of a cluster: joining,
 * heartbeats, lease renewal, the fence, outages and notifications (see
 * daemon_impl.h and cluster.h).
 *
 * The fence is a thread, not a step of the loop: every statement to the
 * database blocks the loop until it answers or its connection gives up
 * (seconds, pg.h), and a run must be stopped before its lease can expire
 * however long that takes. The thread only reads a deadline and kills the
 * pids it was given; everything else stays in the loop's thread.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cluster.h"
#include "config.h"
#include "daemon_impl.h"
#include "json.h"
#include "util.h"

#define MAX_GUARDED 256

struct dcl {
  struct cluster_opts o;
  struct pg *pg;
  PGconn *listening; /* the connection LISTEN was sent on */
  char instance[33];
  int down;           /* in an outage */
  double down_since;  /* monotonic */
  double next_try;    /* monotonic: next reconnect attempt */
  double next_tick;   /* monotonic: next renewal round */
  double next_events; /* monotonic: events fallback poll */
  int events_due, wake_due, renew_due;
  /* the fence (shared with the thread under mu) */
  pthread_t th;
  int th_on;
  pthread_mutex_t mu;
  pid_t pids[MAX_GUARDED];
  int npids;
  double last_ok;            /* monotonic send time of the latest confirmed renewal */
  pid_t killed[MAX_GUARDED]; /* what the fence killed, until the reap asks */
  int nkilled;
  double fence_age; /* seconds since last_ok when it last struck */
  /* The same deadline for the workers (memfd, fd 4 of each worker): a
   * worker stops its run at the next tool call or Lua hook once it passes,
   * even when this process cannot act (stopped, starved). */
  int fence_fd;
  volatile double *fence_map;
  atomic_int fenced, stop;
};

struct pg *daemon__cl_pg(struct daemon *d) {
  return d->cl->pg;
}
const char *daemon__cl_node(struct daemon *d) {
  return d->cl->o.node;
}
double daemon__cl_lease(struct daemon *d) {
  return d->cl->o.lease_s;
}

/* How long before its lease can expire a run is killed: a third of the
 * period at least half a second, so a host whose clock runs a little fast
 * or whose kill takes a moment is still early. */
static double fence_margin(const struct dcl *c) {
  return fmax(0.5, c->o.lease_s / 4);
}

static void *fence_main(void *ud) {
  struct dcl *c = ud;
  while (!atomic_load(&c->stop)) {
    util_sleep(0.05);
    pthread_mutex_lock(&c->mu);
    double age = util_monotonic() - c->last_ok;
    if (c->npids && age > c->o.lease_s - fence_margin(c)) {
      for (int i = 0; i < c->npids; i++) {
        kill(c->pids[i], SIGKILL);
        if (c->nkilled < MAX_GUARDED) c->killed[c->nkilled++] = c->pids[i];
      }
      atomic_fetch_add(&c->fenced, c->npids);
      c->fence_age = age;
      c->npids = 0;
    }
    pthread_mutex_unlock(&c->mu);
  }
  return NULL;
}

void daemon__cl_guard(struct daemon *d, pid_t pid) {
  struct dcl *c = d->cl;
  pthread_mutex_lock(&c->mu);
  if (c->npids < MAX_GUARDED) c->pids[c->npids++] = pid;
  pthread_mutex_unlock(&c->mu);
}

void daemon__cl_unguard(struct daemon *d, pid_t pid) {
  struct dcl *c = d->cl;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->npids; i++)
    if (c->pids[i] == pid) c->pids[i--] = c->pids[--c->npids];
  pthread_mutex_unlock(&c->mu);
}

void daemon__cl_confirmed(struct daemon *d, double t0) {
  struct dcl *c = d->cl;
  pthread_mutex_lock(&c->mu);
  if (t0 > c->last_ok) c->last_ok = t0;
  if (c->fence_map) *c->fence_map = c->last_ok + c->o.lease_s - fence_margin(c);
  pthread_mutex_unlock(&c->mu);
}

int daemon__cl_fence_fd(struct daemon *d) {
  return d->cl && d->cl->fence_map ? d->cl->fence_fd : -1;
}

/* The workers' copy of the fence deadline (see struct dcl). */
static void fence_share(struct dcl *c) {
  c->fence_fd = memfd_create(DAEMON_FENCE_NAME, MFD_CLOEXEC);
  if (c->fence_fd < 0) return;
  if (ftruncate(c->fence_fd, sizeof(double)) == 0) {
    void *m = mmap(NULL, sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED, c->fence_fd, 0);
    if (m != MAP_FAILED) c->fence_map = m;
  }
  if (!c->fence_map) {
    close(c->fence_fd);
    c->fence_fd = -1;
  }
}

int daemon__cl_take_fenced(struct daemon *d) {
  return atomic_exchange(&d->cl->fenced, 0);
}

int daemon__cl_was_fenced(struct daemon *d, pid_t pid) {
  struct dcl *c = d->cl;
  int found = 0;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->nkilled; i++)
    if (c->killed[i] == pid) {
      c->killed[i--] = c->killed[--c->nkilled];
      found = 1;
    }
  pthread_mutex_unlock(&c->mu);
  return found;
}

/* ------------------------------------------------------------ outages */

int daemon__cl_up(struct daemon *d) {
  return d->cl && !d->cl->down;
}

void daemon__cl_failed(struct daemon *d, const struct err *e) {
  struct dcl *c = d->cl;
  PGconn *conn = pg_conn(c->pg);
  int lost = !strcmp(e->subject, "connection") || !conn || PQstatus(conn) != CONNECTION_OK;
  if (!lost) {
    daemon__complain("%s", e->msg);
    return;
  }
  if (c->down) return;
  c->down = 1;
  c->down_since = util_monotonic();
  c->next_try = c->down_since + 1;
  c->listening = NULL;
  daemon__complain(
      "cluster: %s; this host claims nothing until it is back, and its runs are "
      "stopped before their leases (%gs) can expire; retrying every second",
      e->msg, c->o.lease_s);
}

/* LISTEN on the connection pg.c has now (it reopens a broken one). */
static int listen_now(struct daemon *d, struct err *e) {
  struct dcl *c = d->cl;
  if (pg_conn(c->pg) && pg_conn(c->pg) == c->listening) return 0;
  if (pg_exec(c->pg, "LISTEN luagent_events; LISTEN luagent_wake; LISTEN luagent_cancel", e))
    return ERR_IO;
  c->listening = pg_conn(c->pg);
  c->events_due = c->wake_due = 1; /* whatever came while we were not listening */
  return 0;
}

/* ---------------------------------------------------------- membership */

/* The database clock read at `db`, by a statement sent at host time t0:
 * the skew is taken at the round trip's midpoint. */
static void measure_skew(struct daemon *d, double db, double t0) {
  if (db <= 0) return;
  double t1 = util_now();
  d->cl_skew = db - (t0 + t1) / 2;
}

/* Takes this node's row: refused while a live daemon of another instance
 * holds the name (its heartbeat is younger than two lease periods and it
 * did not say it stopped). One conditional upsert decides: a SELECT ...
 * FOR UPDATE before the insert locks nothing while there is no row yet,
 * and two daemons starting at once under a new name would both pass it. */
static int join(struct daemon *d, struct err *e) {
  struct dcl *c = d->cl;
  char pid[16], lease[32], host[256] = "";
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  snprintf(lease, sizeof lease, "%.3f", c->o.lease_s * 2);
  gethostname(host, sizeof host - 1);
  const char *p[] = {c->o.node, c->instance, host, pid, LUAGENT_VERSION, lease};
  PGresult *r = NULL;
  double t0 = util_now();
  if (pg_query(c->pg,
               "INSERT INTO luagent_nodes AS n (node, instance, host, pid, version, started,"
               " heartbeat) VALUES ($1, $2, $3, $4::int, $5, extract(epoch from"
               " clock_timestamp()), extract(epoch from clock_timestamp()))"
               " ON CONFLICT (node) DO UPDATE SET instance = $2, host = $3, pid = $4::int,"
               " version = $5, started = excluded.started, heartbeat = excluded.heartbeat,"
               " stopped = NULL WHERE n.instance = $2 OR n.stopped IS NOT NULL OR"
               " n.heartbeat <= extract(epoch from clock_timestamp()) - $6::float8"
               " RETURNING heartbeat",
               6, p, &r, e))
    return ERR_IO;
  int took = PQntuples(r);
  if (took) measure_skew(d, pg_number(r, 0, 0, 0), t0);
  PQclear(r);
  if (took) return 0;
  const char *p1[] = {c->o.node};
  if (pg_query(c->pg,
               "SELECT host, pid, extract(epoch from clock_timestamp()) - heartbeat"
               " FROM luagent_nodes WHERE node = $1",
               1, p1, &r, e))
    return ERR_IO;
  int have = PQntuples(r);
  err_set(e, ERR_INVALID, "cluster_node_taken",
          "cluster node '%s' is held by a live daemon (pid %s on host %s, heartbeat %.1fs ago); "
          "give this host its own cluster.node in luagent.lua, or stop that daemon",
          c->o.node, have ? pg_text(r, 0, 1) : "?", have ? pg_text(r, 0, 0) : "?",
          have ? pg_number(r, 0, 2, 0) : 0);
  PQclear(r);
  return ERR_INVALID;
}

/* The heartbeat; 0 rows means another instance took the name (this one
 * was thought dead): the daemon stops rather than run as a twin. */
static int heartbeat(struct daemon *d, struct err *e) {
  struct dcl *c = d->cl;
  const char *p[] = {c->o.node, c->instance};
  PGresult *r;
  double t0 = util_now();
  if (pg_query(c->pg,
               "UPDATE luagent_nodes SET heartbeat = extract(epoch from clock_timestamp()),"
               " stopped = NULL WHERE node = $1 AND instance = $2 RETURNING heartbeat",
               2, p, &r, e))
    return ERR_IO;
  int n = PQntuples(r);
  if (n) measure_skew(d, pg_number(r, 0, 0, 0), t0);
  PQclear(r);
  if (!n && !d->evicted) {
    d->evicted = 1;
    daemon__complain(
        "cluster: node '%s' was taken over by another daemon while this one could "
        "not reach the database; stopping",
        c->o.node);
  }
  return 0;
}

static void refresh_alive(struct daemon *d);

int daemon__cl_start(struct daemon *d, struct err *e) {
  struct cluster_opts o;
  int on = 0;
  d->cl = NULL;
  if (cluster_opts_load(d->ws, d->cfg, &o, &on, e)) return e->rc ? e->rc : ERR_INVALID;
  if (!on) return 0;
  struct dcl *c = xcalloc(1, sizeof *c);
  c->o = o;
  c->fence_fd = -1;
  pthread_mutex_init(&c->mu, NULL);
  unsigned char raw[16];
  randombytes_buf(raw, sizeof raw);
  sodium_bin2hex(c->instance, sizeof c->instance, raw, sizeof raw);
  d->cl = c;
  int rc = cluster_open(&c->o, &c->pg, e);
  if (!rc) { /* the skew before anything is scheduled (join and heartbeats refresh it) */
    double t0 = util_now(), db = 0;
    struct err se = {0};
    if (!cluster_now(c->pg, &db, &se)) measure_skew(d, db, t0);
  }
  if (!rc && !d->oneshot) rc = join(d, e); /* `automations run` is no member */
  if (!rc) rc = listen_now(d, e);
  if (rc) {
    if (rc == ERR_IO && !strstr(e->msg, "cluster database"))
      err_prefix(e, "cluster database %s", pg_where(c->pg));
    pg_close(c->pg);
    cluster_opts_free(&c->o);
    pthread_mutex_destroy(&c->mu);
    free(c);
    d->cl = NULL;
    return rc;
  }
  if (!d->oneshot) refresh_alive(d);
  fence_share(c);
  c->last_ok = 0;
  daemon__cl_confirmed(d, util_monotonic());
  if (pthread_create(&c->th, NULL, fence_main, c) == 0) c->th_on = 1;
  c->next_tick = util_monotonic();
  int v = 0;
  struct err ve = {0};
  cluster_schema_read(c->pg, &v, &ve);
  if (!d->oneshot)
    daemon__say(d, "cluster: node %s joined %s (schema %d, lease %gs)", c->o.node, pg_where(c->pg),
                v, c->o.lease_s);
  return 0;
}

void daemon__cl_stop(struct daemon *d) {
  struct dcl *c = d->cl;
  if (!c) return;
  daemon__cl_forget_later(d, NULL);
  free(d->cl_later);
  free(d->cl_alive);
  d->cl_later = NULL;
  d->cl_alive = NULL;
  d->ncl_alive = 0;
  atomic_store(&c->stop, 1);
  if (c->th_on) pthread_join(c->th, NULL);
  if (!c->down && !d->oneshot) {
    struct err e = {0};
    const char *p[] = {c->o.node, c->instance};
    pg_query(c->pg,
             "UPDATE luagent_nodes SET stopped = extract(epoch from clock_timestamp())"
             " WHERE node = $1 AND instance = $2",
             2, p, NULL, &e);
  }
  if (c->fence_map) munmap((void *)c->fence_map, sizeof(double));
  if (c->fence_fd >= 0) close(c->fence_fd);
  pg_close(c->pg);
  cluster_opts_free(&c->o);
  pthread_mutex_destroy(&c->mu);
  free(c);
  d->cl = NULL;
}

/* The live nodes, for each slot's preferred node (daemon_cluster_batch.c). */
static void refresh_alive(struct daemon *d) {
  struct dcl *c = d->cl;
  char ls[32];
  snprintf(ls, sizeof ls, "%.3f", c->o.lease_s * 2);
  const char *p[] = {ls};
  PGresult *r;
  struct err e = {0};
  if (pg_query(c->pg,
               "SELECT node FROM luagent_nodes WHERE stopped IS NULL AND heartbeat >"
               " extract(epoch from clock_timestamp()) - $1::float8 ORDER BY node",
               1, p, &r, &e))
    return daemon__cl_failed(d, &e);
  int n = PQntuples(r);
  d->cl_alive = xrealloc(d->cl_alive, (size_t)(n ? n : 1) * sizeof *d->cl_alive);
  for (int i = 0; i < n; i++)
    snprintf(d->cl_alive[i], sizeof d->cl_alive[i], "%s", pg_text(r, i, 0));
  d->ncl_alive = n;
  PQclear(r);
}

/* ---------------------------------------------------------------- tick */

int daemon__cl_fd(struct daemon *d) {
  if (!d->cl || d->cl->down || !pg_conn(d->cl->pg)) return -1;
  return PQsocket(pg_conn(d->cl->pg));
}

static void take_notifications(struct dcl *c);

double daemon__cl_wait(struct daemon *d) {
  struct dcl *c = d->cl;
  double mono = util_monotonic();
  double t = c->down ? c->next_try - mono : c->next_tick - mono;
  /* A notification that arrived while a statement ran is already read off
   * the socket into libpq: poll() would not see it, and the loop would
   * sleep through it. */
  if (!c->down && c->listening) take_notifications(c);
  if (c->events_due || c->wake_due || c->renew_due) t = 0;
  if (!c->down && !d->oneshot) t = fmin(t, c->next_events - mono); /* the slow re-check */
  if (!c->down) t = fmin(t, daemon__cl_later_wait(d));
  return t < 0 ? 0 : t;
}

static void take_notifications(struct dcl *c) {
  PGconn *conn = pg_conn(c->pg);
  if (!conn || PQstatus(conn) != CONNECTION_OK) return;
  PQconsumeInput(conn);
  PGnotify *n;
  while ((n = PQnotifies(conn))) {
    if (!strcmp(n->relname, "luagent_events"))
      c->events_due = 1;
    else if (!strcmp(n->relname, "luagent_wake"))
      c->wake_due = 1;
    else if (!strcmp(n->relname, "luagent_cancel"))
      c->renew_due = 1;
    PQfreemem(n);
  }
}

void daemon__cl_tick(struct daemon *d, int readable) {
  struct dcl *c = d->cl;
  double mono = util_monotonic();
  struct err e = {0};
  int fenced = daemon__cl_take_fenced(d);
  if (fenced) {
    pthread_mutex_lock(&c->mu);
    double age = c->fence_age;
    pthread_mutex_unlock(&c->mu);
    daemon__complain(
        "cluster: no lease renewal confirmed for %.2fs: killed %d run(s) of this "
        "host before their leases (%gs) expire; another host may take them over",
        age, fenced, c->o.lease_s);
  }
  if (c->down) {
    if (mono < c->next_try) return;
    c->next_try = mono + 1;
    /* Reconnect without blocking the loop (workers, reloads and local runs
     * go on meanwhile): an attempt in progress is looked at again soon. */
    int up = pg_reopen_step(c->pg, &e);
    if (up == 0) c->next_try = mono + 0.05;
    if (up <= 0) return; /* still down: said once already */
    if (pg_exec(c->pg, "SELECT 1", &e)) return;
    c->down = 0;
    daemon__say(d, "cluster: the database is reachable again after %.0fs",
                util_monotonic() - c->down_since);
    if (!d->oneshot && heartbeat(d, &e)) return daemon__cl_failed(d, &e);
    /* Evicted: the node's name is another daemon's now, and so are the
     * running rows under it that this one does not know: reconciling
     * would end that daemon's live runs. Ours expire and are swept. */
    if (d->evicted) return;
    /* no confirmation before the renewal below says what is still ours */
    daemon__cl_reconcile(d);
    c->next_tick = 0;
    /* what was loaded meanwhile could not be scheduled: now it is */
    for (struct entry *ent = d->entries; ent && !d->oneshot && !c->down; ent = ent->next)
      if (ent->a && !ent->deleted && ent->next_fire <= 0) {
        daemon__cl_file(d, ent, 0);
        daemon__cl_schedule(d, ent, 0);
      }
  }
  if (listen_now(d, &e)) return daemon__cl_failed(d, &e);
  if (readable || c->listening) take_notifications(c);
  if (c->renew_due || mono >= c->next_tick) {
    c->renew_due = 0;
    c->next_tick = mono + c->o.lease_s / 3;
    double t0 = util_monotonic();
    if (!d->oneshot && heartbeat(d, &e)) return daemon__cl_failed(d, &e);
    if (d->evicted) return; /* a twin holds the name: claim nothing more */
    daemon__cl_renew(d);
    if (c->down) return;
    /* every run this host still holds has a lease from after t0 */
    daemon__cl_confirmed(d, t0);
    if (d->oneshot) return;
    daemon__cl_sweep(d);
    if (c->down) return;
    daemon__cl_promote(d);
    if (c->down) return;
    refresh_alive(d);
    if (c->down) return;
    c->wake_due = 1; /* the enabled flags, at the same slow pace */
  }
  if (c->wake_due && !d->oneshot) {
    c->wake_due = 0;
    daemon__cl_refresh_enabled(d);
    if (c->down) return;
  }
  if (!d->stopping) daemon__cl_fire_later(d); /* slots a preferred node may have missed */
  if (c->down) return;
  if (!d->oneshot && (c->events_due || mono >= c->next_events)) {
    c->events_due = 0;
    c->next_events = mono + 2; /* a lost notification only delays */
    daemon__cl_events(d);
  }
}

void daemon__cl_keepalive(struct daemon *d) {
  struct dcl *c = d->cl;
  if (!c || c->down || util_monotonic() < c->next_tick) return;
  struct err e = {0};
  c->next_tick = util_monotonic() + c->o.lease_s / 3;
  double t0 = util_monotonic();
  if (!d->oneshot && heartbeat(d, &e)) return daemon__cl_failed(d, &e);
  daemon__cl_renew(d);
  if (!c->down) daemon__cl_confirmed(d, t0);
  c->renew_due = 1; /* the sweep and the rest at the next tick */
}

/* ------------------------------------------------------------ emitting */

/* One connection per process that emits (a worker emits once per
 * events.emit call; connecting each time would dominate). */
static struct pg *emit_pg;

int daemon__cl_emit(const char *ws, const struct config *cfg, const char *name, const char *payload,
                    int tainted, long long *id, struct err *e) {
  struct cluster_opts o;
  int on = 0;
  if (cluster_opts_load(ws, cfg, &o, &on, e)) return ERR_INVALID;
  if (!on) return 0;
  int rc = 0;
  if (!emit_pg) rc = cluster_open(&o, &emit_pg, e);
  if (!rc) {
    const char *p[] = {name, payload, tainted ? "t" : "f", o.node};
    PGresult *r;
    rc = pg_query(emit_pg,
                  "WITH i AS (INSERT INTO luagent_events (name, payload, created, tainted, node)"
                  " VALUES ($1, $2, extract(epoch from clock_timestamp()), $3::boolean, $4)"
                  " RETURNING id) SELECT id, pg_notify('luagent_events', id::text) FROM i",
                  4, p, &r, e);
    if (!rc) {
      if (id) *id = (long long)pg_number(r, 0, 0, 0);
      PQclear(r);
    }
  }
  cluster_opts_free(&o);
  return rc ? rc : 1;
}
