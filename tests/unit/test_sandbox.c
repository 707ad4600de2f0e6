/* test_sandbox.c - limits, kills through pcall, and recovery. Each case
 * runs hostile code in a fresh sandbox and checks the error code and that
 * the next sandbox starts at once. */
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "sandbox.h"
#include "test.h"
#include "tool.h"
#include "util.h"

static int run(const char *code, const struct sb_limits *lim, struct err *e) {
  struct sandbox *sb = NULL;
  memset(e, 0, sizeof *e);
  int rc = sandbox_new(lim, &sb, e);
  if (rc) return rc;
  rc = sandbox_run_string(sb, code, strlen(code), "case.lua", NULL, e);
  sandbox_free(sb);
  return rc;
}

static void expect_code(const char *code, const char *want, const struct sb_limits *lim, int line) {
  struct err e;
  double t0 = util_monotonic();
  int rc = run(code, lim, &e);
  double dt = util_monotonic() - t0;
  test_checks_++;
  if (rc == 0 || strcmp(e.code, want) != 0) {
    fprintf(stderr, "test_sandbox.c:%d: expected %s, got rc=%d code=%s msg=%s\n", line, want, rc,
            e.code, e.msg);
    test_failures_++;
  }
  if (dt > 20) {
    fprintf(stderr, "test_sandbox.c:%d: took %.1fs\n", line, dt);
    test_failures_++;
  }
  /* The host keeps running: the next sandbox works at once. */
  struct err e2;
  CHECK_INT(run("local x = 1 + 1 assert(x == 2)", NULL, &e2), 0);
}
#define EXPECT_CODE(code, want, lim) expect_code(code, want, lim, __LINE__)

static int host_add(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)ud, (void)sb;
  const cJSON *a = cJSON_GetArrayItem(args, 0), *b = cJSON_GetArrayItem(args, 1);
  if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b))
    return err_set(e, ERR_INVALID, "invalid_args", "add: numbers expected");
  *ret = cJSON_CreateNumber(a->valuedouble + b->valuedouble);
  return 0;
}

