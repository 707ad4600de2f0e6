/* daemon_wire.c - frames and the binary job and reply records between the
 * scheduler and its workers (see daemon_impl.h, "wire").
 *
 * A frame is a 4-byte little-endian length and that many bytes. A job or
 * a reply is one record: a kind byte ('J' or 'R') and fields, each a tag
 * byte, a 4-byte little-endian length, the bytes and a NUL (so a text
 * field is a C string where it lies). Numbers are the 8 bytes of a double:
 * both ends are the same binary on the same host. Nothing in a record is
 * printed or parsed as JSON except the values that are JSON for Lua
 * (ctx.state, the trigger, the arguments), which pass through as text.
 * Event frames (print, log, tool calls: a few per run at most) stay JSON
 * objects, told apart by their first byte '{'.
 */
#define _GNU_SOURCE
#include "daemon_impl.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "util.h"

void daemon__rec_begin(struct sbuf *b, char kind) {
  b->len = 0;
  sbuf_append(b, "\0\0\0\0", 4);
  sbuf_append(b, &kind, 1);
}

void daemon__rec_put(struct sbuf *b, int tag, const char *p, size_t n) {
  unsigned char h[5] = {(unsigned char)tag, (unsigned char)n, (unsigned char)(n >> 8),
                        (unsigned char)(n >> 16), (unsigned char)(n >> 24)};
  sbuf_append(b, (const char *)h, 5);
  if (n) sbuf_append(b, p, n);
  sbuf_append(b, "", 1);
}

void daemon__rec_str(struct sbuf *b, int tag, const char *s) {
  if (s) daemon__rec_put(b, tag, s, strlen(s));
}

void daemon__rec_num(struct sbuf *b, int tag, double v) {
  char raw[8];
  memcpy(raw, &v, 8);
  daemon__rec_put(b, tag, raw, 8);
}

int daemon__rec_end(struct sbuf *b) {
  size_t n = b->len - 4;
  if (n > MAX_FRAME) return -1;
  unsigned char *h = (unsigned char *)b->s;
  h[0] = (unsigned char)n;
  h[1] = (unsigned char)(n >> 8);
  h[2] = (unsigned char)(n >> 16);
  h[3] = (unsigned char)(n >> 24);
  return 0;
}

int daemon__rec_send(int fd, struct sbuf *b) {
  if (daemon__rec_end(b)) return -1;
  return daemon__write_all(fd, b->s, b->len);
}

int daemon__rec_parse(const char *p, size_t n, char kind, struct daemon_rec *r, char *why,
                      size_t nwhy) {
  memset(r, 0, sizeof *r);
  if (n < 1 || p[0] != kind) {
    snprintf(why, nwhy, "not a %s record", kind == 'J' ? "job" : "reply");
    return -1;
  }
  size_t i = 1;
  while (i < n) {
    if (n - i < 5) {
      snprintf(why, nwhy, "a field header cut off at byte %zu of %zu", i, n);
      return -1;
    }
    const unsigned char *h = (const unsigned char *)p + i;
    unsigned tag = h[0];
    size_t len = (size_t)h[1] | (size_t)h[2] << 8 | (size_t)h[3] << 16 | (size_t)h[4] << 24;
    i += 5;
    if (tag == 0 || tag >= REC_NTAGS) {
      snprintf(why, nwhy, "unknown field %u at byte %zu", tag, i - 5);
      return -1;
    }
    if (len > n - i || n - i - len < 1) {
      snprintf(why, nwhy, "field %u claims %zu bytes, %zu are left", tag, len,
               n - i > 0 ? n - i - 1 : 0);
      return -1;
    }
    if (p[i + len] != 0) {
      snprintf(why, nwhy, "field %u is not terminated", tag);
      return -1;
    }
    if (r->have & (1u << tag)) {
      snprintf(why, nwhy, "field %u appears twice", tag);
      return -1;
    }
    r->have |= 1u << tag;
    r->f[tag].p = p + i;
    r->f[tag].n = len;
    i += len + 1;
  }
  return 0;
}

const char *daemon__rec_text(const struct daemon_rec *r, int tag) {
  if (!(r->have & (1u << tag))) return NULL;
  if (memchr(r->f[tag].p, 0, r->f[tag].n)) return NULL; /* a C string, whole */
  return r->f[tag].p;
}

int daemon__rec_number(const struct daemon_rec *r, int tag, double *out) {
  if (!(r->have & (1u << tag)) || r->f[tag].n != 8) return -1;
  double v;
  memcpy(&v, r->f[tag].p, 8);
  if (!isfinite(v)) return -1;
  *out = v;
  return 0;
}

