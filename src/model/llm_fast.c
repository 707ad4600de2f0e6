/* llm_fast.c - the hot stream events read without a cJSON tree (llm.h,
 * llm__fast_openai, llm__fast_anthropic).
 *
 * Nearly every event of a streamed answer is a small object carrying one
 * text or argument piece. Building a tree for each (a node and a malloc
 * per member) costs more than the rest of the event's way to the
 * operator; here the text is checked once as JSON, as strictly as
 * json_parse checks it, and only the members the wire reads are looked up
 * and decoded. Whatever is unusual goes back to the full parse, which then
 * does exactly what it always did: text that is not strict JSON, invalid
 * UTF-8 (the full parse keeps and counts it), a lone surrogate, a number
 * the parser might refuse or round (an exponent, more than 15 digits), a
 * member the wire reads given twice or in another case (cJSON looks keys
 * up ignoring case), a member of an unexpected type, nesting past 64,
 * usage, errors, refusals and every other event type. So the fast path
 * either yields what the full parse yields or yields nothing. */
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "llm.h"
#include "util.h"

#define FAST_MAX_DEPTH 64

/* ---- checking --------------------------------------------------------- */

struct scan {
  const unsigned char *p, *end;
};

static void skip_ws(struct scan *s) {
  while (s->p < s->end && *s->p <= ' ' &&
         (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
    s->p++;
}

/* Bytes that stand for themselves in a string: printable ASCII but the
 * quote and the backslash. */
static const unsigned char plain[256] = {
#define R4(x) x, x, x, x
#define R16(x) R4(x), R4(x), R4(x), R4(x)
    R16(0), R16(0),                                      /* 0x00-0x1F */
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,      /* 0x20-0x2F: '"' */
    R16(1), R16(1),                                      /* 0x30-0x4F */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,      /* 0x50-0x5F: '\\' */
    R16(1), R16(1),                                      /* 0x60-0x7F */
    R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), /* 0x80-0xFF */
};

/* The same, with every byte from 0x80 on: in text already checked, the
 * bytes a string's end or escape cannot be. */
static const unsigned char inside[256] = {
    R16(0), R16(0),
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    R16(1), R16(1),
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
    R16(1), R16(1),
    R16(1), R16(1), R16(1), R16(1), R16(1), R16(1), R16(1), R16(1),
#undef R16
#undef R4
};

/* The string literal at s->p (its quote): checked, and decoded into out
 * when out is not NULL. False for anything the full parse would refuse or
 * change (invalid UTF-8 is replaced there, so it counts as unusual). */
static bool scan_string(struct scan *s, struct sbuf *out) {
  const unsigned char *p = s->p + 1, *end = s->end;
  if (out) {
    out->len = 0;
    sbuf_append(out, "", 0);
  }
  for (;;) {
    const unsigned char *run = p;
    while (p < end && plain[*p]) p++;
    if (out && p > run) sbuf_append(out, (const char *)run, (size_t)(p - run));
    if (p >= end) return false;
    unsigned char c = *p;
    if (c == '"') {
      s->p = p + 1;
      return true;
    }
    if (c < 0x20) return false;
    if (c >= 0x80) {
      const char *why;
      size_t len = util_utf8_len(p, (size_t)(end - p), &why);
      if (!len) return false;
      if (out) sbuf_append(out, (const char *)p, len);
      p += len;
      continue;
    }
    unsigned cp;
    size_t used;
    if (json_unescape(p, (size_t)(end - p), &cp, &used) != JSON_ESC_OK) return false;
    p += used;
    if (out) json_put_codepoint(out, cp);
  }
}

/* A number of the RFC grammar that the parser reads exactly: no exponent,
 * at most 15 digits. *ival gets its value when it is an integer. */
static bool scan_number(struct scan *s, bool *integer, long long *ival) {
  const unsigned char *p = s->p, *end = s->end;
  bool neg = false;
  int digits = 0;
  long long v = 0;
  if (p < end && *p == '-') neg = true, p++;
  if (p < end && *p == '0') {
    p++, digits++;
  } else if (p < end && *p >= '1' && *p <= '9') {
    while (p < end && *p >= '0' && *p <= '9') {
      if (digits < 16) v = v * 10 + (*p - '0'); /* past 15 digits it is refused anyway */
      p++, digits++;
    }
  } else {
    return false;
  }
  *integer = true;
  if (p < end && *p == '.') {
    p++;
    *integer = false;
    if (p >= end || *p < '0' || *p > '9') return false;
    while (p < end && *p >= '0' && *p <= '9') p++, digits++;
  }
  if (p < end && (*p == 'e' || *p == 'E')) return false;
  if (digits > 15) return false;
  if (p < end && *p >= '0' && *p <= '9') return false; /* "01" */
  *ival = neg ? -v : v;
  s->p = p;
  return true;
}

static bool scan_value(struct scan *s, int depth);

static bool scan_literal(struct scan *s, const char *w, size_t n) {
  if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n)) return false;
  s->p += n;
  return true;
}

