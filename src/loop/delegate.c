/* delegate.c - see delegate.h. */
#include "delegate.h"
#include "codemode.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"
#include "json.h"
#include "llm.h"
#include "react.h"
#include "schema.h"
#include "util.h"

/* A script run (luagent run, an automation) has no loop budget of its own;
 * its delegates share one root budget per run, kept per thread and keyed
 * by the run id, so several delegate() calls in one run add up. */
static __thread struct {
  char run_id[40];
  struct budget b;
  int live;
} root;

static struct budget *root_budget(struct call_ctx *ctx, const struct react_limits *l) {
  if (!root.live || strcmp(root.run_id, ctx->run_id)) {
    if (root.live) budget_destroy(&root.b);
    struct react_limits rl = *l;
    if (ctx->limits.deadline_at > 0) {
      double left = ctx->limits.deadline_at - util_monotonic();
      rl.deadline_s = left > 0 ? left : 0.001;
    }
    budget_init(&root.b, &rl, NULL);
    snprintf(root.run_id, sizeof root.run_id, "%s", ctx->run_id);
    root.live = 1;
  }
  return &root.b;
}

static const char *opt_str(const cJSON *o, const char *k) {
  return cJSON_GetStringValue(cJSON_GetObjectItem(o, k));
}

/* Finds the JSON in an answer: the whole text, or a ``` fenced block, or
 * the span from the first { or [ to the last } or ]. */
static cJSON *extract_json(const char *s) {
  cJSON *j = json_parse_str(s, 0, NULL);
  if (j) return j;
  const char *f = strstr(s, "```");
  if (f) {
    const char *start = strchr(f + 3, '\n');
    const char *end = start ? strstr(start, "```") : NULL;
    if (start && end) {
      char *t = xmalloc((size_t)(end - start) + 1);
      memcpy(t, start, (size_t)(end - start));
      t[end - start] = 0;
      j = json_parse_str(t, 0, NULL);
      free(t);
      if (j) return j;
    }
  }
  const char *a = strpbrk(s, "{["), *b1 = strrchr(s, '}'), *b2 = strrchr(s, ']');
  const char *b = b1 > b2 ? b1 : b2;
  if (a && b && b > a) {
    char *t = xmalloc((size_t)(b - a) + 2);
    memcpy(t, a, (size_t)(b - a) + 1);
    t[b - a + 1] = 0;
    j = json_parse_str(t, 0, NULL);
    free(t);
  }
  return j;
}

static int check_opts(const cJSON *opts, struct err *e) {
  static const char *known[] = {"tools",    "schema", "max_iterations", "system",
                                "provider", "agent",  "mode"};
  const cJSON *it;
  cJSON_ArrayForEach(it, opts) {
    size_t k = 0;
    for (; k < sizeof known / sizeof known[0]; k++)
      if (!strcmp(it->string, known[k])) break;
    if (k == sizeof known / sizeof known[0])
      return err_set(e, ERR_INVALID, "invalid_args",
                     "delegate: unknown option '%s' (known: tools, schema, max_iterations, "
                     "system, provider, agent, mode)",
                     it->string);
  }
  const cJSON *t = cJSON_GetObjectItem(opts, "tools");
  if (t && !cJSON_IsArray(t) && !(cJSON_IsObject(t) && !t->child))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "delegate: opts.tools must be a list of tool names or patterns");
  cJSON_ArrayForEach(it, t) {
    if (!cJSON_IsString(it))
      return err_set(e, ERR_INVALID, "invalid_args", "delegate: opts.tools must hold strings");
  }
  const cJSON *s = cJSON_GetObjectItem(opts, "schema");
  if (s && !cJSON_IsObject(s))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "delegate: opts.schema must be a table (a JSON Schema)");
  if (s && schema_check(s, "delegate: opts.schema", e)) return ERR_INVALID;
  /* checked as a double before the (int) conversion: a value past INT_MAX
   * (1e308, 3e9) or NaN must not reach it */
  const cJSON *mi = cJSON_GetObjectItem(opts, "max_iterations");
  double miv = cJSON_IsNumber(mi) ? mi->valuedouble : 0;
  if (mi && (!cJSON_IsNumber(mi) || !(miv >= 1 && miv <= DELEGATE_MAX_ITERATIONS) ||
             (double)(int)miv != miv))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "delegate: opts.max_iterations must be a whole number from 1 to %d",
                   DELEGATE_MAX_ITERATIONS);
  const char *strs[] = {"system", "provider", "agent", "mode"};
  for (size_t i = 0; i < 4; i++) {
    const cJSON *v = cJSON_GetObjectItem(opts, strs[i]);
    if (v && !cJSON_IsString(v))
      return err_set(e, ERR_INVALID, "invalid_args", "delegate: opts.%s must be a string", strs[i]);
  }
  enum react_mode m;
  const cJSON *mode = cJSON_GetObjectItem(opts, "mode");
  if (mode && react_mode_parse(mode->valuestring, &m))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "delegate: opts.mode must be \"lua\" (code mode) or \"tools\"");
  return 0;
}

