/* test_sandbox_json_text.c - JSON text straight into Lua
 * (sandbox__push_json_text over json_scan, what a daemon worker's ctx goes
 * through) against the path it replaces: json_parse's tree pushed by
 * sandbox__push_json. On hostile texts (bad escapes, lone and paired
 * surrogates, invalid UTF-8, raw control bytes, U+0000, huge and tiny
 * numbers, integers around 2^53 and 2^63, nesting around both depth
 * limits, duplicate keys hiding a value past the depth limit, truncated
 * literals, trailing content) and on random valid ones, json_scan must fail
 * exactly when json_parse fails, with the same message, and for a valid
 * text both pushes must fail alike or give the same Lua value: the same
 * types (integer or float), bytes, keys, and empty-array marks, at every
 * starting depth around the limit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "json.h"
#include "sandbox.h"
#include "sandbox_impl.h"
#include "test.h"
#include "util.h"

/* A deterministic dump of the Lua value at idx: types, math types, exact
 * bytes, keys sorted, and whether a table carries a metatable (raw). */
static void dump(lua_State *L, int idx, struct sbuf *b);

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void dump_bytes(struct sbuf *b, const char *s, size_t n) {
  sbuf_puts(b, "\"");
  for (size_t i = 0; i < n; i++) sbuf_printf(b, "%02x", (unsigned char)s[i]);
  sbuf_puts(b, "\"");
}

static void dump(lua_State *L, int idx, struct sbuf *b) {
  idx = lua_absindex(L, idx);
  luaL_checkstack(L, 8, "dump");
  switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) sbuf_printf(b, "i%lld", (long long)lua_tointeger(L, idx));
      else sbuf_printf(b, "f%a", lua_tonumber(L, idx));
      return;
    case LUA_TSTRING: {
      size_t n;
      const char *s = lua_tolstring(L, idx, &n);
      dump_bytes(b, s, n);
      return;
    }
    case LUA_TBOOLEAN: sbuf_puts(b, lua_toboolean(L, idx) ? "true" : "false"); return;
    case LUA_TLIGHTUSERDATA: sbuf_puts(b, lua_touserdata(L, idx) ? "ud" : "null"); return;
    case LUA_TTABLE: break;
    default: sbuf_printf(b, "<%s>", luaL_typename(L, idx)); return;
  }
  char **items = NULL;
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    struct sbuf kv = {0};
    dump(L, -2, &kv);
    sbuf_puts(&kv, "=");
    dump(L, -1, &kv);
    items = realloc(items, (n + 1) * sizeof *items);
    items[n++] = sbuf_take(&kv);
    lua_pop(L, 1);
  }
  if (n) qsort(items, n, sizeof *items, cmp_str);
  int mt = lua_getmetatable(L, idx);
  if (mt) lua_pop(L, 1);
  sbuf_puts(b, mt ? "[mt]{" : "{");
  for (size_t i = 0; i < n; i++) {
    sbuf_puts(b, i ? "," : "");
    sbuf_puts(b, items[i]);
    free(items[i]);
  }
  free(items);
  sbuf_puts(b, "}");
}

static int compared, invalid, pushed, too_deep;

struct job {
  const char *s;
  size_t n;
  int depth;
  int nodump; /* the memory sweep: no dump (its buffers would leak on a raise) */
};

/* pcall'd: [job] -> the old path's dump or "deep" */
static int old_path_p(lua_State *L) {
  const struct job *j = lua_touserdata(L, 1);
  const char *s = j->s;
  size_t n = j->n;
  int depth = j->depth;
  cJSON *v = NULL;
  if (json_parse(s, n, 0, &v, NULL)) return luaL_error(L, "not JSON");
  int rc = sandbox__push_json(L, v, depth);
  cJSON_Delete(v);
  if (rc) {
    lua_pushliteral(L, "deep");
    return 1;
  }
  struct sbuf b = {0};
  dump(L, -1, &b);
  lua_pushstring(L, b.s);
  sbuf_free(&b);
  return 1;
}

static int new_path_p(lua_State *L) {
  const struct job *j = lua_touserdata(L, 1);
  const char *s = j->s;
  size_t n = j->n;
  int depth = j->depth;
  int rc = sandbox__push_json_text(L, s, n, depth);
  if (rc == -2) return luaL_error(L, "not JSON");
  if (rc) {
    lua_pushliteral(L, "deep");
    return 1;
  }
  if (j->nodump) {
    lua_pushstring(L, lua_istable(L, -1) ? "{" : "?");
    return 1;
  }
  struct sbuf b = {0};
  dump(L, -1, &b);
  lua_pushstring(L, b.s);
  sbuf_free(&b);
  return 1;
}

