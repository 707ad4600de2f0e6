#define _GNU_SOURCE 1
/* schema_regex.c - ECMA-262 patterns for `pattern` and `patternProperties`,
 * run by POSIX <regex.h>.
 *
 * The ECMA text is translated to a POSIX extended regular expression:
 * \d \w \s and their negations become bracket expressions, "." excludes
 * line terminators as ECMA's does, (?:...) and (?<name>...) become plain
 * groups, \uXXXX and \xHH become the character's UTF-8 bytes, and escaped
 * punctuation stays literal. What ERE cannot express with the same meaning
 * is refused (why names it) so the schema fails when it is checked, never
 * later: lookahead and lookbehind, backreferences, lazy quantifiers, \b,
 * \B, \p{..}, \c and \0 are among those. Compiling and matching run in the
 * C.UTF-8 locale (thread-locally, with uselocale), so "." and bracket
 * expressions see code points, not bytes.
 */
#include <ctype.h>
#include <locale.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "schema_impl.h"
#include "util.h"

static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;
static locale_t utf8_locale;

static void utf8_init(void) {
  utf8_locale = newlocale(LC_ALL_MASK, "C.UTF-8", (locale_t)0);
  if (!utf8_locale) utf8_locale = newlocale(LC_ALL_MASK, "C.utf8", (locale_t)0);
}

