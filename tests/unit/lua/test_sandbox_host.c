/* test_sandbox_host.c - what a host that drives a sandbox through several
 * calls relies on (luagent test): calling back into the script from inside
 * a host function (on the main thread and in a coroutine, nested, raising,
 * killed), a fresh budget and deadline per call, and the clock os.time and
 * os.date read. */
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "sandbox.h"
#include "test.h"
#include "util.h"

/* h.call(x): asks the module's cb(x) through sandbox_callback and returns
 * what it gave; a failure of the callback becomes this call's error. */
static int host_call(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)ud;
  const char *const path[] = {"cb", NULL};
  return sandbox_callback(sb, path, args, ret, e);
}

/* h.where(): the script line that called it, by sandbox_where. */
static int host_where(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)ud, (void)args, (void)e;
  char w[128];
  sandbox_where(sb, w, sizeof w);
  *ret = cJSON_CreateString(w);
  return 0;
}

/* h.lend(x): returns x borrowed from its own arguments (sandbox_ret_lent),
 * as tools.call returns echo's result. */
static int host_lend(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)ud, (void)ret, (void)e;
  sandbox_ret_lent(sb, cJSON_GetArrayItem(args, 0));
  return 0;
}

static struct sandbox *make(const char *code, const struct sb_limits *lim) {
  struct sandbox *sb = NULL;
  struct err e = {0};
  if (sandbox_new(lim, &sb, &e)) return NULL;
  sandbox_add_function(sb, "h", "call", host_call, NULL);
  sandbox_add_function(sb, "h", "where", host_where, NULL);
  sandbox_add_function(sb, "h", "lend", host_lend, NULL);
  if (sandbox_run_string(sb, code, strlen(code), "host.lua", NULL, &e)) {
    fprintf(stderr, "load: %s\n", e.msg);
    sandbox_free(sb);
    return NULL;
  }
  return sb;
}

/* Calls module.run(arg) and returns its result as compact JSON (static). */
static const char *call_run(struct sandbox *sb, const char *arg_json, struct err *e) {
  static char out[1200];
  cJSON *args = arg_json ? cJSON_Parse(arg_json) : NULL, *ret = NULL;
  const char *const path[] = {"run", NULL};
  memset(e, 0, sizeof *e);
  int rc = sandbox_call(sb, path, args, &ret, NULL, e);
  cJSON_Delete(args);
  if (rc) {
    snprintf(out, sizeof out, "error: %s", e->msg);
  } else {
    char *s = ret ? json_print(ret, 0) : xstrdup("nil");
    snprintf(out, sizeof out, "%s", s);
    free(s);
  }
  cJSON_Delete(ret);
  return out;
}

