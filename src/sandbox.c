/* sandbox.c - the sandboxed Lua VM: allow-listed libraries, limits, _ENV.
 *
 * Defence in depth, because Debian's Lua 5.4.4 can't be made safe by a
 * count hook alone:
 *  - a capped allocator, a count hook (instructions, deadline, depth,
 *    interrupts) that re-arms itself for every instruction once a run is
 *    killed, and pcall/xpcall wrappers that re-raise a kill at once, so a
 *    script cannot swallow a limit;
 *  - the kill belongs to the run, not to a thread: the sandbox's own
 *    coroutine.create/wrap arm every thread's hook against one budget,
 *    resume refuses to run anything once killed (and bounds nesting, for
 *    5.4.4's unbounded coroutine.close recursion), and every host function
 *    checks the limits before doing any work;
 *  - bounded replacements for the library functions that loop in C
 *    (patterns in sandbox_pattern.c, string.rep, table.move), which charge
 *    their work to the same budget;
 *  - a metatable policy: scripts may not set __gc, __mode or __close (code
 *    5.4 runs with hooks disabled, and the weak-table bugs fixed in 5.4.8),
 *    and __call must be a function (no metamethod chains in C); the guard
 *    that enforces it on later assignments belongs to the sandbox and
 *    cannot be removed or replaced (see "The metatable policy" below);
 *  - an xpcall whose message handler is skipped once the run is killed
 *    (5.4 runs that handler with hooks off);
 *  - a process watchdog for C calls no hook can reach.
 * Shared library tables are read-only proxies; each chunk gets its own _ENV
 * whose misses raise "undefined global".
 */
#include "sandbox.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox_impl.h"
#include <lualib.h>
#include "util.h"

/* Registry keys (addresses of these statics are unique light userdata). */
static const char K_GLOBALS = 0;   /* the shared globals table (real) */
static const char K_READONLY = 0;  /* set of read-only proxies */
static const char K_ERRMT = 0;     /* metatable of structured errors */
static const char K_HOSTFN = 0;    /* metatable of host-function userdata */

#define HOOK_PERIOD 1000
/* Coroutines get a shorter hook period: lua_newthread starts a thread with
 * a fresh count, so up to one period per thread is never seen by the hook.
 * Creating a coroutine is charged that period up front (co_new). */
#define CO_HOOK_PERIOD 100
/* Nesting bound for coroutine.resume / wrap / close. Stock 5.4 stops resume
 * at 200 C levels, but 5.4.4's lua_resetthread (coroutine.close) counts no
 * C level at all, so close -> __close -> close recursion overflows the C
 * stack (SIGSEGV). The sandbox counts all three itself. */
#define CO_MAX_NEST 100

struct sandbox {
  lua_State *L;
  size_t mem_used, mem_limit;
  uint64_t instr_used, instr_limit;
  unsigned hook_period;
  unsigned co_period;             /* hook period of coroutines */
  int co_depth;                   /* nesting of resume/wrap/close now */
  double deadline;                /* util_monotonic() */
  char wd_name[128];              /* the last chunk run, for the watchdog's message */
  int max_depth;
  volatile sig_atomic_t interrupted;
  volatile int *stop_flag; /* the run's stop flag (sandbox_watch_stop) */
  int killed;                     /* a limit was hit: every instruction raises */
  char kill_code[32];
  char kill_msg[256];
  char kill_where[256];           /* "file:line" where the limit was first hit */
  struct sb_output out;
  size_t out_used, out_limit;
  int out_truncated;
  int module_ref;
  cJSON *pending; /* a host result being pushed (freed if the push raises) */
};

struct hostfn {
  sb_hostfn fn;
  void *ud;
  char name[96];
};

void sb_limits_default(struct sb_limits *l) {
  l->memory_bytes = (size_t)64 << 20;
  l->instructions = 100000000ULL;
  l->deadline_s = 30;
  l->deadline_at = 0;
  l->max_depth = 1000;
  l->output_bytes = (size_t)1 << 20;
}

static struct sandbox *sb_of(lua_State *L) { return *(struct sandbox **)lua_getextraspace(L); }

/* ---------------------------------------------------------------- limits */

static void count_hook(lua_State *L, lua_Debug *ar);

static void *sb_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
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
      if (s->L) lua_sethook(s->L, count_hook, LUA_MASKCOUNT, 1);
    }
    return NULL;
  }
  void *p = realloc(ptr, nsize);
  if (!p) return NULL;
  s->mem_used = s->mem_used - osize + nsize;
  return p;
}

/* Raises the kill error at the current position. [-0, +1, v] */
static int kill_raise(lua_State *L) {
  struct sandbox *s = sb_of(L);
  /* Whatever thread raises, it raises again at its next instruction: a
   * resumer that catches a kill from a coroutine is re-armed here too. */
  lua_sethook(L, count_hook, LUA_MASKCOUNT, 1);
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
  lua_sethook(L, count_hook, LUA_MASKCOUNT, 1);
}

/* Checks every limit; on a breach marks the run killed. Returns 1 if killed. */
static int limits_check(lua_State *L, struct sandbox *s) {
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
static void count_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  struct sandbox *s = sb_of(L);
  s->instr_used += (uint64_t)lua_gethookcount(L);
  if (limits_check(L, s)) kill_raise(L);
}

void sandbox__charge(lua_State *L, uint64_t n) {
  struct sandbox *s = sb_of(L);
  s->instr_used += n;
  if (limits_check(L, s)) kill_raise(L);
}

int sandbox__poll(lua_State *L) { return limits_check(L, sb_of(L)); }

size_t sandbox__mem_room(lua_State *L) {
  const struct sandbox *s = sb_of(L);
  return s->mem_used < s->mem_limit ? s->mem_limit - s->mem_used : 0;
}

void sandbox__kill_memory(lua_State *L, const char *what) {
  struct sandbox *s = sb_of(L);
  kill_set(L, s, "limit_memory", "memory limit of %zu bytes exceeded (%s)", s->mem_limit, what);
}

int sandbox__raise_killed(lua_State *L) { return kill_raise(L); }


void sandbox_watch_stop(struct sandbox *sb, volatile int *flag) {
  if (sb) sb->stop_flag = flag;
}

/* ------------------------------------------------------- read-only tables */

static int ro_newindex(lua_State *L) {
  return luaL_error(L, "attempt to modify read-only table (field '%s')",
                    lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "?");
}

/* Iterates the real table (upvalue 1) without handing it to the script:
 * the state argument is the proxy. */
static int ro_next(lua_State *L) {
  lua_settop(L, 2);
  if (lua_next(L, lua_upvalueindex(1))) return 2;
  lua_pushnil(L);
  return 1;
}

/* __pairs for a proxy. [-0, +3, m] */
static int ro_pairs(lua_State *L) {
  lua_getmetatable(L, 1);
  lua_getfield(L, -1, "__index"); /* [proxy, mt, real] */
  lua_pushcclosure(L, ro_next, 1);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

/* Turns the table at the top into a read-only proxy of it. [-1, +1, m] */
static void make_readonly(lua_State *L, const char *name) {
  lua_newtable(L);                      /* [real, proxy] */
  lua_createtable(L, 0, 4);             /* [real, proxy, mt] */
  lua_pushvalue(L, -3);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, ro_newindex);
  lua_setfield(L, -2, "__newindex");
  lua_pushcfunction(L, ro_pairs);
  lua_setfield(L, -2, "__pairs");
  lua_pushstring(L, name);
  lua_setfield(L, -2, "__metatable"); /* getmetatable() shows a name, not the table */
  lua_setmetatable(L, -2);              /* [real, proxy] */
  lua_rawgetp(L, LUA_REGISTRYINDEX, &K_READONLY);
  lua_pushvalue(L, -2);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  lua_remove(L, -2); /* [proxy] */
}

static int is_readonly(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &K_READONLY);
  lua_pushvalue(L, idx);
  int r = lua_rawget(L, -2) != LUA_TNIL;
  lua_pop(L, 2);
  return r;
}

/* ------------------------------------------------------ base replacements */

/* The metatable policy.
 *
 * Scripts may not give a metatable __gc, __mode or __close (5.4 runs
 * finalizers with hooks off, 5.4.4 has weak-table and coroutine.close bugs),
 * and __call must be a function. setmetatable checks a metatable when it is
 * installed; later assignments to it are checked by a guard: every table
 * that setmetatable installs as a metatable gets a guard as its own
 * metatable, whose __newindex refuses those keys (rawset refuses them too).
 *
 * The guard is the sandbox's, never the script's, so it cannot be removed:
 *  - getmetatable never returns a guard: for a table whose metatable is the
 *    plain guard it returns nil, for one with a guard built around a
 *    script's metatable M it returns M (or M.__metatable, as stock does);
 *  - setmetatable(mt, M) on a guarded mt keeps the guard and builds a new
 *    one around M (a "wrapping guard"); setmetatable(mt, nil) puts back
 *    the plain guard;
 *  - a guard is a table no script can name, so it cannot be rawset.
 * Being guarded is also what marks a table as "used as a metatable".
 *
 * A wrapping guard forwards __index and __newindex to M's current fields
 * on every access (inheritance: setmetatable(Derived, {__index = Base}));
 * M's other metamethods are copied when the guard is built.
 */
