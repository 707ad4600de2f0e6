/* hooks.h - the workspace's Lua hooks (<workspace>/hooks.lua).
 *
 *   return {
 *     before_tool = function(call) -- call = { tool, caller = { kind, name }, args, impact }
 *       if call.tool == "fs.delete" then return "escalate", "deletes need a human" end
 *     end,
 *     after_tool = function(call, result) return result end,  -- nil: unchanged
 *   }
 *
 * before_tool returns nothing (no opinion) or an action ("allow", "deny",
 * "escalate"), a reason and optionally rewritten arguments; the same may
 * come as one table { action =, reason =, args = }. The pipeline only ever
 * makes a decision stricter with it. Each call runs in a fresh sandbox with
 * no tools and small limits (HOOKS_* below); an error or a limit makes
 * hooks_before fail, which the pipeline turns into a deny.
 */
#ifndef LUAGENT_HOOKS_H
#define LUAGENT_HOOKS_H

#include <cjson/cJSON.h>

#include "err.h"
#include "rules.h"
#include "sandbox.h"

#define HOOKS_MEMORY_BYTES (16u << 20)
#define HOOKS_INSTRUCTIONS 10000000ull
#define HOOKS_DEADLINE_S 2.0

struct hooks;

/* Loads <workspace>/hooks.lua: *out is NULL when the file does not exist.
 * The file is run once here so a syntax error or a wrong shape fails at
 * startup, naming hooks.lua:line. */
int hooks_load(const char *workspace, struct hooks **out, struct err *e);
void hooks_free(struct hooks *h);
int hooks_has_before(const struct hooks *h);
int hooks_has_after(const struct hooks *h);

struct hook_verdict {
  enum rule_action action; /* RULE_NONE: no opinion */
  char reason[512];
  cJSON *args; /* rewritten arguments (caller frees), or NULL */
};

/* Runs before_tool(call). deadline_at (util_monotonic, 0 = none) caps the
 * hook's own deadline. Returns 0 with v filled, or <0 (e filled) when the
 * hook failed, hit a limit or returned something malformed. */
int hooks_before(struct hooks *h, const cJSON *call, double deadline_at, struct hook_verdict *v,
                 struct err *e);
/* Runs after_tool(call, result). *out gets a replacement result (caller
 * frees) or NULL for "unchanged". */
int hooks_after(struct hooks *h, const cJSON *call, const cJSON *result, double deadline_at,
                cJSON **out, struct err *e);

#endif
