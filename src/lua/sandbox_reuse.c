/* sandbox_reuse.c - see sandbox.h: one sandbox for many calls of the same
 * code (sandbox_keep_chunk, sandbox_rerun, sandbox_recycle), as clean for
 * each call as a new one. Split from sandbox.c. */
#include <stdint.h>
#include <string.h>
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

/* cache[name] = {source, fn}, in protected mode (a table may not fit).
 * [-0, +0, m] with [cache, name, source, fn] as its arguments */
static int cache_put_p(lua_State *L) {
  lua_createtable(L, 2, 0);
  lua_pushvalue(L, 3);
  lua_rawseti(L, -2, 1);
  lua_pushvalue(L, 4);
  lua_rawseti(L, -2, 2);
  lua_pushvalue(L, 2);
  lua_insert(L, -2);
  lua_rawset(L, 1);
  return 0;
}

int sandbox_run_cached(struct sandbox *sb, const char *code, size_t len, const char *chunkname,
                       cJSON **ret, struct err *e) {
  lua_State *L = sb->L;
  if (ret) *ret = NULL;
  if (sb->killed) return err_set(e, ERR_LIMIT, sb->kill_code, "%s", sb->kill_msg);
  lua_settop(L, 0);
  if (sb->cache_ref != LUA_NOREF && sb->cache_mem > SB_CACHE_BYTES) { /* start over */
    luaL_unref(L, LUA_REGISTRYINDEX, sb->cache_ref);
    sb->cache_ref = LUA_NOREF;
    sb->cache_mem = 0;
  }
  if (sb->cache_ref == LUA_NOREF) {
    /* A state reused for many runs: a young collection finds each run's
     * garbage without walking the libraries and the kept chunks (as
     * sandbox_keep_chunk). */
    lua_gc(L, LUA_GCGEN, 0, 0);
    lua_newtable(L);
    sb->cache_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, sb->cache_ref); /* [cache] */
  lua_pushstring(L, chunkname);
  lua_rawget(L, 1); /* [cache, entry] */
  if (lua_istable(L, 2)) {
    lua_rawgeti(L, 2, 1);
    size_t n = 0;
    const char *had = lua_tolstring(L, 3, &n);
    if (had && n == len && !memcmp(had, code, len)) { /* the very text compiled before */
      lua_rawgeti(L, 2, 2);
      lua_replace(L, 1);
      lua_settop(L, 1);
      util_copy(sb->wd_name, sizeof sb->wd_name, chunkname);
      return sandbox__run_loaded(sb, chunkname, ret, e);
    }
  }
  lua_settop(L, 0);
  size_t before = sb->mem_used;
  int rc = sandbox__load(sb, code, len, chunkname, e); /* [fn] */
  if (rc) return rc;
  lua_pushcfunction(L, cache_put_p);
  lua_rawgeti(L, LUA_REGISTRYINDEX, sb->cache_ref);
  lua_pushstring(L, chunkname);
  lua_pushlstring(L, code, len);
  lua_pushvalue(L, 1);
  if (lua_pcall(L, 4, 0, 0) != LUA_OK) { /* not kept: run it all the same */
    lua_settop(L, 1);
  }
  if (sb->mem_used > before) {
    size_t kept = sb->mem_used - before;
    sb->cache_mem += kept;
    /* not garbage: sandbox_recycle need not collect everything for it */
    if (sb->clean_mem) sb->clean_mem += kept;
  }
  return sandbox__run_loaded(sb, chunkname, ret, e);
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
  /* the compiled chunks sandbox_run_cached keeps are the host's */
  if (sb->cache_ref != LUA_NOREF) sb->mem_limit += sb->cache_mem;
  sb->instr_used = 0;
  sb->interrupted = 0;
  sb->stop_flag = NULL;
  sb->out_used = 0;
  sb->out_truncated = 0;
  lua_sethook(L, sandbox__count_hook, LUA_MASKCOUNT, (int)sb->hook_period); /* fresh count */
  return 0;
}
