/* test_pattern.c - differential tests of the bounded pattern matcher
 * (src/sandbox_pattern.c) against stock Lua 5.4.
 *
 * Two plain lua_States: "stock" with the standard string library, and
 * "ours" whose string table got find/match/gmatch/gsub from
 * sandbox__open_pattern. Every case runs in both and the serialized results
 * (values with their types, or the exact error message) must be equal:
 *  - a table-driven corpus, tests/unit/pattern_corpus.txt (one Lua
 *    expression per line);
 *  - a seeded random generator of subjects, patterns, init values and
 *    replacements (thousands of cases);
 * then the budget: catastrophic patterns must stop with the charge error
 * in bounded time instead of hanging.
 *
 * luaL_openlibs is fine here: these states are test fixtures, not
 * sandboxes.
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandbox_impl.h"
#include "test.h"

/* The budget key read by the weak sandbox__charge stand-in in
 * sandbox_pattern.c (see there). */
#define BUDGET_KEY "luagent.pattern_budget"

static const char HARNESS[] =
    "do local t = {} for i = 0, 255 do t[#t + 1] = string.char(i) end\n"
    "  ALL = table.concat(t) end\n"
    "local function ser1(v)\n"
    "  local t = type(v)\n"
    "  if t == 'string' then return string.format('%q', v)\n"
    "  elseif t == 'number' then return math.type(v) .. ':' .. string.format('%q', v)\n"
    "  elseif t == 'table' then\n"
    "    local out = {}\n"
    "    for i = 1, (v.n or #v) do out[i] = ser1(v[i]) end\n"
    "    return '{' .. table.concat(out, ',') .. '}'\n"
    "  else return tostring(v) end\n"
    "end\n"
    "function ser(...)\n"
    "  local n, out = select('#', ...), {}\n"
    "  for i = 1, n do out[i] = ser1((select(i, ...))) end\n"
    "  return n .. '[' .. table.concat(out, ',') .. ']'\n"
    "end\n"
    /* every result of a gmatch loop, at most 2000 */
    "function G(s, p, init)\n"
    "  local it, out = string.gmatch(s, p, init), {}\n"
    "  while #out < 2000 do\n"
    "    local r = table.pack(it())\n"
    "    if r.n == 0 then break end\n"
    "    out[#out + 1] = r\n"
    "  end\n"
    "  return out\n"
    "end\n"
    "local T = { a = 'A', ab = '[ab]', [1] = 'one', [2] = 2.5, b = false, x = 12, y = {} }\n"
    "local function F(...)\n"
    "  local n, a = select('#', ...), ...\n"
    "  if a == 'b' then return nil elseif a == 'a' then return false end\n"
    "  if a == 'y' then return {} end\n"
    "  return '<' .. n .. ':' .. tostring(a) .. '>'\n"
    "end\n"
    "function probe(kind, s, p, init, r)\n"
    "  if kind == 0 then return ser(pcall(string.find, s, p, init))\n"
    "  elseif kind == 1 then return ser(pcall(string.find, s, p, init, true))\n"
    "  elseif kind == 2 then return ser(pcall(string.match, s, p, init))\n"
    "  elseif kind == 3 then return ser(pcall(G, s, p, init))\n"
    "  elseif kind == 4 then return ser(pcall(string.gsub, s, p, r, init))\n"
    "  elseif kind == 5 then return ser(pcall(string.gsub, s, p, T, init))\n"
    "  else return ser(pcall(string.gsub, s, p, F, init)) end\n"
    "end\n";

static lua_State *new_state(int ours) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  if (ours) {
    lua_getglobal(L, "string");
    sandbox__open_pattern(L, -1);
    lua_pop(L, 1);
  }
  if (luaL_dostring(L, HARNESS) != LUA_OK) {
    fprintf(stderr, "harness: %s\n", lua_tostring(L, -1));
    exit(1);
  }
  return L;
}

/* Runs `return ser(pcall(function() return EXPR end))`; returns a malloc'd
 * string (the serialized result, or "LOAD ERROR ..." when EXPR is bad). */
