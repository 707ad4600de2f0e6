/* test_sandbox_json.c - the arena conversion of host-call arguments
 * (sandbox__to_json_arena, what tools.call's arguments go through) against
 * the reference conversion into cJSON's allocator (sandbox__to_json_budget,
 * the path every call took before): on random tables and on hostile ones
 * (cycles, depth, huge strings, zero bytes, invalid UTF-8, NaN and
 * infinities, big integers, float and boolean keys, sparse and mixed
 * tables, metatables with __index/__pairs/__len, objects past the poll
 * interval), both must fail with the same message or give the same tree,
 * byte for byte in canonical JSON and in the argument hash of the audit
 * chain, and take the same memory charge. Then the same through a real
 * host call (l_hostfn), and with the memory budget swept over every
 * charge, in fresh sandboxes, so a kill comes at the same byte. */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "json.h"
#include "sandbox.h"
#include "sandbox_impl.h"
#include "test.h"
#include "tool.h"
#include "util.h"

/* The argument hash as it was computed before the streaming printer:
 * BLAKE2b-256 over json_canonical's text. */
static void ref_hash(const cJSON *v, char out[65]) {
  char *s = json_canonical(v);
  unsigned char h[32];
  crypto_generichash(h, sizeof h, (const unsigned char *)s, strlen(s), NULL, 0);
  free(s);
  util_hex(h, sizeof h, out);
}

/* Lua code returning a list of values: hostile ones first, then random
 * tables from a fixed seed. */
