/* react_events.c - see react_events.h. Each event has a printer and a tree
 * builder over the same fields, member for member in the same order: the
 * printer is what every sink that takes text (the run journal) gets, the
 * builder what a sink that wants a tree gets, built only then. */
#include "react_events.h"

#include "events.h"

static void send(struct call_ctx *ctx, struct sbuf *b, const char *type,
                 cJSON *(*build)(const void *), const void *fields) {
  events_emit_text(ctx->events, ctx->run_id, type, b->s, b->len, build, fields);
}

static void add_str(cJSON *d, const char *k, const char *s) {
  if (s) cJSON_AddStringToObject(d, k, s); /* NULL: no member (and so in the text) */
}

static void put_str(struct sbuf *b, const char *k, const char *s) {
  if (s) evtext_str(b, k, s);
}

/* ---- text_delta --------------------------------------------------------- */

static cJSON *tree_text(const void *f) {
  cJSON *d = cJSON_CreateObject();
  add_str(d, "text", f);
  return d;
}

void react_ev_text(struct call_ctx *ctx, struct sbuf *b, const char *text) {
  if (!ctx->events) return;
  evtext_open(b);
  put_str(b, "text", text);
  evtext_close(b);
  send(ctx, b, "text_delta", tree_text, text);
}

/* ---- tool_call_start, tool_args_delta ----------------------------------- */

struct piece {
  int index;
  const char *id, *name, *delta;
};

static cJSON *tree_tool_start(const void *fields) {
  const struct piece *p = fields;
  cJSON *d = cJSON_CreateObject();
  cJSON_AddNumberToObject(d, "index", p->index);
  add_str(d, "id", p->id);
  add_str(d, "name", p->name);
  return d;
}

void react_ev_tool_start(struct call_ctx *ctx, struct sbuf *b, int index, const char *id,
                         const char *name) {
  if (!ctx->events) return;
  struct piece p = {.index = index, .id = id, .name = name};
  evtext_open(b);
  evtext_num(b, "index", index);
  put_str(b, "id", id);
  put_str(b, "name", name);
  evtext_close(b);
  send(ctx, b, "tool_call_start", tree_tool_start, &p);
}

static cJSON *tree_tool_args(const void *fields) {
  const struct piece *p = fields;
  cJSON *d = cJSON_CreateObject();
  cJSON_AddNumberToObject(d, "index", p->index);
  add_str(d, "delta", p->delta);
  return d;
}

void react_ev_tool_args(struct call_ctx *ctx, struct sbuf *b, int index, const char *delta) {
  if (!ctx->events) return;
  struct piece p = {.index = index, .delta = delta};
  evtext_open(b);
  evtext_num(b, "index", index);
  put_str(b, "delta", delta);
  evtext_close(b);
  send(ctx, b, "tool_args_delta", tree_tool_args, &p);
}

/* ---- tool_result -------------------------------------------------------- */

static cJSON *tree_tool_result(const void *fields) {
  const struct react_ev_result *f = fields;
  cJSON *d = cJSON_CreateObject();
  add_str(d, "id", f->id);
  add_str(d, "name", f->name);
  cJSON_AddBoolToObject(d, "ok", f->ok);
  if (!f->ok) add_str(d, "code", f->code);
  add_str(d, "content", f->content);
  cJSON_AddNumberToObject(d, "ms", f->ms);
  if (f->parallel) cJSON_AddTrueToObject(d, "parallel");
  return d;
}

void react_ev_tool_result(struct call_ctx *ctx, struct sbuf *b, const struct react_ev_result *f) {
  if (!ctx->events) return;
  evtext_open(b);
  put_str(b, "id", f->id);
  put_str(b, "name", f->name);
  evtext_bool(b, "ok", f->ok);
  if (!f->ok) put_str(b, "code", f->code);
  put_str(b, "content", f->content);
  evtext_num(b, "ms", f->ms);
  if (f->parallel) evtext_bool(b, "parallel", 1);
  evtext_close(b);
  send(ctx, b, "tool_result", tree_tool_result, f);
}

/* ---- usage, turn_complete ----------------------------------------------- */

static cJSON *tree_usage(const void *fields) {
  const struct react_ev_usage *f = fields;
  cJSON *d = cJSON_CreateObject();
  add_str(d, "provider", f->provider);
  cJSON_AddNumberToObject(d, "input_tokens", f->input_tokens);
  cJSON_AddNumberToObject(d, "output_tokens", f->output_tokens);
  cJSON_AddNumberToObject(d, "cache_read_input_tokens", f->cache_read);
  cJSON_AddNumberToObject(d, "cache_creation_input_tokens", f->cache_write);
  cJSON_AddNumberToObject(d, "attempts", f->attempts);
  return d;
}

void react_ev_usage(struct call_ctx *ctx, struct sbuf *b, const struct react_ev_usage *f) {
  if (!ctx->events) return;
  evtext_open(b);
  put_str(b, "provider", f->provider);
  evtext_num(b, "input_tokens", f->input_tokens);
  evtext_num(b, "output_tokens", f->output_tokens);
  evtext_num(b, "cache_read_input_tokens", f->cache_read);
  evtext_num(b, "cache_creation_input_tokens", f->cache_write);
  evtext_num(b, "attempts", f->attempts);
  evtext_close(b);
  send(ctx, b, "usage", tree_usage, f);
}

struct turn {
  int iteration;
  double tool_calls;
  const char *stop_reason;
};

static cJSON *tree_turn(const void *fields) {
  const struct turn *t = fields;
  cJSON *d = cJSON_CreateObject();
  cJSON_AddNumberToObject(d, "iteration", t->iteration);
  cJSON_AddNumberToObject(d, "tool_calls", t->tool_calls);
  add_str(d, "stop_reason", t->stop_reason);
  return d;
}

void react_ev_turn(struct call_ctx *ctx, struct sbuf *b, int iteration, double tool_calls,
                   const char *stop_reason) {
  if (!ctx->events) return;
  struct turn t = {iteration, tool_calls, stop_reason};
  evtext_open(b);
  evtext_num(b, "iteration", iteration);
  evtext_num(b, "tool_calls", tool_calls);
  put_str(b, "stop_reason", stop_reason);
  evtext_close(b);
  send(ctx, b, "turn_complete", tree_turn, &t);
}
