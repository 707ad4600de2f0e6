/* test_sandbox.c - limits, kills through pcall, and recovery. Each case
 * runs hostile code in a fresh sandbox and checks the error code and that
 * the next sandbox starts at once. */
#include <stdlib.h>
#include <sys/resource.h>
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


/* Host functions for the kill, budget and bridge cases. */
static int hits;          /* h.hit calls */
static volatile int stop; /* the run's stop flag */
static int host_hit(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)ud, (void)sb, (void)args, (void)ret, (void)e;
  hits++;
  return 0;
}
static int host_stop(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)ud, (void)sb, (void)args, (void)ret, (void)e;
  stop = 1;
  return 0;
}
static cJSON *echoed; /* a copy of the last h.echo arguments */
static int host_echo(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)ud, (void)sb, (void)e;
  cJSON_Delete(echoed);
  echoed = cJSON_Duplicate(args, 1);
  *ret = cJSON_Duplicate(cJSON_GetArrayItem(args, 0), 1);
  return 0;
}

/* Runs code in a sandbox with h.hit, h.stop and h.echo. */
static int run_host(const char *code, const struct sb_limits *lim, struct err *e) {
  struct sandbox *sb = NULL;
  memset(e, 0, sizeof *e);
  int rc = sandbox_new(lim, &sb, e);
  if (rc) return rc;
  sandbox_add_function(sb, "h", "hit", host_hit, NULL);
  sandbox_add_function(sb, "h", "stop", host_stop, NULL);
  sandbox_add_function(sb, "h", "echo", host_echo, NULL);
  stop = 0;
  sandbox_watch_stop(sb, &stop);
  rc = sandbox_run_string(sb, code, strlen(code), "case.lua", NULL, e);
  sandbox_free(sb);
  return rc;
}

/* Item 3: after a kill, no host function runs, on any thread. */
static void expect_no_work_after_kill(const char *code, const char *want, const struct sb_limits *lim,
                                      int line) {
  struct err e;
  hits = 0;
  int rc = run_host(code, lim, &e);
  test_checks_++;
  if (rc == 0 || strcmp(e.code, want) != 0 || hits != 0) {
    fprintf(stderr, "test_sandbox.c:%d: expected %s and 0 host calls, got rc=%d code=%s hits=%d msg=%s\n",
            line, want, rc, e.code, hits, e.msg);
    test_failures_++;
  }
}
#define EXPECT_NO_WORK(code, want, lim) expect_no_work_after_kill(code, want, lim, __LINE__)

/* cJSON allocations fail from the Nth on (0 = never). */
static long alloc_fail_at, alloc_count;
static void *failing_malloc(size_t n) {
  if (alloc_fail_at && ++alloc_count >= alloc_fail_at) return NULL;
  return malloc(n);
}