static void put_utf8(struct sbuf *b, unsigned cp) {
  char u[4];
  size_t n;
  if (cp < 0x80)
    u[0] = (char)cp, n = 1;
  else if (cp < 0x800)
    u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
  else if (cp < 0x10000)
    u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
    u[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
  else
    u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
  sbuf_append(b, u, n);
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Reads n hex digits at s; -1 when they are not there. */
static long hexn(const char *s, int n) {
  long v = 0;
  for (int i = 0; i < n; i++) {
    int h = hexval(s[i]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

/* The members of \d \w \s, as bracket-expression contents. */
#define CLS_D "0-9"
#define CLS_W "A-Za-z0-9_"
/* U+2000..U+200A listed one by one: glibc's C.UTF-8 refuses multibyte ranges. */
#define CLS_S                                                                                    \
  " \t\n\v\f\r\xC2\xA0\xE1\x9A\x80\xE2\x80\x80\xE2\x80\x81\xE2\x80\x82\xE2\x80\x83\xE2\x80\x84"  \
  "\xE2\x80\x85\xE2\x80\x86\xE2\x80\x87\xE2\x80\x88\xE2\x80\x89\xE2\x80\x8A\xE2\x80\xA8\xE2\x80" \
  "\xA9"                                                                                         \
  "\xE2\x80\xAF\xE2\x81\x9F\xE3\x80\x80\xEF\xBB\xBF"
#define CLS_S_ASCII " \t\n\v\f\r"

static const char *class_of(char c, int utf8) {
  switch (c) {
    case 'd':
    case 'D':
      return CLS_D;
    case 'w':
    case 'W':
      return CLS_W;
    case 's':
    case 'S':
      return utf8 ? CLS_S : CLS_S_ASCII;
  }
  return NULL;
}

/* \p{Name} at s (s points at 'p' or 'P'): the POSIX class for the few
 * Unicode properties glibc's C.UTF-8 classes match, with *len set to the
 * escape's length after the backslash; NULL when unsupported. */
static const char *property_class(const char *s, size_t *len) {
  static const struct {
    const char *name, *cls;
  } props[] = {
      {"L", "alpha"},  {"Letter", "alpha"},
      {"Lu", "upper"}, {"Uppercase_Letter", "upper"},
      {"Ll", "lower"}, {"Lowercase_Letter", "lower"},
  };
  if (s[1] != '{') return NULL;
  const char *end = strchr(s, '}');
  if (!end) return NULL;
  size_t n = (size_t)(end - s - 2);
  for (size_t i = 0; i < sizeof props / sizeof props[0]; i++)
    if (strlen(props[i].name) == n && !strncmp(props[i].name, s + 2, n)) {
      *len = (size_t)(end - s) + 1;
      return props[i].cls;
    }
  return NULL;
}

/* One character of a class or a literal: the code point of an escape or
 * of the (UTF-8) character at *p, advancing *p. Returns -1 with why set
 * for an escape ERE cannot express, -2 for a class escape (\d...). */
static long read_char(const char **p, int in_class, const char **why) {
  const unsigned char *s = (const unsigned char *)*p;
  if (*s != '\\') {
    unsigned cp = *s;
    int n = 1;
    if (cp >= 0xF0)
      cp &= 0x07, n = 4;
    else if (cp >= 0xE0)
      cp &= 0x0F, n = 3;
    else if (cp >= 0xC0)
      cp &= 0x1F, n = 2;
    int i = 1;
    for (; i < n && (s[i] & 0xC0) == 0x80; i++) cp = cp << 6 | (s[i] & 0x3F);
    *p += i; /* a truncated sequence stops at the next lead byte or the end */
    return cp;
  }
  char c = (char)s[1];
  *p += 2;
  switch (c) {
    case 0:
      *why = "a trailing backslash";
      return -1;
    case 'd':
    case 'D':
    case 'w':
    case 'W':
    case 's':
    case 'S':
      return -2;
    case 'n':
      return '\n';
    case 't':
      return '\t';
    case 'r':
      return '\r';
    case 'f':
      return '\f';
    case 'v':
      return '\v';
    case 'b':
      if (in_class) return '\b';
      *why = "\\b (word boundary) is not supported";
      return -1;
    case 'B':
      *why = "\\B (non-word boundary) is not supported";
      return -1;
    case 'x': {
      long v = hexn(*p, 2);
      if (v < 0) {
        *why = "\\x needs two hex digits";
        return -1;
      }
      *p += 2;
      return v;
    }
    case 'u': {
      long v = hexn(*p, 4);
      if (v < 0) {
        *why = "\\u needs four hex digits (\\u{...} is not supported)";
        return -1;
      }
      if (v >= 0xD800 && v <= 0xDFFF) {
        *why = "\\u surrogate escapes are not supported";
        return -1;
      }
      *p += 4;
      return v;
    }
    case 'c':
      if (!isalpha((unsigned char)**p)) {
        *why = "\\c needs a letter";
        return -1;
      }
      return (unsigned char)*(*p)++ % 32;
    case 'p':
    case 'P':
      *why = "this \\p{...} property escape is not supported (only L, Letter, Lu, Ll)";
      return -1;
    case 'k':
      *why = "named backreferences are not supported";
      return -1;
    case '0':
      *why = "\\0 is not supported";
      return -1;
    default:
      if (c >= '1' && c <= '9') {
        *why = "backreferences are not supported";
        return -1;
      }
      if (isalnum((unsigned char)c) || (unsigned char)c >= 0x80) {
        *why =
            "an unknown escape (ECMA-262 with the u flag allows only syntax characters after \\)";
        return -1;
      }
      return (unsigned char)c; /* identity escape: \. \/ \- \] ... */
  }
}

/* Emits a literal character outside a bracket expression. */
static void put_literal(struct sbuf *b, long cp) {
  if (cp < 0x80 && strchr(".[]()*+?{}|^$\\", (int)cp) && cp) {
    char esc[2] = {'\\', (char)cp};
    sbuf_append(b, esc, 2);
  } else {
    put_utf8(b, (unsigned)cp);
  }
}

/* Translates [ ... ] starting after '['; *p ends after ']'. ECMA's []
 * matches nothing and [^] anything. */
static int put_class(struct sbuf *b, const char **p, int utf8, const char **why) {
  const char *s = *p;
  int neg = 0;
  if (*s == '^') neg = 1, s++;
  if (*s == ']') { /* [^] matches anything; [] (nothing) has no ERE form */
    *p = s + 1;
    sbuf_puts(b, neg ? "(.|\n)" : "(x^)"); /* "^" is an anchor anywhere in ERE: x^ never matches */
    return 0;
  }
  struct sbuf body = {0};
  int has_rb = 0, has_dash = 0, has_caret = 0, has_lb = 0, nothing_else = 1;
  const char *neg_class = NULL;
  int nitems = 0;
  while (*s && *s != ']') {
    size_t plen;
    const char *pc = s[0] == '\\' && s[1] == 'p' && utf8 ? property_class(s + 1, &plen) : NULL;
    if (pc) {
      sbuf_printf(&body, "[:%s:]", pc);
      s += 1 + plen;
      nitems++;
      nothing_else = 0;
      continue;
    }
    if (s[0] == '\\' && strchr("DWS", s[1]) && s[1]) {
      neg_class = class_of(s[1], utf8);
      s += 2;
      nitems++;
      continue;
    }
    int cls = s[0] == '\\' && s[1] && strchr("dws", s[1]);
    long lo = read_char(&s, 1, why);
    if (lo == -1) goto bad;
    nitems++;
    if (lo == -2 || cls) {
      sbuf_puts(&body, class_of(s[-1], utf8));
      nothing_else = 0;
      continue;
    }
    if (s[0] == '-' && s[1] && s[1] != ']') {
      const char *q = s + 1;
      if (q[0] == '\\' && q[1] && strchr("dDwWsS", q[1])) { /* [a-\d]: a, -, \d */
        goto single;
      }
      long hi = read_char(&q, 1, why);
      if (hi < 0) goto bad;
      if (hi < lo) {
        *why = "a class range out of order";
        goto bad;
      }
      if ((lo < 0x80 && strchr("]^-[", (int)lo)) || (hi < 0x80 && strchr("]^-[", (int)hi))) {
        *why = "a class range starting or ending with ] ^ - [ is not supported";
        goto bad;
      }
      if (hi < 0x80) {
        put_utf8(&body, (unsigned)lo);
        sbuf_puts(&body, "-");
        put_utf8(&body, (unsigned)hi);
      } else if (hi - lo <= 512) { /* glibc refuses multibyte ranges: list them */
        for (long cp = lo; cp <= hi; cp++)
          if (cp && !(cp < 0x80 && strchr("]^-[", (int)cp)))
            put_utf8(&body, (unsigned)cp);
          else if (cp == ']')
            has_rb = 1;
          else if (cp == '^')
            has_caret = 1;
          else if (cp == '-')
            has_dash = 1;
          else if (cp == '[')
            has_lb = 1;
      } else {
        *why = "a class range of more than 512 non-ASCII characters is not supported";
        goto bad;
      }
      nothing_else = 0;
      s = q;
      continue;
    }
  single:
    if (lo == ']')
      has_rb = 1;
    else if (lo == '-')
      has_dash = 1;
    else if (lo == '^')
      has_caret = 1;
    else if (lo == '[')
      has_lb = 1;
    else if (lo == 0) {
      *why = "a NUL in a class";
      goto bad;
    } else {
      put_utf8(&body, (unsigned)lo);
      nothing_else = 0;
    }
  }
  if (*s != ']') {
    *why = "an unterminated character class";
    goto bad;
  }
  *p = s + 1;
  if (neg_class) {
    if (nitems != 1 || neg) {
      *why = "\\D \\W \\S inside a larger class are not supported";
      goto bad;
    }
    sbuf_printf(b, "[^%s]", neg_class);
    sbuf_free(&body);
    return 0;
  }
  if (nothing_else && has_caret && !has_rb && !has_lb && !neg) {
    sbuf_puts(b, has_dash ? "[-^]" : "\\^");
    sbuf_free(&body);
    return 0;
  }
  sbuf_puts(b, neg ? "[^" : "[");
  if (has_rb) sbuf_puts(b, "]");
  if (body.s) sbuf_puts(b, body.s);
  if (has_lb) sbuf_puts(b, "[");
  if (has_caret) sbuf_puts(b, "^");
  if (has_dash) sbuf_puts(b, "-");
  sbuf_puts(b, "]");
  sbuf_free(&body);
  return 0;
bad:
  sbuf_free(&body);
  return -1;
}

/* "{n}", "{n,}", "{n,m}" at s: its length, or 0 when s is a literal brace. */
static size_t quantifier_len(const char *s) {
  size_t i = 1;
  if (!(s[i] >= '0' && s[i] <= '9')) return 0;
  while (s[i] >= '0' && s[i] <= '9') i++;
  if (s[i] == ',') {
    i++;
    while (s[i] >= '0' && s[i] <= '9') i++;
  }
  return s[i] == '}' ? i + 1 : 0;
}

static int translate(const char *s, struct sbuf *b, int utf8, const char **why) {
  int atom = 0; /* the last thing emitted can take a quantifier */
  while (*s) {
    char c = *s;
    int was_atom = atom;
    atom = 1;
    if (c == '\\') {
      size_t plen;
      const char *pc = (s[1] == 'p' || s[1] == 'P') && utf8 ? property_class(s + 1, &plen) : NULL;
      if (pc) {
        sbuf_printf(b, "[%s[:%s:]]", s[1] == 'P' ? "^" : "", pc);
        s += 1 + plen;
        continue;
      }
      if (s[1] && strchr("dDwWsS", s[1])) {
        sbuf_printf(b, "[%s%s]", strchr("DWS", s[1]) ? "^" : "", class_of(s[1], utf8));
        s += 2;
        continue;
      }
      long cp = read_char(&s, 0, why);
      if (cp < 0) return -1;
      if (!cp) {
        *why = "a NUL character (\\u0000) is not supported";
        return -1;
      }
      put_literal(b, cp);
      continue;
    }
    if (c == '[') {
      s++;
      if (put_class(b, &s, utf8, why)) return -1;
      continue;
    }
    if (c == '(') {
      if (s[1] == '?') {
        if (s[2] == ':') {
          s += 3;
        } else if (s[2] == '<' && s[3] != '=' && s[3] != '!') {
          const char *q = strchr(s, '>');
          if (!q) {
            *why = "an unterminated group name";
            return -1;
          }
          s = q + 1;
        } else {
          *why = s[2] == '=' || s[2] == '!' || s[2] == '<'
                     ? "lookahead and lookbehind are not supported"
                     : "inline flags (?...) are not supported";
          return -1;
        }
      } else {
        s++;
      }
      sbuf_puts(b, "(");
      atom = 0;
      continue;
    }
    if ((c == '*' || c == '+' || c == '?' || (c == '{' && quantifier_len(s))) && !was_atom) {
      *why = "a quantifier with nothing to repeat";
      return -1;
    }
    if (c == '*' || c == '+' || c == '?') {
      atom = 0;
      char q[2] = {c, 0};
      sbuf_puts(b, q);
      s++;
      if (*s == '?') {
        *why = "lazy quantifiers (*? +? ?? {n,m}?) are not supported";
        return -1;
      }
      continue;
    }
    if (c == '{') {
      size_t n = quantifier_len(s);
      if (!n) {
        sbuf_puts(b, "\\{");
        s++;
        continue;
      }
      sbuf_append(b, s, n);
      s += n;
      atom = 0;
      if (*s == '?') {
        *why = "lazy quantifiers (*? +? ?? {n,m}?) are not supported";
        return -1;
      }
      continue;
    }
    if (c == '}') {
      sbuf_puts(b, "\\}");
      s++;
      continue;
    }
    if (c == '.') {
      sbuf_puts(b, utf8 ? "[^\n\r\xE2\x80\xA8\xE2\x80\xA9]" : "[^\n\r]");
      s++;
      continue;
    }
    if (c == '|' || c == '^' || c == '$') atom = 0;
    sbuf_append(b, s, 1); /* ) | ^ $ ] and ordinary bytes, UTF-8 included */
    s++;
  }
  return 0;
}

/* glibc's regcomp expands counted repetition: "(((a{1000}){1000}){1000})"
 * takes seconds and gigabytes before failing, and matching an expanded
 * {0,m} costs about m^3 per input character ("^[A-Za-z0-9+/]{0,1024}$"
 * took 10 s on 1000 characters; at {0,256}, 0.2 s). Estimates the
 * expanded size (each atom 1, a group the sum of its parts, x{n,m}
 * multiplies x by the larger bound) and refuses, before regcomp sees it,
 * a pattern whose counted repetitions add more than MAX_REPEAT elements
 * or that is larger than MAX_EXPANSION in all. */
#define MAX_REPEAT 256
#define MAX_EXPANSION 20000
#define REGEX_BUDGET 2e7 /* expanded pattern size x input bytes: well under a second */
#define MAX_GROUPS 64

static int size_ok(const char *s, long *cost, const char **why) {
  long group[MAX_GROUPS + 1] = {0}, last = 0, extra = 0;
  int depth = 0;
  while (*s) {
    char c = *s;
    long k = 0;
    if (c == '(') {
      if (++depth > MAX_GROUPS) {
        *why = "groups nested deeper than 64";
        return -1;
      }
      group[depth] = 0, last = 0, s++;
      continue;
    }
    if (c == ')') {
      if (!depth) {
        *why = "an unmatched )";
        return -1;
      }
      last = group[depth--];
      group[depth] += last, s++;
      continue;
    }
    if (c == '*' || c == '+' || c == '?') {
      s++;
      continue; /* unbounded, but not expanded */
    }
    if (c == '{' && quantifier_len(s)) {
      size_t n = quantifier_len(s);
      for (size_t i = 1; i < n; i++) {
        if (s[i] == ',')
          k = 0;
        else if (s[i] >= '0' && s[i] <= '9' && k < 1000000)
          k = k * 10 + (s[i] - '0');
      }
      long lo = atol(s + 1);
      if (lo > k) k = lo;
      s += n;
      if (k > 1 && last > 0) {
        if (last > MAX_EXPANSION / k) goto big;
        group[depth] += last * (k - 1);
        extra += last * (k - 1);
        last *= k;
        if (extra > MAX_REPEAT) {
          *why = "its counted repetitions ({n,m}) add more than 256 elements (use * or + with "
                 "maxLength)";
          return -1;
        }
      }
      if (group[depth] > MAX_EXPANSION) goto big;
      continue;
    }
    if (c == '|' || c == '^' || c == '$') {
      last = 0, s++;
      continue;
    }
    if (c == '[') { /* one atom up to the closing bracket */
      s++;
      if (*s == '^') s++;
      while (*s && *s != ']') s += s[0] == '\\' && s[1] ? 2 : 1;
      if (*s) s++;
    } else {
      s += c == '\\' && s[1] ? 2 : 1;
    }
    last = 1;
    if (++group[depth] > MAX_EXPANSION) goto big;
  }
  if (depth) {
    *why = "an unterminated group";
    return -1;
  }
  *cost = group[0] + 1;
  return 0;
big:
  *why = "its repetition counts expand it beyond 20000 elements";
  return -1;
}

int schema__regex_compile(const char *ecma, struct sregex *r, const char **why) {
  pthread_once(&utf8_once, utf8_init);
  struct sbuf b = {0};
  *why = NULL;
  long cost = 0;
  if (size_ok(ecma, &cost, why)) return -1;
  /* An unanchored search, done as one anchored pass: glibc would retry
   * from every position, quadratic in the input ("[a-z]+@" took a minute
   * on 100 KB). Nothing can follow the prefix but the pattern, so ^ and $
   * inside keep their meaning. */
  sbuf_puts(&b, "^([^\n]|\n)*(");
  if (translate(ecma, &b, utf8_locale != 0, why)) {
    sbuf_free(&b);
    return -1;
  }
  sbuf_puts(&b, ")");
  locale_t old = utf8_locale ? uselocale(utf8_locale) : (locale_t)0;
  int rc = regcomp(&r->re, b.s ? b.s : "", REG_EXTENDED | REG_NOSUB);
  if (utf8_locale) uselocale(old);
  sbuf_free(&b);
  if (rc) {
    *why = "it is not a valid regular expression";
    return -1;
  }
  r->src = ecma;
  r->cost = cost;
  return 0;
}

int schema__regex_search(const struct sregex *r, const char *s) {
  /* glibc simulates the automaton state by state: the work grows with the
   * expanded pattern times the input. Past the budget, refuse to decide
   * rather than stall the host (a model chooses the input). */
  if ((double)r->cost * (double)strlen(s) > REGEX_BUDGET) return -1;
  /* The host's U+0000 is C0 80, which the UTF-8 matcher would see as two
   * invalid bytes: match a copy holding a real zero byte instead (glibc's
   * REG_STARTEND takes the length, so the zero does not end the string). */
  char *copy = NULL;
  size_t n = strlen(s);
  if (strstr(s, "\xC0\x80")) {
    copy = xmalloc(n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
      if ((unsigned char)s[i] == 0xC0 && (unsigned char)s[i + 1] == 0x80)
        copy[o++] = 0, i++;
      else
        copy[o++] = s[i];
    }
    copy[o] = 0;
    n = o;
  }
  regmatch_t m = {.rm_so = 0, .rm_eo = (regoff_t)n};
  locale_t old = utf8_locale ? uselocale(utf8_locale) : (locale_t)0;
  int rc = regexec(&r->re, copy ? copy : s, 1, &m, REG_STARTEND);
  if (utf8_locale) uselocale(old);
  free(copy);
  return rc == 0;
}
