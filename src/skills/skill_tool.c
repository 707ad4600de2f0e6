/* skill_tool.c - see skills_impl.h: what a skill.lua tool runs on, its
 * handler and the skill's reusable sandboxes. Split from skills.c. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "call.h"
#include "sandbox.h"
#include "skills_impl.h"
#include "util.h"

/* One sandbox of a skill kept between its tool calls: skill.lua compiled
 * in it once, the Lua API installed, bound to ctx. A call copies its own
 * context into ctx (the API reads it from there), and the sandbox is made
 * as clean as a new one (runtime_sandbox_reuse: collected, reseeded, fresh
 * limits) and skill.lua's chunk runs again in a fresh _ENV (sandbox_rerun),
 * so nothing a call made, global, upvalue, table or coroutine, is
 * reachable by the next; only the parsing and the setup of the state and
 * its libraries are saved. A call that failed or hit a limit frees its
 * sandbox instead of returning it. */
struct skill_vm {
  struct sandbox *sb;
  struct call_ctx ctx;
  /* run()'s arguments, kept with the sandbox: [args, call], where args is
   * a reference to the call's own object and call's tool, caller,
   * caller_name and run_id are set for each call (the skill never changes). */
  cJSON *argv, *call;
  cJSON *f_tool, *f_caller, *f_caller_name, *f_run_id; /* call's members */
  struct skill_vm *next;
};

#define SKILL_VMS_IDLE 4 /* kept per skill; parallel calls beyond make and free their own */

/* skill.lua's text as read at load time, shared by the skill's tools, so a
 * tool call runs it from memory instead of reading the file again, and
 * the skill's idle sandboxes. Only loading and freeing (one thread) touch
 * refs; calls read text and take and give back sandboxes under mu. */
struct skill_source {
  int refs;
  char *text;
  size_t len;
  pthread_mutex_t mu;
  struct skill_vm *idle;
  int nidle;
  pid_t pid; /* the process the idle sandboxes were made in */
};

struct skill_source *skills__source_new(const char *text, size_t len) {
  struct skill_source *src = xcalloc(1, sizeof *src);
  src->text = xmalloc(len + 1);
  memcpy(src->text, text, len + 1);
  src->len = len;
  src->refs = 1;
  pthread_mutex_init(&src->mu, NULL);
  src->pid = getpid();
  return src;
}

static void vm_free(struct skill_vm *vm) {
  if (!vm) return;
  sandbox_free(vm->sb);
  cJSON_Delete(vm->argv);
  free(vm);
}

struct skill_source *skills__source_ref(struct skill_source *src) {
  src->refs++;
  return src;
}

void skills__source_unref(struct skill_source *src) {
  if (!src || --src->refs) return;
  while (src->idle) {
    struct skill_vm *vm = src->idle;
    src->idle = vm->next;
    vm_free(vm);
  }
  pthread_mutex_destroy(&src->mu);
  free(src->text);
  free(src);
}

/* An idle sandbox of the skill, or NULL. A forked child (a daemon worker)
 * makes its own: it frees its copies of the parent's idle ones (plain
 * memory: a Lua state holds no file or thread). */
static struct skill_vm *vm_take(struct skill_source *src) {
  pthread_mutex_lock(&src->mu);
  struct skill_vm *vm = NULL;
  if (src->pid != getpid()) {
    while (src->idle) {
      struct skill_vm *old = src->idle;
      src->idle = old->next;
      vm_free(old);
    }
    src->nidle = 0;
    src->pid = getpid();
  }
  if (src->idle) {
    vm = src->idle;
    src->idle = vm->next;
    src->nidle--;
  }
  pthread_mutex_unlock(&src->mu);
  return vm;
}

static void vm_give(struct skill_source *src, struct skill_vm *vm) {
  pthread_mutex_lock(&src->mu);
  if (src->nidle < SKILL_VMS_IDLE && src->pid == getpid()) {
    memset(&vm->ctx, 0, sizeof vm->ctx); /* nothing of the last call stays reachable */
    vm->next = src->idle;
    src->idle = vm;
    src->nidle++;
    vm = NULL;
  }
  pthread_mutex_unlock(&src->mu);
  vm_free(vm);
}


