/* test_codemode.c - code mode's pieces without a model: the API line a
 * tool's schema becomes, the line number in an error, the code_mode config,
 * the lua tool's definition, and codemode_exec on its own: the argument
 * checks, a chunk calling tools in and out of its scope, the run's budget
 * paying for each inner call, the events, and a limit named. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codemode.h"
#include "events.h"
#include "json.h"
#include "react.h"
#include "runtime.h"
#include "test.h"
#include "util.h"

static char *line_of_r(const char *def_json, const char *returns_json) {
  cJSON *d = cJSON_Parse(def_json), *r = returns_json ? cJSON_Parse(returns_json) : NULL;
  struct sbuf b = {0};
  codemode_api_line(d, r, &b);
  cJSON_Delete(d);
  cJSON_Delete(r);
  return sbuf_take(&b);
}
static char *line_of(const char *def_json) {
  return line_of_r(def_json, NULL);
}
static void test_api_lines(void) {
  char *s = line_of(
      "{\"name\":\"notes.add\",\"description\":\"Create a note\",\"parameters\":{\"type\":"
      "\"object\",\"required\":[\"title\",\"text\"],\"properties\":{\"text\":{\"type\":"
      "\"string\"},\"title\":{\"type\":\"string\"}}}}");
  CHECK_STR(s, "notes.add{title: string, text: string}  -- Create a note");
  free(s);
  s = line_of_r("{\"name\":\"notes.add\",\"description\":\"Create a note\",\"parameters\":{"
                "\"type\":\"object\",\"required\":[\"title\"],\"properties\":{\"title\":{"
                "\"type\":\"string\"}}}}",
                "{\"type\":\"object\",\"required\":[\"ok\"],\"properties\":{\"ok\":{\"type\":"
                "\"boolean\"}}}");
  CHECK_STR(s, "notes.add{title: string} -> {ok: boolean}  -- Create a note");
  free(s);
  /* optional ones after the required, by name; enums, arrays, nested objects */
  s = line_of(
      "{\"name\":\"t.x\",\"description\":\"First line.\\nSecond line\",\"parameters\":{"
      "\"type\":\"object\",\"required\":[\"kind\"],\"properties\":{"
      "\"zeta\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}},"
      "\"kind\":{\"enum\":[\"hostile\",\"friendly\"]},"
      "\"at\":{\"type\":\"object\",\"required\":[\"lat\"],\"properties\":{\"lat\":{\"type\":"
      "\"number\"},\"deep\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}}}}},"
      "\"maybe\":{\"type\":[\"string\",\"null\"]}}}}");
  CHECK_STR(s, "t.x{kind: \"hostile\"|\"friendly\", at?: {lat: number, deep?: table}, maybe?: "
               "string|null, zeta?: {integer}}  -- First line.");
  free(s);
  s = line_of("{\"name\":\"time.now\",\"description\":\"\",\"parameters\":{\"type\":\"object\"}}");
  CHECK_STR(s, "time.now{}");
  free(s);
  /* a long description is cut, on a character boundary */
  struct sbuf d = {0};
  sbuf_puts(&d, "{\"name\":\"a.b\",\"parameters\":{},\"description\":\"");
  for (int i = 0; i < 100; i++) sbuf_puts(&d, "\xc3\xa9"); /* é */
  sbuf_puts(&d, "\"}");
  s = line_of(d.s);
  CHECK(strlen(s) < 200);
  size_t n = strlen(s), at = 0, k;
  while (at < n && (k = util_utf8_len((const unsigned char *)s + at, n - at, NULL)) > 0) at += k;
  CHECK_INT(at, n); /* every character whole */
  CHECK_CONTAINS(s, "...");
  free(s);
  sbuf_free(&d);
  /* garbage in: never a crash */
  s = line_of("{\"parameters\":{\"properties\":{\"x\":7}}}");
  CHECK_STR(s, "?{x?: any}");
  free(s);
}

static void test_error_line(void) {
  CHECK_INT(codemode_error_line("code:12: attempt to index a nil value"), 12);
  CHECK_INT(codemode_error_line("fs.write: denied: code:3: x"), 3);
  CHECK_INT(codemode_error_line("skills/x/skill.lua:4: boom"), 0);
  CHECK_INT(codemode_error_line("error code: 5"), 0);
  CHECK_INT(codemode_error_line("barcode:7: no"), 0);
  CHECK_INT(codemode_error_line(""), 0);
}