static const char *CASES =
    "local C = {}\n"
    "local function add(v) C[#C + 1] = v end\n"
    /* scalars and small objects */
    "add({}) add(json.array()) add({ a = 1 }) add({ a = 1, b = 'x', c = true, d = json.null })\n"
    "add({ [''] = 0 }) add({ ['a\\0b'] = 'x\\0y', ['a'] = 1, ['\\0'] = 2, ['\\1'] = 3 })\n"
    "add({ s = '\\1\\31\\127\"\\\\/\\b\\f\\n\\r\\t', u = '\\u{2028}\\u{10FFFF}é' })\n"
    /* numbers */
    "add({ i = 9007199254740992, j = 9007199254740993, k = -9007199254740993, "
    "  m = math.maxinteger, n = math.mininteger, z = -0.0, f = 0.1, g = 1e300, h = 5e-324, "
    "  w = 2^53, x = -2^63, y = 1e16, q = 123456789.0 })\n"
    "add({ nan = 0/0 }) add({ inf = 1/0 }) add({ ninf = -1/0 }) add({ 1, 2, 0/0 })\n"
    "add({ ok = 1, a = { b = { c = 0/0 } } })\n"
    /* keys */
    "add({ [1.5] = 1 }) add({ [true] = 1 }) add({ [0] = 'x' }) add({ [-1] = 'x' })\n"
    "add({ [1.0] = 'a', [2] = 'b' }) add({ 'a', 'b', [4] = 'd' }) add({ 1, nil, 3 })\n"
    "add({ 1, 2, x = 3 }) add({ x = 3, [1] = 1 }) add({ a = 1, [print] = 2 })\n"
    "add({ a = 1, [{}] = 2, b = { c = 0/0 } }) add({ b = { c = 0/0 }, [{}] = 2 })\n"
    /* invalid UTF-8 in keys and values, at either end */
    "add({ ['\\255'] = 1 }) add({ a = '\\192\\128' }) add({ ['ok'] = 1, ['a\\xC0\\x80'] = 2 })\n"
    "add({ a = 'x\\xED\\xA0\\x80' }) add({ a = 'x\\xF4\\x90\\x80\\x80' }) add({ 'abc\\xE2\\x82' })\n"
    /* values that are not JSON */
    "add({ f = print }) add({ f = function() end }) add({ co = coroutine.create(print) })\n"
    /* cycles and depth */
    "local cy = {} cy.self = cy add(cy) local ca = { 1 } ca[2] = ca add(ca)\n"
    "local function nest(n) local t = {} local r = t for i = 1, n do t.x = {} t = t.x end return r end\n"
    "add(nest(98)) add(nest(99)) add(nest(100)) add(nest(101)) add(nest(150))\n"
    "local function nesta(n) local t = {} local r = t for i = 1, n do t[1] = {} t = t[1] end return r end\n"
    "add(nesta(99)) add(nesta(100))\n"
    /* huge strings */
    "add({ big = string.rep('x', 1 << 20) }) add({ [string.rep('k', 70000)] = 1, a = 2 })\n"
    "add({ big = string.rep('\\0', 3000), k = string.rep('é', 5000) })\n"
    /* metatables: the conversion reads raw contents, never __index/__pairs */
    "add(setmetatable({ a = 1 }, { __index = function() return 'ghost' end, "
    "  __pairs = function() return function() return 'evil', 1 end end, __len = function() return 99 end }))\n"
    "add(setmetatable({ 1, nil, 3 }, { __index = function(_, k) return k end }))\n"
    "add(setmetatable({}, { __index = { a = 1 } }))\n"
    "add({ a = setmetatable({}, { __index = { 1, 2 } }) })\n"
    /* many members: the stack sort and the qsort of the printer, the poll
     * interval during the early conversion, a table member after scalars */
    "for _, n in ipairs({ 15, 16, 17, 200, 254, 255, 256, 257, 600 }) do\n"
    "  local t = {} for i = 1, n do t['k' .. (i * 7919 % 1000)] = i end add(t)\n"
    "  local u = {} for i = 1, n do u['k' .. i] = (i % 5 == 0) and { i } or i end add(u)\n"
    "  local a = {} for i = 1, n do a[i] = { v = i } end add(a)\n"
    "end\n"
    /* random tables */
    "math.randomseed(20261201)\n"
    "local keys = { 'a', 'b', 'c', 'ab', 'B', '', '\\0', 'a\\0', '\\1', 'é', '\\u{10000}', "
    "  'zz', 'k\\n', '\"q\"', '\\127', '\\u{7FF}' }\n"
    "local bad = { '\\255', '\\xC0\\x80', '\\xED\\xA0\\x80', '\\xE2\\x82' }\n"
    "local function rnd_str()\n"
    "  local r = math.random(200)\n"
    "  if r <= 10 then return string.rep('s', math.random(300, 700)) end\n"
    "  if r <= 12 then return bad[math.random(#bad)] end\n"
    "  return keys[math.random(#keys)] .. keys[math.random(#keys)]\n"
    "end\n"
    "local function rnd(d)\n"
    "  local r = math.random(d > 3 and 10 or 14)\n"
    "  if r == 1 then return math.random(-1000, 1000) end\n"
    "  if r == 2 then return (math.random() - 0.5) * 10 ^ math.random(-20, 20) end\n"
    "  if r == 3 then return rnd_str() end\n"
    "  if r == 4 then return math.random(2) == 1 end\n"
    "  if r == 5 then return json.null end\n"
    "  if r == 6 then return ({ 2^53 + 1, math.maxinteger, -0.0, 1e308, 2^53, -2^63, 0/0, 1/0 })[math.random(math.random(30) == 1 and 8 or 6)] end\n"
    "  if r == 7 then return math.random(150) == 1 and print or math.random(1 << 40) end\n"
    "  if r <= 10 then return rnd_str() end\n"
    "  local t = {}\n"
    "  if r == 11 then for i = 1, math.random(0, 6) do t[i] = rnd(d + 1) end\n"
    "    if math.random(30) == 1 then t[#t + 2] = 1 end\n"
    "  elseif r == 12 then t = json.array()\n"
    "  else for i = 1, math.random(0, 8) do t[rnd_str()] = rnd(d + 1) end\n"
    "    if math.random(40) == 1 then t[math.random(3)] = 1 end end\n"
    "  return t\n"
    "end\n"
    "for i = 1, 1500 do local t = {} for j = 1, math.random(0, 10) do t[rnd_str()] = rnd(0) end add(t) end\n"
    "return C\n";

/* Runs the Lua chunk code (named name) in the sandbox's environment, as a
 * script's code runs, and checks that it returns: its one value is left
 * at the top of L's stack. */