static int printable(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e) return 0;
  return 1;
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
  /* A string.rep that cannot fit is stock's catchable error, no limit. */
  EXPECT_CODE("local s = string.rep('x', 1e10)", "error", &mem);
  EXPECT_CODE("local ok = pcall(string.rep, 'x', 1e10) assert(not ok) "
              "local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end",
              "limit_memory", &mem);
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
  /* Stock refuses this range with a catchable error: so does the sandbox. */
  EXPECT_CODE("table.move({1}, -math.maxinteger, math.maxinteger, 1, {})", "error", &small);
  CHECK_INT(run("assert(not pcall(table.move, {}, 0, math.maxinteger, 1)) "
                "assert(not pcall(string.rep, 'aa', 1 << 30)) "
                "assert(not pcall(string.format, '%q', {}))", &small, &e), 0);

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


  /* Item 3: the kill belongs to the run. A kill caught by coroutine.resume
   * (not pcall) used to leave the main thread running, and new coroutines
   * started with a fresh hook count, so host functions kept running. */
  const char *after_kill[] = {
      /* killed inside a coroutine, caught by resume, then tools in new coroutines */
      "local co = coroutine.create(function() while true do end end)\n"
      "coroutine.resume(co)\n"
      "for i = 1, 100000 do local c = coroutine.wrap(function() h.hit() end) pcall(c) end",
      /* the same with pcall inside the coroutine and a nested generation */
      "local co = coroutine.create(function() pcall(function() while true do end end) end)\n"
      "pcall(coroutine.resume, co)\n"
      "for i = 1, 100000 do\n"
      "  local c = coroutine.create(function()\n"
      "    local d = coroutine.create(function() for j = 1, 3 do pcall(h.hit) end end)\n"
      "    coroutine.resume(d) end)\n"
      "  coroutine.resume(c)\n"
      "end",
      /* a suspended coroutine resumed after the kill */
      "local w = coroutine.create(function() while true do coroutine.yield() pcall(h.hit) end end)\n"
      "coroutine.resume(w)\n"
      "local co = coroutine.create(function() while true do end end)\n"
      "coroutine.resume(co)\n"
      "for i = 1, 100000 do coroutine.resume(w) end",
      NULL};
  for (int i = 0; after_kill[i]; i++) EXPECT_NO_WORK(after_kill[i], "limit_instructions", &small);
  struct sb_limits quick;
  sb_limits_default(&quick);
  quick.deadline_s = 0.2;
  quick.instructions = (uint64_t)1e15;
  EXPECT_NO_WORK("local co = coroutine.create(function() while true do end end)\n"
                 "coroutine.resume(co)\n"
                 "for i = 1, 100000 do local c = coroutine.wrap(function() h.hit() end) pcall(c) end",
                 "limit_deadline", &quick);
  /* The stop flag: set by a host call, seen by the very next host call. */
  EXPECT_NO_WORK("h.stop() h.hit()", "stopped", NULL);
  EXPECT_NO_WORK("h.stop() for i = 1, 1000 do pcall(h.hit) end", "stopped", NULL);
  EXPECT_NO_WORK("h.stop() local c = coroutine.wrap(function() pcall(h.hit) end) pcall(c)", "stopped", NULL);
  EXPECT_NO_WORK("h.stop() pcall(print, 'x') pcall(log.info, 'x') h.hit()", "stopped", NULL);
  /* Instructions run in short-lived coroutines count against the budget. */
  EXPECT_CODE("while true do coroutine.wrap(function() local x = 0 for i = 1, 50 do x = x + i end end)() end",
              "limit_instructions", &small);

  /* Item 4: converting to JSON is bounded by the memory left. */
  struct sb_limits m64;
  sb_limits_default(&m64);
  t0 = util_monotonic();
  EXPECT_NO_WORK("local t = {} for i = 1, 22 do t = {t, t} end pcall(h.hit, t) h.hit()", "limit_memory", &m64);
  EXPECT_NO_WORK("local s = string.rep('x', 1 << 20) local t = {} for i = 1, 200 do t[i] = s end "
                 "pcall(h.hit, t) h.hit()", "limit_memory", &m64);
  EXPECT_NO_WORK("local s = string.rep('x', 1 << 20) local t = {} for i = 1, 200 do t[i] = s end "
                 "pcall(json.encode, t) h.hit()", "limit_memory", &m64);
  /* Many arguments share one budget (each alone fits, all together not). */
  EXPECT_NO_WORK("local s = string.rep('x', 1 << 20) local t = {} for i = 1, 40 do t[i] = s end "
                 "pcall(h.hit, t, t, t, t, t, t, t, t) h.hit()", "limit_memory", &m64);
  /* A result too big for the Lua side fails cleanly with the memory limit
   * (the host's copy is freed: ASan checks). */
  struct sb_limits m8;
  sb_limits_default(&m8);
  m8.memory_bytes = (size_t)8 << 20;
  EXPECT_NO_WORK("local s = string.rep('x', 1 << 20) local r = h.echo({s, s, s, s, s, s}) "
                 "pcall(h.echo, {s, s, s, s, s, s}) h.hit()", "limit_memory", &m8);
  CHECK(util_monotonic() - t0 < 10);
  /* ... and the host never held the expansion (1.3 GB of cJSON before). */
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  /* ASan's quarantine keeps freed memory resident: allow for it there. */
#if defined(__SANITIZE_ADDRESS__)
  const long rss_cap_kib = 900 * 1024;
