/* runtime.c - workspace runtime, call contexts, and the Lua API glue. */
#include "runtime.h"

#include <errno.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster_queue.h"
#include "daemon.h"
#include "delegate.h"
#include "events.h"
#include "hosttools.h"
#include "journal.h"
#include "json.h"
#include "mcp.h"
#include "memory.h"
#include "react.h"
#include "secrets.h"
#include "security.h"
#include "skills.h"
#include "util.h"

/* Default output: print() to stdout, log lines to stderr. */
static void default_write(void *ud, const char *stream, const char *text, size_t len) {
  (void)ud;
  if (!strcmp(stream, "print")) {
    fwrite(text, 1, len, stdout);
    fputc('\n', stdout);
    fflush(stdout);
  } else {
    fprintf(stderr, "[%s] %.*s\n", stream, (int)len, text);
  }
}

/* Every sandbox's print/log goes through here to whatever rt->out is now
 * (the terminal, a daemon worker's journal): secret values are scrubbed
 * once, for every sink, even if a script got hold of one. */
static void redacting_write(void *ud, const char *stream, const char *text, size_t len) {
  struct runtime *rt = ud;
  char *clean = secrets_registered() ? secrets_redact(text, len, &len) : NULL;
  if (rt->out.write) rt->out.write(rt->out.ud, stream, clean ? clean : text, len);
  free(clean);
}

/* An MCP server's sampling request counts as one model call of the run. */
static void budget_charge_model(struct budget *b, long tokens) { budget_charge(b, 0, 1, 0, tokens); }
static int make_sandbox(struct runtime *rt, struct call_ctx *ctx, struct sandbox **out,
                        struct err *e);
static int reuse_sandbox(struct runtime *rt, struct call_ctx *ctx, struct sandbox *sb,
                         struct err *e);

static void release_cluster_policy(void *ud) { cluster_policy_free(ud); }

/* With `cluster` in luagent.lua, the approval queue and the audit chain
 * are the cluster's (PostgreSQL, cluster_queue.h): the pipeline gets them
 * through policy's ops tables and frees them in sec_free. Nothing
 * connects until the first audited call or escalation. */
static int install_cluster_policy(struct runtime *rt, struct err *e) {
  struct cluster_policy *cp = NULL;
  if (cluster_policy_for(rt->workspace, rt->cfg, &cp, e)) return ERR_INVALID;
  if (!cp) return 0;
  struct audit_sink sink = cluster_policy_sink(cp);
  struct approval_queue queue = cluster_policy_queue(cp);
  sec_set_backend(rt->sec, &sink, &queue, release_cluster_policy, cp);
  return 0;
}

static int open_runtime(const char *workspace, int cluster, struct runtime **out, struct err *e) {
  *out = NULL;
  /* No curl_global_init here: libcurl is loaded, and initialised, by the
   * first HTTP request (tools/curl_dyn.h), so a command that makes none
   * never loads it. */
  if (sodium_init() < 0) return err_set(e, ERR_FAIL, "crypto", "libsodium failed to initialise");
  char abs[PATH_MAX];
  struct stat st;
  if (!realpath(workspace, abs) || stat(abs, &st) != 0 || !S_ISDIR(st.st_mode))
    return err_set(e, ERR_INVALID, "workspace", "workspace %s: %s", workspace,
                   errno ? strerror(errno) : "not a directory");
  struct runtime *rt = xcalloc(1, sizeof *rt);
  rt->workspace = xstrdup(abs);
  rt->out.write = default_write;
  rt->sandbox_fn = make_sandbox;
  rt->sandbox_reuse_fn = reuse_sandbox;
  rt->budget_check_fn = budget_check_model_call;
  rt->budget_charge_fn = budget_charge_model;
  int rc;
  if ((rc = config_load(rt->workspace, &rt->cfg, e))) goto fail;
  rt->tools = toolreg_new();
  if ((rc = hosttools_register(rt, e))) goto fail;
  if ((rc = memory_register_tools(rt, e))) goto fail;
  /* after every local tool, so a server's tool can never take a local name */
  if ((rc = mcp_open(rt, &rt->mcp, e))) goto fail;
  if ((rc = sec_new(rt, &rt->sec, e))) goto fail;
  if (cluster && (rc = install_cluster_policy(rt, e))) goto fail;
  *out = rt;
  return 0;
fail:
  runtime_free(rt);
  return rc;
}