/* The model's own code (caller kind model: a code-mode chunk) keeps its
 * run's identity: the agent profile names the model's calls, and rules
 * and hooks match on that name; it, the provider and the system prompt are
 * the operator's choice, never the model's. So opts.agent, opts.provider
 * and opts.system may only repeat the run's own (call.h run_provider,
 * run_system); anything else is refused, naming the option. */
static int check_identity(const struct call_ctx *ctx, const cJSON *opts, struct err *e) {
  const char *agent = opt_str(opts, "agent");
  if (agent && strcmp(agent, ctx->caller.name))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "delegate: opts.agent: code the model wrote cannot choose the nested run's "
                   "agent profile; leave it out: the nested run keeps this run's (%s)",
                   ctx->caller.name[0] ? ctx->caller.name : "none");
  const char *prov = opt_str(opts, "provider");
  if (prov && (!ctx->run_provider || strcmp(prov, ctx->run_provider)))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "delegate: opts.provider: code the model wrote cannot choose the nested run's "
                   "provider; leave it out: the nested run keeps this run's");
  const char *sys = opt_str(opts, "system");
  if (sys && (!ctx->run_system || strcmp(sys, ctx->run_system)))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "delegate: opts.system: code the model wrote cannot set the nested run's "
                   "system prompt; leave it out (the nested run keeps this run's) and put the "
                   "instructions in the prompt");
  return 0;
}

/* Maps a loop error to the codes delegate() promises. */
static void map_code(struct err *e) {
  const char *c = e->code;
  if (!strcmp(c, "budget_exceeded") || !strcmp(c, "no_provider") || !strcmp(c, "stopped") ||
      !strcmp(c, "denied") || !strcmp(c, "schema_mismatch") || !strcmp(c, "invalid_args") ||
      !strcmp(c, "refused") || !strcmp(c, "truncated"))
    return;
  snprintf(e->code, sizeof e->code, "provider_error");
}

/* The runtime's run journal for delegate() runs, opened on first use: one
 * SQLite connection (and its cached statements) for every delegate() of
 * the process instead of a new one each. Two threads opening at once: the
 * loser closes its own. NULL (e filled) when it cannot be opened; the run
 * then goes unrecorded, as before. */
static struct journal *shared_journal(struct runtime *rt, struct err *e) {
  struct journal *j = atomic_load(&rt->journal);
  if (j) return j;
  if (journal_open(rt->workspace, &j, e)) return NULL;
  struct journal *none = NULL;
  if (!atomic_compare_exchange_strong(&rt->journal, &none, j)) {
    journal_close(j);
    j = none;
  }
  return j;
}

