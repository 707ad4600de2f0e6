/* bench_sandbox.c - sandbox creation time, idle memory, and the cost of
 * tools.call against a bare Lua-to-C call measured in the same run.
 * Prints figures; never asserts (targets live in the closing notes). */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime.h"
#include "sandbox.h"
#include "util.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The floor: a C function that returns its first argument. */
static int bare_echo(lua_State *L) {
  lua_settop(L, 1);
  return 1;
}

static double time_bare(long n) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  lua_register(L, "bare_echo", bare_echo);
  char code[256];
  snprintf(code, sizeof code, "local f = bare_echo for i = 1, %ld do local r = f({ a = i }) end", n);
  double t0 = util_monotonic();
  if (luaL_dostring(L, code) != LUA_OK) fprintf(stderr, "bare: %s\n", lua_tostring(L, -1));
  double dt = util_monotonic() - t0;
  lua_close(L);
  return dt;
}

int main(int argc, char **argv) {
  int n_create = argc > 1 ? atoi(argv[1]) : 2000;
  long n_calls = argc > 2 ? atol(argv[2]) : 300000;

  /* 1. create + close, with the tools API installed as a run would. */
  char ws[] = "/tmp/luagent-bench.XXXXXX";
  if (!mkdtemp(ws)) return 1;
  struct err e = {0};
  struct runtime *rt;
  if (runtime_open(ws, &rt, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_AUTOMATION, "bench");
  double *t = malloc(sizeof(double) * (size_t)n_create);
  size_t idle = 0;
  for (int i = 0; i < n_create; i++) {
    double t0 = util_monotonic();
    struct sandbox *sb;
    sandbox_new(&ctx.limits, &sb, &e);
    runtime_install_api(rt, sb, &ctx, &e);
    if (i == 0) idle = sandbox_memory_used(sb);
    sandbox_free(sb);
    t[i] = util_monotonic() - t0;
  }
  qsort(t, (size_t)n_create, sizeof *t, cmp_d);
  printf("sandbox create+install+close: median %.1f us, p99 %.1f us (n=%d)\n", t[n_create / 2] * 1e6,
         t[n_create * 99 / 100] * 1e6, n_create);
  printf("idle sandbox memory: %.1f KiB\n", (double)idle / 1024);
  free(t);

  /* 2. tools.call("echo") vs the bare call, same loop shape. */
  double bare = time_bare(n_calls);
  struct sandbox *sb;
  sandbox_new(&ctx.limits, &sb, &e);
  runtime_install_api(rt, sb, &ctx, &e);
  char code[256];
  snprintf(code, sizeof code,
           "local call = tools.call for i = 1, %ld do local r = call('echo', { a = i }) end", n_calls);
  double t0 = util_monotonic();
  if (sandbox_run_string(sb, code, strlen(code), "bench.lua", NULL, &e)) fprintf(stderr, "%s\n", e.msg);
  double tc = util_monotonic() - t0;
  sandbox_free(sb);
  printf("bare Lua->C call:     %.3f us/call\n", bare / (double)n_calls * 1e6);
  printf("tools.call('echo'):   %.3f us/call (%.1fx the bare call)\n", tc / (double)n_calls * 1e6,
         tc / bare);
  runtime_free(rt);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", ws);
  if (system(cmd)) {
  }
  return 0;
}
