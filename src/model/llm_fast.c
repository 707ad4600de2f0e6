/* llm_fast.c - the stream events read without a cJSON tree (llm.h,
 * llm__fast_openai, llm__fast_anthropic).
 *
 * Nearly every event of a streamed answer is a small object carrying one
 * text or argument piece, a usage count or a block boundary. Building a
 * tree for each (a node and a malloc per member) costs more than the rest
 * of the event's way to the operator. Here each event is read in one pass
 * over its bytes that checks it as strictly as json_parse checks it and,
 * in the same walk, picks out the members the wire reads: a member nobody
 * reads is skipped by an iterative checker (no call per byte, no
 * allocation), a string is scanned with a table, and a string the wire
 * reads is used in place unless it has an escape or must end in a NUL
 * (then it is decoded into one scratch buffer per event).
 *
 * Whatever is unusual goes back to the full parse, which then does exactly
 * what it always did: text that is not strict JSON, invalid UTF-8 (the
 * full parse keeps and counts it), a lone surrogate, a number the parser
 * might refuse or round (an exponent, more than 15 digits), an escaped key
 * (it could decode to a member the wire reads), a member the wire reads
 * given twice or in another case (cJSON looks keys up ignoring case), a
 * member of an unexpected type, nesting past 64, errors, refusals and the
 * event types not read here. So the fast path either yields what the full
 * parse yields or yields nothing; the few small objects the wire keeps as
 * trees (a usage object, an Anthropic content block) are parsed alone by
 * json_parse, the same parser on the same bytes. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "llm.h"
#include "util.h"

#define FAST_MAX_DEPTH 64

/* ---- checking ----------------------------------------------------------- */

#define R4(x) x, x, x, x
#define R16(x) R4(x), R4(x), R4(x), R4(x)
/* Bytes that stand for themselves in a string: printable ASCII but the
 * quote and the backslash (a NUL, the text's end, is not one). */
static const unsigned char plain[256] = {
    R16(0), R16(0),                                      /* 0x00-0x1F */
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,      /* 0x20-0x2F: '"' */
    R16(1), R16(1),                                      /* 0x30-0x4F */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,      /* 0x50-0x5F: '\\' */
    R16(1), R16(1),                                      /* 0x60-0x7F */
    R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), /* 0x80-0xFF */
};
/* JSON's whitespace, as json_parse skips it. */
static const unsigned char space[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, /* \t \n \r */
    [' '] = 1,
};
#undef R16
#undef R4

static inline const unsigned char *ws(const unsigned char *p) {
  while (space[*p]) p++;
  return p;
}

/* The text being read: it ends at end, where a NUL stops every scan. */
struct rd {
  const unsigned char *end;
};

/* Past the string literal whose quote is at p, checked; NULL for anything
 * json_parse would refuse or change (invalid UTF-8 is replaced there, so
 * it counts as unusual). *esc is set when it holds an escape. */