int delegate_run(struct call_ctx *ctx, const char *prompt, const cJSON *opts, cJSON **ret,
                 struct err *e) {
  *ret = NULL;
  struct runtime *rt = ctx->rt;
  int rc;
  if (!prompt || !*prompt)
    return err_set(e, ERR_INVALID, "invalid_args",
                   "delegate: argument #1 must be a non-empty prompt");
  if (opts && !cJSON_IsObject(opts))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "delegate: argument #2 must be a table of options");
  if (opts && (rc = check_opts(opts, e))) return rc;
  /* A skill tool's delegate() runs as the skill (caller kind skill), so its
   * author picks the options, even when the model chose the skill's
   * arguments; only the model's own code is held to its run's identity. */
  bool model_own = ctx->caller.kind == CALLER_MODEL;
  if (model_own && opts && (rc = check_identity(ctx, opts, e))) return rc;

  /* an agent profile supplies defaults (a script's or a skill's choice) */
  const cJSON *agent = NULL;
  const char *agent_name = model_own ? (ctx->caller.name[0] ? ctx->caller.name : NULL)
                           : opts    ? opt_str(opts, "agent")
                                     : NULL;
  if (agent_name && !model_own) {
    agent = cJSON_GetObjectItem(config_get(rt->cfg, "agents"), agent_name);
    if (!cJSON_IsObject(agent))
      return err_set(e, ERR_INVALID, "invalid_args",
                     "delegate: no agent profile '%s' (define agents = { %s = { ... } } in "
                     "luagent.lua)",
                     agent_name, agent_name);
    if ((rc = check_opts(agent, e))) {
      err_prefix(e, "luagent.lua: agents.%s", agent_name);
      return rc;
    }
  }
#define OPT(k)                                                         \
  (opts && cJSON_GetObjectItem(opts, k) ? cJSON_GetObjectItem(opts, k) \
                                        : cJSON_GetObjectItem(agent, k))
  const cJSON *tools = OPT("tools"), *schema = OPT("schema"), *mi = OPT("max_iterations");
  const char *system = cJSON_GetStringValue(OPT("system"));
  const char *provider = cJSON_GetStringValue(OPT("provider"));
  if (model_own) { /* the run's own, checked above */
    system = ctx->run_system;
    provider = ctx->run_provider;
  }
  enum react_mode mode = REACT_MODE_DEFAULT;
  react_mode_parse(cJSON_GetStringValue(OPT("mode")), &mode); /* checked above */