static const char *const forbidden_meta[] = {"__gc", "__mode", "__close", NULL};
/* Metamethods a wrapping guard copies from the script's metatable. */
static const char *const copied_meta[] = {
    "__call", "__tostring", "__len", "__eq",  "__lt",   "__le",  "__unm",  "__add",
    "__sub",  "__mul",      "__div", "__mod", "__pow",  "__idiv", "__band", "__bor",
    "__bxor", "__shl",      "__shr", "__bnot", "__concat", "__pairs", "__name", NULL};

static const char K_GUARD = 0;   /* the plain guard (shared) */
static const char K_USERMT = 0;  /* key in a wrapping guard: the script's metatable */

static int forbidden_key(lua_State *L, int idx) {
  if (lua_type(L, idx) != LUA_TSTRING) return 0;
  const char *k = lua_tostring(L, idx);
  if (k[0] != '_' || k[1] != '_') return 0;
  for (int i = 0; forbidden_meta[i]; i++)
    if (!strcmp(k, forbidden_meta[i])) return 1;
  return 0;
}

/* Is the table at idx a guard (plain or wrapping)? [-0, +0, -] */
static int is_guard(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) != LUA_TTABLE) return 0;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &K_GUARD);
  int r = lua_rawequal(L, -1, idx);
  lua_pop(L, 1);
  if (r) return 1;
  r = lua_rawgetp(L, idx, &K_USERMT) != LUA_TNIL;
  lua_pop(L, 1);
  return r;
}

/* Pushes the script's metatable behind the guarded table t's guard, or nil
 * for the plain guard. t must be guarded. [-0, +1, -] */
static void push_usermt(lua_State *L, int t) {
  lua_getmetatable(L, t);
  lua_rawgetp(L, -1, &K_USERMT);
  lua_remove(L, -2);
}

/* Checks the fields of the would-be metatable at idx. [-0, +0, v] */
static void check_metatable(lua_State *L, int idx) {
  for (int i = 0; forbidden_meta[i]; i++) {
    lua_pushstring(L, forbidden_meta[i]);
    if (lua_rawget(L, idx) != LUA_TNIL)
      luaL_error(L, "metatable field '%s' is not allowed in the sandbox", forbidden_meta[i]);
    lua_pop(L, 1);
  }
  lua_pushliteral(L, "__call");
  int ct = lua_rawget(L, idx);
  if (ct != LUA_TNIL && ct != LUA_TFUNCTION) luaL_error(L, "metatable field '__call' must be a function");
  lua_pop(L, 1);
}

/* __newindex of every guard: [t, k, v]. Refuses the forbidden keys and a
 * non-function __call; then behaves as t's script metatable (if any) says,
 * else as a plain assignment. */
static int guard_newindex(lua_State *L) {
  lua_settop(L, 3);
  push_usermt(L, 1); /* [t, k, v, M|nil] */
  if (!lua_isnil(L, 4)) {
    lua_pushliteral(L, "__newindex");
    int ht = lua_rawget(L, 4); /* [t, k, v, M, h] */
    if (ht == LUA_TFUNCTION) {
      lua_insert(L, 1); /* [h, t, k, v, M] */
      lua_settop(L, 4);
      lua_call(L, 3, 0);
      return 0;
    }
    if (ht != LUA_TNIL) { /* a table (or any value): the write goes there */
      lua_replace(L, 1); /* [h, k, v, M] */
      lua_settop(L, 3);
      lua_settable(L, 1);
      return 0;
    }
  }
  if (forbidden_key(L, 2))
    return luaL_error(L, "metatable field '%s' is not allowed in the sandbox", lua_tostring(L, 2));
  if (lua_type(L, 2) == LUA_TSTRING && !strcmp(lua_tostring(L, 2), "__call") &&
      !lua_isnil(L, 3) && lua_type(L, 3) != LUA_TFUNCTION)
    return luaL_error(L, "metatable field '__call' must be a function");
  lua_settop(L, 3);
  lua_rawset(L, 1);
  return 0;
}

/* __index of a wrapping guard: [t, k] -> M.__index applied to t, read on
 * every access so later changes to M.__index count. */
static int guard_index(lua_State *L) {
  lua_settop(L, 2);
  push_usermt(L, 1);
  if (lua_isnil(L, 3)) return 1;
  lua_pushliteral(L, "__index");
  int ht = lua_rawget(L, 3); /* [t, k, M, h] */
  if (ht == LUA_TNIL) return 1;
  if (ht == LUA_TFUNCTION) {
    lua_pushvalue(L, 1);
    lua_pushvalue(L, 2);
    lua_call(L, 2, 1);
    return 1;
  }
  lua_pushvalue(L, 2);
  lua_gettable(L, 4);
  return 1;
}

/* Pushes a wrapping guard for the script metatable at m. [-0, +1, m] */
static void push_wrapping_guard(lua_State *L, int m) {
  m = lua_absindex(L, m);
  lua_createtable(L, 0, 4);
  lua_pushvalue(L, m);
  lua_rawsetp(L, -2, &K_USERMT);
  lua_pushcfunction(L, guard_index);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, guard_newindex);
  lua_setfield(L, -2, "__newindex");
  for (int i = 0; copied_meta[i]; i++) {
    lua_pushstring(L, copied_meta[i]);
    if (lua_rawget(L, m) == LUA_TNIL) lua_pop(L, 1);
    else lua_setfield(L, -2, copied_meta[i]);
  }
}

/* Makes the table at idx a guarded metatable (idempotent). A table that has
 * a script metatable M gets a wrapping guard around M. [-0, +0, m] */
static void guard_metatable(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (!lua_getmetatable(L, idx)) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &K_GUARD);
    lua_setmetatable(L, idx);
    return;
  }
  if (is_guard(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  push_wrapping_guard(L, -1); /* [M, G] */
  lua_setmetatable(L, idx);
  lua_pop(L, 1);
}

/* Does the (non-guard) metatable at idx carry __metatable? [-0, +0, -] */
static int is_protected(lua_State *L, int idx) {
  lua_pushliteral(L, "__metatable");
  int r = lua_rawget(L, idx) != LUA_TNIL;
  lua_pop(L, 1);
  return r;
}

/* setmetatable(t, mt) with the metatable policy. [-2, +1, e] */
static int l_setmetatable(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int t = lua_type(L, 2);
  luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
  lua_settop(L, 2);
  if (is_readonly(L, 1)) return luaL_error(L, "cannot change the metatable of a read-only table");
  if (t == LUA_TTABLE) {
    /* A proxy's metatable is the sandbox's: it is never wrapped. */
    if (is_readonly(L, 2)) return luaL_error(L, "a read-only table cannot be used as a metatable");
    check_metatable(L, 2);
    /* setmetatable(t, t): guard t first, so it is a metatable from here on
     * and takes the guard branch below, instead of its own guard being
     * replaced by the very table it guards. */
    if (lua_rawequal(L, 1, 2)) guard_metatable(L, 2);
  }
  if (lua_getmetatable(L, 1)) { /* [t, mt, cur] */
    if (is_guard(L, 3)) {
      /* t is a metatable itself: the guard stays, whatever the script asks. */
      push_usermt(L, 1); /* [t, mt, cur, M|nil] */
      if (!lua_isnil(L, 4) && is_protected(L, 4)) return luaL_error(L, "cannot change a protected metatable");
      if (t == LUA_TNIL) lua_rawgetp(L, LUA_REGISTRYINDEX, &K_GUARD);
      else push_wrapping_guard(L, 2);
      lua_setmetatable(L, 1);
      lua_settop(L, 1);
      return 1;
    }
    if (is_protected(L, 3)) return luaL_error(L, "cannot change a protected metatable");
    lua_pop(L, 1);
  }
  if (t == LUA_TTABLE) guard_metatable(L, 2);
  lua_setmetatable(L, 1);
  return 1;
}

/* getmetatable(v): as stock (honours __metatable), but a guard is never
 * returned: the script sees its own metatable or nil. [-1, +1, -] */
static int l_getmetatable(lua_State *L) {
  luaL_checkany(L, 1);
  if (!lua_getmetatable(L, 1)) {
    lua_pushnil(L);
    return 1;
  }
  if (is_guard(L, -1)) {
    lua_rawgetp(L, -1, &K_USERMT); /* nil for the plain guard */
    if (lua_isnil(L, -1)) return 1;
  }
  lua_pushliteral(L, "__metatable");
  if (lua_rawget(L, -2) != LUA_TNIL) return 1;
  lua_pop(L, 1);
  return 1;
}

/* rawset refuses read-only proxies and the forbidden metatable keys, which
 * would otherwise slip past the guard. [-3, +1, e] */
static int l_rawset(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checkany(L, 2);
  luaL_checkany(L, 3);
  if (is_readonly(L, 1)) return luaL_error(L, "attempt to modify read-only table");
  if (forbidden_key(L, 2))
    return luaL_error(L, "rawset of '%s' is not allowed in the sandbox", lua_tostring(L, 2));
  lua_settop(L, 3);
  lua_rawset(L, 1);
  return 1;
}

/* tostring without addresses: tables, functions, threads and userdata show
 * their type only. [-0, +1, e] */
static const char *safe_tostring(lua_State *L, int idx, size_t *len) {
  idx = lua_absindex(L, idx);
  if (luaL_getmetafield(L, idx, "__tostring") != LUA_TNIL) {
    lua_pushvalue(L, idx);
    lua_call(L, 1, 1);
    if (!lua_isstring(L, -1)) luaL_error(L, "'__tostring' must return a string");
    return lua_tolstring(L, -1, len);
  }
  switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
    case LUA_TSTRING:
      lua_pushvalue(L, idx);
      return lua_tolstring(L, -1, len);
    case LUA_TBOOLEAN:
      lua_pushstring(L, lua_toboolean(L, idx) ? "true" : "false");
      break;
    case LUA_TNIL:
      lua_pushliteral(L, "nil");
      break;
    case LUA_TLIGHTUSERDATA:
      lua_pushstring(L, lua_touserdata(L, idx) == NULL ? "null" : "userdata");
      break;
    default:
      lua_pushstring(L, luaL_typename(L, idx));
      break;
  }
  return lua_tolstring(L, -1, len);
}

