/* schema_format.c - the `format` values luagent can assert (when a schema
 * or its caller opts in; otherwise `format` is only an annotation). Each
 * check follows the RFC the specification names: RFC 3339 for date-time,
 * date, time and (appendix A) duration, RFC 5321 for email (the dot-atom
 * and quoted-free subset), RFC 1123 hostnames, RFC 2673 dotted-quad IPv4
 * without leading zeros, RFC 4291 IPv6 (inet_pton), RFC 3986 uri and
 * uri-reference (scheme, authority with port and IP literal, character
 * sets per component, percent escapes), RFC 4122 uuid,
 * ECMA-262 regex (what luagent's pattern engine accepts) and RFC 6901
 * json-pointer, relative-json-pointer; iri and iri-reference as their URI
 * counterparts with non-ASCII characters allowed. */
#include <arpa/inet.h>
#include <ctype.h>
#include <string.h>

#include "schema_impl.h"

static const char *const names[] = {
    [SF_DATE_TIME] = "date-time",
    [SF_DATE] = "date",
    [SF_TIME] = "time",
    [SF_DURATION] = "duration",
    [SF_EMAIL] = "email",
    [SF_HOSTNAME] = "hostname",
    [SF_IPV4] = "ipv4",
    [SF_IPV6] = "ipv6",
    [SF_URI] = "uri",
    [SF_URI_REFERENCE] = "uri-reference",
    [SF_UUID] = "uuid",
    [SF_REGEX] = "regex",
    [SF_JSON_POINTER] = "json-pointer",
    [SF_IRI] = "iri",
    [SF_IRI_REFERENCE] = "iri-reference",
    [SF_RELATIVE_JSON_POINTER] = "relative-json-pointer",
};

int schema__format_id(const char *name) {
  for (int i = 1; i < (int)(sizeof names / sizeof names[0]); i++)
    if (names[i] && !strcmp(names[i], name)) return i;
  return SF_NONE;
}

const char *schema__format_name(int id) {
  return id > 0 && id < (int)(sizeof names / sizeof names[0]) ? names[id] : "?";
}

