#define _GNU_SOURCE 1 /* FNM_CASEFOLD */
/* origin.c - see origin.h. */
#include "origin.h"

#include <ctype.h>
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

int origin_default_port(const char *scheme) {
  if (!scheme) return 0;
  if (!strcmp(scheme, "http")) return 80;
  if (!strcmp(scheme, "https")) return 443;
  return 0;
}

static void lower(char *s) {
  for (; *s; s++) *s = (char)tolower((unsigned char)*s);
}

/* Splits "scheme://rest": copies the scheme (lower case) into scheme and
 * points *rest past "://". Returns 1 when s has a scheme, 0 when not, -1
 * when it has one that is not http or https. */
static int split_scheme(const char *s, char scheme[8], const char **rest) {
  const char *sep = strstr(s, "://");
  if (!sep) return 0;
  size_t n = (size_t)(sep - s);
  /* A scheme is letters only here; "host:80//x" has no "://" anyway. */
  for (size_t i = 0; i < n; i++)
    if (!isalpha((unsigned char)s[i])) return 0;
  if (n == 0 || n >= 8) return -1;
  memcpy(scheme, s, n);
  scheme[n] = 0;
  lower(scheme);
  *rest = sep + 3;
  return origin_default_port(scheme) ? 1 : -1;
}

/* Parses a decimal port of 1..65535 from s[0..n). Returns it, or 0. */
static int parse_port(const char *s, size_t n) {
  if (n == 0 || n > 5) return 0;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return 0;
    v = v * 10 + (s[i] - '0');
  }
  return v >= 1 && v <= 65535 ? v : 0;
}

/* Splits "host[:port][/]" (host possibly "[v6]"). Sets host/hostlen (the
 * brackets included), port/portlen (portlen 0: none). Returns 0, or a
 * static message saying what is wrong. */
static const char *split_authority(const char *s, int pattern, const char **host, size_t *hostlen,
                                   const char **port, size_t *portlen) {
  size_t n = strlen(s);
  if (n && s[n - 1] == '/') n--; /* "https://api.example.com/" */
  /* In a pattern '?' is fnmatch's any-character, not a query. */
  if (memchr(s, '/', n) || (!pattern && memchr(s, '?', n)) || memchr(s, '#', n))
    return "has a path, query or fragment (only scheme://host:port)";
  if (memchr(s, '@', n)) return "has user info (user@host); credentials go in a secret";
  *port = NULL;
  *portlen = 0;
  /* "[" opens an IPv6 literal, except in a pattern where "[a-z]" with no
   * ':' inside is an fnmatch character class. */
  const char *close = n && s[0] == '[' ? memchr(s, ']', n) : NULL;
  if (n && s[0] == '[' && (!pattern || !close || memchr(s, ':', (size_t)(close - s)))) {
    if (!close) return "has an IPv6 address without its closing ']'";
    *host = s;
    *hostlen = (size_t)(close - s) + 1;
    const char *after = close + 1;
    size_t left = n - *hostlen;
    if (left == 0) return NULL;
    if (*after != ':') return "has text after the IPv6 address";
    *port = after + 1;
    *portlen = left - 1;
    return NULL;
  }
  const char *first = memchr(s, ':', n);
  const char *last = NULL;
  for (size_t i = n; i > 0; i--)
    if (s[i - 1] == ':') {
      last = s + i - 1;
      break;
    }
  if (first && first != last) {
    if (!pattern) return "has an IPv6 address that is not in [brackets]";
    *host = s; /* a bare IPv6 address, any port */
    *hostlen = n;
    return NULL;
  }
  *host = s;
  *hostlen = last ? (size_t)(last - s) : n;
  if (last) {
    *port = last + 1;
    *portlen = n - *hostlen - 1;
  }
  return NULL;
}

/* Host characters: a DNS name or IPv4 address, or within brackets an IPv6
 * address. wild: also the fnmatch characters. */
static int host_chars_ok(const char *h, size_t n, int wild) {
  if (n == 0) return 0;
  if (h[0] == '[' && (!wild || memchr(h, ':', n))) {
    if (n < 4 || h[n - 1] != ']') return 0;
    for (size_t i = 1; i + 1 < n; i++)
      if (!isxdigit((unsigned char)h[i]) && h[i] != ':' && h[i] != '.') return 0;
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)h[i];
    if (isalnum(c) || c == '-' || c == '.' || c == '_') continue;
    if (wild && (c == '*' || c == '?' || c == '[' || c == ']' || c == '!' || c == ':')) continue;
    return 0;
  }
  return 1;
}

int origin_parse(const char *s, struct origin *o, struct err *e) {
  memset(o, 0, sizeof *o);
  if (!s || !*s) return err_set(e, ERR_INVALID, "config", "an origin must not be empty");
  const char *rest = NULL;
  int sc = split_scheme(s, o->scheme, &rest);
  if (sc == 0)
    return err_set(
        e, ERR_INVALID, "config",
        "'%s' is not an origin: write scheme://host[:port], e.g. https://api.example.com", s);
  if (sc < 0)
    return err_set(e, ERR_INVALID, "config",
                   "'%s' is not an origin: the scheme must be http or https", s);
  const char *host, *port;
  size_t hl, pl;
  const char *why = split_authority(rest, 0, &host, &hl, &port, &pl);
  if (why) return err_set(e, ERR_INVALID, "config", "origin '%s' %s", s, why);
  if (!host_chars_ok(host, hl, 0) || hl >= sizeof o->host)
    return err_set(e, ERR_INVALID, "config",
                   "origin '%s' has an invalid host (a name, an IPv4 address or an [IPv6] "
                   "address; no wildcards: an origin is exact)",
                   s);
  memcpy(o->host, host, hl);
  o->host[hl] = 0;
  lower(o->host);
  if (port) {
    o->port = parse_port(port, pl);
    if (!o->port)
      return err_set(e, ERR_INVALID, "config", "origin '%s' has an invalid port (1 to 65535)", s);
  } else {
    o->port = origin_default_port(o->scheme);
  }
  return 0;
}

