/* console.h - the operator console: an HTTP server (libmicrohttpd) with a
 * JSON API and Server-Sent Events under /api/ and the pages embedded in the
 * binary (docs: README.md, "The operator console"; API: docs/console-api.md).
 *
 * The server reads the workspace's state database for runs, events and
 * approvals, so it sees every run of every process live; decisions go
 * through approver_decide_audited, the code `luagent approvals` uses, with
 * "console" as the approver. Automations, skills and audit answers come
 * from the luagent binary's own --json commands (run as child processes),
 * so the console cannot drift from the CLI. Chats run as `luagent chat`
 * children whose stdin takes messages and steers and whose SIGINT stops a
 * turn.
 *
 * Security: a random token made at first start (.luagent/console.token,
 * 0600) logs a browser in; the session cookie is HttpOnly and
 * SameSite=Strict; every POST carries the session's CSRF token; Host and
 * Origin must name this console (DNS rebinding); the address must be
 * loopback unless allow_remote; bodies are capped, connections time out
 * and are limited per client; every response body is scrubbed of the
 * workspace's secret values.
 */
#ifndef LUAGENT_CONSOLE_H
#define LUAGENT_CONSOLE_H

#include "err.h"

struct console_opts {
  const char *workspace;
  const char *addr;     /* "HOST:PORT", "PORT" or NULL for 127.0.0.1:8765 */
  int allow_remote;     /* bind a non-loopback address (warns) */
  const char *exe;      /* the luagent binary for child commands; NULL: /proc/self/exe */
  const char *const *hosts; /* extra Host names accepted (NULL-terminated), e.g. a proxy's */
  int quiet;            /* no request lines (the start lines are always printed) */
};

struct console;

/* Starts the server on its own threads and returns at once. Prints the
 * address (and, the first time, the URL carrying the login token) on
 * stdout. *out is freed by console_stop. Errors: ERR_INVALID for a bad
 * address or a non-loopback one without allow_remote, ERR_IO when the port
 * cannot be bound. */
int console_start(const struct console_opts *o, struct console **out, struct err *e);

/* Stops the server: open streams end, chat children get SIGTERM, threads
 * are joined. NULL is a no-op. */
void console_stop(struct console *c);

/* Parses ADDR ("127.0.0.1:8765", "[::1]:8765", "localhost:9000", "9000")
 * into host and port. Returns 0 or ERR_INVALID naming what was wrong. */
int console_parse_addr(const char *addr, char *host, size_t hostn, int *port, struct err *e);

/* 1 when host (a literal address or "localhost") is a loopback address. */
int console_is_loopback(const char *host);

#endif
