/* sandbox_json.c - JSON <-> Lua for the sandbox, and the `json` library.
 *
 * JSON null is json.null (a light userdata, the same value everywhere).
 * Arrays and objects are unambiguous: a table whose keys are exactly
 * 1..n is an array, one with string keys an object; an empty table is an
 * object unless marked with json.array() (decoded empty arrays come back
 * marked, so they round-trip). Mixed keys, NaN and cycles are errors that
 * name the path. Depth is limited.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sandbox_impl.h"
#include "json.h"
#include "util.h"

#define JSON_MAX_DEPTH 100

static const char K_ARRAYMT = 0; /* marker metatable for empty arrays */
static const char K_BOXMT = 0;   /* metatable freeing malloc'd text */

int sandbox__push_json(lua_State *L, const cJSON *v, int depth);
cJSON *sandbox__to_json(lua_State *L, int idx, int mark_functions, char *err, size_t errn);
void sandbox__open_json(lua_State *L);

/* Pushes v as a Lua value. Returns -1 when too deep. [-0, +1, m] */
int sandbox__push_json(lua_State *L, const cJSON *v, int depth) {
  if (depth > JSON_MAX_DEPTH || !lua_checkstack(L, 4)) return -1;
  if (!v || cJSON_IsNull(v)) {
    lua_pushlightuserdata(L, NULL);
  } else if (cJSON_IsBool(v)) {
    lua_pushboolean(L, cJSON_IsTrue(v));
  } else if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    if (d == floor(d) && fabs(d) < 9007199254740992.0) lua_pushinteger(L, (lua_Integer)d);
    else lua_pushnumber(L, d);
  } else if (cJSON_IsString(v)) {
    lua_pushstring(L, v->valuestring);
  } else if (cJSON_IsArray(v)) {
    int n = cJSON_GetArraySize(v);
    lua_createtable(L, n, 0);
    int i = 1;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
      if (sandbox__push_json(L, c, depth + 1)) return -1;
      lua_rawseti(L, -2, i);
    }
    if (n == 0) {
      lua_rawgetp(L, LUA_REGISTRYINDEX, &K_ARRAYMT);
      lua_setmetatable(L, -2);
    }
  } else if (cJSON_IsObject(v)) {
    lua_createtable(L, 0, 4);
    for (const cJSON *c = v->child; c; c = c->next) {
      if (sandbox__push_json(L, c, depth + 1)) return -1;
      lua_setfield(L, -2, c->string ? c->string : "");
    }
  } else {
    lua_pushnil(L);
  }
  return 0;
}

struct conv {
  lua_State *L;
  int mark_functions;
  char *err;
  size_t errn;
  char path[256];
};

static cJSON *conv_value(struct conv *c, int idx, int depth);

static cJSON *conv_fail(struct conv *c, const char *what) {
  snprintf(c->err, c->errn, "%s%s%s", c->path[0] ? c->path : "", c->path[0] ? ": " : "", what);
  return NULL;
}

/* Appends a path element, returns the old length to restore. */
static size_t path_push_key(struct conv *c, const char *k) {
  size_t n = strlen(c->path);
  snprintf(c->path + n, sizeof c->path - n, "%s%s", n ? "." : "", k);
  return n;
}
static size_t path_push_index(struct conv *c, lua_Integer i) {
  size_t n = strlen(c->path);
  snprintf(c->path + n, sizeof c->path - n, "[%lld]", (long long)i);
  return n;
}

static cJSON *conv_table(struct conv *c, int idx, int depth) {
  lua_State *L = c->L;
  if (depth > JSON_MAX_DEPTH) return conv_fail(c, "nested too deeply (or a cycle)");
  if (!lua_checkstack(L, 6)) return conv_fail(c, "nested too deeply");
  /* Shape scan: count entries; note whether keys are 1..n or strings. */
  lua_Integer n = 0, maxi = 0;
  int strkeys = 0, otherkeys = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    n++;
    if (lua_type(L, -2) == LUA_TNUMBER && lua_isinteger(L, -2)) {
      lua_Integer k = lua_tointeger(L, -2);
      if (k >= 1 && k > maxi) maxi = k;
      if (k < 1) otherkeys++;
    } else if (lua_type(L, -2) == LUA_TSTRING) {
      strkeys++;
    } else {
      otherkeys++;
    }
    lua_pop(L, 1);
  }
  int is_array = 0;
  if (n == 0) {
    /* Without a metatable nothing is pushed: compare only when there is one
     * (popping by lua_istable here used to remove the table itself when it
     * was empty and nested, breaking the caller's lua_next). */
    if (lua_getmetatable(L, idx)) {
      lua_rawgetp(L, LUA_REGISTRYINDEX, &K_ARRAYMT);
      is_array = lua_rawequal(L, -1, -2);
      lua_pop(L, 2);
    }
    return is_array ? cJSON_CreateArray() : cJSON_CreateObject();
  }
  if (otherkeys) return conv_fail(c, "table keys must be strings or 1..n integers");
  if (strkeys && strkeys != n) return conv_fail(c, "table mixes array items and named keys");
  if (!strkeys) {
    if (maxi != n) return conv_fail(c, "array has holes (nil items)");
    cJSON *arr = cJSON_CreateArray();
    for (lua_Integer i = 1; i <= n; i++) {
      lua_rawgeti(L, idx, i);
      size_t old = path_push_index(c, i - 1);
      cJSON *v = conv_value(c, lua_gettop(L), depth + 1);
      lua_pop(L, 1);
      if (!v) {
        cJSON_Delete(arr);
        return NULL;
      }
      c->path[old] = 0;
      cJSON_AddItemToArray(arr, v);
    }
    return arr;
  }
  cJSON *obj = cJSON_CreateObject();
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    const char *k = lua_tostring(L, -2); /* keys are strings here: no conversion */
    size_t old = path_push_key(c, k);
    cJSON *v = conv_value(c, lua_gettop(L), depth + 1);
    if (!v) {
      lua_pop(L, 2);
      cJSON_Delete(obj);
      return NULL;
    }
    c->path[old] = 0;
    cJSON_AddItemToObject(obj, k, v);
    lua_pop(L, 1);
  }
  return obj;
}

