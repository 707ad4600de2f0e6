/* sse.c - see sse.h. */
#include "sse.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

struct sse_parser {
  sse_event_fn fn;
  void *ud;
  size_t max;
  struct sbuf line;  /* the unfinished line */
  struct sbuf data;  /* data lines of the event being built, '\n'-joined (no
                      * '\n' after the last: the text handed over as it is) */
  struct sbuf event; /* event type ("" = message) */
  struct sbuf id;    /* last event id */
  long retry_ms;     /* the last retry field, -1 if none */
  int have_data;     /* a data field was seen in this event */
  int after_cr;      /* the previous byte was CR: skip one LF */
  int started;       /* past the optional BOM */
  size_t count;
};

struct sse_parser *sse_new(sse_event_fn fn, void *ud, size_t max_bytes) {
  struct sse_parser *p = xcalloc(1, sizeof *p);
  p->fn = fn;
  p->ud = ud;
  p->max = max_bytes ? max_bytes : (size_t)8 << 20;
  p->retry_ms = -1;
  return p;
}

void sse_free(struct sse_parser *p) {
  if (!p) return;
  sbuf_free(&p->line);
  sbuf_free(&p->data);
  sbuf_free(&p->event);
  sbuf_free(&p->id);
  free(p);
}

size_t sse_count(const struct sse_parser *p) {
  return p ? p->count : 0;
}

static void reset_event(struct sse_parser *p) {
  p->data.len = 0;
  if (p->data.s) p->data.s[0] = 0;
  p->event.len = 0;
  if (p->event.s) p->event.s[0] = 0;
  p->have_data = 0;
}

static int dispatch(struct sse_parser *p) {
  if (!p->have_data) { /* no data field: nothing to dispatch */
    reset_event(p);
    return 0;
  }
  size_t n = p->data.len;
  if (!p->data.s) sbuf_append(&p->data, "", 0); /* make sure s is allocated */
  struct sse_event ev = {
      .event = p->event.len ? p->event.s : "message",
      .data = p->data.s,
      .data_len = n,
      .id = p->id.s ? p->id.s : "",
  };
  p->count++;
  int rc = p->fn ? p->fn(p->ud, &ev) : 0;
  reset_event(p);
  return rc;
}

/* One complete line (without its terminator). */
static int process_line(struct sse_parser *p, const char *s, size_t n, struct err *e) {
  if (n == 0) return dispatch(p);
  if (s[0] == ':') return 0; /* comment */
  const char *colon = memchr(s, ':', n);
  size_t flen = colon ? (size_t)(colon - s) : n;
  const char *v = colon ? colon + 1 : s + n;
  size_t vlen = colon ? n - flen - 1 : 0;
  if (vlen && *v == ' ') v++, vlen--;
  if (flen == 4 && !memcmp(s, "data", 4)) {
    if (p->data.len + (size_t)p->have_data + vlen + 1 > p->max) /* as if each had its '\n' */
      return err_set(e, ERR_LIMIT, "sse_too_large", "event stream: event data over %zu bytes",
                     p->max);
    /* the '\n' goes before a line after the first (the cap counts one
     * per line, as when it followed each): one copy for the usual event
     * of one data line */
    if (p->have_data) sbuf_append(&p->data, "\n", 1);
    sbuf_append(&p->data, v, vlen);
    p->have_data = 1;
  } else if (flen == 5 && !memcmp(s, "event", 5)) {
    p->event.len = 0;
    sbuf_append(&p->event, v, vlen);
  } else if (flen == 2 && !memcmp(s, "id", 2)) {
    if (!memchr(v, 0, vlen)) { /* ids with NUL are ignored */
      p->id.len = 0;
      sbuf_append(&p->id, v, vlen);
    }
  } else if (flen == 5 && !memcmp(s, "retry", 5)) {
    long ms = 0; /* only ASCII digits count, as the standard says */
    size_t i = 0;
    while (i < vlen && v[i] >= '0' && v[i] <= '9' && ms < 100000000L) ms = ms * 10 + (v[i++] - '0');
    if (vlen && i == vlen) p->retry_ms = ms;
  }
  /* unknown fields are ignored */
  return 0;
}

int sse_feed(struct sse_parser *p, const char *buf, size_t n, struct err *e) {
  size_t i = 0;
  if (!p->started) {
    /* Skip a UTF-8 BOM, which may itself arrive split: we only look once we
     * have three bytes or the stream clearly is not a BOM. */
    static const char bom[3] = {(char)0xEF, (char)0xBB, (char)0xBF};
    while (i < n && p->line.len < 3 && !p->started) {
      if (buf[i] != bom[p->line.len]) break;
      sbuf_append(&p->line, buf + i, 1);
      i++;
    }
    if (p->line.len == 3) {
      p->line.len = 0;
      p->started = 1;
    } else if (i < n) {
      p->started = 1; /* not a BOM: the bytes kept so far are text */
    } else {
      return 0; /* still could be a BOM */
    }
  }
  while (i < n) {
    if (p->after_cr) {
      p->after_cr = 0;
      if (buf[i] == '\n') {
        i++;
        continue;
      }
    }
    if (buf[i] == '\n' && !p->line.len) { /* an empty line: the event ends */
      int rc = dispatch(p);
      i++;
      if (rc) return rc;
      continue;
    }
    /* Find the next line terminator: the first LF, or a CR before it
     * (memchr twice beats a byte loop: lines are mostly long JSON). */
    const char *lf = memchr(buf + i, '\n', n - i);
    size_t lim = lf ? (size_t)(lf - buf) : n;
    const char *cr = memchr(buf + i, '\r', lim - i);
    size_t j = cr ? (size_t)(cr - buf) : lim;
    if (p->line.len + (j - i) > p->max)
      return err_set(e, ERR_LIMIT, "sse_too_large", "event stream: line over %zu bytes", p->max);
    if (j == n) { /* no terminator yet: keep the piece */
      sbuf_append(&p->line, buf + i, j - i);
      return 0;
    }
    int rc;
    if (p->line.len) {
      sbuf_append(&p->line, buf + i, j - i);
      rc = process_line(p, p->line.s, p->line.len, e);
      p->line.len = 0;
    } else {
      rc = process_line(p, buf + i, j - i, e);
    }
    if (buf[j] == '\r') p->after_cr = 1;
    i = j + 1;
    if (rc) return rc;
  }
  return 0;
}

int sse_finish(struct sse_parser *p) {
  int pending = p->line.len > 0 || p->have_data;
  p->line.len = 0;
  reset_event(p);
  return pending;
}

const char *sse_last_id(const struct sse_parser *p) { return p && p->id.s ? p->id.s : ""; }
long sse_retry_ms(const struct sse_parser *p) { return p ? p->retry_ms : -1; }