/* n decimal digits at s, or -1. */
static int digits(const char *s, int n) {
  int v = 0;
  for (int i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

static int leap(int y) {
  return (y % 4 == 0 && y % 100) || y % 400 == 0;
}

/* full-date at s: returns the length (10) or 0. */
static int date_ok(const char *s) {
  static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int y = digits(s, 4), m, d;
  if (y < 0 || s[4] != '-' || (m = digits(s + 5, 2)) < 1 || m > 12 || s[7] != '-') return 0;
  d = digits(s + 8, 2);
  int max = mdays[m - 1] + (m == 2 && leap(y));
  return d >= 1 && d <= max ? 10 : 0;
}

/* full-time at s, to the end of the string. */
static int time_ok(const char *s) {
  int h = digits(s, 2), mi, se;
  if (h < 0 || h > 23 || s[2] != ':' || (mi = digits(s + 3, 2)) < 0 || mi > 59 || s[5] != ':')
    return 0;
  if ((se = digits(s + 6, 2)) < 0 || se > 60) return 0;
  s += 8;
  if (*s == '.') {
    s++;
    if (!isdigit((unsigned char)*s)) return 0;
    while (isdigit((unsigned char)*s)) s++;
  }
  int oh = 0, om = 0, sign = 0;
  if (*s == 'Z' || *s == 'z') {
    s++;
  } else if (*s == '+' || *s == '-') {
    sign = *s == '+' ? 1 : -1;
    if ((oh = digits(s + 1, 2)) < 0 || oh > 23 || s[3] != ':' || (om = digits(s + 4, 2)) < 0 ||
        om > 59)
      return 0;
    s += 6;
  } else {
    return 0;
  }
  if (*s) return 0;
  if (se == 60) { /* a leap second is only 23:59:60 in UTC */
    int utc = ((h * 60 + mi - sign * (oh * 60 + om)) % 1440 + 1440) % 1440;
    if (utc != 23 * 60 + 59) return 0;
  }
  return 1;
}

static int duration_ok(const char *s) {
  if (*s++ != 'P' || !*s) return 0;
  static const char date_units[] = "YMD", time_units[] = "HMS";
  const char *units = date_units;
  int last = -1, any = 0, in_time = 0;
  while (*s) {
    if (*s == 'T') {
      if (in_time) return 0;
      in_time = 1, units = time_units, last = -1, s++;
      if (!*s) return 0;
      continue;
    }
    if (!isdigit((unsigned char)*s)) return 0;
    while (isdigit((unsigned char)*s)) s++;
    if (*s == 'W' && !in_time && !any) return s[1] == 0;
    const char *u = *s ? strchr(units, *s) : NULL;
    /* RFC 3339 appendix A: Y [M [D]], M [D], D; H [M [S]], M [S], S. */
    if (!u || (int)(u - units) <= last || (last >= 0 && (int)(u - units) != last + 1)) return 0;
    last = (int)(u - units), any = 1, s++;
  }
  return any && !(in_time && last < 0);
}

static int hostname_ok(const char *s) {
  size_t n = strlen(s);
  if (!n || n > 253) return 0;
  const char *label = s;
  for (const char *p = s;; p++) {
    if (*p == '.' || !*p) {
      size_t l = (size_t)(p - label);
      if (!l || l > 63 || label[0] == '-' || p[-1] == '-') return 0;
      if (!*p) return 1;
      label = p + 1;
    } else if (!isalnum((unsigned char)*p) && *p != '-') {
      return 0;
    }
  }
}

static int ipv4_ok(const char *s) {
  for (int part = 0; part < 4; part++) {
    if (part && *s++ != '.') return 0;
    int n = 0, v = 0;
    while (isdigit((unsigned char)s[n]) && n < 4) v = v * 10 + (s[n] - '0'), n++;
    if (!n || n > 3 || v > 255 || (n > 1 && s[0] == '0')) return 0;
    s += n;
  }
  return *s == 0;
}

static int email_ok(const char *s) {
  const char *at = strrchr(s, '@');
  if (!at || at == s) return 0;
  if (s[0] == '"') { /* quoted-string local part */
    const char *p = s + 1;
    for (; p < at && *p != '"'; p++)
      if (*p == '\\' && p + 1 < at)
        p++;
      else if ((unsigned char)*p < 0x20)
        return 0;
    if (p != at - 1 || *p != '"') return 0;
  } else {
    if (s[0] == '.' || at[-1] == '.') return 0;
    for (const char *p = s; p < at; p++) {
      if (*p == '.' && p[1] == '.') return 0;
      if (!isalnum((unsigned char)*p) && !strchr("!#$%&'*+-/=?^_`{|}~.", *p)) return 0;
    }
  }
  const char *dom = at + 1;
  size_t n = strlen(dom);
  if (n > 2 && dom[0] == '[' && dom[n - 1] == ']') {
    char ip[64];
    if (n - 2 >= sizeof ip) return 0;
    memcpy(ip, dom + 1, n - 2);
    ip[n - 2] = 0;
    unsigned char buf[16];
    if (!strncmp(ip, "IPv6:", 5)) return inet_pton(AF_INET6, ip + 5, buf) == 1;
    return ipv4_ok(ip);
  }
  return hostname_ok(dom);
}

/* RFC 3986: n characters at s, each unreserved, a sub-delim, one of
 * extra, or a percent escape. */
/* Set while checking an IRI (non-ASCII allowed); thread-local because
 * several threads may validate at once. */
static _Thread_local int iri_mode;

static int chars_ok(const char *s, size_t n, const char *extra) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x80) {
      if (!iri_mode) return 0;
    } else if (c == '%') {
      if (i + 2 >= n) return 0;
      if (!isxdigit((unsigned char)s[i + 1]) || !isxdigit((unsigned char)s[i + 2])) return 0;
      i += 2;
    } else if (!isalnum(c) && !strchr("-._~!$&'()*+,;=", c) && !(extra && strchr(extra, c))) {
      return 0;
    }
  }
  return 1;
}