static int l_tostring(lua_State *L) {
  luaL_checkany(L, 1);
  safe_tostring(L, 1, NULL);
  return 1;
}

static void sb_write(struct sandbox *s, const char *stream, const char *text, size_t len) {
  if (s->out_truncated) return;
  struct sbuf b = {0};
  size_t room = s->out_limit > s->out_used ? s->out_limit - s->out_used : 0;
  /* print keeps its lines; log lines are one line each, so they can't be forged. */
  if (!strcmp(stream, "print")) util_escape_output(&b, text, len, room < 65536 ? room : 65536);
  else util_escape_text(&b, text, len, room < 16384 ? room : 16384);
  if (s->out_used + b.len >= s->out_limit) {
    s->out_truncated = 1;
    sbuf_puts(&b, " [output limit reached; further output dropped]");
  }
  s->out_used += b.len;
  if (s->out.write) s->out.write(s->out.ud, stream, b.s ? b.s : "", b.len);
  sbuf_free(&b);
}

/* Joins the arguments with tabs through safe_tostring. [-0, +1, e] */
static void join_args(lua_State *L, int first) {
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = first; i <= n; i++) {
    size_t len;
    const char *s = safe_tostring(L, i, &len);
    luaL_addvalue(&b);
    (void)s;
    (void)len;
    if (i < n) luaL_addchar(&b, '\t');
  }
  luaL_pushresult(&b);
}

static int l_print(lua_State *L) {
  if (sandbox__poll(L)) return kill_raise(L);
  join_args(L, 1);
  size_t len;
  const char *t = lua_tolstring(L, -1, &len);
  sb_write(sb_of(L), "print", t, len);
  return 0;
}

static int l_log(lua_State *L) {
  const char *level = lua_tostring(L, lua_upvalueindex(1));
  if (sandbox__poll(L)) return kill_raise(L);
  join_args(L, 1);
  size_t len;
  const char *t = lua_tolstring(L, -1, &len);
  sb_write(sb_of(L), level, t, len);
  return 0;
}

static int l_collectgarbage(lua_State *L) {
  const char *opt = luaL_optstring(L, 1, "count");
  if (strcmp(opt, "count") != 0)
    return luaL_error(L, "collectgarbage('%s') is not allowed in the sandbox", opt);
  int kb = lua_gc(L, LUA_GCCOUNT, 0), b = lua_gc(L, LUA_GCCOUNTB, 0);
  lua_pushnumber(L, (lua_Number)kb + (lua_Number)b / 1024);
  return 1;
}

static void push_env(lua_State *L);

/* load(chunk [, name [, mode [, env]]]): text only; without env the chunk
 * gets a fresh environment of its own. [-?, +2, -] */
static int l_load(lua_State *L) {
  size_t len;
  const char *code = lua_tolstring(L, 1, &len);
  if (!code) return luaL_argerror(L, 1, "only string chunks can be loaded in the sandbox");
  const char *name = luaL_optstring(L, 2, "=(load)");
  const char *mode = luaL_optstring(L, 3, "t");
  if (!strchr(mode, 't')) return luaL_error(L, "only text chunks can be loaded in the sandbox");
  if (len && code[0] == LUA_SIGNATURE[0]) {
    luaL_pushfail(L);
    lua_pushliteral(L, "attempt to load a binary chunk (only text is allowed)");
    return 2;
  }
  int has_env = !lua_isnone(L, 4);
  if (luaL_loadbufferx(L, code, len, name, "t") != LUA_OK) {
    luaL_pushfail(L);
    lua_insert(L, -2);
    return 2;
  }
  if (has_env) lua_pushvalue(L, 4);
  else push_env(L);
  if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
  return 1;
}

static int l_forbidden(lua_State *L) {
  return luaL_error(L, "'%s' is not available in the sandbox", lua_tostring(L, lua_upvalueindex(1)));
}

/* pcall/xpcall: once the run is killed the error is re-raised at once, so
 * `while true do pcall(f) end` cannot outlive a limit. */
static int finish_pcall(lua_State *L, int status, lua_KContext extra) {
  struct sandbox *s = sb_of(L);
  if (s->killed) return kill_raise(L);
  if (status != LUA_OK && status != LUA_YIELD) {
    lua_pushboolean(L, 0);
    lua_pushvalue(L, -2);
    return 2;
  }
  return lua_gettop(L) - (int)extra;
}

static int l_pcall(lua_State *L) {
  luaL_checkany(L, 1);
  lua_pushboolean(L, 1);
  lua_insert(L, 1);
  int status = lua_pcallk(L, lua_gettop(L) - 2, LUA_MULTRET, 0, 0, finish_pcall);
  return finish_pcall(L, status, 0);
}

/* The xpcall handler wrapper: skips the user's handler once killed (5.4
 * would run it with hooks disabled). upvalue 1 is the user's handler. */
static int xpcall_handler(lua_State *L) {
  if (sb_of(L)->killed) return 1;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

static int l_xpcall(lua_State *L) {
  int n = lua_gettop(L);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushboolean(L, 1);
  lua_pushvalue(L, 1);
  lua_rotate(L, 3, 2); /* [f, h, true, f, args...] */
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, xpcall_handler, 1);
  lua_replace(L, 2); /* [f, wrapped_h, true, f, args...] */
  int status = lua_pcallk(L, n - 2, LUA_MULTRET, 2, 2, finish_pcall);
  return finish_pcall(L, status, 2);
}

/* ------------------------------------------------------------ coroutines */

/* The coroutine library's create, wrap, resume and close, so that
 *  - every thread runs the count hook with the sandbox's budget: a new
 *    thread is armed explicitly and charged its period up front (the part
 *    of a period it may run unseen);
 *  - a killed run resumes nothing: the kill is raised in the resumer;
 *  - resume, wrap and close nest at most CO_MAX_NEST deep, with a clear
 *    error instead of a C stack overflow.
 * Their semantics are those of stock lcorolib.c otherwise. */

static lua_State *co_check(lua_State *L, int idx) {
  lua_State *co = lua_tothread(L, idx);
  luaL_argexpected(L, co, idx, "thread");
  return co;
}

/* Pushes a new thread running the function at idx. [-0, +1, e] */
static lua_State *co_new(lua_State *L, int idx) {
  struct sandbox *s = sb_of(L);
  luaL_checktype(L, idx, LUA_TFUNCTION);
  sandbox__charge(L, s->co_period);
  lua_State *co = lua_newthread(L);
  lua_sethook(co, count_hook, LUA_MASKCOUNT, (int)s->co_period);
  lua_pushvalue(L, idx);
  lua_xmove(L, co, 1);
  return co;
}

static int co_nest_error(lua_State *L) {
  lua_pushfstring(L, "coroutines nested too deeply (more than %d levels of resume/wrap/close)",
                  CO_MAX_NEST);
  return -1;
}

/* Resumes co with the top narg values of L. Returns the number of results
 * moved onto L, or -1 with an error value on top of L. Raises the kill when
 * the run is (or becomes) killed. [-narg, +(n|1), e] */
