/* test_tool.c - the pipeline's own argument check (tool_args_check) and
 * exact tool-name lookup: one argument object per call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "rules.h"
#include "test.h"
#include "tool.h"
#include "util.h"

static int noop(struct call_ctx *c, const struct tool *t, const cJSON *a, cJSON **r, struct err *e) {
  (void)c, (void)t, (void)a, (void)e;
  *r = NULL;
  return 0;
}

/* cJSON keeps a duplicate key when told to add one; every caller of the
 * pipeline could hand one in, so the check must catch it at any depth. */
static void test_duplicates(void) {
  struct err e = {0};
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "path", "secrets/k.txt");
  cJSON_AddStringToObject(o, "path", "ok.txt");
  CHECK_INT(tool_args_check(o, "args", &e), ERR_INVALID);
  CHECK_STR(e.code, "invalid_args");
  CHECK_STR(e.msg, "args: duplicate key \"path\"");
  cJSON_Delete(o);

  /* nested, inside an array */
  o = cJSON_CreateObject();
  cJSON *arr = cJSON_AddArrayToObject(o, "items");
  cJSON_AddItemToArray(arr, cJSON_CreateObject());
  cJSON *in = cJSON_CreateObject();
  cJSON_AddNumberToObject(in, "a", 1);
  cJSON_AddNumberToObject(in, "a", 2);
  cJSON_AddItemToArray(arr, in);
  CHECK_INT(tool_args_check(o, "args", &e), ERR_INVALID);
  CHECK_STR(e.msg, "args.items[1]: duplicate key \"a\"");
  cJSON_Delete(o);

  /* a key holding U+0000 (C0 80) is another key, shown escaped */
  o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "path", "x");
  cJSON_AddStringToObject(o, "path\xC0\x80x", "y");
  CHECK_INT(tool_args_check(o, "args", &e), 0);
  cJSON_AddStringToObject(o, "path\xC0\x80x", "z");
  CHECK_INT(tool_args_check(o, "args", &e), ERR_INVALID);
  CHECK_STR(e.msg, "args: duplicate key \"path\\u0000x\"");
  cJSON_Delete(o);

  /* a big object: sorted, found anywhere */
  o = cJSON_CreateObject();
  char k[32];
  for (int i = 0; i < 100000; i++) {
    snprintf(k, sizeof k, "k%d", i);
    cJSON_AddNumberToObject(o, k, i);
  }
  CHECK_INT(tool_args_check(o, "args", &e), 0);
  cJSON_AddNumberToObject(o, "k77777", 1);
  CHECK_INT(tool_args_check(o, "args", &e), ERR_INVALID);
  CHECK_STR(e.msg, "args: duplicate key \"k77777\"");
  cJSON_Delete(o);

  /* too deep */
  cJSON *root = cJSON_CreateArray(), *cur = root;
  for (int i = 0; i < 300; i++) {
    cJSON *n = cJSON_CreateArray();
    cJSON_AddItemToArray(cur, n);
    cur = n;
  }
  CHECK_INT(tool_args_check(root, "args", &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "nested too deeply");
  cJSON_Delete(root);
}

static void test_exact_names(void) {
  struct err e = {0};
  struct tool_registry *r = toolreg_new();
  CHECK_INT(toolreg_add(r, "echo", "d", NULL, IMPACT_READ, false, noop, NULL, NULL, NULL, NULL, &e), 0);
  CHECK(toolreg_find(r, "echo") != NULL);
  CHECK(toolreg_find(r, "echo\xC0\x80" "anything") == NULL);
  CHECK(toolreg_find(r, "ech") == NULL);
  CHECK(toolreg_find(r, "echo ") == NULL);
  CHECK(toolreg_find(r, NULL) == NULL);
  toolreg_free(r);
}

/* Rules on object keys match without regard to case (HTTP header names
 * are case-insensitive): a deny on headers.Authorization catches
 * `authorization`; an allow holds only if every case-variant matches. */
static void test_rule_key_case(void) {
  struct err e = {0};
  cJSON *rj = json_parse_str(
      "[{\"tool\":\"http.request\",\"args\":{\"headers.Authorization\":\".\"},"
      "\"action\":\"deny\"},"
      "{\"tool\":\"http.request\",\"caller\":\"script\",\"args\":{\"headers.X-Env\":\"^staging$\"},"
      "\"action\":\"allow\"}]",
      0, &e);
  struct ruleset *rs = NULL;
  CHECK_INT(rules_parse(rj, "luagent.lua", &rs, &e), 0);
  struct rule_match m;
  const char *cases[][2] = {
      {"{\"headers\":{\"Authorization\":\"x\"}}", "deny"},
      {"{\"headers\":{\"authorization\":\"x\"}}", "deny"},
      {"{\"headers\":{\"AUTHORIZATION\":\"x\"}}", "deny"},
      {"{\"headers\":{\"x-env\":\"staging\"}}", "allow"},
      {"{\"headers\":{\"X-Env\":\"staging\",\"x-env\":\"prod\"}}", "none"},
      {"{\"headers\":{\"X-Env\":\"prod\"}}", "none"},
      {"{\"headers\":{\"Authorization\":{\"secret\":\"TOKEN\"}}}", "deny"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cJSON *a = json_parse_str(cases[i][0], 0, &e);
    CHECK_INT(rules_eval(rs, "http.request", "script", "x.lua", a, &m, &e), 0);
    const char *got = m.action == RULE_DENY ? "deny" : m.action == RULE_ALLOW ? "allow" : "none";
    if (strcmp(got, cases[i][1])) fprintf(stderr, "case %zu: %s\n", i, cases[i][0]);
    CHECK_STR(got, cases[i][1]);
    cJSON_Delete(a);
  }
  rules_free(rs);
  cJSON_Delete(rj);
}

int main(void) {
  test_rule_key_case();
  test_duplicates();
  test_exact_names();
  return TEST_END();
}