int runtime_open(const char *workspace, struct runtime **out, struct err *e) {
  return open_runtime(workspace, 1, out, e);
}

int runtime_open_local(const char *workspace, struct runtime **out, struct err *e) {
  return open_runtime(workspace, 0, out, e);
}

void runtime_free(struct runtime *rt) {
  if (!rt) return;
  skillset_free(rt->skills); /* before the store and registry it borrows */
  journal_close(rt->journal);
  sec_free(rt->sec);
  mcp_free(rt->mcp); /* stops the server processes */
  toolreg_free(rt->tools);
  store_close(rt->store);
  config_free(rt->cfg);
  free(rt->workspace);
  free(rt);
}

/* path resolved (into abs), then relative to the workspace when inside it
 * (*inside = 1), else the absolute path. */
static const char *workspace_relative(const struct runtime *rt, const char *path,
                                      char abs[PATH_MAX], int *inside) {
  size_t wl = strlen(rt->workspace);
  const char *p = realpath(path, abs) ? abs : path;
  *inside = !strncmp(p, rt->workspace, wl) && p[wl] == '/';
  return *inside ? p + wl + 1 : p;
}

void runtime_script_name(const struct runtime *rt, const char *path, char *out, size_t n) {
  char abs[PATH_MAX];
  int inside;
  snprintf(out, n, "%s", workspace_relative(rt, path, abs, &inside));
}

void runtime_display_path(const struct runtime *rt, const char *path, char *out, size_t n) {
  char abs[PATH_MAX];
  int inside;
  const char *p = workspace_relative(rt, path, abs, &inside);
  /* Outside the workspace: the file name only, never the host path. */
  const char *slash = inside ? NULL : strrchr(p, '/');
  snprintf(out, n, "%s", slash ? slash + 1 : p);
}

/* ------------------------------------------------------------ Lua API */

/* Script tool calls are events too ("script_tool_call"), so a run's journal
 * shows what its scripts called (`runs show`): the tool, who called it, the
 * arguments (their JSON cut at SCRIPT_CALL_ARGS bytes), the outcome and
 * the time. The result stays out: the audit chain and the caller have it. */
#define SCRIPT_CALL_ARGS 1024
static void script_call_event(struct call_ctx *ctx, const char *tool, const cJSON *args, int rc,
                              const struct err *e, double ms) {
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "tool", tool);
  cJSON_AddStringToObject(d, "caller", caller_kind_name(ctx->caller.kind));
  cJSON_AddStringToObject(d, "caller_name", ctx->caller.name);
  char *a = args && !cJSON_IsNull(args) ? json_print(args, 0) : xstrdup("{}");
  size_t n = a ? strlen(a) : 0;
  if (n > SCRIPT_CALL_ARGS) {
    size_t cut = SCRIPT_CALL_ARGS;
    while (cut > 0 && ((unsigned char)a[cut] & 0xC0) == 0x80) cut--; /* a UTF-8 boundary */
    char tail[64];
    snprintf(tail, sizeof tail, "... [%zu of %zu bytes]", cut, n);
    struct sbuf b = {0};
    sbuf_append(&b, a, cut);
    sbuf_append(&b, tail, strlen(tail));
    cJSON_AddStringToObject(d, "args_text", b.s);
    sbuf_free(&b);
  } else if (a) {
    cJSON_AddItemToObject(d, "args", json_parse_str(a, 0, NULL));
  }
  free(a);
  cJSON_AddBoolToObject(d, "ok", rc == 0);
  if (rc) {
    cJSON_AddStringToObject(d, "code", e->code);
    cJSON_AddStringToObject(d, "error", e->msg);
  }
  cJSON_AddNumberToObject(d, "ms", ms);
  events_emit(ctx->events, ctx->run_id, "script_tool_call", d);
  cJSON_Delete(d);
}

