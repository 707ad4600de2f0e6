/* events.h - everything a run does is an event sent to sinks.
 *
 * Types: "run_start", "text_delta", "tool_call_start", "tool_args_delta",
 * "approval_requested", "approval_queued" (the queued request's id),
 * "approval_decided", "tool_result", "usage", "turn_complete", "steer", "error", "run_end", "log", "print". data is a
 * JSON object (borrowed by the sink for the call's duration).
 *
 * An emitter holds an event's data either as a cJSON tree (events_emit) or,
 * for the frequent events of the ReAct loop, as its JSON text printed once
 * straight from the emitter's fields plus a function that builds the same
 * tree (events_emit_text). A sink that sets emit_event gets a struct event
 * and asks for the form it needs (event_data, event_json); each form is
 * made at most once per event, whichever sinks ask, and only if one does.
 * A sink that sets only emit gets the tree, as always.
 */
#ifndef LUAGENT_EVENTS_H
#define LUAGENT_EVENTS_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* One event on its way through the chain (on the emitter's stack; a sink
 * borrows it for the call). Read it only through event_data/event_json. */
struct event {
  const char *run_id, *type;
  const cJSON *data;                  /* the tree, or NULL until built */
  const char *json;                   /* the text, or NULL until printed */
  size_t len;                         /* of json */
  cJSON *(*build)(const void *fields); /* makes the tree from fields (caller frees) */
  const void *fields;
  cJSON *own_data; /* built here, freed by the emitter's events_emit_* */
  char *own_json;  /* printed here, likewise */
};

struct event_sink {
  void (*emit)(void *ud, const char *run_id, const char *type, const cJSON *data);
  void *ud;
  struct event_sink *next; /* sinks chain: emit() walks the list */
  /* Optional (last, so {emit, ud, next} initialisers stay valid): when set
   * it is called instead of emit. */
  void (*emit_event)(void *ud, struct event *ev);
};

/* Sends an event to every sink in the chain (NULL-safe). data (may be
 * NULL) is borrowed for the call. */
void events_emit(struct event_sink *s, const char *run_id, const char *type, const cJSON *data);
/* Sends an event whose data the emitter holds as JSON text: json (len
 * bytes, not necessarily NUL-terminated) must be exactly what
 * json_print(build(fields), 0) returns, and build must make a new tree
 * (the caller of build frees it). Sinks that want a tree get build's,
 * built once and freed before this returns. Everything is borrowed. */
void events_emit_text(struct event_sink *s, const char *run_id, const char *type,
                      const char *json, size_t len, cJSON *(*build)(const void *fields),
                      const void *fields);

/* The event's data as a tree (NULL when the event has none), built on
 * first use and owned by the event: valid for the sink call. */
const cJSON *event_data(struct event *ev);
/* The event's data as json_print(data, 0) prints it (*len its length, the
 * text NUL-terminated), or NULL when the event has none; printed on first
 * use and owned by the event: valid for the sink call. */
const char *event_json(struct event *ev, size_t *len);

/* Printers for an event's text, so that it is byte for byte what
 * json_print writes for the tree with the same members in the same order
 * (for events_emit_text). evtext_open starts an object (b emptied first),
 * each member call appends one member (key: a literal of printable ASCII
 * with no quote or backslash, written as it is), evtext_close ends it; b
 * holds the whole text only after evtext_close (the "{" comes with the
 * first member). Strings follow json_print's rules (json_put_string),
 * numbers too (json_put_number). */
struct sbuf;
void evtext_open(struct sbuf *b);
void evtext_str(struct sbuf *b, const char *key, const char *s);
void evtext_num(struct sbuf *b, const char *key, double d);
void evtext_bool(struct sbuf *b, const char *key, int v);
void evtext_close(struct sbuf *b);

#endif
