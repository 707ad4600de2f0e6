/* test_context.c - context.c: config, token estimate, compaction without a
 * model (elision), reflexion failing open without a model. */
#include <stdlib.h>
#include <unistd.h>

#include "context.h"
#include "react.h"
#include "test.h"
#include "util.h"

static struct config *load(const char *text, struct err *e) {
  char path[] = "/tmp/luagent_test_ctx_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return NULL;
  if (write(fd, text, strlen(text)) < 0) {
  }
  close(fd);
  struct config *c = NULL;
  int rc = config_load_file(path, &c, e);
  unlink(path);
  return rc ? NULL : c;
}

static cJSON *msg(const char *role, const char *content) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", role);
  cJSON_AddStringToObject(m, "content", content);
  return m;
}

/* The run's estimate (sizes kept between calls) is the same number as the
 * plain one whatever happens to the conversation between two calls:
 * appended turns, an edit in place, compaction of the head, a removed
 * message, another tool list. */
static void test_estimate_run(void) {
  struct context_state cs = {0};
  cJSON *msgs = cJSON_CreateArray();
  cJSON *tools = cJSON_Parse("[{\"name\":\"echo\",\"parameters\":{\"type\":\"object\"}}]");
  unsigned long long x = 12345;
  for (int step = 0; step < 300; step++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    int len = cJSON_GetArraySize(msgs);
    switch (x % 10) {
      case 0: /* an edit in place, same length */
        if (len) {
          cJSON *c = cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, (int)(x % (unsigned)len)), "content");
          if (c && c->valuestring[0]) c->valuestring[0] ^= 1;
        }
        break;
      case 1: /* compaction: the head replaced by a summary */
        for (int i = 0; i < len / 2; i++) cJSON_DeleteItemFromArray(msgs, 0);
        cJSON_AddItemToArray(msgs, cJSON_Parse("{\"role\":\"user\",\"content\":\"[summary] \\u00e9\"}"));
        break;
      case 2: /* a message removed */
        if (len) cJSON_DeleteItemFromArray(msgs, (int)(x % (unsigned)len));
        break;
      case 3: /* another tool offered */
        cJSON_AddItemToArray(tools, cJSON_Parse("{\"name\":\"more\",\"description\":\"x\"}"));
        break;
      default: { /* a turn */
        char t[160];
        snprintf(t, sizeof t, "{\"role\":\"%s\",\"content\":\"turn %d caf\u00e9 \\\"q\\\" %.*s\"}",
                 x % 2 ? "assistant" : "tool", step, (int)(x % 40), "........................................");
        cJSON_AddItemToArray(msgs, cJSON_Parse(t));
      }
    }
    const char *sys = step % 50 < 25 ? "system prompt" : "another one";
    CHECK_INT(context_estimate_run(&cs, sys, tools, msgs), context_estimate_tokens(sys, tools, msgs));
  }
  CHECK_INT(context_estimate_run(&cs, NULL, NULL, NULL), 0);
  cJSON *empty = cJSON_CreateArray();
  CHECK_INT(context_estimate_run(&cs, "ab", NULL, empty), context_estimate_tokens("ab", NULL, empty));
  cJSON_Delete(empty);
  context_state_free(&cs);
  cJSON_Delete(msgs);
  cJSON_Delete(tools);
}

