/* bench_pattern.c - the bounded pattern matcher against stock Lua.
 *
 * Each case is a Lua snippet that builds its input, then times its own
 * loop with os.clock() and returns the seconds. It runs once in a stock
 * lua_State (stock string library, no hook) and once in a real sandbox
 * (our matcher charging every step, plus the sandbox's instruction hook on
 * the Lua loop around it). Prints both times and the ratio; never asserts.
 * Usage: bench_pattern [repeat-scale]
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox.h"

/* ~100 KB of words, the same in both states (a small LCG, no math.random). */
static const char PRELUDE[] =
    "local SCALE = %d\n"
    "local words = { 'alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta',\n"
    "  'iota', 'kappa', 'lambda', 'mu', '2024-06-30', 'x=1', '(paren)', 'tab\\t' }\n"
    "local seed, parts = 42, {}\n"
    "for i = 1, 16000 do\n"
    "  seed = (seed * 1103515245 + 12345) %% 2147483648\n"
    "  parts[i] = words[seed %% #words + 1]\n"
    "end\n"
    "local text = table.concat(parts, '  ') .. ' zebra end'\n"
    "local t0 = os.clock()\n";

struct bench_case {
  const char *name;
  const char *body; /* runs after PRELUDE; SCALE repetitions */
};

static const struct bench_case CASES[] = {
    {"gmatch %a+ over 100 KB",
     "for r = 1, SCALE do local n = 0 for w in text:gmatch('%a+') do n = n + 1 end end"},
    {"gsub %s+ -> ' ' over 100 KB", "for r = 1, SCALE do local s = text:gsub('%s+', ' ') end"},
    {"find %f[%a]zebra%f[%A] (end of 100 KB)",
     "for r = 1, SCALE do assert(text:find('%f[%a]zebra%f[%A]')) end"},
    {"find (%w+)=(%w+) captures, 100 KB",
     "for r = 1, SCALE do local n = 0 for k, v in text:gmatch('(%w+)=(%w+)') do n = n + 1 end end"},
    {"gsub %b() -> '' over 100 KB", "for r = 1, SCALE do local s = text:gsub('%b()', '') end"},
    {"plain find 'zebra' x20", "for r = 1, SCALE * 20 do assert(text:find('zebra', 1, true)) end"},
    {"match date on a short string x20000",
     "local d = '2024-06-30 12:00' for r = 1, SCALE * 20000 do"
     " local y, m, dd = d:match('^(%d+)-(%d+)-(%d+)') end"},
    {"trim ^%s*(.-)%s*$ x20000",
     "local p = '   padded text   ' for r = 1, SCALE * 20000 do local s = p:match('^%s*(.-)%s*$') "
     "end"},
    {"gsub with a function over 100 KB",
     "for r = 1, SCALE do local s = text:gsub('%a+', function(w) return w end) end"},
};

static char *make_code(const struct bench_case *c, int scale) {
  size_t n = sizeof PRELUDE + strlen(c->body) + 64;
  char *code = malloc(n);
  int k = snprintf(code, n, PRELUDE, scale);
  snprintf(code + k, n - (size_t)k, "%s\nreturn os.clock() - t0\n", c->body);
  return code;
}

static double run_stock(const char *code) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  double t = -1;
  if (luaL_dostring(L, code) != LUA_OK)
    fprintf(stderr, "stock: %s\n", lua_tostring(L, -1));
  else
    t = lua_tonumber(L, -1);
  lua_close(L);
  return t;
}

static double run_ours(const char *code) {
  struct sb_limits lim;
  sb_limits_default(&lim);
  lim.instructions = 1000ULL * 1000 * 1000 * 1000;
  lim.deadline_s = 600;
  struct sandbox *sb = NULL;
  struct err e = {0};
  cJSON *ret = NULL;
  double t = -1;
  if (sandbox_new(&lim, &sb, &e) ||
      sandbox_run_string(sb, code, strlen(code), "bench.lua", &ret, &e))
    fprintf(stderr, "sandbox: %s\n", e.msg);
  else if (cJSON_IsNumber(ret))
    t = ret->valuedouble;
  cJSON_Delete(ret);
  sandbox_free(sb);
  return t;
}

int main(int argc, char **argv) {
  int scale = argc > 1 ? atoi(argv[1]) : 20;
  if (scale < 1) scale = 1;
  printf("%-40s %10s %10s %7s\n", "pattern case (x scale)", "stock ms", "ours ms", "ratio");
  double sum_ratio = 0;
  int n = 0;
  for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
    char *code = make_code(&CASES[i], scale);
    double best_s = 1e9, best_o = 1e9;
    for (int rep = 0; rep < 3; rep++) { /* best of three */
      double s = run_stock(code), o = run_ours(code);
      if (s >= 0 && s < best_s) best_s = s;
      if (o >= 0 && o < best_o) best_o = o;
    }
    free(code);
    double ratio = best_o / best_s;
    printf("%-40s %10.2f %10.2f %6.2fx\n", CASES[i].name, best_s * 1e3, best_o * 1e3, ratio);
    sum_ratio += ratio;
    n++;
  }
  printf("mean ratio ours/stock: %.2fx (ours includes the sandbox's instruction hook)\n",
         sum_ratio / n);
  return 0;
}
