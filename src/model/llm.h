/* llm.h - model providers: configuration, one model call, retries, fallback.
 *
 * Two wire formats sit behind one interface: OpenAI-compatible chat
 * completions (also Ollama, vLLM, llama.cpp server, LM Studio, OpenRouter)
 * and Anthropic messages. A call streams (SSE) or not; either way the
 * caller sees the same callbacks (text pieces, tool call started, argument
 * pieces) and the same llm_response at the end.
 *
 * The conversation is kept wire-neutral as a cJSON array of messages:
 *   {"role":"user","content":"..."}
 *   {"role":"assistant","content":"...","tool_calls":[{"id","name","arguments"}]}
 *       (name = full tool name, arguments = the raw JSON text the model sent)
 *   {"role":"tool","tool_call_id":"...","name":"...","content":"...","is_error":false}
 * Tools are {"name": full name, "description", "parameters": JSON Schema}.
 * Providers translate both to their wire format; tool names go on the wire
 * through llm_wire_name and come back through the request's reverse map.
 *
 * Retries: 429 (honouring Retry-After), 5xx, connection errors, timeouts
 * and streams that drop before any text reached the operator are retried
 * with exponential backoff and jitter (a stream that breaks while the model
 * is still writing a tool call is retried: nothing of it ran or was kept).
 * Once answer text reached on_text, nothing is retried. A failure that retrying cannot fix (or
 * retries exhausted) falls through to the next provider by priority, unless the call named one.
 */
#ifndef LUAGENT_LLM_H
#define LUAGENT_LLM_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "err.h"

/* LLM_SCRIPT answers from a table of turns instead of the network (see
 * "The scripted provider" below). */
enum llm_kind { LLM_OPENAI, LLM_ANTHROPIC, LLM_SCRIPT };

struct llm_request;
/* Asked for each turn of a scripted provider that has one (luagent test's
 * model.fn): sets *turn to a new turn table (caller frees; the same shape
 * as a turn of `turns`), or fails with e filled. */
typedef int (*llm_script_fn)(void *ud, const struct llm_request *req, cJSON **turn,
                             struct err *e);

struct llm_provider {
  char *name;
  enum llm_kind kind;
  char *base_url; /* ends before /chat/completions or /messages */
  char *model;
  char *api_key;    /* may be NULL (Ollama) */
  double timeout_s; /* per model call (default 120) */
  int priority;     /* lower first */
  int max_tokens;   /* Anthropic requires one (default 4096) */
  bool max_tokens_set;    /* max_tokens came from the config (OpenAI sends it only then) */
  bool max_tokens_legacy; /* OpenAI: send it as "max_tokens", not "max_completion_tokens" */
  int thinking_budget;    /* Anthropic extended thinking budget_tokens; 0 = off */
  /* Prompt caching: Anthropic cache_control breakpoints (system + tools,
   * and the conversation so far); OpenAI prompt_cache_key. Default: on for
   * Anthropic and for api.openai.com, off for other OpenAI-compatible
   * servers (some refuse fields they do not know). */
  bool prompt_cache;
  int max_retries;  /* default 3 */
  double backoff_s; /* first retry delay (default 0.5), doubles each time */
  bool stream;      /* default true */
  bool code_mode;   /* mode = "lua": runs on this provider use code mode unless told */
  /* kind "script": the turns (validated, owned), where they came from (for
   * messages), and an optional function asked instead of the turns. */
  cJSON *script;
  char *script_src;
  llm_script_fn script_fn;
  void *script_ud;
};

struct llm_client;

/* Builds the provider list: `providers` from the config (may be NULL) and
 * the LUAGENT_PROVIDER / LUAGENT_BASE_URL / LUAGENT_MODEL / LUAGENT_API_KEY
 * environment variables (a provider named "env", tried first). Errors name
 * the file and key. With no provider at all: ERR_NOTFOUND, code
 * "no_provider", and a message saying what to set. */
int llm_client_new(const struct config *cfg, struct llm_client **out, struct err *e);
/* The same from a JSON array of provider tables (tests); where names the
 * source in messages. */
int llm_client_from_json(const cJSON *providers, const char *where, struct llm_client **out,
                         struct err *e);