static int scheme_len(const char *s) {
  if (!isalpha((unsigned char)s[0])) return 0;
  int i = 1;
  while (isalnum((unsigned char)s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.') i++;
  return s[i] == ':' ? i : 0;
}

/* authority = [ userinfo "@" ] host [ ":" port ] */
static int authority_ok(const char *s, size_t n) {
  const char *at = memchr(s, '@', n);
  if (at) {
    if (memchr(at + 1, '@', n - (size_t)(at + 1 - s))) return 0;
    if (!chars_ok(s, (size_t)(at - s), ":")) return 0;
    n -= (size_t)(at + 1 - s);
    s = at + 1;
  }
  size_t hl;
  if (n && s[0] == '[') {
    const char *close = memchr(s, ']', n);
    if (!close) return 0;
    hl = (size_t)(close - s) + 1;
    char ip[64];
    if (hl - 2 >= sizeof ip) return 0;
    memcpy(ip, s + 1, hl - 2);
    ip[hl - 2] = 0;
    unsigned char buf[16];
    const char *dot = strrchr(ip, ':');
    if (!(ip[0] == 'v' || ip[0] == 'V') &&
        (inet_pton(AF_INET6, ip, buf) != 1 || (dot && strchr(dot, '.') && !ipv4_ok(dot + 1))))
      return 0;
  } else {
    hl = 0;
    while (hl < n && s[hl] != ':') hl++;
    if (!chars_ok(s, hl, NULL)) return 0;
  }
  if (hl < n) {
    if (s[hl] != ':') return 0;
    for (size_t i = hl + 1; i < n; i++)
      if (!isdigit((unsigned char)s[i])) return 0;
  }
  return 1;
}

/* A URI (need_scheme) or a URI reference; an IRI when iri. */
static int uri_parts_ok(const char *s, int need_scheme);
static int uri_ok(const char *s, int need_scheme, int iri) {
  iri_mode = iri;
  int ok = uri_parts_ok(s, need_scheme);
  iri_mode = 0;
  return ok;
}

static int uri_parts_ok(const char *s, int need_scheme) {
  int sl = scheme_len(s);
  if (need_scheme && !sl) return 0;
  const char *p = sl ? s + sl + 1 : s;
  if (p[0] == '/' && p[1] == '/') {
    p += 2;
    size_t n = strcspn(p, "/?#");
    if (!authority_ok(p, n)) return 0;
    p += n;
  } else if (!sl) {
    /* a relative path's first segment has no ':' (it would read as a scheme) */
    size_t first = strcspn(p, "/?#");
    if (memchr(p, ':', first)) return 0;
  }
  size_t n = strcspn(p, "?#");
  if (!chars_ok(p, n, ":@/")) return 0;
  p += n;
  if (*p == '?') {
    n = strcspn(++p, "#");
    if (!chars_ok(p, n, ":@/?")) return 0;
    p += n;
  }
  if (*p == '#') {
    p++;
    if (!chars_ok(p, strlen(p), ":@/?")) return 0;
  }
  return 1;
}

static int uuid_ok(const char *s) {
  if (strlen(s) != 36) return 0;
  for (int i = 0; i < 36; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (s[i] != '-') return 0;
    } else if (!isxdigit((unsigned char)s[i])) {
      return 0;
    }
  }
  return 1;
}

static int json_pointer_ok(const char *s) {
  if (*s && *s != '/') return 0;
  for (; *s; s++)
    if (*s == '~' && s[1] != '0' && s[1] != '1') return 0;
  return 1;
}

int schema__format_ok(int id, const char *s) {
  switch (id) {
    case SF_DATE_TIME:
      return date_ok(s) && (s[10] == 'T' || s[10] == 't') && time_ok(s + 11);
    case SF_DATE:
      return date_ok(s) && !s[10];
    case SF_TIME:
      return time_ok(s);
    case SF_DURATION:
      return duration_ok(s);
    case SF_EMAIL:
      return email_ok(s);
    case SF_HOSTNAME:
      return hostname_ok(s);
    case SF_IPV4:
      return ipv4_ok(s);
    case SF_IPV6: {
      unsigned char buf[16];
      return !strchr(s, '%') && inet_pton(AF_INET6, s, buf) == 1;
    }
    case SF_URI:
      return uri_ok(s, 1, 0);
    case SF_URI_REFERENCE:
      return uri_ok(s, 0, 0);
    case SF_IRI:
      return uri_ok(s, 1, 1);
    case SF_IRI_REFERENCE:
      return uri_ok(s, 0, 1);
    case SF_RELATIVE_JSON_POINTER: {
      if (!isdigit((unsigned char)s[0]) || (s[0] == '0' && isdigit((unsigned char)s[1]))) return 0;
      while (isdigit((unsigned char)*s)) s++;
      return !strcmp(s, "#") || json_pointer_ok(s);
    }
    case SF_UUID:
      return uuid_ok(s);
    case SF_REGEX: {
      struct sregex r;
      const char *why;
      if (schema__regex_compile(s, &r, &why)) return 0;
      regfree(&r.re);
      return 1;
    }
    case SF_JSON_POINTER:
      return json_pointer_ok(s);
  }
  return 1;
}
