/* test_pattern.c - differential tests of the bounded pattern matcher
 * (src/lua/sandbox_pattern.c) against stock Lua 5.4.
 *
 * "stock" is a plain lua_State with the standard string library; "ours" is
 * a real sandbox (sandbox_new), whose string table got find/match/gmatch/
 * gsub from sandbox__open_pattern. The same harness chunk runs in both and
 * every case must give the same serialized result (values with their types,
 * or the exact error message):
 *  - a table-driven corpus, tests/unit/lua/pattern_corpus.txt (one Lua
 *    expression per line);
 *  - a seeded random generator of subjects, patterns, init values and
 *    replacements (thousands of cases);
 * then the budget: catastrophic patterns must end with the sandbox's
 * instruction-limit error in bounded time instead of hanging, even inside
 * pcall, and the matcher's work shows up in the instruction count.
 *
 * luaL_openlibs is fine here: the stock state is a test fixture.
 */
#include <cjson/cJSON.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandbox.h"
#include "test.h"

/* The harness returns { eval = ..., probe = ... }. Results are pure ASCII
 * (qstr escapes every other byte) so they cross the sandbox's JSON
 * boundary unchanged; it uses no pattern function itself. */
static const char HARNESS[] =
    "local ALL do local t = {} for i = 0, 255 do t[#t + 1] = string.char(i) end\n"
    "  ALL = table.concat(t) end\n"
    "local function qstr(s)\n"
    "  local out = {}\n"
    "  for i = 1, #s do\n"
    "    local c = string.byte(s, i)\n"
    "    if c >= 32 and c < 127 and c ~= 34 and c ~= 92 then out[i] = string.char(c)\n"
    "    else out[i] = '\\\\' .. c .. ';' end\n"
    "  end\n"
    "  return '\"' .. table.concat(out) .. '\"'\n"
    "end\n"
    "local function ser1(v)\n"
    "  local t = type(v)\n"
    "  if t == 'string' then return qstr(v)\n"
    "  elseif t == 'number' then return math.type(v) .. ':' .. string.format('%q', v)\n"
    "  elseif t == 'table' then\n"
    "    local out = {}\n"
    "    for i = 1, (v.n or #v) do out[i] = ser1(v[i]) end\n"
    "    return '{' .. table.concat(out, ',') .. '}'\n"
    "  else return tostring(v) end\n"
    "end\n"
    "local function ser(...)\n"
    "  local n, out = select('#', ...), {}\n"
    "  for i = 1, n do out[i] = ser1((select(i, ...))) end\n"
    "  return n .. '[' .. table.concat(out, ',') .. ']'\n"
    "end\n"
    /* every result of a gmatch loop, at most 2000 */
    "local function G(s, p, init)\n"
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
    "local function bytes(t)\n"
    "  local out = {}\n"
    "  for i = 1, #t do out[i] = string.char(t[i]) end\n"
    "  return table.concat(out)\n"
    "end\n"
    "local function probe(kind, sb, pb, has_init, init, r)\n"
    "  local s, p = bytes(sb), bytes(pb)\n"
    "  if not has_init then init = nil end\n"
    "  if kind == 0 then return ser(pcall(string.find, s, p, init))\n"
    "  elseif kind == 1 then return ser(pcall(string.find, s, p, init, true))\n"
    "  elseif kind == 2 then return ser(pcall(string.match, s, p, init))\n"
    "  elseif kind == 3 then return ser(pcall(G, s, p, init))\n"
    "  elseif kind == 4 then return ser(pcall(string.gsub, s, p, r, init))\n"
    "  elseif kind == 5 then return ser(pcall(string.gsub, s, p, T, init))\n"
    "  else return ser(pcall(string.gsub, s, p, F, init)) end\n"
    "end\n"
    "local env = setmetatable({ G = G, ser = ser, ALL = ALL }, { __index = _ENV })\n"
    "local function eval(expr)\n"
    "  local f, err = load('return ser(pcall(function() return ' .. expr .. ' end))',\n"
    "                      '=case', 't', env)\n"
    "  if not f then return 'LOAD ERROR ' .. err end\n"
    "  return f()\n"
    "end\n"
    "return { eval = eval, probe = probe }\n";

struct pair {
  lua_State *stock;
  int stock_module; /* registry ref of the harness module */
  struct sandbox *ours;
};