void llm_client_free(struct llm_client *c);
size_t llm_client_count(const struct llm_client *c);
const struct llm_provider *llm_client_provider(const struct llm_client *c, size_t i);

/* The scripted provider. Turns come from `turns = {...}` or `file =
 * "turns.lua"` (a Lua data file returning the list, or a .json file;
 * relative to the workspace) in luagent.lua. A turn is a table:
 *   { text = "answer" }                 the answer, streamed in pieces
 *   { tool = "notes.add", args = {...} } one tool call; args may be a raw
 *                                        JSON string (malformed on purpose)
 *   { tools = { {tool=..., args=...}, ... } }  calls in one answer
 *   { refusal = "..." }, { error = "..." }, { finish = "length" }
 * text may go with tool calls; in text, %{result} is the content of the
 * latest tool result and %{user} the latest user message. The k-th model
 * call after the latest user message gets turn k, so each ask and each chat
 * message starts the script again. A list of alternatives
 *   { { match = "weather", turns = {...} }, { turns = {...} } }
 * answers with the first whose match (a plain, case-insensitive substring)
 * is in the latest user message (no match: always). Past the last turn the
 * call fails naming the script and the turn. Usage is counted as bytes/4.
 *
 * A client with one scripted provider named "script": turns may be NULL
 * when fn is set (fn is then asked for every turn). */
int llm_client_scripted(const cJSON *turns, llm_script_fn fn, void *ud, struct llm_client **out,
                        struct err *e);
/* The turn a script of turns (as llm_client_scripted validated them) gives
 * for req, by the rule above; borrowed from turns. src names the script in
 * errors. For an llm_script_fn that keeps its own turns (luagent test's
 * model.script, which also records every request). */
struct llm_request;
int llm_script_pick(const cJSON *turns, const char *src, const struct llm_request *req,
                    const cJSON **turn, struct err *e);

/* The hook that resolves `api_key_secret` (per thread); llm_client_for
 * sets it to the workspace's secrets store. Without one, a provider naming
 * a secret fails with a clear error. */
typedef int (*llm_secret_fn)(void *ud, const char *name, char **value, struct err *e);
void llm_set_secret_resolver(llm_secret_fn fn, void *ud);

struct runtime;
/* llm_client_new for a workspace: `api_key_secret` is read from its
 * secrets store, and every API key is registered for redaction so it never
 * reaches logs, events or the audit chain. When rt->llm_fn is set (luagent
 * test's scripted model) it makes the client instead. */
int llm_client_for(struct runtime *rt, struct llm_client **out, struct err *e);

/* What a run keeps of the request bodies it sent, so that each model call
 * serialises only what is new: the wire messages of a history it has seen
 * (per wire format; the printed system prompt, tools and prompt cache key
 * are kept for the process, llm_body.c). A piece is reused only when what
 * it was made from is the same JSON as the request holds now, node for
 * node and byte for byte (what json_identical compares, checked against a
 * flat record of the source kept with the piece); any change (compaction,
 * a trimmed or replaced message, a nested field edited in place, another
 * tool list) rebuilds that piece, so the body is always exactly what a
 * full rebuild prints. One per run or chat session, used by one thread at
 * a time; it holds records and printed text of the messages it covers.
 *
 * That check walks everything reused, every call. A caller that owns the
 * conversation can vouch instead: a request's stamp (llm_body_stamp) says
 * "since the last request on this cache with this same stamp, the tools
 * and every message sent are unchanged, node for node (the same nodes,
 * nothing edited in place); at most messages were appended at the end".
 * Then the cache reuses what it kept for that stamp after checking only
 * node identity (the same array, the same node last in the history, the
 * same tools array). The owner takes a new stamp at every other change
 * (compaction, a tool offered, a new run over a kept conversation);
 * stamp 0 vouches for nothing. */
struct llm_body_cache;
struct llm_body_cache *llm_body_cache_new(void);
void llm_body_cache_free(struct llm_body_cache *c); /* NULL is a no-op */
/* A stamp never handed out before in this process (not 0). Thread-safe. */
unsigned long llm_body_stamp(void);

