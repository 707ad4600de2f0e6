/* hooks.c - see hooks.h. */
#include "hooks.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "util.h"

#define HOOKS_MAX_FILE (1u << 20)

struct hooks {
  char *code; /* the wrapped chunk, see wrap() */
  size_t len;
  int has_before, has_after;
  /* One loaded sandbox kept between calls (compiling hooks.lua per call
   * costs more than the rest of the pipeline). It is replaced once half of
   * its time, instruction or memory budget is used, so every call gets at
   * least half of each; after any error it is thrown away. */
  pthread_mutex_t mu;
  struct sandbox *cached;
  double cached_at;
};

/* Wraps hooks.lua so that every return value of a hook comes back as one
 * table: sandbox_call only returns the first value. The prefix sits on the
 * file's first line, so line numbers in errors stay those of hooks.lua. */
static char *wrap(const char *src, size_t n, size_t *len) {
  struct sbuf b = {0};
  sbuf_puts(&b, "local __luagent_hooks = (function(...) ");
  sbuf_append(&b, src, n);
  sbuf_puts(&b,
            "\nend)(...)\n"
            "if type(__luagent_hooks) ~= 'table' then\n"
            "  error('hooks.lua must return a table { before_tool = function, after_tool = "
            "function }', 0)\n"
            "end\n"
            /* An unknown key (before_tools) would silently disable a hook:
             * report the first one, hooks_load names its line. */
            "local __unknown\n"
            "for k in pairs(__luagent_hooks) do\n"
            "  if k ~= 'before_tool' and k ~= 'after_tool' then __unknown = tostring(k) break end\n"
            "end\n"
            "local __b, __a = __luagent_hooks.before_tool, __luagent_hooks.after_tool\n"
            "if __b ~= nil and type(__b) ~= 'function' then error('hooks.lua: before_tool must "
            "be a function', 0) end\n"
            "if __a ~= nil and type(__a) ~= 'function' then error('hooks.lua: after_tool must "
            "be a function', 0) end\n"
            "return {\n"
            "  unknown = __unknown,\n"
            "  before_tool = __b and function(call)\n"
            "    local action, reason, args = __b(call)\n"
            "    return { action = action, reason = reason, args = args }\n"
            "  end,\n"
            "  after_tool = __a and function(call, result)\n"
            "    local r = __a(call, result)\n"
            "    return { result = r }\n"
            "  end,\n"
            "}\n");
  *len = b.len;
  return sbuf_take(&b);
}

static void hook_limits(struct sb_limits *l, double deadline_at) {
  sb_limits_default(l);
  l->memory_bytes = HOOKS_MEMORY_BYTES;
  l->instructions = HOOKS_INSTRUCTIONS;
  l->deadline_s = HOOKS_DEADLINE_S;
  l->deadline_at = deadline_at;
  l->output_bytes = 64 * 1024;
}

/* A fresh sandbox with the hooks module loaded. */
static int hooks_fresh(struct hooks *h, double deadline_at, struct sandbox **out, cJSON **mod,
                       struct err *e) {
  struct sb_limits lim;
  hook_limits(&lim, deadline_at);
  int rc = sandbox_new(&lim, out, e);
  if (rc) return rc;
  if ((rc = sandbox_run_string(*out, h->code, h->len, "hooks.lua", mod, e))) {
    sandbox_free(*out);
    *out = NULL;
  }
  return rc;
}