static void pair_open(struct pair *pr) {
  pr->stock = luaL_newstate();
  luaL_openlibs(pr->stock);
  if (luaL_loadbuffer(pr->stock, HARNESS, sizeof HARNESS - 1, "@harness") != LUA_OK ||
      lua_pcall(pr->stock, 0, 1, 0) != LUA_OK) {
    fprintf(stderr, "stock harness: %s\n", lua_tostring(pr->stock, -1));
    exit(1);
  }
  pr->stock_module = luaL_ref(pr->stock, LUA_REGISTRYINDEX);

  struct sb_limits lim;
  sb_limits_default(&lim);
  lim.instructions = 1000ULL * 1000 * 1000 * 1000; /* the differential run is long */
  lim.deadline_s = 600;
  struct err e = {0};
  if (sandbox_new(&lim, &pr->ours, &e) ||
      sandbox_run_string(pr->ours, HARNESS, sizeof HARNESS - 1, "harness", NULL, &e)) {
    fprintf(stderr, "sandbox harness: %s\n", e.msg);
    exit(1);
  }
}

static void pair_close(struct pair *pr) {
  lua_close(pr->stock);
  sandbox_free(pr->ours);
}

/* The arguments of one call, given once and sent to both sides. */
enum arg_kind { ARG_INT, ARG_BOOL, ARG_STR, ARG_BYTES };
struct arg {
  enum arg_kind kind;
  long long i;
  const char *s;
  size_t n;
};

/* Calls module[fn](args...) on both sides; returns malloc'd results. */
static void call_both(struct pair *pr, const char *fn, const struct arg *args, int nargs,
                      char **stock_out, char **ours_out) {
  lua_State *L = pr->stock;
  lua_rawgeti(L, LUA_REGISTRYINDEX, pr->stock_module);
  lua_getfield(L, -1, fn);
  cJSON *ja = cJSON_CreateArray();
  for (int i = 0; i < nargs; i++) {
    const struct arg *a = &args[i];
    switch (a->kind) {
      case ARG_INT:
        lua_pushinteger(L, a->i);
        cJSON_AddItemToArray(ja, cJSON_CreateNumber((double)a->i));
        break;
      case ARG_BOOL:
        lua_pushboolean(L, (int)a->i);
        cJSON_AddItemToArray(ja, cJSON_CreateBool((int)a->i));
        break;
      case ARG_STR:
        lua_pushstring(L, a->s);
        cJSON_AddItemToArray(ja, cJSON_CreateString(a->s));
        break;
      case ARG_BYTES: {
        cJSON *arr = cJSON_CreateArray();
        lua_createtable(L, (int)a->n, 0);
        for (size_t k = 0; k < a->n; k++) {
          lua_pushinteger(L, (unsigned char)a->s[k]);
          lua_rawseti(L, -2, (lua_Integer)k + 1);
          cJSON_AddItemToArray(arr, cJSON_CreateNumber((unsigned char)a->s[k]));
        }
        cJSON_AddItemToArray(ja, arr);
        break;
      }
    }
  }
  if (lua_pcall(L, nargs, 1, 0) != LUA_OK || !lua_isstring(L, -1)) {
    *stock_out = strdup("STOCK CALL FAILED");
  } else {
    *stock_out = strdup(lua_tostring(L, -1));
  }
  lua_settop(L, 0);

  const char *path[] = {fn, NULL};
  cJSON *ret = NULL;
  struct err e = {0};
  if (sandbox_call(pr->ours, path, ja, &ret, NULL, &e) || !cJSON_IsString(ret)) {
    size_t k = strlen(e.msg) + 32;
    *ours_out = malloc(k);
    snprintf(*ours_out, k, "SANDBOX CALL FAILED: %s", e.msg);
  } else {
    *ours_out = strdup(ret->valuestring);
  }
  cJSON_Delete(ret);
  cJSON_Delete(ja);
}

/* ------------------------------------------------------------- corpus */

static int run_corpus(struct pair *pr) {
  const char *dir = getenv("LUAGENT_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/unit/lua/pattern_corpus.txt", dir ? dir : LUAGENT_SOURCE_DIR);
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
    char *a, *b;
    struct arg arg = {ARG_STR, 0, line, 0};
    call_both(pr, "eval", &arg, 1, &a, &b);
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
    "a",    "b",    "c",      ".",      "%a",    "%d",     "%s",   "%w",   "%p",   "%l",    "%u",
    "%c",   "%x",   "%g",     "%A",     "%D",    "%S",     "%W",   "%%",   "%.",   "%-",    "%(",
    "[ab]", "[^a]", "[a-c]",  "[%a%d]", "[]]",   "[^]a]",  "[a-]", "[-a]", "[%]]", "[b-a]", "[%w_]",
    "%bab", "%b()", "%f[%w]", "%f[%W]", "%f[a]", "%f[^a]", "%1",   "%2",   "(",    ")",     "()",
    "$",    "^",    "-",      "x",      "1",     " ",      "\xe9", "A",    "\n",
};
static const char *const BROKEN[] = {"%",   "[",  "[^", "%b",  "%ba", "%f", "%fa",
                                     "[a%", "%0", "%9", "(((", ")",   "[]"};
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