static char *eval_expr(lua_State *L, const char *expr) {
  size_t n = strlen(expr) + 64;
  char *code = malloc(n);
  snprintf(code, n, "return ser(pcall(function() return %s end))", expr);
  char *out;
  if (luaL_loadbuffer(L, code, strlen(code), "=case") != LUA_OK ||
      lua_pcall(L, 0, 1, 0) != LUA_OK) {
    const char *m = lua_tostring(L, -1);
    size_t k = strlen(m ? m : "?") + 16;
    out = malloc(k);
    snprintf(out, k, "LOAD ERROR %s", m ? m : "?");
  } else {
    out = strdup(lua_tostring(L, -1));
  }
  lua_settop(L, 0);
  free(code);
  return out;
}

/* ------------------------------------------------------------- corpus */

static int run_corpus(lua_State *stock, lua_State *ours) {
  const char *dir = getenv("LUAGENT_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/unit/pattern_corpus.txt", dir ? dir : LUAGENT_SOURCE_DIR);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  if (!f) return 0;
  char line[8192];
  int cases = 0, lineno = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    size_t l = strlen(line);
    while (l && (line[l - 1] == '\n' || line[l - 1] == '\r')) line[--l] = 0;
    if (l == 0 || strncmp(line, "--", 2) == 0) continue;
    char *a = eval_expr(stock, line);
    char *b = eval_expr(ours, line);
    cases++;
    if (strncmp(a, "LOAD ERROR", 10) == 0) {
      fprintf(stderr, "corpus line %d does not load: %s\n", lineno, a);
      CHECK(0);
    } else if (strcmp(a, b) != 0) {
      fprintf(stderr, "corpus line %d: %s\n  stock: %s\n  ours:  %s\n", lineno, line, a, b);
      CHECK(0);
    } else {
      CHECK(1);
    }
    free(a);
    free(b);
  }
  fclose(f);
  return cases;
}

/* ------------------------------------------------------------- random */

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) { /* xorshift64*, uniform enough for tests */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (uint32_t)((rng_state * 0x2545F4914F6CDD1DULL) >> 32) % n;
}

struct bytes {
  char s[512];
  size_t n;
};
static void put(struct bytes *b, const char *s, size_t n) {
  if (b->n + n < sizeof b->s) {
    memcpy(b->s + b->n, s, n);
    b->n += n;
  }
}

static const char SUBJECT_CHARS[] = "aaabbbcAB1 2x.-%()[]^$\0\xe9\n_";
static const char *const ATOMS[] = {
    "a", "b", "c", ".", "%a", "%d", "%s", "%w", "%p", "%l", "%u", "%c", "%x", "%g",
    "%A", "%D", "%S", "%W", "%%", "%.", "%-", "%(", "[ab]", "[^a]", "[a-c]", "[%a%d]",
    "[]]", "[^]a]", "[a-]", "[-a]", "[%]]", "[b-a]", "[%w_]", "%bab", "%b()", "%f[%w]",
    "%f[%W]", "%f[a]", "%f[^a]", "%1", "%2", "(", ")", "()", "$", "^", "-", "x", "1", " ",
    "\xe9", "A", "\n",
};
static const char *const BROKEN[] = {"%", "[", "[^", "%b", "%ba", "%f", "%fa", "[a%", "%0",
                                     "%9", "(((", ")", "[]"};
static const char *const QUANT[] = {"", "", "", "*", "+", "-", "?"};
static const char *const REPL[] = {"x", "%0", "%1", "%2", "%%", "%", "%a", "<", "%9", ""};

static void gen_subject(struct bytes *b) {
  b->n = 0;
  int len = (int)rnd(13);
  for (int i = 0; i < len; i++) put(b, &SUBJECT_CHARS[rnd(sizeof SUBJECT_CHARS - 1)], 1);
}

static const char CHAOS_CHARS[] = "%%[]^$()*+-?.abf1z\0";