static char *run_path_x(struct sandbox *sb, lua_CFunction f, const char *s, size_t n, int depth,
                        int nodump) {
  lua_State *L = sb->L;
  lua_settop(L, 0);
  struct job j = {s, n, depth, nodump};
  lua_pushcfunction(L, f);
  lua_pushlightuserdata(L, &j);
  char *out = lua_pcall(L, 1, 1, 0) == LUA_OK ? xstrdup(lua_tostring(L, -1)) : NULL;
  lua_settop(L, 0);
  return out;
}

static char *run_path(struct sandbox *sb, lua_CFunction f, const char *s, size_t n, int depth) {
  return run_path_x(sb, f, s, n, depth, 0);
}

/* One text: the same verdict, message and (when valid) value both ways. */
static void compare(struct sandbox *sb, const char *s, size_t n, const char *what) {
  struct err e1 = {0}, e2 = {0}, e3 = {0};
  cJSON *v = NULL;
  int r1 = json_parse(s, n, 0, &v, &e1);
  int r2 = json_scan(s, n, NULL, NULL, NULL, &e2);
  int k = json_kind(s, n, &e3);
  compared++;
  if (r1 != r2 || strcmp(e1.msg, e2.msg) || (r1 && (k != r1 || strcmp(e1.msg, e3.msg)))) {
    fprintf(stderr, "%s: json_parse %d \"%s\", json_scan %d \"%s\", json_kind %d \"%s\"\n", what,
            r1, e1.msg, r2, e2.msg, k, e3.msg);
    CHECK(0);
  }
  if (r1) {
    invalid++;
    cJSON_Delete(v);
    return;
  }
  int want = cJSON_IsObject(v) ? JSON_EV_OBJECT : cJSON_IsArray(v) ? JSON_EV_ARRAY
             : cJSON_IsString(v) ? JSON_EV_STRING : cJSON_IsNumber(v) ? JSON_EV_NUMBER
             : cJSON_IsNull(v) ? JSON_EV_NULL : cJSON_IsTrue(v) ? JSON_EV_TRUE : JSON_EV_FALSE;
  CHECK_INT(k, want);
  cJSON_Delete(v);
  static const int depths[] = {0, 1, 50, 98, 99, 100, 101};
  for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++) {
    char *a = run_path(sb, old_path_p, s, n, depths[i]);
    char *b = run_path(sb, new_path_p, s, n, depths[i]);
    if (!a || !b || strcmp(a, b)) {
      fprintf(stderr, "%s at depth %d:\n  tree: %.300s\n  text: %.300s\n", what, depths[i],
              a ? a : "(error)", b ? b : "(error)");
      CHECK(0);
    } else if (!strcmp(a, "deep")) {
      too_deep++;
    } else {
      pushed++;
    }
    free(a);
    free(b);
  }
}

static void compare_str(struct sandbox *sb, const char *s) { compare(sb, s, strlen(s), s); }

/* n arrays (or objects) around inner */
static char *nest(int n, int objects, const char *inner) {
  struct sbuf b = {0};
  for (int i = 0; i < n; i++) sbuf_puts(&b, objects ? "{\"k\":" : "[");
  sbuf_puts(&b, inner);
  for (int i = 0; i < n; i++) sbuf_puts(&b, objects ? "}" : "]");
  return sbuf_take(&b);
}