static void eval_chunk(lua_State *L, const char *code, const char *name) {
  luaL_loadbufferx(L, code, strlen(code), name, "t");
  sandbox__push_env(L);
  lua_setupvalue(L, -2, 1);
  CHECK_INT(lua_pcall(L, 0, 1, 0), LUA_OK);
}

/* Runs CASES in sb and leaves the list at the top of sb's stack. */
static int load_cases(struct sandbox *sb) {
  lua_State *L = sb->L;
  lua_settop(L, 0);
  if (luaL_loadbufferx(L, CASES, strlen(CASES), "=cases", "t") != LUA_OK) goto fail;
  sandbox__push_env(L);
  lua_setupvalue(L, -2, 1);
  if (lua_pcall(L, 0, 1, 0) != LUA_OK) goto fail;
  return (int)lua_rawlen(L, 1);
fail:
  fprintf(stderr, "cases: %s\n", lua_tostring(L, -1));
  return -1;
}

static int compared, failed_both, identical;

/* Converts the value at idx both ways with the same budget and compares
 * everything that comes out. */
static void compare_at(lua_State *L, int idx, size_t budget, int n) {
  char ea[300], eb[300];
  size_t ra = budget, rb = budget;
  int top = lua_gettop(L);
  cJSON *ref = sandbox__to_json_budget(L, idx, 0, 0, &ra, ea, sizeof ea);
  CHECK_INT(lua_gettop(L), top);
  struct sb_arena ar;
  sandbox__arena_init(&ar);
  cJSON *got = sandbox__to_json_arena(L, idx, &ar, &rb, eb, sizeof eb);
  CHECK_INT(lua_gettop(L), top); /* the stack is as it was, whatever happened */
  compared++;
  if (!ref || !got) {
    if (!!ref != !!got) fprintf(stderr, "case %d: reference %s, arena %s\n", n, ref ? "ok" : ea, got ? "ok" : eb);
    CHECK(!ref && !got);
    if (!ref && !got) {
      failed_both++;
      if (strcmp(ea, eb)) fprintf(stderr, "case %d\n", n);
      CHECK_STR(eb, ea);
    }
  } else {
    CHECK(json_identical(ref, got));
    char *ca = json_canonical(ref), *cb = json_canonical(got);
    CHECK(!strcmp(ca, cb));
    char ha[65], hb[65], hc[65];
    ref_hash(ref, ha);
    json_hash_hex(got, hb);
    json_hash_hex(ref, hc);
    CHECK_STR(hb, ha);
    CHECK_STR(hc, ha);
    /* a copy is an ordinary tree, independent of the arena */
    cJSON *dup = cJSON_Duplicate(got, 1);
    CHECK(json_identical(dup, ref));
    struct err e1 = {0}, e2 = {0};
    CHECK_INT(tool_args_check(got, "args", &e1), tool_args_check(ref, "args", &e2));
    CHECK_STR(e1.msg, e2.msg);
    if (json_identical(ref, got) && !strcmp(ca, cb) && !strcmp(hb, ha)) identical++;
    else fprintf(stderr, "case %d differs: %.200s\n", n, cb);
    free(ca);
    free(cb);
    cJSON_Delete(dup);
  }
  CHECK_INT(rb, ra); /* the same charge against the sandbox's memory */
  sandbox__arena_free(&ar);
  cJSON_Delete(ref);
}

/* h.take(v): what a host function is handed for v, canonical and hashed. */
static char took_canon[1 << 12], took_hash[65];
static int took_ok;
static int host_take(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)ud, (void)sb, (void)ret, (void)e;
  const cJSON *v = cJSON_GetArrayItem(args, 0);
  char *c = json_canonical(v);
  snprintf(took_canon, sizeof took_canon, "%s", c);
  free(c);
  json_hash_hex(v, took_hash);
  took_ok = 1;
  *ret = cJSON_Duplicate(v, 1);
  return 0;
}

/* Every case through a real host call: the same tree (hash and text), or
 * the same error as the reference conversion gives, prefixed as l_hostfn
 * words it; and the result that comes back is the value itself. */