static int co_resume(lua_State *L, lua_State *co, int narg) {
  struct sandbox *s = sb_of(L);
  if (limits_check(L, s)) kill_raise(L);
  if (lua_status(co) == LUA_OK && lua_gettop(co) == 0) {
    lua_pushliteral(L, "cannot resume dead coroutine");
    return -1;
  }
  if (!lua_checkstack(co, narg)) {
    lua_pushliteral(L, "too many arguments to resume");
    return -1;
  }
  if (s->co_depth >= CO_MAX_NEST) return co_nest_error(L);
  lua_xmove(L, co, narg);
  int nres = 0;
  s->co_depth++;
  int status = lua_resume(co, L, narg, &nres);
  s->co_depth--;
  if (s->killed) kill_raise(L);
  if (status == LUA_OK || status == LUA_YIELD) {
    if (!lua_checkstack(L, nres + 1)) {
      lua_pop(co, nres);
      lua_pushliteral(L, "too many results to resume");
      return -1;
    }
    lua_xmove(co, L, nres);
    return nres;
  }
  lua_xmove(co, L, 1); /* the error value */
  return -1;
}

static int l_co_create(lua_State *L) {
  co_new(L, 1);
  return 1;
}

/* coroutine.resume(co, ...) -> true, ... | false, err [-?, +?, e] */
static int l_co_resume(lua_State *L) {
  lua_State *co = co_check(L, 1);
  int r = co_resume(L, co, lua_gettop(L) - 1);
  if (r < 0) {
    lua_pushboolean(L, 0);
    lua_insert(L, -2);
    return 2;
  }
  lua_pushboolean(L, 1);
  lua_insert(L, -(r + 1));
  return r + 1;
}

/* Closes co's pending to-be-closed variables (lua_resetthread), counted as
 * one nesting level. Returns its status. */
static int co_reset(lua_State *L, lua_State *co) {
  struct sandbox *s = sb_of(L);
  s->co_depth++;
  int st = lua_resetthread(co);
  s->co_depth--;
  if (s->killed) kill_raise(L);
  return st;
}

/* The function coroutine.wrap returns: upvalue 1 is the thread. */
static int co_auxwrap(lua_State *L) {
  lua_State *co = lua_tothread(L, lua_upvalueindex(1));
  int r = co_resume(L, co, lua_gettop(L));
  if (r >= 0) return r;
  int st = lua_status(co);
  if (st != LUA_OK && st != LUA_YIELD) { /* died with an error: close it */
    if (sb_of(L)->co_depth >= CO_MAX_NEST) {
      co_nest_error(L);
      return lua_error(L);
    }
    st = co_reset(L, co);
    lua_xmove(co, L, 1);
    lua_replace(L, -2); /* the error after closing, as stock */
  }
  if (st != LUA_ERRMEM && lua_type(L, -1) == LUA_TSTRING) {
    luaL_where(L, 1);
    lua_insert(L, -2);
    lua_concat(L, 2);
  }
  return lua_error(L);
}

static int l_co_wrap(lua_State *L) {
  co_new(L, 1);
  lua_pushcclosure(L, co_auxwrap, 1);
  return 1;
}

/* coroutine.close(co) -> true | false, err [-1, +(1|2), e] */
static int l_co_close(lua_State *L) {
  lua_State *co = co_check(L, 1);
  int dead_or_suspended;
  if (co == L) dead_or_suspended = 0;
  else if (lua_status(co) == LUA_YIELD) dead_or_suspended = 1;
  else if (lua_status(co) == LUA_OK) {
    lua_Debug ar;
    dead_or_suspended = !lua_getstack(co, 0, &ar); /* else: normal (it resumed us) */
  } else dead_or_suspended = 1; /* died with an error */
  if (!dead_or_suspended)
    return luaL_error(L, "cannot close a %s coroutine", co == L ? "running" : "normal");
  if (sb_of(L)->co_depth >= CO_MAX_NEST) {
    co_nest_error(L);
    return lua_error(L);
  }
  if (co_reset(L, co) == LUA_OK) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushboolean(L, 0);
  lua_xmove(co, L, 1);
  return 2;
}

/* ---------------------------------------------- bounded library functions */

/* Calls the original library function (upvalue 1) with the wrapper's
 * arguments. The original runs as a call from C, so its own errors would
 * name it '?' and carry no position; they are raised again from the
 * wrapper's frame the way stock luaL_argerror would have: with the
 * script's file:line and the name the script called it by (upvalue 2 when
 * no name is known, e.g. "string.format" under pcall). Upvalue 3 true:
 * every error of the original is its own (prefix the position); false:
 * only argument errors are (others may come from metamethods, which carry
 * their own). [-n, +r, e] */
static int call_original(lua_State *L) {
  int n = lua_gettop(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  int st = lua_pcall(L, n, LUA_MULTRET, 0);
  if (st == LUA_OK) return lua_gettop(L);
  if (sb_of(L)->killed) return kill_raise(L);
  if (st != LUA_ERRRUN || lua_type(L, -1) != LUA_TSTRING) return lua_error(L);
  const char *msg = lua_tostring(L, -1);
  lua_Debug ar;
  memset(&ar, 0, sizeof ar);
  const char *name = NULL;
  if (lua_getstack(L, 0, &ar) && lua_getinfo(L, "n", &ar)) name = ar.name;
  if (!name) name = lua_tostring(L, lua_upvalueindex(2));
  const char *pre = "bad argument #", *q = " to '?'";
  if (!strncmp(msg, pre, strlen(pre))) {
    char *end;
    long arg = strtol(msg + strlen(pre), &end, 10);
    if (end != msg + strlen(pre) && !strncmp(end, q, strlen(q))) {
      const char *rest = end + strlen(q);
      luaL_where(L, 1);
      if (ar.namewhat && !strcmp(ar.namewhat, "method") && --arg == 0)
        lua_pushfstring(L, "calling '%s' on bad self%s", name, rest);
      else
        lua_pushfstring(L, "bad argument #%d to '%s'%s", (int)arg, name, rest);
      lua_concat(L, 2);
      return lua_error(L);
    }
  }
  if (lua_toboolean(L, lua_upvalueindex(3))) {
    luaL_where(L, 1);
    lua_insert(L, -2);
    lua_concat(L, 2);
  }
  return lua_error(L);
}

/* string.rep as stock, except: an empty result returns at once (5.4.4
 * loops n times in C even when nothing is copied), a result that cannot fit
 * in the memory left raises stock's catchable "resulting string too large"
 * before anything is allocated (nothing was spent, so it is no limit), and
 * the copy is charged by size. */
static int l_str_rep(lua_State *L) {
  size_t l, lsep;
  const char *s = luaL_checklstring(L, 1, &l);
  lua_Integer n = luaL_checkinteger(L, 2);
  const char *sep = luaL_optlstring(L, 3, "", &lsep);
  if (n <= 0 || (l == 0 && lsep == 0)) {
    lua_pushliteral(L, "");
    return 1;
  }
  struct sandbox *sb = sb_of(L);
  double total = (double)l * (double)n + (double)lsep * (double)(n - 1);
  if (total >= (double)sandbox__mem_room(L)) return luaL_error(L, "resulting string too large");
  sandbox__charge(L, (uint64_t)(total / 64) + (uint64_t)n / 8);
  (void)sb;
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, (size_t)total);
  for (lua_Integer i = 0; i < n; i++) {
    memcpy(p, s, l);
    p += l;
    if (i + 1 < n && lsep) {
      memcpy(p, sep, lsep);
      p += lsep;
    }
  }
  luaL_pushresultsize(&b, (size_t)total);
  return 1;
}

/* string.format without %p, and %s of a table, function, thread or
 * userdata shows its type, never an address. Other conversions get their
 * arguments untouched, so %q and %d of a table raise as stock does. */
static int l_str_format(lua_State *L) {
  size_t flen;
  const char *fmt = luaL_checklstring(L, 1, &flen);
  int n = lua_gettop(L), arg = 1;
  for (size_t i = 0; i < flen; i++) {
    if (fmt[i] != '%') continue;
    size_t j = i + 1;
    if (j < flen && fmt[j] == '%') {
      i = j;
      continue;
    }
    arg++;
    while (j < flen && strchr("-+ #0123456789.", fmt[j])) j++;
    if (j < flen && fmt[j] == 'p') return luaL_error(L, "string.format: '%%p' is not allowed in the sandbox");
    if (j < flen && fmt[j] == 's' && arg <= n) {
      int t = lua_type(L, arg);
      if (t == LUA_TTABLE || t == LUA_TFUNCTION || t == LUA_TTHREAD || t == LUA_TUSERDATA ||
          t == LUA_TLIGHTUSERDATA) {
        safe_tostring(L, arg, NULL);
        lua_replace(L, arg);
      }
    }
    i = j;
  }
  return call_original(L);
}