void skills__lua_tool_free(void *ud) {
  struct lua_tool *u = ud;
  if (!u) return;
  free(u->skill);
  free(u->tool);
  free(u->chunk);
  skills__source_unref(u->src);
  free(u);
}

/* Runs tools.<tool>.run(args, call) of the skill in a clean sandbox (a
 * new one, or one of the skill's idle ones made clean: see skill_vm), as
 * caller kind "skill", one level deeper than the caller. */
/* Sets the string member m (NULL: it could not be made) to v. 0 when out
 * of memory. */
static int set_str(cJSON *m, const char *v) {
  return m && cJSON_SetValuestring(m, v) != NULL;
}

int skills__lua_tool_handler(struct call_ctx *ctx, const struct tool *t, const cJSON *args,
                             cJSON **result, struct err *e) {
  const struct lua_tool *u = t->ud;
  struct skill_vm *vm = vm_take(u->src);
  struct sandbox *sb = NULL;
  cJSON *argv = NULL;
  int rc = 0;
  bool fresh = !vm;
  if (fresh) vm = xcalloc(1, sizeof *vm);
  /* The context the sandbox's API reads: this call's. */
  vm->ctx = *ctx;
  vm->ctx.caller.kind = CALLER_SKILL;
  vm->ctx.under_model = call_ctx_model_chain(ctx);
  size_t sn = strnlen(u->skill, sizeof vm->ctx.caller.name - 1);
  memcpy(vm->ctx.caller.name, u->skill, sn);
  vm->ctx.caller.name[sn] = 0;
  vm->ctx.depth = ctx->depth + 1;
  /* Called from a code-mode chunk: the skill's own calls are the skill's,
   * as when the model calls this tool directly (call.h, chunk_scope). */
  vm->ctx.chunk = NULL;
  if (fresh) { /* Ctrl-C stops a running skill tool too (both ways) */
    if ((rc = runtime_sandbox(ctx->rt, &vm->ctx, &vm->sb, e))) goto out;
    sb = vm->sb;
    sandbox_keep_chunk(sb);
    rc = sandbox_run_string(sb, u->src->text, u->src->len, u->chunk, NULL, e);
  } else {
    sb = vm->sb;
    if (!(rc = runtime_sandbox_reuse(ctx->rt, &vm->ctx, sb, e))) rc = sandbox_rerun(sb, e);
  }
  if (rc) goto out;
  if (!vm->argv) {
    vm->argv = cJSON_CreateArray();
    cJSON_AddItemToArray(vm->argv, cJSON_CreateObject());
    vm->call = cJSON_CreateObject();
    vm->f_tool = cJSON_AddStringToObject(vm->call, "tool", "");
    cJSON_AddStringToObject(vm->call, "skill", u->skill);
    vm->f_caller = cJSON_AddStringToObject(vm->call, "caller", "");
    vm->f_caller_name = cJSON_AddStringToObject(vm->call, "caller_name", "");
    vm->f_run_id = cJSON_AddStringToObject(vm->call, "run_id", "");
    cJSON_AddItemToArray(vm->argv, vm->call);
  }
  argv = vm->argv;
  /* A skill's sandboxes serve all of its tools: the tool is set per call. */
  if (!set_str(vm->f_tool, t->name) ||
      !set_str(vm->f_caller, caller_kind_name(ctx->caller.kind)) ||
      !set_str(vm->f_caller_name, ctx->caller.name) || !set_str(vm->f_run_id, ctx->run_id) ||
      !cJSON_ReplaceItemInArray(argv, 0, cJSON_CreateObjectReference(args ? args->child : NULL))) {
    rc = err_set(e, ERR_NOMEM, "limit_memory", "%s: out of memory", t->name);
    goto out;
  }
  const char *path[] = {"tools", u->tool, "run", NULL};
  rc = sandbox_call(sb, path, argv, result, NULL, e);
out:
  /* The caller's budget pays for what this tool ran (see runtime_sandbox). */
  if (ctx->sb && sb) sandbox_spend(ctx->sb, sandbox_instructions_used(sb));
  /* args is the caller's: no reference to it stays behind. */
  if (argv) cJSON_ReplaceItemInArray(argv, 0, cJSON_CreateObject());
  if (rc) { /* an error may have left anything half done: never reuse it */
    vm_free(vm);
  } else {
    vm_give(u->src, vm);
  }
  return rc;
}