static const char *HOSTILE[] = {
    /* grammar */
    "", " ", "\xEF\xBB\xBF{}", "{} x", "{}{}", "[1,]", "[,1]", "{\"a\":1,}", "{\"a\"}", "{\"a\" 1}",
    "{a:1}", "{'a':1}", "[1 2]", "{\"a\":1 \"b\":2}", "[", "{", "{\"a\":", "[1,", "\"abc",
    "tru", "nul", "fals", "trUe", "nulll", "[true false]", "  null  ", "\t\n\r[ ]\n",
    /* numbers */
    "0", "-0", "-0.0", "0e0", "1E+2", "1e-2", "01", "-01", "2.", ".5", "+1", "-", "1e", "1e+",
    "1.5e-7", "0.1", "5e-324", "2.2250738585072014e-308", "1.7976931348623157e308", "1e400",
    "-1e400", "1e-400", "9007199254740991", "9007199254740992", "9007199254740993",
    "-9007199254740993", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
    "-9223372036854775809", "18446744073709551616", "123456789012345678901234567890",
    "1234567890123456789", "12345678901234567890", "1e22", "1e23", "1.0", "100.000",
    "9007199254740993.0", "4.35", "0.30000000000000004", "1800000000.123456",
    "123456789012345.678", "0.000000000000000000001", "1e-22", "3e-23", "[1.5,2.0,-3e2]",
    /* strings and escapes */
    "\"\"", "\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"", "\"\\x\"", "\"\\u12\"", "\"\\uZZZZ\"",
    "\"\\u0000\"", "\"a\\u0000b\"", "\"\\u00e9\"", "\"\\uD800\"", "\"\\uDC00\"",
    "\"\\uD800\\u0041\"", "\"\\uD83D\\uDE00\"", "\"\\uD83D\\uDE0\"", "\"\\uDBFF\\uDFFF\"",
    "\"\\", "\"\\u\"", "\"tab\there\"", "\"nl\nhere\"", "\"\x01\"", "\"\x7f\"",
    "\"\xC0\x80\"", "\"\xED\xA0\x80\"", "\"\xF4\x90\x80\x80\"", "\"\x80\"", "\"\xE2\x82\"",
    "\"\xE2\x82\xAC\"", "\"\xF0\x9F\x98\x80\"", "\"\xFF\"", "\"\xC3\xA9t\xC3\xA9\"",
    "{\"\\u0000\":1,\"\":2,\"a\\u0000\":3}", "{\"\xC3\xA9\":\"\xE2\x82\xAC\"}",
    "{\"\xC0\x80\":1}", "\"\xC0\x80\"",
    /* containers, duplicates, empties */
    "[]", "{}", "[[]]", "{\"a\":[]}", "{\"a\":{}}", "[{},[],[[]],{\"b\":[]}]",
    "{\"a\":1,\"a\":2}", "{\"a\":{\"x\":1},\"a\":[]}", "{\"a\":[],\"b\":1,\"a\":null}",
    "{\"slot\":1.5,\"SLOT\":2.5,\"slot\":3}", "[null,true,false,\"\",0,-0,{}]",
};

/* The memory cap met at every point of a decode: the push raises the
 * memory error (out of json_scan, by longjmp) and nothing leaks (the ASan
 * build checks), or it completes; a cap large enough always completes. */
static void memory_sweep(void) {
  struct sbuf t = {0};
  sbuf_puts(&t, "{\"list\":[");
  for (int i = 0; i < 300; i++) sbuf_printf(&t, "%s{\"k\":\"value \\u00e9 %d\",\"n\":%d.5}", i ? "," : "", i, i);
  sbuf_puts(&t, "],\"long\":\"");
  for (int i = 0; i < 200; i++) sbuf_puts(&t, "escaped \\n text ");
  sbuf_puts(&t, "\", \"big\":123456789012345678901234567890}");
  int raised = 0, done = 0;
  for (size_t cap = 24 << 10; cap < (400 << 10); cap += 1536) {
    struct sb_limits lim;
    sb_limits_default(&lim);
    lim.memory_bytes = cap;
    struct sandbox *sb = NULL;
    struct err e = {0};
    if (sandbox_new(&lim, &sb, &e)) continue; /* too small for the libraries */
    char *out = run_path_x(sb, new_path_p, t.s, t.len, 1, 1);
    if (out) {
      done++;
      CHECK(strncmp(out, "{", 1) == 0);
    } else {
      raised++;
    }
    free(out);
    sandbox_free(sb);
  }
  printf("memory sweep: %d raised, %d completed\n", raised, done);
  CHECK(raised > 10);
  CHECK(done > 10);
  sbuf_free(&t);
}

