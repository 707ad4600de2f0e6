/* react_limits.c - the ReAct loop's limits (react.limits in luagent.lua)
 * and the run budgets that enforce them across nested runs (see react.h).
 * Kept apart from react.c, which is the loop itself. */
#include "react.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ------------------------------------------------------------------ */
/* Limits                                                              */

void react_limits_default(struct react_limits *l) {
  memset(l, 0, sizeof *l);
  l->max_iterations = 10;
  l->max_model_calls = 0; /* 0: 2 x iterations, filled by budget_init */
  l->max_tool_calls = 50;
  l->max_tokens = 0;
  l->deadline_s = 300;
  l->call_timeout_s = 0;
  l->max_tool_result_chars = 16000;
  l->parallel_tools = true;
}

int react_limits_load(const struct config *cfg, struct react_limits *l, struct err *e) {
  react_limits_default(l);
  const cJSON *mt = cfg ? config_get(cfg, "max_tool_result_chars") : NULL;
  if (cJSON_IsNumber(mt) && mt->valuedouble >= 0) l->max_tool_result_chars = (long)mt->valuedouble;
  const cJSON *t = cfg ? config_get(cfg, "react") : NULL;
  if (!t) return 0;
  const char *file = cfg->path[0] ? cfg->path : "luagent.lua";
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  int line = cfg->path[0] ? config_line_of(cfg->path, "react") : 0;
  if (!cJSON_IsObject(t))
    return err_set(e, ERR_INVALID, "config", "%s:%d: react must be a table", base, line);
  const cJSON *it;
  cJSON_ArrayForEach(it, t) {
    const char *k = it->string;
    if (!strcmp(k, "parallel_tools")) {
      if (!cJSON_IsBool(it))
        return err_set(e, ERR_INVALID, "config", "%s:%d: loop.%s: expected true or false", base,
                       line, k);
      l->parallel_tools = cJSON_IsTrue(it);
      continue;
    }
    if (!cJSON_IsNumber(it) || it->valuedouble < 0)
      return err_set(e, ERR_INVALID, "config", "%s:%d: loop.%s: expected a number >= 0", base, line,
                     k);
    double v = it->valuedouble;
    if (!strcmp(k, "max_iterations"))
      l->max_iterations = (int)v;
    else if (!strcmp(k, "max_model_calls"))
      l->max_model_calls = (long)v;
    else if (!strcmp(k, "max_tool_calls"))
      l->max_tool_calls = (long)v;
    else if (!strcmp(k, "max_tokens"))
      l->max_tokens = (long)v;
    else if (!strcmp(k, "deadline_s"))
      l->deadline_s = v;
    else if (!strcmp(k, "call_timeout_s"))
      l->call_timeout_s = v;
    else if (!strcmp(k, "max_answer_bytes"))
      l->max_answer_bytes = (long)v;
    else if (!strcmp(k, "max_tool_args_bytes"))
      l->max_tool_args_bytes = (long)v;
    else if (!strcmp(k, "max_tool_result_chars"))
      l->max_tool_result_chars = (long)v;
    else
      return err_set(e, ERR_INVALID, "config",
                     "%s:%d: react: unknown key '%s' (known: max_iterations, max_model_calls, "
                     "max_tool_calls, max_tokens, deadline_s, call_timeout_s, "
                     "max_tool_result_chars, max_answer_bytes, max_tool_args_bytes, "
                     "parallel_tools)",
                     base, line, k);
  }
  if (l->max_iterations < 1)
    return err_set(e, ERR_INVALID, "config", "%s:%d: loop.max_iterations must be at least 1", base,
                   line);
  return 0;
}

/* ------------------------------------------------------------------ */
/* Budgets                                                             */

void budget_init(struct budget *b, const struct react_limits *l, struct budget *parent) {
  memset(b, 0, sizeof *b);
  pthread_mutex_init(&b->mu, NULL);
  b->parent = parent;
  b->max_iterations = l->max_iterations;
  b->max_model_calls = l->max_model_calls ? l->max_model_calls : 2L * l->max_iterations + 2;
  b->max_tool_calls = l->max_tool_calls;
  b->max_tokens = l->max_tokens;
  b->deadline_at = l->deadline_s > 0 ? util_monotonic() + l->deadline_s : 0;
  if (parent) {
    double pd = budget_deadline(parent);
    if (pd > 0 && (b->deadline_at == 0 || pd < b->deadline_at)) b->deadline_at = pd;
  }
}

void budget_destroy(struct budget *b) {
  pthread_mutex_destroy(&b->mu);
}

double budget_deadline(struct budget *b) {
  double d = 0;
  for (; b; b = b->parent)
    if (b->deadline_at > 0 && (d == 0 || b->deadline_at < d)) d = b->deadline_at;
  return d;
}

double budget_time_left(struct budget *b) {
  double d = budget_deadline(b);
  return d > 0 ? d - util_monotonic() : 1e9;
}

int budget_check_model_call(struct budget *b, struct err *e) {
  for (int depth = 0; b; b = b->parent, depth++) {
    const char *who = depth ? "the caller's " : "";
    pthread_mutex_lock(&b->mu);
    int it = b->iterations, mi = b->max_iterations;
    long mc = b->model_calls, mmc = b->max_model_calls, tk = b->tokens, mtk = b->max_tokens;
    pthread_mutex_unlock(&b->mu);
    if (mi > 0 && it >= mi)
      return err_set(e, ERR_LIMIT, "budget_exceeded", "%siteration limit reached (%d of %d)", who,
                     it, mi);
    if (mmc > 0 && mc >= mmc)
      return err_set(e, ERR_LIMIT, "budget_exceeded", "%smodel call limit reached (%ld of %ld)",
                     who, mc, mmc);
    if (mtk > 0 && tk >= mtk)
      return err_set(e, ERR_LIMIT, "budget_exceeded", "%stoken limit reached (%ld of %ld)", who, tk,
                     mtk);
    if (b->deadline_at > 0 && util_monotonic() >= b->deadline_at)
      return err_set(e, ERR_LIMIT, "budget_exceeded", "%sdeadline reached", who);
  }
  return 0;
}

int budget_check_tool_call(struct budget *b, struct err *e) {
  for (int depth = 0; b; b = b->parent, depth++) {
    pthread_mutex_lock(&b->mu);
    long tc = b->tool_calls, mtc = b->max_tool_calls;
    pthread_mutex_unlock(&b->mu);
    if (mtc > 0 && tc >= mtc)
      return err_set(e, ERR_LIMIT, "budget_exceeded", "%stool call limit reached (%ld of %ld)",
                     depth ? "the caller's " : "", tc, mtc);
    if (b->deadline_at > 0 && util_monotonic() >= b->deadline_at)
      return err_set(e, ERR_LIMIT, "budget_exceeded", "%sdeadline reached",
                     depth ? "the caller's " : "");
  }
  return 0;
}

void budget_charge(struct budget *b, int iterations, long model_calls, long tool_calls,
                   long tokens) {
  for (; b; b = b->parent) {
    pthread_mutex_lock(&b->mu);
    b->iterations += iterations;
    b->model_calls += model_calls;
    b->tool_calls += tool_calls;
    b->tokens += tokens;
    pthread_mutex_unlock(&b->mu);
  }
}
