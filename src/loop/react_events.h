/* react_events.h - the ReAct loop's frequent events (streamed pieces, tool
 * call starts, tool results, usage, turn ends), sent to the sinks as JSON
 * text printed once from the loop's own fields (events_emit_text), not as
 * a cJSON tree built, printed by the journal and freed per event. A sink
 * that wants a tree gets one built from the same fields, the tree these
 * events always had: json_print of it is the text, byte for byte (the
 * printers follow json_print's rules; tests/unit/loop/test_react_events.c
 * checks both forms against the old trees on hostile content).
 *
 * Each function sends one event to ctx->events (nothing at all when the
 * chain is empty) for ctx->run_id; b is the caller's scratch buffer for
 * the text (emptied first, kept for reuse; the caller frees it). A NULL
 * string field is left out of the event, as cJSON_AddStringToObject left
 * it out. Everything is borrowed for the call. */
#ifndef LUAGENT_REACT_EVENTS_H
#define LUAGENT_REACT_EVENTS_H

#include <stdbool.h>

#include "call.h"
#include "util.h"

/* "text_delta" {text} */
void react_ev_text(struct call_ctx *ctx, struct sbuf *b, const char *text);
/* "tool_call_start" {index, id, name} */
void react_ev_tool_start(struct call_ctx *ctx, struct sbuf *b, int index, const char *id,
                         const char *name);
/* "tool_args_delta" {index, delta} */
void react_ev_tool_args(struct call_ctx *ctx, struct sbuf *b, int index, const char *delta);

struct react_ev_result {
  const char *id, *name;
  bool ok;
  const char *code; /* only when !ok */
  const char *content;
  double ms;     /* as stored: rounded down to the microsecond by the caller */
  bool parallel; /* ran on its own thread */
};
/* "tool_result" {id, name, ok, code (when !ok), content, ms, parallel (when true)} */
void react_ev_tool_result(struct call_ctx *ctx, struct sbuf *b, const struct react_ev_result *f);

struct react_ev_usage {
  const char *provider;
  double input_tokens, output_tokens, cache_read, cache_write, attempts;
};
/* "usage" {provider, input_tokens, output_tokens, cache_read_input_tokens,
 * cache_creation_input_tokens, attempts} */
void react_ev_usage(struct call_ctx *ctx, struct sbuf *b, const struct react_ev_usage *f);
/* "turn_complete" {iteration, tool_calls, stop_reason} */
void react_ev_turn(struct call_ctx *ctx, struct sbuf *b, int iteration, double tool_calls,
                   const char *stop_reason);

#endif