int main(void) {
  struct sandbox *sb = NULL;
  struct err e = {0};
  CHECK_INT(sandbox_new(NULL, &sb, &e), 0);
  for (size_t i = 0; i < sizeof HOSTILE / sizeof HOSTILE[0]; i++) compare_str(sb, HOSTILE[i]);
  /* texts with a zero byte inside, which strings in C cannot show */
  compare(sb, "\"a\0b\"", 5, "a raw zero byte in a string");
  compare(sb, "[1]\0", 4, "a zero byte after the value");
  compare(sb, "{\"a\0\":1}", 8, "a raw zero byte in a key");
  /* nesting around the depth limit of the push (100) and of the parser (512) */
  static const int levels[] = {1, 2, 50, 98, 99, 100, 101, 102, 200, 511, 512, 513, 600};
  for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
    for (int obj = 0; obj < 2; obj++) {
      static const char *inner[] = {"1", "[]", "{}", "\"x\"", "[1,[2]]", "x"};
      for (size_t j = 0; j < sizeof inner / sizeof inner[0]; j++) {
        char *t = nest(levels[i], obj, inner[j]);
        char what[80];
        snprintf(what, sizeof what, "%d %s around %s", levels[i], obj ? "objects" : "arrays", inner[j]);
        compare(sb, t, strlen(t), what);
        free(t);
      }
    }
  }
  /* a value past the push's depth limit that a later duplicate key drops
   * from json_parse's tree: not too deep there, so not here either */
  {
    char *deep = nest(150, 0, "1");
    struct sbuf b = {0};
    sbuf_printf(&b, "{\"a\":%s,\"b\":2,\"a\":1}", deep);
    compare(sb, b.s, b.len, "a deep value replaced by a later duplicate");
    sbuf_free(&b);
    sbuf_printf(&b, "{\"a\":1,\"a\":%s}", deep);
    compare(sb, b.s, b.len, "a deep value replacing an earlier duplicate");
    sbuf_free(&b);
    free(deep);
  }
  /* wide containers (past the decoder's chunk of pending items) */
  {
    struct sbuf a = {0}, o = {0};
    sbuf_puts(&a, "[");
    sbuf_puts(&o, "{");
    for (int i = 0; i < 1000; i++) {
      sbuf_printf(&a, "%s%d", i ? "," : "", i % 7 == 0 ? -i : i);
      sbuf_printf(&o, "%s\"k%d\":%d", i ? "," : "", i % 300, i); /* duplicates: the last wins */
    }
    sbuf_puts(&a, "]");
    sbuf_puts(&o, "}");
    compare(sb, a.s, a.len, "an array of 1000");
    compare(sb, o.s, o.len, "an object of 1000 members, 300 keys");
    sbuf_free(&a);
    sbuf_free(&o);
  }
  /* random valid texts (a fixed seed): json_print of random trees */
  srand(20);
  for (int r = 0; r < 300; r++) {
    cJSON *root = cJSON_CreateObject();
    cJSON *stack[8] = {root};
    int sp = 1;
    for (int k = 0; k < 40; k++) {
      cJSON *cur = stack[sp - 1], *v;
      int t = rand() % 9;
      if (t == 0) v = cJSON_CreateNumber((double)(rand() - RAND_MAX / 2) / (1 + rand() % 1000));
      else if (t == 1) v = cJSON_CreateNumber((double)rand() * (double)rand() * 1000.0);
      else if (t == 2) v = cJSON_CreateString(rand() % 2 ? "\xC3\xA9\xC0\x80x" : "plain");
      else if (t == 3) v = cJSON_CreateBool(rand() % 2);
      else if (t == 4) v = cJSON_CreateNull();
      else if (t == 5 && sp < 8) v = stack[sp++] = cJSON_CreateArray();
      else if (t == 6 && sp < 8) v = stack[sp++] = cJSON_CreateObject();
      else if (sp > 1) {
        sp--;
        continue;
      } else v = cJSON_CreateNumber(rand() % 100);
      if (cJSON_IsObject(cur)) {
        char key[16];
        snprintf(key, sizeof key, "k%d", rand() % 12);
        cJSON_AddItemToObject(cur, key, v); /* repeated keys included */
      } else {
        cJSON_AddItemToArray(cur, v);
      }
    }
    char *t = json_print(root, 0);
    compare(sb, t, strlen(t), t);
    free(t);
    cJSON_Delete(root);
  }
  printf("%d texts: %d refused both ways; %d pushes alike, %d too deep both ways\n", compared,
         invalid, pushed, too_deep);
  CHECK(invalid > 60);
  CHECK(too_deep > 50);
  CHECK(pushed > 1200);
  sandbox_free(sb);
  memory_sweep();
  return TEST_END();
}
