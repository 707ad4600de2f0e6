/* mcp_impl.h - what the mcp modules share: the parsed config of a server,
 * its connection state, and the JSON-RPC helpers. */
#ifndef LUAGENT_MCP_IMPL_H
#define LUAGENT_MCP_IMPL_H

#include <pthread.h>

#include "mcp.h"
#include "mcp_proc.h"

struct call_ctx;

#define MCP_DEFAULT_TIMEOUT_S 60.0
#define MCP_DEFAULT_MAX_MESSAGE ((size_t)16 << 20)
#define MCP_MAX_NOTIFICATIONS 1000 /* per request, before the server counts as flooding */
#define MCP_MAX_PAGES 100          /* pages of one tools/list or resources/list answer */
#define MCP_LOG_MAX ((size_t)1 << 20)

struct mcp_server {
  struct mcp *owner;
  /* from luagent.lua */
  char *name;
  char *url;              /* Streamable HTTP: the endpoint; NULL for stdio */
  cJSON *headers;         /* HTTP headers: NAME = "v" or { secret = "S" }; owned, or NULL */
  char **argv;            /* stdio: command, args..., NULL */
  cJSON *env;             /* owned copy, or NULL */
  char *cwd;              /* absolute, or NULL (the workspace) */
  double timeout_s;
  size_t max_message;
  char *impact;           /* override for every tool, or NULL */
  cJSON *open_world;      /* override (a boolean), or NULL; owned */
  cJSON *tool_cfg;        /* { TOOL = { impact=, open_world= } }, owned, or NULL */
  int sampling;           /* sampling/createMessage allowed (mcp_sample.c) */
  int sampling_approve;   /* each one goes to the approver first */
  long sampling_max_tokens; /* the most a sampled answer may have */
  char *sampling_provider;  /* only this provider, or NULL (any, by priority) */
  int samples;              /* samplings during the current request (under mu) */
  char config_hash[65];   /* of command, args, env, cwd: a pin holds for this config only */
  char trust_path[4300];
  char log_path[4300];

  /* the pin (trust file), read by mcp_open */
  cJSON *pinned;          /* array of tool definitions, or NULL when not trusted */
  int pin_stale;          /* a pin exists but for another config */
  cJSON *problems;        /* array of strings */
  int registered;         /* tools registered from the pin */

  /* the connection; everything below under mu */
  pthread_mutex_t mu;
  struct mcp_proc proc;
  int http_up;            /* HTTP: initialized */
  char session[256];      /* HTTP: Mcp-Session-Id, "" when none */
  int ready;              /* initialized and listed */
  char version[16];       /* negotiated protocol version */
  int stateless;          /* 2026-07-28 over stdio: no handshake, _meta on every request */
  cJSON *server_info;
  cJSON *live;            /* latest tools/list: array of definitions */
  int list_changed;       /* notifications/tools/list_changed since the last list */
  long next_id;
  int deaths;             /* in a row, for the backoff */
  double died_at;
  double started_at;
  /* notifications/progress of the call in flight (mcp_progress.c) */
  unsigned progress_seen;
  cJSON *progress_last;   /* the latest past MCP_PROGRESS_KEEP, journaled at the end */
};

struct mcp {
  struct runtime *rt;
  struct mcp_server **v;
  size_t n;
};

/* mcp_config.c: parses `mcp` of luagent.lua into m->v. */
int mcp__config(struct mcp *m, struct err *e);
void mcp__server_free(struct mcp_server *s);

/* mcp_client.c */
/* Sends request method with params (borrowed, may be NULL) and waits for
 * its answer: *result gets the new "result" value. Starts the server
 * first when it is not running (with backoff after deaths). ctx (may be
 * NULL) gives the stop flag and the event sink. s->mu must be held. A
 * JSON-RPC error answer gives code "mcp_error" and the server's message. */
/* One page of a paginated list result res (tools/list, resources/list):
 * moves the items of its array `key` to the end of all and sets *cursor (freed first) to its nextCursor,
 * or NULL on the last page. -1 when res has no array `key`. */
int mcp__page_take(cJSON *all, cJSON *res, const char *key, char **cursor);
int mcp__request(struct mcp *m, struct mcp_server *s, struct call_ctx *ctx, const char *method,
                 const cJSON *params, cJSON **result, struct err *e);
/* Makes sure the server runs, is initialized and its tool list is fresh.
 * s->mu must be held. */
int mcp__ready(struct mcp *m, struct mcp_server *s, struct call_ctx *ctx, struct err *e);
/* Stops the server process, or ends the HTTP session (the connection is
 * gone: state reset). */
void mcp__stop(struct mcp_server *s);
/* A request or notification from the server (has "method"): answered or
 * noted. */
void mcp__on_server_message(struct mcp_server *s, struct call_ctx *ctx, const cJSON *msg);

/* Sends request method with params (borrowed, may be NULL) and waits at
 * most timeout_s for its answer: *answer gets the whole answer message, a
 * result or a JSON-RPC error. The failures are those of mcp__request
 * (timeout, death, a protocol break: the server is then stopped), except
 * that keep leaves a stdio server running after a timeout (the request is
 * cancelled; a late answer is dropped by id). */
int mcp__exchange(struct mcp_server *s, struct call_ctx *ctx, const char *method,
                  const cJSON *params, double timeout_s, int keep, cJSON **answer, struct err *e);

