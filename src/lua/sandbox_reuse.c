/* sandbox_reuse.c - see sandbox.h: one sandbox for many calls of the same
 * code (sandbox_keep_chunk, sandbox_rerun, sandbox_recycle), as clean for
 * each call as a new one. Split from sandbox.c. */
#include <stdint.h>
#include <sys/random.h>

#include "sandbox_impl.h"
#include "util.h"

/* Garbage a recycled sandbox may start with before a full collection is
 * forced: counted against the new call's memory cap, so reuse is at most
 * this much stricter than a new sandbox, never looser. */
#define RECYCLE_SLACK ((size_t)64 << 10)

void sandbox_keep_chunk(struct sandbox *sb) {
  if (!sb) return;
  sb->keep_chunk = 1;
  /* A reused state is mostly old objects (libraries, API, the compiled
   * chunk) and a little garbage per call: a young collection finds that
   * garbage without walking the rest (sandbox_recycle). */
  lua_gc(sb->L, LUA_GCGEN, 0, 0);
}

int sandbox_rerun(struct sandbox *sb, struct err *e) {
  if (sb->killed) return err_set(e, ERR_LIMIT, sb->kill_code, "%s", sb->kill_msg);
  if (sb->chunk_ref == LUA_NOREF) return err_set(e, ERR_INVALID, "internal", "no chunk to run again");
  lua_settop(sb->L, 0);
  lua_rawgeti(sb->L, LUA_REGISTRYINDEX, sb->chunk_ref);
  return sandbox__run_loaded(sb, sb->wd_name, NULL, e);
}

/* Seeds math.random from the system's randomness (getrandom: a script
 * that recovered its own generator's state learns nothing of the next
 * call's). [-0, +0, -] */
static int reseed_p(lua_State *L) {
  lua_Integer seed[2];
  sandbox__random_seeds(seed);
  /* The real math table is the __index of the scripts' read-only proxy. */
  sandbox__push_globals(L);
  lua_getfield(L, -1, "math");
  lua_getmetatable(L, -1);
  lua_getfield(L, -1, "__index");
  lua_getfield(L, -1, "randomseed"); /* [G, proxy, mt, math, randomseed] */
  lua_pushinteger(L, seed[0]);
  lua_pushinteger(L, seed[1]);
  lua_call(L, 2, 0);
  return 0;
}

int sandbox_recycle(struct sandbox *sb, const struct sb_limits *lim, struct err *e) {
  if (sb->killed || sb->pending || sb->co_depth)
    return err_set(e, ERR_INVALID, "internal", "this sandbox cannot be used again");
  struct sb_limits d;
  if (!lim) {
    sb_limits_default(&d);
    lim = &d;
  }
  lua_State *L = sb->L;
  lua_settop(L, 0);
  /* The last module goes too (sandbox_rerun makes the next): the host's
   * reference was the one thing still holding the earlier call's tables
   * and closures. */
  if (sb->module_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, sb->module_ref);
  sb->module_ref = LUA_NOREF;
  /* What earlier calls left is unreachable (nothing they could write to
   * outlives them): collect it, so it neither counts against this call's
   * memory cap nor lingers: a young collection first, a full one when
   * more than RECYCLE_SLACK is left. Scripts cannot set __gc, so no code
   * of theirs runs here. */
  lua_gc(L, LUA_GCSTEP, 0);
  if (!sb->clean_mem || sb->mem_used > sb->clean_mem + RECYCLE_SLACK) {
    lua_gc(L, LUA_GCCOLLECT);
    /* A full collection in generational mode leaves the debt the last
     * call ran up, so the next call's first allocations would be paced by
     * it: a call after one that held 50 MB peaked at 64 MB instead of
     * 40 KB (and could hit its cap), which also told it what the earlier
     * caller held. One step settles the debt (red team 4, F9). */
    lua_gc(L, LUA_GCSTEP, 0);
    sb->clean_mem = sb->mem_used;
  }
  /* The random generator is state too: a new call must not see (or be
   * able to predict) what an earlier one drew or seeded. */
  lua_pushcfunction(L, reseed_p);
  if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
    lua_settop(L, 0);
    return err_set(e, ERR_NOMEM, "limit_memory", "cannot reseed the sandbox");
  }
  sandbox__apply_limits(sb, lim);
  sb->instr_used = 0;
  sb->interrupted = 0;
  sb->stop_flag = NULL;
  sb->out_used = 0;
  sb->out_truncated = 0;
  lua_sethook(L, sandbox__count_hook, LUA_MASKCOUNT, (int)sb->hook_period); /* fresh count */
  return 0;
}
