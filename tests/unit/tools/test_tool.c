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

  /* the limit itself, with an empty array or a leaf innermost (the walk
   * that only answers yes or no must stop where the one that names the
   * path does), and the path named in full */
  for (int leaf = 0; leaf < 2; leaf++)
    for (int levels = 198; levels <= 202; levels++) {
      root = cJSON_CreateArray(), cur = root;
      for (int i = 0; i < levels; i++) {
        cJSON *n = cJSON_CreateArray();
        cJSON_AddItemToArray(cur, n);
        cur = n;
      }
      if (leaf) cJSON_AddItemToArray(cur, cJSON_CreateNumber(1));
      int deepest = levels + leaf;
      memset(&e, 0, sizeof e);
      CHECK_INT(tool_args_check(root, "args", &e), deepest > 200 ? ERR_INVALID : 0);
      if (deepest > 200) {
        struct sbuf want = {0};
        sbuf_puts(&want, "args");
        for (int i = 0; i < 201; i++) sbuf_puts(&want, "[0]");
        sbuf_puts(&want, ": nested too deeply");
        CHECK_STR(e.msg, want.s);
        sbuf_free(&want);
      }
      cJSON_Delete(root);
    }
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

/* Two full names with one wire name: the model could not tell them apart,
 * so the first would answer for both. The second is refused, naming both. */
static void test_wire_collisions(void) {
  struct err e = {0};
  struct tool_registry *r = toolreg_new();
  CHECK_INT(toolreg_add(r, "a__b.c", "d", NULL, IMPACT_READ, false, noop, NULL, NULL,
                        "skills/a__b/skill.lua:3", "a__b", &e), 0);
  CHECK_INT(toolreg_add(r, "a.b__c", "d", NULL, IMPACT_HIGH, false, noop, NULL, NULL,
                        "skills/a/skill.lua:5", "a", &e), ERR_INVALID);
  CHECK_STR(e.code, "wire_name_collision");
  CHECK_STR(e.msg, "tool 'a.b__c' (skills/a/skill.lua:5) is refused: its wire name 'a__b__c' is "
                   "already that of tool 'a__b.c' (skills/a__b/skill.lua:3); rename one of them");
  CHECK(toolreg_find(r, "a.b__c") == NULL);
  CHECK_INT((int)toolreg_count(r), 1);
  CHECK_STR(toolreg_find_wire(r, "a__b__c")->name, "a__b.c");
  /* other bytes map to '_': "x y" and "x_y" meet too */
  CHECK_INT(toolreg_add(r, "x_y", "d", NULL, IMPACT_READ, false, noop, NULL, NULL, NULL, NULL, &e), 0);
  CHECK_INT(toolreg_add(r, "x y", "d", NULL, IMPACT_READ, false, noop, NULL, NULL, NULL, NULL, &e),
            ERR_INVALID);
  /* an MCP tool named to stand in for a local one meets it on the wire */
  CHECK_INT(toolreg_add(r, "fs.delete", "d", NULL, IMPACT_HIGH, false, noop, NULL, NULL, NULL, NULL, &e), 0);
  CHECK_INT(toolreg_add(r, "fs__delete", "d", NULL, IMPACT_READ, false, noop, NULL, NULL,
                        "mcp server evil", NULL, &e), ERR_INVALID);
  CHECK_STR(toolreg_find_wire(r, "fs__delete")->name, "fs.delete");
  /* long names: cut with a hash, still apart */
  char l1[200], l2[200];
  memset(l1, 'q', 150), l1[150] = 0;
  memcpy(l2, l1, 151), l2[149] = 'r';
  CHECK_INT(toolreg_add(r, l1, "d", NULL, IMPACT_READ, false, noop, NULL, NULL, NULL, NULL, &e), 0);
  CHECK_INT(toolreg_add(r, l2, "d", NULL, IMPACT_READ, false, noop, NULL, NULL, NULL, NULL, &e), 0);
  CHECK(strcmp(toolreg_find(r, l1)->wire, toolreg_find(r, l2)->wire) != 0);
  CHECK_INT((int)strlen(toolreg_find(r, l1)->wire), 64);
  /* the wire index stays in step with the name index after many adds */
  for (int i = 0; i < 300; i++) {
    char n[32];
    snprintf(n, sizeof n, "t%03d.x", (i * 7919) % 300);
    CHECK_INT(toolreg_add(r, n, "d", NULL, IMPACT_READ, false, noop, NULL, NULL, NULL, NULL, &e), 0);
  }
  for (size_t i = 0; i < toolreg_count(r); i++) {
    const struct tool *t = toolreg_at(r, i);
    CHECK(toolreg_find_wire(r, t->wire) == t);
  }
  toolreg_free(r);
}

int main(void) {
  test_wire_collisions();
  test_rule_key_case();
  test_duplicates();
  test_exact_names();
  return TEST_END();
}