static const unsigned char *chk_string(const struct rd *r, const unsigned char *p, bool *esc) {
  p++;
  for (;;) {
    while (plain[p[0]] && plain[p[1]] && plain[p[2]] && plain[p[3]]) p += 4;
    while (plain[*p]) p++;
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
static const unsigned char *chk_number(const unsigned char *p, bool *integer, long long *ival) {
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
static const unsigned char *skip_value(const struct rd *r, const unsigned char *p, int depth) {
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
      if (memcmp(p, "true", 4)) return NULL;
      p += 4;
      break;
    case 'f':
      if (memcmp(p, "false", 5)) return NULL;
      p += 5;
      break;
    case 'n':
      if (memcmp(p, "null", 4)) return NULL;
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
/* Whether a[0..n) equals b[0..n), eight bytes at a time. */
static inline bool same_bytes(const unsigned char *a, const unsigned char *b, size_t n) {
  uint64_t x, y;
  for (; n >= 8; a += 8, b += 8, n -= 8) {
    memcpy(&x, a, 8), memcpy(&y, b, 8);
    if (x != y) return false;
  }
  for (; n; a++, b++, n--)
    if (*a != *b) return false;
  return true;
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

static int obj_next(const struct rd *r, struct obj_it *it, const struct keys *ks) {
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
    const unsigned char *q = p + 1;
    while (plain[*q]) q++;
    if (*q != '"') { /* not a plain key: checked in full, and an escaped key */
      bool esc = false; /* may be a wanted one: the full parse */
      if (!(q = chk_string(r, p, &esc)) || esc) return OBJ_BAD;
      q--;
    }
    int i = key_index(ks, p + 1, (size_t)(q - p) - 1);
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
      while (plain[*e]) e++;
      if (*e == '"') {
        it->p = e + 1;
        continue;
      }
    }
    if (!(it->p = skip_value(r, q, it->depth))) return OBJ_BAD;
  }
}

static bool obj_start(const unsigned char *p, int depth, struct obj_it *it) {
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
static void decode(const unsigned char *p, const unsigned char *q, struct sbuf *scratch) {
  p++, q--;
  while (p < q) {
    const unsigned char *run = p;
    while (p < q && *p != '\\') p++;
    if (p > run) sbuf_append(scratch, (const char *)run, (size_t)(p - run));
    if (p >= q) break;
    unsigned cp;
    size_t used;
    json_unescape(p, (size_t)(q - p), &cp, &used); /* checked: it is OK */
    json_put_codepoint(scratch, cp);
    p += used;
  }
}

/* The string (or null) at *pp into out, *pp moved past it. nul: the
 * caller needs it NUL-terminated. False for any other value or bad text. */
static bool rd_str(const struct rd *r, const unsigned char **pp, bool nul, struct str *out,
                   struct sbuf *scratch) {
  const unsigned char *p = *pp;
  memset(out, 0, sizeof *out);
  if (*p == 'n') {
    if (memcmp(p, "null", 4)) return false;
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
static bool rd_int(const unsigned char **pp, int *out) {
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
static bool rd_is(const struct rd *r, const unsigned char **pp, const char *lit, bool *is) {
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

static bool slice_tree(struct slice v, cJSON **out) {
  *out = NULL;
  if (!v.p) return true;
  struct err e = {0};
  return !json_parse((const char *)v.p, (size_t)(v.end - v.p), 0, out, &e);
}

/* The value at it->p (any), recorded as a slice and skipped. */
static bool rd_slice(const struct rd *r, struct obj_it *it, struct slice *out) {
  out->p = it->p;
  out->end = skip_value(r, it->p, it->depth);
  it->p = out->end;
  return out->end != NULL;
}

/* The whole text after the top object's '}' must be whitespace. */
static bool at_end(const struct rd *r, const unsigned char *p) { return ws(p) == r->end; }

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

KEYS(k_usage_oa, K("prompt_tokens"), K("completion_tokens"), K("cache_read_input_tokens"),
     K("cache_creation_input_tokens"), K("prompt_tokens_details"));
KEYS(k_usage_an, K("input_tokens"), K("output_tokens"), K("cache_read_input_tokens"),
     K("cache_creation_input_tokens"), K("prompt_tokens_details"));
KEYS(k_details, K("cached_tokens"));

/* One count at it->p into *out, it->p moved past the value. */
static bool rd_count(const struct rd *r, struct obj_it *it, long *out) {
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
static bool rd_usage(const struct rd *r, struct obj_it *up, const struct keys *ks,
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

static long count_of(long v) { return v == NONE ? -1 : v; }

static void report_usage(struct llm__stream *s, const struct usage *u) {
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
  int type, index; /* Anthropic: what the prefix said */
  char *bytes;
  size_t cap;
};

void llm__fast_memo_free(struct llm__fast_memo *m) {
  if (!m) return;
  free(m->bytes);
  free(m);
}

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
};

static void memo_keep(struct llm__stream *s, int wire, const char *data, const struct mark *mk) {
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
}

/* ---- OpenAI chat completion chunks -------------------------------------- */

enum { MAX_FAST_CALLS = 8 };

struct fast_call {
  int index;
  struct str id, name, args;
};

struct openai_chunk {
  struct usage usage;
  bool chosen;        /* a choice of index 0 (or without a numeric index) came */
  struct str text, fin;
  struct fast_call calls[MAX_FAST_CALLS];
  int ncalls;
};

KEYS(k_oa_top, K("error"), K("usage"), K("choices"));
KEYS(k_oa_choice, K("index"), K("delta"), K("finish_reason"));
KEYS(k_oa_delta, K("content"), K("refusal"), K("tool_calls"));
KEYS(k_oa_call, K("index"), K("id"), K("function"));
KEYS(k_oa_fn, K("name"), K("arguments"));

static bool oa_function(const struct rd *r, struct obj_it *up, struct fast_call *c,
                        struct sbuf *sc) {
  struct obj_it it;
  if (*up->p == 'n') return rd_str(r, &up->p, false, &c->name, sc); /* null */
  if (!obj_start(up->p, up->depth, &it)) return false;
  int k;
  while ((k = obj_next(r, &it, &k_oa_fn)) >= 0) {
    if (!rd_str(r, &it.p, k == 0, k == 0 ? &c->name : &c->args, sc)) return false;
  }
  up->p = it.p;
  return k == OBJ_END;
}

static bool oa_calls(const struct rd *r, struct obj_it *up, struct openai_chunk *ch,
                     struct sbuf *sc) {
  const unsigned char *p = up->p;
  if (*p == 'n') return rd_str(r, &up->p, false, &(struct str){0}, sc);
  if (*p != '[' || up->depth >= FAST_MAX_DEPTH) return false;
  p = ws(p + 1);
  if (*p == ']') {
    up->p = p + 1;
    return true;
  }
  for (;;) {
    struct obj_it it;
    if (ch->ncalls >= MAX_FAST_CALLS || !obj_start(p, up->depth + 1, &it)) return false;
    struct fast_call *c = &ch->calls[ch->ncalls++];
    memset(c, 0, sizeof *c);
    int k;
    while ((k = obj_next(r, &it, &k_oa_call)) >= 0) {
      bool ok = k == 0   ? rd_int(&it.p, &c->index)
                : k == 1 ? rd_str(r, &it.p, true, &c->id, sc)
                         : oa_function(r, &it, c, sc);
      if (!ok) return false;
    }
    if (k != OBJ_END) return false;
    p = ws(it.p);
    if (*p == ']') break;
    if (*p != ',') return false;
    p = ws(p + 1);
  }
  up->p = p + 1;
  return true;
}

static bool oa_delta(const struct rd *r, struct obj_it *up, struct openai_chunk *ch,
                     struct sbuf *sc) {
  struct obj_it it;
  if (*up->p == 'n') return rd_str(r, &up->p, false, &(struct str){0}, sc);
  if (!obj_start(up->p, up->depth, &it)) return false;
  int k;
  while ((k = obj_next(r, &it, &k_oa_delta)) >= 0) {
    struct str refusal;
    bool ok = k == 0   ? rd_str(r, &it.p, false, &ch->text, sc)
              : k == 1 ? rd_str(r, &it.p, false, &refusal, sc) && !refusal.len /* a refusal: full */
                       : oa_calls(r, &it, ch, sc);
    if (!ok) return false;
  }
  up->p = it.p;
  return k == OBJ_END;
}

/* One element of choices: read into ch when it is the first of index 0
 * (as first_choice picks), else only checked. */
static bool oa_choice(const struct rd *r, const unsigned char **pp, int depth,
                      struct openai_chunk *ch, struct sbuf *sc) {
  if (ch->chosen) return (*pp = skip_value(r, *pp, depth)) != NULL;
  struct obj_it it;
  if (!obj_start(*pp, depth, &it)) return false;
  int index = 0, k;
  while ((k = obj_next(r, &it, &k_oa_choice)) >= 0) {
    bool ok;
    if (k == 0) {
      unsigned char c = *it.p;
      ok = c == '-' || (c >= '0' && c <= '9') ? rd_int(&it.p, &index)
                                               : (it.p = skip_value(r, it.p, it.depth)) != NULL;
    } else if (k == 1) {
      ok = oa_delta(r, &it, ch, sc);
    } else {
      ok = rd_str(r, &it.p, true, &ch->fin, sc);
    }
    if (!ok) return false;
  }
  if (k != OBJ_END) return false;
  *pp = it.p;
  if (index == 0) {
    ch->chosen = true;
  } else { /* another choice's: forgotten */
    memset(&ch->text, 0, sizeof ch->text);
    memset(&ch->fin, 0, sizeof ch->fin);
    ch->ncalls = 0;
  }
  return true;
}

/* Reads one chunk into ch; resumes after m's prefix when m is not NULL,
 * else sets mk where it could have. False: use the full parse. */
static bool openai_read(const struct rd *r, const unsigned char *data,
                        const struct llm__fast_memo *m, struct mark *mk, struct openai_chunk *ch,
                        struct sbuf *sc) {
  struct obj_it it;
  int k;
  if (m) {
    it = (struct obj_it){data + m->len, false, m->seen, 1};
    k = m->key;
  } else {
    if (!obj_start(ws(data), 0, &it)) return false;
    k = obj_next(r, &it, &k_oa_top);
  }
  for (; k >= 0; k = obj_next(r, &it, &k_oa_top)) {
    if (k == 0) { /* error: only null is not one */
      if (memcmp(it.p, "null", 4)) return false;
      it.p += 4;
    } else if (k == 1) {
      if (!rd_usage(r, &it, &k_usage_oa, &ch->usage)) return false;
    } else if (*it.p == 'n') {
      if (memcmp(it.p, "null", 4)) return false;
      it.p += 4;
    } else {
      if (!m && it.seen == 1u << 2) /* nothing read before the choices */
        *mk = (struct mark){true, (size_t)(it.p - data), it.seen, 2, 0, 0};
      const unsigned char *p = it.p;
      if (*p != '[') return false;
      p = ws(p + 1);
      if (*p != ']') {
        for (;;) {
          if (!oa_choice(r, &p, it.depth + 1, ch, sc)) return false;
          p = ws(p);
          if (*p == ']') break;
          if (*p != ',') return false;
          p = ws(p + 1);
        }
      }
      it.p = p + 1;
    }
  }
  return k == OBJ_END && at_end(r, it.p);
}

int llm__fast_openai(struct llm__stream *s, const char *data,
                     void (*finish)(struct llm__stream *s, const char *reason)) {
  if (!llm__fast_ok(s)) return 0;
  struct sbuf sc = {0};
  struct openai_chunk ch; /* the calls are cleared as they are used */
  ch.usage.set = ch.chosen = false;
  memset(&ch.text, 0, sizeof ch.text);
  memset(&ch.fin, 0, sizeof ch.fin);
  ch.ncalls = 0;
  size_t len = strlen(data);
  struct rd r = {(const unsigned char *)data + len};
  const struct llm__fast_memo *m = memo_for(s, 1, data, len);
  struct mark mk = {0};
  int ok = openai_read(&r, (const unsigned char *)data, m, &mk, &ch, &sc);
  if (mk.set) memo_keep(s, 1, data, &mk);
  if (ok) { /* in the order openai_event reports them */
    report_usage(s, &ch.usage);
    if (ch.chosen) {
      if (ch.text.set) llm__text(s, str_ptr(&ch.text, &sc), ch.text.len);
      for (int i = 0; i < ch.ncalls; i++) {
        struct fast_call *c = &ch.calls[i];
        const char *id = str_ptr(&c->id, &sc), *name = str_ptr(&c->name, &sc);
        if (id || name) llm__tool_start(s, c->index, id, name);
        if (c->args.set && c->args.len)
          llm__tool_args(s, c->index, str_ptr(&c->args, &sc), c->args.len);
      }
      finish(s, str_ptr(&ch.fin, &sc));
    }
    llm__fast_count(s);
  }
  sbuf_free(&sc);
  return ok;
}

/* ---- flat objects as trees ---------------------------------------------- */

/* The checked object at p as a tree, when it is flat: plain keys, none
 * twice, and values that are strings, true, false, null, {} or [] or
 * integers of at most 15 digits (not -0). Those are the nodes json_parse
 * makes of the same text (the same decoding of strings, the same double
 * for such an integer); NULL for anything else, which the caller parses. */
static cJSON *flat_tree(const struct rd *r, const unsigned char *p, struct sbuf *sc) {
  cJSON *o = cJSON_CreateObject();
  const unsigned char *keys[16];
  size_t klen[16];
  int n = 0;
  p = ws(p + 1);
  if (*p == '}') return o;
  for (;;) {
    if (*p != '"' || n == 16) goto no;
    const unsigned char *k = p + 1, *q = k;
    while (plain[*q]) q++;
    if (*q != '"') goto no;
    size_t kl = (size_t)(q - k);
    for (int i = 0; i < n; i++)
      if (klen[i] == kl && !memcmp(keys[i], k, kl)) goto no;
    keys[n] = k, klen[n++] = kl;
    p = ws(ws(q + 1) + 1); /* past ':' (checked text) */
    cJSON *v = NULL;
    bool integer;
    long long iv;
    const unsigned char *e;
    if (*p == '"') {
      struct str st;
      size_t at = sc->len;
      if (!rd_str(r, &p, true, &st, sc)) goto no;
      v = cJSON_CreateString(sc->s + st.off);
      sc->len = at;
    } else if (!memcmp(p, "true", 4)) {
      v = cJSON_CreateTrue(), p += 4;
    } else if (!memcmp(p, "false", 5)) {
      v = cJSON_CreateFalse(), p += 5;
    } else if (!memcmp(p, "null", 4)) {
      v = cJSON_CreateNull(), p += 4;
    } else if (*p == '{' && *(e = ws(p + 1)) == '}') {
      v = cJSON_CreateObject(), p = e + 1;
    } else if (*p == '[' && *(e = ws(p + 1)) == ']') {
      v = cJSON_CreateArray(), p = e + 1;
    } else if ((e = chk_number(p, &integer, &iv)) && integer && !(*p == '-' && !iv)) {
      v = cJSON_CreateNumber((double)iv), p = e;
    } else {
      goto no;
    }
    char key[64];
    if (!v || kl >= sizeof key) {
      cJSON_Delete(v);
      goto no;
    }
    memcpy(key, k, kl);
    key[kl] = 0;
    cJSON_AddItemToObject(o, key, v);
    p = ws(p);
    if (*p == '}') return o;
    p = ws(p + 1); /* ',' */
  }
no:
  cJSON_Delete(o);
  return NULL;
}

/* ---- Anthropic messages events ------------------------------------------ */

KEYS(k_an_top, K("type"), K("index"), K("delta"), K("content_block"), K("message"), K("usage"));
KEYS(k_an_delta, K("type"), K("text"), K("partial_json"), K("stop_reason"), K("stop_details"));
KEYS(k_an_msg, K("usage"));
enum { T_TYPE, T_INDEX, T_DELTA, T_BLOCK, T_MESSAGE, T_USAGE };
enum { D_TYPE, D_TEXT, D_JSON, D_STOP, D_DETAILS };

enum an_type { AN_OTHER, AN_PING, AN_DELTA, AN_START, AN_STOP, AN_MDELTA, AN_MSTART, AN_MSTOP };

struct an_event {
  enum an_type type;
  int index;
  bool text_delta, json_delta;
  struct str piece, stop;
  bool details; /* stop_details given and not null */
  struct slice block;
  struct usage usage, msg_usage; /* usage: the top one; msg_usage: message.usage */
};

static bool an_type_of(const struct rd *r, const unsigned char **pp, enum an_type *t) {
  static const struct {
    struct key name;
    enum an_type t;
  } types[] = {{K("content_block_delta"), AN_DELTA}, {K("content_block_start"), AN_START},
               {K("content_block_stop"), AN_STOP},   {K("message_delta"), AN_MDELTA},
               {K("message_start"), AN_MSTART},      {K("message_stop"), AN_MSTOP},
               {K("ping"), AN_PING}};
  const unsigned char *p = *pp, *q;
  bool esc = false;
  if (*p != '"' || !(q = chk_string(r, p, &esc))) return false;
  *pp = q;
  *t = AN_OTHER;
  if (esc) return true;
  size_t n = (size_t)(q - p) - 2;
  for (size_t i = 0; i < sizeof types / sizeof *types; i++)
    if (types[i].name.n == n && !memcmp(p + 1, types[i].name.s, n)) *t = types[i].t;
  return true;
}

/* The delta object of a content_block_delta or a message_delta. */
static bool an_delta(const struct rd *r, struct obj_it *up, struct an_event *ev,
                     struct sbuf *sc) {
  struct obj_it it;
  if (!obj_start(up->p, up->depth, &it)) return false;
  int k;
  struct str tx = {0}, js = {0};
  while ((k = obj_next(r, &it, &k_an_delta)) >= 0) {
    bool ok = true;
    switch (k) {
      case D_TYPE: {
        bool is;
        const unsigned char *p = it.p;
        ok = rd_is(r, &it.p, "text_delta", &is);
        ev->text_delta = ok && is;
        if (ok && !is) {
          it.p = p;
          ok = rd_is(r, &it.p, "input_json_delta", &is);
          ev->json_delta = ok && is;
        }
        break;
      }
      case D_TEXT: ok = rd_str(r, &it.p, false, &tx, sc); break;
      case D_JSON: ok = rd_str(r, &it.p, false, &js, sc); break;
      case D_STOP: ok = rd_str(r, &it.p, true, &ev->stop, sc); break;
      default:
        ev->details = *it.p != 'n';
        ok = (it.p = skip_value(r, it.p, it.depth)) != NULL;
    }
    if (!ok) return false;
  }
  ev->piece = ev->text_delta ? tx : js;
  up->p = it.p;
  return k == OBJ_END;
}

static bool an_message(const struct rd *r, struct obj_it *up, struct an_event *ev) {
  struct obj_it it;
  if (!obj_start(up->p, up->depth, &it)) return false;
  int k;
  while ((k = obj_next(r, &it, &k_an_msg)) >= 0)
    if (!rd_usage(r, &it, &k_usage_an, &ev->msg_usage)) return false;
  up->p = it.p;
  return k == OBJ_END;
}

static bool anthropic_read(const struct rd *r, const unsigned char *data,
                           const struct llm__fast_memo *m, struct mark *mk, struct an_event *ev,
                           struct sbuf *sc) {
  struct obj_it it;
  int k;
  if (m) {
    it = (struct obj_it){data + m->len, false, m->seen, 1};
    k = m->key;
    ev->type = (enum an_type)m->type;
    ev->index = m->index;
  } else {
    if (!obj_start(ws(data), 0, &it)) return false;
    k = obj_next(r, &it, &k_an_top);
  }
  for (; k >= 0; k = obj_next(r, &it, &k_an_top)) {
    bool ok = true;
    switch (k) {
      case T_TYPE: ok = an_type_of(r, &it.p, &ev->type); break;
      case T_INDEX: ok = rd_int(&it.p, &ev->index); break;
      case T_DELTA:
        if (!m && !(it.seen & ~(1u << T_TYPE | 1u << T_INDEX | 1u << T_DELTA)))
          *mk = (struct mark){true, (size_t)(it.p - data), it.seen, T_DELTA, ev->type, ev->index};
        if (*it.p == '{') {
          ok = an_delta(r, &it, ev, sc);
        } else { /* not an object: left to the full parse */
          ok = (it.p = skip_value(r, it.p, it.depth)) != NULL;
          ev->details = true;
        }
        break;
      case T_BLOCK: ok = rd_slice(r, &it, &ev->block); break;
      case T_MESSAGE: ok = *it.p == '{' && an_message(r, &it, ev); break;
      default: ok = rd_usage(r, &it, &k_usage_an, &ev->usage);
    }
    if (!ok) return false;
  }
  return k == OBJ_END && (it.seen & 1u << T_TYPE) && at_end(r, it.p);
}

int llm__fast_anthropic(struct llm__stream *s, const char *data,
                        void (*finish)(struct llm__stream *s, const char *reason,
                                       const cJSON *details)) {
  if (!llm__fast_ok(s)) return 0;
  struct sbuf sc = {0};
  struct an_event ev = {0};
  size_t len = strlen(data);
  struct rd r = {(const unsigned char *)data + len};
  cJSON *block = NULL;
  int ok = 0;
  const struct llm__fast_memo *m = memo_for(s, 2, data, len);
  struct mark mk = {0};
  bool read = anthropic_read(&r, (const unsigned char *)data, m, &mk, &ev, &sc);
  if (mk.set) memo_keep(s, 2, data, &mk);
  if (!read) goto out;
  if (ev.type == AN_MSTART) { /* message.usage; a top one is not read */
    report_usage(s, &ev.msg_usage);
  } else if (ev.type == AN_PING) {
    /* nothing to do */
  } else if (ev.type == AN_MSTOP) {
    llm__done(s);
  } else if (ev.type == AN_STOP) {
    const char *bt = llm__block_type(s, ev.index);
    if (bt && !strcmp(bt, "redacted_thinking")) llm__redacted(s);
    llm__block_stop(s, ev.index);
  } else if (ev.type == AN_MDELTA) {
    if (ev.details) goto out; /* a refusal's details: the full parse */
    finish(s, str_ptr(&ev.stop, &sc), NULL);
    report_usage(s, &ev.usage);
  } else if (ev.type == AN_START) {
    /* the block is kept as a tree: built from the checked text when it is
     * flat, else parsed alone, as the full parse would */
    if (!ev.block.p || *ev.block.p != '{') goto out;
    if (!(block = flat_tree(&r, ev.block.p, &sc)) && !slice_tree(ev.block, &block)) goto out;
    /* what is read after the block is handed over, copied: the cap on
     * blocks may free it at once */
    const char *bt = cJSON_GetStringValue(cJSON_GetObjectItem(block, "type"));
    bool tool = bt && !strcmp(bt, "tool_use"), text = bt && !strcmp(bt, "text"),
         thinking = bt && !strcmp(bt, "thinking");
    const char *a = !(tool || text || thinking)
                        ? NULL
                        : cJSON_GetStringValue(cJSON_GetObjectItem(
                              block, tool ? "id" : text ? "text" : "thinking"));
    const char *b = tool ? cJSON_GetStringValue(cJSON_GetObjectItem(block, "name")) : NULL;
    char *ca = a ? xstrdup(a) : NULL, *cb = b ? xstrdup(b) : NULL;
    llm__block_start(s, ev.index, block);
    block = NULL;
    if (tool)
      llm__tool_start(s, ev.index, ca, cb);
    else if (text && ca)
      llm__text(s, ca, strlen(ca));
    else if (thinking && ca)
      llm__thinking(s, ca, strlen(ca));
    free(ca);
    free(cb);
  } else if (ev.type == AN_DELTA && ev.text_delta) {
    const char *piece = str_ptr(&ev.piece, &sc);
    if (piece) {
      llm__text(s, piece, ev.piece.len);
      llm__block_append(s, ev.index, "text", piece, ev.piece.len);
    }
  } else if (ev.type == AN_DELTA && ev.json_delta) {
    const char *piece = str_ptr(&ev.piece, &sc);
    const char *bt = llm__block_type(s, ev.index);
    if (piece && bt && !strcmp(bt, "tool_use"))
      llm__tool_args(s, ev.index, piece, ev.piece.len);
    else if (piece) /* a server tool's input: kept for the block, never run here */
      llm__block_append(s, ev.index, "input", piece, ev.piece.len);
  } else {
    goto out; /* another type or delta: the full parse */
  }
  ok = 1;
  llm__fast_count(s);
out:
  cJSON_Delete(block);
  sbuf_free(&sc);
  return ok;
}
