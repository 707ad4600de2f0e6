/* sandbox_limits.c - the sandbox's limits: the counting allocator (memory),
 * the instruction/deadline/depth/stop checks run from the count hook, and
 * how a kill is recorded and raised again (see sandbox.h, "Limits"). Kept
 * apart from sandbox.c, which builds the environment and runs chunks. */
#include "sandbox.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox_impl.h"
#include "util.h"



void *sandbox__alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  struct sandbox *s = ud;
  if (!ptr) osize = 0; /* osize is a type tag for new blocks */
  if (nsize == 0) {
    free(ptr);
    s->mem_used -= osize;
    return NULL;
  }
  if (nsize > osize && s->mem_used - osize + nsize > s->mem_limit) {
    if (!s->killed) {
      s->killed = 1;
      snprintf(s->kill_code, sizeof s->kill_code, "limit_memory");
      snprintf(s->kill_msg, sizeof s->kill_msg, "memory limit of %zu bytes exceeded",
               s->mem_limit);
      /* From now on every instruction raises, through any pcall. The
       * running thread may be a coroutine: it is re-armed when the error
       * reaches kill_raise; every other thread is refused by co_resume. */
      if (s->L) lua_sethook(s->L, sandbox__count_hook, LUA_MASKCOUNT, 1);
    }
    return NULL;
  }
  void *p = realloc(ptr, nsize);
  if (!p) return NULL;
  s->mem_used = s->mem_used - osize + nsize;
  return p;
}

/* Raises the kill error at the current position. [-0, +1, v] */
int sandbox__kill_raise(lua_State *L) {
  struct sandbox *s = sb_of(L);
  /* Whatever thread raises, it raises again at its next instruction: a
   * resumer that catches a kill from a coroutine is re-armed here too. */
  lua_sethook(L, sandbox__count_hook, LUA_MASKCOUNT, 1);
  lua_Debug ar;
  /* Level 0 is the running function (hooks have no frame of their own);
   * for a C function (string.rep) level 1 is its Lua caller. */
  for (int lvl = 0; lvl < 2 && !s->kill_where[0]; lvl++)
    if (lua_getstack(L, lvl, &ar) && lua_getinfo(L, "Sl", &ar) && ar.currentline > 0)
      snprintf(s->kill_where, sizeof s->kill_where, "%s:%d", ar.short_src, ar.currentline);
  if (s->kill_where[0]) return luaL_error(L, "%s: %s", s->kill_where, s->kill_msg);
  return luaL_error(L, "%s", s->kill_msg);
}

static void kill_set(lua_State *L, struct sandbox *s, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void kill_set(lua_State *L, struct sandbox *s, const char *code, const char *fmt, ...) {
  if (!s->killed) {
    s->killed = 1;
    snprintf(s->kill_code, sizeof s->kill_code, "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->kill_msg, sizeof s->kill_msg, fmt, ap);
    va_end(ap);
  }
  /* Re-arm for every instruction so a pcall can't swallow the kill (redis
   * does the same). Other threads see s->killed when they are resumed
   * (co_resume refuses) and in every host function (l_hostfn). */
  lua_sethook(L, sandbox__count_hook, LUA_MASKCOUNT, 1);
}

/* Checks every limit; on a breach marks the run killed. Returns 1 if killed. */
int sandbox__limits_check(lua_State *L, struct sandbox *s) {
  if (s->killed) return 1;
  if (s->stop_flag && *s->stop_flag) s->interrupted = 1;
  if (s->interrupted) {
    kill_set(L, s, "stopped", "run stopped by the operator");
    return 1;
  }
  if (s->instr_used > s->instr_limit) {
    kill_set(L, s, "limit_instructions", "instruction limit of %llu exceeded",
             (unsigned long long)s->instr_limit);
    return 1;
  }
  if (util_monotonic() > s->deadline) {
    kill_set(L, s, "limit_deadline", "wall-clock deadline exceeded");
    return 1;
  }
  lua_Debug ar;
  if (lua_getstack(L, s->max_depth, &ar)) {
    kill_set(L, s, "limit_depth", "call depth limit of %d exceeded", s->max_depth);
    return 1;
  }
  return 0;
}

/* The count hook of every thread. Each thread's own period is what ran
 * since its last call (1 once killed), so the budget is the sandbox's,
 * summed over all threads. */
void sandbox__count_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  struct sandbox *s = sb_of(L);
  s->instr_used += (uint64_t)lua_gethookcount(L);
  if (sandbox__limits_check(L, s)) sandbox__kill_raise(L);
}

void sandbox__charge(lua_State *L, uint64_t n) {
  struct sandbox *s = sb_of(L);
  s->instr_used += n;
  if (sandbox__limits_check(L, s)) sandbox__kill_raise(L);
}

int sandbox__poll(lua_State *L) { return sandbox__limits_check(L, sb_of(L)); }

size_t sandbox__mem_room(lua_State *L) {
  const struct sandbox *s = sb_of(L);
  return s->mem_used < s->mem_limit ? s->mem_limit - s->mem_used : 0;
}

void sandbox__kill_memory(lua_State *L, const char *what) {
  struct sandbox *s = sb_of(L);
  kill_set(L, s, "limit_memory", "memory limit of %zu bytes exceeded (%s)", s->mem_limit, what);
}

int sandbox__raise_killed(lua_State *L) { return sandbox__kill_raise(L); }

void sandbox_watch_stop(struct sandbox *sb, volatile int *flag) {
  if (sb) sb->stop_flag = flag;
}

