/* llm_fast_impl.h - the checking reader llm_fast.c (OpenAI) and
 * llm_fast_anthropic.c share; no one else includes it. See llm_fast.c for
 * what it promises: each function here checks what it reads as strictly
 * as json_parse would and says false (or NULL, or OBJ_BAD) for anything
 * the full parse would refuse, change or read otherwise. */
#ifndef LUAGENT_LLM_FAST_IMPL_H
#define LUAGENT_LLM_FAST_IMPL_H

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "llm.h"
#include "util.h"

#define FAST_MAX_DEPTH 64

/* ---- checking ----------------------------------------------------------- */

/* JSON's whitespace, as json_parse skips it. */
static const unsigned char space[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, /* \t \n \r */
    [' '] = 1,
};

static inline const unsigned char *ws(const unsigned char *p) {
  while (space[*p]) p++;
  return p;
}

/* The text being read: it ends at end, where a NUL stops every scan. */
struct rd {
  const unsigned char *end;
};

/* Whether the literal w (n bytes) is at p, reading nothing past the end. */
static inline bool is_lit(const struct rd *r, const unsigned char *p, const char *w, size_t n) {
  return (size_t)(r->end - p) >= n && !memcmp(p, w, n);
}

/* Past the string literal whose quote is at p, checked; NULL for anything
 * json_parse would refuse or change (invalid UTF-8 is replaced there, so
 * it counts as unusual). *esc is set when it holds an escape. */
static inline const unsigned char *chk_string(const struct rd *r, const unsigned char *p, bool *esc) {
  p++;
  for (;;) {
    while (json_str_plain[p[0]] && json_str_plain[p[1]] && json_str_plain[p[2]] &&
           json_str_plain[p[3]])
      p += 4;
    while (json_str_plain[*p]) p++;
    unsigned char c = *p;
    if (c == '"') return p + 1;
    if (c == '\\') {
      *esc = true;
      unsigned char n = p[1];
      if (n == '"' || n == '\\' || n == '/' || n == 'b' || n == 'f' || n == 'n' || n == 'r' ||
          n == 't') {
        p += 2;
        continue;
      }
      unsigned cp;
      size_t used;
      if (json_unescape(p, (size_t)(r->end - p), &cp, &used) != JSON_ESC_OK) return NULL;
      p += used;
      continue;
    }
    if (c < 0x80) return NULL; /* a control byte, or the end */
    size_t len = util_utf8_len(p, (size_t)(r->end - p), NULL);
    if (!len) return NULL;
    p += len;
  }
}

/* Past a number of the RFC grammar that the parser reads exactly (no
 * exponent, at most 15 digits), or NULL. *integer says whether it has no
 * fraction, and *ival is its value then. */
static inline const unsigned char *chk_number(const unsigned char *p, bool *integer, long long *ival) {
  bool neg = false;
  int digits = 0;
  long long v = 0;
  if (*p == '-') neg = true, p++;
  if (*p == '0') {
    p++, digits++;
  } else if (*p >= '1' && *p <= '9') {
    while (*p >= '0' && *p <= '9') {
      if (digits < 16) v = v * 10 + (*p - '0'); /* past 15 digits it is refused anyway */
      p++, digits++;
    }
  } else {
    return NULL;
  }
  *integer = true;
  if (*p == '.') {
    p++;
    *integer = false;
    if (*p < '0' || *p > '9') return NULL;
    while (*p >= '0' && *p <= '9') p++, digits++;
  }
  if (*p == 'e' || *p == 'E' || digits > 15) return NULL;
  if (*p >= '0' && *p <= '9') return NULL; /* "01" */
  *ival = neg ? -v : v;
  return p;
}

/* Past the value at p (whitespace before it skipped), checked, or NULL.
 * depth: the containers around it. One loop for any nesting: a stack of
 * what closes each open container. */
