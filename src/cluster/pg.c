/* pg.c - see pg.h. */
#include "pg.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct pg {
  PGconn *conn;
  PGconn *pending; /* pg_reopen_step's attempt in progress, or NULL */
  double pending_since;
  PostgresPollingStatusType pending_wait;
  char *url;
  char node[128];
  char where[256];
};

/* Connection options we add unless the URL sets them: a host that cannot
 * reach the database must find out in seconds (pg.h). */
static const char *const defaults[][2] = {
    {"connect_timeout", "5"},   {"keepalives", "1"},          {"keepalives_idle", "2"},
    {"keepalives_interval", "1"}, {"keepalives_count", "3"},  {"tcp_user_timeout", "5000"},
};
#define NDEFAULTS (sizeof defaults / sizeof defaults[0])
#define PG_IDLE_IN_TX "10s"

/* "host:port/db" from the parsed options, for messages before and after
 * connecting (the password never appears). */
static void describe(PQconninfoOption *opts, char *out, size_t n) {
  const char *host = NULL, *port = NULL, *db = NULL;
  for (PQconninfoOption *o = opts; o && o->keyword; o++) {
    if (!o->val || !*o->val) continue;
    if (!strcmp(o->keyword, "host") || (!host && !strcmp(o->keyword, "hostaddr"))) host = o->val;
    else if (!strcmp(o->keyword, "port")) port = o->val;
    else if (!strcmp(o->keyword, "dbname")) db = o->val;
  }
  snprintf(out, n, "%s:%s/%s", host ? host : "localhost", port ? port : "5432", db ? db : "");
}

/* One line: libpq's messages run over several, with tabs. */
static void one_line(char *s) {
  char *w = s;
  for (char *r = s; *r; r++) {
    char c = (*r == '\n' || *r == '\t') ? ' ' : *r;
    if (c == ' ' && (w == s || w[-1] == ' ')) continue;
    *w++ = c;
  }
  while (w > s && w[-1] == ' ') w--;
  *w = 0;
}

/* libpq's parse errors quote the offending part of the URL, which may be
 * the password ('invalid percent-encoded token: "s3cret%zz"') or the whole
 * URL: everything from the first quote to the last becomes "(...)". The
 * message reaches the script, the model and the logs. */
static void hide_quoted(char *s, size_t n) {
  char *a = strchr(s, '"'), *b = strrchr(s, '"');
  if (!a) return;
  char tail[600]; /* a lone quote: all after it goes */
  snprintf(tail, sizeof tail, "%s", a == b ? "" : b + 1);
  snprintf(a, n - (size_t)(a - s), "(...)%s", tail);
}

static void ignore_notice(void *ud, const char *msg) {
  (void)ud;
  (void)msg;
}

/* The connection's keywords and values: the URL's own, then our defaults
 * where it says nothing, then the application name. */
struct params {
  PQconninfoOption *opts;
  const char **keys, **vals;
  char app[160];
};

static void params_free(struct params *pp) {
  free(pp->keys);
  free(pp->vals);
  if (pp->opts) PQconninfoFree(pp->opts);
}

static int params_make(struct pg *p, struct params *pp, struct err *e) {
  char *msg = NULL;
  memset(pp, 0, sizeof *pp);
  pp->opts = PQconninfoParse(p->url, &msg);
  if (!pp->opts) {
    char m[600];
    snprintf(m, sizeof m, "%s", msg ? msg : "unreadable");
    PQfreemem(msg);
    hide_quoted(m, sizeof m);
    one_line(m);
    err_set(e, ERR_INVALID, "cluster", "cluster.postgres: not a PostgreSQL connection string: %s",
            m);
    return ERR_INVALID;
  }
  describe(pp->opts, p->where, sizeof p->where);
  size_t cap = NDEFAULTS + 2;
  for (PQconninfoOption *o = pp->opts; o->keyword; o++) cap++;
  pp->keys = calloc(cap, sizeof *pp->keys);
  pp->vals = calloc(cap, sizeof *pp->vals);
  if (!pp->keys || !pp->vals) {
    params_free(pp);
    return err_set(e, ERR_NOMEM, "nomem", "out of memory");
  }
  snprintf(pp->app, sizeof pp->app, "luagent:%s", p->node);
  size_t k = 0;
  for (PQconninfoOption *o = pp->opts; o->keyword; o++)
    if (o->val && *o->val) pp->keys[k] = o->keyword, pp->vals[k++] = o->val;
  for (size_t d = 0; d < NDEFAULTS; d++) {
    size_t j = 0;
    while (j < k && strcmp(pp->keys[j], defaults[d][0])) j++;
    if (j == k) pp->keys[k] = defaults[d][0], pp->vals[k++] = defaults[d][1];
  }
  pp->keys[k] = "application_name", pp->vals[k++] = pp->app;
  pp->keys[k] = NULL, pp->vals[k] = NULL;
  return 0;
}

