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
 *
 * This file holds the state, the limits, globals, host calls, creation and
 * execution; sandbox_lib.c the library wrappers and the metatable policy,
 * sandbox_co.c the coroutine guard, sandbox_watchdog.c the watchdog.
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

void sb_limits_default(struct sb_limits *l) {
  l->memory_bytes = (size_t)64 << 20;
  l->instructions = 100000000ULL;
  l->deadline_s = 30;
  l->deadline_at = 0;
  l->max_depth = 1000;
  l->output_bytes = (size_t)1 << 20;
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

int sandbox__is_readonly(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &K_READONLY);
  lua_pushvalue(L, idx);
  int r = lua_rawget(L, -2) != LUA_TNIL;
  lua_pop(L, 2);
  return r;
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

void sandbox__push_globals(lua_State *L) { lua_rawgetp(L, LUA_REGISTRYINDEX, &K_GLOBALS); }

/* Pushes a fresh _ENV: an empty table that reads through to the shared
 * globals and raises on a miss. [-0, +1, m] */
static const char K_ENVMT = 0; /* the metatable every _ENV shares */

void sandbox__push_env(lua_State *L) {
  lua_createtable(L, 0, 4);
  lua_pushvalue(L, -1);
  lua_setfield(L, -2, "_G");
  /* One metatable for all of them, made once: no script can reach it
   * (__metatable hides it, there is no debug library), so it carries
   * nothing from one run to the next. */
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &K_ENVMT) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 2);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &K_GLOBALS);
    lua_pushcclosure(L, env_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &K_ENVMT);
  }
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

