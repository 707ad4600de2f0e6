/* cli_loop.c - see cli_loop.h. */
#include "cli_loop.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codemode.h"
#include "journal.h"
#include "llm.h"
#include "runtime.h"
#include "sandbox.h"
#include "skills.h"
#include "util.h"

static volatile int stop_flag;

/* Only touches the flag and _exit: async-signal-safe. */
static void on_sigint(int sig) {
  (void)sig;
  if (stop_flag) _exit(130);
  stop_flag = 1;
}

volatile int *cli_loop_stop_flag(void) { return &stop_flag; }

void cli_loop_sigint(int install, struct sigaction *old) {
  if (!install) {
    sigaction(SIGINT, old, NULL);
    return;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, old);
}

int cli_loop_option(struct cli_loop_opts *lo, int argc, char **argv, int *i) {
  const char *a = argv[*i];
  int has_value = *i + 1 < argc;
  if (!strcmp(a, "--json")) lo->json = 1;
  else if (!strcmp(a, "--no-journal")) lo->journal = 0;
  else if (!strcmp(a, "--provider") && has_value) lo->provider = argv[++*i];
  else if (!strcmp(a, "--tools") && has_value) lo->tools = argv[++*i];
  else if (!strcmp(a, "--mode") && has_value) {
    if (react_mode_parse(argv[++*i], &lo->mode))
      return cli_fail(2, "%s: --mode needs lua (code mode) or tools, not '%s'", lo->who, argv[*i]);
  } else if (!strcmp(a, "--max-iterations") && has_value) {
    lo->max_iterations = atoi(argv[++*i]);
    if (lo->max_iterations < 1)
      return cli_fail(2, "%s: --max-iterations needs a number >= 1", lo->who);
  } else {
    return 0;
  }
  return 1;
}

int cli_loop_open(struct cli_loop *l, const struct cli_opts *o, const struct cli_loop_opts *lo) {
  struct err e = {0};
  memset(l, 0, sizeof *l);
  struct codemode_cfg cm;
  if (runtime_open(o->workspace, &l->rt, &e) || skills_ensure(l->rt, &e) ||
      react_limits_load(l->rt->cfg, &l->limits, &e) || context_config(l->rt->cfg, &l->ccfg, &e) ||
      codemode_config(l->rt->cfg, &cm, &e) ||
      llm_client_for(l->rt, &l->llm, &e))
    return cli_fail(2, "%s", e.msg);
  if (lo->max_iterations) l->limits.max_iterations = lo->max_iterations;
  if (lo->provider && !cli_has_provider(l->llm, lo->provider))
    return cli_fail(2, "%s: no provider named '%s' (see providers in luagent.lua)", lo->who,
                    lo->provider);
  if (lo->tools) l->patterns = cli_split_patterns(lo->tools);
  l->rd.out = stdout;
  l->rd.info = stderr;
  l->rd.json = lo->json;
  l->rd.workspace = o->workspace;
  render_sink(&l->rd, &l->sink);
  if (lo->journal) {
    if (journal_open(l->rt->workspace, &l->jr, &e))
      return cli_fail(e.rc == ERR_IO ? 1 : 2, "%s", e.msg); /* 1: the disk, 2: the file */
    journal_sink(l->jr, &l->sink_journal);
    l->sink.next = &l->sink_journal;
  }
  return 0;
}

void cli_loop_watchdog(const struct cli_loop *l, const char *run_id) {
  if (!(l->limits.deadline_s > 0)) return;
  char msg[400];
  snprintf(msg, sizeof msg,
           "luagent: error: run %s: wall-clock deadline of %gs exceeded inside a call that could "
           "not be interrupted; stopped by the watchdog",
           run_id, l->limits.deadline_s);
  watchdog_arm(util_monotonic() + l->limits.deadline_s, CLI_LOOP_GRACE_S, 1, msg);
}

void cli_loop_watchdog_end(void) { watchdog_disarm(); }

void cli_loop_close(struct cli_loop *l) {
  cJSON_Delete(l->patterns);
  journal_close(l->jr);
  llm_client_free(l->llm);
  runtime_free(l->rt);
  memset(l, 0, sizeof *l);
}