static bool scan_value(struct scan *s, int depth) {
  skip_ws(s);
  if (s->p >= s->end) return false;
  bool integer;
  long long v;
  switch (*s->p) {
    case '"': return scan_string(s, NULL);
    case 't': return scan_literal(s, "true", 4);
    case 'f': return scan_literal(s, "false", 5);
    case 'n': return scan_literal(s, "null", 4);
    case '[':
    case '{': {
      if (depth >= FAST_MAX_DEPTH) return false;
      bool obj = *s->p == '{';
      unsigned char close = obj ? '}' : ']';
      s->p++;
      skip_ws(s);
      if (s->p < s->end && *s->p == close) {
        s->p++;
        return true;
      }
      for (;;) {
        if (obj) {
          skip_ws(s);
          if (s->p >= s->end || *s->p != '"' || !scan_string(s, NULL)) return false;
          skip_ws(s);
          if (s->p >= s->end || *s->p != ':') return false;
          s->p++;
        }
        if (!scan_value(s, depth + 1)) return false;
        skip_ws(s);
        if (s->p >= s->end) return false;
        if (*s->p == ',') {
          s->p++;
          continue;
        }
        if (*s->p != close) return false;
        s->p++;
        return true;
      }
    }
    default: return scan_number(s, &integer, &v);
  }
}

/* ---- reading ----------------------------------------------------------- */

/* Past this point the text is known to be strict JSON (top_members),
 * so values are skipped without being checked again, and the text's NUL
 * stops every loop. */

/* A value inside checked text. */
struct val {
  const unsigned char *p; /* its first byte; NULL when absent */
  const unsigned char *end; /* just past it */
};

static char kind_of(struct val v) { return v.p ? (char)*v.p : 0; }

static const unsigned char *ws(const unsigned char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return p;
}

/* Past the end of the string whose quote is at p; *esc says whether it
 * holds a backslash. */
static const unsigned char *skip_string(const unsigned char *p, bool *esc) {
  p++;
  for (;;) {
    while (inside[*p]) p++;
    if (*p == '"') return p + 1;
    if (*p == '\\') {
      *esc = true;
      p += 2;
    } else {
      p++; /* a control byte cannot be here: the text was checked */
    }
  }
}

static const unsigned char *skip_checked(const unsigned char *p) {
  bool esc = false;
  if (*p == '"') return skip_string(p, &esc);
  if (*p == '{' || *p == '[') {
    int depth = 0;
    for (;;) {
      unsigned char c = *p;
      if (c == '"') {
        p = skip_string(p, &esc);
        continue;
      }
      if (c == '{' || c == '[') depth++;
      else if ((c == '}' || c == ']') && --depth == 0) return p + 1;
      p++;
    }
  }
  while (*p && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' && *p != '\n' &&
         *p != '\r')
    p++;
  return p;
}

static bool ieqn(const char *a, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char x = a[i] >= 'A' && a[i] <= 'Z' ? (char)(a[i] + 32) : a[i];
    char y = b[i] >= 'A' && b[i] <= 'Z' ? (char)(b[i] + 32) : b[i];
    if (x != y) return false;
  }
  return true;
}

