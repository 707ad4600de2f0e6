/* delegate.h - the Lua function delegate(prompt, opts): a ReAct loop run
 * from a script (automation, skill tool) with a restricted tool set.
 *
 *   delegate(prompt, { tools = {"fs.read", "tracks.*"}, schema = {...},
 *                      max_iterations = 4, system = "...", provider = "local",
 *                      agent = "analyst" })
 *
 * Only the tools named (or matched) in opts.tools / the agent profile are
 * offered; with none, the model gets no tools. Tool calls pass tool_call()
 * as caller kind model. With opts.schema the answer must be JSON matching
 * it and comes back decoded (one repair round on a mismatch). The budget is
 * a child of the caller's (or, in a script run without one, of a per-run
 * root budget built from the config's `react` limits), so a delegate never
 * spends more than its caller has left and the caller sees what it spent.
 *
 * Called from the model's own code (a code-mode chunk, caller kind model)
 * the nested run keeps the run's identity: its agent profile (the name the
 * model's calls carry, which rules and hooks match), provider and system
 * prompt; opts.agent, opts.provider or opts.system naming anything else is
 * invalid_args. A skill tool's delegate() (caller kind skill) and a
 * script's choose freely.
 *
 * Errors reach Lua as structured errors: err.code is one of no_provider,
 * budget_exceeded, schema_mismatch, denied, provider_error, stopped,
 * invalid_args.
 */
#ifndef LUAGENT_DELEGATE_H
#define LUAGENT_DELEGATE_H

/* The largest opts.max_iterations (a whole number, checked before any
 * conversion). */
#define DELEGATE_MAX_ITERATIONS 1000

#include "call.h"
#include "err.h"

/* Registers the global delegate() in sb for calls made as ctx (which must
 * outlive the sandbox). */
int delegate_install(struct sandbox *sb, struct call_ctx *ctx, struct err *e);

/* The same operation from C: runs prompt with opts (a JSON object as the
 * Lua table would be, may be NULL); *ret gets the answer (a string, or the
 * decoded JSON with a schema). */
int delegate_run(struct call_ctx *ctx, const char *prompt, const cJSON *opts, cJSON **ret,
                 struct err *e);

#endif