/* os.time([t]) [-0|1, +1, e]: without a table, the sandbox's clock. */
static int l_os_time(lua_State *L) {
  struct sandbox *s = sb_of(L);
  if (lua_isnoneornil(L, 1) && s->clock_fn) {
    lua_pushinteger(L, (lua_Integer)s->clock_fn(s->clock_ud));
    return 1;
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* os.date([format [, t]]) [-0|1|2, +1, e]: without t, the sandbox's clock. */
static int l_os_date(lua_State *L) {
  struct sandbox *s = sb_of(L);
  int n = lua_gettop(L);
  if (n < 2 && s->clock_fn) {
    if (n == 0) lua_pushliteral(L, "%c");
    lua_pushinteger(L, (lua_Integer)s->clock_fn(s->clock_ud));
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

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
  if (sandbox__limits_check(L, s)) return sandbox__kill_raise(L);
  int n = lua_gettop(L);
  char cerr[256];
  /* The arguments are the call's, read-only and gone when it returns: they
   * live in an arena (on this stack while they fit), not in malloc'd nodes. */
  struct sb_arena ar;
  sandbox__arena_init(&ar);
  cJSON args = {0}; /* the array of them, on the stack too */
  args.type = cJSON_Array;
  size_t room0 = sandbox__mem_room(L), room = room0; /* one budget for all the arguments */
  for (int i = 1; i <= n; i++) {
    cJSON *v = sandbox__to_json_arena(L, i, &ar, &room, cerr, sizeof cerr);
    if (!v) {
      sandbox__arena_free(&ar);
      if (s->killed) return sandbox__kill_raise(L);
      char msg[400];
      snprintf(msg, sizeof msg, "%s: argument #%d: %s", h->name, i, cerr);
      return raise_structured(L, "invalid_args", msg, NULL);
    }
    cJSON_AddItemToArray(&args, v);
  }
  cJSON *ret = NULL;
  struct err e;
  err_clear(&e);
  lua_State *outer = s->host_L; /* a callback (sandbox_callback) runs on this thread */
  const cJSON *outer_lent = s->lent, *lent;
  s->host_L = L;
  s->lent = NULL;
  /* The hook hears of the call before anything else can run callbacks on
   * L, and of its end before L is touched again (see sandbox.h). */
  int tok = s->host_hook ? s->host_hook(s->host_hook_ud, 1, 0) : 0;
  /* The arguments count against the run's memory for as long as the call
   * holds them: a nested call (a skill tool's sandbox is given this one's
   * room, sandbox_room) must not be handed their bytes again, or each
   * level of a recursion could hold its arguments on top of the cap. The
   * conversion charged them against room, so this stays within the limit. */
  size_t held = room0 - room;
  s->mem_used += held;
  int rc = h->fn(h->ud, s, &args, &ret, &e);
  s->mem_used -= held;
  if (s->host_hook) s->host_hook(s->host_hook_ud, 0, tok);
  s->host_L = outer;
  lent = s->lent;
  s->lent = outer_lent;
  if (lent && rc == 0 && !s->killed && ar.chunks) {
    /* Arguments past the stack buffer (malloc'd chunks, which would leak
     * if the push below raised): the borrowed result is copied and pushed
     * as an owned one (held in pending). The usual few-member arguments
     * stay on the stack and skip this. */
    ret = cJSON_Duplicate(lent, 1);
    if (!ret) {
      sandbox__arena_free(&ar);
      return luaL_error(L, "%s: out of memory", h->name);
    }
    lent = NULL;
  }
  if (lent && rc == 0 && !s->killed) {
    /* The arguments (and so the result borrowed from them) live on this
     * stack: nothing to free if the push raises, nothing to free after. */
    cJSON_Delete(ret);
    int ok = lua_checkstack(L, 8) && sandbox__push_json(L, lent, 0) == 0;
    if (!ok) return luaL_error(L, "%s: result too deeply nested", h->name);
    return 1;
  }
  sandbox__arena_free(&ar);
  if (s->killed) {
    cJSON_Delete(ret);
    return sandbox__kill_raise(L);
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

void sandbox_ret_lent(struct sandbox *sb, const cJSON *v) {
  if (sb) sb->lent = v;
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

void sandbox_remove_global(struct sandbox *sb, const char *name) {
  if (!sb || !name) return;
  lua_State *L = sb->L;
  int top = lua_gettop(L);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &K_GLOBALS);
  lua_pushstring(L, name); /* a short name: no memory error worth a pcall */
  lua_pushnil(L);
  lua_rawset(L, -3);
  lua_settop(L, top);
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
  lua_pushcfunction(L, sandbox__guard_newindex);
  lua_setfield(L, -2, "__newindex");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &SANDBOX__GUARD_KEY);

  /* base: opened into the raw globals, then copied selectively. */
  luaL_requiref(L, LUA_GNAME, luaopen_base, 1);
  int base = lua_gettop(L);
  lua_newtable(L); /* G: what scripts see */
  int G = lua_gettop(L);
  for (int i = 0; base_allowed[i]; i++) {
    lua_getfield(L, base, base_allowed[i]);
    lua_setfield(L, G, base_allowed[i]);
  }
  static const luaL_Reg repl[] = {{"setmetatable", sandbox__l_setmetatable}, {"getmetatable", sandbox__l_getmetatable}, {"rawset", sandbox__l_rawset},
                                  {"tostring", sandbox__l_tostring},         {"print", sandbox__l_print},
                                  {"collectgarbage", sandbox__l_collectgarbage}, {"load", sandbox__l_load},
                                  {"pcall", sandbox__l_pcall},               {"xpcall", sandbox__l_xpcall},
                                  {NULL, NULL}};
  lua_pushvalue(L, G);
  luaL_setfuncs(L, repl, 0);
  lua_pop(L, 1);
  static const char *const gone[] = {"require", "loadstring", NULL};
  for (int i = 0; gone[i]; i++) {
    lua_pushstring(L, gone[i]);
    lua_pushcclosure(L, sandbox__l_forbidden, 1);
    lua_setfield(L, G, gone[i]);
  }
  lua_pushliteral(L, LUA_VERSION);
  lua_setfield(L, G, "_VERSION");

  /* string: real table stays the string metatable's __index; scripts get a
   * read-only proxy and getmetatable("") shows only a name. */
  luaL_requiref(L, LUA_STRLIBNAME, luaopen_string, 0);
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  sandbox__wrap_field(L, "string", "format", sandbox__l_str_format, 1);
  lua_pushcfunction(L, sandbox__l_str_rep);
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
  sandbox__wrap_field(L, "table", "move", sandbox__l_tab_move, 0);
  sandbox__wrap_field(L, "table", "sort", sandbox__l_tab_sort, 0);
  sandbox__wrap_field(L, "table", "concat", sandbox__l_tab_concat, 0);
  make_readonly(L, "table");
  lua_setfield(L, G, "table");

  luaL_requiref(L, LUA_MATHLIBNAME, luaopen_math, 0);
  lua_getfield(L, -1, "randomseed");
  lua_pushcclosure(L, sandbox__l_math_randomseed, 1);
  lua_pushvalue(L, -1);
  lua_call(L, 0, 0); /* the first seed from getrandom too, not time and address */
  lua_setfield(L, -2, "randomseed");
  make_readonly(L, "math");
  lua_setfield(L, G, "math");
  luaL_requiref(L, LUA_UTF8LIBNAME, luaopen_utf8, 0);
  make_readonly(L, "utf8");
  lua_setfield(L, G, "utf8");
  luaL_requiref(L, LUA_COLIBNAME, luaopen_coroutine, 0);
  static const luaL_Reg co[] = {{"create", sandbox__l_co_create}, {"resume", sandbox__l_co_resume},
                                {"wrap", sandbox__l_co_wrap},     {"close", sandbox__l_co_close},
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
    lua_pushcclosure(L, sandbox__l_log, 1);
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

/* Sets every limit of s from lim (defaults for zeros), the deadline
 * counted from now. */
void sandbox__apply_limits(struct sandbox *s, const struct sb_limits *lim) {
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
}

int sandbox_new(const struct sb_limits *lim, struct sandbox **out, struct err *e) {
  *out = NULL;
  struct sb_limits d;
  if (!lim) {
    sb_limits_default(&d);
    lim = &d;
  }
  struct sandbox *s = xcalloc(1, sizeof *s);
  sandbox__apply_limits(s, lim);
  s->module_ref = LUA_NOREF;
  s->chunk_ref = LUA_NOREF;
  s->cache_ref = LUA_NOREF;
  lua_State *L = lua_newstate(sandbox__alloc, s);
  if (!L) {
    free(s);
    return err_set(e, ERR_NOMEM, "limit_memory", "cannot create a Lua state (memory limit too small?)");
  }
  s->L = L;
  *(struct sandbox **)lua_getextraspace(L) = s;
  lua_sethook(L, sandbox__count_hook, LUA_MASKCOUNT, (int)s->hook_period);
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
  sbuf_free(&sb->jscan);
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
static int error_from_stack(struct sandbox *s, lua_State *L, int status, struct err *e) {
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

static int protected_call_on(struct sandbox *s, lua_State *L, int nargs, int nres,
                             struct err *e) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  int slot = sandbox__wd_enter(s->deadline, s->wd_name); /* a C call stuck past the deadline */
  int status = lua_pcall(L, nargs, nres, base);
  sandbox__wd_leave(slot);
  lua_remove(L, base);
  if (status != LUA_OK || s->killed) {
    int rc = error_from_stack(s, L, status, e);
    lua_settop(L, base - 1);
    return rc;
  }
  return 0;
}

static int protected_call(struct sandbox *s, int nargs, int nres, struct err *e) {
  return protected_call_on(s, s->L, nargs, nres, e);
}

/* Pushes the module (first return of the last chunk), or nil, onto L (the
 * main thread, or the thread a host function was called on). */
static void push_module(struct sandbox *s, lua_State *L) {
  if (s->module_ref == LUA_NOREF) lua_pushnil(L);
  else lua_rawgeti(L, LUA_REGISTRYINDEX, s->module_ref);
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


/* See sandbox_impl.h: compiles a text chunk and pushes it. */
int sandbox__load(struct sandbox *s, const char *code, size_t len, const char *chunkname,
                  struct err *e) {
  lua_State *L = s->L;
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
  return 0;
}

static int run_chunk(struct sandbox *s, const char *code, size_t len, const char *chunkname,
                     cJSON **ret, struct err *e) {
  lua_State *L = s->L;
  if (ret) *ret = NULL;
  if (s->killed) return err_set(e, ERR_LIMIT, s->kill_code, "%s", s->kill_msg);
  int rc = sandbox__load(s, code, len, chunkname, e);
  if (rc) return rc;
  if (s->keep_chunk) { /* kept compiled, so sandbox_rerun can run it again */
    if (s->chunk_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, s->chunk_ref);
    lua_pushvalue(L, -1);
    s->chunk_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  return sandbox__run_loaded(s, chunkname, ret, e);
}

/* See sandbox_impl.h: run_chunk's tail, and sandbox_rerun's (sandbox_reuse.c). */
int sandbox__run_loaded(struct sandbox *s, const char *chunkname, cJSON **ret, struct err *e) {
  lua_State *L = s->L;
  sandbox__push_env(L);
  /* The chunk's _ENV cell is shared with the closures an earlier run of
   * it made: those are unreachable garbage by now (sandbox_rerun). */
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
static int push_path(struct sandbox *s, lua_State *L, const char *const *path) {
  push_module(s, L);
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
  int t = push_path(sb, sb->L, path);
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

/* sandbox_call, and sandbox_call_pick when pick is set (then *args_after
 * gets args[0][pick] alone). */
static int call_impl(struct sandbox *sb, const char *const *path, const cJSON *args, cJSON **ret,
                     cJSON **args_after, const char *pick, struct err *e) {
  lua_State *L = sb->L;
  if (ret) *ret = NULL;
  if (args_after) *args_after = NULL;
  if (sb->killed) return err_set(e, ERR_LIMIT, sb->kill_code, "%s", sb->kill_msg);
  lua_settop(L, 0);
  if (push_path(sb, sb->L, path) != LUA_TFUNCTION) {
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
    *ret = sandbox__to_json_budget(L, -1, 0, 0, &room, cerr, sizeof cerr);
    if (!*ret) rc = conv_error(sb, e, cerr, "return value");
  }
  if (!rc && args_after && pick) {
    if (nargs && lua_type(L, keep + 1) == LUA_TTABLE) {
      lua_pushstring(L, pick);
      if (lua_rawget(L, keep + 1) != LUA_TNIL) {
        /* at depth 1: the field sits inside argument 1, where the next call
         * puts it back (an automation's ctx.state), so what is read back
         * here can always be pushed again (review 15 F2: a state one level
         * deeper was saved, and every later run failed before its code) */
        *args_after = sandbox__to_json_budget(L, -1, 1, 0, &room, cerr, sizeof cerr);
        if (!*args_after) rc = conv_error(sb, e, cerr, "argument 1's %s after the call", pick);
      }
      lua_pop(L, 1);
    }
    if (rc && ret) cJSON_Delete(*ret), *ret = NULL;
  } else if (!rc && args_after) {
    cJSON *arr = cJSON_CreateArray();
    if (!arr) rc = err_set(e, ERR_NOMEM, "limit_memory", "out of memory");
    for (int i = 0; i < nargs && !rc; i++) {
      cJSON *v = sandbox__to_json_budget(L, keep + 1 + i, 0, 0, &room, cerr, sizeof cerr);
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

int sandbox_call(struct sandbox *sb, const char *const *path, const cJSON *args, cJSON **ret,
                 cJSON **args_after, struct err *e) {
  return call_impl(sb, path, args, ret, args_after, NULL, e);
}

int sandbox_call_pick(struct sandbox *sb, const char *const *path, const cJSON *args,
                      const char *field, cJSON **ret, cJSON **picked, struct err *e) {
  return call_impl(sb, path, args, ret, picked, field, e);
}

/* ------------------------------------------------- hosts driving a run */

void sandbox_rearm(struct sandbox *sb, double deadline_at) {
  if (!sb || sb->killed) return;
  sb->deadline = deadline_at;
  sb->instr_used = 0;
}

int sandbox_killed(const struct sandbox *sb) { return sb && sb->killed; }

void sandbox_set_host_hook(struct sandbox *sb, sb_host_hook hook, void *ud) {
  if (!sb) return;
  sb->host_hook = hook;
  sb->host_hook_ud = ud;
}

int sandbox_where(struct sandbox *sb, char *out, size_t n) {
  if (n) out[0] = 0;
  lua_State *L = sb ? sb->host_L : NULL;
  if (!L) return 0;
  lua_Debug ar;
  /* level 0 is the host function itself; the first Lua frame above it is
   * the script's line that called it (getinfo allocates nothing) */
  for (int level = 1; lua_getstack(L, level, &ar); level++) {
    if (lua_getinfo(L, "Sl", &ar) && ar.currentline > 0) {
      snprintf(out, n, "%s:%d", ar.short_src, ar.currentline);
      return 1;
    }
  }
  return 0;
}

/* Runs under lua_pcall: wraps os.time and os.date in the real os table
 * (behind the scripts' read-only proxy) so they read sb->clock_fn. */
static int wrap_clock_p(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &K_GLOBALS);
  lua_getfield(L, -1, "os");          /* [G, proxy] */
  if (!lua_getmetatable(L, -1)) return 0;
  lua_getfield(L, -1, "__index");     /* [G, proxy, mt, os] */
  if (lua_type(L, -1) != LUA_TTABLE) return 0;
  lua_getfield(L, -1, "time");
  lua_pushcclosure(L, l_os_time, 1);
  lua_setfield(L, -2, "time");
  lua_getfield(L, -1, "date");
  lua_pushcclosure(L, l_os_date, 1);
  lua_setfield(L, -2, "date");
  return 0;
}

void sandbox_set_clock(struct sandbox *sb, double (*fn)(void *ud), void *ud) {
  if (!sb) return;
  /* Only a sandbox that is given a clock pays for the wrappers; the others
   * keep the stock functions (and their memory footprint). */
  if (fn && !sb->clock_wrapped) {
    lua_State *L = sb->L;
    int top = lua_gettop(L);
    lua_pushcfunction(L, wrap_clock_p);
    if (lua_pcall(L, 0, 0, 0) == LUA_OK) sb->clock_wrapped = 1;
    lua_settop(L, top);
    if (!sb->clock_wrapped) return; /* out of memory: the real clock stays */
  }
  sb->clock_fn = fn;
  sb->clock_ud = ud;
}

int sandbox_callback(struct sandbox *sb, const char *const *path, const cJSON *args, cJSON **ret,
                     struct err *e) {
  if (ret) *ret = NULL;
  if (sb->killed) return err_set(e, ERR_LIMIT, sb->kill_code, "%s", sb->kill_msg);
  /* The thread the waiting host function was called on (a coroutine, or
   * the main thread); its frame stays as it was below what is pushed here. */
  lua_State *L = sb->host_L ? sb->host_L : sb->L;
  int top = lua_gettop(L);
  int nargs = args ? cJSON_GetArraySize(args) : 0;
  int rc = 0;
  if (!lua_checkstack(L, nargs + 8)) return err_set(e, ERR_LIMIT, "limit_memory", "too many arguments");
  if (push_path(sb, L, path) != LUA_TFUNCTION) {
    lua_settop(L, top);
    return err_set(e, ERR_NOTFOUND, "not_found", "%s is not a function", path && path[0] ? path[0] : "module");
  }
  if (nargs) {
    lua_pushcfunction(L, push_args);
    lua_pushlightuserdata(L, (void *)args);
    int st = lua_pcall(L, 1, LUA_MULTRET, 0);
    if (st != LUA_OK) {
      rc = sb->killed || st == LUA_ERRMEM
               ? err_set(e, ERR_LIMIT, "limit_memory", "%s", sb->killed ? sb->kill_msg : "not enough memory")
               : err_set(e, ERR_INVALID, "invalid_args", "%s", lua_tostring(L, -1));
      lua_settop(L, top);
      return rc;
    }
  }
  if (protected_call_on(sb, L, nargs, 1, e)) {
    lua_settop(L, top);
    return e && e->rc ? e->rc : ERR_FAIL;
  }
  if (ret && !lua_isnil(L, -1)) {
    char cerr[256];
    size_t room = sandbox__mem_room(L);
    *ret = sandbox__to_json_budget(L, -1, 0, 0, &room, cerr, sizeof cerr);
    if (!*ret) rc = conv_error(sb, e, cerr, "return value");
  }
  lua_settop(L, top);
  return rc;
}