static void gen_pattern(struct bytes *b) {
  b->n = 0;
  if (rnd(4) == 0) { /* raw special characters: malformed patterns in every order */
    int len = (int)rnd(9);
    for (int i = 0; i < len; i++) put(b, &CHAOS_CHARS[rnd(sizeof CHAOS_CHARS - 1)], 1);
    return;
  }
  if (rnd(4) == 0) put(b, "^", 1);
  int items = (int)rnd(7);
  for (int i = 0; i < items; i++) {
    const char *a = ATOMS[rnd(sizeof ATOMS / sizeof *ATOMS)];
    put(b, a, strlen(a));
    if (strcmp(a, "(") != 0 && strcmp(a, ")") != 0) {
      const char *q = QUANT[rnd(sizeof QUANT / sizeof *QUANT)];
      put(b, q, strlen(q));
    }
  }
  if (rnd(8) == 0) put(b, "\0", 1);
  if (rnd(6) == 0) {
    const char *x = BROKEN[rnd(sizeof BROKEN / sizeof *BROKEN)];
    put(b, x, strlen(x));
  }
  if (rnd(5) == 0) put(b, "$", 1);
}

/* Calls probe(kind, s, p, init, r) in L; returns a malloc'd result. */
static char *probe(lua_State *L, int kind, const struct bytes *s, const struct bytes *p,
                   int has_init, int init, const char *r) {
  lua_getglobal(L, "probe");
  lua_pushinteger(L, kind);
  lua_pushlstring(L, s->s, s->n);
  lua_pushlstring(L, p->s, p->n);
  if (has_init)
    lua_pushinteger(L, init);
  else
    lua_pushnil(L);
  lua_pushstring(L, r);
  char *out;
  if (lua_pcall(L, 5, 1, 0) != LUA_OK)
    out = strdup("PROBE FAILED");
  else
    out = strdup(lua_tostring(L, -1));
  lua_settop(L, 0);
  return out;
}

static int run_random(lua_State *stock, lua_State *ours, uint64_t seed, int count) {
  rng_state = seed;
  int failures = 0;
  struct bytes s, p;
  for (int i = 0; i < count; i++) {
    gen_subject(&s);
    gen_pattern(&p);
    int kind = (int)rnd(7);
    int has_init = rnd(2);
    int init = (int)rnd(31) - 15;
    if (kind >= 4 && has_init) init = (int)rnd(4); /* gsub's max count */
    char r[64] = "";
    for (int k = (int)rnd(3); k >= 0; k--) strcat(r, REPL[rnd(sizeof REPL / sizeof *REPL)]);
    char *a = probe(stock, kind, &s, &p, has_init, init, r);
    char *b = probe(ours, kind, &s, &p, has_init, init, r);
    int same = strcmp(a, b) == 0;
    CHECK(same);
    if (!same && failures++ < 20) {
      fprintf(stderr, "random case %d (seed %llu) kind %d init %s%d repl \"%s\"\n  subject:", i,
              (unsigned long long)seed, kind, has_init ? "" : "nil/", init, r);
      for (size_t k = 0; k < s.n; k++) fprintf(stderr, " %02x", (unsigned char)s.s[k]);
      fprintf(stderr, "\n  pattern:");
      for (size_t k = 0; k < p.n; k++) fprintf(stderr, " %02x", (unsigned char)p.s[k]);
      fprintf(stderr, " (%.*s)\n  stock: %s\n  ours:  %s\n", (int)p.n, p.s, a, b);
    }
    free(a);
    free(b);
  }
  return count;
}

/* ------------------------------------------------------------- budget */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs code in ours with the stub budget set; returns the error message
 * (malloc'd) or NULL if it succeeded, and the seconds it took. */
static char *run_budgeted(lua_State *L, const char *code, lua_Integer budget, double *secs) {
  lua_pushinteger(L, budget);
  lua_setfield(L, LUA_REGISTRYINDEX, BUDGET_KEY);
  double t0 = now_s();
  int rc = luaL_dostring(L, code);
  *secs = now_s() - t0;
  char *msg = rc == LUA_OK ? NULL : strdup(lua_tostring(L, -1));
  lua_settop(L, 0);
  lua_pushnil(L);
  lua_setfield(L, LUA_REGISTRYINDEX, BUDGET_KEY);
  return msg;
}

static lua_Integer budget_left(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, BUDGET_KEY);
  lua_Integer v = lua_tointeger(L, -1);
  lua_pop(L, 1);
  return v;
}