int daemon__frame_next(const struct sbuf *b, size_t *off, const char **p, size_t *n) {
  if (b->len - *off < 4) return 0;
  const unsigned char *h = (const unsigned char *)b->s + *off;
  size_t len = (size_t)h[0] | (size_t)h[1] << 8 | (size_t)h[2] << 16 | (size_t)h[3] << 24;
  if (len > MAX_FRAME) return -1;
  if (b->len - *off - 4 < len) return 0;
  *p = b->s + *off + 4;
  *n = len;
  *off += 4 + len;
  return 1;
}

void daemon__frame_drop(struct sbuf *b, size_t off) {
  if (!off) return;
  memmove(b->s, b->s + off, b->len - off);
  b->len -= off;
}

/* A JSON string that needs no escape, as json_print writes it, or -1. */
static int plain_string(struct sbuf *b, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (*p < 0x20 || *p >= 0x7f || *p == '"' || *p == '\\') return -1;
  sbuf_append(b, "\"", 1);
  sbuf_puts(b, s);
  sbuf_append(b, "\"", 1);
  return 0;
}

/* A time slot (epoch seconds, 10 digits before the point) as json_print
 * prints it: the first of %.15g, %.16g, %.17g (5, 6, 7 decimals here)
 * that reads back as v, trailing zeros dropped; with exact integer
 * arithmetic instead of printf and strtod. v = m * 2^-sh exactly; q, v *
 * 10^k rounded half to even (as printf rounds), gives q / 10^k, which
 * reads back as v when it is nearer than half a unit in the last place:
 * 2 |q * 2^sh - m * 10^k| < 10^k (a tie goes to json_print itself). */
static int slot_text(struct sbuf *b, double v) {
  if (!(v >= 1e9 && v < 1e10)) return -1;
  int ex;
  double f = frexp(v, &ex); /* v = f * 2^ex, 0.5 <= f < 1 */
  int sh = 53 - ex;         /* 19..23 here */
  __int128 m = (__int128)(long long)ldexp(f, 53), one = 1;
  for (int k = 5; k <= 7; k++) {
    long long den = k == 5 ? 100000 : k == 6 ? 1000000 : 10000000;
    __int128 scaled = m * den, half = one << (sh - 1);
    __int128 q = scaled >> sh, rem = scaled - (q << sh);
    if (rem > half || (rem == half && (q & 1))) q++;
    __int128 diff = (q << sh) - scaled;
    if (diff < 0) diff = -diff;
    if (2 * diff >= den) continue;
    long long ip = (long long)(q / den), fp = (long long)(q % den);
    int digits = k;
    while (digits > 0 && fp % 10 == 0) fp /= 10, digits--;
    /* "%lld.%0*lld" by hand: ip has 10 digits here, fp `digits` */
    char buf[24], *e = buf + sizeof buf, *p = e;
    for (int i = 0; i < digits; i++, fp /= 10) *--p = (char)('0' + fp % 10);
    if (digits) *--p = '.';
    p = util_dec_before(p, (unsigned long long)ip); /* ip > 0: v >= 1e9 */
    sbuf_append(b, p, (size_t)(e - p));
    return 0;
  }
  return -1;
}

char *daemon__trigger_text(const cJSON *t) {
  /* daemon__make_trigger's time slots: {"kind", "name", "slot"} */
  const cJSON *k = t ? t->child : NULL, *n = k ? k->next : NULL, *sl = n ? n->next : NULL;
  if (sl && !sl->next && cJSON_IsString(k) && !strcmp(k->string, "kind") && cJSON_IsString(n) &&
      !strcmp(n->string, "name") && cJSON_IsNumber(sl) && !sl->valuestring &&
      !strcmp(sl->string, "slot")) {
    struct sbuf b = {xmalloc(128), 0, 128}; /* one allocation for the usual trigger */
    sbuf_puts(&b, "{\"kind\":");
    if (!plain_string(&b, k->valuestring)) {
      sbuf_puts(&b, ",\"name\":");
      if (!plain_string(&b, n->valuestring)) {
        sbuf_puts(&b, ",\"slot\":");
        if (!slot_text(&b, sl->valuedouble)) {
          sbuf_append(&b, "}", 1);
          return sbuf_take(&b);
        }
      }
    }
    sbuf_free(&b);
  }
  return t ? json_print(t, 0) : NULL;
}
