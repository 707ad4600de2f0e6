/* runtime.h - the composition root: opens a workspace and wires it.
 *
 * runtime_open loads the config, makes the tool registry (host and memory
 * tools), the security pipeline and, on demand, the store and skills, and
 * fills struct runtime (its fields are in tools/call.h, so every layer can
 * read them without including this header). runtime_install_api installs
 * the Lua API. Only cli/ (and later surfaces beside it) include this
 * header: nothing below runtime.c may (src/LAYERS).
 */
#ifndef LUAGENT_RUNTIME_H
#define LUAGENT_RUNTIME_H

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "call.h"
#include "config.h"
#include "err.h"
#include "sandbox.h"
#include "security.h"
#include "store.h"
#include "tool.h"

/* Opens a workspace: loads config, registers host tools. Skills and the
 * store are opened on demand. */
int runtime_open(const char *workspace, struct runtime **out, struct err *e);
/* As runtime_open, but the pipeline keeps its audit chain and approval
 * queue in the workspace's own state.db even when luagent.lua has
 * `cluster`: for luagent test's throwaway copies, whose rows must never
 * reach the hosts' shared chain. */
int runtime_open_local(const char *workspace, struct runtime **out, struct err *e);
void runtime_free(struct runtime *rt);
/* Installs the Lua API (tools, json, log, print, ...) into a sandbox for
 * the given context; ctx must outlive the sandbox. */
int runtime_install_api(struct runtime *rt, struct sandbox *sb, struct call_ctx *ctx,
                        struct err *e);

/* Runs a script file in a fresh sandbox as caller ctx. args (may be NULL)
 * is a JSON object the script sees as the global `args`; *ret gets its
 * return value (may be NULL). */
int runtime_run_script(struct runtime *rt, struct call_ctx *ctx, const char *path,
                       const cJSON *args, cJSON **ret, struct err *e);

/* The caller name of a script run with `luagent run`: its workspace-relative
 * path ("tools/cleanup.lua"), or its absolute path when it lies outside the
 * workspace, so a name can only be earned by where the file is. */
void runtime_script_name(const struct runtime *rt, const char *path, char *out, size_t n);

/* A workspace-relative display name for a path (never a host path). */
void runtime_display_path(const struct runtime *rt, const char *path, char *out, size_t n);

#endif