/* table.move: stock's argument checks first (catchable errors), then the
 * range is charged before the C loop runs, so only a move the budget
 * cannot pay for ends the run. */
static int l_tab_move(lua_State *L) {
  lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);
  lua_Integer t = luaL_checkinteger(L, 4);
  if (e >= f) {
    luaL_argcheck(L, f > 0 || e < LUA_MAXINTEGER + f, 3, "too many elements to move");
    lua_Integer cnt = e - f + 1;
    luaL_argcheck(L, t <= LUA_MAXINTEGER - cnt + 1, 4, "destination wrap around");
    sandbox__charge(L, (uint64_t)cnt);
  }
  return call_original(L);
}

/* table.sort and table.concat run their whole loop inside one C call that
 * the count hook never sees (sorting 2 million numbers takes 0.7 s for 3
 * VM instructions): charge the work first, n log n compares and n pieces,
 * so a loop of them meets the instruction budget and the deadline. */
static int l_tab_sort(lua_State *L) {
  if (lua_type(L, 1) == LUA_TTABLE) {
    uint64_t n = (uint64_t)lua_rawlen(L, 1), lg = 1;
    while ((1ull << lg) < n) lg++;
    sandbox__charge(L, n * lg);
  }
  return call_original(L);
}

static int l_tab_concat(lua_State *L) {
  if (lua_type(L, 1) == LUA_TTABLE) sandbox__charge(L, (uint64_t)lua_rawlen(L, 1));
  return call_original(L);
}

/* Wraps field `name` of the library table at top (named lib) with a C
 * closure over the original (see call_original). [-0, +0, m] */
static void wrap_field(lua_State *L, const char *lib, const char *name, lua_CFunction f,
                       int own_errors) {
  lua_getfield(L, -1, name);
  lua_pushfstring(L, "%s.%s", lib, name);
  lua_pushboolean(L, own_errors);
  lua_pushcclosure(L, f, 3);
  lua_setfield(L, -2, name);
}

/* --------------------------------------------------------------- globals */

static int env_index(lua_State *L) {
  /* upvalue 1: the shared globals. [t, k] */
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
  if (lua_type(L, 2) == LUA_TSTRING)
    return luaL_error(L, "undefined global '%s'", lua_tostring(L, 2));
  return luaL_error(L, "undefined global");
}

/* Pushes a fresh _ENV: an empty table that reads through to the shared
 * globals and raises on a miss. [-0, +1, m] */
static void push_env(lua_State *L) {
  lua_createtable(L, 0, 4);
  lua_pushvalue(L, -1);
  lua_setfield(L, -2, "_G");
  lua_createtable(L, 0, 2);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &K_GLOBALS);
  lua_pushcclosure(L, env_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
}

/* Copies the allowed functions of a freshly opened library into a new
 * table. names: NULL-terminated. [-0, +1, m] */
static void copy_fields(lua_State *L, int src, const char *const *names) {
  lua_newtable(L);
  for (int i = 0; names[i]; i++) {
    lua_getfield(L, src, names[i]);
    lua_setfield(L, -2, names[i]);
  }
}

static const char *const base_allowed[] = {
    "assert", "error", "ipairs", "next", "pairs", "rawequal", "rawget",
    "rawlen", "select", "tonumber", "type", NULL};
static const char *const os_allowed[] = {"time", "clock", "date", "difftime", NULL};

/* ------------------------------------------------------------ host calls */


/* Raises a structured error { code, message, tool? } at the caller's line. */
static int raise_structured(lua_State *L, const char *code, const char *msg, const char *subject) {
  lua_createtable(L, 0, 3);
  lua_pushstring(L, code);
  lua_setfield(L, -2, "code");
  luaL_where(L, 1);
  lua_pushstring(L, msg);
  lua_concat(L, 2);
  lua_setfield(L, -2, "message");
  if (subject && *subject) {
    lua_pushstring(L, subject);
    lua_setfield(L, -2, "tool");
  }
  lua_rawgetp(L, LUA_REGISTRYINDEX, &K_ERRMT);
  lua_setmetatable(L, -2);
  return lua_error(L);
}

static int errobj_tostring(lua_State *L) {
  lua_getfield(L, 1, "message");
  if (!lua_isstring(L, -1)) lua_pushliteral(L, "error");
  return 1;
}

/* Host function trampoline: Lua args -> JSON array -> fn -> Lua value.
 * A killed, stopped or expired run does no more work: the limits are
 * checked before anything else, on whatever thread the call comes from,
 * so no host function (tools.call, delegate, memory.*) runs after a kill. */
static int l_hostfn(lua_State *L) {
  struct hostfn *h = lua_touserdata(L, lua_upvalueindex(1));
  struct sandbox *s = sb_of(L);
  if (s->pending) cJSON_Delete(s->pending), s->pending = NULL;
  if (limits_check(L, s)) return kill_raise(L);
  int n = lua_gettop(L);
  char cerr[256];
  cJSON *args = cJSON_CreateArray();
  if (!args) return luaL_error(L, "%s: out of memory", h->name);
  size_t room = sandbox__mem_room(L); /* one budget for all the arguments */
  for (int i = 1; i <= n; i++) {
    cJSON *v = sandbox__to_json_budget(L, i, 0, &room, cerr, sizeof cerr);
    if (!v) {
      cJSON_Delete(args);
      if (s->killed) return kill_raise(L);
      char msg[400];
      snprintf(msg, sizeof msg, "%s: argument #%d: %s", h->name, i, cerr);
      return raise_structured(L, "invalid_args", msg, NULL);
    }
    cJSON_AddItemToArray(args, v);
  }
  cJSON *ret = NULL;
  struct err e;
  memset(&e, 0, sizeof e);
  int rc = h->fn(h->ud, s, args, &ret, &e);
  cJSON_Delete(args);
  if (s->killed) {
    cJSON_Delete(ret);
    return kill_raise(L);
  }
  if (rc < 0) {
    cJSON_Delete(ret);
    char code[32], msg[sizeof e.msg], subject[sizeof e.subject];
    snprintf(code, sizeof code, "%s", e.code[0] ? e.code : "error");
    memcpy(msg, e.msg, sizeof msg);
    msg[sizeof msg - 1] = 0;
    memcpy(subject, e.subject, sizeof subject);
    subject[sizeof subject - 1] = 0;
    /* Nothing on the heap survives past here: lua_error longjmps. */
    return raise_structured(L, code, msg, subject);
  }
  if (!ret) {
    /* One nil, not no value: tostring(memory.get(k)) and {f()} work. */
    lua_pushnil(L);
    return 1;
  }
  if (sandbox__push_json_take(L, ret)) return luaL_error(L, "%s: result too deeply nested", h->name);
  return 1;
}

int sandbox__push_json_take(lua_State *L, cJSON *v) {
  struct sandbox *s = sb_of(L);
  /* Pushing can raise a memory error: the sandbox holds v meanwhile and
   * frees it on the next host call or in sandbox_free. */
  if (s->pending) cJSON_Delete(s->pending);
  s->pending = v;
  int ok = lua_checkstack(L, 8) && sandbox__push_json(L, v, 0) == 0;
  s->pending = NULL;
  cJSON_Delete(v);
  return ok ? 0 : -1;
}

int sandbox_add_function(struct sandbox *sb, const char *lib, const char *name, sb_hostfn fn,
                         void *ud) {
  if (!sb || !name || !fn) return ERR_INVALID;
  lua_State *L = sb->L;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &K_GLOBALS); /* [G] */
  int libidx = 0;
  if (lib) {
    /* Libraries are kept as real tables under a registry name and exposed
     * through a read-only proxy; add to the real one. */
    lua_pushfstring(L, "luagent.lib.%s", lib);
    if (lua_rawget(L, LUA_REGISTRYINDEX) != LUA_TTABLE) {
      lua_pop(L, 1);
      lua_newtable(L);
      lua_pushfstring(L, "luagent.lib.%s", lib);
      lua_pushvalue(L, -2);
      lua_rawset(L, LUA_REGISTRYINDEX);
      lua_pushvalue(L, -1);
      make_readonly(L, lib);
      lua_setfield(L, -3, lib); /* G[lib] = proxy */
    }
    libidx = lua_gettop(L);
  }
  struct hostfn *h = lua_newuserdatauv(L, sizeof *h, 0);
  h->fn = fn;
  h->ud = ud;
  snprintf(h->name, sizeof h->name, "%s%s%s", lib ? lib : "", lib ? "." : "", name);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &K_HOSTFN);
  lua_setmetatable(L, -2);
  lua_pushcclosure(L, l_hostfn, 1);
  lua_setfield(L, libidx ? libidx : -2, name);
  lua_settop(L, 0);
  return 0;
}