/* The members keys[0..n) of the object at v: out[i] gets each one's
 * value, absent when missing. False when one is given twice or a key
 * matches one only ignoring case (cJSON's lookup ignores case and takes
 * the first; the full parse keeps the last of a repeated key). */
static bool members(struct val v, const char *const *keys, size_t n, struct val *out,
                    struct sbuf *tmp) {
  size_t kl[8];
  for (size_t i = 0; i < n; i++) out[i].p = out[i].end = NULL, kl[i] = strlen(keys[i]);
  const unsigned char *p = ws(v.p + 1);
  if (*p == '}') return true;
  for (;;) {
    p = ws(p);
    bool esc = false;
    const unsigned char *q = skip_string(p, &esc);
    const char *key = (const char *)p + 1;
    size_t klen = (size_t)(q - p) - 2;
    if (esc) { /* an escaped key: compared as cJSON sees it, decoded */
      struct scan s = {p, q};
      if (!scan_string(&s, tmp)) return false;
      key = tmp->s, klen = tmp->len;
    }
    p = ws(ws(q) + 1); /* past ':' */
    const unsigned char *at = p;
    p = skip_checked(p);
    for (size_t i = 0; i < n; i++) {
      if (klen != kl[i] || !ieqn(key, keys[i], kl[i])) continue;
      if (memcmp(key, keys[i], kl[i]) || out[i].p) return false;
      out[i].p = at;
      out[i].end = p;
    }
    p = ws(p);
    if (*p == '}') return true;
    p++; /* ',' */
  }
}

/* A string member: absent or null give NULL; a string its text, in place
 * when it has no escape and nul is false, else decoded into buf (then
 * NUL-terminated); false for any other type. */
static bool str_of(struct val v, struct sbuf *buf, bool nul, const char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  if (!v.p || kind_of(v) == 'n') return true;
  if (kind_of(v) != '"') return false;
  bool esc = false;
  const unsigned char *q = skip_string(v.p, &esc);
  if (!esc && !nul) {
    *out = (const char *)v.p + 1;
    *len = (size_t)(q - v.p) - 2;
    return true;
  }
  struct scan s = {v.p, q};
  if (!scan_string(&s, buf)) return false;
  *out = buf->s;
  *len = buf->len;
  return true;
}

/* Whether v is the string lit, written without escapes. */
static bool str_is(struct val v, const char *lit) {
  size_t n = strlen(lit);
  return kind_of(v) == '"' && (size_t)(v.end - v.p) == n + 2 && !memcmp(v.p + 1, lit, n);
}

/* A small integer member (absent: dflt); false for any other value. */
static bool int_of(struct val v, int dflt, int *out) {
  *out = dflt;
  if (!v.p) return true;
  struct scan s = {v.p, v.end};
  bool integer;
  long long x;
  if (!scan_number(&s, &integer, &x) || !integer || x < 0 || x > 1000000) return false;
  *out = (int)x;
  return true;
}

static bool is_null(struct val v) { return !v.p || kind_of(v) == 'n'; }

static bool key_is(const char *key, size_t klen, const char *const *keys, size_t n,
                   const size_t *kl, struct val *out, struct val v) {
  for (size_t i = 0; i < n; i++) {
    if (klen != kl[i] || !ieqn(key, keys[i], kl[i])) continue;
    if (memcmp(key, keys[i], kl[i]) || out[i].p) return false;
    out[i] = v;
  }
  return true;
}

/* The whole text is one JSON object: checked as strictly as json_parse
 * checks it, in the same walk that finds its members keys[0..n) (as
 * members does; the nested values are checked, and read later by
 * members). False for anything but one object and whitespace. */
