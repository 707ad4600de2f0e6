/* schema_uri.c - RFC 3986 reference resolution for $id, $ref and
 * $dynamicRef (section 5.2: merge, remove_dot_segments), and percent-
 * decoding of the fragment before it is read as a JSON pointer or anchor.
 * Only string work: nothing is ever fetched. */
#include <ctype.h>
#include <string.h>

#include "schema_impl.h"
#include "util.h"

struct uri {
  const char *scheme, *auth, *path, *query, *frag;
  size_t ls, la, lp, lq, lf;
  int has_scheme, has_auth, has_query, has_frag;
};

static void uri_parse(const char *s, struct uri *u) {
  memset(u, 0, sizeof *u);
  size_t i = 0;
  if (isalpha((unsigned char)s[0])) {
    while (isalnum((unsigned char)s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.') i++;
    if (s[i] == ':') u->has_scheme = 1, u->scheme = s, u->ls = i, s += i + 1;
  }
  if (s[0] == '/' && s[1] == '/') {
    s += 2;
    size_t n = strcspn(s, "/?#");
    u->has_auth = 1, u->auth = s, u->la = n, s += n;
  }
  size_t n = strcspn(s, "?#");
  u->path = s, u->lp = n, s += n;
  if (*s == '?') {
    s++;
    n = strcspn(s, "#");
    u->has_query = 1, u->query = s, u->lq = n, s += n;
  }
  if (*s == '#') u->has_frag = 1, u->frag = s + 1, u->lf = strlen(s + 1);
}

/* RFC 3986 5.2.4, on a NUL-terminated copy in place. */
static void remove_dots(char *p) {
  char *out = p, *in = p;
  while (*in) {
    if (!strncmp(in, "../", 3))
      in += 3;
    else if (!strncmp(in, "./", 2))
      in += 2;
    else if (!strncmp(in, "/./", 3))
      in += 2;
    else if (!strcmp(in, "/."))
      in[1] = 0;
    else if (!strncmp(in, "/../", 4) || !strcmp(in, "/..")) {
      if (in[3])
        in += 3;
      else
        in += 2, in[0] = '/';
      while (out > p && *--out != '/') {
      }
      if (out < p) out = p;
      *out = 0;
    } else if (!strcmp(in, ".") || !strcmp(in, "..")) {
      *in = 0;
    } else {
      do *out++ = *in++;
      while (*in && *in != '/');
    }
  }
  *out = 0;
}

/* ref resolved against base: a new string with its fragment (if any). */
char *schema__uri_resolve(const char *base, const char *ref) {
  struct uri b, r;
  uri_parse(base, &b);
  uri_parse(ref, &r);
  struct sbuf path = {0}, out = {0};
  const struct uri *auth_from, *scheme_from = r.has_scheme ? &r : &b;
  const char *q = NULL;
  size_t lq = 0;
  int has_q = 0;
  if (r.has_scheme || r.has_auth) {
    auth_from = &r;
    sbuf_append(&path, r.path, r.lp);
    has_q = r.has_query, q = r.query, lq = r.lq;
  } else {
    auth_from = &b;
    if (!r.lp) {
      sbuf_append(&path, b.path, b.lp);
      if (r.has_query)
        has_q = 1, q = r.query, lq = r.lq;
      else
        has_q = b.has_query, q = b.query, lq = b.lq;
    } else {
      if (r.path[0] != '/') {
        if (b.has_auth && !b.lp)
          sbuf_puts(&path, "/");
        else {
          const char *slash = NULL;
          for (size_t i = 0; i < b.lp; i++)
            if (b.path[i] == '/') slash = b.path + i;
          if (slash) sbuf_append(&path, b.path, (size_t)(slash - b.path) + 1);
        }
      }
      sbuf_append(&path, r.path, r.lp);
      has_q = r.has_query, q = r.query, lq = r.lq;
    }
  }
  if (path.s && (scheme_from->has_scheme || auth_from->has_auth || path.s[0] == '/'))
    remove_dots(path.s);
  if (scheme_from->has_scheme) {
    sbuf_append(&out, scheme_from->scheme, scheme_from->ls);
    sbuf_puts(&out, ":");
  }
  if (auth_from->has_auth) {
    sbuf_puts(&out, "//");
    sbuf_append(&out, auth_from->auth, auth_from->la);
  }
  if (path.s) sbuf_puts(&out, path.s);
  if (has_q) {
    sbuf_puts(&out, "?");
    sbuf_append(&out, q, lq);
  }
  if (r.has_frag) {
    sbuf_puts(&out, "#");
    sbuf_append(&out, r.frag, r.lf);
  }
  sbuf_free(&path);
  char *res = sbuf_take(&out);
  return res ? res : xstrdup("");
}

/* Percent-decodes s in place. */
void schema__percent_decode(char *s) {
  char *o = s;
  for (; *s; s++) {
    int h1, h2;
    if (*s == '%' && isxdigit((unsigned char)s[1]) && isxdigit((unsigned char)s[2])) {
      h1 = isdigit((unsigned char)s[1]) ? s[1] - '0' : (tolower((unsigned char)s[1]) - 'a' + 10);
      h2 = isdigit((unsigned char)s[2]) ? s[2] - '0' : (tolower((unsigned char)s[2]) - 'a' + 10);
      *o++ = (char)(h1 * 16 + h2);
      s += 2;
    } else {
      *o++ = *s;
    }
  }
  *o = 0;
}
