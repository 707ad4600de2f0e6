/* call.h - the context of one tool call, and the workspace it runs in.
 *
 * struct call_ctx says who is calling a tool and under which run and
 * budget; it is passed down through tool_call and into every nested
 * sandbox, so limits and caller identity follow the call. struct runtime
 * holds the workspace's handles (config, tool registry, store, skills,
 * pipeline); runtime.c (the composition root) fills it, and code in every
 * layer from tools/ up reads it through ctx->rt. This header includes
 * nothing above tools/: what a lower layer needs from the root (a sandbox
 * with the Lua API installed) comes as a function pointer runtime.c sets.
 */
#ifndef LUAGENT_CALL_H
#define LUAGENT_CALL_H

#include <stdatomic.h>
#include <stdbool.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "err.h"
#include "sandbox.h"
#include "store.h"
#include "tool.h"

/* Who is calling a tool (DESIGN.md, Callers). Rules match on the kind and
 * the name. automation: a file in automations/ (named by its `name`);
 * script: `luagent run FILE` (named by the workspace-relative path, or the
 * absolute path outside the workspace), so saving a script under a name
 * never earns an automation's rules; mcp: a client of `luagent mcp serve`. */
enum caller_kind {
  CALLER_OPERATOR,
  CALLER_MODEL,
  CALLER_AUTOMATION,
  CALLER_SKILL,
  CALLER_SCRIPT,
  CALLER_MCP,
  CALLER_KIND_COUNT
};
const char *caller_kind_name(enum caller_kind k);
int caller_kind_parse(const char *s, enum caller_kind *out);

struct event_sink;  /* events.h */
struct call_ctx;

struct llm_client;
struct budget;

struct runtime {
  char *workspace;              /* absolute path */
  struct config *cfg;
  struct tool_registry *tools;
  /* The workspace's store, opened lazily by runtime_store (race-free:
   * threads calling it at once get one store); every thread may use it
   * (store.h: a connection per thread inside). */
  struct store *_Atomic store;
  struct skillset *skills;      /* skills.h; NULL until loaded */
  struct security *sec;         /* security.h */
  struct sb_output out;         /* where print/log go (default: stdout/stderr) */
  /* The run journal of delegate() calls made without an event sink (from
   * scripts and skills): opened by the first, shared by all (journal.h is
   * thread-safe), closed by runtime_free. */
  struct journal *_Atomic journal;
  int verbose;
  /* A sandbox with the Lua API installed (runtime.c sets it; see
   * runtime_sandbox below). */
  int (*sandbox_fn)(struct runtime *rt, struct call_ctx *ctx, struct sandbox **out, struct err *e);
  /* Readies a sandbox made by sandbox_fn for another call (see
   * runtime_sandbox_reuse below). */
  int (*sandbox_reuse_fn)(struct runtime *rt, struct call_ctx *ctx, struct sandbox *sb,
                          struct err *e);
  /* Makes the model client instead of the config's providers when set
   * (luagent test's scripted model: a test never reaches the network).
   * NULL: llm_client_for reads `providers`. */
  int (*llm_fn)(struct runtime *rt, struct llm_client **out, struct err *e);
  /* The MCP servers of luagent.lua's `mcp` (mcp/mcp.h); their tools are in
   * `tools`, their processes start on a first call. NULL when none. */
  struct mcp *mcp;
  /* The run budget (loop/react.h) for a model call made outside the ReAct
   * loop (an MCP server's sampling request): budget_check_fn says whether
   * one more model call fits up the chain (ERR_LIMIT, "budget_exceeded"
   * otherwise), budget_charge_fn counts one call and its tokens. runtime.c
   * sets both; NULL: such a call is refused. */
  int (*budget_check_fn)(struct budget *b, struct err *e);
  void (*budget_charge_fn)(struct budget *b, long tokens);
  /* Test doubles (`luagent test`); NULL in every other command. */
  struct rt_fakes *fakes;
};