static bool top_members(const char *data, const char *const *keys, size_t n, struct val *out,
                        struct sbuf *tmp) {
  size_t len = strlen(data), kl[8];
  for (size_t i = 0; i < n; i++) out[i].p = out[i].end = NULL, kl[i] = strlen(keys[i]);
  struct scan s = {(const unsigned char *)data, (const unsigned char *)data + len};
  skip_ws(&s);
  if (s.p >= s.end || *s.p != '{') return false;
  s.p++;
  skip_ws(&s);
  if (s.p < s.end && *s.p == '}') {
    s.p++;
  } else {
    for (;;) {
      skip_ws(&s);
      if (s.p >= s.end || *s.p != '"') return false;
      const unsigned char *k = s.p;
      bool esc = false;
      if (!scan_string(&s, NULL)) return false;
      const char *key = (const char *)k + 1;
      size_t klen = (size_t)(s.p - k) - 2;
      for (const unsigned char *q = k + 1; q < s.p - 1; q++) esc |= *q == '\\';
      if (esc) {
        struct scan d = {k, s.p};
        scan_string(&d, tmp);
        key = tmp->s, klen = tmp->len;
      }
      skip_ws(&s);
      if (s.p >= s.end || *s.p != ':') return false;
      s.p++;
      skip_ws(&s);
      struct val v = {s.p, NULL};
      if (!scan_value(&s, 1)) return false;
      v.end = s.p;
      if (!key_is(key, klen, keys, n, kl, out, v)) return false;
      skip_ws(&s);
      if (s.p >= s.end) return false;
      if (*s.p == ',') {
        s.p++;
        continue;
      }
      if (*s.p != '}') return false;
      s.p++;
      break;
    }
  }
  skip_ws(&s);
  return s.p == s.end;
}

/* ---- OpenAI chat completion chunks ------------------------------------- */

struct fast_call {
  int index;
  const char *id, *name, *args;
  size_t nargs;
};

enum { MAX_FAST_CALLS = 8 };

struct fast_bufs {
  struct sbuf key, text, fin, id[MAX_FAST_CALLS], name[MAX_FAST_CALLS], args[MAX_FAST_CALLS];
};

/* Most events decode nothing (their strings are used in place): only the
 * buffers that were used are freed. */
static void bufs_free(struct fast_bufs *b, int ncalls) {
  free(b->key.s);
  free(b->text.s);
  free(b->fin.s);
  for (int i = 0; i < ncalls && i < MAX_FAST_CALLS; i++) {
    free(b->id[i].s);
    free(b->name[i].s);
    free(b->args[i].s);
  }
}

/* Reads one chunk into text, calls and fin; false: use the full parse. */
static bool openai_read(const char *data, struct fast_bufs *b, const char **text, size_t *ntext,
                        struct fast_call *calls, int *ncalls, const char **fin) {
  static const char *const tk[] = {"error", "usage", "choices"};
  struct val tv[3];
  if (!top_members(data, tk, 3, tv, &b->key)) return false;
  if (tv[0].p || !is_null(tv[1])) return false; /* errors and usage: the full parse */
  if (is_null(tv[2])) return true;              /* no choice: nothing of ours */
  if (kind_of(tv[2]) != '[') return false;
  /* the first choice of index 0 (or without a numeric index), as first_choice */
  const unsigned char *p = ws(tv[2].p + 1);
  struct val cv[3] = {{0}};
  bool chosen = false;
  static const char *const ck[] = {"index", "delta", "finish_reason"};
  while (*p != ']') {
    p = ws(p);
    if (*p != '{') return false;
    struct val el = {p, skip_checked(p)};
    p = el.end;
    if (!chosen) {
      struct val m[3];
      if (!members(el, ck, 3, m, &b->key)) return false;
      int ix = 0;
      char k = kind_of(m[0]);
      if ((k == '-' || (k >= '0' && k <= '9')) && !int_of(m[0], 0, &ix)) return false;
      if (ix == 0) {
        chosen = true;
        memcpy(cv, m, sizeof cv);
      }
    }
    p = ws(p);
    if (*p == ',') p++;
  }
  if (!chosen) return true;
  size_t n;
  if (!str_of(cv[2], &b->fin, true, fin, &n)) return false;
  if (is_null(cv[1])) return true;
  if (kind_of(cv[1]) != '{') return false;
  static const char *const dk[] = {"content", "refusal", "tool_calls"};
  struct val dv[3];
  if (!members(cv[1], dk, 3, dv, &b->key)) return false;
  if (!str_of(dv[0], &b->text, false, text, ntext)) return false;
  const char *refusal;
  if (!str_of(dv[1], &b->key, false, &refusal, &n) || n) return false; /* a refusal: full parse */
  if (is_null(dv[2])) return true;
  if (kind_of(dv[2]) != '[') return false;
  p = ws(dv[2].p + 1);
  while (*p != ']') {
    p = ws(p);
    if (*p != '{' || *ncalls >= MAX_FAST_CALLS) return false;
    struct val el = {p, skip_checked(p)};
    p = el.end;
    static const char *const kk[] = {"index", "id", "function"};
    struct val kv[3];
    if (!members(el, kk, 3, kv, &b->key)) return false;
    struct fast_call *c = &calls[*ncalls];
    memset(c, 0, sizeof *c);
    if (!int_of(kv[0], 0, &c->index) || !str_of(kv[1], &b->id[*ncalls], true, &c->id, &n))
      return false;
    if (!is_null(kv[2])) {
      if (kind_of(kv[2]) != '{') return false;
      static const char *const fk[] = {"name", "arguments"};
      struct val fv[2];
      if (!members(kv[2], fk, 2, fv, &b->key) ||
          !str_of(fv[0], &b->name[*ncalls], true, &c->name, &n) ||
          !str_of(fv[1], &b->args[*ncalls], false, &c->args, &c->nargs))
        return false;
    }
    (*ncalls)++;
    p = ws(p);
    if (*p == ',') p++;
  }
  return true;
}