#else
  const long rss_cap_kib = 400 * 1024;
#endif
  if (ru.ru_maxrss > rss_cap_kib) {
    fprintf(stderr, "test_sandbox.c:%d: peak RSS %ld KiB after the conversion bombs\n", __LINE__, ru.ru_maxrss);
    test_failures_++;
  }
  {
    struct sandbox *sb2;
    CHECK_INT(sandbox_new(&m64, &sb2, &e), 0);
    const char *dag = "local t = {} for i = 1, 22 do t = {t, t} end return t";
    cJSON *r2 = NULL;
    CHECK_INT(sandbox_run_string(sb2, dag, strlen(dag), "dag.lua", &r2, &e), ERR_LIMIT);
    CHECK_STR(e.code, "limit_memory");
    CHECK(r2 == NULL);
    sandbox_free(sb2);
    /* ctx.state read back after the call is bounded the same way. */
    CHECK_INT(sandbox_new(&m64, &sb2, &e), 0);
    const char *st = "return { run = function(ctx) local t = {} for i = 1, 22 do t = {t, t} end ctx.state.t = t end }";
    CHECK_INT(sandbox_run_string(sb2, st, strlen(st), "st.lua", NULL, &e), 0);
    cJSON *a2 = cJSON_Parse("[{\"state\":{}}]"), *after2 = NULL;
    CHECK_INT(sandbox_call(sb2, (const char *[]){"run", NULL}, a2, NULL, &after2, &e), ERR_LIMIT);
    CHECK_STR(e.code, "limit_memory");
    CHECK(after2 == NULL);
    cJSON_Delete(a2);
    sandbox_free(sb2);
  }
  /* The deadline is checked while converting. */
  struct sb_limits bigslow;
  sb_limits_default(&bigslow);
  bigslow.memory_bytes = (size_t)1 << 30;
  bigslow.deadline_s = 0.05;
  bigslow.instructions = (uint64_t)1e15;
  EXPECT_NO_WORK("local t = {} for i = 1, 21 do t = {t, t} end pcall(h.echo, t) h.hit()", "limit_deadline", &bigslow);

  /* Item 4: error text stays well-formed when a host allocation fails. */
  {
    cJSON_Hooks hooks = {failing_malloc, free};
    cJSON_InitHooks(&hooks);
    int failed_clean = 0, bad_text = 0;
    /* Small arguments are converted into a buffer on the stack (no host
     * allocation to fail); the long string makes the conversion take
     * memory from cJSON's allocator as well. */
    for (long n = 1; n < 80; n++) {
      alloc_fail_at = n % 40;
      alloc_count = 0;
      hits = 0;
      int rc = run_host(n < 40 ? "local ok, err = pcall(h.echo, { a = { 'x', 'y', { b = 1.5, c = true } }, d = 'zz' })\n"
                                 "if not ok then error(err.message, 0) end"
                               : "local ok, err = pcall(h.echo, { a = { 'x', 'y', { b = 1.5, c = true } }, d = string.rep('z', 3000) })\n"
                                 "if not ok then error(err.message, 0) end",
                        NULL, &e);
      alloc_fail_at = 0;
      if (rc && !printable(e.msg)) bad_text++;
      if (rc && strstr(e.msg, "out of memory")) failed_clean++;
    }
    cJSON_InitHooks(NULL);
    CHECK_INT(bad_text, 0);
    CHECK(failed_clean > 0);
  }

  /* Item 1 (bridge): a zero byte is kept, never cut; big integers stay exact. */
  {
    hits = 0;
    CHECK_INT(run_host("local r = h.echo({ path = 'secrets/k', ['path\\0x'] = 'ok', s = 'x\\0y',\n"
                       "  big = math.maxinteger, small = math.mininteger, two53 = 9007199254740993 })\n"
                       "assert(r['path\\0x'] == 'ok' and r.path == 'secrets/k', 'keys')\n"
                       "assert(r.s == 'x\\0y' and #r.s == 3, 'string')\n"
                       "assert(math.type(r.big) == 'integer' and r.big == math.maxinteger, 'big')\n"
                       "assert(r.small == math.mininteger and r.two53 == 9007199254740993, 'small')",
                       NULL, &e), 0);
    const cJSON *o = cJSON_GetArrayItem(echoed, 0);
    CHECK_INT(cJSON_GetArraySize(o), 6);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "path\xC0\x80x");
    CHECK(k && cJSON_IsString(k) && !strcmp(k->valuestring, "ok"));
    k = cJSON_GetObjectItemCaseSensitive(o, "path");
    CHECK(k && !strcmp(k->valuestring, "secrets/k"));
    k = cJSON_GetObjectItemCaseSensitive(o, "s");
    CHECK(k && !strcmp(k->valuestring, "x\xC0\x80y"));
    k = cJSON_GetObjectItemCaseSensitive(o, "big");
    CHECK(k && k->valuestring && !strcmp(k->valuestring, "9223372036854775807"));
    k = cJSON_GetObjectItemCaseSensitive(o, "two53");
    CHECK(k && k->valuestring && !strcmp(k->valuestring, "9007199254740993"));
    cJSON_Delete(echoed);
    echoed = NULL;
    /* Not UTF-8 (and a raw C0 80, which would alias a zero byte) is refused, naming the path. */
    CHECK_INT(run_host("h.echo({ a = { p = 'ok\\255' } })", NULL, &e), ERR_FAIL);
    CHECK_STR(e.code, "invalid_args");
    CHECK_CONTAINS(e.msg, "a.p: string is not valid UTF-8 at byte 3");
    CHECK_INT(run_host("h.echo({ ['k\\192\\128'] = 1 })", NULL, &e), ERR_FAIL);
    CHECK_CONTAINS(e.msg, "key is not valid UTF-8 at byte 2");
    CHECK_INT(run_host("h.echo({ s = '\\237\\160\\128' })", NULL, &e), ERR_FAIL); /* a surrogate */
    CHECK_CONTAINS(e.msg, "not valid UTF-8 at byte 1");
    CHECK_INT(run_host("assert(h.echo({ s = 'h\\195\\169 \\240\\159\\152\\128' }).s == 'h\\195\\169 \\240\\159\\152\\128')", NULL, &e), 0);
    cJSON_Delete(echoed);
    echoed = NULL;
    /* JSON -> Lua: C0 80 back to a zero byte, valuestring integers exact. */
    struct sandbox *sb3;
    CHECK_INT(sandbox_new(NULL, &sb3, &e), 0);
    const char *m3 = "return { f = function(v) assert(v['a\\0b'] == 'x\\0y', 'nul') "
                     "assert(math.type(v.n) == 'integer' and v.n == -9223372036854775807, 'int') return v.n end }";
    CHECK_INT(sandbox_run_string(sb3, m3, strlen(m3), "m3.lua", NULL, &e), 0);
    cJSON *a3 = cJSON_CreateArray(), *o3 = cJSON_CreateObject();
    cJSON_AddStringToObject(o3, "a\xC0\x80" "b", "x\xC0\x80y");
    cJSON *n3 = cJSON_AddNumberToObject(o3, "n", -9223372036854775807.0);
    n3->valuestring = cJSON_malloc(24);
    strcpy(n3->valuestring, "-9223372036854775807");
    cJSON_AddItemToArray(a3, o3);
    cJSON *r3 = NULL;
    CHECK_INT(sandbox_call(sb3, (const char *[]){"f", NULL}, a3, &r3, NULL, &e), 0);
    CHECK(r3 && r3->valuestring && !strcmp(r3->valuestring, "-9223372036854775807"));
    cJSON_Delete(r3);
    cJSON_Delete(a3);
    sandbox_free(sb3);
  }

  /* NULL is a no-op for the free functions. */
  sandbox_free(NULL);
  return TEST_END();
}