/* What `luagent test` puts between a workspace and the outside world. Each
 * hook may be NULL (then the real thing runs). They may be called from
 * parallel tool threads: the owner serialises what it shares. */
struct rt_fakes {
  /* Answers http.request after the pipeline and the http_allow and secret
   * checks passed, instead of the network. request: {method, url, headers
   * (secret references stay {secret = NAME}, never resolved), body}; on
   * success *response is {status, headers, body} (the caller frees). A
   * failure is the tool's error. */
  int (*http)(void *ud, struct call_ctx *ctx, const cJSON *request, cJSON **response,
              struct err *e);
  /* Decides an escalated call instead of the configured approver.
   * request: {tool, args, args_hash, caller = {kind, name}, impact, reason,
   * run_id}; *verdict: {decision = "approve"|"deny"|"edit", args (edit),
   * reason, by} (the caller frees). */
  int (*approve)(void *ud, struct call_ctx *ctx, const cJSON *request, cJSON **verdict,
                 struct err *e);
  /* The wall clock (unix seconds) that time.now reports. */
  double (*now)(void *ud);
  /* Sees every tool_call once it is decided (and ran, if allowed): the
   * arguments that ran (or were refused), the pipeline's decision and who
   * made it, and "ok" or the error code. */
  void (*observe)(void *ud, struct call_ctx *ctx, const char *tool, const cJSON *args,
                  const char *decision, const char *decided_by, const char *status);
  void *ud;
};

/* The store, opened on first use; safe to call from any thread, also
 * while others call it for the first time: one store is opened and all
 * get it. */
int runtime_store(struct runtime *rt, struct store **out, struct err *e);

/* Remaining budget of a run; nested runs get a child that can never exceed
 * its parent (see react.h). NULL means unlimited except for sandbox limits. */
struct budget;

struct caller {
  enum caller_kind kind;
  char name[128];               /* automation/skill/agent name; "" if none */
};

/* State shared by every context of one run (see call_ctx.run). */
struct run_state {
  /* Set once an open_world result arrives anywhere under a model-initiated
   * call; from then on the model's medium+ calls escalate. */
  volatile int taint;
  /* tools.call from scripts in the whole run, against config
   * limits.tool_calls (a runaway loop must not fill the disk with audit
   * rows). Atomic: parallel tool threads share it. */
  _Atomic unsigned long script_calls;
};

/* Code mode (loop/codemode.h): the scope a model's Lua chunk runs in.
 * Only the chunk's own context points at one: tools.call, tools.list and
 * tools.exists there see exactly `tools`, and tool_call refuses any other
 * name as unknown (the same message a missing tool gets, so the chunk
 * cannot even learn what exists). A tool's handler runs without it (a
 * skill tool's own inner calls are the skill's, exactly as when the model
 * calls that tool directly); a delegate() the chunk starts keeps it, so a
 * nested loop never offers more than the chunk could reach. */
struct chunk_scope {
  const char *const *tools; /* exact full names, NULL-terminated */
  bool delegate;            /* delegate() is installed in the chunk */
  /* Runs one tools.call of the chunk (budget, journal, the call summary,
   * then tool_call); the tools API calls it instead of tool_call. */
  int (*call)(void *ud, struct call_ctx *ctx, const char *name, const cJSON *args,
              cJSON **result, struct err *e);
  void *ud;
};