static void through_hostfn(void) {
  struct sandbox *sb = NULL;
  struct err e = {0};
  CHECK_INT(sandbox_new(NULL, &sb, &e), 0);
  sandbox_add_function(sb, "h", "take", host_take, NULL);
  int n = load_cases(sb);
  CHECK(n > 1500);
  lua_State *L = sb->L;
  int same = 0;
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i); /* [cases, v] */
    char ea[300];
    size_t room = sandbox__mem_room(L);
    cJSON *ref = sandbox__to_json_budget(L, 2, 0, 0, &room, ea, sizeof ea);
    /* h.take(v) from a Lua function, as a script calls it */
    lua_getfield(L, LUA_REGISTRYINDEX, "luagent.lib.h");
    lua_getfield(L, -1, "take");
    lua_remove(L, -2);
    lua_pushvalue(L, 2);
    took_ok = 0;
    int st = lua_pcall(L, 1, 1, 0); /* [cases, v, r|err] */
    if (!ref) {
      CHECK(st != LUA_OK);
      CHECK(!took_ok);
      const char *msg = "";
      if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "message");
        msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "";
        lua_pop(L, 1);
      }
      char want[400]; /* as l_hostfn words (and cuts) it */
      snprintf(want, sizeof want, "h.take: argument #1: %s", ea);
      /* the message (cut where l_hostfn cuts it) is that error's text */
      size_t ml = strlen(msg), wl = strlen(want);
      int ok = !strncmp(msg, want, ml) && (ml == wl || ml >= 250);
      if (!ok) fprintf(stderr, "case %d: got \"%s\", wanted \"%s\"\n", i, msg, want);
      CHECK(ok);
      same += ok;
    } else {
      CHECK_INT(st, LUA_OK);
      char *c = json_canonical(ref);
      char h[65];
      ref_hash(ref, h);
      CHECK_STR(took_hash, h);
      if (strlen(c) < sizeof took_canon - 1) CHECK_STR(took_canon, c);
      if (!strcmp(took_hash, h)) same++;
      /* the result the host gave back (a copy of the arena tree) reached
       * Lua as the reference tree pushed by the same code does */
      char er[300];
      cJSON *back = st == LUA_OK ? sandbox__to_json(L, -1, 0, er, sizeof er) : NULL;
      CHECK_INT(sandbox__push_json(L, ref, 0), 0);
      cJSON *back_ref = sandbox__to_json(L, -1, 0, er, sizeof er);
      CHECK(back && back_ref && json_identical(back, back_ref));
      cJSON_Delete(back);
      cJSON_Delete(back_ref);
      free(c);
      cJSON_Delete(ref);
    }
    lua_settop(L, 1);
  }
  CHECK_INT(same, n);
  sandbox_free(sb);
}

/* The memory budget swept over a few cases (a fresh sandbox per budget,
 * both conversions of one value in it, the kill of the first undone before
 * the second): a kill (or not) at the same charge, with the same message. */
static void budget_sweep(void) {
  static const char *const vals[] = {
      "return { a = 1, b = 'xyz', c = { 1, 2, 3 }, d = string.rep('q', 200), e = true }",
      "local t = {} for i = 1, 300 do t['k' .. i] = i end return t",
      "return { z = 'a\\0b', y = { x = { w = 0.5 } }, v = json.null, [5] = 1 }",
  };
  int kills = 0;
  for (size_t k = 0; k < sizeof vals / sizeof *vals; k++) {
    for (size_t budget = 0; budget < 40000; budget += budget < 600 ? 7 : 997) {
      char msg[2][300];
      int killed[2] = {0, 0}, ok[2] = {0, 0};
      size_t left[2] = {0, 0};
      struct sandbox *sb = NULL;
      struct err e = {0};
      CHECK_INT(sandbox_new(NULL, &sb, &e), 0);
      lua_State *L = sb->L;
      eval_chunk(L, vals[k], "=v");
      for (int way = 0; way < 2; way++) {
        size_t room = budget;
        struct sb_arena ar;
        sandbox__arena_init(&ar);
        cJSON *v = way ? sandbox__to_json_arena(L, -1, &ar, &room, msg[way], sizeof msg[way])
                       : sandbox__to_json_budget(L, -1, 0, 0, &room, msg[way], sizeof msg[way]);
        ok[way] = v != NULL;
        killed[way] = sb->killed;
        left[way] = room;
        if (!way) cJSON_Delete(v);
        sandbox__arena_free(&ar);
        sb->killed = 0; /* no Lua runs before sandbox_free */
        sb->kill_code[0] = sb->kill_msg[0] = 0;
      }
      sandbox_free(sb);
      CHECK_INT(ok[1], ok[0]);
      CHECK_INT(killed[1], killed[0]);
      if (!ok[0] && !ok[1]) CHECK_STR(msg[1], msg[0]);
      if (ok[0] && ok[1]) CHECK_INT(left[1], left[0]);
      kills += killed[0];
    }
  }
  CHECK(kills > 10); /* the sweep did reach the limit */
}

