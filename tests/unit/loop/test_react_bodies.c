/* test_react_bodies.c - the loop vouches for its conversation (llm.h, a
 * request's stamp): each turn's body reuses the history it sent without
 * walking it, on the loop's word that it only appended since. So every
 * path that can change an old message in place must take a new stamp, or
 * the next body would carry the old text. Here each such path edits old
 * messages in place (a string of the user's message, a tool call's
 * arguments nested two levels down, a tool result) and every request the
 * run sends, over both wire formats, must be what a full rebuild of that
 * request gives (the mock's log against the wire's body built without a
 * cache, from the messages as the compaction hook, called right before
 * each model call, sees them):
 *   - the compaction hook, which reports that it rewrote (react.h);
 *   - the caller between two runs over one conversation and one body
 *     cache (a chat session's);
 * and the reuse on the stamp's word really happens (a test of a promise
 * the cache never relies on would pass on the full path alone).
 * skills.load adding a tool mid-run is the third path: e2e/ask_skills_recovery.sh
 * checks that the next request offers it. Uses the mock model server. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "json.h"
#include "llm.h"
#include "mock_server.h"
#include "react.h"
#include "runtime.h"
#include "test.h"
#include "util.h"

/* What each model call of the runs should have sent, in order. */
struct expect {
  const struct llm_provider *p;
  const struct llm__wire *w;
  char *bodies[16];
  int n;
  int edit_at; /* the call (1-based) before which the hook edits, 0: never */
};

/* Edits three old messages in place: the user's text, the first call's
 * arguments (messages[1].tool_calls[0].arguments), the first result. */
static void edit_old(cJSON *messages) {
  cJSON *user = cJSON_GetArrayItem(messages, 0);
  cJSON_SetValuestring(cJSON_GetObjectItem(user, "content"), "EDITED user text");
  cJSON *calls = cJSON_GetObjectItem(cJSON_GetArrayItem(messages, 1), "tool_calls");
  cJSON_SetValuestring(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "arguments"),
                       "{\"edited\":99}");
  cJSON *res = cJSON_GetArrayItem(messages, 2);
  cJSON_SetValuestring(cJSON_GetObjectItem(res, "content"), "EDITED result");
}

/* The compaction hook: edits before call edit_at (then says it rewrote),
 * and records what a full rebuild of the coming request gives. */
static bool hook(void *ud, struct call_ctx *ctx, struct budget *b, const char *system,
                 const cJSON *tools, cJSON *messages) {
  (void)ctx, (void)b;
  struct expect *x = ud;
  bool edited = ++x->n == x->edit_at;
  if (edited) edit_old(messages);
  struct llm_request full = {.system = system, .messages = messages, .tools = tools};
  if (x->n <= 16) x->bodies[x->n - 1] = x->w->body(x->p, &full, true);
  return edited;
}

/* Each logged request body of the mock (from line `from` on) against the
 * recorded rebuilds; returns the lines read. */
static int check_log(struct expect *x, int from, const char *where) {
  char lf[512];
  snprintf(lf, sizeof lf, "%s/requests.jsonl", tmpdir);
  char *log = NULL;
  size_t len;
  struct err e = {0};
  CHECK_INT(util_read_file(lf, 1 << 26, &log, &len, &e), 0);
  int k = 0;
  for (char *line = log; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    if (k >= from) {
      cJSON *j = cJSON_Parse(line);
      const cJSON *got = cJSON_GetObjectItem(j, "body");
      int i = k - from;
      cJSON *want = i < x->n && i < 16 ? cJSON_Parse(x->bodies[i]) : NULL;
      test_checks_++;
      if (!got || !want || !cJSON_Compare(got, want, 1)) {
        char *g = got ? cJSON_PrintUnformatted(got) : NULL;
        fprintf(stderr,
                "%s: request %d is not the full rebuild\n  sent:    %.600s\n  rebuilt: %.600s\n",
                where, i + 1, g ? g : "(none)", i < x->n && i < 16 ? x->bodies[i] : "(none)");
        free(g);
        test_failures_++;
      }
      cJSON_Delete(want);
      cJSON_Delete(j);
    }
    k++;
    line = nl ? nl + 1 : NULL;
  }
  free(log);
  return k;
}

static void expect_clear(struct expect *x) {
  for (int i = 0; i < 16; i++) free(x->bodies[i]);
  memset(x->bodies, 0, sizeof x->bodies);
  x->n = 0;
}

