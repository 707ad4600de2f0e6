/* cli_ask.c - `luagent ask "message"`: one question through the ReAct loop,
 * the answer streamed to stdout, tool activity to stderr (or, with --json,
 * every event as a JSON line), every event kept in the run journal. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "context.h"
#include "journal.h"
#include "llm.h"
#include "react.h"
#include "render.h"
#include "runtime.h"
#include "skills.h"
#include "util.h"

/* Ctrl-C stops the run (the model call and the tools see the flag); a
 * second Ctrl-C exits at once. */
static volatile int stop_flag;
static void on_sigint(int sig) {
  (void)sig;
  if (stop_flag) _exit(130);
  stop_flag = 1;
}

static int usage(void) {
  return cli_fail(2,
                  "usage: luagent ask [--json] [--provider NAME] [--max-iterations N] "
                  "[--tools PATTERN,...] [--no-journal] \"message\"");
}

int cli_ask(const struct cli_opts *o, int argc, char **argv) {
  const char *message = NULL, *provider = NULL, *tools = NULL;
  int json = o->json, max_iter = 0, journal_on = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json"))
      json = 1;
    else if (!strcmp(a, "--no-journal"))
      journal_on = 0;
    else if (!strcmp(a, "--provider") && i + 1 < argc)
      provider = argv[++i];
    else if (!strcmp(a, "--tools") && i + 1 < argc)
      tools = argv[++i];
    else if (!strcmp(a, "--max-iterations") && i + 1 < argc) {
      max_iter = atoi(argv[++i]);
      if (max_iter < 1) return cli_fail(2, "ask: --max-iterations needs a number >= 1");
    } else if (a[0] == '-' && a[1]) {
      cli_fail(2, "ask: unknown option %s", a);
      return usage();
    } else if (!message)
      message = a;
    else
      return cli_fail(2, "ask: one message at a time (quote it)");
  }
  if (!message || !*message) return usage();

  struct err e = {0};
  struct runtime *rt = NULL;
  if (runtime_open(o->workspace, &rt, &e)) return cli_fail(2, "%s", e.msg);
  int code = 0;
  if (skills_ensure(rt, &e)) { /* skill tools and selection */
    runtime_free(rt);
    return cli_fail(2, "%s", e.msg);
  }
  struct llm_client *llm = NULL;
  struct journal *jr = NULL;
  cJSON *patterns = NULL;
  struct react_opts ro = {.message = message, .provider = provider, .kind = "ask"};
  if (react_limits_load(rt->cfg, &ro.limits, &e)) {
    code = cli_fail(2, "%s", e.msg);
    goto out;
  }
  if (max_iter) ro.limits.max_iterations = max_iter;
  struct context_cfg ccfg;
  struct context_state cst = {0};
  if (context_config(rt->cfg, &ccfg, &e)) {
    code = cli_fail(2, "%s", e.msg);
    goto out;
  }
  if (llm_client_for(rt, &llm, &e)) {
    code = cli_fail(2, "%s", e.msg);
    goto out;
  }
  if (provider && !cli_has_provider(llm, provider)) {
    code = cli_fail(2, "ask: no provider named '%s' (see providers in luagent.lua)", provider);
    goto out;
  }
  if (tools) {
    patterns = cli_split_patterns(tools);
    ro.tool_patterns = patterns;
  }

  struct render rd = {.out = stdout, .info = stderr, .json = json};
  struct event_sink sink_render = {0}, sink_journal = {0};
  render_sink(&rd, &sink_render);
  if (journal_on) {
    if (journal_open(rt->workspace, &jr, &e)) {
      code = cli_fail(2, "%s", e.msg);
      goto out;
    }
    journal_sink(jr, &sink_journal);
    sink_render.next = &sink_journal;
  }
  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_OPERATOR, "ask");
  ctx.events = &sink_render;
  ctx.stop = &stop_flag;
  struct sigaction sa = {0}, old_sa;
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_sa);
  context_prepare(&cst, &ccfg, rt, llm, message, &ro); /* memories, compaction, reflexion */
  struct react_result res;
  int rc = react_run(&ctx, llm, &ro, &res, &e);
  context_state_free(&cst);
  sigaction(SIGINT, &old_sa, NULL);
  fflush(stdout);
  if (rc) {
    code = 1;
    if (!json)
      fprintf(stderr, "luagent: run %s %s: %s [%s]\n", ctx.run_id, res.status, e.msg, e.code);
  } else if (!json && !res.answer[0]) {
    fprintf(stderr, "luagent: the model gave an empty answer\n");
  }
  react_result_free(&res);
out:
  cJSON_Delete(patterns);
  journal_close(jr);
  llm_client_free(llm);
  runtime_free(rt);
  return code;
}