/* A connection that did not come up: its message, and it is gone. */
static int conn_failed(struct pg *p, PGconn *c, const char *why, struct err *e) {
  char m[600];
  snprintf(m, sizeof m, "%s", why ? why : PQerrorMessage(c));
  one_line(m);
  err_set(e, ERR_IO, "cluster", "cluster database %s: cannot connect: %s", p->where, m);
  if (e) snprintf(e->subject, sizeof e->subject, "connection");
  PQfinish(c);
  return ERR_IO;
}

/* What every new connection gets once it is up. */
static void conn_setup(PGconn *c) {
  /* Notices ("already exists, skipping") are not ours to print. */
  PQsetNoticeProcessor(c, ignore_notice, NULL);
  PGresult *r = PQexec(c, "SET client_min_messages TO warning");
  PQclear(r);
  /* A host that stalls inside a transaction (stopped, paused, cut off)
   * would keep its locks (the audit head's: every host's audited calls
   * wait on it) until the server noticed the client gone: never for a
   * stopped process, hours of TCP keepalive for a cut one. No luagent
   * transaction idles between statements for long, so the server ends
   * such a session after PG_IDLE_IN_TX; what it had not committed is
   * rolled back, and the stalled host's next statement fails (its call is
   * denied). A transaction that must wait longer sets it itself. */
  r = PQexec(c, "SET idle_in_transaction_session_timeout = '" PG_IDLE_IN_TX "'");
  PQclear(r);
}

static int open_conn(struct pg *p, struct err *e) {
  struct params pp;
  int rc = params_make(p, &pp, e);
  if (rc) return rc;
  p->conn = PQconnectdbParams(pp.keys, pp.vals, 0);
  params_free(&pp);
  if (!p->conn) return err_set(e, ERR_NOMEM, "nomem", "out of memory");
  if (PQstatus(p->conn) != CONNECTION_OK) {
    rc = conn_failed(p, p->conn, NULL, e);
    p->conn = NULL;
    return rc;
  }
  conn_setup(p->conn);
  return 0;
}

/* How long pg_reopen_step lets one attempt take (connect_timeout's
 * default above). */
#define REOPEN_TIMEOUT_S 5.0

int pg_reopen_step(struct pg *p, struct err *e) {
  if (!p->pending) {
    if (p->conn && PQstatus(p->conn) == CONNECTION_OK) return 1;
    if (p->conn) PQfinish(p->conn);
    p->conn = NULL;
    struct params pp;
    int rc = params_make(p, &pp, e);
    if (rc) return rc;
    p->pending = PQconnectStartParams(pp.keys, pp.vals, 0);
    params_free(&pp);
    if (!p->pending) return err_set(e, ERR_NOMEM, "nomem", "out of memory");
    if (PQstatus(p->pending) == CONNECTION_BAD) {
      rc = conn_failed(p, p->pending, NULL, e);
      p->pending = NULL;
      return rc;
    }
    p->pending_since = util_monotonic();
    p->pending_wait = PGRES_POLLING_WRITING; /* what libpq says to wait for first */
  }
  /* Advance as far as the socket allows now, never waiting on it. */
  for (;;) {
    struct pollfd pfd = {.fd = PQsocket(p->pending),
                         .events = p->pending_wait == PGRES_POLLING_READING ? POLLIN : POLLOUT};
    if (pfd.fd < 0 || poll(&pfd, 1, 0) <= 0) break;
    PostgresPollingStatusType st = PQconnectPoll(p->pending);
    if (st == PGRES_POLLING_OK) {
      p->conn = p->pending;
      p->pending = NULL;
      conn_setup(p->conn);
      return 1;
    }
    if (st == PGRES_POLLING_FAILED) {
      int rc = conn_failed(p, p->pending, NULL, e);
      p->pending = NULL;
      return rc;
    }
    p->pending_wait = st;
  }
  if (util_monotonic() - p->pending_since > REOPEN_TIMEOUT_S) {
    int rc = conn_failed(p, p->pending, "timed out", e);
    p->pending = NULL;
    return rc;
  }
  return 0;
}

