/* util.c - see util.h. */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) { fputs("luagent: out of memory\n", stderr); abort(); }
  return p;
}
void *xcalloc(size_t n, size_t m) {
  void *p = calloc(n ? n : 1, m ? m : 1);
  if (!p) { fputs("luagent: out of memory\n", stderr); abort(); }
  return p;
}
void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) { fputs("luagent: out of memory\n", stderr); abort(); }
  return q;
}
char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(xmalloc(n), s, n);
}

static void sbuf_grow(struct sbuf *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < b->len + extra + 1) cap *= 2;
  b->s = xrealloc(b->s, cap);
  b->cap = cap;
}
void sbuf_append(struct sbuf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) sbuf_grow(b, n); /* the usual case: no call */
  if (n) memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = 0;
}
void sbuf_reserve(struct sbuf *b, size_t extra) { sbuf_grow(b, extra); }
void sbuf_puts(struct sbuf *b, const char *s) { sbuf_append(b, s, strlen(s)); }
void sbuf_printf(struct sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  sbuf_grow(b, (size_t)n);
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}
void sbuf_free(struct sbuf *b) {
  free(b->s);
  b->s = NULL;
  b->len = b->cap = 0;
}
char *sbuf_take(struct sbuf *b) {
  if (!b->s) sbuf_grow(b, 0), b->s[0] = 0;
  char *s = b->s;
  b->s = NULL;
  b->len = b->cap = 0;
  return s;
}

int util_read_file(const char *path, size_t max, char **out, size_t *len, struct err *e) {
  *out = NULL;
  if (len) *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return err_set(e, errno == ENOENT ? ERR_NOTFOUND : ERR_IO, "io", "%s: %s", path, strerror(errno));
  struct sbuf b = {0};
  char chunk[16384];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (b.len + n > max) {
      fclose(f);
      sbuf_free(&b);
      return err_set(e, ERR_LIMIT, "too_large", "%s: larger than %zu bytes", path, max);
    }
    sbuf_append(&b, chunk, n);
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    sbuf_free(&b);
    return err_set(e, ERR_IO, "io", "%s: read error", path);
  }
  if (len) *len = b.len;
  *out = sbuf_take(&b);
  return 0;
}

int util_write_file_atomic(const char *path, const char *data, size_t len, struct err *e) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return err_set(e, ERR_IO, "io", "%s: %s", tmp, strerror(errno));
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, data + off, len - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      int saved = errno;
      close(fd);
      unlink(tmp);
      return err_set(e, ERR_IO, "io", "%s: %s", path, strerror(saved));
    }
    off += (size_t)w;
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    int saved = errno;
    unlink(tmp);
    return err_set(e, ERR_IO, "io", "%s: %s", path, strerror(saved));
  }
  if (rename(tmp, path) != 0) {
    int saved = errno;
    unlink(tmp);
    return err_set(e, ERR_IO, "io", "%s: %s", path, strerror(saved));
  }
  return 0;
}

int util_mkdirs(const char *path, int mode, struct err *e) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, (mode_t)mode) != 0 && errno != EEXIST)
      return err_set(e, ERR_IO, "io", "mkdir %s: %s", buf, strerror(errno));
    *p = '/';
  }
  if (mkdir(buf, (mode_t)mode) != 0 && errno != EEXIST)
    return err_set(e, ERR_IO, "io", "mkdir %s: %s", buf, strerror(errno));
  return 0;
}

double util_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}
double util_monotonic(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}
void util_sleep(double s) {
  if (s <= 0) return;
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

size_t util_utf8_len(const unsigned char *p, size_t n, const char **why) {
  unsigned char c = p[0], lo = 0x80, hi = 0xBF;
  size_t len;
  if (c < 0x80) return 1;
  if (c < 0xC0) {
    if (why) *why = "unexpected continuation byte";
    return 0;
  }
  if (c < 0xC2) {
    if (why) *why = "overlong encoding";
    return 0;
  }
  if (c < 0xE0) len = 2;
  else if (c < 0xF0) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;      /* below: overlong */
    else if (c == 0xED) hi = 0x9F; /* above: UTF-16 surrogates */
  } else if (c < 0xF5) {
    len = 4;
    if (c == 0xF0) lo = 0x90;      /* below: overlong */
    else if (c == 0xF4) hi = 0x8F; /* above: beyond U+10FFFF */
  } else {
    if (why) *why = "invalid byte";
    return 0;
  }
  for (size_t k = 1; k < len; k++) {
    if (k >= n || p[k] < 0x80 || p[k] > 0xBF) {
      if (why) *why = "truncated sequence";
      return 0;
    }
    if (k == 1 && (p[k] < lo || p[k] > hi)) {
      if (why) *why = c == 0xED ? "UTF-16 surrogate encoded in UTF-8"
             : c == 0xF4 ? "code point above U+10FFFF"
                         : "overlong encoding";
      return 0;
    }
  }
  return len;
}