static int run_random(struct pair *pr, uint64_t seed, int count) {
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
    struct arg args[] = {{ARG_INT, kind, NULL, 0}, {ARG_BYTES, 0, s.s, s.n},
                         {ARG_BYTES, 0, p.s, p.n}, {ARG_BOOL, has_init, NULL, 0},
                         {ARG_INT, init, NULL, 0}, {ARG_STR, 0, r, 0}};
    char *a, *b;
    call_both(pr, "probe", args, 6, &a, &b);
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

/* Plain find on long, repetitive subjects with needles cut from them, so
 * both the memchr path and the linear fallback of pm_plain_find run. */
static int run_random_plain(struct pair *pr, uint64_t seed, int count) {
  rng_state = seed;
  static char s[8192], p[1024];
  for (int i = 0; i < count; i++) {
    size_t sn = 1 + rnd(sizeof s - 1);
    int runs = (int)rnd(3);
    for (size_t k = 0; k < sn; k++) s[k] = runs == 0 ? 'a' : "ab\0"[rnd(runs == 1 ? 2 : 3)];
    if (rnd(2)) s[sn - 1 - rnd((uint32_t)(sn < 50 ? sn : 50))] = 'c';
    size_t pn = rnd(sizeof p) % (sn + 2);
    size_t at = sn > pn ? rnd((uint32_t)(sn - pn + 1)) : 0;
    for (size_t k = 0; k < pn; k++) p[k] = at + k < sn ? s[at + k] : 'a';
    if (pn && rnd(3) == 0) p[pn - 1] = "abc"[rnd(3)];
    int has_init = rnd(2);
    int init = (int)rnd(200) - 100;
    struct arg args[] = {{ARG_INT, 1, NULL, 0},    {ARG_BYTES, 0, s, sn},
                         {ARG_BYTES, 0, p, pn},    {ARG_BOOL, has_init, NULL, 0},
                         {ARG_INT, init, NULL, 0}, {ARG_STR, 0, "", 0}};
    char *a, *b;
    call_both(pr, "probe", args, 6, &a, &b);
    int same = strcmp(a, b) == 0;
    CHECK(same);
    if (!same)
      fprintf(stderr, "plain case %d: %zu/%zu bytes\n  stock: %s\n  ours:  %s\n", i, sn, pn, a, b);
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

/* Runs code in a fresh sandbox with the given instruction budget. Returns
 * the rc, with e filled, *secs the time taken and *used the instructions
 * counted (Lua instructions plus the matcher's charges). */
static int run_limited(const char *code, uint64_t instructions, struct err *e, double *secs,
                       uint64_t *used) {
  struct sb_limits lim;
  sb_limits_default(&lim);
  lim.instructions = instructions;
  struct sandbox *sb = NULL;
  err_clear(e);
  int rc = sandbox_new(&lim, &sb, e);
  CHECK_INT(rc, 0);
  if (rc) return rc;
  double t0 = now_s();
  rc = sandbox_run_string(sb, code, strlen(code), "hostile.lua", NULL, e);
  *secs = now_s() - t0;
  *used = sandbox_instructions_used(sb);
  sandbox_free(sb);
  return rc;
}

static void test_budget(void) {
  static const char *const hostile[] = {
      "return string.find(string.rep('a', 5000), string.rep('a*', 40) .. 'b')",
      "return string.find(string.rep('a', 5000), string.rep('a-', 40) .. 'b')",
      "return string.match(string.rep('a', 3000), string.rep('.-', 30) .. 'x')",
      "return string.gsub(string.rep('ab', 2000), string.rep('(.-)', 20) .. 'c', '')",
      "for x in string.gmatch(string.rep('a', 4000), string.rep('a*', 30) .. 'b') do end",
      "return string.find(string.rep('(', 20000), string.rep('%b()', 5) .. 'x')",
      "return string.find(string.rep('a', 4000), '(a*)' .. string.rep('%1', 20) .. 'b')",
      "return ('x'):rep(3000):find(('x?'):rep(150) .. 'y')",
      /* long sets and long patterns are paid for too */
      "local set = '[' .. string.rep('b', 100000) .. 'a]'\n"
      "return string.find(string.rep('c', 100000), set)",
      "local p = string.rep('x', 1000000) for i = 1, 1e6 do string.find('y', p) end",
      "local f = '%f[' .. string.rep('b', 100000) .. ']'\n"
      "return string.gsub(string.rep('c', 100000), f, '')",
      /* nor can a coroutine or an xpcall handler */
      "return coroutine.wrap(function()\n"
      "  return string.find(string.rep('a', 5000), string.rep('a*', 40) .. 'b') end)()",
      "return xpcall(string.find, function(m) return string.match(string.rep('a', 5000),"
      " string.rep('a-', 40) .. 'b') end, string.rep('a', 5000), string.rep('a*', 40) .. 'b')",
      /* pcall cannot swallow the limit */
      "local ok = pcall(string.find, string.rep('a', 5000), string.rep('a*', 40) .. 'b')\n"
      "return 'survived'",
      "for i = 1, 100 do pcall(string.match, string.rep('a', 5000), string.rep('a-', 40) .. 'b')"
      " end return 'survived'",
      /* a gsub replacement function cannot either */
      "return string.gsub(string.rep('a', 100), 'a', function(c)\n"
      "  pcall(string.find, string.rep('a', 5000), string.rep('a*', 40) .. 'b') return c end)",
  };
  for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
    struct err e;
    double secs;
    uint64_t used;
    int rc = run_limited(hostile[i], 10 * 1000 * 1000, &e, &secs, &used);
    CHECK(rc != 0);
    CHECK_STR(e.code, "limit_instructions");
    CHECK_CONTAINS(e.msg, "instruction limit");
    CHECK_CONTAINS(e.msg, "hostile.lua:");
    CHECK(secs < 10.0); /* 10M steps: a fraction of a second, even under ASan */
    printf("hostile pattern %zu stopped after %.3f s: %s\n", i, secs, e.msg);
  }

  /* One call on a long subject: a few Lua instructions, but the matcher's
   * steps (at least one per subject position) are counted. */
  struct err e;
  double secs;
  uint64_t used;
  int rc = run_limited("local s = string.rep('a', 100000) assert(string.find(s, '[b]') == nil)",
                       100 * 1000 * 1000, &e, &secs, &used);
  CHECK_INT(rc, 0);
  printf("find '[b]' over 100000 bytes counted %llu instructions\n", (unsigned long long)used);
  CHECK(used > 100000);
  CHECK(used < 2000000);

  /* Normal use fits easily in the default budget. */
  rc = run_limited(
      "local n = 0\n"
      "for w in string.gmatch(string.rep('hello world ', 1000), '%a+') do n = n + 1 end\n"
      "assert(n == 2000)\n"
      "local r, k = string.gsub(string.rep('hello world ', 100), '(%w+)', '<%1>')\n"
      "assert(k == 200 and #r == 1600)\n",
      100 * 1000 * 1000, &e, &secs, &used);
  CHECK_INT(rc, 0);
  printf("typical gmatch+gsub counted %llu instructions\n", (unsigned long long)used);

  /* Plain find is charged by the bytes it scans. */
  rc = run_limited(
      "local s = string.rep('a', 1000000)\n"
      "for i = 1, 1000 do string.find(s, 'b', 1, true) end",
      1000 * 1000, &e, &secs, &used);
  CHECK(rc != 0);
  CHECK_STR(e.code, "limit_instructions");

  /* gsub output is bounded by the sandbox's memory cap. */
  rc = run_limited(
      "local s = string.rep('x', 1000000)\n"
      "return string.gsub(s, '.', string.rep('y', 200))",
      1000ULL * 1000 * 1000, &e, &secs, &used);
  CHECK(rc != 0);
  CHECK_STR(e.code, "limit_memory");
  printf("gsub memory bomb: %s (%.3f s)\n", e.msg, secs);
}

int main(void) {
  struct pair pr;
  pair_open(&pr);

  int n = run_corpus(&pr);
  printf("corpus: %d cases\n", n);
  CHECK(n > 300);

  int total = 0;
  for (uint64_t seed = 1; seed <= 4; seed++) total += run_random(&pr, seed * 7919, 5000);
  printf("random: %d cases\n", total);
  printf("random plain find: %d cases\n", run_random_plain(&pr, 12345, 300));
  pair_close(&pr);

  test_budget();
  return TEST_END();
}
