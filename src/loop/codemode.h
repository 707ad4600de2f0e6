/* codemode.h - code mode: the model writes Lua that calls the tools.
 *
 * In code mode a run offers the model one tool, `lua`, with one string
 * argument `code` (the same definition on every wire format). The system
 * prompt carries a compact Lua API of the tools the run would have offered
 * (one line per tool, from its schema and description) and the rules.
 * Each `lua` call runs in a fresh sandbox as the model's caller (kind
 * model, the agent's name), under the run's budget, with the instruction,
 * memory, deadline and print limits of `code_mode` in luagent.lua. Inside
 * it tools.call reaches exactly those tools, each call through the whole
 * pipeline (rules, hooks, impact, approval, taint, audit) as if the model
 * had made it; delegate() is there only when the run allows it. What goes
 * back to the model is one JSON object: the return value, the captured
 * print output, a one-line summary of the calls, and on error the message
 * (with its line in the chunk) and the limit that stopped it.
 *
 * Events (for the terminal and the run journal): "lua_code" {id, code}
 * when a chunk starts, and "lua_call" {id, n, name, args, ok, code,
 * content, ms} for each call the chunk makes, id being the `lua` call's.
 */
#ifndef LUAGENT_CODEMODE_H
#define LUAGENT_CODEMODE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "call.h"
#include "err.h"

struct budget;
struct sbuf;

/* The name of the one tool code mode offers. */
#define CODEMODE_TOOL "lua"
/* A tool pattern that lets chunks call delegate() (it matches no tool). */
#define CODEMODE_DELEGATE "delegate"

/* `code_mode = { ... }` in luagent.lua: one chunk's limits. */
struct codemode_cfg {
  uint64_t instructions; /* default 10 million */
  size_t memory_bytes;   /* memory_mb, default 32 MiB */
  double deadline_s;     /* default 30 s (never past the run's deadline) */
  size_t print_bytes;    /* captured print output sent back, default 4096 */
  size_t max_code_bytes; /* the code argument, default 32768 */
};
void codemode_cfg_default(struct codemode_cfg *c);
/* Defaults, then `code_mode` from cfg (may be NULL). Errors name the file,
 * line and key. */
int codemode_config(const struct config *cfg, struct codemode_cfg *c, struct err *e);

/* One run's code mode: its limits and the chunk's scope. */
struct codemode {
  struct codemode_cfg cfg;
  char **names;  /* NULL-terminated full names the chunk may reach (owned) */
  bool delegate; /* chunks get delegate() */
  bool readonly; /* every tool in reach is impact read and no delegate():
                    several lua calls of one round may run in parallel */
};

/* Turns a run's offered tools into code mode. *tools is the run's list of
 * tool definitions [{name, description, parameters}]; it is replaced by a
 * list holding only the lua tool (the caller owns the new list), and cm
 * takes its names as the scope. The Lua API of the old list and the rules
 * are appended to system. Returns 0, or fills e (a bad code_mode config). */
int codemode_setup(struct codemode *cm, const struct runtime *rt, cJSON **tools, bool delegate,
                   struct sbuf *system, struct err *e);
void codemode_free(struct codemode *cm); /* zeroed or set up; not the struct itself */

/* The lua tool's definition {name, description, parameters} (caller frees). */
cJSON *codemode_tool_def(void);

/* Appends the API line of one tool definition {name, description,
 * parameters}, e.g. `notes.add{title: string, text: string} -> {path:
 * string}  -- Create a note`, without a newline; returns (a JSON Schema of
 * the result, may be NULL) gives the part after "->". */
void codemode_api_line(const cJSON *def, const cJSON *returns, struct sbuf *out);

/* What one lua call gives back. */
struct codemode_result {
  char *content;   /* for the model (caller frees) */
  bool is_error;
  char code[32];   /* the error code when is_error */
  long inner_calls;  /* tools.call calls the chunk made */
};

/* Runs one lua call of the model: args is the call's argument object
 * (parsed, borrowed), mctx the model's context (caller model, the run's
 * state, events and stop flag), b the run's budget (each inner call is
 * charged to it as a tool call), call_id the model's id for the call (for
 * the events). Never fails as a whole: bad arguments, a failing chunk and
 * a limit all become an error result. */
void codemode_exec(const struct codemode *cm, struct call_ctx *mctx, struct budget *b,
                   const char *call_id, const cJSON *args, struct codemode_result *out);

/* The number in "code:N:" where the message first gives one (0: none). */
int codemode_error_line(const char *msg);

#endif