static void test_config(const char *dir) {
  static const struct {
    const char *lua, *want;
  } cases[] = {
      {"return { code_mode = { instructions = 0 } }",
       "code_mode.instructions: expected a number above 0"},
      {"return { code_mode = { memory_mb = \"lots\" } }",
       "code_mode.memory_mb: expected a number above 0"},
      {"return { code_mode = { colour = 1 } }", "code_mode.colour is not a known key"},
      {"return { code_mode = 5 }", "code_mode"},
  };
  char path[600];
  snprintf(path, sizeof path, "%s/cfg.lua", dir);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct err e = {0};
    util_write_file_atomic(path, cases[i].lua, strlen(cases[i].lua), &e);
    struct config *cfg = NULL;
    int rc = config_load_file(path, &cfg, &e);
    struct codemode_cfg c;
    if (!rc) rc = codemode_config(cfg, &c, &e);
    CHECK(rc != 0);
    CHECK_CONTAINS(e.msg, cases[i].want);
    config_free(cfg);
  }
  struct err e = {0};
  const char *ok = "return { code_mode = { instructions = 5000, memory_mb = 2, deadline_s = 1.5, "
                   "print_bytes = 64, max_code_bytes = 100 } }";
  util_write_file_atomic(path, ok, strlen(ok), &e);
  struct config *cfg = NULL;
  CHECK_INT(config_load_file(path, &cfg, &e), 0);
  struct codemode_cfg c;
  CHECK_INT(codemode_config(cfg, &c, &e), 0);
  CHECK_INT(c.instructions, 5000);
  CHECK_INT(c.memory_bytes, 2u << 20);
  CHECK(c.deadline_s == 1.5);
  CHECK_INT(c.print_bytes, 64);
  CHECK_INT(c.max_code_bytes, 100);
  config_free(cfg);
  CHECK_INT(codemode_config(NULL, &c, &e), 0);
  CHECK_INT(c.instructions, 10000000);
}

static void test_tool_def(void) {
  cJSON *d = codemode_tool_def();
  char *s = json_print(d, JSON_CANONICAL);
  CHECK_CONTAINS(s, "\"name\":\"lua\"");
  CHECK_CONTAINS(s, "\"required\":[\"code\"]");
  CHECK_CONTAINS(s, "\"additionalProperties\":false");
  free(s);
  cJSON_Delete(d);
}

/* --- codemode_exec against a runtime with C tools -------------------- */

static int t_sum(struct call_ctx *ctx, const struct tool *t, const cJSON *args, cJSON **result,
                 struct err *e) {
  (void)ctx, (void)t, (void)e;
  *result = cJSON_CreateObject();
  cJSON_AddNumberToObject(*result, "sum",
                          cJSON_GetNumberValue(cJSON_GetObjectItem(args, "a")) +
                              cJSON_GetNumberValue(cJSON_GetObjectItem(args, "b")));
  return 0;
}

struct rec {
  struct sbuf log;
};
static void rec_emit(void *ud, const char *run_id, const char *type, const cJSON *data) {
  (void)run_id;
  struct rec *r = ud;
  char *s = json_print(data, JSON_CANONICAL);
  sbuf_printf(&r->log, "%s %s\n", type, s);
  free(s);
}

static cJSON *run(const struct codemode *cm, struct call_ctx *ctx, struct budget *b,
                  const char *args_json, struct codemode_result *res) {
  cJSON *a = cJSON_Parse(args_json);
  codemode_exec(cm, ctx, b, "id1", a, res);
  cJSON_Delete(a);
  return cJSON_Parse(res->content);
}