int origin_from_parts(const char *scheme, const char *host, int port, struct origin *o,
                      struct err *e) {
  memset(o, 0, sizeof *o);
  if (!scheme || !origin_default_port(scheme) || strlen(scheme) >= sizeof o->scheme)
    return err_set(e, ERR_INVALID, "invalid_args",
                   "scheme '%s' is not allowed (http or https only)", scheme ? scheme : "");
  snprintf(o->scheme, sizeof o->scheme, "%s", scheme);
  lower(o->scheme);
  size_t hl = host ? strlen(host) : 0;
  int bracket = hl && host[0] != '[' && strchr(host, ':');
  if (hl == 0 || hl + 2 * bracket >= sizeof o->host)
    return err_set(e, ERR_INVALID, "invalid_args", "URL host is empty or too long");
  for (size_t i = 0; i < hl; i++)
    if ((unsigned char)host[i] <= 0x20 || host[i] == 0x7f)
      return err_set(e, ERR_INVALID, "invalid_args", "URL host has control characters or spaces");
  snprintf(o->host, sizeof o->host, "%s%s%s", bracket ? "[" : "", host, bracket ? "]" : "");
  lower(o->host);
  o->port = port > 0 ? port : origin_default_port(o->scheme);
  if (o->port > 65535)
    return err_set(e, ERR_INVALID, "invalid_args", "URL port %d is out of range", port);
  return 0;
}

char *origin_format(const struct origin *o, char *buf, size_t n) {
  if (!n) return buf;
  if (o->port == origin_default_port(o->scheme))
    snprintf(buf, n, "%s://%s", o->scheme, o->host);
  else
    snprintf(buf, n, "%s://%s:%d", o->scheme, o->host, o->port);
  return buf;
}

int origin_equal(const struct origin *a, const struct origin *b) {
  return a->port == b->port && !strcmp(a->scheme, b->scheme) && !strcasecmp(a->host, b->host);
}

int origin_pattern_parse(const char *s, struct origin_pattern *p, struct err *e) {
  memset(p, 0, sizeof *p);
  if (!s || !*s) return err_set(e, ERR_INVALID, "config", "http_allow: an entry must not be empty");
  if (!strcmp(s, "*")) {
    strcpy(p->host, "*");
    return 0;
  }
  const char *rest = s;
  int sc = split_scheme(s, p->scheme, &rest);
  if (sc < 0)
    return err_set(e, ERR_INVALID, "config",
                   "http_allow entry '%s': the scheme must be http or https", s);
  const char *host, *port;
  size_t hl, pl;
  /* A bare IPv6 address ("::1") only without a scheme, as before. */
  const char *why = sc == 1 && strchr(rest, ':') != strrchr(rest, ':') && rest[0] != '['
                        ? "has an IPv6 address that is not in [brackets]"
                        : split_authority(rest, 1, &host, &hl, &port, &pl);
  if (why) return err_set(e, ERR_INVALID, "config", "http_allow entry '%s' %s", s, why);
  /* An IPv6 literal is matched without its brackets, which fnmatch would
   * read as a character class. */
  if (hl && host[0] == '[' && host[hl - 1] == ']' && memchr(host, ':', hl)) {
    if (!host_chars_ok(host, hl, 0))
      return err_set(e, ERR_INVALID, "config", "http_allow entry '%s' has an invalid IPv6 address",
                     s);
    host++;
    hl -= 2;
  } else if (!host_chars_ok(host, hl, 1)) {
    return err_set(e, ERR_INVALID, "config",
                   "http_allow entry '%s' has an invalid host pattern (letters, digits, - . _ "
                   "and the wildcards * ? [...])",
                   s);
  }
  if (hl >= sizeof p->host)
    return err_set(e, ERR_INVALID, "config", "http_allow entry '%s': host too long", s);
  memcpy(p->host, host, hl);
  p->host[hl] = 0;
  if (port && pl == 1 && port[0] == '*') {
    p->port = 0;
  } else if (port) {
    if (!(p->port = parse_port(port, pl)))
      return err_set(e, ERR_INVALID, "config",
                     "http_allow entry '%s' has an invalid port (1 to 65535, or *)", s);
  } else {
    p->port = sc == 1 ? origin_default_port(p->scheme) : 0;
  }
  return 0;
}

int origin_pattern_match(const struct origin_pattern *p, const struct origin *o) {
  if (p->scheme[0] && strcmp(p->scheme, o->scheme) != 0) return 0;
  if (p->port && p->port != o->port) return 0;
  if (!strcmp(p->host, "*")) return 1;
  char h[ORIGIN_HOST_MAX];
  snprintf(h, sizeof h, "%s", o->host);
  size_t n = strlen(h);
  if (n > 2 && h[0] == '[' && h[n - 1] == ']') {
    memmove(h, h + 1, n - 2);
    h[n - 2] = 0;
  }
  return fnmatch(p->host, h, FNM_CASEFOLD) == 0;
}