int pg_connect(const char *url, const char *node, struct pg **out, struct err *e) {
  *out = NULL;
  struct pg *p = calloc(1, sizeof *p);
  if (!p || !(p->url = strdup(url ? url : ""))) {
    free(p);
    return err_set(e, ERR_NOMEM, "nomem", "out of memory");
  }
  snprintf(p->node, sizeof p->node, "%s", node ? node : "");
  int rc = open_conn(p, e);
  if (rc) {
    pg_close(p);
    return rc;
  }
  *out = p;
  return 0;
}

void pg_close(struct pg *p) {
  if (!p) return;
  if (p->conn) PQfinish(p->conn);
  if (p->pending) PQfinish(p->pending);
  free(p->url);
  free(p);
}

PGconn *pg_conn(struct pg *p) { return p->conn; }
const char *pg_where(const struct pg *p) { return p->where; }

/* Before a statement is sent: a connection found broken is reopened
 * (never after sending: pg.h). */
static int ready(struct pg *p, struct err *e) {
  PGconn *c = p->conn;
  if (c && PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) == PQTRANS_IDLE) {
    /* A server that restarted or closed an idle connection said goodbye
     * already: read what is waiting (a few reads at most; notifications
     * read here stay queued for PQnotifies), so the statement goes to a
     * new connection instead of failing on the dead one. */
    for (int i = 0; i < 4 && PQstatus(c) == CONNECTION_OK; i++) {
      struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
      if (pfd.fd < 0 || poll(&pfd, 1, 0) <= 0 || !PQconsumeInput(c)) break;
    }
  }
  if (p->conn && PQstatus(p->conn) == CONNECTION_OK) return 0;
  if (p->conn) PQfinish(p->conn);
  p->conn = NULL;
  return open_conn(p, e);
}

static int fail(struct pg *p, PGresult *r, const char *what, struct err *e) {
  const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
  const char *primary = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
  const char *detail = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL) : NULL;
  char m[600];
  if (primary)
    snprintf(m, sizeof m, "%s%s%s%s", primary, detail ? " (" : "", detail ? detail : "",
             detail ? ")" : "");
  else
    snprintf(m, sizeof m, "%s", PQerrorMessage(p->conn));
  one_line(m);
  /* The start of the statement says which one failed. */
  char w[64];
  snprintf(w, sizeof w, "%s", what);
  one_line(w);
  err_set(e, ERR_IO, "cluster", "cluster database %s: %s: %s", p->where, w, m);
  if (e)
    snprintf(e->subject, sizeof e->subject, "%s",
             state ? state : (PQstatus(p->conn) == CONNECTION_OK ? "" : "connection"));
  PQclear(r);
  return ERR_IO;
}

int pg_exec(struct pg *p, const char *sql, struct err *e) {
  if (ready(p, e)) return ERR_IO;
  PGresult *r = PQexec(p->conn, sql);
  ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return fail(p, r, sql, e);
  PQclear(r);
  return 0;
}

int pg_query(struct pg *p, const char *sql, int n, const char *const *params, PGresult **out,
             struct err *e) {
  if (out) *out = NULL;
  if (ready(p, e)) return ERR_IO;
  PGresult *r = PQexecParams(p->conn, sql, n, NULL, params, NULL, NULL, 0);
  ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return fail(p, r, sql, e);
  if (out) *out = r;
  else PQclear(r);
  return 0;
}

int pg_begin(struct pg *p, struct err *e) { return pg_exec(p, "BEGIN", e); }
int pg_commit(struct pg *p, struct err *e) { return pg_exec(p, "COMMIT", e); }
void pg_rollback(struct pg *p) {
  if (p->conn && PQstatus(p->conn) == CONNECTION_OK &&
      PQtransactionStatus(p->conn) != PQTRANS_IDLE) {
    PGresult *r = PQexec(p->conn, "ROLLBACK");
    PQclear(r);
  }
}

int pg_state_is(const struct err *e, const char *state) {
  return e && e->rc == ERR_IO && !strcmp(e->code, "cluster") && !strcmp(e->subject, state);
}

const char *pg_text(const PGresult *res, int r, int c) {
  if (!res || r >= PQntuples(res) || c >= PQnfields(res) || PQgetisnull(res, r, c)) return "";
  return PQgetvalue(res, r, c);
}

double pg_number(const PGresult *res, int r, int c, double dflt) {
  if (!res || r >= PQntuples(res) || c >= PQnfields(res) || PQgetisnull(res, r, c)) return dflt;
  return strtod(PQgetvalue(res, r, c), NULL);
}