/* Takes the cached sandbox when it is still fresh enough, else makes one. */
static int hooks_acquire(struct hooks *h, double deadline_at, struct sandbox **out, double *created,
                         struct err *e) {
  struct sandbox *sb = NULL;
  double now = util_monotonic();
  *created = now;
  /* A run whose deadline comes before a fresh hook's own: a sandbox of its
   * own, capped at that deadline. */
  if (deadline_at > 0 && deadline_at < now + HOOKS_DEADLINE_S)
    return hooks_fresh(h, deadline_at, out, NULL, e);
  pthread_mutex_lock(&h->mu);
  sb = h->cached;
  h->cached = NULL;
  double at = h->cached_at;
  pthread_mutex_unlock(&h->mu);
  if (sb &&
      (now - at > HOOKS_DEADLINE_S / 2 || sandbox_instructions_used(sb) > HOOKS_INSTRUCTIONS / 2 ||
       sandbox_memory_used(sb) > HOOKS_MEMORY_BYTES / 2)) {
    sandbox_free(sb);
    sb = NULL;
  }
  if (sb) {
    *created = at;
    *out = sb;
    return 0;
  }
  return hooks_fresh(h, 0, out, NULL, e);
}

/* Gives a sandbox back after a successful call; anything else frees it. */
static void hooks_release(struct hooks *h, struct sandbox *sb, int ok, double created) {
  if (!sb) return;
  if (ok) {
    pthread_mutex_lock(&h->mu);
    if (!h->cached) {
      h->cached = sb;
      h->cached_at = created;
      sb = NULL;
    }
    pthread_mutex_unlock(&h->mu);
  }
  sandbox_free(sb);
}

int hooks_load(const char *workspace, struct hooks **out, struct err *e) {
  *out = NULL;
  char path[4200];
  snprintf(path, sizeof path, "%s/hooks.lua", workspace);
  struct stat st;
  if (stat(path, &st) != 0) {
    if (errno == ENOENT) return 0;
    return err_set(e, ERR_IO, "hooks", "hooks.lua: %s", strerror(errno));
  }
  char *src = NULL;
  size_t n = 0;
  int rc = util_read_file(path, HOOKS_MAX_FILE, &src, &n, e);
  if (rc) {
    err_set(e, rc, "hooks", "hooks.lua: cannot read it (%s)", e ? e->msg : "");
    return rc;
  }
  struct hooks *h = xcalloc(1, sizeof *h);
  pthread_mutex_init(&h->mu, NULL);
  h->code = wrap(src, n, &h->len);
  free(src);
  struct sandbox *sb = NULL;
  cJSON *mod = NULL;
  if ((rc = hooks_fresh(h, 0, &sb, &mod, e))) {
    hooks_free(h);
    return rc;
  }
  const char *unknown = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(mod, "unknown"));
  if (unknown) {
    int line = config_line_of(path, unknown);
    char at[16] = "";
    if (line > 0) snprintf(at, sizeof at, ":%d", line);
    rc = err_set(e, ERR_INVALID, "hooks",
                 "hooks.lua%s: unknown key '%.100s' (expected before_tool, after_tool)", at,
                 unknown);
    cJSON_Delete(mod);
    sandbox_free(sb);
    hooks_free(h);
    return rc;
  }
  cJSON_Delete(mod);
  static const char *const before[] = {"before_tool", NULL}, *const after[] = {"after_tool", NULL};
  h->has_before = sandbox_has_function(sb, before);
  h->has_after = sandbox_has_function(sb, after);
  sandbox_free(sb);
  *out = h;
  return 0;
}

void hooks_free(struct hooks *h) {
  if (!h) return;
  sandbox_free(h->cached);
  pthread_mutex_destroy(&h->mu);
  free(h->code);
  free(h);
}

int hooks_has_before(const struct hooks *h) {
  return h && h->has_before;
}
int hooks_has_after(const struct hooks *h) {
  return h && h->has_after;
}

static int parse_action(const cJSON *a, enum rule_action *out) {
  if (!a || cJSON_IsNull(a)) {
    *out = RULE_NONE;
    return 0;
  }
  if (!cJSON_IsString(a)) return -1;
  if (!strcmp(a->valuestring, "allow"))
    *out = RULE_ALLOW;
  else if (!strcmp(a->valuestring, "escalate"))
    *out = RULE_ESCALATE;
  else if (!strcmp(a->valuestring, "deny"))
    *out = RULE_DENY;
  else
    return -1;
  return 0;
}

