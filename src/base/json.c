/* json.c - strict RFC 8259 parser and printer over cJSON trees; see json.h.
 *
 * cJSON's own parser is lenient (it stops after the first value, accepts
 * "-01" and "2.", raw control characters and "\uqqqq", cuts strings at
 * \u0000) and its printer drops the exact text of big integers, so neither
 * is used: cJSON is only the tree. */
#define _GNU_SOURCE /* strtod_l, newlocale */
#include "json.h"

#include <errno.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define TWO53 9007199254740992.0

/* ------------------------------------------------------------ C locale */

/* Number text must not depend on LC_NUMERIC: conversions run in a "C"
 * locale object made once (strtod_l for reading, uselocale around
 * snprintf for writing). If it cannot be made, the process locale is
 * used, which is "C" unless something called setlocale. */
static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_init(void) { c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

static locale_t get_c_locale(void) {
  pthread_once(&c_locale_once, c_locale_init);
  return c_locale;
}

static double c_strtod(const char *s, char **end) {
  locale_t l = get_c_locale();
  return l ? strtod_l(s, end, l) : strtod(s, end);
}

static void c_format_double(char *buf, size_t n, int prec, double d) {
  locale_t l = get_c_locale(), old = l ? uselocale(l) : (locale_t)0;
  snprintf(buf, n, "%.*g", prec, d);
  if (l) uselocale(old);
}

/* ---------------------------------------------------------------- UTF-8 */


void json_put_codepoint(struct sbuf *b, unsigned cp) {
  char u[4];
  size_t n;
  if (cp == 0) { /* the host's convention for U+0000 */
    u[0] = (char)0xC0, u[1] = (char)0x80, n = 2;
  } else if (cp < 0x80) {
    u[0] = (char)cp, n = 1;
  } else if (cp < 0x800) {
    u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
  } else if (cp < 0x10000) {
    u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    u[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
  } else {
    u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    u[2] = (char)(0x80 | (cp >> 6 & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
  }
  sbuf_append(b, u, n);
}

/* -------------------------------------------------------------- printing */

/* Where printed text goes: an sbuf (json_print), or a BLAKE2b state
 * (json_hash_hex), which hashes the very bytes json_print would return
 * without holding the whole text. Either way the bytes pass through a
 * small buffer first, so the printer makes no allocation of its own for
 * the usual few-member object. */
struct jout {
  struct sbuf *b;               /* text target, or NULL: */
  crypto_generichash_state *h;  /* hash target */
  size_t n;
  char buf[256];
};

static void out_flush(struct jout *o) {
  if (!o->n) return;
  if (o->b) sbuf_append(o->b, o->buf, o->n);
  else crypto_generichash_update(o->h, (const unsigned char *)o->buf, o->n);
  o->n = 0;
}

static void out_put(struct jout *o, const char *s, size_t n) {
  if (n <= 8 && n <= sizeof o->buf - o->n) { /* punctuation, short keys: no memcpy call */
    char *d = o->buf + o->n;
    for (size_t i = 0; i < n; i++) d[i] = s[i];
    o->n += n;
    return;
  }
  if (n > sizeof o->buf - o->n) {
    out_flush(o);
    if (n > sizeof o->buf) { /* a long run goes straight through */
      if (o->b) sbuf_append(o->b, s, n);
      else crypto_generichash_update(o->h, (const unsigned char *)s, n);
      return;
    }
  }
  memcpy(o->buf + o->n, s, n);
  o->n += n;
}

static inline void out_ch(struct jout *o, char c) {
  if (o->n == sizeof o->buf) out_flush(o);
  o->buf[o->n++] = c;
}

#define R4(x) x, x, x, x
#define R16(x) R4(x), R4(x), R4(x), R4(x)
/* json.h: the bytes a string literal holds as they are. */
const unsigned char json_str_plain[256] = {
    R16(0), R16(0),                                 /* 0x00-0x1F */
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x20-0x2F: '"' */
    R16(1), R16(1),                                 /* 0x30-0x4F */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, /* 0x50-0x5F: '\\' */
    R16(1), R16(1),                                 /* 0x60-0x7F */
    R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), /* 0x80-0xFF */
};
#undef R16
#undef R4

/* Appends the n bytes at p as the inside of a JSON string literal (no
 * quotes); see json_print for the rules. Each byte's output depends on it
 * and the bytes after it only, so a string may be written in parts that
 * end where a byte's output ends (json_put_string's fast path). Runs of
 * plain bytes are found with a table, four at a step, and copied at once. */
static void put_chars(struct jout *b, const unsigned char *p, size_t n) {
  static const char hexd[] = "0123456789abcdef";
  size_t i = 0;
  for (;;) {
    size_t run = i;
    while (i + 4 <= n && json_str_plain[p[i]] && json_str_plain[p[i + 1]] &&
           json_str_plain[p[i + 2]] && json_str_plain[p[i + 3]])
      i += 4;
    while (i < n && json_str_plain[p[i]]) i++;
    if (i > run) out_put(b, (const char *)p + run, i - run);
    if (i >= n) break;
    unsigned char c = p[i];
    const char *why;
    size_t len;
    switch (c) {
      case '"': out_put(b, "\\\"", 2); break;
      case '\\': out_put(b, "\\\\", 2); break;
      case '\b': out_put(b, "\\b", 2); break;
      case '\f': out_put(b, "\\f", 2); break;
      case '\n': out_put(b, "\\n", 2); break;
      case '\r': out_put(b, "\\r", 2); break;
      case '\t': out_put(b, "\\t", 2); break;
      default:
        if (c < 0x20) {
          char u[6] = {'\\', 'u', '0', '0', hexd[c >> 4], hexd[c & 15]}; /* as "\\u%04x" */
          out_put(b, u, 6);
        } else if (c == 0xC0 && i + 1 < n && p[i + 1] == 0x80) {
          out_put(b, "\\u0000", 6);
          i++;
        } else if ((len = util_utf8_len(p + i, n - i, &why)) > 0) {
          out_put(b, (const char *)p + i, len);
          i += len - 1;
        } else {
          out_put(b, "\xEF\xBF\xBD", 3); /* U+FFFD, one per bad byte */
        }
    }
    i++;
  }
}

/* Appends s as a JSON string literal; see json_print for the rules. */
static void put_string(struct jout *b, const char *str) {
  const unsigned char *p = (const unsigned char *)(str ? str : "");
  out_ch(b, '"');
  put_chars(b, p, strlen((const char *)p));
  out_ch(b, '"');
}

/* The escapes of two characters put_chars writes (the escape's letter);
 * 0 for every other byte. */
static const unsigned char short_esc[256] = {
    ['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r',
    ['\t'] = 't', ['"'] = '"', ['\\'] = '\\',
};

/* The n bytes at p as a string literal, straight into b: printable ASCII
 * is copied run by run and the two-character escapes written in place,
 * with room made for the text and its quotes once (and again only when
 * escapes use up the slack); at the first byte of any other kind the rest
 * goes through put_chars. The bytes are put_string's: the same rules,
 * byte for byte (json_str_plain and short_esc are put_chars's first two
 * cases). The wire bodies print every string this way. */
static void put_string_sbuf(struct sbuf *b, const unsigned char *p, size_t n) {
  enum { SLACK = 16 };
  size_t i = 0, room = n + 2 + SLACK;
  if (b->len + room + 1 > b->cap) sbuf_reserve(b, room);
  char *d = b->s + b->len, *lim = d + room; /* d + escapes' extra bytes stays below lim */
  *d++ = '"';
  while (i < n) {
    size_t j = i;
    while (j < n && json_str_plain[p[j]]) j++;
    memcpy(d, p + i, j - i);
    d += j - i;
    i = j;
    if (i == n) break;
    unsigned char e = short_esc[p[i]];
    if (!e) { /* the rest by put_chars's rules */
      b->len = (size_t)(d - b->s);
      struct jout o;
      o.b = b, o.h = NULL, o.n = 0;
      put_chars(&o, p + i, n - i);
      out_ch(&o, '"');
      out_flush(&o);
      return;
    }
    if (lim - d < (ptrdiff_t)(n - i) + 3) { /* the escape, the rest and the quote */
      b->len = (size_t)(d - b->s);
      room = n - i + 2 + SLACK;
      sbuf_reserve(b, room);
      d = b->s + b->len;
      lim = d + room;
    }
    d[0] = '\\', d[1] = (char)e;
    d += 2;
    i++;
  }
  *d++ = '"';
  b->len = (size_t)(d - b->s);
  b->s[b->len] = 0;
}

void json_put_string(struct sbuf *b, const char *s) {
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  put_string_sbuf(b, p, strlen((const char *)p));
}

/* Whether s is exactly one JSON number (the RFC 8259 grammar). */
static int number_text_ok(const char *s) {
  const char *p = s;
  if (*p == '-') p++;
  if (*p == '0') p++;
  else if (*p >= '1' && *p <= '9')
    while (*p >= '0' && *p <= '9') p++;
  else return 0;
  if (*p == '.') {
    if (*++p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
  }
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
  }
  return *p == 0;
}

/* Writes the exact decimal digits of an integral double (|d| < 2^63). */
static void put_integer(struct jout *b, double d) {
  char tmp[24], *q = tmp + sizeof tmp;
  long long x = (long long)d;
  unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
  do *--q = (char)('0' + u % 10);
  while (u /= 10);
  if (x < 0) *--q = '-';
  out_put(b, q, (size_t)(tmp + sizeof tmp - q));
}

/* A non-integral d that is the double nearest to k/1000 for an integer k
 * (durations in ms rounded to the microsecond, the usual fraction here):
 * %.15g writes exactly the decimal k/1000 for |d| < 1e12 (at most 15
 * significant digits, which a double holds, so it reads back as d, in
 * fixed notation as the exponent is -3 or more), so it is written from k
 * without printf. Returns 0 (nothing written) for any other d. */
static int put_milli(struct jout *b, double d) {
  long long k = llround(d * 1000);
  if ((double)k / 1000 != d) return 0;
  char tmp[32], *q = tmp + sizeof tmp;
  unsigned long long u = k < 0 ? 0ULL - (unsigned long long)k : (unsigned long long)k;
  unsigned frac = (unsigned)(u % 1000);
  int digits = 3;
  while (frac % 10 == 0) frac /= 10, digits--; /* frac != 0: d is not integral */
  for (int i = 0; i < digits; i++) *--q = (char)('0' + frac % 10), frac /= 10;
  *--q = '.';
  u /= 1000;
  do *--q = (char)('0' + u % 10);
  while (u /= 10);
  if (k < 0) *--q = '-';
  out_put(b, q, (size_t)(tmp + sizeof tmp - q));
  return 1;
}

static void put_number(struct jout *b, const cJSON *v) {
  if (v->valuestring && number_text_ok(v->valuestring)) {
    out_put(b, v->valuestring, strlen(v->valuestring));
    return;
  }
  double d = v->valuedouble;
  if (!isfinite(d)) {
    out_put(b, "null", 4);
  } else if (d == floor(d) && fabs(d) < TWO53) {
    put_integer(b, d);
  } else if (fabs(d) < 1e12 && put_milli(b, d)) {
  } else {
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
      c_format_double(buf, sizeof buf, prec, d);
      if (c_strtod(buf, NULL) == d) break;
    }
    out_put(b, buf, strlen(buf));
  }
}

void json_put_number(struct sbuf *b, double d) {
  struct jout o;
  o.b = b, o.h = NULL, o.n = 0;
  cJSON v = {0};
  v.type = cJSON_Number;
  v.valuedouble = d;
  put_number(&o, &v);
  out_flush(&o);
}

/* Canonical key order: the bytes of the keys' UTF-8 text, with C0 80
 * standing for the zero byte, so it sorts before every other character. */
static int key_cmp(const char *a, const char *b) {
  const unsigned char *p = (const unsigned char *)(a ? a : ""),
                      *q = (const unsigned char *)(b ? b : "");
  for (;;) {
    int x = *p ? *p : -1, y = *q ? *q : -1;
    if (*p == 0xC0 && p[1] == 0x80) x = 0, p++;
    if (*q == 0xC0 && q[1] == 0x80) y = 0, q++;
    if (x != y || x < 0) return x < y ? -1 : x > y;
    p++, q++;
  }
}

static int cmp_member(const void *a, const void *b) {
  return key_cmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

static void put_indent(struct jout *b, int depth) {
  static const char tabs[] = "\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t";
  while (depth > 0) {
    int k = depth < 16 ? depth : 16;
    out_put(b, tabs, (size_t)k);
    depth -= k;
  }
}

/* depth counts the enclosing arrays and objects, as cJSON_Print's layout
 * does: an object's members are indented one tab deeper than it. */
static void put_value(struct jout *b, const cJSON *v, unsigned flags, int depth);

/* "key":value of an object member, then "," when more follow. */
static void put_member(struct jout *b, const cJSON *m, unsigned flags, int depth, bool more) {
  int pretty = (flags & JSON_PRETTY) != 0;
  put_string(b, m->string);
  out_put(b, pretty ? ":\t" : ":", pretty ? 2 : 1);
  put_value(b, m, flags, depth + 1);
  if (more) out_ch(b, ',');
  if (pretty) out_ch(b, '\n');
}

static void put_value(struct jout *b, const cJSON *v, unsigned flags, int depth) {
  int pretty = (flags & JSON_PRETTY) != 0;
  switch (v ? v->type & 0xFF : cJSON_NULL) {
    case cJSON_False: out_put(b, "false", 5); break;
    case cJSON_True: out_put(b, "true", 4); break;
    case cJSON_Number: put_number(b, v); break;
    case cJSON_String: put_string(b, v->valuestring); break;
    case cJSON_Array:
      out_ch(b, '[');
      for (const cJSON *c = v->child; c; c = c->next) {
        put_value(b, c, flags, depth + 1);
        if (c->next) out_put(b, pretty ? ", " : ",", pretty ? 2 : 1);
      }
      out_ch(b, ']');
      break;
    case cJSON_Object: {
      if (!v->child) {
        out_put(b, "{}", 2);
        break;
      }
      if (!(flags & JSON_CANONICAL)) { /* in order: no member list to sort */
        out_put(b, pretty ? "{\n" : "{", pretty ? 2 : 1);
        for (const cJSON *c = v->child; c; c = c->next) {
          if (pretty) put_indent(b, depth + 1);
          put_member(b, c, flags, depth, c->next != NULL);
        }
        if (pretty) put_indent(b, depth);
        out_ch(b, '}');
        break;
      }
      size_t n = 0, i = 0;
      for (const cJSON *c = v->child; c; c = c->next) n++;
      /* A few members (the usual arguments) are sorted on the stack by
       * insertion; equal keys or many members go through qsort as always,
       * so the output is the same whichever way it was sorted. */
      const cJSON *few[16], **m = n <= 16 ? few : xmalloc(n * sizeof *m);
      for (const cJSON *c = v->child; c; c = c->next) m[i++] = c;
      int sorted = 0;
      if (m == few) {
        sorted = 1;
        for (size_t a = 1; a < n && sorted; a++) {
          const cJSON *x = m[a];
          size_t at = a;
          int c = 0;
          while (at > 0 && (c = key_cmp(m[at - 1]->string, x->string)) > 0) {
            m[at] = m[at - 1];
            at--;
          }
          m[at] = x;
          if (at > 0 && c == 0) sorted = 0; /* equal keys: qsort's order */
        }
        if (!sorted) { /* back to the members' own order for qsort */
          i = 0;
          for (const cJSON *c = v->child; c; c = c->next) m[i++] = c;
        }
      }
      if (!sorted) qsort(m, n, sizeof *m, cmp_member);
      out_put(b, pretty ? "{\n" : "{", pretty ? 2 : 1);
      for (i = 0; i < n; i++) {
        if (pretty) put_indent(b, depth + 1);
        put_member(b, m[i], flags, depth, i + 1 < n);
      }
      if (pretty) put_indent(b, depth);
      out_ch(b, '}');
      if (m != few) free(m);
      break;
    }
    default: out_put(b, "null", 4); /* null, raw, invalid */
  }
}

/* Prints v into b (appending). */
static void print_into(struct sbuf *b, const cJSON *v, unsigned flags) {
  struct jout o;
  o.b = b, o.h = NULL, o.n = 0;
  put_value(&o, v, flags, 0);
  out_flush(&o);
}

void json_put_value(struct sbuf *b, const cJSON *v) { print_into(b, v, 0); }

char *json_print(const cJSON *v, unsigned flags) {
  struct sbuf b = {0};
  print_into(&b, v, flags);
  return sbuf_take(&b);
}

char *json_canonical(const cJSON *v) { return json_print(v, JSON_CANONICAL); }

void json_hash_hex(const cJSON *v, char out[65]) {
  /* The canonical text is hashed as it is printed: the same bytes as
   * json_canonical(v), never held whole (tests/unit/base/test_json.c and
   * tests/unit/lua/test_sandbox_json.c compare the two on random and
   * hostile trees). */
  crypto_generichash_state st;
  struct jout o;
  o.b = NULL, o.h = &st, o.n = 0;
  crypto_generichash_init(&st, NULL, 0, 32);
  put_value(&o, v, JSON_CANONICAL, 0);
  out_flush(&o);
  unsigned char h[32];
  crypto_generichash_final(&st, h, sizeof h);
  util_hex(h, sizeof h, out);
}

/* ---------------------------------------------------------- flat copies */

/* The nodes and string bytes of v's tree (v itself, not its siblings). */
static void flat_measure(const cJSON *v, size_t *nodes, size_t *bytes) {
  (*nodes)++;
  if (v->string) *bytes += strlen(v->string) + 1;
  if (v->valuestring) *bytes += strlen(v->valuestring) + 1;
  for (const cJSON *c = v->child; c; c = c->next) flat_measure(c, nodes, bytes);
}

static char *flat_str(char **text, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = *text;
  memcpy(d, s, n);
  *text += n;
  return d;
}

/* Copies v's tree: nodes at *node on, strings at *text on. */
static cJSON *flat_put(const cJSON *v, cJSON **node, char **text) {
  cJSON *o = (*node)++;
  *o = *v;
  o->next = o->prev = o->child = NULL;
  o->type = v->type & 0xFF; /* the copy holds its own strings: no reference flags */
  if (v->string) o->string = flat_str(text, v->string);
  if (v->valuestring) o->valuestring = flat_str(text, v->valuestring);
  cJSON *last = NULL;
  for (const cJSON *c = v->child; c; c = c->next) {
    cJSON *k = flat_put(c, node, text);
    if (last) {
      last->next = k;
      k->prev = last;
    } else {
      o->child = k;
    }
    last = k;
  }
  if (o->child) o->child->prev = last; /* cJSON's convention: the first's prev is the last */
  return o;
}

/* A flat copy starts with its node count (padded to keep the nodes
 * aligned), then the nodes, the root first, then the strings. */
#define FLAT_HEAD 16
_Static_assert(FLAT_HEAD >= sizeof(size_t) && FLAT_HEAD % _Alignof(cJSON) == 0, "flat header");

size_t json_flat_copy(const cJSON *v, void *buf, size_t cap) {
  if (!v) return 0;
  size_t nodes = 0, bytes = 0;
  flat_measure(v, &nodes, &bytes);
  size_t need = FLAT_HEAD + nodes * sizeof(cJSON) + bytes;
  if (need > cap) return 0;
  memcpy(buf, &nodes, sizeof nodes);
  cJSON *node = (cJSON *)((char *)buf + FLAT_HEAD);
  char *text = (char *)(node + nodes);
  flat_put(v, &node, &text);
  return need;
}

const cJSON *json_flat_root(const void *buf) {
  return (const cJSON *)((const char *)buf + FLAT_HEAD);
}

/* p moved by d bytes (every pointer of a flat copy points into it). */
static void *flat_shift(void *p, uintptr_t d) {
  return p ? (void *)((uintptr_t)p + d) : NULL;
}

const cJSON *json_flat_move(void *to, const void *from, size_t n) {
  memcpy(to, from, n);
  size_t nodes;
  memcpy(&nodes, to, sizeof nodes);
  /* Every pointer of a node leads into the copy, so each moves by the
   * same distance (unsigned arithmetic wraps as the distance needs). */
  uintptr_t d = (uintptr_t)to - (uintptr_t)from;
  cJSON *o = (cJSON *)((char *)to + FLAT_HEAD);
  for (size_t i = 0; i < nodes; i++, o++) {
    o->next = flat_shift(o->next, d);
    o->prev = flat_shift(o->prev, d);
    o->child = flat_shift(o->child, d);
    o->string = flat_shift(o->string, d);
    o->valuestring = flat_shift(o->valuestring, d);
  }
  return json_flat_root(to);
}

/* -------------------------------------------------------------- equality */

/* The integer text of a number node, if it carries one. */
static const char *int_text(const cJSON *v) {
  const char *s = v->valuestring;
  if (!s || !number_text_ok(s) || strpbrk(s, ".eE")) return NULL;
  return strcmp(s, "-0") ? s : "0";
}

static int num_equal(const cJSON *a, const cJSON *b) {
  const char *ta = int_text(a), *tb = int_text(b);
  if (!ta && !tb) return a->valuedouble == b->valuedouble;
  if (ta && tb) return !strcmp(ta, tb);
  /* one exact integer text against a double: equal only if the double is
   * that very integer; %.0f prints an integral double's exact digits. */
  double d = ta ? b->valuedouble : a->valuedouble;
  if (!isfinite(d) || d != floor(d)) return 0;
  char buf[400];
  snprintf(buf, sizeof buf, "%.0f", d == 0 ? 0.0 : d);
  return !strcmp(ta ? ta : tb, buf);
}

static int same_str(const char *a, const char *b) { return !a || !b ? a == b : !strcmp(a, b); }

int json_identical(const cJSON *a, const cJSON *b) {
  if (!a || !b) return a == b;
  if ((a->type & 0xFF) != (b->type & 0xFF) || !same_str(a->string, b->string) ||
      !same_str(a->valuestring, b->valuestring))
    return 0;
  if ((a->type & 0xFF) == cJSON_Number &&
      memcmp(&a->valuedouble, &b->valuedouble, sizeof a->valuedouble))
    return 0;
  const cJSON *x = a->child, *y = b->child;
  for (; x && y; x = x->next, y = y->next)
    if (!json_identical(x, y)) return 0;
  return !x && !y;
}

int json_equal(const cJSON *a, const cJSON *b) {
  if (!a || !b) return a == b;
  int t = a->type & 0xFF;
  if (t != (b->type & 0xFF)) return 0;
  switch (t) {
    case cJSON_Number: return num_equal(a, b);
    case cJSON_String:
    case cJSON_Raw: return !strcmp(a->valuestring ? a->valuestring : "",
                                   b->valuestring ? b->valuestring : "");
    case cJSON_Array: {
      const cJSON *x = a->child, *y = b->child;
      for (; x && y; x = x->next, y = y->next)
        if (!json_equal(x, y)) return 0;
      return !x && !y;
    }
    case cJSON_Object: {
      size_t n = 0, m = 0;
      for (const cJSON *c = a->child; c; c = c->next) n++;
      for (const cJSON *c = b->child; c; c = c->next) m++;
      if (n != m) return 0;
      if (!n) return 1;
      /* sort both member lists by key and walk them together: n log n,
       * so a large object cannot make a const check quadratic */
      const cJSON **x = xmalloc(2 * n * sizeof *x), **y = x + n;
      size_t i = 0;
      for (const cJSON *c = a->child; c; c = c->next) x[i++] = c;
      i = 0;
      for (const cJSON *c = b->child; c; c = c->next) y[i++] = c;
      qsort(x, n, sizeof *x, cmp_member);
      qsort(y, n, sizeof *y, cmp_member);
      int eq = 1;
      for (i = 0; i < n && eq; i++)
        eq = !key_cmp(x[i]->string, y[i]->string) && json_equal(x[i], y[i]);
      free(x);
      return eq;
    }
    default: return 1; /* null, true, false: the type says it all */
  }
}

/* --------------------------------------------------------------- parsing */

struct parser {
  const unsigned char *s;
  size_t n, i;
  unsigned flags;
  struct err *e;
  struct sbuf *str; /* scratch for the string being decoded (own_str, or json_scan's caller's) */
  struct sbuf own_str;
  size_t budget;   /* bytes the tree may take (json_parse_bounded); 0: no bound */
  size_t used;
  size_t replaced; /* JSON_REPLACE_INVALID: invalid UTF-8 sequences made U+FFFD */
};

/* What a node of the tree costs: the cJSON struct, the allocator's
 * overhead, and its string or key. */
#define NODE_COST (sizeof(cJSON) + 16)

/* Charges bytes to the tree's budget; fails once it is spent. */
static int charge(struct parser *p, size_t bytes) {
  if (!p->budget) return 0;
  p->used += bytes;
  if (p->used <= p->budget) return 0;
  return err_set(p->e, ERR_LIMIT, "limit_memory",
                 "the JSON (%zu bytes of text) needs more than %zu bytes of memory", p->n,
                 p->budget);
}

static int fail(struct parser *p, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct parser *p, size_t at, const char *fmt, ...) {
  char what[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return err_set(p->e, ERR_INVALID, "invalid_json", "invalid JSON at byte %zu: %s", at, what);
}

static int nomem(struct parser *p) {
  return err_set(p->e, ERR_NOMEM, "out_of_memory", "out of memory while parsing JSON");
}

static void skip_ws(struct parser *p) {
  while (p->i < p->n) {
    unsigned char c = p->s[p->i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->i++;
  }
}

/* An error for the byte at p->i, where a value or a given token was
 * expected (what: "a value", "',' or ']' in an array", ...). */
static int unexpected(struct parser *p, const char *what) {
  if (p->i >= p->n) return fail(p, p->i, "unexpected end of input, expected %s", what);
  unsigned char c = p->s[p->i];
  if (c >= 0x20 && c < 0x7F)
    return fail(p, p->i, "unexpected character '%c', expected %s", c, what);
  return fail(p, p->i, "unexpected byte 0x%02X, expected %s", c, what);
}

static int hex4(const unsigned char *h, unsigned *out) {
  unsigned v = 0;
  for (int k = 0; k < 4; k++) {
    unsigned char c = h[k];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return -1;
  }
  *out = v;
  return 0;
}

int json_unescape(const unsigned char *s, size_t n, unsigned *cp, size_t *used) {
  *cp = 0;
  if (n < 2) return JSON_ESC_SHORT;
  switch (s[1]) {
    case '"': *cp = '"'; break;
    case '\\': *cp = '\\'; break;
    case '/': *cp = '/'; break;
    case 'b': *cp = '\b'; break;
    case 'f': *cp = '\f'; break;
    case 'n': *cp = '\n'; break;
    case 'r': *cp = '\r'; break;
    case 't': *cp = '\t'; break;
    case 'u': break;
    default: return JSON_ESC_UNKNOWN;
  }
  if (*cp) {
    *used = 2;
    return JSON_ESC_OK;
  }
  unsigned hi, lo;
  if (n < 6 || hex4(s + 2, &hi)) return JSON_ESC_HEX;
  *cp = hi;
  if (hi >= 0xDC00 && hi <= 0xDFFF) return JSON_ESC_LONE_LOW;
  if (hi >= 0xD800 && hi <= 0xDBFF) {
    if (n < 12 || s[6] != '\\' || s[7] != 'u' || hex4(s + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF)
      return JSON_ESC_LONE_HIGH;
    *cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
    *used = 12;
    return JSON_ESC_OK;
  }
  *used = 6;
  return JSON_ESC_OK;
}

/* Decodes the string literal at p->i (its opening quote) into p->str. */
static int parse_string(struct parser *p) {
  const unsigned char *s = p->s;
  size_t start = p->i++;
  p->str->len = 0;
  if (p->str->s) p->str->s[0] = 0;
  for (;;) {
    size_t run = p->i;
    while (p->i < p->n && s[p->i] >= 0x20 && s[p->i] < 0x80 && s[p->i] != '"' && s[p->i] != '\\')
      p->i++;
    if (p->i > run) sbuf_append(p->str, (const char *)s + run, p->i - run);
    if (p->i >= p->n) return fail(p, start, "unterminated string");
    unsigned char c = s[p->i];
    if (c == '"') {
      p->i++;
      if (!p->str->s) sbuf_append(p->str, "", 0);
      return 0;
    }
    if (c < 0x20) return fail(p, p->i, "control character 0x%02X in a string must be escaped", c);
    if (c >= 0x80) {
      const char *why = "";
      size_t len = util_utf8_len(s + p->i, p->n - p->i, &why);
      if (!len && (p->flags & JSON_REPLACE_INVALID)) {
        /* One byte at a time, as U+FFFD: the text is kept, never cut. */
        sbuf_append(p->str, "\xEF\xBF\xBD", 3);
        p->replaced++;
        p->i++;
        continue;
      }
      if (!len) return fail(p, p->i, "invalid UTF-8 (%s)", why);
      sbuf_append(p->str, (const char *)s + p->i, len);
      p->i += len;
      continue;
    }
    /* a backslash */
    size_t esc = p->i, used;
    if (p->i + 1 >= p->n) return fail(p, start, "unterminated string");
    unsigned cp;
    switch (json_unescape(s + p->i, p->n - p->i, &cp, &used)) {
      case JSON_ESC_OK: break;
      case JSON_ESC_UNKNOWN:
        c = s[p->i + 1];
        if (c >= 0x20 && c < 0x7F) return fail(p, esc, "invalid escape '\\%c' in a string", c);
        return fail(p, esc, "invalid escape (byte 0x%02X after '\\') in a string", c);
      case JSON_ESC_LONE_LOW:
        return fail(p, esc, "lone UTF-16 surrogate \\u%04X (a low surrogate without a high one)", cp);
      case JSON_ESC_LONE_HIGH:
        return fail(p, esc, "lone UTF-16 surrogate \\u%04X (not followed by a low surrogate)", cp);
      default:
        return fail(p, esc, "invalid \\u escape (expected four hex digits)");
    }
    p->i += used;
    json_put_codepoint(p->str, cp);
  }
}

/* Checks the number lexeme at p->i and moves past it; *integer: written
 * without fraction or exponent. */
static int number_lexeme(struct parser *p, int *integer) {
  const unsigned char *s = p->s;
  size_t n = p->n;
  *integer = 1;
  if (p->i < n && s[p->i] == '-') p->i++;
  if (p->i >= n || s[p->i] < '0' || s[p->i] > '9') return unexpected(p, "a digit in a number");
  if (s[p->i] == '0') {
    p->i++;
    if (p->i < n && s[p->i] >= '0' && s[p->i] <= '9')
      return fail(p, p->i, "leading zero in number");
  } else {
    while (p->i < n && s[p->i] >= '0' && s[p->i] <= '9') p->i++;
  }
  if (p->i < n && s[p->i] == '.') {
    *integer = 0;
    p->i++;
    if (p->i >= n || s[p->i] < '0' || s[p->i] > '9')
      return unexpected(p, "a digit after the decimal point");
    while (p->i < n && s[p->i] >= '0' && s[p->i] <= '9') p->i++;
  }
  if (p->i < n && (s[p->i] == 'e' || s[p->i] == 'E')) {
    *integer = 0;
    p->i++;
    if (p->i < n && (s[p->i] == '+' || s[p->i] == '-')) p->i++;
    if (p->i >= n || s[p->i] < '0' || s[p->i] > '9') return unexpected(p, "a digit in the exponent");
    while (p->i < n && s[p->i] >= '0' && s[p->i] <= '9') p->i++;
  }
  return 0;
}

static int parse_number(struct parser *p, cJSON **out) {
  const unsigned char *s = p->s;
  size_t start = p->i;
  int integer, lrc = number_lexeme(p, &integer);
  if (lrc) return lrc;
  /* the lexeme is valid; copy it so strtod sees it NUL-terminated */
  size_t len = p->i - start;
  char small[64], *lex = len < sizeof small ? small : malloc(len + 1);
  if (!lex) return nomem(p);
  memcpy(lex, s + start, len);
  lex[len] = 0;
  double d = c_strtod(lex, NULL);
  int rc = 0;
  cJSON *v = NULL;
  if (isinf(d)) {
    rc = fail(p, start, "number out of range");
    goto out;
  }
  if (!(v = cJSON_CreateNumber(d))) {
    rc = nomem(p);
    goto out;
  }
  if (integer && fabs(d) >= TWO53) { /* keep the exact digits */
    v->valuestring = lex == small ? strdup(lex) : lex;
    if (lex != small) lex = small;
    if (!v->valuestring) {
      cJSON_Delete(v), v = NULL;
      rc = nomem(p);
      goto out;
    }
  }
  *out = v;
out:
  if (lex != small) free(lex);
  return rc;
}

static int parse_value(struct parser *p, int depth, cJSON **out);

/* Finding earlier members by key: a linear scan while an object is small,
 * then an open-addressing hash table, so 100,000 keys stay linear. */
struct keyset {
  cJSON **slot;
  size_t cap, used;
};

static uint64_t key_hash(const char *k) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (; *k; k++) h = (h ^ (unsigned char)*k) * 1099511628211ULL;
  return h;
}

/* Returns the slot for key k (holding its member, or empty). */
static cJSON **keyset_slot(struct keyset *ks, const char *k) {
  size_t i = (size_t)key_hash(k) & (ks->cap - 1);
  while (ks->slot[i] && strcmp(ks->slot[i]->string, k)) i = (i + 1) & (ks->cap - 1);
  return &ks->slot[i];
}

static int keyset_grow(struct keyset *ks, const cJSON *obj) {
  size_t cap = ks->cap ? ks->cap * 2 : 32;
  cJSON **slot = calloc(cap, sizeof *slot);
  if (!slot) return -1;
  free(ks->slot);
  ks->slot = slot, ks->cap = cap, ks->used = 0;
  for (cJSON *c = obj->child; c; c = c->next) {
    *keyset_slot(ks, c->string) = c;
    ks->used++;
  }
  return 0;
}

/* The member of obj whose key is k, or NULL. */
static cJSON *find_member(struct keyset *ks, const cJSON *obj, const char *k) {
  if (!ks->cap) {
    for (cJSON *c = obj->child; c; c = c->next)
      if (!strcmp(c->string, k)) return c;
    return NULL;
  }
  return *keyset_slot(ks, k);
}

/* Appends the escaped key, cut at 64 bytes, for an error message. */
static void key_for_message(char *buf, size_t n, const char *k) {
  struct sbuf b = {0};
  struct jout o;
  o.b = &b, o.h = NULL, o.n = 0;
  put_string(&o, k);
  out_flush(&o);
  if (b.len > 66) {
    size_t cut = 64;
    while (cut > 1 && ((unsigned char)b.s[cut] & 0xC0) == 0x80) cut--;
    snprintf(buf, n, "%.*s...\"", (int)cut, b.s);
  } else {
    snprintf(buf, n, "%s", b.s);
  }
  sbuf_free(&b);
}

static int parse_object(struct parser *p, int depth, cJSON **out) {
  struct keyset ks = {0};
  size_t n = 0;
  int rc = 0;
  char *key = NULL;
  cJSON *obj = cJSON_CreateObject(), *v = NULL;
  if (!obj) return nomem(p);
  p->i++; /* '{' */
  skip_ws(p);
  if (p->i < p->n && p->s[p->i] == '}') {
    p->i++;
    goto done;
  }
  for (;;) {
    skip_ws(p);
    if (p->i >= p->n || p->s[p->i] != '"') {
      rc = unexpected(p, n ? "a key (a string)" : "a key (a string) or '}'");
      goto out;
    }
    size_t at = p->i;
    if ((rc = parse_string(p)) || (rc = charge(p, p->str->len + 1))) goto out;
    if (!(key = strdup(p->str->s))) {
      rc = nomem(p);
      goto out;
    }
    skip_ws(p);
    if (p->i >= p->n || p->s[p->i] != ':') {
      rc = unexpected(p, "':' after a key");
      goto out;
    }
    p->i++;
    if ((rc = parse_value(p, depth, &v))) goto out;
    cJSON *old = find_member(&ks, obj, key);
    if (old && (p->flags & JSON_NO_DUPLICATES)) {
      char shown[100];
      key_for_message(shown, sizeof shown, key);
      rc = fail(p, at, "duplicate key %s", shown);
      goto out;
    }
    v->string = key; /* cJSON frees it with the node */
    key = NULL;
    if (old) { /* the last value wins, at the first one's place */
      cJSON **slot = ks.cap ? keyset_slot(&ks, v->string) : NULL; /* before old is freed */
      cJSON_ReplaceItemViaPointer(obj, old, v);
      if (slot) *slot = v;
    } else {
      cJSON_AddItemToArray(obj, v);
      n++;
      if (ks.cap) {
        *keyset_slot(&ks, v->string) = v;
        ks.used++;
      }
      if ((n > 8 && !ks.cap) || ks.used * 2 > ks.cap) {
        if (keyset_grow(&ks, obj)) {
          v = NULL;
          rc = nomem(p);
          goto out;
        }
      }
    }
    v = NULL;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ',') {
      p->i++;
      continue;
    }
    if (p->i < p->n && p->s[p->i] == '}') {
      p->i++;
      break;
    }
    rc = unexpected(p, "',' or '}' in an object");
    goto out;
  }
done:
  *out = obj;
  obj = NULL;
out:
  free(ks.slot);
  free(key);
  cJSON_Delete(v);
  cJSON_Delete(obj);
  return rc;
}

static int parse_array(struct parser *p, int depth, cJSON **out) {
  int rc = 0;
  cJSON *arr = cJSON_CreateArray(), *v = NULL;
  if (!arr) return nomem(p);
  p->i++; /* '[' */
  skip_ws(p);
  if (p->i < p->n && p->s[p->i] == ']') {
    p->i++;
    goto done;
  }
  for (;;) {
    if ((rc = parse_value(p, depth, &v))) goto out;
    cJSON_AddItemToArray(arr, v);
    v = NULL;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ',') {
      p->i++;
      continue;
    }
    if (p->i < p->n && p->s[p->i] == ']') {
      p->i++;
      break;
    }
    rc = unexpected(p, "',' or ']' in an array");
    goto out;
  }
done:
  *out = arr;
  arr = NULL;
out:
  cJSON_Delete(arr);
  return rc;
}

static int parse_literal(struct parser *p, const char *word, cJSON *(*make)(void), cJSON **out) {
  size_t start = p->i, len = strlen(word);
  for (size_t k = 0; k < len; k++, p->i++) {
    if (p->i >= p->n) return fail(p, p->i, "unexpected end of input in '%s'", word);
    if (p->s[p->i] != (unsigned char)word[k])
      return fail(p, start, "invalid literal (expected '%s')", word);
  }
  if (!(*out = make())) return nomem(p);
  return 0;
}

/* Parses one value after optional whitespace; depth counts the arrays and
 * objects around it. */
static int parse_value(struct parser *p, int depth, cJSON **out) {
  *out = NULL;
  skip_ws(p);
  if (p->i >= p->n) return unexpected(p, "a value");
  int crc = charge(p, NODE_COST);
  if (crc) return crc;
  switch (p->s[p->i]) {
    case '{':
    case '[':
      if (depth >= JSON_PARSE_MAX_DEPTH)
        return fail(p, p->i, "nested deeper than %d levels", JSON_PARSE_MAX_DEPTH);
      return p->s[p->i] == '{' ? parse_object(p, depth + 1, out) : parse_array(p, depth + 1, out);
    case '"': {
      int rc = parse_string(p);
      if (!rc) rc = charge(p, p->str->len + 1);
      if (rc) return rc;
      return (*out = cJSON_CreateString(p->str->s)) ? 0 : nomem(p);
    }
    case 't': return parse_literal(p, "true", cJSON_CreateTrue, out);
    case 'f': return parse_literal(p, "false", cJSON_CreateFalse, out);
    case 'n': return parse_literal(p, "null", cJSON_CreateNull, out);
    default:
      if (p->s[p->i] == '-' || (p->s[p->i] >= '0' && p->s[p->i] <= '9'))
        return parse_number(p, out);
      return unexpected(p, "a value");
  }
}

int json_parse(const char *s, size_t n, unsigned flags, cJSON **out, struct err *e) {
  return json_parse_bounded(s, n, flags, 0, out, e);
}

static int parse_all(const char *s, size_t n, unsigned flags, size_t max_bytes, cJSON **out,
                     size_t *replaced, struct err *e);

int json_parse_bounded(const char *s, size_t n, unsigned flags, size_t max_bytes, cJSON **out,
                       struct err *e) {
  return parse_all(s, n, flags & ~JSON_REPLACE_INVALID, max_bytes, out, NULL, e);
}

cJSON *json_parse_lossy(const char *s, unsigned flags, size_t *replaced, struct err *e) {
  cJSON *v = NULL;
  size_t r = 0;
  parse_all(s, s ? strlen(s) : 0, flags | JSON_REPLACE_INVALID, 0, &v, &r, e);
  if (replaced) *replaced += r;
  return v;
}

static int parse_all(const char *s, size_t n, unsigned flags, size_t max_bytes, cJSON **out,
                     size_t *replaced, struct err *e) {
  struct parser p = {(const unsigned char *)s, n, 0, flags, e, NULL, {0}, max_bytes, 0, 0};
  p.str = &p.own_str;
  cJSON *v = NULL;
  int rc;
  if (!out) return err_set(e, ERR_INVALID, "invalid_json", "json_parse: no place for the result");
  *out = NULL;
  if (!s) return err_set(e, ERR_INVALID, "invalid_json", "invalid JSON at byte 0: no input");
  if (n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) {
    rc = fail(&p, 0, "byte order mark is not allowed");
    goto out;
  }
  skip_ws(&p);
  if (p.i >= n) {
    rc = fail(&p, p.i, n ? "no value (only whitespace)" : "no value (empty input)");
    goto out;
  }
  if ((rc = parse_value(&p, 0, &v))) goto out;
  skip_ws(&p);
  if (p.i < n) {
    rc = fail(&p, p.i, "unexpected content after the value");
    goto out;
  }
  *out = v;
  v = NULL;
  if (replaced) *replaced = p.replaced;
out:
  cJSON_Delete(v);
  sbuf_free(&p.own_str);
  return rc;
}

cJSON *json_parse_str(const char *s, unsigned flags, struct err *e) {
  cJSON *v = NULL;
  json_parse(s, s ? strlen(s) : 0, flags, &v, e);
  return v;
}

/* ------------------------------------------------------------ scanning */

/* json_scan: the grammar of parse_value, parse_object, parse_array and
 * parse_all above, step for step and with the same messages, handing each
 * value to a sink instead of building a tree. Nothing here is allocated
 * but the caller's scratch buffer, so a sink may leave by longjmp (a Lua
 * error) without leaking. */

static int scan_value(struct parser *p, int depth, json_sink sink, void *ud);

static int emit(json_sink sink, void *ud, int kind, const char *s, size_t n, double d,
                const char *digits) {
  if (!sink) return 0;
  struct json_event ev = {kind, s, n, d, digits};
  return sink(ud, &ev);
}

/* strtod's result for the valid unsigned number lexeme at s (n bytes)
 * without strtod, where one IEEE operation gives it exactly (Clinger's
 * fast path): at most 19 digits making an integer m < 2^53 (so an integer
 * json_parse keeps as text never comes this way), and a power
 * of ten 10^k with |k| <= 22 (exact in a double), so m * 10^k or m / 10^-k
 * is rounded once, as strtod rounds. Returns 0 where that does not hold. */
static int fast_number(const unsigned char *s, size_t n, double *out) {
  static const double p10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                               1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                               1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  uint64_t m = 0;
  int digits = 0, k = 0;
  size_t i = 0;
  for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
    if (++digits > 19) return 0;
    m = m * 10 + (uint64_t)(s[i] - '0');
  }
  if (i < n && s[i] == '.')
    for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++, k--) {
      if (++digits > 19) return 0;
      m = m * 10 + (uint64_t)(s[i] - '0');
    }
  if (i < n) { /* an exponent */
    i++;
    int sign = 1, x = 0;
    if (s[i] == '+' || s[i] == '-') sign = s[i++] == '-' ? -1 : 1;
    for (; i < n; i++) {
      if (x > 1000) return 0;
      x = x * 10 + (s[i] - '0');
    }
    k += sign * x;
  }
  if (m >= (1ULL << 53) || k < -22 || k > 22) return 0;
  *out = k < 0 ? (double)m / p10[-k] : (double)m * p10[k];
  return 1;
}

static int scan_number(struct parser *p, json_sink sink, void *ud) {
  const unsigned char *s = p->s;
  size_t start = p->i;
  int integer, rc = number_lexeme(p, &integer);
  if (rc) return rc;
  size_t len = p->i - start, neg = s[start] == '-';
  double fast;
  const char *text = (const char *)s + start;
  if (fast_number(s + start + neg, len - neg, &fast))
    return emit(sink, ud, JSON_EV_NUMBER, text, len, neg ? -fast : fast, NULL);
  char small[64], *lex = small;
  if (len >= sizeof small) { /* the scratch buffer: no string is being decoded now */
    p->str->len = 0;
    sbuf_append(p->str, (const char *)s + start, len);
    lex = p->str->s;
  } else {
    memcpy(small, s + start, len);
    small[len] = 0;
  }
  double d = c_strtod(lex, NULL);
  if (isinf(d)) return fail(p, start, "number out of range");
  return emit(sink, ud, JSON_EV_NUMBER, text, len, d, integer && fabs(d) >= TWO53 ? lex : NULL);
}

/* The string literal at p->i, handed to the sink in place when it holds
 * no escape (checked as parse_string checks it); else decoded by
 * parse_string into the scratch buffer. */
/* 1 for the bytes a string holds as they are: 0x20..0x7F but '"' and '\\'
 * (parse_string's test, one load). */
static const unsigned char plain_byte[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

static int scan_string(struct parser *p, int kind, json_sink sink, void *ud) {
  const unsigned char *s = p->s;
  size_t start = p->i, i = start + 1;
  for (;;) {
    while (i < p->n && plain_byte[s[i]]) i++;
    if (i < p->n && s[i] >= 0x80) {
      size_t len = util_utf8_len(s + i, p->n - i, NULL);
      if (len) {
        i += len;
        continue;
      }
    }
    break;
  }
  if (i < p->n && s[i] == '"') { /* no escape, no bad byte: the text itself */
    p->i = i + 1;
    return emit(sink, ud, kind, (const char *)s + start + 1, i - start - 1, 0, NULL);
  }
  int rc = parse_string(p); /* an escape, or an error it reports */
  return rc ? rc : emit(sink, ud, kind, p->str->s, p->str->len, 0, NULL);
}

static int scan_literal(struct parser *p, const char *word, int kind, json_sink sink, void *ud) {
  size_t start = p->i, len = strlen(word);
  for (size_t k = 0; k < len; k++, p->i++) {
    if (p->i >= p->n) return fail(p, p->i, "unexpected end of input in '%s'", word);
    if (p->s[p->i] != (unsigned char)word[k])
      return fail(p, start, "invalid literal (expected '%s')", word);
  }
  return emit(sink, ud, kind, NULL, 0, 0, NULL);
}

static int scan_object(struct parser *p, int depth, json_sink sink, void *ud) {
  int rc = emit(sink, ud, JSON_EV_OBJECT, NULL, 0, 0, NULL);
  if (rc) return rc;
  p->i++; /* '{' */
  skip_ws(p);
  if (p->i < p->n && p->s[p->i] == '}') {
    p->i++;
    return emit(sink, ud, JSON_EV_END, NULL, 0, 0, NULL);
  }
  for (int first = 1;; first = 0) {
    skip_ws(p);
    if (p->i >= p->n || p->s[p->i] != '"')
      return unexpected(p, first ? "a key (a string) or '}'" : "a key (a string)");
    /* the key goes to the sink before the ':' is checked: a sink sees
     * nothing it would not see of a valid text, since an error ends all */
    if ((rc = scan_string(p, JSON_EV_KEY, sink, ud))) return rc;
    skip_ws(p);
    if (p->i >= p->n || p->s[p->i] != ':') return unexpected(p, "':' after a key");
    p->i++;
    if ((rc = scan_value(p, depth, sink, ud))) return rc;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ',') {
      p->i++;
      continue;
    }
    if (p->i < p->n && p->s[p->i] == '}') {
      p->i++;
      return emit(sink, ud, JSON_EV_END, NULL, 0, 0, NULL);
    }
    return unexpected(p, "',' or '}' in an object");
  }
}

static int scan_array(struct parser *p, int depth, json_sink sink, void *ud) {
  int rc = emit(sink, ud, JSON_EV_ARRAY, NULL, 0, 0, NULL);
  if (rc) return rc;
  p->i++; /* '[' */
  skip_ws(p);
  if (p->i < p->n && p->s[p->i] == ']') {
    p->i++;
    return emit(sink, ud, JSON_EV_END, NULL, 0, 0, NULL);
  }
  for (;;) {
    if ((rc = scan_value(p, depth, sink, ud))) return rc;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ',') {
      p->i++;
      continue;
    }
    if (p->i < p->n && p->s[p->i] == ']') {
      p->i++;
      return emit(sink, ud, JSON_EV_END, NULL, 0, 0, NULL);
    }
    return unexpected(p, "',' or ']' in an array");
  }
}

static int scan_value(struct parser *p, int depth, json_sink sink, void *ud) {
  skip_ws(p);
  if (p->i >= p->n) return unexpected(p, "a value");
  switch (p->s[p->i]) {
    case '{':
    case '[':
      if (depth >= JSON_PARSE_MAX_DEPTH)
        return fail(p, p->i, "nested deeper than %d levels", JSON_PARSE_MAX_DEPTH);
      return p->s[p->i] == '{' ? scan_object(p, depth + 1, sink, ud)
                               : scan_array(p, depth + 1, sink, ud);
    case '"': return scan_string(p, JSON_EV_STRING, sink, ud);
    case 't': return scan_literal(p, "true", JSON_EV_TRUE, sink, ud);
    case 'f': return scan_literal(p, "false", JSON_EV_FALSE, sink, ud);
    case 'n': return scan_literal(p, "null", JSON_EV_NULL, sink, ud);
    default:
      if (p->s[p->i] == '-' || (p->s[p->i] >= '0' && p->s[p->i] <= '9'))
        return scan_number(p, sink, ud);
      return unexpected(p, "a value");
  }
}

int json_scan(const char *s, size_t n, json_sink sink, void *ud, struct sbuf *scratch,
              struct err *e) {
  struct parser p = {(const unsigned char *)s, n, 0, 0, e, NULL, {0}, 0, 0, 0};
  p.str = scratch ? scratch : &p.own_str;
  int rc;
  if (!s) return err_set(e, ERR_INVALID, "invalid_json", "invalid JSON at byte 0: no input");
  if (n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) {
    rc = fail(&p, 0, "byte order mark is not allowed");
    goto out;
  }
  skip_ws(&p);
  if (p.i >= n) {
    rc = fail(&p, p.i, n ? "no value (only whitespace)" : "no value (empty input)");
    goto out;
  }
  if ((rc = scan_value(&p, 0, sink, ud))) goto out;
  skip_ws(&p);
  if (p.i < n) rc = fail(&p, p.i, "unexpected content after the value");
out:
  sbuf_free(&p.own_str);
  return rc;
}

/* json_reprint: json_scan's events printed as put_value prints the tree
 * json_parse would build of them. A key repeated in one object is found
 * against the keys of that object so far (keys, one [length, bytes] entry
 * each); an object with more keys than REPRINT_KEYS goes the way of the
 * tree instead (a linear check would be quadratic there). */
enum { REPRINT_DUP = 1, REPRINT_TREE = 2, REPRINT_KEYS = 16 };
struct reprint {
  struct jout o;
  bool comma;    /* a value came before in the open container */
  unsigned flags;
  int depth;
  /* the keys of the open objects: [length, bytes] entries, on the stack
   * (keys longer than it holds go the tree's way, as do many keys) */
  char keys[1024];
  size_t nkeybytes; /* of keys in use */
  /* per open container: an object's first key entry in keys (SIZE_MAX:
   * an array) and its key count */
  size_t key_at[JSON_PARSE_MAX_DEPTH + 1];
  unsigned char nkeys[JSON_PARSE_MAX_DEPTH + 1];
};

static int reprint_key(struct reprint *r, const char *k, size_t n) {
  int d = r->depth - 1;
  if (r->nkeys[d] == REPRINT_KEYS) return REPRINT_TREE;
  for (size_t at = r->key_at[d]; at < r->nkeybytes;) {
    size_t len;
    memcpy(&len, r->keys + at, sizeof len);
    /* a repeated key: refused, or (without the flag) one member in the
     * tree, the last value at the first one's place: the tree's way */
    if (len == n && !memcmp(r->keys + at + sizeof len, k, n))
      return r->flags & JSON_NO_DUPLICATES ? REPRINT_DUP : REPRINT_TREE;
    at += sizeof len + len;
  }
  if (sizeof r->keys - r->nkeybytes < sizeof n + n) return REPRINT_TREE;
  memcpy(r->keys + r->nkeybytes, &n, sizeof n);
  memcpy(r->keys + r->nkeybytes + sizeof n, k, n);
  r->nkeybytes += sizeof n + n;
  r->nkeys[d]++;
  if (r->comma) out_ch(&r->o, ',');
  out_ch(&r->o, '"');
  put_chars(&r->o, (const unsigned char *)k, n);
  out_put(&r->o, "\":", 2);
  r->comma = false;
  return 0;
}

static int reprint_sink(void *ud, const struct json_event *ev) {
  struct reprint *r = ud;
  if (ev->kind == JSON_EV_KEY) return reprint_key(r, ev->s, ev->n);
  if (ev->kind == JSON_EV_END) {
    r->depth--;
    if (r->key_at[r->depth] != SIZE_MAX) {
      out_ch(&r->o, '}');
      r->nkeybytes = r->key_at[r->depth];
    } else {
      out_ch(&r->o, ']');
    }
    r->comma = true;
    return 0;
  }
  if (r->comma) out_ch(&r->o, ',');
  r->comma = true;
  switch (ev->kind) {
    case JSON_EV_NULL: out_put(&r->o, "null", 4); break;
    case JSON_EV_TRUE: out_put(&r->o, "true", 4); break;
    case JSON_EV_FALSE: out_put(&r->o, "false", 5); break;
    case JSON_EV_NUMBER:
      if (ev->digits) { /* the text json_parse keeps, which put_number prints */
        out_put(&r->o, ev->digits, strlen(ev->digits));
      } else {
        cJSON v = {0};
        v.type = cJSON_Number;
        v.valuedouble = ev->d;
        put_number(&r->o, &v);
      }
      break;
    case JSON_EV_STRING:
      out_ch(&r->o, '"');
      put_chars(&r->o, (const unsigned char *)ev->s, ev->n);
      out_ch(&r->o, '"');
      break;
    default: /* JSON_EV_OBJECT, JSON_EV_ARRAY: json_scan's depth bound is json_parse's */
      out_ch(&r->o, ev->kind == JSON_EV_OBJECT ? '{' : '[');
      r->key_at[r->depth] = ev->kind == JSON_EV_OBJECT ? r->nkeybytes : SIZE_MAX;
      r->nkeys[r->depth] = 0;
      r->depth++;
      r->comma = false;
  }
  return 0;
}

int json_reprint(struct sbuf *b, const char *s, size_t n, unsigned flags) {
  size_t at = b->len;
  int rc = REPRINT_TREE;
  if (!(flags & ~JSON_NO_DUPLICATES)) {
    struct reprint rs, *r = &rs; /* 5 KiB of stack, no allocation for the usual text */
    r->o.b = b, r->o.h = NULL, r->o.n = 0;
    r->comma = false, r->flags = flags, r->depth = 0;
    r->nkeybytes = 0;
    struct sbuf scratch = {0};
    rc = json_scan(s, n, reprint_sink, r, &scratch, NULL);
    if (!rc) out_flush(&r->o);
    sbuf_free(&scratch);
  }
  if (rc == REPRINT_TREE) { /* the tree's way, from the start */
    b->len = at;
    if (b->s) b->s[at] = 0;
    cJSON *v = NULL;
    if ((rc = json_parse(s, n, flags, &v, NULL))) rc = -1;
    else print_into(b, v, 0);
    cJSON_Delete(v);
  }
  if (rc) {
    b->len = at;
    if (b->s) b->s[at] = 0;
    return -1;
  }
  return 0;
}

static int first_kind(void *ud, const struct json_event *ev) {
  int *kind = ud;
  if (*kind < 0) *kind = ev->kind;
  return 0;
}

int json_kind(const char *s, size_t n, struct err *e) {
  int kind = -1;
  int rc = json_scan(s, n, first_kind, &kind, NULL, e);
  return rc ? rc : kind;
}
