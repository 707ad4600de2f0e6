/* events.h - everything a run does is an event sent to sinks.
 *
 * Types: "run_start", "text_delta", "tool_call_start", "tool_args_delta",
 * "approval_requested", "approval_queued" (the queued request's id),
 * "approval_decided", "tool_result", "usage", "turn_complete", "steer", "error", "run_end", "log", "print". data is a
 * JSON object (borrowed by the sink for the call's duration).
 */
#ifndef LUAGENT_EVENTS_H
#define LUAGENT_EVENTS_H

#include <cjson/cJSON.h>

struct event_sink {
  void (*emit)(void *ud, const char *run_id, const char *type, const cJSON *data);
  void *ud;
  struct event_sink *next; /* sinks chain: emit() walks the list */
};

/* Sends an event to every sink in the chain (NULL-safe). */
void events_emit(struct event_sink *s, const char *run_id, const char *type, const cJSON *data);

#endif