static cJSON *conv_value(struct conv *c, int idx, int depth) {
  lua_State *L = c->L;
  switch (lua_type(L, idx)) {
    case LUA_TNIL:
      return cJSON_CreateNull();
    case LUA_TBOOLEAN:
      return cJSON_CreateBool(lua_toboolean(L, idx));
    case LUA_TNUMBER: {
      double d = lua_tonumber(L, idx);
      if (isnan(d) || isinf(d)) return conv_fail(c, "NaN and infinity are not valid JSON");
      return cJSON_CreateNumber(d);
    }
    case LUA_TSTRING:
      return cJSON_CreateString(lua_tostring(L, idx));
    case LUA_TTABLE:
      return conv_table(c, lua_absindex(L, idx), depth);
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, idx) == NULL) return cJSON_CreateNull();
      return conv_fail(c, "userdata cannot be converted to JSON");
    case LUA_TFUNCTION:
      if (c->mark_functions) {
        lua_Debug ar;
        lua_pushvalue(L, idx);
        int line = lua_getinfo(L, ">S", &ar) ? ar.linedefined : 0;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "$function", line);
        return o;
      }
      return conv_fail(c, "a function cannot be converted to JSON");
    default:
      return conv_fail(c, "value cannot be converted to JSON");
  }
}

cJSON *sandbox__to_json(lua_State *L, int idx, int mark_functions, char *err, size_t errn) {
  struct conv c = {L, mark_functions, err, errn, {0}};
  return conv_value(&c, lua_absindex(L, idx), 0);
}

/* json.encode(v [, {pretty=true}]) -> string. [-1, +1, e] */
static int l_json_encode(lua_State *L) {
  luaL_checkany(L, 1);
  int pretty = 0;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "pretty");
    pretty = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  char cerr[300];
  cJSON *v = sandbox__to_json(L, 1, 0, cerr, sizeof cerr);
  if (!v) return luaL_error(L, "json.encode: %s", cerr);
  /* The text is malloc'd outside Lua; hold it in a box whose __gc frees
   * it, so a memory-limit raise while copying it in cannot leak it. */
  char **box = lua_newuserdatauv(L, sizeof(char *), 0);
  *box = NULL;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &K_BOXMT);
  lua_setmetatable(L, -2);
  *box = json_print(v, pretty ? JSON_PRETTY : 0);
  cJSON_Delete(v);
  if (!*box) return luaL_error(L, "json.encode: out of memory");
  sandbox__charge(L, strlen(*box) / 16);
  lua_pushstring(L, *box);
  cJSON_free(*box);
  *box = NULL;
  return 1;
}

static int box_gc(lua_State *L) {
  char **box = lua_touserdata(L, 1);
  if (box && *box) cJSON_free(*box), *box = NULL;
  return 0;
}

/* json.decode(s) -> value, or raises naming the byte offset. Strict
 * RFC 8259 (json_parse); a repeated key keeps its last value. [-1, +1, e] */
static int l_json_decode(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  /* cJSON allocates outside the Lua cap; bound its input. */
  if (len > ((size_t)16 << 20)) return luaL_error(L, "json.decode: input larger than 16 MiB");
  sandbox__charge(L, len / 16);
  cJSON *v = NULL;
  struct err e = {0};
  if (json_parse(s, len, 0, &v, &e)) return luaL_error(L, "json.decode: %s", e.msg);
  int rc = lua_checkstack(L, 8) ? sandbox__push_json(L, v, 0) : -1;
  cJSON_Delete(v);
  if (rc) return luaL_error(L, "json.decode: nested deeper than %d levels", JSON_MAX_DEPTH);
  return 1;
}

/* json.array(t) marks t as an array (so an empty one encodes as []). */
static int l_json_array(lua_State *L) {
  if (lua_isnoneornil(L, 1)) lua_newtable(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  if (lua_getmetatable(L, 1)) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &K_ARRAYMT);
    if (!lua_rawequal(L, -1, -2)) return luaL_error(L, "json.array: table already has a metatable");
    lua_pop(L, 2);
  } else {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &K_ARRAYMT);
    lua_setmetatable(L, 1);
  }
  lua_settop(L, 1);
  return 1;
}

void sandbox__open_json(lua_State *L) {
  lua_createtable(L, 0, 2);
  lua_pushcfunction(L, box_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushliteral(L, "box");
  lua_setfield(L, -2, "__metatable");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &K_BOXMT);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "json.array");
  lua_setfield(L, -2, "__metatable");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &K_ARRAYMT);
  static const luaL_Reg f[] = {{"encode", l_json_encode},
                               {"decode", l_json_decode},
                               {"array", l_json_array},
                               {NULL, NULL}};
  luaL_newlib(L, f);
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
}