/* mcp_discover.c: protocol revision 2026-07-28 (stateless) on stdio. */
#define MCP_STATELESS_VERSION "2026-07-28"
#define MCP_DISCOVER_TIMEOUT_S 10.0 /* at most; a legacy server may never answer the probe */
/* (one that does not answer in time is kept running and gets initialize:
 * it may be a legacy server ignoring the probe, or one slow to start, as
 * npx fetching a package, which killing would only make slower) */
/* Probes a freshly started stdio server with server/discover. 0 with
 * *modern = 1: it speaks 2026-07-28 (s->stateless, s->version and
 * s->server_info are set; no initialize follows). 0 with *modern = 0: a
 * legacy server (it answered an error other than -32022, garbage or
 * nothing in time, or died: when s->proc.pid is 0 the caller starts it
 * again),
 * to be initialized as before. Nonzero: a modern server that speaks no
 * version luagent speaks ("mcp_version"), or the operator stopped. */
int mcp__discover(struct mcp_server *s, struct call_ctx *ctx, int *modern, struct err *e);
/* A new params object: params (borrowed, may be NULL) with the _meta every
 * stateless request carries (protocol version, client info, no client
 * capabilities) in place of any the caller had. */
cJSON *mcp__stateless_params(const cJSON *params);
/* 0 when a stateless answer's resultType is "complete" or absent; an
 * error naming method for "input_required" (not answered yet) and for
 * any other value. */
int mcp__stateless_result(const struct mcp_server *s, const char *method, const cJSON *result,
                          struct err *e);

/* mcp_elicit.c: the answer (a new result object) to elicitation/create
 * with params, decided by the operator through the approver; ctx NULL
 * (no run to ask for) declines. */
cJSON *mcp__elicit(struct mcp_server *s, struct call_ctx *ctx, const cJSON *params);

/* mcp_sample.c: the answer to sampling/createMessage with params: *result
 * a new CreateMessageResult {role, content, model, stopReason}, or NULL
 * with *code and msg (a JSON-RPC error: refused, declined, over budget,
 * the provider failed). Refused unless the server's config allows it and
 * there is a run (ctx) to charge: the model call runs through llm_complete
 * with no tools, counts against ctx's budget, goes to the approver first
 * when config says approve = true, and is audited as mcp.NAME.sampling. */
#define MCP_SAMPLING_DEFAULT_MAX_TOKENS 1024
#define MCP_MAX_SAMPLES 10 /* per request of ours: a server cannot loop the model */
void mcp__sample(struct mcp_server *s, struct call_ctx *ctx, const cJSON *params, cJSON **result,
                 int *code, char *msg, size_t msgsz);

/* mcp_http.c: POSTs msg to s->url. want_id > 0: waits (until deadline) for
 * the answer with that id in a JSON body or an event stream, handling the
 * server's messages before it; *answer gets the whole answer message.
 * want_id 0: a notification or response, answered 202. */
int mcp__http_post(struct mcp *m, struct mcp_server *s, struct call_ctx *ctx, const cJSON *msg,
                   long want_id, double deadline, cJSON **answer, struct err *e);
/* Ends the HTTP session (DELETE), best effort. */
void mcp__http_close(struct mcp *m, struct mcp_server *s);

/* The hash a pin keeps of a tool definition: its name, title, description,
 * inputSchema, outputSchema, annotations and execution. */
void mcp__tool_hash(const cJSON *tool, char out[65]);
/* The definition named name in an array of them, or NULL. */
const cJSON *mcp__find_tool(const cJSON *tools, const char *name);
/* 1 when an MCP tool name is one luagent can register: 1 to 128 of
 * [A-Za-z0-9_./-]. */
int mcp__tool_name_ok(const char *name);
/* 1 when the absolute path is the workspace's data/ folder (what fs.*
 * writes) or inside it, symlinks resolved, or cannot be judged. */
/* Progress events of one call, bounded (mcp_progress.c): at most
 * MCP_PROGRESS_MESSAGE bytes of message each, the first MCP_PROGRESS_KEEP
 * journaled, then only the latest when the call ends. Under s->mu. */
#define MCP_PROGRESS_KEEP 20
#define MCP_PROGRESS_MESSAGE 1024
void mcp__progress_begin(struct mcp_server *s);
void mcp__progress(struct mcp_server *s, struct call_ctx *ctx, const cJSON *params);
void mcp__progress_end(struct mcp_server *s, struct call_ctx *ctx);
int mcp__in_writable(const char *workspace, const char *path);

/* mcp_lua.c: registers mcp.resources, mcp.read and mcp.prompt. */
int mcp__register_lua_tools(struct mcp *m, struct err *e);

/* mcp_serve.c: one client's session of `mcp serve`, for the HTTP server.
 * mcp__serve_handle answers one message (its answer, if any, appended to
 * answer as one JSON text) and returns 1 when it was a successful
 * initialize. patterns is borrowed. */
struct serve;
struct serve *mcp__serve_new(struct runtime *rt, const cJSON *patterns,
                            void (*log)(void *ud, const char *line), void *ud);
int mcp__serve_handle(struct serve *sv, const char *msg, size_t len, struct sbuf *answer);
const char *mcp__serve_client(const struct serve *sv);
void mcp__serve_free(struct serve *sv);

#endif
