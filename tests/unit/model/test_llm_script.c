/* test_llm_script.c - the scripted provider through llm_complete: the turn
 * picked per request, the function form (luagent test's model.fn), and
 * what it refuses. */
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "llm.h"
#include "test.h"
#include "util.h"

static cJSON *parse(const char *s) {
  struct err e = {0};
  cJSON *v = NULL;
  if (json_parse(s, strlen(s), JSON_NO_DUPLICATES, &v, &e)) fprintf(stderr, "%s\n", e.msg);
  return v;
}

struct seen {
  int calls;
  int saw_tools;
  char last_user[64];
  int fail;
};

static int fn(void *ud, const struct llm_request *req, cJSON **turn, struct err *e) {
  struct seen *s = ud;
  s->calls++;
  s->saw_tools = cJSON_GetArraySize(req->tools);
  const cJSON *m = cJSON_GetArrayItem(req->messages, cJSON_GetArraySize(req->messages) - 1);
  const cJSON *c = cJSON_GetObjectItem(m, "content");
  snprintf(s->last_user, sizeof s->last_user, "%s", cJSON_IsString(c) ? c->valuestring : "");
  if (s->fail == 1) return err_set(e, ERR_FAIL, "provider_error", "the test's function failed");
  if (s->fail == 2) {
    *turn = parse("{\"txt\":\"typo\"}");
    return 0;
  }
  *turn = parse("{\"text\":\"from fn\",\"tool\":\"notes.add\",\"args\":{\"title\":\"t\"}}");
  return 0;
}

static void pieces(void *ud, const char *s, size_t n) {
  (void)s;
  (void)n;
  (*(int *)ud)++;
}