int hooks_before(struct hooks *h, const cJSON *call, double deadline_at, struct hook_verdict *v,
                 struct err *e) {
  memset(v, 0, sizeof *v);
  v->action = RULE_NONE;
  if (!hooks_has_before(h)) return 0;
  struct sandbox *sb = NULL;
  double created = 0;
  cJSON *ret = NULL, *argv = cJSON_CreateArray();
  int rc = hooks_acquire(h, deadline_at, &sb, &created, e);
  if (!rc) {
    static const char *const path[] = {"before_tool", NULL};
    cJSON_AddItemToArray(argv, cJSON_Duplicate(call, 1));
    rc = sandbox_call(sb, path, argv, &ret, NULL, e);
  }
  if (rc) {
    err_prefix(e, "hooks.lua before_tool");
    goto out;
  }
  /* { action, reason, args } or, when the hook returned one table, that
   * table in action. An empty table may arrive as [] or {}. */
  const cJSON *act = cJSON_GetObjectItemCaseSensitive(ret, "action");
  const cJSON *why = cJSON_GetObjectItemCaseSensitive(ret, "reason");
  const cJSON *nargs = cJSON_GetObjectItemCaseSensitive(ret, "args");
  if (cJSON_IsObject(act)) {
    why = cJSON_GetObjectItemCaseSensitive(act, "reason");
    nargs = cJSON_GetObjectItemCaseSensitive(act, "args");
    act = cJSON_GetObjectItemCaseSensitive(act, "action");
  }
  if (parse_action(act, &v->action)) {
    rc = err_set(e, ERR_INVALID, "hook_error",
                 "hooks.lua before_tool returned an action that is not \"allow\", \"deny\", "
                 "\"escalate\" or nil");
    goto out;
  }
  if (why && !cJSON_IsNull(why)) {
    if (!cJSON_IsString(why)) {
      rc = err_set(e, ERR_INVALID, "hook_error",
                   "hooks.lua before_tool: the reason must be a string");
      goto out;
    }
    snprintf(v->reason, sizeof v->reason, "%s", why->valuestring);
  }
  if (nargs && !cJSON_IsNull(nargs)) {
    if (cJSON_IsArray(nargs) && !nargs->child) {
      v->args = cJSON_CreateObject(); /* {} from Lua */
    } else if (!cJSON_IsObject(nargs)) {
      rc = err_set(e, ERR_INVALID, "hook_error",
                   "hooks.lua before_tool: rewritten arguments must be a table");
      goto out;
    } else {
      v->args = cJSON_Duplicate(nargs, 1);
    }
  }
out:
  if (rc) {
    cJSON_Delete(v->args);
    v->args = NULL;
  }
  cJSON_Delete(ret);
  cJSON_Delete(argv);
  hooks_release(h, sb, rc == 0, created);
  return rc;
}

int hooks_after(struct hooks *h, const cJSON *call, const cJSON *result, double deadline_at,
                cJSON **out, struct err *e) {
  *out = NULL;
  if (!hooks_has_after(h)) return 0;
  struct sandbox *sb = NULL;
  double created = 0;
  cJSON *ret = NULL, *argv = cJSON_CreateArray();
  int rc = hooks_acquire(h, deadline_at, &sb, &created, e);
  if (!rc) {
    static const char *const path[] = {"after_tool", NULL};
    cJSON_AddItemToArray(argv, cJSON_Duplicate(call, 1));
    cJSON_AddItemToArray(argv, result ? cJSON_Duplicate(result, 1) : cJSON_CreateNull());
    rc = sandbox_call(sb, path, argv, &ret, NULL, e);
  }
  if (rc) {
    err_prefix(e, "hooks.lua after_tool");
  } else {
    cJSON *r = cJSON_GetObjectItemCaseSensitive(ret, "result");
    if (r) *out = cJSON_DetachItemViaPointer(ret, r);
  }
  cJSON_Delete(ret);
  cJSON_Delete(argv);
  hooks_release(h, sb, rc == 0, created);
  return rc;
}
