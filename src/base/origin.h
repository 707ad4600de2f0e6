/* origin.h - web origins (scheme, host, port) and http_allow patterns.
 *
 * An origin is what RFC 6454 calls one: a scheme, a host and a port. Two
 * URLs with the same origin reach the same server the same way; a change of
 * any part (https to http, another port, another host) is another origin.
 * luagent binds each secret to a list of exact origins (secrets.h), and
 * http_allow entries are origin patterns.
 *
 * Pure string work: no I/O, no allocation, no curl. Callers that hold a URL
 * take its scheme, host and port from the same parser that will connect
 * (curl's URL API in hosttools.c) and fill a struct origin from those.
 */
#ifndef LUAGENT_ORIGIN_H
#define LUAGENT_ORIGIN_H

#include <stddef.h>

#include "err.h"

#define ORIGIN_HOST_MAX 256

struct origin {
  char scheme[8];             /* "http" or "https" */
  char host[ORIGIN_HOST_MAX]; /* lower case; an IPv6 literal keeps its [brackets] */
  int port;                   /* 1..65535, the scheme's default filled in */
};

/* An http_allow entry: [scheme://]host-pattern[:port]. */
struct origin_pattern {
  char scheme[8];             /* "" = http or https */
  char host[ORIGIN_HOST_MAX]; /* fnmatch(3) pattern, matched case-insensitively; "*" = any */
  int port;                   /* 0 = any port */
};

/* 80 for "http", 443 for "https", else 0. */
int origin_default_port(const char *scheme);

/* Parses an origin written as "scheme://host[:port]" (a trailing "/" is
 * allowed): the scheme http or https, a host name of letters, digits, '-',
 * '_' and '.', an IPv4 address or a bracketed IPv6 literal, no user info,
 * path, query or fragment, no wildcard. A missing port is the scheme's
 * default. Fills *o (lower-cased) and returns 0, or ERR_INVALID with a
 * message naming s and what is wrong. */
int origin_parse(const char *s, struct origin *o, struct err *e);

/* Fills *o from a URL's parts as a URL parser gave them: scheme, host (an
 * IPv6 literal with or without brackets) and port (0 or negative: the
 * scheme's default). Returns 0, or ERR_INVALID when the scheme is not http
 * or https or the host does not fit. */
int origin_from_parts(const char *scheme, const char *host, int port, struct origin *o,
                      struct err *e);

/* Writes "scheme://host" plus ":port" when the port is not the scheme's
 * default (as browsers print an origin) into buf (n bytes, always
 * NUL-terminated). Returns buf. */
char *origin_format(const struct origin *o, char *buf, size_t n);

/* 1 when a and b are the same origin. */
int origin_equal(const struct origin *a, const struct origin *b);

/* Parses an http_allow entry:
 *   "*"                      any http or https URL
 *   "host"  "*.example.com"  http or https, any port (the meaning entries had
 *                            before they could name a scheme or a port)
 *   "host:8080"              http or https on that port
 *   "https://host"           that scheme on its default port (443 here)
 *   "https://host:8443"      exactly that origin
 *   "https://host:*"         that scheme, any port
 * The host part is an fnmatch pattern ('*', '?', '[...]'); an IPv6 literal
 * is written in brackets ("[::1]:8080"), or bare and then with no port
 * ("::1"). Schemes other than http and https, user info and paths are
 * refused. Returns 0, or ERR_INVALID naming the entry. */
int origin_pattern_parse(const char *s, struct origin_pattern *p, struct err *e);

/* 1 when origin o matches pattern p. */
int origin_pattern_match(const struct origin_pattern *p, const struct origin *o);

#endif
