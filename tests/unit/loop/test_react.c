/* test_react.c - budgets (nesting, limits named, deadlines), limit config
 * errors, tool name patterns. The loop itself is covered end to end by
 * tests/e2e/ask_*.sh against the mock model server. */
#include <string.h>

#include "react.h"
#include "runtime.h"
#include "test.h"
#include "util.h"

static void test_budget_nesting(void) {
  struct react_limits pl, cl;
  react_limits_default(&pl);
  pl.max_iterations = 5;
  pl.max_tool_calls = 4;
  pl.max_tokens = 1000;
  pl.deadline_s = 100;
  struct budget parent, child;
  budget_init(&parent, &pl, NULL);
  budget_charge(&parent, 2, 2, 1, 300);
  react_limits_default(&cl);
  cl.max_iterations = 10; /* more than the parent has left */
  cl.max_tool_calls = 10;
  cl.deadline_s = 1000;
  budget_init(&child, &cl, &parent);
  /* the child's deadline is the parent's */
  CHECK(budget_deadline(&child) == parent.deadline_at);
  CHECK(budget_time_left(&child) <= 100.0);
  struct err e = {0};
  CHECK_INT(budget_check_model_call(&child, &e), 0);
  /* the child spends: the parent sees it */
  budget_charge(&child, 3, 3, 3, 600);
  CHECK_INT(parent.iterations, 5);
  CHECK_INT(parent.tool_calls, 4);
  CHECK_INT(parent.tokens, 900);
  CHECK_INT(child.iterations, 3);
  /* the child is within its own limits but the parent is spent */
  CHECK_INT(budget_check_model_call(&child, &e), ERR_LIMIT);
  CHECK_STR(e.code, "budget_exceeded");
  CHECK_CONTAINS(e.msg, "the caller's iteration limit reached (5 of 5)");
  err_clear(&e);
  CHECK_INT(budget_check_tool_call(&child, &e), ERR_LIMIT);
  CHECK_CONTAINS(e.msg, "the caller's tool call limit reached (4 of 4)");
  /* the parent itself is spent too, in its own words */
  err_clear(&e);
  CHECK_INT(budget_check_model_call(&parent, &e), ERR_LIMIT);
  CHECK_CONTAINS(e.msg, "iteration limit reached (5 of 5)");
  CHECK(strstr(e.msg, "caller") == NULL);
  budget_destroy(&child);
  budget_destroy(&parent);

  /* tokens and deadline */
  react_limits_default(&pl);
  pl.max_tokens = 100;
  pl.deadline_s = 0.05;
  budget_init(&parent, &pl, NULL);
  budget_charge(&parent, 1, 1, 0, 150);
  err_clear(&e);
  CHECK_INT(budget_check_model_call(&parent, &e), ERR_LIMIT);
  CHECK_CONTAINS(e.msg, "token limit reached (150 of 100)");
  parent.tokens = 0;
  util_sleep(0.06);
  err_clear(&e);
  CHECK_INT(budget_check_model_call(&parent, &e), ERR_LIMIT);
  CHECK_CONTAINS(e.msg, "deadline reached");
  budget_destroy(&parent);
}

static void test_limits_config(void) {
  struct react_limits l;
  CHECK_INT(react_limits_load(NULL, &l, NULL), 0);
  CHECK_INT(l.max_iterations, 10);
  CHECK_INT(l.max_tool_result_chars, 16000);
  CHECK(l.parallel_tools);
}

static void test_patterns(void) {
  CHECK(react_tool_matches("fs.*", "fs.read"));
  CHECK(react_tool_matches("*", "tracks.nearest"));
  CHECK(react_tool_matches("echo", "echo"));
  CHECK(!react_tool_matches("fs.*", "http.request"));
  CHECK(!react_tool_matches("fs.read", "fs.readx"));
}

int main(void) {
  test_budget_nesting();
  test_limits_config();
  test_patterns();
  return TEST_END();
}