struct llm_request {
  const char *system;    /* may be NULL */
  const cJSON *messages; /* neutral messages (borrowed) */
  const cJSON *tools;    /* array or NULL (borrowed) */
  bool no_tools;         /* final round: tools stay declared, tool_choice none */
  const char *provider;  /* use only this provider (NULL: all, by priority) */
  double deadline_at;    /* util_monotonic() deadline, 0 = none */
  volatile int *stop;    /* non-zero aborts the call (may be NULL) */
  int max_tokens;        /* 0: the provider's */
  double timeout_s;      /* per attempt; 0: the provider's (the smaller wins) */
  bool force_nostream;   /* ask without streaming even if the provider streams */
  size_t max_answer_bytes;    /* cap on the answer text (0: LLM_MAX_ANSWER) */
  size_t max_tool_args_bytes; /* cap on one tool call's arguments (0: LLM_MAX_TOOL_ARGS) */
  struct llm_body_cache *body_cache; /* NULL: every body is built in full */
  unsigned long stamp; /* the caller's word on body_cache (see above); 0: none */
};

/* Default caps, the same on the streamed and the whole-body path. A call
 * past one ends with ERR_LIMIT, code "answer_too_large" or
 * "tool_args_too_large"; the text up to the cap is kept in the response
 * and is never retried. */
#define LLM_MAX_ANSWER ((size_t)4 << 20)
#define LLM_MAX_TOOL_ARGS ((size_t)1 << 20)
/* Per response, whatever the per-item caps say: the tool calls it may
 * start, the content blocks it may keep, and the bytes of all tool
 * arguments and of all kept blocks together (so 800 calls or 150 blocks
 * cannot each take their own cap's worth of memory). */
#define LLM_MAX_CALLS 128
#define LLM_MAX_BLOCKS 256
#define LLM_MAX_ARGS_TOTAL ((size_t)16 << 20)

struct llm_callbacks {
  void (*on_text)(void *ud, const char *s, size_t n);
  void (*on_tool_start)(void *ud, int index, const char *id, const char *name);
  void (*on_tool_args)(void *ud, int index, const char *piece, size_t n);
  void (*on_retry)(void *ud, const char *provider, int attempt, double delay_s, const char *reason);
  void *ud;
};

struct llm_tool_call {
  char *id;
  char *name;      /* full tool name (unmapped); the wire name if unknown */
  char *arguments; /* raw JSON text as the model sent it */
};

/* Why the model stopped, the same for both wire formats. */
enum llm_finish {
  LLM_FINISH_NONE,    /* the provider did not say */
  LLM_FINISH_STOP,    /* a complete answer: "stop", "end_turn", "stop_sequence" */
  LLM_FINISH_TOOLS,   /* "tool_calls", "tool_use" */
  LLM_FINISH_LENGTH,  /* cut at the output limit: "length", "max_tokens" */
  LLM_FINISH_REFUSAL, /* a refusal: OpenAI `refusal`, "content_filter"; Anthropic "refusal" */
  LLM_FINISH_PAUSE,   /* Anthropic "pause_turn": send the turn back to let it continue */
  LLM_FINISH_OTHER,   /* anything else */
};

struct llm_response {
  char *text; /* "" when none */
  struct llm_tool_call *calls;
  size_t ncalls;
  char stop_reason[32]; /* "end_turn"/"stop", "tool_use"/"tool_calls", "max_tokens"... */
  enum llm_finish finish;
  char *refusal;  /* the refusal text when finish is LLM_FINISH_REFUSAL ("" if none given) */
  char *thinking; /* Anthropic thinking text (journal only, never the answer); NULL if none */
  int redacted_thinking; /* how many redacted_thinking blocks came */
  /* Anthropic: the assistant's content blocks in the order they came
   * (thinking with its signature, server_tool_use, *_tool_result, text with
   * citations, unknown types), to be sent back unchanged in the next
   * request; NULL for OpenAI. Owned; freed by llm_response_free. */
  cJSON *blocks;
  long input_tokens, output_tokens;
  long cache_read_tokens;  /* cache_read_input_tokens / prompt_tokens_details.cached_tokens */
  long invalid_utf8;       /* bytes of invalid UTF-8 the provider sent, kept as U+FFFD */
  long cache_write_tokens; /* cache_creation_input_tokens */
  char provider[64];   /* who answered */
  int attempts;        /* HTTP attempts over all providers */
  bool output_started; /* answer text reached on_text (no retry after this) */
};
void llm_response_free(struct llm_response *r);