struct call_ctx {
  struct runtime *rt;
  struct caller caller;
  char run_id[40];
  struct budget *budget;
  struct event_sink *events;    /* may be NULL */
  struct sb_limits limits;      /* for sandboxes this call creates */
  int depth;                    /* nesting of tool calls through Lua tools */
  /* What belongs to the run as a whole: every context of one run (nested
   * skill calls, parallel tool threads, delegate()) points at the same
   * struct; call_ctx_init points it at run_own. */
  struct run_state *run;
  struct run_state run_own;
  bool under_model;             /* this call descends from a model's tool call */
  /* Parallel tool threads split what the caller's sandbox has left: each
   * gets 1/share of its memory and instructions (0 or 1: all of it). */
  unsigned share;
  volatile int *stop;           /* set by the operator to stop; may be NULL */
  /* The tool list of the ReAct loop this call comes from (a JSON array of
   * names and patterns, borrowed), or NULL when the loop offers what skill
   * selection picks. skills.find and skills.load keep inside it. */
  const cJSON *tool_scope;
  /* The model run this call comes from, as it was started (react_run
   * sets them on the model's context; borrowed, NULL: the defaults): its
   * provider and base system prompt. With caller.name (the agent
   * profile) they are the run's identity, which a delegate() the model's
   * own code makes (caller kind model: a code-mode chunk) inherits and
   * may not change (delegate.c). */
  const char *run_provider;
  const char *run_system;
  struct sandbox *sb;           /* the sandbox this call came from, if any */
  const struct chunk_scope *chunk; /* code mode: the chunk's reach; NULL elsewhere */
};

/* The run's shared state (see struct call_ctx). A context made without
 * call_ctx_init (run NULL) uses its own. */
static inline struct run_state *call_ctx_run(struct call_ctx *c) {
  return c->run ? c->run : &c->run_own;
}
static inline int call_ctx_tainted(struct call_ctx *c) { return call_ctx_run(c)->taint; }
static inline void call_ctx_taint(struct call_ctx *c) { call_ctx_run(c)->taint = 1; }
/* True for the model's own calls and for every call nested under one. An
 * MCP client (mcp serve) is an outside agent, in practice another model
 * that carries what it read to its next call: its calls count as the
 * model's, for taint above all. */
static inline bool call_ctx_model_chain(const struct call_ctx *c) {
  return c->caller.kind == CALLER_MODEL || c->caller.kind == CALLER_MCP || c->under_model;
}

/* True when ctx may reach tool name: always outside a code-mode chunk,
 * else only the chunk's listed tools. */
bool call_ctx_may_reach(const struct call_ctx *c, const char *name);

/* Fills a context for a caller with the runtime's default limits. */
void call_ctx_init(struct call_ctx *ctx, struct runtime *rt, enum caller_kind kind,
                   const char *name);
/* call_ctx_init for a run whose id is already made (run_id; a daemon
 * worker's job carries it): no id is drawn (a getrandom per run). */
void call_ctx_init_run(struct call_ctx *ctx, struct runtime *rt, enum caller_kind kind,
                       const char *name, const char *run_id);
/* A fresh run id ("r-" + time + random). */
void runtime_new_run_id(char out[40]);

/* A fresh sandbox for a call made as ctx: the run's deadline is fixed in
 * ctx (nested calls inherit it), the sandbox gets ctx's limits, watches
 * ctx's stop flag, has the Lua API installed, and becomes ctx->sb. The
 * caller frees it with sandbox_free (and restores ctx->sb if it matters). */
static inline int runtime_sandbox(struct runtime *rt, struct call_ctx *ctx,
                                  struct sandbox **out, struct err *e) {
  return rt->sandbox_fn(rt, ctx, out, e);
}

/* Readies sb, made by runtime_sandbox for an earlier call and idle since,
 * for a call made as ctx, exactly as runtime_sandbox would set up a new
 * one (ctx's limits within its caller's room, its deadline and stop flag;
 * sb becomes ctx->sb) and as clean (sandbox_recycle). The Lua API in sb
 * still reads the context it was installed with: the caller copies the
 * new call's context into that same struct first. <0: free sb instead. */
static inline int runtime_sandbox_reuse(struct runtime *rt, struct call_ctx *ctx,
                                        struct sandbox *sb, struct err *e) {
  return rt->sandbox_reuse_fn(rt, ctx, sb, e);
}

#endif
