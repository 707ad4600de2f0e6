/* tool.h - the tool registry and tool calls.
 *
 * A tool has a full name ("fs.read", "notes.add"), a description, a JSON
 * Schema for its parameters, an impact level, an open_world flag and a
 * handler. tool_call() (policy/security.h) is the one function through
 * which every call passes, whoever asks (operator, model, automation,
 * skill): it validates the arguments, runs the security pipeline, runs the
 * handler and records the result. Nothing in Lua holds a handler.
 */
#ifndef LUAGENT_TOOL_H
#define LUAGENT_TOOL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "err.h"

enum impact { IMPACT_READ, IMPACT_LOW, IMPACT_MEDIUM, IMPACT_HIGH, IMPACT_CRITICAL };
const char *impact_name(enum impact i);
/* Returns 0 and sets *out, or <0 for an unknown name. */
int impact_parse(const char *s, enum impact *out);

struct call_ctx;  /* runtime.h */
struct schema;    /* schema.h */
struct tool;

/* A handler gets validated args (borrowed) and sets *result to a new JSON
 * value it hands over, or fills e and returns <0. */
typedef int (*tool_handler)(struct call_ctx *ctx, const struct tool *t, const cJSON *args,
                            cJSON **result, struct err *e);

/* A handler that can answer without allocating (optional, beside the
 * handler): it sets *result to a value borrowed from args (args itself or
 * a part of it: read-only, valid as long as args is) and returns 0, or
 * returns 1 when it cannot answer that way (the handler runs instead), or
 * fills e and returns <0. The pipeline uses it only for a caller that
 * takes a borrowed result (tool_call_lent, security.h) and copies the
 * value when anything must change it (a secret to redact, an after hook). */
typedef int (*tool_handler_lent)(struct call_ctx *ctx, const struct tool *t, const cJSON *args,
                                 const cJSON **result, struct err *e);

/* The name a tool goes by on a provider's wire: [a-zA-Z0-9_-]{1,64}. '.'
 * becomes "__", any other byte outside that set '_', and a name over 64
 * bytes is cut and ends in a hash of the full name. The mapping is not
 * one-to-one ("a__b.c" and "a.b__c" both give "a__b__c"), so the registry
 * refuses a tool whose wire name another tool has (toolreg_add). */
void tool_wire_name(const char *full, char out[65]);

struct tool {
  char *name;         /* full name, "skill.tool" or "prefix.name" */
  char wire[65];      /* tool_wire_name(name): unique in the registry */
  char *description;
  cJSON *params;      /* JSON Schema object; owned */
  struct schema *schema; /* params compiled (schema.h); owned, borrows params */
  enum impact impact;
  bool open_world;
  tool_handler handler;
  tool_handler_lent lent; /* NULL, or the same call answered without allocating */
  void *ud;           /* handler data */
  void (*ud_free)(void *ud);
  char *source;       /* where it was defined: "host" or a workspace path:line */
  char *skill;        /* owning skill name, or NULL for host tools */
  cJSON *returns;     /* JSON Schema of the result, or NULL (owned): documentation
                         only, shown in code mode's API (loop/codemode.h) */
};

struct tool_registry;

struct tool_registry *toolreg_new(void);
void toolreg_free(struct tool_registry *r);
/* Adds a tool. params_json is a JSON Schema text (NULL: an empty object
 * schema). Strings are copied; ud is owned (ud_free called on free).
 * Fails on a duplicate name, on a wire name (tool_wire_name) another tool
 * already has (code "wire_name_collision", naming both tools and where
 * each was defined: the first one stays, the second is refused), or on a
 * schema that is not an object. */
int toolreg_add(struct tool_registry *r, const char *name, const char *description,
                const char *params_json, enum impact impact, bool open_world,
                tool_handler handler, void *ud, void (*ud_free)(void *), const char *source,
                const char *skill, struct err *e);
/* Same with an already-parsed schema, which the registry takes over. */
int toolreg_add_parsed(struct tool_registry *r, const char *name, const char *description,
                       cJSON *params, enum impact impact, bool open_world, tool_handler handler,
                       void *ud, void (*ud_free)(void *), const char *source, const char *skill,
                       struct err *e);
/* Same for a tool defined outside the workspace (an MCP server's): params
 * are compiled in lenient mode (SCHEMA_LENIENT: unknown keywords ignored,
 * every standard one enforced). */
int toolreg_add_external(struct tool_registry *r, const char *name, const char *description,
                         cJSON *params, enum impact impact, bool open_world, tool_handler handler,
                         void *ud, void (*ud_free)(void *), const char *source, struct err *e);
const struct tool *toolreg_find(const struct tool_registry *r, const char *name);
/* The tool whose wire name is wire, or NULL. */
const struct tool *toolreg_find_wire(const struct tool_registry *r, const char *wire);
/* Sets the documented result schema of tool name, taking returns over
 * (freed at once when there is no such tool). */
void toolreg_set_returns(struct tool_registry *r, const char *name, cJSON *returns);
/* Gives tool name a lent handler (see tool_handler_lent): it must answer
 * exactly as the tool's handler does. No such tool: nothing happens. */
void toolreg_set_lent(struct tool_registry *r, const char *name, tool_handler_lent lent);
size_t toolreg_count(const struct tool_registry *r);
/* Tools in name order. */
const struct tool *toolreg_at(const struct tool_registry *r, size_t i);

/* Checks that an argument object means one thing to every stage: no
 * object inside it holds a key twice. what names it in the message
 * ("args", "args rewritten by hooks.lua"). 0, or ERR_INVALID with code
 * "invalid_args" naming the path and the key. */
int tool_args_check(const cJSON *args, const char *what, struct err *e);

#endif