/* Known answers, independent of both conversions and of the printer: the
 * canonical text written out by hand, hashed here; the first digest is
 * Python's hashlib.blake2b(b'{"a":1}', digest_size=32). */
static void known_answers(void) {
  static const struct {
    const char *lua, *canon;
  } K[] = {
      {"return { a = 1 }", "{\"a\":1}"},
      {"return { ['a\\0b'] = 'x\\0y', a = 1, ['\\0'] = 2, ['\\1'] = 3 }",
       "{\"\\u0000\":2,\"\\u0001\":3,\"a\":1,\"a\\u0000b\":\"x\\u0000y\"}"},
      {"return { s = '\\1\\31\\127\"\\\\/\\b\\f\\n\\r\\t' }",
       "{\"s\":\"\\u0001\\u001f\x7f\\\"\\\\/\\b\\f\\n\\r\\t\"}"},
      {"return { j = 9007199254740993, f = 0.1, z = -0.0, g = 1e300, q = 123456789.0, "
       "m = math.mininteger, h = -2.5e-7 }",
       "{\"f\":0.1,\"g\":1e+300,\"h\":-2.5e-07,\"j\":9007199254740993,\"m\":-9223372036854775808,"
       "\"q\":123456789,\"z\":0}"},
      {"return { 'x', { y = json.null }, json.array(), {}, true, false }",
       "[\"x\",{\"y\":null},[],{},true,false]"},
      {"return { ['é'] = 1, ['z'] = 2, ['\\u{10000}'] = 3, ['Z'] = 4, [''] = 5 }",
       "{\"\":5,\"Z\":4,\"z\":2,\"\xc3\xa9\":1,\"\xf0\x90\x80\x80\":3}"},
  };
  struct sandbox *sb = NULL;
  struct err e = {0};
  CHECK_INT(sandbox_new(NULL, &sb, &e), 0);
  lua_State *L = sb->L;
  for (size_t i = 0; i < sizeof K / sizeof *K; i++) {
    lua_settop(L, 0);
    eval_chunk(L, K[i].lua, "=k");
    size_t room = sandbox__mem_room(L);
    char err[300];
    struct sb_arena ar;
    sandbox__arena_init(&ar);
    cJSON *v = sandbox__to_json_arena(L, 1, &ar, &room, err, sizeof err);
    CHECK(v != NULL);
    char *c = v ? json_canonical(v) : NULL;
    CHECK_STR(c, K[i].canon);
    unsigned char h[32];
    char want[65], got[65] = "";
    crypto_generichash(h, sizeof h, (const unsigned char *)K[i].canon, strlen(K[i].canon), NULL, 0);
    util_hex(h, sizeof h, want);
    if (v) json_hash_hex(v, got);
    CHECK_STR(got, want);
    if (i == 0) CHECK_STR(got, "10a7ff3e312baec0c356be489739b93f63af84416c40f1c13023eb96c7ed50aa");
    free(c);
    sandbox__arena_free(&ar);
  }
  /* a string longer than the printer's buffer, hashed in pieces */
  lua_settop(L, 0);
  const char *code = "return { k = string.rep('\\u{E9}', 300) .. string.rep('x', 700), a = 1 }";
  eval_chunk(L, code, "=k");
  struct sbuf want = {0};
  sbuf_puts(&want, "{\"a\":1,\"k\":\"");
  for (int i = 0; i < 300; i++) sbuf_puts(&want, "\xc3\xa9");
  for (int i = 0; i < 700; i++) sbuf_puts(&want, "x");
  sbuf_puts(&want, "\"}");
  size_t room = sandbox__mem_room(L);
  char err[300];
  struct sb_arena ar;
  sandbox__arena_init(&ar);
  cJSON *v = sandbox__to_json_arena(L, 1, &ar, &room, err, sizeof err);
  char *c = v ? json_canonical(v) : NULL;
  CHECK_STR(c, want.s);
  unsigned char h[32];
  char hw[65], hg[65] = "";
  crypto_generichash(h, sizeof h, (const unsigned char *)want.s, want.len, NULL, 0);
  util_hex(h, sizeof h, hw);
  if (v) json_hash_hex(v, hg);
  CHECK_STR(hg, hw);
  free(c);
  sbuf_free(&want);
  sandbox__arena_free(&ar);
  sandbox_free(sb);
}