static void test_callbacks(void) {
  struct err e;
  struct sandbox *sb = make(
      "local depth = 0\n"
      "return {\n"
      "  cb = function(x)\n"
      "    if type(x) == 'table' then\n"
      "      if x.raise then error({ code = 'boom', message = 'cb raised' }) end\n"
      "      if x.spin then while true do end end\n"
      "      if x.nest and x.nest > 0 then return h.call({ nest = x.nest - 1 }) + 1 end\n"
      "      return 0\n"
      "    end\n"
      "    return x * 2\n"
      "  end,\n"
      "  run = function(a, b)\n"
      "    local local_before = 'kept'\n"
      "    local r = h.call(a)\n"
      "    return { r, b, local_before }\n"
      "  end,\n"
      "  co = function(a)\n"
      "    local co = coroutine.wrap(function(x) local r = h.call(x); coroutine.yield(r); return r + 1 end)\n"
      "    local first = co(a)\n"
      "    return { first, co() }\n"
      "  end,\n"
      "  caught = function()\n"
      "    local ok, err = pcall(h.call, { raise = true })\n"
      "    return { ok, err.code, err.message }\n"
      "  end,\n"
      "}\n",
      NULL);
  CHECK(sb != NULL);
  if (!sb) return;
  /* the caller's frame (its arguments and locals) is intact after the callback */
  CHECK_STR(call_run(sb, "[21, \"b\"]", &e), "[42,\"b\",\"kept\"]");
  CHECK_STR(call_run(sb, "[{\"nest\": 5}, 1]", &e), "[5,1,\"kept\"]"); /* callbacks nest */
  /* a callback made from inside a coroutine runs on that coroutine */
  const char *const co[] = {"co", NULL};
  cJSON *args = cJSON_Parse("[4]"), *ret = NULL;
  CHECK_INT(sandbox_call(sb, co, args, &ret, NULL, &e), 0);
  char *s = ret ? json_print(ret, 0) : NULL;
  CHECK_STR(s, "[8,9]");
  free(s);
  cJSON_Delete(ret);
  cJSON_Delete(args);
  /* a callback that raises: a structured error the script can catch */
  const char *const caught[] = {"caught", NULL};
  ret = NULL;
  CHECK_INT(sandbox_call(sb, caught, NULL, &ret, NULL, &e), 0);
  s = ret ? json_print(ret, 0) : NULL;
  CHECK_CONTAINS(s, "[false,\"boom\",");
  CHECK_CONTAINS(s, "cb raised");
  free(s);
  cJSON_Delete(ret);
  CHECK(!sandbox_killed(sb));
  /* a callback that spins is killed, and the kill is the whole sandbox's */
  struct sb_limits lim;
  sb_limits_default(&lim);
  sandbox_free(sb);
  lim.instructions = 2000000;
  sb = make("return { cb = function() while true do end end,"
            " run = function() local ok = pcall(h.call, 1) return 'swallowed' end }",
            &lim);
  CHECK(sb != NULL);
  if (!sb) return;
  CHECK_CONTAINS(call_run(sb, NULL, &e), "error: ");
  CHECK_STR(e.code, "limit_instructions");
  CHECK(sandbox_killed(sb));
  const char *const cb[] = {"cb", NULL};
  CHECK(sandbox_callback(sb, cb, NULL, NULL, &e) < 0); /* nothing runs after a kill */
  sandbox_rearm(sb, util_monotonic() + 10);           /* a kill stays a kill */
  CHECK_CONTAINS(call_run(sb, NULL, &e), "error: ");
  sandbox_free(sb);
  /* without a host function running, a callback runs on the main thread */
  sb = make("return { cb = function(x) return x + 1 end }", NULL);
  args = cJSON_Parse("[1]");
  ret = NULL;
  CHECK_INT(sandbox_callback(sb, cb, args, &ret, &e), 0);
  CHECK(cJSON_IsNumber(ret) && ret->valuedouble == 2);
  cJSON_Delete(ret);
  cJSON_Delete(args);
  const char *const none[] = {"missing", NULL};
  CHECK_INT(sandbox_callback(sb, none, NULL, NULL, &e), ERR_NOTFOUND);
  sandbox_free(sb);
}

static void test_rearm(void) {
  struct sb_limits lim;
  sb_limits_default(&lim);
  lim.instructions = 1500000;
  struct err e;
  /* each call spends about 1 million instructions: two fit only with a rearm */
  const char *code = "return { run = function() local n = 0 for i = 1, 500000 do n = n + i end return n end }";
  struct sandbox *sb = make(code, &lim);
  CHECK(sb != NULL);
  if (!sb) return;
  CHECK_STR(call_run(sb, NULL, &e), "125000250000");
  sandbox_rearm(sb, util_monotonic() + 10);
  CHECK_STR(call_run(sb, NULL, &e), "125000250000");
  CHECK_CONTAINS(call_run(sb, NULL, &e), "error: "); /* no rearm: the budget is spent */
  CHECK_STR(e.code, "limit_instructions");
  sandbox_free(sb);
  /* a deadline in the past stops the next call */
  sb = make(code, NULL);
  sandbox_rearm(sb, util_monotonic() - 1);
  CHECK_CONTAINS(call_run(sb, NULL, &e), "error: ");
  CHECK_STR(e.code, "limit_deadline");
  sandbox_free(sb);
}

static double fake_now(void *ud) { return *(double *)ud; }