int main(void) {
  struct sb_limits small;
  sb_limits_default(&small);
  small.instructions = 2000000;
  small.deadline_s = 10;

  /* Instruction limit, also through pcall, xpcall, coroutines. */
  EXPECT_CODE("while true do end", "limit_instructions", &small);
  EXPECT_CODE("while true do pcall(function() while true do end end) end", "limit_instructions", &small);
  EXPECT_CODE("for i=1,10 do pcall(error, 'x') end while true do local ok = pcall(function() "
              "for i=1,1e9 do end end) end",
              "limit_instructions", &small);
  EXPECT_CODE("xpcall(function() while true do end end, function(m) while true do end end)",
              "limit_instructions", &small);
  EXPECT_CODE("local co = coroutine.wrap(function() while true do pcall(function() while true do end end) end end) co()",
              "limit_instructions", &small);
  EXPECT_CODE("local co = coroutine.create(function() while true do coroutine.yield() end end) "
              "while true do coroutine.resume(co) end",
              "limit_instructions", &small);
  EXPECT_CODE("local co = coroutine.create(function() while true do end end) "
              "while true do pcall(coroutine.resume, co) pcall(coroutine.close, co) end",
              "limit_instructions", &small);

  /* Memory: strings, tables, through pcall. */
  struct sb_limits mem;
  sb_limits_default(&mem);
  mem.memory_bytes = (size_t)8 << 20;
  EXPECT_CODE("local s = string.rep('x', 1e10)", "limit_memory", &mem);
  EXPECT_CODE("local t = {} for i = 1, 1e9 do t[i] = i end", "limit_memory", &mem);
  EXPECT_CODE("local s = 'x' while true do s = s .. s end", "limit_memory", &mem);
  EXPECT_CODE("local t = {} while true do pcall(function() t[#t+1] = ('x'):rep(1e5) .. #t end) end",
              "limit_memory", &mem);
  EXPECT_CODE("local t = {} while true do local ok = pcall(function() for i = 1, 1e6 do t[#t+1] = {i} end end) end",
              "limit_memory", &mem);

  /* Uninterruptible C loops are bounded. */
  struct err e;
  CHECK_INT(run("assert(string.rep('', 1e18) == '') assert(string.rep('', 1e18, '') == '')", NULL, &e), 0);
  EXPECT_CODE("table.move({}, 1, math.maxinteger, 1, {})", "limit_instructions", &small);
  EXPECT_CODE("table.move({1}, -math.maxinteger, math.maxinteger, 1, {})", "limit_instructions", &small);

  /* Depth and deadline. */
  EXPECT_CODE("local function f() return 1 + f() end f()", "limit_depth", NULL);
  EXPECT_CODE("local function f() return 1 + f() end pcall(f) pcall(f)", "limit_depth", NULL);
  struct sb_limits fast;
  sb_limits_default(&fast);
  fast.deadline_s = 0.3;
  fast.instructions = (uint64_t)1e15;
  double t0 = util_monotonic();
  EXPECT_CODE("while true do end", "limit_deadline", &fast);
  CHECK(util_monotonic() - t0 < 5);

  /* Error objects never crash the host or reach a script's __tostring. */
  CHECK_INT(run("error(setmetatable({}, {__tostring = function() error('x') end}))", NULL, &e), ERR_FAIL);
  CHECK_STR(e.msg, "(error object is a table value)");
  CHECK_INT(run("error({code='custom', message='m'})", NULL, &e), ERR_FAIL);
  CHECK_STR(e.code, "custom");
  CHECK(run("return (", NULL, &e) == ERR_INVALID);
  CHECK_CONTAINS(e.msg, "case.lua:1:");
  CHECK_INT(run("local x = nil; x.y = 1", NULL, &e), ERR_FAIL);
  CHECK_CONTAINS(e.msg, "case.lua:1: attempt to index a nil value");
  CHECK(strstr(e.msg, "/work") == NULL);

  /* Host functions: JSON in and out, structured errors with the call site. */
  struct sandbox *sb;
  CHECK_INT(sandbox_new(NULL, &sb, &e), 0);
  CHECK_INT(sandbox_add_function(sb, "m", "add", host_add, NULL), 0);
  const char *code = "local r = m.add(2, 3) assert(r == 5)\n"
                     "local ok, err = pcall(m.add, 'a')\n"
                     "assert(not ok and err.code == 'invalid_args', tostring(err))\n"
                     "return { sum = r, list = json.array({}) }";
  cJSON *ret = NULL;
  CHECK_INT(sandbox_run_string(sb, code, strlen(code), "host.lua", &ret, &e), 0);
  char *s = ret ? json_canonical(ret) : NULL;
  CHECK_STR(s, "{\"list\":[],\"sum\":5}");
  free(s);
  cJSON_Delete(ret);
  /* sandbox_call with args_after reads back a mutated table argument. */
  const char *mod = "return { run = function(ctx) ctx.state.n = (ctx.state.n or 0) + 1 return 'ok' end }";
  CHECK_INT(sandbox_run_string(sb, mod, strlen(mod), "mod.lua", NULL, &e), 0);
  cJSON *args = cJSON_Parse("[{\"state\":{\"n\":41}}]"), *after = NULL;
  ret = NULL;
  CHECK_INT(sandbox_call(sb, (const char *[]){"run", NULL}, args, &ret, &after, &e), 0);
  CHECK(cJSON_IsString(ret) && !strcmp(ret->valuestring, "ok"));
  s = after ? cJSON_PrintUnformatted(after) : NULL;
  CHECK_STR(s, "[{\"state\":{\"n\":42}}]");
  free(s);
  cJSON_Delete(args);
  cJSON_Delete(after);
  cJSON_Delete(ret);
  CHECK(sandbox_has_function(sb, (const char *[]){"run", NULL}));
  CHECK(!sandbox_has_function(sb, (const char *[]){"nope", NULL}));
  CHECK_INT(sandbox_call(sb, (const char *[]){"nope", NULL}, NULL, NULL, NULL, &e), ERR_NOTFOUND);
  sandbox_free(sb);

  /* Allocation failure at every point of setup and of a small script: a
   * clean error or success, never a crash (the capped allocator fails the
   * allocation that crosses the cap, so stepping the cap steps N). */
  int ok = 0, failed = 0;
  for (size_t cap = 1024; cap < 160 * 1024; cap += 512) {
    struct sb_limits l;
    sb_limits_default(&l);
    l.memory_bytes = cap;
    int rc = run("local t = {} for i = 1, 200 do t[i] = tostring(i) .. 'x' end return #t", &l, &e);
    if (rc == 0) ok++;
    else if (!strcmp(e.code, "limit_memory")) failed++;
    else {
      fprintf(stderr, "cap %zu: unexpected %s: %s\n", cap, e.code, e.msg);
      test_failures_++;
    }
  }
  CHECK(ok > 0 && failed > 0);

  /* NULL is a no-op for the free functions. */
  sandbox_free(NULL);
  return TEST_END();
}