int main(void) {
  test_estimate_run();
  struct err e = {0};
  struct context_cfg c;
  CHECK_INT(context_config(NULL, &c, &e), 0);
  CHECK_INT(c.window_tokens, 0);
  CHECK(c.compact_at > 0.69 && c.compact_at < 0.71);
  CHECK_INT(c.keep_recent, 6);
  CHECK(!c.reflexion);
  CHECK_INT(c.max_retries, 1);

  struct config *cfg = load(
      "return { context = { window_tokens = 1000, compact_at = 0.5, "
      "keep_recent = 2 }, reflexion = { enabled = true, max_retries = 2 } }",
      &e);
  CHECK(cfg != NULL);
  if (cfg) {
    CHECK_INT(context_config(cfg, &c, &e), 0);
    CHECK_INT(c.window_tokens, 1000);
    CHECK_INT(c.keep_recent, 2);
    CHECK(c.reflexion);
    CHECK_INT(c.max_retries, 2);
    config_free(cfg);
  }
  cfg = load("return {\n  context = { compact_at = 2 } }", &e);
  if (cfg) {
    CHECK(context_config(cfg, &c, &e) < 0);
    CHECK_CONTAINS(e.msg, "context.compact_at: expected a share");
    config_free(cfg);
  }
  cfg = load("return { reflexion = { max_retries = 99 } }", &e);
  if (cfg) {
    CHECK(context_config(cfg, &c, &e) < 0);
    CHECK_CONTAINS(e.msg, "reflexion.max_retries");
    config_free(cfg);
  }

  /* estimate: ceil(bytes / 4) */
  CHECK_INT(context_estimate_tokens("abcd", NULL, NULL), 1);
  CHECK_INT(context_estimate_tokens("abcde", NULL, NULL), 2);
  CHECK_INT(context_estimate_tokens(NULL, NULL, NULL), 0);
  cJSON *arr = cJSON_CreateArray(); /* "[]" = 2 bytes */
  CHECK_INT(context_estimate_tokens("ab", NULL, arr), 1);
  cJSON_Delete(arr);

  /* compaction without a model: the older turns are elided with a marker */
  struct context_cfg cc;
  context_config(NULL, &cc, &e);
  cc.window_tokens = 300;
  cc.compact_at = 0.5;
  cc.keep_recent = 2;
  cc.memory_items = 0;
  struct react_opts ro = {0};
  struct context_state cs;
  context_prepare(&cs, &cc, NULL, NULL, "hi", &ro);
  CHECK(ro.compact != NULL);
  CHECK(ro.reflect == NULL); /* reflexion off: no hook, no extra call */
  CHECK(ro.context == NULL);
  cJSON *m = cJSON_CreateArray();
  char big[400];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  for (int i = 0; i < 4; i++) {
    cJSON_AddItemToArray(m, msg("user", big));
    cJSON_AddItemToArray(m, msg("assistant", big));
  }
  cJSON_AddItemToArray(m, msg("user", "the latest question"));
  struct react_limits lim;
  react_limits_default(&lim);
  struct budget b;
  budget_init(&b, &lim, NULL);
  struct call_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  long before = context_estimate_tokens("sys", NULL, m);
  CHECK(before > 150);
  ro.compact(ro.compact_ud, &ctx, &b, "sys", NULL, m);
  long after = context_estimate_tokens("sys", NULL, m);
  CHECK(after <= 150);
  CHECK_CONTAINS(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(m, 0), "content")),
                 "were elided to stay inside the context window");
  CHECK_STR(cJSON_GetStringValue(
                cJSON_GetObjectItem(cJSON_GetArrayItem(m, cJSON_GetArraySize(m) - 1), "content")),
            "the latest question");
  CHECK_INT(cs.compactions, 1);
  /* under the threshold: untouched */
  int n = cJSON_GetArraySize(m);
  ro.compact(ro.compact_ud, &ctx, &b, "sys", NULL, m);
  CHECK_INT(cJSON_GetArraySize(m), n);
  CHECK_INT(cs.compactions, 1);
  context_state_free(&cs);

  /* reflexion without a model fails open */
  cc.reflexion = true;
  cc.max_retries = 1;
  struct react_opts ro2 = {0};
  context_prepare(&cs, &cc, NULL, NULL, "hi", &ro2);
  CHECK(ro2.reflect != NULL);
  struct sbuf fb = {0};
  CHECK_INT(ro2.reflect(ro2.reflect_ud, &ctx, &b, m, "an answer", 0, &fb), 0);
  CHECK_INT(fb.len, 0);
  CHECK_INT(ro2.reflect(ro2.reflect_ud, &ctx, &b, m, "an answer", 1, &fb), 0); /* max reached */
  context_state_free(&cs);
  budget_destroy(&b);
  cJSON_Delete(m);
  return TEST_END();
}