/* tools.call(name, args) [-2, +1, e] */
static int api_tools_call(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                          struct err *e) {
  struct call_ctx *ctx = ud;
  const cJSON *name = cJSON_GetArrayItem(args, 0);
  const cJSON *targs = cJSON_GetArrayItem(args, 1);
  if (!cJSON_IsString(name))
    return err_set(e, ERR_INVALID, "invalid_args", "tools.call: argument #1 must be a tool name");
  if (targs && !cJSON_IsObject(targs) && !cJSON_IsNull(targs))
    return err_set(e, ERR_INVALID, "invalid_args", "tools.call: %s: arguments must be a table",
                   name->valuestring);
  /* A run's scripts get limits.tool_calls calls in all, counted across
   * nested skill tools and delegate() (the run's shared state). */
  unsigned long cap = ctx->rt->cfg->max_script_tool_calls;
  unsigned long n = atomic_fetch_add(&call_ctx_run(ctx)->script_calls, 1) + 1;
  if (cap && n > cap)
    return err_set(e, ERR_LIMIT, "limit_tool_calls",
                   "tools.call: the run's limit of %lu tool calls from scripts is reached "
                   "(limits.tool_calls in luagent.lua)",
                   cap);
  /* a code-mode chunk's calls are its own events (lua_call, codemode.c) */
  if (ctx->chunk) return ctx->chunk->call(ctx->chunk->ud, ctx, name->valuestring, targs, ret, e);
  /* The result may be borrowed from targs (echo's), which live in the
   * sandbox until it has pushed the result (sandbox_ret_lent). */
  const cJSON *lent = NULL;
  double t0 = ctx->events ? util_monotonic() : 0;
  int rc = tool_call_lent(ctx, name->valuestring, targs, ret, &lent, e);
  if (lent) sandbox_ret_lent(sb, lent);
  if (ctx->events)
    script_call_event(ctx, name->valuestring, targs, rc, e, (util_monotonic() - t0) * 1000);
  return rc;
}

/* tools.list() -> { {name=, description=, impact=, open_world=}, ... } */
static int api_tools_list(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                          struct err *e) {
  struct call_ctx *ctx = ud;
  (void)sb, (void)args, (void)e;
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; i < toolreg_count(ctx->rt->tools); i++) {
    const struct tool *t = toolreg_at(ctx->rt->tools, i);
    if (!call_ctx_may_reach(ctx, t->name)) continue; /* a code-mode chunk's scope */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", t->name);
    cJSON_AddStringToObject(o, "description", t->description);
    cJSON_AddStringToObject(o, "impact", impact_name(t->impact));
    cJSON_AddBoolToObject(o, "open_world", t->open_world);
    cJSON_AddItemToArray(arr, o);
  }
  *ret = arr;
  return 0;
}

static int api_tools_exists(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                            struct err *e) {
  struct call_ctx *ctx = ud;
  (void)sb, (void)e;
  const cJSON *name = cJSON_GetArrayItem(args, 0);
  *ret = cJSON_CreateBool(cJSON_IsString(name) && toolreg_find(ctx->rt->tools, name->valuestring) &&
                          call_ctx_may_reach(ctx, name->valuestring));
  return 0;
}

int runtime_install_api(struct runtime *rt, struct sandbox *sb, struct call_ctx *ctx,
                        struct err *e) {
  sandbox_set_output(sb, &(struct sb_output){.write = redacting_write, .ud = rt});
  if (sandbox_add_function(sb, "tools", "call", api_tools_call, ctx) ||
      sandbox_add_function(sb, "tools", "list", api_tools_list, ctx) ||
      sandbox_add_function(sb, "tools", "exists", api_tools_exists, ctx))
    return err_set(e, ERR_FAIL, "internal", "cannot install the tools API");
  if (ctx->chunk) {
    /* A code-mode chunk (loop/codemode.h) reaches the world through its
     * tools only: memory.* and events.emit would write past the pipeline,
     * and delegate() is there only when the scope allows it. */
    return ctx->chunk->delegate ? delegate_install(sb, ctx, e) : 0;
  }
  if (memory_install_api(rt, sb, ctx, e)) return ERR_FAIL;
  if (mcp_install_api(sb, ctx, e)) return ERR_FAIL;      /* mcp.resources/read/prompt (mcp.h) */
  if (daemon_events_install(sb, ctx, e)) return ERR_FAIL; /* events.emit (daemon.h) */
  return delegate_install(sb, ctx, e);                   /* delegate() (delegate.h) */
}