static void test_clock(void) {
  struct err e;
  struct sandbox *sb = make(
      "return { run = function() return { os.time(), os.date('!%Y-%m-%d %H:%M'),"
      " os.date('!%Y', 0), os.time({ year = 2000, month = 1, day = 1, hour = 12 }) > 0 } end }",
      NULL);
  CHECK(sb != NULL);
  if (!sb) return;
  double t = 1796108400; /* 2026-12-01T07:00:00Z */
  sandbox_set_clock(sb, fake_now, &t);
  CHECK_STR(call_run(sb, NULL, &e), "[1796108400,\"2026-12-01 07:00\",\"1970\",true]");
  t += 86400;
  CHECK_CONTAINS(call_run(sb, NULL, &e), "\"2026-12-02 07:00\"");
  sandbox_set_clock(sb, NULL, NULL); /* the real clock again */
  CHECK(strstr(call_run(sb, NULL, &e), "2026-12-02 07:00") == NULL || util_now() > t);
  sandbox_free(sb);
}

static void test_where(void) {
  struct err e;
  struct sandbox *sb = make("return { run = function()\n"
                            "  local a = h.where()\n"
                            "  local ok, b = pcall(h.where)\n"
                            "  return { a, b }\n"
                            "end }",
                            NULL);
  CHECK(sb != NULL);
  if (!sb) return;
  CHECK_STR(call_run(sb, NULL, &e), "[\"host.lua:2\",\"host.lua:3\"]"); /* through pcall too */
  char w[64] = "x";
  CHECK_INT(sandbox_where(sb, w, sizeof w), 0); /* no host function running */
  CHECK_STR(w, "");
  sandbox_free(sb);
}

/* A result borrowed from the arguments comes back as new values equal to
 * them (never the caller's own tables), small or past the arguments'
 * stack buffer, and a memory kill while it is pushed leaks nothing. */
static void test_lent(void) {
  struct err e;
  struct sandbox *sb = make(
      "return {\n"
      "  run = function()\n"
      "    local t = { a = 1, b = { c = 'x', d = { 1, 2.5, json.null } }, e = json.array() }\n"
      "    local r = h.lend(t)\n"
      "    assert(r ~= t and r.b ~= t.b and r.b.d ~= t.b.d)\n"
      "    r.a = 2; r.b.c = 'y'\n"
      "    assert(t.a == 1 and t.b.c == 'x')\n"
      "    local k = h.lend({ ['n\\0ul'] = 'v\\0w' })\n"
      "    assert(k['n\\0ul'] == 'v\\0w')\n"
      "    local big = h.lend({ s = string.rep('z', 3000), n = 7 })\n"
      "    assert(#big.s == 3000 and big.n == 7)\n"
      "    assert(h.lend(nil) == json.null and h.lend(5) == 5 and h.lend('s') == 's')\n"
      "    return { r.b.d[2], json.encode(r.e), t.a }\n"
      "  end,\n"
      "}\n",
      NULL);
  CHECK(sb != NULL);
  if (!sb) return;
  CHECK_STR(call_run(sb, NULL, &e), "[2.5,\"[]\",1]");
  sandbox_free(sb);
  struct sb_limits lim;
  sb_limits_default(&lim);
  lim.memory_bytes = 4 << 20;
  sb = make("return { run = function() return 1 end, fill = function()\n"
            "  local t = {}\n"
            "  for i = 1, 400 do t['k' .. i] = string.rep('v', 40) end\n"
            "  local keep = {}\n"
            "  while true do keep[#keep + 1] = h.lend(t) end\n"
            "end }\n",
            &lim);
  CHECK(sb != NULL);
  if (!sb) return;
  const char *const fill[] = {"fill", NULL};
  cJSON *ret = NULL;
  CHECK(sandbox_call(sb, fill, NULL, &ret, NULL, &e) != 0);
  CHECK_STR(e.code, "limit_memory");
  cJSON_Delete(ret);
  sandbox_free(sb);
  /* the same with arguments on the stack: the push itself raises */
  sb = make("return { small = function()\n"
            "  local keep = {}\n"
            "  while true do keep[#keep + 1] = h.lend({ a = 1, b = { 'c' } }) end\n"
            "end }\n",
            &lim);
  CHECK(sb != NULL);
  if (!sb) return;
  const char *const small[] = {"small", NULL};
  ret = NULL;
  CHECK(sandbox_call(sb, small, NULL, &ret, NULL, &e) != 0);
  CHECK_STR(e.code, "limit_memory");
  cJSON_Delete(ret);
  sandbox_free(sb);
}

int main(void) {
  test_lent();
  test_where();
  test_callbacks();
  test_rearm();
  test_clock();
  return TEST_END();
}