#undef OPT

  struct react_opts ro = {.system = system,
                          .provider = provider,
                          .kind = "delegate",
                          .name = agent_name,
                          .agent = agent_name,
                          .parent_run_id = ctx->run_id,
                          .mode = mode};
  if ((rc = react_limits_load(rt->cfg, &ro.limits, e))) return rc;
  /* The script's own budget is its `react` limits; an option bounds only
   * this call, so it is applied after the root budget's limits are taken. */
  struct react_limits script_limits = ro.limits;
  if (cJSON_IsNumber(mi)) ro.limits.max_iterations = (int)mi->valuedouble;
  /* never outlive the sandbox that called us */
  if (ctx->limits.deadline_at > 0) {
    double left = ctx->limits.deadline_at - util_monotonic();
    if (left < 0.001) left = 0.001;
    if (ro.limits.deadline_s <= 0 || left < ro.limits.deadline_s) ro.limits.deadline_s = left;
  }
  cJSON *none = cJSON_CreateArray();
  ro.tool_patterns = cJSON_IsArray(tools) ? tools : none;
  /* every pattern must name something: a typo must not silently offer nothing */
  const cJSON *p;
  cJSON_ArrayForEach(p, ro.tool_patterns) {
    if (!strcmp(p->valuestring, CODEMODE_DELEGATE)) {
      if (mode == REACT_MODE_TOOLS) {
        cJSON_Delete(none);
        return err_set(e, ERR_INVALID, "invalid_args",
                       "delegate: opts.tools: 'delegate' gives code-mode chunks delegate(); it "
                       "needs mode = \"lua\"");
      }
      /* code mode: chunks may call delegate(); inside a chunk, only when
       * that chunk may itself */
      if (ctx->chunk && !ctx->chunk->delegate) {
        cJSON_Delete(none);
        return err_set(e, ERR_INVALID, "invalid_args",
                       "delegate: opts.tools: 'delegate' is not allowed here");
      }
      continue;
    }
    bool hit = false;
    /* inside a code-mode chunk, only what the chunk reaches counts */
    for (size_t i = 0; i < toolreg_count(rt->tools) && !hit; i++)
      hit = react_tool_matches(p->valuestring, toolreg_at(rt->tools, i)->name) &&
            call_ctx_may_reach(ctx, toolreg_at(rt->tools, i)->name);
    if (!hit) {
      cJSON_Delete(none);
      return err_set(e, ERR_INVALID, "invalid_args", "delegate: opts.tools: no tool matches '%s'",
                     p->valuestring);
    }
  }

  struct llm_client *llm = NULL;
  if ((rc = llm_client_for(rt, &llm, e))) {
    if (rc != ERR_NOTFOUND) snprintf(e->code, sizeof e->code, "no_provider");
    cJSON_Delete(none);
    return rc;
  }

  /* the nested loop's context: its own run id, the caller's budget */
  struct call_ctx dctx = *ctx;
  runtime_new_run_id(dctx.run_id);
  if (!ctx->budget) dctx.budget = root_budget(ctx, &script_limits);
  struct journal *jr = NULL;
  struct event_sink js = {0};
  if (!ctx->events && (jr = shared_journal(rt, e))) {
    journal_sink(jr, &js);
    dctx.events = &js;
  }
  err_clear(e);

  struct sbuf msg = {0};
  sbuf_puts(&msg, prompt);
  if (schema) {
    char *st = json_print(schema, 0);
    sbuf_printf(&msg,
                "\n\nReply with only a JSON value that matches this JSON Schema, no other "
                "text:\n%s",
                st);
    free(st);
  }
  cJSON *messages = cJSON_CreateArray();
  ro.messages = messages;
  ro.message = msg.s;
  struct react_result res;
  rc = react_run(&dctx, llm, &ro, &res, e);
  if (!rc && schema) {
    for (int round = 0;; round++) {
      cJSON *v = extract_json(res.answer);
      struct err se = {0};
      int bad = v ? schema_validate(schema, v, "answer", &se)
                  : err_set(&se, ERR_INVALID, "schema_mismatch", "the answer is not JSON");
      if (!bad) {
        *ret = v;
        break;
      }
      cJSON_Delete(v);
      if (round == 1) {
        rc = err_set(e, ERR_INVALID, "schema_mismatch",
                     "delegate: the answer does not match opts.schema after one repair round: %s",
                     se.msg);
        break;
      }
      /* one repair round, continuing the same conversation */
      react_result_free(&res);
      struct sbuf fix = {0};
      sbuf_printf(&fix,
                  "Your answer does not match the required JSON Schema (%s). Reply with only "
                  "the corrected JSON.",
                  se.msg);
      ro.message = fix.s;
      ro.limits.max_iterations = 1;
      rc = react_run(&dctx, llm, &ro, &res, e);
      sbuf_free(&fix);
      if (rc) break;
    }
  } else if (!rc) {
    *ret = cJSON_CreateString(res.answer);
  }
  if (rc) map_code(e);
  react_result_free(&res);
  sbuf_free(&msg);
  cJSON_Delete(messages);
  cJSON_Delete(none);
  journal_flush(jr); /* the run is on record when delegate() returns, as before */
  llm_client_free(llm);
  return rc;
}

/* delegate(prompt [, opts]) [-2, +1, e] */
static int l_delegate(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret, struct err *e) {
  (void)sb;
  const cJSON *prompt = cJSON_GetArrayItem(args, 0);
  const cJSON *opts = cJSON_GetArrayItem(args, 1);
  if (!cJSON_IsString(prompt))
    return err_set(e, ERR_INVALID, "invalid_args", "delegate: argument #1 must be a prompt string");
  if (cJSON_IsNull(opts)) opts = NULL;
  return delegate_run(ud, prompt->valuestring, opts, ret, e);
}

int delegate_install(struct sandbox *sb, struct call_ctx *ctx, struct err *e) {
  if (sandbox_add_function(sb, NULL, "delegate", l_delegate, ctx))
    return err_set(e, ERR_FAIL, "internal", "cannot install delegate()");
  return 0;
}
