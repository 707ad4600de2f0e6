/* cli_ask.c - `luagent ask "message"`: one question through the ReAct loop,
 * the answer streamed to stdout, tool activity to stderr (or, with --json,
 * every event as a JSON line), every event kept in the run journal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_loop.h"
#include "context.h"
#include "react.h"
#include "runtime.h"
#include "util.h"

static int usage(void) { return cli_usage_fail("ask", NULL); }

int cli_ask(const struct cli_opts *o, int argc, char **argv) {
  const char *message = NULL;
  struct cli_loop_opts lo = {.who = "ask", .json = o->json, .journal = 1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--") && i + 1 < argc && !message) { /* a message that starts with '-' */
      message = argv[++i];
      continue;
    }
    int r = cli_loop_option(&lo, argc, argv, &i);
    if (r == 2) return 2;
    if (r) continue;
    if (a[0] == '-' && a[1]) {
      cli_fail(2, "ask: unknown option %s", a);
      return usage();
    } else if (!message)
      message = a;
    else
      return cli_fail(2, "ask: one message at a time (quote it)");
  }
  if (!message || !*message) return usage();

  struct err e = {0};
  struct cli_loop l;
  int code = cli_loop_open(&l, o, &lo);
  if (code) goto out;
  struct react_opts ro = {.message = message, .provider = lo.provider, .kind = "ask", .mode = lo.mode,
                          .limits = l.limits, .tool_patterns = l.patterns};
  struct context_state cst = {0};
  /* Ctrl-C stops the run (the model call and the tools see the flag); a
   * second Ctrl-C exits at once. */
  volatile int *stop = cli_loop_stop_flag();
  struct call_ctx ctx;
  call_ctx_init(&ctx, l.rt, CALLER_OPERATOR, "ask");
  ctx.events = &l.sink;
  ctx.stop = stop;
  struct sigaction old_sa;
  cli_loop_sigint(1, &old_sa);
  context_prepare(&cst, &l.ccfg, l.rt, l.llm, message, &ro); /* memories, compaction, reflexion */
  struct react_result res;
  cli_loop_watchdog(&l, ctx.run_id);
  int rc = react_run(&ctx, l.llm, &ro, &res, &e);
  cli_loop_watchdog_end();
  context_state_free(&cst);
  cli_loop_sigint(0, &old_sa);
  fflush(stdout);
  if (rc) {
    /* 3: the model refused, 4: the answer was cut at the output limit,
     * 1: any other failure (README: run outcomes) */
    code = !strcmp(res.status, "refused") ? 3 : !strcmp(res.status, "truncated") ? 4 : 1;
    if (!lo.json) {
      struct sbuf m = {0}; /* the message may carry the model's text (a refusal) */
      util_escape_text(&m, e.msg, strlen(e.msg), 2000);
      fprintf(stderr, "luagent: run %s %s: %s [%s]\n", ctx.run_id, res.status, m.s ? m.s : "",
              e.code);
      sbuf_free(&m);
    }
  } else if (!lo.json && !res.answer[0]) {
    fprintf(stderr, "luagent: the model gave an empty answer\n");
  }
  react_result_free(&res);
out:
  cli_loop_close(&l);
  return code;
}
