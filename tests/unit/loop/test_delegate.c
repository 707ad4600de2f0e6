/* test_delegate.c - a delegate inside a tool run by the loop: the nested
 * run is a child of the loop's budget (the loop sees what it spent and the
 * child can never exceed what the loop has left), its tool calls run as
 * caller model, and its run records its parent. Uses the mock model server. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "delegate.h"
#include "events.h"
#include "react.h"
#include "runtime.h"
#include "mock_server.h"
#include "test.h"
#include "util.h"


/* A C tool that consults a delegate, as a skill's Lua tool would. */
static int caller_kind_seen = -1;
static int t_consult(struct call_ctx *ctx, const struct tool *t, const cJSON *args, cJSON **result,
                     struct err *e) {
  caller_kind_seen = ctx->caller.kind;
  cJSON *opts = cJSON_Parse("{\"tools\":[\"echo\"]}");
  cJSON *ans = NULL;
  int rc = delegate_run(ctx, "inner question", opts, &ans, e);
  cJSON_Delete(opts);
  if (rc) return rc;
  *result = cJSON_CreateObject();
  cJSON_AddItemToObject(*result, "answer", ans);
  return 0;
}

struct rec {
  struct sbuf log;
};
static void rec_emit(void *ud, const char *run_id, const char *type, const cJSON *data) {
  struct rec *r = ud;
  if (strcmp(type, "run_start") && strcmp(type, "run_end") && strcmp(type, "tool_result")) return;
  char *s = cJSON_PrintUnformatted(data);
  sbuf_printf(&r->log, "%s %s %s\n", run_id, type, s);
  free(s);
}

static const char *FIX =
    "{\"steps\":[{\"tool_calls\":[{\"id\":\"o1\",\"name\":\"sub.consult\",\"arguments\":{}}]},"
    "{\"tool_calls\":[{\"id\":\"i1\",\"name\":\"echo\",\"arguments\":{\"x\":1}}]},"
    "{\"text\":\"inner answer\"},{\"text\":\"outer done\"}]}";

static int run_outer(struct runtime *rt, long max_model_calls, struct react_result *res,
                     struct rec *rec, char run_id[40], struct err *e) {
  mock_start(FIX);
  char pj[512];
  snprintf(pj, sizeof pj,
           "return { providers = { { kind = \"openai\", model = \"m\", base_url = "
           "\"http://127.0.0.1:%d/v1\", max_retries = 0 } } }\n",
           mock_port);
  char cfgp[512];
  snprintf(cfgp, sizeof cfgp, "%s/luagent.lua", tmpdir);
  util_write_file_atomic(cfgp, pj, strlen(pj), e);
  config_free(rt->cfg);
  rt->cfg = NULL;
  if (config_load(rt->workspace, &rt->cfg, e)) return -1;
  struct llm_client *llm = NULL;
  if (llm_client_new(rt->cfg, &llm, e)) return -1;
  struct event_sink sink = {.emit = rec_emit, .ud = rec};
  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_OPERATOR, "test");
  ctx.events = &sink;
  snprintf(run_id, 40, "%s", ctx.run_id);
  struct react_opts ro = {.message = "outer question", .kind = "ask"};
  react_limits_default(&ro.limits);
  ro.limits.max_model_calls = max_model_calls;
  int rc = react_run(&ctx, llm, &ro, res, e);
  llm_client_free(llm);
  return rc;
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/luagent_test_delegate_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  unsetenv("LUAGENT_PROVIDER");
  unsetenv("LUAGENT_MODEL");
  struct err e = {0};
  struct runtime *rt = NULL;
  if (runtime_open(tmpdir, &rt, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  CHECK_INT(toolreg_add(rt->tools, "sub.consult", "asks a delegate", NULL, IMPACT_LOW, false,
                        t_consult, NULL, NULL, "test", NULL, &e),
            0);

  /* enough budget: the nested run answers, the loop finishes */
  struct rec rec = {0};
  struct react_result res;
  char outer_id[40];
  int rc = run_outer(rt, 10, &res, &rec, outer_id, &e);
  if (rc) fprintf(stderr, "%s\n", e.msg);
  CHECK_INT(rc, 0);
  CHECK_STR(res.answer, "outer done");
  CHECK_INT(caller_kind_seen, CALLER_MODEL);
  char want[128];
  snprintf(want, sizeof want, "\"kind\":\"delegate\",\"parent\":\"%s\"", outer_id);
  CHECK_CONTAINS(rec.log.s, want);
  CHECK_CONTAINS(rec.log.s, "\"answer\":\"inner answer\"");
  CHECK_CONTAINS(rec.log.s, "{\\\"answer\\\":\\\"inner answer\\\"}");
  react_result_free(&res);
  sbuf_free(&rec.log);

  /* max_model_calls = 3: outer 1 + inner 2 = 3, so the loop's own next call
   * is over budget: the loop saw what the delegate spent */
  memset(&rec, 0, sizeof rec);
  err_clear(&e);
  rc = run_outer(rt, 3, &res, &rec, outer_id, &e);
  CHECK_INT(rc, ERR_LIMIT);
  CHECK_STR(e.code, "budget_exceeded");
  CHECK_CONTAINS(e.msg, "model call limit reached (3 of 3)");
  CHECK_STR(res.status, "limit");
  CHECK_INT(res.model_calls, 1); /* the loop's own calls; the other two were the delegate's */
  react_result_free(&res);
  sbuf_free(&rec.log);

  /* max_model_calls = 2: the delegate runs out inside (its second call
   * would exceed the loop's budget) and the tool fails with budget_exceeded */
  memset(&rec, 0, sizeof rec);
  err_clear(&e);
  rc = run_outer(rt, 2, &res, &rec, outer_id, &e);
  CHECK(rc < 0);
  CHECK_CONTAINS(rec.log.s, "\"code\":\"budget_exceeded\"");
  CHECK_CONTAINS(rec.log.s, "the caller's model call limit reached (2 of 2)");
  react_result_free(&res);
  sbuf_free(&rec.log);

  runtime_free(rt);
  if (mock_pid) {
    kill(mock_pid, SIGTERM);
    waitpid(mock_pid, NULL, 0);
  }
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd)) {
  }
  return TEST_END();
}