static int run(struct runtime *rt, struct llm_client *llm, const char *msg, cJSON *messages,
               struct llm_body_cache *bc, struct expect *x, struct react_result *res,
               struct err *e) {
  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_OPERATOR, "test");
  struct react_opts ro = {.message = msg, .kind = "ask", .messages = messages, .body_cache = bc};
  react_limits_default(&ro.limits);
  ro.compact = hook;
  ro.compact_ud = x;
  return react_run(&ctx, llm, &ro, res, e);
}

static const char *FIX =
    "{\"steps\":["
    "{\"text\":\"one\",\"tool_calls\":[{\"id\":\"c1\",\"name\":\"echo\",\"arguments\":{\"step\":1}}"
    "]},"
    "{\"tool_calls\":[{\"id\":\"c2\",\"name\":\"echo\",\"arguments\":{\"step\":2}}]},"
    "{\"tool_calls\":[{\"id\":\"c3\",\"name\":\"echo\",\"arguments\":{\"step\":3}}]},"
    "{\"text\":\"first done\"},"
    "{\"tool_calls\":[{\"id\":\"c4\",\"name\":\"echo\",\"arguments\":{\"step\":4}}]},"
    "{\"text\":\"second done\"}]}";

static void test_wire(struct runtime *rt, const char *kind) {
  mock_start(FIX);
  char pj[512];
  snprintf(pj, sizeof pj,
           "[{\"name\":\"w\",\"kind\":\"%s\",\"base_url\":\"http://127.0.0.1:%d/v1\","
           "\"model\":\"m\",\"max_retries\":0}]",
           kind, mock_port);
  cJSON *pjs = cJSON_Parse(pj);
  struct llm_client *llm = NULL;
  struct err e = {0};
  CHECK_INT(llm_client_from_json(pjs, "test", &llm, &e), 0);
  cJSON_Delete(pjs);
  if (!llm) return;
  struct expect x = {.p = llm_client_provider(llm, 0)};
  x.w = x.p->kind == LLM_ANTHROPIC ? &llm__anthropic_wire : &llm__openai_wire;

  /* 1. the compaction hook edits old messages in place before call 3 */
  cJSON *messages = cJSON_CreateArray();
  struct llm_body_cache *bc = llm_body_cache_new();
  struct react_result res;
  x.edit_at = 3;
  int rc = run(rt, llm, "Do the steps.", messages, bc, &x, &res, &e);
  if (rc) fprintf(stderr, "%s: %s\n", kind, e.msg);
  CHECK_INT(rc, 0);
  CHECK_STR(res.answer, "first done");
  CHECK_INT(x.n, 4);
  react_result_free(&res);
  int seen = check_log(&x, 0, kind);
  CHECK_INT(seen, 4);
  /* the requests after the first reused the history on the loop's word
   * (the one after the edit could not: it was checked in full) */
  long vouched = llm__body_cache_vouched(bc);
  CHECK(vouched >= 2);

  /* 2. the caller edits the kept conversation between two runs on one
   * body cache, as a chat session does */
  expect_clear(&x);
  x.edit_at = 0;
  edit_old(messages);
  cJSON_SetValuestring(cJSON_GetObjectItem(cJSON_GetArrayItem(messages, 0), "content"),
                       "EDITED again between runs");
  rc = run(rt, llm, "Once more.", messages, bc, &x, &res, &e);
  if (rc) fprintf(stderr, "%s: %s\n", kind, e.msg);
  CHECK_INT(rc, 0);
  CHECK_STR(res.answer, "second done");
  CHECK_INT(x.n, 2);
  react_result_free(&res);
  CHECK_INT(check_log(&x, seen, kind), seen + 2);
  CHECK(llm__body_cache_vouched(bc) > vouched); /* its second request */

  expect_clear(&x);
  llm_body_cache_free(bc);
  cJSON_Delete(messages);
  llm_client_free(llm);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/luagent_test_react_bodies_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  unsetenv("LUAGENT_PROVIDER");
  unsetenv("LUAGENT_MODEL");
  struct err e = {0};
  struct runtime *rt = NULL;
  if (runtime_open(tmpdir, &rt, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  test_wire(rt, "openai");
  test_wire(rt, "anthropic");
  runtime_free(rt);
  mock_stop();
  return TEST_END();
}
