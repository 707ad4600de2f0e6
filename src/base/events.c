/* events.c - see events.h. */
#include "events.h"

#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "util.h"

const cJSON *event_data(struct event *ev) {
  if (!ev->data && ev->build) ev->data = ev->own_data = ev->build(ev->fields);
  else if (!ev->data && ev->json) /* text alone: the printed form reads back as itself */
    ev->data = ev->own_data = json_parse_str(ev->json, 0, NULL);
  return ev->data;
}

const char *event_json(struct event *ev, size_t *len) {
  if (!ev->json && ev->data) {
    ev->json = ev->own_json = json_print(ev->data, 0);
    ev->len = strlen(ev->json);
  }
  if (len) *len = ev->json ? ev->len : 0;
  return ev->json;
}

static void dispatch(struct event_sink *s, struct event *ev) {
  for (; s; s = s->next) {
    if (s->emit_event) s->emit_event(s->ud, ev);
    else if (s->emit) s->emit(s->ud, ev->run_id, ev->type, event_data(ev));
  }
  /* most events print nothing and build nothing here: no call for them */
  if (ev->own_data) cJSON_Delete(ev->own_data);
  if (ev->own_json) free(ev->own_json);
}

void events_emit(struct event_sink *s, const char *run_id, const char *type, const cJSON *data) {
  if (!s) return;
  struct event ev = {.run_id = run_id, .type = type, .data = data};
  dispatch(s, &ev);
}

void events_emit_text(struct event_sink *s, const char *run_id, const char *type,
                      const char *json, size_t len, cJSON *(*build)(const void *fields),
                      const void *fields) {
  if (!s) return;
  struct event ev = {.run_id = run_id, .type = type, .json = json, .len = len, .build = build,
                     .fields = fields};
  dispatch(s, &ev);
}

/* ---- printing an event's text ------------------------------------------ */

/* ,"k": (or {"k": for the first member) into buf (KEY_BUF bytes), its
 * length returned; keys are the emitter's literals: printable ASCII needing
 * no escape, so they are written as they are. 0 for a key over 60 bytes
 * (not one of ours): key_long appends it with the full printer. */
enum { KEY_BUF = 64 };
static size_t key_buf(const struct sbuf *b, const char *k, char *buf) {
  size_t n = 0, at = 0;
  buf[at++] = b->len ? ',' : '{';
  buf[at++] = '"';
  while (k[n] && n < KEY_BUF - 4) buf[at++] = k[n++]; /* a short key: no strlen */
  if (k[n]) return 0;
  buf[at++] = '"';
  buf[at++] = ':';
  return at;
}

static void key_long(struct sbuf *b, const char *k) {
  sbuf_append(b, b->len ? "," : "{", 1);
  json_put_string(b, k);
  sbuf_append(b, ":", 1);
}

static void key(struct sbuf *b, const char *k) {
  char buf[KEY_BUF];
  size_t at = key_buf(b, k, buf);
  if (at) sbuf_append(b, buf, at);
  else key_long(b, k);
}

/* Where an object's text stands: evtext_open leaves b empty, and the first
 * member writes the "{" with its key (one append, not two); evtext_close
 * writes "{}" for an object with no member. */
void evtext_open(struct sbuf *b) {
  b->len = 0;
  if (b->s) b->s[0] = 0;
}

void evtext_str(struct sbuf *b, const char *k, const char *s) {
  key(b, k);
  json_put_string(b, s);
}

void evtext_num(struct sbuf *b, const char *k, double d) {
  /* an integer (an index, a count): its digits, which is what
   * json_put_number writes for one (-0 as 0), after the key in one append;
   * anything else, NaN too, goes to it */
  if (d > -1e15 && d < 1e15) {
    long long x = (long long)d;
    if ((double)x == d) {
      char buf[KEY_BUF + 24], tmp[24];
      size_t at = key_buf(b, k, buf);
      if (!at) key_long(b, k);
      unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
      char *q = util_dec_before(tmp + sizeof tmp, u);
      if (x < 0) *--q = '-';
      size_t n = (size_t)(tmp + sizeof tmp - q);
      memcpy(buf + at, q, n);
      sbuf_append(b, buf, at + n);
      return;
    }
  }
  key(b, k);
  json_put_number(b, d);
}

void evtext_bool(struct sbuf *b, const char *k, int v) {
  char buf[KEY_BUF + 8];
  size_t at = key_buf(b, k, buf);
  if (!at) key_long(b, k);
  memcpy(buf + at, v ? "true" : "false", v ? 4 : 5);
  sbuf_append(b, buf, at + (v ? 4 : 5));
}

void evtext_close(struct sbuf *b) {
  if (b->len) sbuf_append(b, "}", 1);
  else sbuf_append(b, "{}", 2);
}