/* Runs under lua_pcall: [name, value(light userdata)] sets the global. */
static int set_global_p(lua_State *L) {
  const char *name = lua_touserdata(L, 1);
  const cJSON *value = lua_touserdata(L, 2);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &K_GLOBALS);
  if (sandbox__push_json(L, value, 0) != 0) return luaL_error(L, "value too deeply nested");
  if (lua_type(L, -1) == LUA_TTABLE) make_readonly(L, name);
  lua_setfield(L, -2, name);
  return 0;
}

int sandbox_set_global(struct sandbox *sb, const char *name, const cJSON *value, struct err *e) {
  lua_State *L = sb->L;
  lua_settop(L, 0);
  lua_pushcfunction(L, set_global_p);
  lua_pushlightuserdata(L, (void *)name);
  lua_pushlightuserdata(L, (void *)value);
  int st = lua_pcall(L, 2, 0, 0);
  int rc = 0;
  if (st == LUA_ERRMEM || sb->killed) rc = err_set(e, ERR_NOMEM, "limit_memory", "global %s: not enough memory", name);
  else if (st != LUA_OK) rc = err_set(e, ERR_INVALID, "invalid", "global %s: %s", name, lua_tostring(L, -1));
  lua_settop(L, 0);
  return rc;
}

void sandbox_set_output(struct sandbox *sb, const struct sb_output *out) {
  if (sb && out) sb->out = *out;
}

/* -------------------------------------------------------------- creation */

/* Builds the state inside a pcall so an allocation failure is an error,
 * not a panic (lua.c's pmain). */
static int setup(lua_State *L) {
  struct sandbox *s = lua_touserdata(L, 1);
  lua_settop(L, 0);
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &K_READONLY);

  /* Structured-error and host-function metatables (protected). */
  lua_createtable(L, 0, 2);
  lua_pushcfunction(L, errobj_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushliteral(L, "error");
  lua_setfield(L, -2, "__metatable");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &K_ERRMT);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "host function");
  lua_setfield(L, -2, "__metatable");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &K_HOSTFN);
  lua_createtable(L, 0, 2);
  lua_pushcfunction(L, guard_newindex);
  lua_setfield(L, -2, "__newindex");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &K_GUARD);

  /* base: opened into the raw globals, then copied selectively. */
  luaL_requiref(L, LUA_GNAME, luaopen_base, 1);
  int base = lua_gettop(L);
  lua_newtable(L); /* G: what scripts see */
  int G = lua_gettop(L);
  for (int i = 0; base_allowed[i]; i++) {
    lua_getfield(L, base, base_allowed[i]);
    lua_setfield(L, G, base_allowed[i]);
  }
  static const luaL_Reg repl[] = {{"setmetatable", l_setmetatable}, {"getmetatable", l_getmetatable}, {"rawset", l_rawset},
                                  {"tostring", l_tostring},         {"print", l_print},
                                  {"collectgarbage", l_collectgarbage}, {"load", l_load},
                                  {"pcall", l_pcall},               {"xpcall", l_xpcall},
                                  {NULL, NULL}};
  lua_pushvalue(L, G);
  luaL_setfuncs(L, repl, 0);
  lua_pop(L, 1);
  static const char *const gone[] = {"require", "loadstring", NULL};
  for (int i = 0; gone[i]; i++) {
    lua_pushstring(L, gone[i]);
    lua_pushcclosure(L, l_forbidden, 1);
    lua_setfield(L, G, gone[i]);
  }
  lua_pushliteral(L, LUA_VERSION);
  lua_setfield(L, G, "_VERSION");

  /* string: real table stays the string metatable's __index; scripts get a
   * read-only proxy and getmetatable("") shows only a name. */
  luaL_requiref(L, LUA_STRLIBNAME, luaopen_string, 0);
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  wrap_field(L, "string", "format", l_str_format, 1);
  lua_pushcfunction(L, l_str_rep);
  lua_setfield(L, -2, "rep");
  sandbox__open_pattern(L, lua_gettop(L));
  lua_pushliteral(L, "");
  lua_getmetatable(L, -1);
  lua_pushliteral(L, "string");
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 2);
  make_readonly(L, "string");
  lua_setfield(L, G, "string");

  luaL_requiref(L, LUA_TABLIBNAME, luaopen_table, 0);
  wrap_field(L, "table", "move", l_tab_move, 0);
  wrap_field(L, "table", "sort", l_tab_sort, 0);
  wrap_field(L, "table", "concat", l_tab_concat, 0);
  make_readonly(L, "table");
  lua_setfield(L, G, "table");

  luaL_requiref(L, LUA_MATHLIBNAME, luaopen_math, 0);
  make_readonly(L, "math");
  lua_setfield(L, G, "math");
  luaL_requiref(L, LUA_UTF8LIBNAME, luaopen_utf8, 0);
  make_readonly(L, "utf8");
  lua_setfield(L, G, "utf8");
  luaL_requiref(L, LUA_COLIBNAME, luaopen_coroutine, 0);
  static const luaL_Reg co[] = {{"create", l_co_create}, {"resume", l_co_resume},
                                {"wrap", l_co_wrap},     {"close", l_co_close},
                                {NULL, NULL}};
  luaL_setfuncs(L, co, 0);
  make_readonly(L, "coroutine");
  lua_setfield(L, G, "coroutine");

  luaL_requiref(L, LUA_OSLIBNAME, luaopen_os, 0);
  copy_fields(L, lua_gettop(L), os_allowed);
  make_readonly(L, "os");
  lua_setfield(L, G, "os");
  lua_pop(L, 1);

  /* json and log */
  sandbox__open_json(L); /* pushes the json table */
  make_readonly(L, "json");
  lua_setfield(L, G, "json");
  lua_newtable(L);
  static const char *const levels[] = {"debug", "info", "warn", "error", NULL};
  for (int i = 0; levels[i]; i++) {
    lua_pushstring(L, levels[i]);
    lua_pushcclosure(L, l_log, 1);
    lua_setfield(L, -2, levels[i]);
  }
  make_readonly(L, "log");
  lua_setfield(L, G, "log");

  lua_pushvalue(L, G);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &K_GLOBALS);
  lua_settop(L, 0);
  (void)s;
  return 0;
}

int sandbox_new(const struct sb_limits *lim, struct sandbox **out, struct err *e) {
  *out = NULL;
  struct sb_limits d;
  if (!lim) {
    sb_limits_default(&d);
    lim = &d;
  }
  struct sandbox *s = xcalloc(1, sizeof *s);
  s->mem_limit = lim->memory_bytes ? lim->memory_bytes : ((size_t)64 << 20);
  s->instr_limit = lim->instructions ? lim->instructions : 100000000ULL;
  s->hook_period = s->instr_limit < HOOK_PERIOD ? (unsigned)s->instr_limit : HOOK_PERIOD;
  if (s->hook_period == 0) s->hook_period = 1;
  s->co_period = s->hook_period < CO_HOOK_PERIOD ? s->hook_period : CO_HOOK_PERIOD;
  double now = util_monotonic();
  s->deadline = now + (lim->deadline_s > 0 ? lim->deadline_s : 30);
  if (lim->deadline_at > 0 && lim->deadline_at < s->deadline) s->deadline = lim->deadline_at;
  s->max_depth = lim->max_depth > 0 ? lim->max_depth : 1000;
  s->out_limit = lim->output_bytes ? lim->output_bytes : ((size_t)1 << 20);
  s->module_ref = LUA_NOREF;
  lua_State *L = lua_newstate(sb_alloc, s);
  if (!L) {
    free(s);
    return err_set(e, ERR_NOMEM, "limit_memory", "cannot create a Lua state (memory limit too small?)");
  }
  s->L = L;
  *(struct sandbox **)lua_getextraspace(L) = s;
  lua_sethook(L, count_hook, LUA_MASKCOUNT, (int)s->hook_period);
  lua_pushcfunction(L, setup);
  lua_pushlightuserdata(L, s);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    err_set(e, ERR_NOMEM, "limit_memory", "cannot set up the sandbox: %s",
            lua_isstring(L, -1) ? lua_tostring(L, -1) : "out of memory");
    lua_close(L);
    free(s);
    return ERR_NOMEM;
  }
  *out = s;
  return 0;
}

void sandbox_free(struct sandbox *sb) {
  if (!sb) return;
  if (sb->L) lua_close(sb->L);
  cJSON_Delete(sb->pending);
  free(sb);
}

size_t sandbox_memory_used(const struct sandbox *sb) { return sb->mem_used; }
uint64_t sandbox_instructions_used(const struct sandbox *sb) { return sb->instr_used; }

void sandbox_room(const struct sandbox *sb, size_t *memory, uint64_t *instructions) {
  *memory = sb->mem_used < sb->mem_limit ? sb->mem_limit - sb->mem_used : 0;
  *instructions = sb->instr_used < sb->instr_limit ? sb->instr_limit - sb->instr_used : 0;
}