size_t util_term_escape(const char *str, size_t len, char out[16]) {
  const unsigned char *s = (const unsigned char *)str;
  unsigned char c = s[0];
  out[0] = 0;
  if (c == 0xC0 && len > 1 && s[1] == 0x80) { /* U+0000 as the host holds it (json.h) */
    snprintf(out, 16, "\\u0000");
    return 2;
  }
  if (c < 0x20 || c == 0x7f) {
    snprintf(out, 16, "\\x%02x", c);
    return 1;
  }
  if (c < 0x80) return 1;
  size_t n = util_utf8_len(s, len, NULL);
  if (!n) { /* not UTF-8: shown as the byte it is */
    snprintf(out, 16, "\\x%02x", c);
    return 1;
  }
  unsigned cp = n == 2 ? ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu)
              : n == 3 ? ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu)
                       : 0x10000;
  /* C1 controls (U+009B is an 8-bit CSI) and the bidi controls that reorder
   * what the operator reads: embeddings, overrides, isolates, marks. */
  if ((cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E || cp == 0x200F ||
      (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069)) {
    snprintf(out, 16, "\\u%04x", cp);
  }
  return n;
}

static void escape(struct sbuf *b, const char *s, size_t len, size_t max, int keep_lines) {
  size_t start = b->len;
  for (size_t i = 0; i < len; i++) {
    if (b->len - start >= max) {
      sbuf_printf(b, "...[truncated %zu bytes]", len - i);
      return;
    }
    unsigned char c = (unsigned char)s[i];
    char esc[16];
    size_t k;
    if (keep_lines && (c == '\n' || c == '\t')) sbuf_append(b, (const char *)&c, 1);
    else if (c == '\n') sbuf_puts(b, "\\n");
    else if (c == '\t') sbuf_puts(b, "\\t");
    else if (c == '\r') sbuf_puts(b, "\\r");
    else {
      k = util_term_escape(s + i, len - i, esc);
      if (esc[0]) sbuf_puts(b, esc);
      else sbuf_append(b, s + i, k);
      i += k - 1;
    }
  }
}

void util_escape_text(struct sbuf *b, const char *s, size_t len, size_t max) {
  escape(b, s, len, max, 0);
}
void util_escape_output(struct sbuf *b, const char *s, size_t len, size_t max) {
  escape(b, s, len, max, 1);
}

size_t util_copy(char *dst, size_t n, const char *s) {
  if (!n) return 0; /* no room even for the NUL */
  size_t l = strnlen(s, n - 1);
  memcpy(dst, s, l);
  dst[l] = 0;
  return l;
}

char *util_dec_before(char *end, unsigned long long u) {
  do *--end = (char)('0' + u % 10);
  while (u /= 10);
  return end;
}

void util_run_id_text(char out[40], unsigned long t, const char *hex) {
  char d[2 * sizeof t];
  int n = 0;
  do d[n++] = "0123456789abcdef"[t & 15]; while (t >>= 4);
  char *p = out;
  *p++ = 'r';
  while (n) *p++ = d[--n];
  *p++ = '-';
  util_copy(p, (size_t)(out + 40 - p), hex);
}

void util_hex(const unsigned char *in, size_t n, char *out) {
  /* Two digits per byte from one table (every digest on a call's path). */
  static const char pairs[513] =
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
    "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
    "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
    "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
    "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
    "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
    "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
    "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";
  for (size_t i = 0; i < n; i++) memcpy(out + 2 * i, pairs + 2 * in[i], 2);
  out[2 * n] = 0;
}

/* Edit distance of a and b with adjacent transpositions ("lsit" is one
 * edit from "list"); both are compared up to 63 bytes, case-insensitively. */
static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63) la = 63;
  if (lb > 63) lb = 63;
  size_t d[64][64];
  for (size_t i = 0; i <= la; i++) d[i][0] = i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = j;
  for (size_t i = 1; i <= la; i++) {
    for (size_t j = 1; j <= lb; j++) {
      int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
      size_t best = d[i - 1][j - 1] + (ca != cb);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
          tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  }
  return d[la][lb];
}

const char *util_nearest(const char *word, const char *const *candidates, size_t n) {
  if (!word || !*word) return NULL;
  const char *best = NULL;
  size_t best_d = (size_t)-1, len = strlen(word);
  for (size_t i = 0; i < n; i++) {
    if (!candidates[i]) continue;
    size_t d = edit_distance(word, candidates[i]);
    if (d < best_d) {
      best_d = d;
      best = candidates[i];
    }
  }
  if (!best || best_d > 2 || (best_d && best_d * 2 >= len)) return NULL;
  return best;
}

static int readable(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int util_data_path(const char *name, char *out, size_t n) {
  const char *src = getenv("LUAGENT_SOURCE_DIR");
  if (src && *src) {
    snprintf(out, n, "%s/lua/%s", src, name);
    if (readable(out)) return 0;
  }
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = 0;
      snprintf(out, n, "%s/../share/luagent/%s", exe, name);
      if (readable(out)) return 0;
    }
  }
#ifdef LUAGENT_SOURCE_DIR
  snprintf(out, n, "%s/lua/%s", LUAGENT_SOURCE_DIR, name);
  if (readable(out)) return 0;
#endif
  return ERR_NOTFOUND;
}
