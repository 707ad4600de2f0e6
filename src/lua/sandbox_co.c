/* sandbox_co.c - the coroutine guard: create, wrap, resume and close,
 * armed against the run's one budget (see sandbox.c). */
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
  lua_sethook(co, sandbox__count_hook, LUA_MASKCOUNT, (int)s->co_period);
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
  if (sandbox__limits_check(L, s)) sandbox__kill_raise(L);
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
  if (s->killed) sandbox__kill_raise(L);
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

int sandbox__l_co_create(lua_State *L) {
  co_new(L, 1);
  return 1;
}

/* coroutine.resume(co, ...) -> true, ... | false, err [-?, +?, e] */
int sandbox__l_co_resume(lua_State *L) {
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
  if (s->killed) sandbox__kill_raise(L);
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

int sandbox__l_co_wrap(lua_State *L) {
  co_new(L, 1);
  lua_pushcclosure(L, co_auxwrap, 1);
  return 1;
}

/* coroutine.close(co) -> true | false, err [-1, +(1|2), e] */
int sandbox__l_co_close(lua_State *L) {
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