/* One model call with retries and fallback. Fills *out (free with
 * llm_response_free, also on error: it may hold partial output). Errors:
 * code "provider_error" (with the provider's error type and message, e.g.
 * "overloaded_error: Overloaded", or for a body that is not what was asked
 * for, the HTTP status, content type and first bytes), "stopped",
 * "timeout", "no_provider" for an unknown provider name. A refusal or a
 * truncated answer is not an error here: see out->finish. */
int llm_complete(struct llm_client *c, const struct llm_request *req,
                 const struct llm_callbacks *cb, struct llm_response *out, struct err *e);

/* The wire name for a full tool name: [a-zA-Z0-9_-]{1,64}; '.' becomes
 * "__", other characters '_', and long names are cut and suffixed with a
 * hash. out must hold 65 bytes. */
void llm_wire_name(const char *full, char out[65]);
/* The full name for a wire name given the tools offered, or NULL. */
const char *llm_full_name(const cJSON *tools, const char *wire);

/* A copy of v (caller frees) with every object's keys in byte order, so a
 * schema built from a Lua table (whose order changes from one process to
 * the next) is the same bytes on every request and a provider's prompt
 * cache can hit. Arrays keep their order. */
cJSON *llm_sorted_dup(const cJSON *v);
/* The same bytes as llm_sorted_dup when printed, for a request body that
 * lives shorter than v: a reference to v (no copy) when its keys are in
 * byte order already (a schema seen before: every turn of a task sends
 * the same tools), else the sorted copy. Either way the caller frees it
 * with cJSON_Delete, which leaves v alone. */
cJSON *llm_sorted_view(const cJSON *v);
/* A key naming the stable prefix of a request (model, system prompt,
 * tools): "lg-" and 32 hex digits, for OpenAI's prompt_cache_key. out must
 * hold 40 bytes. */
void llm_cache_key(const struct llm_provider *p, const struct llm_request *req, char out[40]);

/* ---- between llm.c and the wire modules (llm_openai.c, llm_anthropic.c) */

/* llm_body.c: the body cache's pieces, one set per wire format. */
enum { LLM__WIRE_OPENAI, LLM__WIRE_ANTHROPIC, LLM__WIRES };
/* The pieces and the messages go through the emitter the bodies are
 * written on (llm_emit.h: llm__emit_piece, llm__emit_messages). */
/* For tests: calls whose cached history was reused, and full rebuilds. */
void llm__body_cache_stats(const struct llm_body_cache *c, long *hits, long *rebuilds);
/* For tests: reuses taken on a stamp's word (history and pieces, each
 * counted), without walking the records. */
long llm__body_cache_vouched(const struct llm_body_cache *c);
/* For tests: open wire messages kept from one request that joined the
 * history at the next without being walked again. */
long llm__body_cache_kept(const struct llm_body_cache *c);
struct llm__stream; /* per-attempt state shared with llm.c */
struct llm__wire {
  /* Builds the HTTP body (caller frees) for the request. */
  char *(*body)(const struct llm_provider *p, const struct llm_request *req, bool stream);
  /* Path appended to base_url. */
  const char *path;
  /* Handles one SSE event (data is NUL-terminated, len bytes before the
   * NUL, which may hold other NULs). Returns 0, or <0 with e filled for a
   * provider error event. */
  int (*event)(struct llm__stream *s, const char *event, const char *data, size_t len,
               struct err *e);
  /* Parses a whole non-streamed body. */
  int (*whole)(struct llm__stream *s, const char *body, struct err *e);
};
extern const struct llm__wire llm__openai_wire;
extern const struct llm__wire llm__anthropic_wire;

/* Helpers the wire modules use to report what arrived. */
void llm__text(struct llm__stream *s, const char *t, size_t n);
/* Starts tool call number `index` (per the wire's own numbering). */
void llm__tool_start(struct llm__stream *s, int index, const char *id, const char *wire_name);
void llm__tool_args(struct llm__stream *s, int index, const char *piece, size_t n);
void llm__usage(struct llm__stream *s, long input, long output);
/* Cached prompt tokens read and written (-1: not reported). */
void llm__usage_cache(struct llm__stream *s, long read, long write);
/* A piece of refusal text (OpenAI `refusal`; Anthropic stop_details): it
 * never joins the answer; the response's finish becomes LLM_FINISH_REFUSAL. */
