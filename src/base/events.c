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
  cJSON_Delete(ev->own_data);
  free(ev->own_json);
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

/* ,"k": (keys are the emitter's literals: printable ASCII needing no
 * escape, so they are written as they are). */
static void key(struct sbuf *b, const char *k) {
  char buf[64];
  size_t n = 0, at = 0;
  int comma = b->s[b->len - 1] != '{';
  if (comma) buf[at++] = ',';
  buf[at++] = '"';
  while (k[n] && n < sizeof buf - 4) buf[at++] = k[n++]; /* a short key: no strlen */
  if (k[n]) { /* over 60 bytes: not one of ours, the full printer */
    if (comma) sbuf_append(b, ",", 1);
    json_put_string(b, k);
    sbuf_append(b, ":", 1);
    return;
  }
  buf[at++] = '"';
  buf[at++] = ':';
  sbuf_append(b, buf, at);
}

void evtext_open(struct sbuf *b) {
  b->len = 0;
  sbuf_append(b, "{", 1);
}

void evtext_str(struct sbuf *b, const char *k, const char *s) {
  key(b, k);
  json_put_string(b, s);
}

void evtext_num(struct sbuf *b, const char *k, double d) {
  key(b, k);
  /* an integer (an index, a count): its digits, which is what
   * json_put_number writes for one (-0 as 0); anything else, NaN too,
   * goes to it */
  if (d > -1e15 && d < 1e15) {
    long long x = (long long)d;
    if ((double)x == d) {
      char tmp[24];
      unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
      char *q = util_dec_before(tmp + sizeof tmp, u);
      if (x < 0) *--q = '-';
      sbuf_append(b, q, (size_t)(tmp + sizeof tmp - q));
      return;
    }
  }
  json_put_number(b, d);
}

void evtext_bool(struct sbuf *b, const char *k, int v) {
  key(b, k);
  if (v) sbuf_append(b, "true", 4);
  else sbuf_append(b, "false", 5);
}

void evtext_close(struct sbuf *b) { sbuf_append(b, "}", 1); }