int main(void) {
  struct err e = {0};
  struct llm_client *c = NULL;
  cJSON *tools = parse("[{\"name\":\"notes.add\",\"description\":\"d\",\"parameters\":{}}]");

  /* static turns: the k-th call after the latest user message gets turn k */
  cJSON *turns = parse("[{\"tool\":\"notes.add\",\"args\":{\"title\":\"x\"}},{\"text\":\"it said %{result}, "
                       "a long answer that arrives in several pieces\"}]");
  CHECK_INT(llm_client_scripted(turns, NULL, NULL, &c, &e), 0);
  cJSON *msgs = parse("[{\"role\":\"user\",\"content\":\"hi\"}]");
  struct llm_request req = {.messages = msgs, .tools = tools};
  struct llm_response r;
  int n = 0;
  struct llm_callbacks cb = {.on_text = pieces, .ud = &n};
  CHECK_INT(llm_complete(c, &req, &cb, &r, &e), 0);
  CHECK_INT(r.ncalls, 1);
  if (r.ncalls) {
    CHECK_STR(r.calls[0].name, "notes.add"); /* mapped back from the wire name */
    CHECK_STR(r.calls[0].arguments, "{\"title\":\"x\"}");
  }
  CHECK_INT(r.finish, LLM_FINISH_TOOLS);
  CHECK(r.input_tokens > 0);
  llm_response_free(&r);
  cJSON_AddItemToArray(msgs, parse("{\"role\":\"assistant\",\"content\":\"\"}"));
  cJSON_AddItemToArray(msgs, parse("{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"OK\"}"));
  CHECK_INT(llm_complete(c, &req, &cb, &r, &e), 0);
  CHECK_CONTAINS(r.text, "it said OK, a long answer");
  CHECK(n >= 2); /* streamed in pieces */
  CHECK_INT(r.finish, LLM_FINISH_STOP);
  llm_response_free(&r);
  /* a third call for the same message has no turn: named */
  cJSON_AddItemToArray(msgs, parse("{\"role\":\"assistant\",\"content\":\"x\"}"));
  CHECK(llm_complete(c, &req, NULL, &r, &e) != 0);
  CHECK_CONTAINS(e.msg, "has no turn 3");
  CHECK_STR(e.code, "provider_error");
  llm_response_free(&r);
  /* a new user message starts the script again */
  cJSON_AddItemToArray(msgs, parse("{\"role\":\"user\",\"content\":\"again\"}"));
  CHECK_INT(llm_complete(c, &req, NULL, &r, &e), 0);
  CHECK_INT(r.ncalls, 1);
  llm_response_free(&r);
  llm_client_free(c);

  /* the answer cap holds for scripted text too */
  cJSON *big = parse("[{\"text\":\"0123456789012345678901234567890123456789\"}]");
  CHECK_INT(llm_client_scripted(big, NULL, NULL, &c, &e), 0);
  struct llm_request capped = {.messages = msgs, .max_answer_bytes = 10};
  CHECK(llm_complete(c, &capped, NULL, &r, &e) != 0);
  CHECK_STR(e.code, "answer_too_large");
  CHECK_INT(strlen(r.text), 10);
  llm_response_free(&r);
  llm_client_free(c);
  cJSON_Delete(big);

  /* %{result} cannot build more than the answer cap before the cap is
   * named (10,000 placeholders of a 1 KiB result would be 10 MB) */
  {
    struct sbuf many = {0};
    sbuf_puts(&many, "[{\"text\":\"");
    for (int i = 0; i < 10000; i++) sbuf_puts(&many, "%{result}");
    sbuf_puts(&many, "\"}]");
    cJSON *blow = parse(many.s);
    sbuf_free(&many);
    CHECK_INT(llm_client_scripted(blow, NULL, NULL, &c, &e), 0);
    cJSON *m2 = parse("[{\"role\":\"user\",\"content\":\"x\"}]");
    struct sbuf kb = {0};
    for (int i = 0; i < 1024; i++) sbuf_puts(&kb, "r");
    cJSON *tr = cJSON_CreateObject();
    cJSON_AddStringToObject(tr, "role", "tool");
    cJSON_AddStringToObject(tr, "content", kb.s);
    sbuf_free(&kb);
    cJSON_InsertItemInArray(m2, 0, tr);
    struct llm_request br = {.messages = m2, .max_answer_bytes = 4096};
    CHECK(llm_complete(c, &br, NULL, &r, &e) != 0);
    CHECK_STR(e.code, "answer_too_large");
    CHECK_INT(strlen(r.text), 4096);
    llm_response_free(&r);
    llm_client_free(c);
    cJSON_Delete(m2);
    cJSON_Delete(blow);
  }

  /* bad scripts are refused when the client is made, naming the turn */
  cJSON *bad = parse("[{\"text\":\"a\"},{\"tool\":\"\"}]");
  CHECK(llm_client_scripted(bad, NULL, NULL, &c, &e) != 0);
  CHECK_CONTAINS(e.msg, "[2].tool");
  cJSON_Delete(bad);
  bad = parse("[{\"text\":\"a\"},{\"match\":\"x\",\"turns\":[{\"text\":\"y\"}]}]");
  CHECK(llm_client_scripted(bad, NULL, NULL, &c, &e) != 0);
  CHECK_CONTAINS(e.msg, "do not mix");
  cJSON_Delete(bad);
  CHECK(llm_client_scripted(NULL, NULL, NULL, &c, &e) != 0);

  /* the function form sees the request; its errors and bad turns are named */
  struct seen s = {0};
  CHECK_INT(llm_client_scripted(NULL, fn, &s, &c, &e), 0);
  CHECK_INT(llm_complete(c, &req, NULL, &r, &e), 0);
  CHECK_INT(s.calls, 1);
  CHECK_INT(s.saw_tools, 1);
  CHECK_STR(s.last_user, "again");
  CHECK_STR(r.text, "from fn");
  CHECK_INT(r.ncalls, 1);
  llm_response_free(&r);
  s.fail = 1;
  CHECK(llm_complete(c, &req, NULL, &r, &e) != 0);
  CHECK_CONTAINS(e.msg, "the test's function failed");
  llm_response_free(&r);
  s.fail = 2;
  CHECK(llm_complete(c, &req, NULL, &r, &e) != 0);
  CHECK_CONTAINS(e.msg, "unknown key 'txt'");
  llm_response_free(&r);
  /* a stop is honoured before anything is answered */
  volatile int stop = 1;
  struct llm_request stopped = {.messages = msgs, .stop = &stop};
  s.fail = 0;
  CHECK_INT(llm_complete(c, &stopped, NULL, &r, &e), ERR_STOPPED);
  llm_response_free(&r);
  llm_client_free(c);

  cJSON_Delete(turns);
  cJSON_Delete(msgs);
  cJSON_Delete(tools);
  return TEST_END();
}