static inline const unsigned char *skip_value(const struct rd *r, const unsigned char *p, int depth) {
  unsigned char close[FAST_MAX_DEPTH];
  int d = 0;
  bool integer, esc;
  long long iv;
value:
  p = ws(p);
  switch (*p) {
    case '"':
      if (!(p = chk_string(r, p, &esc))) return NULL;
      break;
    case '{':
    case '[':
      if (depth + d >= FAST_MAX_DEPTH) return NULL;
      close[d++] = *p == '{' ? '}' : ']';
      p = ws(p + 1);
      if (*p == close[d - 1]) {
        p++, d--;
        break;
      }
      if (close[d - 1] == '}') goto key;
      goto value;
    case 't':
      if (!is_lit(r, p, "true", 4)) return NULL;
      p += 4;
      break;
    case 'f':
      if (!is_lit(r, p, "false", 5)) return NULL;
      p += 5;
      break;
    case 'n':
      if (!is_lit(r, p, "null", 4)) return NULL;
      p += 4;
      break;
    default:
      if (!(p = chk_number(p, &integer, &iv))) return NULL;
  }
  /* a value ended */
  while (d) {
    p = ws(p);
    if (*p == ',') {
      p = ws(p + 1);
      if (close[d - 1] == '}') goto key;
      goto value;
    }
    if (*p != close[d - 1]) return NULL;
    p++, d--;
  }
  return p;
key:
  if (*p != '"' || !(p = chk_string(r, p, &esc))) return NULL;
  p = ws(p);
  if (*p != ':') return NULL;
  p++;
  goto value;
}

/* ---- objects ------------------------------------------------------------ */

