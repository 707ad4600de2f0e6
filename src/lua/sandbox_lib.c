/* sandbox_lib.c - the library wrappers: the metatable policy, the base
 * replacements (print, load, pcall, ...) and the bounded string and table
 * functions (see sandbox.c). */
#include "sandbox.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "sandbox_impl.h"
#include <lualib.h>
#include "util.h"

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

const char SANDBOX__GUARD_KEY = 0;   /* the plain guard (shared) */
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
  lua_rawgetp(L, LUA_REGISTRYINDEX, &SANDBOX__GUARD_KEY);
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
int sandbox__guard_newindex(lua_State *L) {
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
  lua_pushcfunction(L, sandbox__guard_newindex);
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
    lua_rawgetp(L, LUA_REGISTRYINDEX, &SANDBOX__GUARD_KEY);
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
int sandbox__l_setmetatable(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int t = lua_type(L, 2);
  luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
  lua_settop(L, 2);
  if (sandbox__is_readonly(L, 1)) return luaL_error(L, "cannot change the metatable of a read-only table");
  if (t == LUA_TTABLE) {
    /* A proxy's metatable is the sandbox's: it is never wrapped. */
    if (sandbox__is_readonly(L, 2)) return luaL_error(L, "a read-only table cannot be used as a metatable");
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
      if (t == LUA_TNIL) lua_rawgetp(L, LUA_REGISTRYINDEX, &SANDBOX__GUARD_KEY);
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
int sandbox__l_getmetatable(lua_State *L) {
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
int sandbox__l_rawset(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checkany(L, 2);
  luaL_checkany(L, 3);
  if (sandbox__is_readonly(L, 1)) return luaL_error(L, "attempt to modify read-only table");
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

int sandbox__l_tostring(lua_State *L) {
  luaL_checkany(L, 1);
  safe_tostring(L, 1, NULL);
  return 1;
}

static void sb_write(struct sandbox *s, const char *stream, const char *text, size_t len) {
  if (s->out_truncated) return;
  struct sbuf b = {0};
  /* Every line costs its framing as the writers add it (print's newline;
   * a log line's "[level] " and newline), so print() and log.info("") in
   * a loop are not free. */
  bool is_print = !strcmp(stream, "print");
  size_t frame = is_print ? 1 : strlen(stream) + 4;
  size_t room = s->out_limit > s->out_used ? s->out_limit - s->out_used : 0;
  room = room > frame ? room - frame : 0;
  /* print keeps its lines; log lines are one line each, so they can't be forged. */
  if (is_print) util_escape_output(&b, text, len, room < 65536 ? room : 65536);
  else util_escape_text(&b, text, len, room < 16384 ? room : 16384);
  if (s->out_used + frame + b.len >= s->out_limit) {
    s->out_truncated = 1;
    sbuf_puts(&b, " [output limit reached; further output dropped]");
  }
  s->out_used += frame + b.len;
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

int sandbox__l_print(lua_State *L) {
  if (sandbox__poll(L)) return sandbox__kill_raise(L);
  join_args(L, 1);
  size_t len;
  const char *t = lua_tolstring(L, -1, &len);
  sb_write(sb_of(L), "print", t, len);
  return 0;
}

int sandbox__l_log(lua_State *L) {
  const char *level = lua_tostring(L, lua_upvalueindex(1));
  if (sandbox__poll(L)) return sandbox__kill_raise(L);
  join_args(L, 1);
  size_t len;
  const char *t = lua_tolstring(L, -1, &len);
  sb_write(sb_of(L), level, t, len);
  return 0;
}

int sandbox__l_collectgarbage(lua_State *L) {
  const char *opt = luaL_optstring(L, 1, "count");
  if (strcmp(opt, "count") != 0)
    return luaL_error(L, "collectgarbage('%s') is not allowed in the sandbox", opt);
  int kb = lua_gc(L, LUA_GCCOUNT, 0), b = lua_gc(L, LUA_GCCOUNTB, 0);
  lua_pushnumber(L, (lua_Number)kb + (lua_Number)b / 1024);
  return 1;
}


/* load(chunk [, name [, mode [, env]]]): text only; without env the chunk
 * gets a fresh environment of its own. [-?, +2, -] */
int sandbox__l_load(lua_State *L) {
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
  else sandbox__push_env(L);
  if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
  return 1;
}

int sandbox__l_forbidden(lua_State *L) {
  return luaL_error(L, "'%s' is not available in the sandbox", lua_tostring(L, lua_upvalueindex(1)));
}

/* pcall/xpcall: once the run is killed the error is re-raised at once, so
 * `while true do pcall(f) end` cannot outlive a limit. */
static int finish_pcall(lua_State *L, int status, lua_KContext extra) {
  struct sandbox *s = sb_of(L);
  if (s->killed) return sandbox__kill_raise(L);
  if (status != LUA_OK && status != LUA_YIELD) {
    lua_pushboolean(L, 0);
    lua_pushvalue(L, -2);
    return 2;
  }
  return lua_gettop(L) - (int)extra;
}

int sandbox__l_pcall(lua_State *L) {
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

int sandbox__l_xpcall(lua_State *L) {
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
  if (sb_of(L)->killed) return sandbox__kill_raise(L);
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
 * loops n times in C even when nothing is copied), a result larger than the
 * whole memory limit raises stock's catchable "resulting string too large"
 * before anything is allocated (no script could ever have it, and nothing
 * was spent), one that would fit the limit but not the memory left is the
 * memory limit (as the allocator would say a moment later: which of the two
 * a filling loop meets first must not decide whether the limit is named),
 * and the copy is charged by size. */
int sandbox__l_str_rep(lua_State *L) {
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
  if (total >= (double)sb->mem_limit) return luaL_error(L, "resulting string too large");
  if (total >= (double)sandbox__mem_room(L)) {
    sandbox__kill_memory(L, "string.rep");
    return sandbox__raise_killed(L);
  }
  sandbox__charge(L, (uint64_t)(total / 64) + (uint64_t)n / 8);
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
int sandbox__l_str_format(lua_State *L) {
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
int sandbox__l_tab_move(lua_State *L) {
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
int sandbox__l_tab_sort(lua_State *L) {
  if (lua_type(L, 1) == LUA_TTABLE) {
    uint64_t n = (uint64_t)lua_rawlen(L, 1), lg = 1;
    while ((1ull << lg) < n) lg++;
    sandbox__charge(L, n * lg);
  }
  return call_original(L);
}

int sandbox__l_tab_concat(lua_State *L) {
  if (lua_type(L, 1) == LUA_TTABLE) sandbox__charge(L, (uint64_t)lua_rawlen(L, 1));
  return call_original(L);
}

/* Wraps field `name` of the library table at top (named lib) with a C
 * closure over the original (see call_original). [-0, +0, m] */
void sandbox__wrap_field(lua_State *L, const char *lib, const char *name, lua_CFunction f,
                int own_errors) {
  lua_getfield(L, -1, name);
  lua_pushfstring(L, "%s.%s", lib, name);
  lua_pushboolean(L, own_errors);
  lua_pushcclosure(L, f, 3);
  lua_setfield(L, -2, name);
}

/* Two seeds from the system's randomness; without getrandom, the clock's
 * nanoseconds (never an address: stock's randomseed() seeds from the
 * lua_State pointer and returns it, which hands scripts a heap address). */
void sandbox__random_seeds(lua_Integer seed[2]) {
  if (getrandom(seed, 2 * sizeof seed[0], 0) == (ssize_t)(2 * sizeof seed[0])) return;
  double t = util_monotonic() * 1e9, w = util_now() * 1e6;
  seed[0] = (lua_Integer)t;
  seed[1] = (lua_Integer)w ^ (lua_Integer)0x5DEECE66DLL;
}

/* math.randomseed([x [, y]]) [-0|1|2, +2, -]: with no argument, seeded from
 * sandbox__random_seeds (and those seeds returned, as stock returns its
 * own); with arguments, as stock. Upvalue 1: stock's randomseed. */
int sandbox__l_math_randomseed(lua_State *L) {
  if (lua_gettop(L) == 0) {
    lua_Integer seed[2];
    sandbox__random_seeds(seed);
    lua_pushinteger(L, seed[0]);
    lua_pushinteger(L, seed[1]);
  }
  int n = lua_gettop(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, n, LUA_MULTRET);
  return lua_gettop(L);
}
