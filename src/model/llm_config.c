/* llm_config.c - llm_client_new: the provider list from luagent.lua and the
 * environment (kept apart from llm.c so that code without a config module,
 * such as the provider unit test, links without it). */
#include <stdio.h>
#include <string.h>

#include "call.h"
#include "llm.h"
#include "llm_impl.h"
#include "secrets.h"

int llm_client_new(const struct config *cfg, struct llm_client **out, struct err *e) {
  const cJSON *prov = cfg ? config_get(cfg, "providers") : NULL;
  char where[4200] = "luagent.lua";
  if (cfg && cfg->path[0]) {
    const char *base = strrchr(cfg->path, '/');
    int line = config_line_of(cfg->path, "providers");
    if (line > 0)
      snprintf(where, sizeof where, "%s:%d", base ? base + 1 : cfg->path, line);
    else
      snprintf(where, sizeof where, "%s", base ? base + 1 : cfg->path);
  }
  /* a script provider's `file` is relative to the workspace */
  char dir[4096] = ".";
  if (cfg && cfg->path[0]) {
    snprintf(dir, sizeof dir, "%s", cfg->path);
    char *slash = strrchr(dir, '/');
    if (slash)
      *slash = 0;
    else
      snprintf(dir, sizeof dir, ".");
  }
  return llm__client_from_json(prov, where, dir, out, e);
}

static int resolve_secret(void *ud, const char *name, char **value, struct err *e) {
  return secrets_resolve(ud, name, value, e);
}

int llm_client_for(struct runtime *rt, struct llm_client **out, struct err *e) {
  if (rt->llm_fn) return rt->llm_fn(rt, out, e);
  llm_set_secret_resolver(resolve_secret, rt);
  int rc = llm_client_new(rt->cfg, out, e);
  llm_set_secret_resolver(NULL, NULL);
  for (size_t i = 0; !rc && i < llm_client_count(*out); i++) {
    const char *k = llm_client_provider(*out, i)->api_key;
    if (k && *k) secrets_register_value(k, strlen(k));
  }
  return rc;
}
