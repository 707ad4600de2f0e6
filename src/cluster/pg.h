/* pg.h - one PostgreSQL connection (libpq), with errors that name the
 * server and never its password.
 *
 * A struct pg is used by one thread at a time, like a struct store. Every
 * call that talks to the server either succeeds or returns ERR_IO with a
 * message "cluster database HOST:PORT/DB: what: server message"; the
 * SQLSTATE of a server error is copied into e->subject ("40001",
 * "23505"...) so callers can tell a serialization failure or a unique
 * violation from a lost connection (subject "connection").
 *
 * Connections are made with short timeouts and TCP keepalives (connect 5 s,
 * tcp_user_timeout 5 s, keepalive after 2 s idle), so a host cut off from
 * the database notices within seconds instead of hanging in a read: lease
 * renewal depends on it. A connection found broken, or closed by the server
 * while idle (a restart), is reopened once before
 * the next statement is sent, never after one was sent: a statement whose
 * outcome is unknown is reported, not repeated.
 */
#ifndef LUAGENT_PG_H
#define LUAGENT_PG_H

#include <libpq-fe.h>

#include "err.h"

struct pg;

/* Connects to url (a postgresql:// URI or a "key=value" connection
 * string). application_name is "luagent:NODE". */
int pg_connect(const char *url, const char *node, struct pg **out, struct err *e);
void pg_close(struct pg *p); /* NULL is a no-op */

/* Reopens a broken connection without blocking, for a loop that must
 * keep serving while the database is away: each call starts an attempt or
 * advances the one in progress as far as its socket allows, and returns 1
 * once the connection is up (at once when it is), 0 while the attempt
 * goes on (call again soon), or ERR_IO (e filled) when it failed or took
 * over 5 s (the next call starts a new one). pg_exec/pg_query meanwhile
 * would block in a connect of their own. */
int pg_reopen_step(struct pg *p, struct err *e);

/* The raw connection (LISTEN/NOTIFY, PQsocket). Borrowed; NULL after a
 * failed reopen. */
PGconn *pg_conn(struct pg *p);
/* "host:port/db" of the server, for messages (no user, no password). */
const char *pg_where(const struct pg *p);

/* Runs one or more statements without parameters or results. */
int pg_exec(struct pg *p, const char *sql, struct err *e);
/* Runs one statement with n text parameters (NULL = SQL NULL). *out gets
 * the result (TUPLES_OK or COMMAND_OK; caller PQclear()s it); out may be
 * NULL when the rows are not wanted. */
int pg_query(struct pg *p, const char *sql, int n, const char *const *params, PGresult **out,
             struct err *e);
/* BEGIN / COMMIT / ROLLBACK. pg_rollback never fails loudly (it is what
 * error paths call). */
int pg_begin(struct pg *p, struct err *e);
int pg_commit(struct pg *p, struct err *e);
void pg_rollback(struct pg *p);

/* 1 when e is a server error with SQLSTATE state (e.g. "23505"). */
int pg_state_is(const struct err *e, const char *state);

/* The value of row r, column c of res as text ("" for NULL) and as a
 * number (dflt for NULL). */
const char *pg_text(const PGresult *res, int r, int c);
double pg_number(const PGresult *res, int r, int c, double dflt);

#endif