static void test_exec(struct runtime *rt) {
  struct err e = {0};
  CHECK_INT(toolreg_add(rt->tools, "m.sum", "Add", "{\"type\":\"object\",\"required\":[\"a\",\"b\"]}",
                        IMPACT_READ, false, t_sum, NULL, NULL, "test", NULL, &e),
            0);
  /* the run would have offered m.sum and echo; code mode keeps them as the scope */
  cJSON *tools = cJSON_Parse(
      "[{\"name\":\"m.sum\",\"description\":\"Add\",\"parameters\":{\"type\":\"object\"}},"
      "{\"name\":\"echo\",\"description\":\"Echo\",\"parameters\":{\"type\":\"object\"}}]");
  struct sbuf sys = {0};
  sbuf_puts(&sys, "base prompt");
  struct codemode cm;
  CHECK_INT(codemode_setup(&cm, rt, &tools, false, &sys, &e), 0);
  CHECK_INT(cJSON_GetArraySize(tools), 1);
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(tools, 0), "name")), "lua");
  CHECK_CONTAINS(sys.s, "base prompt\n\nYou are in code mode");
  CHECK_CONTAINS(sys.s, "\nm.sum{}  -- Add\necho{}  -- Echo\n");
  CHECK(!strstr(sys.s, "delegate("));
  CHECK(cm.readonly);
  sbuf_free(&sys);
  cJSON_Delete(tools);

  struct rec rec = {0};
  struct event_sink sink = {.emit = rec_emit, .ud = &rec};
  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_MODEL, "");
  ctx.events = &sink;
  struct react_limits l;
  react_limits_default(&l);
  l.max_tool_calls = 4;
  struct budget b;
  budget_init(&b, &l, NULL);

  struct codemode_result res;
  cJSON *o = run(&cm, &ctx, &b,
                 "{\"code\":\"local s = tools.call('m.sum', {a = 1, b = 2}).sum\\n"
                 "local ok, err = pcall(tools.call, 'fs.write', {path = 'x', content = 'y'})\\n"
                 "print('s', s)\\nreturn {s = s, code = err.code, n = #tools.list()}\"}",
                 &res);
  CHECK(!res.is_error);
  CHECK_INT(res.inner_calls, 2);
  /* the calls summary before value and print: a cut never hides it */
  CHECK_STR(res.content, "{\"ok\":true,\"calls\":\"2 calls: m.sum ok, fs.write unknown_tool\","
                         "\"value\":{\"code\":\"unknown_tool\",\"n\":2,\"s\":3},"
                         "\"print\":\"s\\t3\\n\"}");
  cJSON_Delete(o);
  free(res.content);
  CHECK_CONTAINS(rec.log.s, "lua_code {\"code\":\"local s = tools.call('m.sum'");
  CHECK_CONTAINS(rec.log.s, "lua_call {\"args\":{\"a\":1,\"b\":2},\"content\":\"{\\\"sum\\\":3}\","
                            "\"id\":\"id1\",");
  CHECK_CONTAINS(rec.log.s, "\"code\":\"unknown_tool\"");
  CHECK_INT(b.tool_calls, 2); /* both inner calls charged to the run */

  /* the budget runs out inside the chunk: catchable, named */
  o = run(&cm, &ctx, &b,
          "{\"code\":\"local r = {}\\nfor i = 1, 5 do\\n  local ok, e = pcall(tools.call, 'echo', "
          "{i = i})\\n  r[i] = ok and 'ok' or e.code\\nend\\nreturn r\"}",
          &res);
  CHECK_CONTAINS(res.content, "\"value\":[\"ok\",\"ok\",\"budget_exceeded\",\"budget_exceeded\","
                              "\"budget_exceeded\"]");
  CHECK_CONTAINS(res.content, "echo ok x2, echo budget_exceeded x3");
  CHECK_INT(b.tool_calls, 4);
  cJSON_Delete(o);
  free(res.content);

  /* an uncaught error: message, line, code; a limit: its key */
  o = run(&cm, &ctx, &b, "{\"code\":\"local x = 1\\nlocal y = nil + x\"}", &res);
  CHECK(res.is_error);
  CHECK_STR(res.code, "error");
  CHECK_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "line")), 2);
  CHECK_CONTAINS(cJSON_GetStringValue(cJSON_GetObjectItem(o, "error")), "code:2:");
  CHECK(!cJSON_GetObjectItem(o, "limit"));
  cJSON_Delete(o);
  free(res.content);
  cm.cfg.instructions = 100000;
  o = run(&cm, &ctx, &b, "{\"code\":\"while true do end\"}", &res);
  CHECK_STR(res.code, "limit_instructions");
  CHECK_CONTAINS(cJSON_GetStringValue(cJSON_GetObjectItem(o, "limit")),
                 "code_mode.instructions (100000 per lua call)");
  cJSON_Delete(o);
  free(res.content);

  /* argument checks (table-driven, exact messages) */
  static const struct {
    const char *args, *want;
  } bad[] = {
      {"{\"code\":1}", "error (invalid_args): lua: \"code\" must be a string of Lua source, not a number"},
      {"{\"code\":[]}", "error (invalid_args): lua: \"code\" must be a string of Lua source, not an array"},
      {"{\"code\":null}", "error (invalid_args): lua: \"code\" must be a string of Lua source, not null"},
      {"{}", "error (invalid_args): lua: the arguments need \"code\", a string of Lua source, e.g. "
             "{\"code\": \"return 1 + 1\"}"},
      {"{\"code\":\"return 1\",\"lang\":\"py\"}",
       "error (invalid_args): lua: unknown argument \"lang\": lua takes one argument, \"code\" (a "
       "string of Lua)"},
      {"{\"code\":\"\"}", "error (invalid_args): lua: \"code\" is empty: send Lua source that "
                          "returns what you need"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    o = run(&cm, &ctx, &b, bad[i].args, &res);
    CHECK(res.is_error);
    CHECK_STR(res.code, "invalid_args");
    CHECK_STR(res.content, bad[i].want);
    cJSON_Delete(o);
    free(res.content);
  }
  cm.cfg.max_code_bytes = 10;
  o = run(&cm, &ctx, &b, "{\"code\":\"return 12345678\"}", &res);
  CHECK_STR(res.content, "error (invalid_args): lua: the code is 15 bytes; at most 10 "
                         "(code_mode.max_code_bytes): split the work into smaller calls");
  cJSON_Delete(o);
  free(res.content);
  codemode_exec(&cm, &ctx, &b, "id1", NULL, &res); /* no arguments at all */
  CHECK(res.is_error);
  free(res.content);

  budget_destroy(&b);
  codemode_free(&cm);
  codemode_free(&cm); /* twice: a no-op */
  sbuf_free(&rec.log);
}

int main(void) {
  char dir[] = "/tmp/luagent_test_codemode_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  test_api_lines();
  test_error_line();
  test_config(dir);
  test_tool_def();
  struct err e = {0};
  struct runtime *rt = NULL;
  if (runtime_open(dir, &rt, &e)) {
    fprintf(stderr, "runtime_open: %s\n", e.msg);
    return 1;
  }
  test_exec(rt);
  runtime_free(rt);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) {
  }
  return TEST_END();
}