void llm__refusal(struct llm__stream *s, const char *t, size_t n);
void llm__finish(struct llm__stream *s, enum llm_finish f);
/* Thinking text, kept for the journal only; redacted counts one
 * redacted_thinking block. */
void llm__thinking(struct llm__stream *s, const char *t, size_t n);
void llm__redacted(struct llm__stream *s);
/* Content blocks (Anthropic), by the wire's block index: start takes
 * ownership of block; append adds a streamed piece to the string member
 * key (linear: pieces are collected and set when the block stops; key
 * "input" is parsed as JSON then); push adds item (owned) to the array
 * member key; stop finishes the block. type is NULL for an unknown index. */
void llm__block_start(struct llm__stream *s, int index, cJSON *block);
void llm__block_append(struct llm__stream *s, int index, const char *key, const char *piece,
                       size_t n);
void llm__block_push(struct llm__stream *s, int index, const char *key, cJSON *item);
void llm__block_stop(struct llm__stream *s, int index);
const char *llm__block_type(struct llm__stream *s, int index);
/* The provider's name, for messages. */
const char *llm__provider_name(struct llm__stream *s);
/* The same from a usage object whose token counts are under in_key and
 * out_key (the two wire formats name them differently); NULL u is a no-op. */
void llm__usage_json(struct llm__stream *s, const cJSON *u, const char *in_key,
                     const char *out_key);
void llm__stop_reason(struct llm__stream *s, const char *reason);
void llm__done(struct llm__stream *s); /* the stream ended properly */
/* llm_fast.c: the stream events read without a cJSON tree: OpenAI chunks
 * with text, tool call, finish and usage pieces; Anthropic text and
 * input_json deltas, block starts and stops, message start, delta and
 * stop, and pings. Each returns 1 when it handled the event (the same
 * helper calls the full parse would make, in the same order), 0 when the
 * event is anything else or anything unusual: then nothing was reported
 * and the caller parses it in full. finish is the wire's stop hook
 * (Anthropic's gets NULL details: events with details go to the full
 * parse). data and len are the event's (a NUL before len: the full parse,
 * which reads up to it). */
int llm__fast_openai(struct llm__stream *s, const char *data, size_t len,
                     void (*finish)(struct llm__stream *s, const char *reason));
int llm__fast_anthropic(struct llm__stream *s, const char *data, size_t len,
                        void (*finish)(struct llm__stream *s, const char *reason,
                                       const cJSON *details));
/* Whether this stream may use them (tests turn them off), and the count
 * of events they handled. */
bool llm__fast_ok(struct llm__stream *s);
void llm__fast_count(struct llm__stream *s);
/* The stream's slot for what llm_fast.c keeps between events (NULL at
 * first), and its release (NULL is a no-op), called by each reset. */
struct llm__fast_memo;
struct llm__fast_memo **llm__fast_memo(struct llm__stream *s);
void llm__fast_memo_free(struct llm__fast_memo *m);
/* The stream's scratch buffer for one event's decoded strings, emptied
 * (kept from one event to the next, so an event allocates nothing once
 * the buffer has grown; freed by each reset). */
struct sbuf;
struct sbuf *llm__fast_scratch(struct llm__stream *s);
/* For tests: the stream bytes in pieces (as curl would hand them over)
 * read as one streamed attempt of provider p, the fast path on or off;
 * fills *out as llm_complete would and *fast with the events the fast
 * path took. Returns the attempt's error (e filled) or 0. */
int llm__replay(const struct llm_provider *p, const struct llm_request *req,
                const char *const *pieces, const size_t *lens, size_t npieces, bool fast,
                const struct llm_callbacks *cb, struct llm_response *out, long *fast_events,
                struct err *e);

/* The counter json_parse_lossy adds to: provider text with invalid UTF-8
 * is kept (as U+FFFD) and the fact reported in the response. */
size_t *llm__invalid_utf8(struct llm__stream *s);

#endif