int llm__fast_openai(struct llm__stream *s, const char *data,
                     void (*finish)(struct llm__stream *s, const char *reason)) {
  if (!llm__fast_ok(s)) return 0;
  struct fast_bufs b = {0};
  const char *text = NULL, *fin = NULL;
  size_t ntext = 0;
  struct fast_call calls[MAX_FAST_CALLS];
  int ncalls = 0;
  int ok = openai_read(data, &b, &text, &ntext, calls, &ncalls, &fin);
  if (ok) { /* in the order openai_event reports them */
    if (text) llm__text(s, text, ntext);
    for (int i = 0; i < ncalls; i++) {
      struct fast_call *c = &calls[i];
      if (c->id || c->name) llm__tool_start(s, c->index, c->id, c->name);
      if (c->args && c->nargs) llm__tool_args(s, c->index, c->args, c->nargs);
    }
    finish(s, fin);
    llm__fast_count(s);
  }
  bufs_free(&b, ncalls < MAX_FAST_CALLS ? ncalls + 1 : MAX_FAST_CALLS);
  return ok;
}

/* ---- Anthropic content_block_delta ------------------------------------ */

int llm__fast_anthropic(struct llm__stream *s, const char *data) {
  if (!llm__fast_ok(s)) return 0;
  struct sbuf key = {0}, buf = {0};
  int ok = 0;
  struct val tv[3], dv[3];
  static const char *const tk[] = {"type", "index", "delta"};
  static const char *const dk[] = {"type", "text", "partial_json"};
  const char *piece;
  size_t n;
  int index;
  /* only this event type, spelled plainly; anything else: the full parse */
  if (!top_members(data, tk, 3, tv, &key) ||
      !str_is(tv[0], "content_block_delta") || !int_of(tv[1], 0, &index) ||
      kind_of(tv[2]) != '{' || !members(tv[2], dk, 3, dv, &key))
    goto out;
  if (str_is(dv[0], "text_delta")) {
    if (!str_of(dv[1], &buf, false, &piece, &n)) goto out;
    if (piece) {
      llm__text(s, piece, n);
      llm__block_append(s, index, "text", piece, n);
    }
    ok = 1;
  } else if (str_is(dv[0], "input_json_delta")) {
    if (!str_of(dv[2], &buf, false, &piece, &n)) goto out;
    const char *bt = llm__block_type(s, index);
    if (piece && bt && !strcmp(bt, "tool_use"))
      llm__tool_args(s, index, piece, n);
    else if (piece) /* a server tool's input: kept for the block, never run here */
      llm__block_append(s, index, "input", piece, n);
    ok = 1;
  }
  if (ok) llm__fast_count(s);
out:
  sbuf_free(&key);
  sbuf_free(&buf);
  return ok;
}
