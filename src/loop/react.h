/* react.h - the ReAct loop: model call, tool calls through the security
 * pipeline, results back, repeat until a text-only answer or a limit.
 *
 * Everything the loop does is an event sent to ctx->events (see events.h):
 * run_start, text_delta, tool_call_start, tool_args_delta, tool_result,
 * usage, thinking, refusal, retry, note, turn_complete, error, run_end. The loop never prints.
 *
 * Budgets nest: a loop started inside a tool (delegate()) gets a child of
 * the caller's budget; every charge goes up the chain, so the child can
 * never spend more than any ancestor has left and the parent sees what the
 * child spent.
 */
#ifndef LUAGENT_REACT_H
#define LUAGENT_REACT_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>

#include "call.h"
#include "err.h"
#include "llm.h"

struct sbuf;

struct react_limits {
  int max_iterations;         /* model rounds (default 10) */
  long max_model_calls;       /* incl. final and repair rounds (default 2 x iterations) */
  long max_tool_calls;        /* default 50 */
  long max_tokens;            /* input + output over all calls; 0 = unlimited */
  double deadline_s;          /* wall clock for the whole run (default 300) */
  double call_timeout_s;      /* per model call; 0 = the provider's */
  long max_tool_result_chars; /* longer results are cut with a marker (default 16000) */
  long max_answer_bytes;      /* one model call's answer text (default LLM_MAX_ANSWER) */
  long max_tool_args_bytes;   /* one tool call's arguments (default LLM_MAX_TOOL_ARGS) */
  bool parallel_tools;        /* read-only tools of one round in threads (default true) */
};
/* Defaults, then the `react = {...}` table (and the top-level
 * max_tool_result_chars) of the config (cfg may be NULL).
 * Errors name the key. */
int react_limits_load(const struct config *cfg, struct react_limits *l, struct err *e);
void react_limits_default(struct react_limits *l);

struct budget {
  struct budget *parent;
  pthread_mutex_t mu;
  int max_iterations, iterations;
  long max_model_calls, model_calls;
  long max_tool_calls, tool_calls;
  long max_tokens, tokens; /* max 0 = unlimited */
  double deadline_at;      /* util_monotonic(); 0 = none */
};
/* Starts a budget from limits under parent (may be NULL): the deadline is
 * the earlier of the two. */
void budget_init(struct budget *b, const struct react_limits *l, struct budget *parent);
void budget_destroy(struct budget *b);
/* 0 if one more model call fits everywhere up the chain, else ERR_LIMIT
 * with code "budget_exceeded" and which limit in the message. */
int budget_check_model_call(struct budget *b, struct err *e);
int budget_check_tool_call(struct budget *b, struct err *e);
void budget_charge(struct budget *b, int iterations, long model_calls, long tool_calls,
                   long tokens);
/* Seconds left before the nearest deadline up the chain (1e9 if none). */
double budget_time_left(struct budget *b);
/* The earliest deadline up the chain (0 if none). */
double budget_deadline(struct budget *b);

/* How the model uses tools: one native tool call per tool (tools), or
 * code mode (lua: one `lua` tool whose code calls the tools; codemode.h).
 * default: lua when the provider the run starts on says mode = "lua". */
enum react_mode { REACT_MODE_DEFAULT, REACT_MODE_TOOLS, REACT_MODE_LUA };
/* "lua" / "tools" -> *out; <0 for anything else. */
int react_mode_parse(const char *s, enum react_mode *out);

struct react_opts {
  const char *message;        /* the operator's message (NULL: continue messages) */
  const char *system;         /* NULL: the default system prompt file */
  const cJSON *tool_patterns; /* array of names/patterns ("fs.*"); NULL: selection */
  const char *provider;       /* NULL: any, by priority */
  struct react_limits limits;
  cJSON *messages;           /* conversation (in/out); NULL: a fresh one */
  /* What the run's model requests reuse of the ones before (llm.h): a
   * chat passes one per session, so each message's requests append to
   * the history already printed. NULL: the run keeps its own. */
  struct llm_body_cache *body_cache;
  const char *kind;          /* journal kind: "ask", "delegate", ... */
  const char *name;          /* journal name (agent, automation), may be NULL */
  const char *agent;          /* the agent profile (delegate's opts.agent): the model's caller name */
  const char *parent_run_id; /* the run this one is nested in, or NULL */
  /* Code mode: the tools (tool_patterns, or the skills' selection) become
   * the API of the one `lua` tool; the pattern "delegate" in tool_patterns
   * gives chunks delegate(). */
  enum react_mode mode;

  /* --- operator control (issue 7: chat.h, context.h); all optional --- */
  /* Extra system text for this run (relevant memories), appended to the
   * composed system prompt; NULL: none. */
  const char *context;
  /* The context holds memories a tainted run wrote: the run starts tainted. */
  int context_tainted;
  /* Steer: called before every model call; appends the operator's queued
   * lines to out and returns how many (0: none). They join the messages
   * as one user message after the latest tool results (event "steer"). */
  int (*steer)(void *ud, struct sbuf *out);
  void *steer_ud;
  /* Compaction (context.h): called before every model call with the
   * messages about to be sent; may rewrite them in place, and then must
   * return true (false: it left every message as it was, node for node;
   * the loop's next request vouches for them, llm.h). NULL: off. */
  bool (*compact)(void *ud, struct call_ctx *ctx, struct budget *b, const char *system,
                  const cJSON *tools, cJSON *messages);
  void *compact_ud;
  /* Reflexion (context.h): called with a candidate final answer; returns
   * 1 and fills feedback when the answer should be retried, 0 to accept
   * (also when the critique failed: fail open). NULL: off, no extra call. */
  int (*reflect)(void *ud, struct call_ctx *ctx, struct budget *b, const cJSON *messages,
                 const char *answer, int retries_done, struct sbuf *feedback);
  void *reflect_ud;
};

struct react_result {
  char *answer;    /* final text ("" if none); caller frees */
  /* "ok", "failed", "stopped", "limit", "loop", "refused" (the model
   * refused: err.code "refused", the refusal text in err.msg), "truncated"
   * (cut at the output limit: err.code "truncated", the partial answer kept) */
  char status[16];
  struct err err; /* why, when not ok */
  int iterations;
  long model_calls, tool_calls, input_tokens, output_tokens;
  long cache_read_tokens, cache_write_tokens; /* cached prompt tokens (also in usage events) */
};
void react_result_free(struct react_result *r);

/* Runs the loop as ctx (its run_id, caller, events, budget parent, stop
 * flag). llm is borrowed. Returns 0 when the run produced an answer, <0
 * otherwise with e filled (code "budget_exceeded", "provider_error",
 * "stopped", "loop_detected", "no_provider"...); *out is filled either way. */
int react_run(struct call_ctx *ctx, struct llm_client *llm, const struct react_opts *o,
              struct react_result *out, struct err *e);

/* The system prompt text (caller frees), from the first that exists:
 * $LUAGENT_SYSTEM_PROMPT (a file), config `system_prompt` (a workspace file
 * or the text itself), <workspace>/system_prompt.md, the repository's
 * lua/system_prompt.md. */
char *react_system_prompt(const struct runtime *rt);

/* True if name matches pattern ("fs.*", "*", exact). */
bool react_tool_matches(const char *pattern, const char *name);

#endif