/* With the stop flag up, the conversion stops at its next poll (every
 * 256 nodes): at the same node both ways, named by the same path. */
static void stop_at_poll(void) {
  static const char *const vals[] = {
      "local t = {} for i = 1, 300 do t['k' .. i] = i end return t",
      "local t = {} for i = 1, 600 do t['k' .. i] = (i % 7 == 0) and { i, 'x' } or 'v' .. i end return t",
      "local t = {} for i = 1, 300 do t[i] = { a = i, b = { c = i } } end return t",
  };
  int stopped = 0;
  for (size_t k = 0; k < sizeof vals / sizeof *vals; k++) {
    struct sandbox *sb = NULL;
    struct err e = {0};
    CHECK_INT(sandbox_new(NULL, &sb, &e), 0);
    lua_State *L = sb->L;
    eval_chunk(L, vals[k], "=v");
    volatile int flag = 1;
    sandbox_watch_stop(sb, &flag);
    char msg[2][300];
    size_t left[2] = {0, 0};
    int ok[2] = {0, 0};
    for (int way = 0; way < 2; way++) {
      size_t room = sandbox__mem_room(L);
      struct sb_arena ar;
      sandbox__arena_init(&ar);
      cJSON *v = way ? sandbox__to_json_arena(L, 1, &ar, &room, msg[way], sizeof msg[way])
                     : sandbox__to_json_budget(L, 1, 0, 0, &room, msg[way], sizeof msg[way]);
      ok[way] = v != NULL;
      left[way] = room;
      if (!way) cJSON_Delete(v);
      sandbox__arena_free(&ar);
      sb->killed = sb->interrupted = 0; /* no Lua runs before sandbox_free */
      sb->kill_code[0] = sb->kill_msg[0] = 0;
    }
    CHECK(!ok[0] && !ok[1]);
    CHECK_STR(msg[1], msg[0]);
    CHECK_INT(left[1], left[0]);
    stopped += strstr(msg[0], "run stopped") != NULL;
    sandbox_watch_stop(sb, NULL);
    sandbox_free(sb);
  }
  CHECK_INT(stopped, 3);
}

int main(void) {
  if (sodium_init() < 0) return 1;
  struct sandbox *sb = NULL;
  struct err e = {0};
  CHECK_INT(sandbox_new(NULL, &sb, &e), 0);
  int n = load_cases(sb);
  CHECK(n > 1500);
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(sb->L, 1, i);
    compare_at(sb->L, lua_gettop(sb->L), sandbox__mem_room(sb->L), i);
    lua_pop(sb->L, 1);
  }
  /* both failures and successes were met, and every success agreed */
  printf("%d values: %d refused both ways, %d identical\n", compared, failed_both, identical);
  CHECK(failed_both > 100);
  CHECK_INT(identical + failed_both, compared);
  sandbox_free(sb);
  known_answers();
  stop_at_poll();
  through_hostfn();
  budget_sweep();
  return TEST_END();
}
