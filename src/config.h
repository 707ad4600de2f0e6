/* config.h - the workspace configuration, <workspace>/luagent.lua.
 *
 * The file returns a Lua table, evaluated in a sandbox with no tools and
 * converted to JSON. Every top-level key is declared in config.c with its
 * type; an unknown key or a wrong type is an error naming file, line and
 * key. Modules read their own keys with config_get().
 */
#ifndef LUAGENT_CONFIG_H
#define LUAGENT_CONFIG_H

#include <cjson/cJSON.h>

#include "err.h"
#include "origin.h"
#include "sandbox.h"

/* Default of limits.tool_calls: enough for any batch job we have seen,
 * far below what fills a disk with audit rows (200,000 calls in 5 s). */
#define CONFIG_SCRIPT_TOOL_CALLS 10000

/* One entry of `secrets = { NAME = { origins = { ... } } }`: the only
 * origins http.request may send secret NAME to. */
struct config_secret {
  char *name;
  struct origin *origins;
  size_t n_origins;
};

struct config {
  cJSON *root;             /* the whole table as JSON ({} when no file) */
  char path[4096];         /* luagent.lua path ("" when absent) */
  struct sb_limits limits; /* from `limits`, defaults filled in */
  struct origin_pattern *allow; /* http_allow, parsed: n_allow entries */
  size_t n_allow;
  struct config_secret *secrets; /* declared secrets, n_secrets of them */
  size_t n_secrets;
  size_t fs_max_bytes;     /* fs.* size cap */
  size_t max_output_bytes; /* print/log cap per run */
  unsigned long max_script_tool_calls; /* limits.tool_calls: tools.call from scripts per run */
};

/* Loads <workspace>/luagent.lua (missing file: defaults). */
int config_load(const char *workspace, struct config **out, struct err *e);
/* Evaluates a Lua data file (luagent.lua, a scripted provider's turns) in
 * a sandbox with no tools and tight limits (16 MiB, 10M instructions, 5 s);
 * *out gets what it returns as JSON (NULL for nothing). chunkname is what
 * errors show. */
int config_eval_file(const char *path, const char *chunkname, cJSON **out, struct err *e);
/* Loads an explicit path (NULL: defaults only). */
int config_load_file(const char *path, struct config **out, struct err *e);
void config_free(struct config *c);

/* A top-level key, or NULL. Borrowed. */
const cJSON *config_get(const struct config *c, const char *key);
/* Helpers for nested lookups with defaults: "a.b.c" paths. */
double config_number(const struct config *c, const char *path, double dflt);
const char *config_string(const struct config *c, const char *path, const char *dflt);
int config_bool(const struct config *c, const char *path, int dflt);

/* The declaration of secret `name` in `secrets`, or NULL when luagent.lua
 * declares none (then the secret may not be sent anywhere). Borrowed. */
const struct config_secret *config_secret(const struct config *c, const char *name);

/* 1 when origin o is allowed by an http_allow entry. */
int config_http_allowed(const struct config *c, const struct origin *o);

/* Finds the first line in the config file that mentions key as a table
 * field ("key ="), for error messages; 0 when unknown. */
int config_line_of(const char *path, const char *key);

/* Checks that every key of the table t (config path `where`, e.g.
 * "selection") is in the NULL-terminated list known; otherwise fails with
 * "where.key is not a known key (a, b, c)". */
int config_check_keys(const cJSON *t, const char *where, const char *const *known, struct err *e);

/* Adds "luagent.lua:LINE: " in front of an error about the config key
 * `key` (e.g. "selection"; a dotted "selection.rrf_k" is looked up by its
 * last part first), unless the message already names the file. Returns
 * e->rc, so `return config_error_at(cfg, "selection", e);` works. */
int config_error_at(const struct config *c, const char *key, struct err *e);

#endif