static void test_budget(lua_State *ours) {
  static const char *const hostile[] = {
      "return string.find(string.rep('a', 5000), string.rep('a*', 40) .. 'b')",
      "return string.find(string.rep('a', 5000), string.rep('a-', 40) .. 'b')",
      "return string.match(string.rep('a', 3000), string.rep('.-', 30) .. 'x')",
      "return string.gsub(string.rep('ab', 2000), string.rep('(.-)', 20) .. 'c', '')",
      "for x in string.gmatch(string.rep('a', 4000), string.rep('a*', 30) .. 'b') do end",
      "return string.find(string.rep('(', 20000), string.rep('%b()', 5) .. 'x')",
      "return string.find(string.rep('a', 4000), '(a*)' .. string.rep('%1', 20) .. 'b')",
  };
  for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
    double secs;
    char *msg = run_budgeted(ours, hostile[i], 10 * 1000 * 1000, &secs);
    CHECK(msg != NULL);
    CHECK_CONTAINS(msg, "instruction limit");
    CHECK(secs < 10.0); /* 10M steps: a fraction of a second, even under ASan */
    printf("hostile pattern %zu stopped after %.3f s: %s\n", i, secs, msg ? msg : "(no error)");
    free(msg);
  }

  /* Normal use charges a little and finishes. */
  double secs;
  char *msg = run_budgeted(ours,
                           "assert(select(2, string.gsub(string.rep('hello world ', 100), '%w+',"
                           " '<%0>')) == 200)",
                           1000 * 1000, &secs);
  CHECK(msg == NULL);
  free(msg);
  lua_pushinteger(ours, 1000 * 1000);
  lua_setfield(ours, LUA_REGISTRYINDEX, BUDGET_KEY);
  luaL_dostring(ours, "local n = 0 for w in string.gmatch(string.rep('ab ', 1000), '%a+') do"
                      " n = n + 1 end assert(n == 1000)");
  lua_Integer used = 1000 * 1000 - budget_left(ours);
  printf("gmatch over 3000 bytes charged %lld steps\n", (long long)used);
  CHECK(used > 3000);   /* at least one step per subject position */
  CHECK(used < 100000); /* and not absurdly many */
  lua_settop(ours, 0);
  lua_pushnil(ours);
  lua_setfield(ours, LUA_REGISTRYINDEX, BUDGET_KEY);

  /* Plain find is charged by the bytes it scans. */
  msg = run_budgeted(ours,
                     "local s = string.rep('a', 1000000) "
                     "for i = 1, 1000 do string.find(s, 'b', 1, true) end",
                     1000 * 1000, &secs);
  CHECK(msg != NULL);
  CHECK_CONTAINS(msg, "instruction limit");
  free(msg);

  /* Deep recursion is refused, not a C stack overflow. */
  msg = run_budgeted(ours, "return string.match(string.rep('a', 1000), string.rep('a?', 1000))",
                     1000 * 1000 * 1000, &secs);
  CHECK(msg != NULL);
  CHECK_CONTAINS(msg, "pattern too complex");
  free(msg);
}

int main(void) {
  lua_State *stock = new_state(0);
  lua_State *ours = new_state(1);

  /* the functions were replaced, the rest of string was not */
  lua_getglobal(stock, "string");
  lua_getfield(stock, -1, "find");
  lua_getglobal(ours, "string");
  lua_getfield(ours, -1, "find");
  CHECK(lua_tocfunction(stock, -1) != lua_tocfunction(ours, -1));
  lua_settop(stock, 0);
  lua_settop(ours, 0);

  int n = run_corpus(stock, ours);
  printf("corpus: %d cases\n", n);
  CHECK(n > 300);

  int total = 0;
  for (uint64_t seed = 1; seed <= 4; seed++) total += run_random(stock, ours, seed * 7919, 5000);
  printf("random: %d cases\n", total);

  test_budget(ours);

  lua_close(stock);
  lua_close(ours);
  return TEST_END();
}