void sandbox_spend(struct sandbox *sb, uint64_t instructions) {
  /* Parallel tool threads may spend on one parent at once; the parent
   * itself is blocked in the host call that started them. */
  __atomic_fetch_add(&sb->instr_used, instructions, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------- execution */

static int conv_error(struct sandbox *s, struct err *e, const char *why, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Message handler: passes the error value through untouched. It never
 * calls a script's __tostring (that could raise or loop with hooks off);
 * error_from_stack reads tables with raw access only. */
static int msghandler(lua_State *L) { return 1; }

/* Turns the error value on top into e. Kill errors win: they name the limit
 * and the line where it was first hit. */
static int error_from_stack(struct sandbox *s, int status, struct err *e) {
  lua_State *L = s->L;
  if (s->killed) {
    if (s->kill_where[0])
      return err_set(e, ERR_LIMIT, s->kill_code, "%s: %s", s->kill_where, s->kill_msg);
    return err_set(e, ERR_LIMIT, s->kill_code, "%s", s->kill_msg);
  }
  if (status == LUA_ERRMEM) return err_set(e, ERR_NOMEM, "limit_memory", "not enough memory");
  int t = lua_type(L, -1);
  if (t == LUA_TSTRING || t == LUA_TNUMBER) return err_set(e, ERR_FAIL, "error", "%s", lua_tostring(L, -1));
  if (t == LUA_TTABLE) {
    char code[32] = "error";
    lua_pushliteral(L, "code");
    if (lua_rawget(L, -2) == LUA_TSTRING) snprintf(code, sizeof code, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    lua_pushliteral(L, "message");
    lua_rawget(L, -2);
    const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    err_set(e, ERR_FAIL, code, "%s", msg ? msg : "(error object is a table value)");
    lua_pop(L, 1);
    lua_pushliteral(L, "tool");
    if (lua_rawget(L, -2) == LUA_TSTRING && e)
      snprintf(e->subject, sizeof e->subject, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return ERR_FAIL;
  }
  return err_set(e, ERR_FAIL, "error", "(error object is a %s value)", luaL_typename(L, -1));
}

/* Calls the function below nargs arguments on the stack with the message
 * handler; on error fills e. Leaves nres results on success. */
static int wd_enter(double deadline_at, const char *who);
static void wd_leave(int slot);

static int protected_call(struct sandbox *s, int nargs, int nres, struct err *e) {
  lua_State *L = s->L;
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  int slot = wd_enter(s->deadline, s->wd_name); /* a C call stuck past the deadline */
  int status = lua_pcall(L, nargs, nres, base);
  wd_leave(slot);
  lua_remove(L, base);
  if (status != LUA_OK || s->killed) {
    int rc = error_from_stack(s, status, e);
    lua_settop(L, base - 1);
    return rc;
  }
  return 0;
}

/* Pushes the module (first return of the last chunk), or nil. */
static void push_module(struct sandbox *s) {
  if (s->module_ref == LUA_NOREF) lua_pushnil(s->L);
  else lua_rawgeti(s->L, LUA_REGISTRYINDEX, s->module_ref);
}

/* The line where bracket nesting in code first gets deep enough to exhaust
 * the parser's C stack (Lua's limit is 200 levels; strings and comments
 * are skipped roughly), for an error that arrives without a position. */
static int deep_line(const char *code, size_t len) {
  int line = 1, depth = 0, first_deep = 0, deepest_line = 1, deepest = 0;
  for (size_t i = 0; i < len; i++) {
    char c = code[i];
    if (c == '\n') line++;
    else if (c == '-' && i + 1 < len && code[i + 1] == '-') {
      while (i < len && code[i] != '\n') i++;
      line++;
    } else if (c == '"' || c == '\'') {
      for (i++; i < len && code[i] != c && code[i] != '\n'; i++)
        if (code[i] == '\\') i++;
    } else if (c == '(' || c == '{' || c == '[') {
      if (++depth > deepest) deepest = depth, deepest_line = line;
      if (depth >= 190 && !first_deep) first_deep = line;
    } else if ((c == ')' || c == '}' || c == ']') && depth > 0) {
      depth--;
    }
  }
  return first_deep ? first_deep : deepest_line;
}

static int run_chunk(struct sandbox *s, const char *code, size_t len, const char *chunkname,
                     cJSON **ret, struct err *e) {
  lua_State *L = s->L;
  if (ret) *ret = NULL;
  if (s->killed) return err_set(e, ERR_LIMIT, s->kill_code, "%s", s->kill_msg);
  if (len && code[0] == LUA_SIGNATURE[0])
    return err_set(e, ERR_INVALID, "syntax", "%s: binary chunks are not allowed", chunkname);
  /* A leading "#!" line is skipped like lua.c does; its newline stays, so
   * line numbers still match the file. */
  if (len >= 2 && code[0] == '#' && code[1] == '!') {
    const char *nl = memchr(code, '\n', len);
    size_t skip = nl ? (size_t)(nl - code) : len;
    code += skip;
    len -= skip;
  }
  char name[512];
  snprintf(name, sizeof name, "@%s", chunkname);
  snprintf(s->wd_name, sizeof s->wd_name, "%s", chunkname);
  int st = luaL_loadbufferx(L, code, len, name, "t");
  if (st != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    size_t cl = strlen(chunkname);
    int rc;
    if (st == LUA_ERRMEM)
      rc = err_set(e, ERR_NOMEM, "limit_memory", "%s: not enough memory to load", chunkname);
    else if (msg && strncmp(msg, chunkname, cl) == 0 && msg[cl] == ':')
      rc = err_set(e, ERR_INVALID, "syntax", "%s", msg);
    else /* "C stack overflow" from the parser comes without a position */
      rc = err_set(e, ERR_INVALID, "syntax", "%s:%d: nested too deeply (%s)", chunkname,
                   deep_line(code, len), msg ? msg : "syntax error");
    lua_settop(L, 0);
    return rc;
  }
  push_env(L);
  lua_setupvalue(L, -2, 1);
  if (protected_call(s, 0, 1, e)) {
    lua_settop(L, 0);
    return e ? (e->rc ? e->rc : ERR_FAIL) : ERR_FAIL;
  }
  if (s->module_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, s->module_ref);
  lua_pushvalue(L, -1);
  s->module_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  int rc = 0;
  if (ret && !lua_isnil(L, -1)) {
    char cerr[256];
    *ret = sandbox__to_json(L, -1, 1, cerr, sizeof cerr);
    if (!*ret) rc = conv_error(s, e, cerr, "%s: return value", chunkname);
  }
  lua_settop(L, 0);
  return rc;
}

int sandbox_run_string(struct sandbox *sb, const char *code, size_t len, const char *chunkname,
                       cJSON **ret, struct err *e) {
  return run_chunk(sb, code, len, chunkname, ret, e);
}

int sandbox_run_file(struct sandbox *sb, const char *path, const char *chunkname, cJSON **ret,
                     struct err *e) {
  char *code;
  size_t len;
  if (ret) *ret = NULL;
  if (util_read_file(path, (size_t)8 << 20, &code, &len, e)) {
    /* util_read_file names the host path; show the display name instead. */
    if (e) {
      char msg[sizeof e->msg];
      const char *why = strrchr(e->msg, ':');
      snprintf(msg, sizeof msg, "%s%s", chunkname, why ? why : ": cannot read");
      snprintf(e->msg, sizeof e->msg, "%s", msg);
    }
    return ERR_IO;
  }
  int rc = run_chunk(sb, code, len, chunkname, ret, e);
  free(code);
  return rc;
}

/* Pushes module[path...] using raw access; returns its type. */
static int push_path(struct sandbox *s, const char *const *path) {
  lua_State *L = s->L;
  push_module(s);
  for (int i = 0; path && path[i]; i++) {
    if (lua_type(L, -1) != LUA_TTABLE) {
      lua_pop(L, 1);
      lua_pushnil(L);
      return LUA_TNIL;
    }
    lua_pushstring(L, path[i]);
    lua_rawget(L, -2);
    lua_remove(L, -2);
  }
  return lua_type(L, -1);
}

int sandbox_has_function(struct sandbox *sb, const char *const *path) {
  int t = push_path(sb, path);
  lua_settop(sb->L, 0);
  return t == LUA_TFUNCTION;
}

/* Reports a failed conversion of a value leaving the sandbox: the kill
 * (memory budget, deadline, stop) when the conversion hit one, else an
 * invalid_result naming what and where. */
static int conv_error(struct sandbox *s, struct err *e, const char *why, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int conv_error(struct sandbox *s, struct err *e, const char *why, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (s->killed) return err_set(e, ERR_LIMIT, s->kill_code, "%s: %s", what, s->kill_msg);
  return err_set(e, ERR_INVALID, "invalid_result", "%s: %s", what, why);
}

/* Pushes the items of the JSON array (upvalue-free: argument 1 is a light
 * userdata). Runs under lua_pcall. [-1, +n, m] */
static int push_args(lua_State *L) {
  const cJSON *args = lua_touserdata(L, 1);
  lua_pop(L, 1);
  int n = 0;
  for (const cJSON *c = args->child; c; c = c->next, n++) {
    if (!lua_checkstack(L, 8) || sandbox__push_json(L, c, 0) != 0)
      return luaL_error(L, "argument %d too deeply nested", n + 1);
  }
  return n;
}

int sandbox_call(struct sandbox *sb, const char *const *path, const cJSON *args, cJSON **ret,
                 cJSON **args_after, struct err *e) {
  lua_State *L = sb->L;
  if (ret) *ret = NULL;
  if (args_after) *args_after = NULL;
  if (sb->killed) return err_set(e, ERR_LIMIT, sb->kill_code, "%s", sb->kill_msg);
  lua_settop(L, 0);
  if (push_path(sb, path) != LUA_TFUNCTION) {
    struct sbuf b = {0};
    for (int i = 0; path && path[i]; i++) sbuf_printf(&b, "%s%s", i ? "." : "", path[i]);
    err_set(e, ERR_NOTFOUND, "not_found", "%s is not a function", b.s ? b.s : "module");
    sbuf_free(&b);
    lua_settop(L, 0);
    return ERR_NOTFOUND;
  }
  int nargs = args ? cJSON_GetArraySize(args) : 0;
  if (!lua_checkstack(L, 2 * nargs + 8)) {
    lua_settop(L, 0);
    return err_set(e, ERR_LIMIT, "limit_memory", "too many arguments");
  }
  /* Arguments are pushed twice: one copy is consumed by the call, the other
   * stays below it so edits to table arguments can be read back. Pushing
   * allocates, so it runs protected (a memory error is not a panic). */
  int keep = lua_gettop(L); /* function index */
  if (nargs) {
    lua_pushcfunction(L, push_args);
    lua_pushlightuserdata(L, (void *)args);
    int st = lua_pcall(L, 1, LUA_MULTRET, 0);
    if (st != LUA_OK) {
      int rc = sb->killed || st == LUA_ERRMEM
                   ? err_set(e, ERR_LIMIT, "limit_memory", "%s", sb->killed ? sb->kill_msg : "not enough memory")
                   : err_set(e, ERR_INVALID, "invalid_args", "%s", lua_tostring(L, -1));
      lua_settop(L, 0);
      return rc;
    }
  }
  lua_pushvalue(L, keep);
  for (int i = 0; i < nargs; i++) lua_pushvalue(L, keep + 1 + i);
  if (protected_call(sb, nargs, 1, e)) {
    lua_settop(L, 0);
    return e ? (e->rc ? e->rc : ERR_FAIL) : ERR_FAIL;
  }
  int rc = 0;
  char cerr[256];
  size_t room = sandbox__mem_room(L); /* one budget for all that leaves */
  if (ret && !lua_isnil(L, -1)) {
    *ret = sandbox__to_json_budget(L, -1, 0, &room, cerr, sizeof cerr);
    if (!*ret) rc = conv_error(sb, e, cerr, "return value");
  }
  if (!rc && args_after) {
    cJSON *arr = cJSON_CreateArray();
    if (!arr) rc = err_set(e, ERR_NOMEM, "limit_memory", "out of memory");
    for (int i = 0; i < nargs && !rc; i++) {
      cJSON *v = sandbox__to_json_budget(L, keep + 1 + i, 0, &room, cerr, sizeof cerr);
      if (!v) rc = conv_error(sb, e, cerr, "argument %d after the call", i + 1);
      else cJSON_AddItemToArray(arr, v);
    }
    if (rc) {
      cJSON_Delete(arr);
      if (ret) cJSON_Delete(*ret), *ret = NULL;
    } else {
      *args_after = arr;
    }
  }
  lua_settop(L, 0);
  return rc;
}

/* -------------------------------------------------------------- watchdog */

/* One watchdog thread per process watches a small table of deadlines: slot
 * 0 is a command's whole run (watchdog_arm), the others are Lua calls in
 * progress (protected_call enters one for its sandbox's deadline, on any
 * thread, so parallel tool threads and nested skill tools each have their
 * own). It fires at the earliest one plus the grace: a C call that no hook
 * or budget check could interrupt. Sandbox slots are used only once a
 * command enabled them (watchdog_enable); the daemon supervises its
 * workers itself and never exits this way. */
#define WD_SLOTS 64
#define WD_GRACE_S 2.0

static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cv = PTHREAD_COND_INITIALIZER;
static struct {
  double at; /* monotonic time to fire; 0 = free */
  char msg[512];
} wd_slot[WD_SLOTS];
static int wd_code = 1, wd_enabled, wd_started, wd_held;

/* The slot due first, or -1. Called with wd_mu held. */
static int wd_due(void) {
  int best = -1;
  if (wd_held) return -1;
  for (int i = 0; i < WD_SLOTS; i++)
    if (wd_slot[i].at > 0 && (best < 0 || wd_slot[i].at < wd_slot[best].at)) best = i;
  return best;
}

static void *wd_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&wd_mu);
  int fire;
  for (;;) {
    fire = wd_due();
    if (fire < 0) {
      pthread_cond_wait(&wd_cv, &wd_mu);
      continue;
    }
    double now = util_monotonic(), at = wd_slot[fire].at;
    if (now >= at) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double wait = at - now;
    ts.tv_sec += (time_t)wait;
    ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&wd_cv, &wd_mu, &ts);
  }
  /* Still inside the run past its deadline and grace: a C call no hook can
   * reach. Say so and leave; the process state is not trustworthy. */
  if (ftrylockfile(stdout) == 0) {
    fflush_unlocked(stdout);
    funlockfile(stdout);
  }
  ssize_t w = write(2, wd_slot[fire].msg, strlen(wd_slot[fire].msg));
  (void)w;
  _exit(wd_code);
  return NULL;
}

/* Starts the thread once. Called with wd_mu held. */
static void wd_start_locked(void) {
  if (wd_started) return;
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &a, wd_thread, NULL) == 0) wd_started = 1;
  pthread_attr_destroy(&a);
}

void watchdog_enable(int exit_code) {
  pthread_mutex_lock(&wd_mu);
  wd_enabled = 1;
  wd_code = exit_code;
  pthread_mutex_unlock(&wd_mu);
}

void watchdog_arm(double deadline_at, double grace_s, int exit_code, const char *message) {
  pthread_mutex_lock(&wd_mu);
  wd_start_locked();
  wd_slot[0].at = deadline_at + grace_s;
  wd_code = exit_code;
  snprintf(wd_slot[0].msg, sizeof wd_slot[0].msg, "%s\n", message);
  pthread_cond_signal(&wd_cv);
  pthread_mutex_unlock(&wd_mu);
}

/* A Lua call of chunk `who` starts under deadline_at: returns its slot
 * (0 = none taken: not enabled, no deadline, or the table is full). */
static int wd_enter(double deadline_at, const char *who) {
  if (!wd_enabled || deadline_at <= 0) return 0;
  pthread_mutex_lock(&wd_mu);
  int slot = 0;
  for (int i = 1; i < WD_SLOTS && !slot; i++)
    if (wd_slot[i].at <= 0) slot = i;
  if (slot) {
    wd_start_locked();
    wd_slot[slot].at = deadline_at + WD_GRACE_S;
    snprintf(wd_slot[slot].msg, sizeof wd_slot[slot].msg,
             "luagent: error: %s: wall-clock deadline exceeded inside a call that could not be "
             "interrupted; stopped by the watchdog\n",
             who && *who ? who : "a Lua call");
    pthread_cond_signal(&wd_cv);
  }
  pthread_mutex_unlock(&wd_mu);
  return slot;
}

static void wd_leave(int slot) {
  if (!slot) return;
  pthread_mutex_lock(&wd_mu);
  wd_slot[slot].at = 0;
  pthread_cond_signal(&wd_cv);
  pthread_mutex_unlock(&wd_mu);
}

void watchdog_hold(int on) {
  pthread_mutex_lock(&wd_mu);
  if (on) {
    wd_held++;
  } else if (wd_held > 0 && --wd_held == 0) {
    /* Deadlines that passed while a human answered: a little room to wind
     * the run down through its own deadline checks. */
    double floor_at = util_monotonic() + WD_GRACE_S;
    for (int i = 0; i < WD_SLOTS; i++)
      if (wd_slot[i].at > 0 && wd_slot[i].at < floor_at) wd_slot[i].at = floor_at;
  }
  pthread_cond_signal(&wd_cv);
  pthread_mutex_unlock(&wd_mu);
}

void watchdog_disarm(void) {
  pthread_mutex_lock(&wd_mu);
  wd_slot[0].at = 0;
  pthread_cond_signal(&wd_cv);
  pthread_mutex_unlock(&wd_mu);
}
