/* cli_loop.h - what `luagent ask` and `luagent chat` share: opening the
 * workspace with its skills, loop limits, context config and model client,
 * checking --provider and --tools, wiring the terminal/JSON renderer and
 * the run journal as event sinks, and the Ctrl-C stop flag. */
#ifndef LUAGENT_CLI_LOOP_H
#define LUAGENT_CLI_LOOP_H

#include <cjson/cJSON.h>
#include <signal.h>

#include "cli.h"
#include "context.h"
#include "events.h"
#include "react.h"
#include "render.h"

struct journal;
struct llm_client;
struct runtime;

struct cli_loop_opts {
  const char *who;      /* command name for messages: "ask", "chat" */
  const char *provider; /* --provider, or NULL */
  const char *tools;    /* --tools "a,b.*", or NULL */
  int max_iterations;   /* --max-iterations, 0 = config */
  enum react_mode mode; /* --mode lua|tools (default: the provider's) */
  int json;             /* --json */
  int journal;          /* keep the run journal (not --no-journal) */
};

/* Everything a loop command holds. The caller owns the struct (the event
 * sinks point into it, so it must not move between open and close). */
struct cli_loop {
  struct runtime *rt;
  struct llm_client *llm;
  struct journal *jr;       /* NULL with --no-journal */
  cJSON *patterns;          /* --tools as a JSON array, or NULL */
  struct react_limits limits;
  struct context_cfg ccfg;
  struct render rd;
  struct event_sink sink;   /* renderer, then the journal */
  struct event_sink sink_journal;
};

/* Takes argv[*i] if it is one of the shared options (--json, --no-journal,
 * --provider NAME, --tools LIST, --max-iterations N), advancing *i past a
 * value. Returns 1 if taken, 0 if not ours, or exit code 2 after printing
 * what was wrong. */
int cli_loop_option(struct cli_loop_opts *lo, int argc, char **argv, int *i);

/* Opens everything. Returns 0, or prints the error and returns exit code
 * 2 (the caller still calls cli_loop_close). */
int cli_loop_open(struct cli_loop *l, const struct cli_opts *o, const struct cli_loop_opts *lo);
void cli_loop_close(struct cli_loop *l);

/* Arms the process watchdog for one run that starts now: if the run is
 * still going CLI_LOOP_GRACE_S after its deadline (react.deadline_s), it
 * is inside a C call no hook or budget check can reach (a skill tool stuck
 * in the VM), so the process says so and exits 1, as `luagent run` does.
 * No deadline, no watchdog. cli_loop_watchdog_end disarms it. */
#define CLI_LOOP_GRACE_S 3.0
void cli_loop_watchdog(const struct cli_loop *l, const char *run_id);
void cli_loop_watchdog_end(void);

/* Ctrl-C sets *cli_loop_stop_flag(); a second Ctrl-C before it is cleared
 * exits with 130. install saves the old action in *old. */
volatile int *cli_loop_stop_flag(void);
void cli_loop_sigint(int install, struct sigaction *old);

#endif
