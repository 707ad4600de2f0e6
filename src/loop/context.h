/* context.h - context assembly for the ReAct loop (issue 7): relevant
 * memories in the system text, compaction of long conversations, and the
 * opt-in reflexion critique. All of it plugs into react_run through the
 * hooks in struct react_opts, so react.c stays unaware of the policies.
 *
 * Config (luagent.lua):
 *   context = { window_tokens = 32000, compact_at = 0.7, keep_recent = 6,
 *               memory_items = 5, memory_chars = 2000 }
 *   reflexion = { enabled = false, max_retries = 1 }
 *
 * Tokens are estimated, not counted: ceil(bytes / 4) of the JSON text of
 * the system prompt, the offered tools and the messages (close to what
 * BPE tokenizers give for English and JSON, and cheap).
 *
 * Compaction: before each model call, when the estimate passes
 * compact_at * window_tokens, every message older than the last
 * keep_recent ones (moved back to the nearest user message so a tool
 * result never loses its call) is replaced by one user message holding a
 * summary made by one model call without tools (prompt:
 * lua/compact_prompt.md). When that call fails or no budget is left, the
 * older messages are elided with a marker instead. If the request is still
 * over the threshold, everything before the last user message is elided.
 * Event "compaction" says what happened.
 *
 * Reflexion: after a candidate final answer, one model call without tools
 * (prompt: lua/reflexion_prompt.md) sees the question, the tool results of
 * the turn and the answer, and must reply JSON {"ok": bool, "feedback":
 * text}. On ok=false the feedback goes back as a reviewer note and the
 * loop runs again, at most max_retries times. A failed call or a reply
 * that is not that JSON fails open (the answer stands). Event "reflexion".
 * Disabled, the hook is not installed: no extra call, identical requests.
 */
#ifndef LUAGENT_CONTEXT_H
#define LUAGENT_CONTEXT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "err.h"

struct runtime;
struct llm_client;
struct react_opts;

struct context_cfg {
  long window_tokens;  /* 0: no compaction (default 0) */
  double compact_at;   /* share of the window (default 0.7) */
  int keep_recent;     /* messages kept in full (default 6) */
  size_t memory_items; /* relevant memories in the system text (default 5; 0: off) */
  size_t memory_chars; /* their size bound in bytes (default 2000) */
  bool reflexion;      /* reflexion.enabled (default false) */
  int max_retries;     /* reflexion.max_retries (default 1) */
};

/* Defaults, then `context` and `reflexion` from cfg (may be NULL). Errors
 * name luagent.lua:LINE and the key. */
int context_config(const struct config *cfg, struct context_cfg *c, struct err *e);

/* Estimated tokens of a request (see above). Any argument may be NULL. */
long context_estimate_tokens(const char *system, const cJSON *tools, const cJSON *messages);

/* Per-run state behind the hooks; lives as long as the run. */
struct context_state {
  struct context_cfg cfg;
  struct llm_client *llm; /* borrowed */
  char *memories;         /* the memory block for this message (owned) */
  int compactions;        /* how many times this state compacted */
  struct context_sizes *sizes; /* what the estimate measured (context_estimate_run) */
};

/* context_estimate_tokens, the same number, for the hooks of one run: a
 * message or tool list identical (json_identical) to one this state
 * measured before keeps its size, so each turn prints only what is new
 * rather than the whole conversation. */
long context_estimate_run(struct context_state *cs, const char *system, const cJSON *tools,
                          const cJSON *messages);

/* Fills cs for one run of message (the operator's text, may be NULL) and
 * installs the hooks into ro: ro->context gets the relevant memories
 * (a store failure is ignored: memories are a help, not a requirement),
 * ro->compact when window_tokens > 0, ro->reflect when reflexion is on. */
void context_prepare(struct context_state *cs, const struct context_cfg *cfg, struct runtime *rt,
                     struct llm_client *llm, const char *message, struct react_opts *ro);
void context_state_free(struct context_state *cs);

#endif