/* The members of one object a reader wants (at most 32). */
struct key {
  const char *s;
  unsigned char n;
};
struct keys {
  const struct key *k;
  int n;
};
#define K(lit) {lit, sizeof lit - 1}
#define KEYS(name, ...)                                     \
  static const struct key name##_k[] = {__VA_ARGS__};       \
  static const struct keys name = {name##_k, (int)(sizeof name##_k / sizeof *name##_k)}

static inline unsigned char lower(unsigned char c) {
  return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

/* Which of ks the key [k, k+n) is: its index, -1 for none, -2 for one
 * that matches only ignoring case (cJSON would find it: unusual). */
/* Whether a[0..n) equals b[0..n): eight bytes at a time, the last step
 * (and a short key: two of four, or of two) overlapping the one before,
 * so no byte loop and no read outside [0, n). */
static inline bool same_bytes(const unsigned char *a, const unsigned char *b, size_t n) {
  uint64_t x, y;
  uint32_t u, v;
  uint16_t h, k;
  if (n >= 8) {
    for (; n > 8; a += 8, b += 8, n -= 8) {
      memcpy(&x, a, 8), memcpy(&y, b, 8);
      if (x != y) return false;
    }
    memcpy(&x, a + n - 8, 8), memcpy(&y, b + n - 8, 8);
    return x == y;
  }
  if (n >= 4) {
    memcpy(&u, a, 4), memcpy(&v, b, 4);
    if (u != v) return false;
    memcpy(&u, a + n - 4, 4), memcpy(&v, b + n - 4, 4);
    return u == v;
  }
  if (n >= 2) {
    memcpy(&h, a, 2), memcpy(&k, b, 2);
    if (h != k) return false;
    memcpy(&h, a + n - 2, 2), memcpy(&k, b + n - 2, 2);
    return h == k;
  }
  return !n || *a == *b;
}

static inline int key_index(const struct keys *ks, const unsigned char *k, size_t n) {
  for (int i = 0; i < ks->n; i++) {
    const unsigned char *w = (const unsigned char *)ks->k[i].s;
    /* the wanted keys are lower case: most keys fail on the first byte */
    if (ks->k[i].n != n || lower(k[0]) != w[0]) continue;
    if (same_bytes(k, w, n)) return i;
    size_t j = 0;
    while (j < n && lower(k[j]) == w[j]) j++;
    if (j == n) return -2; /* the same but for case */
  }
  return -1;
}

/* Walking one object: start with it.p just past its '{' and first set.
 * obj_next skips (and checks) the members nobody wants and stops at the
 * value of the next wanted one, returning its index with *at on the value
 * (the caller reads it and sets it.p past it); OBJ_END past the '}', or
 * OBJ_BAD. A wanted member given twice is OBJ_BAD. */
struct obj_it {
  const unsigned char *p;
  bool first;
  unsigned seen;
  int depth; /* containers around the object's members */
};
enum { OBJ_END = -1, OBJ_BAD = -2 };

static inline __attribute__((always_inline)) int obj_next(const struct rd *r, struct obj_it *it,
                                                           const struct keys *ks) {
  for (;;) {
    const unsigned char *p = ws(it->p);
    if (*p == '}') {
      it->p = p + 1;
      return OBJ_END;
    }
    if (!it->first) {
      if (*p != ',') return OBJ_BAD;
      p = ws(p + 1);
    }
    it->first = false;
    if (*p != '"') return OBJ_BAD;
    /* a wanted key written as it is (the usual case): its bytes and the
     * closing quote, compared without scanning the key first; this is the
     * index key_index gives (the wanted keys differ even ignoring case) */
    const unsigned char *q = p + 1;
    size_t room = (size_t)(r->end - q);
    int i = -1;
    for (int j = 0; j < ks->n; j++) {
      size_t n = ks->k[j].n;
      if (q[0] == (unsigned char)ks->k[j].s[0] && room > n && q[n] == '"' &&
          same_bytes(q, (const unsigned char *)ks->k[j].s, n)) {
        i = j;
        q += n;
        break;
      }
    }
    if (i < 0) {
      while (json_str_plain[*q]) q++;
      if (*q != '"') { /* not a plain key: checked in full, and an escaped key */
        bool esc = false; /* may be a wanted one: the full parse */
        if (!(q = chk_string(r, p, &esc)) || esc) return OBJ_BAD;
        q--;
      }
      i = key_index(ks, p + 1, (size_t)(q - p) - 1);
    }
    q = ws(q + 1);
    if (*q != ':') return OBJ_BAD;
    q = ws(q + 1);
    if (i == -2) return OBJ_BAD;
    if (i >= 0) {
      if (it->seen & (1u << i)) return OBJ_BAD;
      it->seen |= 1u << i;
      it->p = q;
      return i;
    }
    if (*q == '"') { /* the common unwanted values, without a call */
      const unsigned char *e = q + 1;
      while (json_str_plain[*e]) e++;
      if (*e == '"') {
        it->p = e + 1;
        continue;
      }
    }
    if (!(it->p = skip_value(r, q, it->depth))) return OBJ_BAD;
  }
}

static inline bool obj_start(const unsigned char *p, int depth, struct obj_it *it) {
  if (*p != '{' || depth >= FAST_MAX_DEPTH) return false;
  it->p = p + 1;
  it->first = true;
  it->seen = 0;
  it->depth = depth + 1;
  return true;
}

/* ---- reading values ----------------------------------------------------- */

/* A string the wire reads: in place (p) or at off in the event's scratch
 * buffer (when it had escapes or needs its NUL). */
struct str {
  bool set; /* false: absent or null */
  bool copied;
  const char *p;
  size_t off, len;
};

static const char *str_ptr(const struct str *s, const struct sbuf *scratch) {
  return !s->set ? NULL : s->copied ? scratch->s + s->off : s->p;
}

/* Decodes the checked string literal [p, q) into scratch. */
static inline void decode(const unsigned char *p, const unsigned char *q, struct sbuf *scratch) {
  /* copied as it is, then decoded in place: no escape decodes longer than
   * it is written (\u0000 is two bytes of six, a pair four of twelve) */
  size_t at = scratch->len, n = (size_t)(q - p) - 2;
  sbuf_append(scratch, (const char *)p + 1, n);
  unsigned char *w = (unsigned char *)scratch->s + at, *rp = w, *end = w + n;
  while (rp < end) {
    unsigned char c = *rp;
    if (c != '\\') {
      *w++ = c, rp++;
      continue;
    }
    unsigned char e = rp[1], simple = e == '"' ? '"' : e == '\\' ? '\\' : e == '/' ? '/'
                                    : e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n'
                                    : e == 'r' ? '\r' : e == 't' ? '\t' : 0;
    if (simple) {
      *w++ = simple, rp += 2;
      continue;
    }
    unsigned cp;
    size_t used;
    json_unescape(rp, (size_t)(end - rp), &cp, &used); /* checked: it is OK */
    rp += used;
    if (cp == 0) { /* the host's convention for U+0000, as json_put_codepoint */
      *w++ = 0xC0, *w++ = 0x80;
    } else if (cp < 0x80) {
      *w++ = (unsigned char)cp;
    } else if (cp < 0x800) {
      *w++ = (unsigned char)(0xC0 | cp >> 6), *w++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *w++ = (unsigned char)(0xE0 | cp >> 12), *w++ = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
      *w++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else {
      *w++ = (unsigned char)(0xF0 | cp >> 18), *w++ = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
      *w++ = (unsigned char)(0x80 | (cp >> 6 & 0x3F)), *w++ = (unsigned char)(0x80 | (cp & 0x3F));
    }
  }
  scratch->len = (size_t)(w - (unsigned char *)scratch->s);
  scratch->s[scratch->len] = 0;
}

/* The string (or null) at *pp into out, *pp moved past it. nul: the
 * caller needs it NUL-terminated. False for any other value or bad text. */
static inline bool rd_str(const struct rd *r, const unsigned char **pp, bool nul, struct str *out,
                   struct sbuf *scratch) {
  const unsigned char *p = *pp;
  memset(out, 0, sizeof *out);
  if (*p == 'n') {
    if (!is_lit(r, p, "null", 4)) return false;
    *pp = p + 4;
    return true;
  }
  if (*p != '"') return false;
  bool esc = false;
  const unsigned char *q = chk_string(r, p, &esc);
  if (!q) return false;
  out->set = true;
  if (!esc && !nul) {
    out->p = (const char *)p + 1;
    out->len = (size_t)(q - p) - 2;
  } else {
    out->copied = true;
    out->off = scratch->len;
    if (esc)
      decode(p, q, scratch);
    else
      sbuf_append(scratch, (const char *)p + 1, (size_t)(q - p) - 2);
    out->len = scratch->len - out->off;
    sbuf_append(scratch, "", 1); /* its NUL, kept apart from the next one */
  }
  *pp = q;
  return true;
}

/* A small non-negative integer at *pp, moved past it; false otherwise. */
static inline bool rd_int(const unsigned char **pp, int *out) {
  bool integer;
  long long v;
  const unsigned char *q = chk_number(*pp, &integer, &v);
  if (!q || !integer || v < 0 || v > 1000000) return false;
  *out = (int)v;
  *pp = q;
  return true;
}

/* Whether the checked string at p is lit, written without escapes; *pp
 * moved past it when it is a string at all. */
static inline bool rd_is(const struct rd *r, const unsigned char **pp, const char *lit, bool *is) {
  bool esc = false;
  const unsigned char *p = *pp, *q;
  if (*p != '"' || !(q = chk_string(r, p, &esc))) return false;
  size_t n = strlen(lit);
  *is = !esc && (size_t)(q - p) == n + 2 && !memcmp(p + 1, lit, n);
  *pp = q;
  return true;
}

/* An object the wire keeps as a tree (usage, a content block), parsed
 * alone by json_parse after the whole event was checked; v: its bytes. */
struct slice {
  const unsigned char *p, *end; /* p NULL: absent */
};

static inline bool slice_tree(struct slice v, cJSON **out) {
  *out = NULL;
  if (!v.p) return true;
  struct err e = {0};
  return !json_parse((const char *)v.p, (size_t)(v.end - v.p), 0, out, &e);
}

/* The value at it->p (any), recorded as a slice and skipped. */
static inline bool rd_slice(const struct rd *r, struct obj_it *it, struct slice *out) {
  out->p = it->p;
  out->end = skip_value(r, it->p, it->depth);
  it->p = out->end;
  return out->end != NULL;
}

/* The whole text after the top object's '}' must be whitespace. */
static inline bool at_end(const struct rd *r, const unsigned char *p) { return ws(p) == r->end; }

/* ---- usage --------------------------------------------------------------- */

/* A usage object's token counts, read as llm__usage_json reads them: a
 * count that is not a number is -1 (not reported); a number with a
 * fraction goes to the full parse. */
struct usage {
  bool set; /* the object came */
  long v[4];   /* input, output, cache read, cache write; NONE: not a number */
  long cached; /* prompt_tokens_details.cached_tokens */
};
#define NONE LONG_MIN

KEYS(k_details, K("cached_tokens"));

/* One count at it->p into *out, it->p moved past the value. */
static inline bool rd_count(const struct rd *r, struct obj_it *it, long *out) {
  unsigned char c = *it->p;
  *out = NONE;
  if (c == '-' || (c >= '0' && c <= '9')) {
    bool integer;
    long long v;
    const unsigned char *q = chk_number(it->p, &integer, &v);
    if (!q || !integer) return false;
    *out = (long)v;
    it->p = q;
    return true;
  }
  return (it->p = skip_value(r, it->p, it->depth)) != NULL;
}

/* The usage member's value at up->p (any value: only an object counts). */
static inline bool rd_usage(const struct rd *r, struct obj_it *up, const struct keys *ks,
                     struct usage *u) {
  struct obj_it it, dt;
  u->set = false;
  if (*up->p != '{') return (up->p = skip_value(r, up->p, up->depth)) != NULL;
  if (!obj_start(up->p, up->depth, &it)) return false;
  u->set = true;
  u->v[0] = u->v[1] = u->v[2] = u->v[3] = u->cached = NONE;
  int k;
  while ((k = obj_next(r, &it, ks)) >= 0) {
    if (k < 4) {
      if (!rd_count(r, &it, &u->v[k])) return false;
    } else if (*it.p != '{') {
      if (!(it.p = skip_value(r, it.p, it.depth))) return false;
    } else {
      if (!obj_start(it.p, it.depth, &dt)) return false;
      int j;
      while ((j = obj_next(r, &dt, &k_details)) >= 0)
        if (!rd_count(r, &dt, &u->cached)) return false;
      if (j != OBJ_END) return false;
      it.p = dt.p;
    }
  }
  up->p = it.p;
  return k == OBJ_END;
}

static inline long count_of(long v) { return v == NONE ? -1 : v; }

static inline void report_usage(struct llm__stream *s, const struct usage *u) {
  if (!u->set) return;
  llm__usage(s, count_of(u->v[0]), count_of(u->v[1]));
  llm__usage_cache(s, count_of(u->v[2] != NONE ? u->v[2] : u->cached), count_of(u->v[3]));
}

/* ---- the prefix memo ------------------------------------------------------ */

/* Consecutive events of one stream mostly begin with the same bytes (an
 * OpenAI chunk's id, object, created, model and the choices key; an
 * Anthropic delta's type, index and delta key). A reader is a function of
 * the bytes it has read: after the same prefix it is in the same state.
 * So where the top object's reader reaches the member that varies, having
 * collected nothing it would need later but what the memo keeps, it keeps
 * that prefix and the state; the next event that starts with the same
 * bytes (one memcmp) resumes there instead of reading them again. */
struct llm__fast_memo {
  int wire;        /* 1 OpenAI, 2 Anthropic */
  size_t len;      /* the prefix's length: the member's value starts there */
  unsigned seen;   /* the top object's wanted members seen by then */
  int key;         /* that member */
  int type, index; /* Anthropic: what the prefix said; OpenAI: index */
  bool inner;      /* the prefix ends deeper than the top object's member
                    * key: OpenAI, in the first choice at its delta's value
                    * (iseen: the choice's members seen; index: its index);
                    * Anthropic, in the delta at ikey's value (iseen: the
                    * delta's members seen) */
  unsigned iseen;
  int ikey, aux;   /* Anthropic's inner prefix: it ends at the delta's
                    * member ikey (text or partial_json), aux holding the
                    * delta type's flags */
  char *bytes;
  size_t cap;
};


/* The memo of s when data starts with its prefix, else NULL. */
static const struct llm__fast_memo *memo_for(struct llm__stream *s, int wire, const char *data,
                                             size_t len) {
  const struct llm__fast_memo *m = *llm__fast_memo(s);
  if (!m || m->wire != wire || m->len > len || memcmp(m->bytes, data, m->len)) return NULL;
  return m;
}

/* Where a reader may resume: set when it reached it. */
struct mark {
  bool set;
  size_t len;
  unsigned seen;
  int key, type, index;
  bool inner;
  unsigned iseen;
  int ikey, aux;
};

static inline void memo_keep(struct llm__stream *s, int wire, const char *data, const struct mark *mk) {
  struct llm__fast_memo **slot = llm__fast_memo(s), *m = *slot;
  if (!m) *slot = m = xcalloc(1, sizeof *m);
  if (m->cap < mk->len) {
    free(m->bytes);
    m->cap = mk->len < 256 ? 256 : mk->len;
    m->bytes = xmalloc(m->cap);
  }
  memcpy(m->bytes, data, mk->len);
  m->wire = wire;
  m->len = mk->len;
  m->seen = mk->seen;
  m->key = mk->key;
  m->type = mk->type;
  m->index = mk->index;
  m->inner = mk->inner;
  m->iseen = mk->iseen;
  m->ikey = mk->ikey;
  m->aux = mk->aux;
}

#endif