/* The limits of a sandbox for a call made as ctx (fixes the run's
 * deadline in ctx). */
static void call_limits(struct call_ctx *ctx, struct sb_limits *out) {
  if (ctx->limits.deadline_at <= 0) ctx->limits.deadline_at = util_monotonic() + ctx->limits.deadline_s;
  /* Called from a sandbox (a skill tool under a script or another skill):
   * the run's memory and instructions are one budget, so this one gets at
   * most what the caller has left (the skill tool handler charges its instructions back). */
  struct sb_limits lim = ctx->limits;
  if (ctx->sb) {
    size_t mem;
    uint64_t ins;
    sandbox_room(ctx->sb, &mem, &ins);
    if (ctx->share > 1) { /* parallel siblings split the room, none takes it all */
      mem /= ctx->share;
      ins /= ctx->share;
    }
    if (mem < lim.memory_bytes) lim.memory_bytes = mem ? mem : 1;
    if (ins < lim.instructions) lim.instructions = ins ? ins : 1;
  } else if (ctx->share > 1) {
    /* The model's parallel read-only calls (lua chunks, skill tools) have
     * no caller sandbox: they split one call's memory, so N threads
     * together hold at most what one call may. Instructions stay whole:
     * each thread's CPU time is bounded by its own count and deadline,
     * while memory is held by all of them at once. */
    lim.memory_bytes = (lim.memory_bytes ? lim.memory_bytes : (size_t)64 << 20) / ctx->share;
    if (!lim.memory_bytes) lim.memory_bytes = 1;
  }
  ctx->share = 0; /* calls nested in this sandbox run one at a time */
  *out = lim;
}

/* rt->sandbox_fn: what runtime_sandbox (call.h) calls. */
static int make_sandbox(struct runtime *rt, struct call_ctx *ctx, struct sandbox **out,
                        struct err *e) {
  *out = NULL;
  struct sb_limits lim;
  call_limits(ctx, &lim);
  struct sandbox *sb;
  int rc = sandbox_new(&lim, &sb, e);
  if (rc) return rc;
  sandbox_watch_stop(sb, ctx->stop); /* Ctrl-C stops Lua as well as model calls */
  if (rt->fakes && rt->fakes->now) sandbox_set_clock(sb, rt->fakes->now, rt->fakes->ud); /* luagent test */
  if ((rc = runtime_install_api(rt, sb, ctx, e))) {
    sandbox_free(sb);
    return rc;
  }
  ctx->sb = sb;
  *out = sb;
  return 0;
}

/* rt->sandbox_reuse_fn: what runtime_sandbox_reuse (call.h) calls; the
 * same limits and stop flag as make_sandbox gives a new one. */
static int reuse_sandbox(struct runtime *rt, struct call_ctx *ctx, struct sandbox *sb,
                         struct err *e) {
  (void)rt;
  struct sb_limits lim;
  call_limits(ctx, &lim);
  int rc = sandbox_recycle(sb, &lim, e);
  if (rc) return rc;
  sandbox_watch_stop(sb, ctx->stop);
  ctx->sb = sb;
  return 0;
}

int runtime_run_script(struct runtime *rt, struct call_ctx *ctx, const char *path,
                       const cJSON *args, cJSON **ret, struct err *e) {
  struct sandbox *sb = NULL;
  char shown[1024];
  int rc;
  if (ret) *ret = NULL;
  runtime_display_path(rt, path, shown, sizeof shown);
  struct sandbox *outer = ctx->sb;
  if ((rc = runtime_sandbox(rt, ctx, &sb, e))) return rc; /* nested calls inherit its deadline */
  if (args) {
    if ((rc = sandbox_set_global(sb, "args", args, e))) goto out;
  } else {
    cJSON *empty = cJSON_CreateObject();
    rc = sandbox_set_global(sb, "args", empty, e);
    cJSON_Delete(empty);
    if (rc) goto out;
  }
  rc = sandbox_run_file(sb, path, shown, ret, e);
out:
  ctx->sb = outer;
  sandbox_free(sb);
  return rc;
}
