/* cli_chat.c - `luagent chat [--session NAME]`: a conversation kept in the
 * state database. Each line the operator types starts a turn through the
 * ReAct loop with the conversation so far; the answer streams to stdout,
 * tool activity to stderr (or, with --json, every event as a JSON line).
 * Lines typed while a turn runs are steers (see steer.h); Ctrl-C stops the
 * turn (a second one exits with 130); end of input ends the chat.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "approver.h"
#include "cli.h"
#include "cli_loop.h"
#include "context.h"
#include "journal.h"
#include "llm.h"
#include "react.h"
#include "runtime.h"
#include "session.h"
#include "steer.h"
#include "util.h"

static int usage(void) { return cli_usage_fail("chat", NULL); }

/* Keeps what the operator saw of a stopped turn in the history, so the
 * next turn knows the answer was cut. */
static void note_stopped(cJSON *messages, const char *answer) {
  const cJSON *last = cJSON_GetArrayItem(messages, cJSON_GetArraySize(messages) - 1);
  const char *role = cJSON_GetStringValue(cJSON_GetObjectItem(last, "role"));
  if (role && !strcmp(role, "assistant")) return;
  struct sbuf b = {0};
  if (role && !strcmp(role, "user") && answer && *answer) {
    sbuf_puts(&b, answer);
    sbuf_puts(&b, "\n[stopped by the operator]");
  } else {
    sbuf_puts(&b, "[stopped by the operator before answering]");
  }
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "assistant");
  cJSON_AddStringToObject(m, "content", b.s);
  cJSON_AddItemToArray(messages, m);
  sbuf_free(&b);
}

int cli_chat(const struct cli_opts *o, int argc, char **argv) {
  const char *session = NULL;
  struct cli_loop_opts lo = {.who = "chat", .json = o->json, .journal = 1};
  for (int i = 1; i < argc; i++) {
    int r = cli_loop_option(&lo, argc, argv, &i);
    if (r == 2) return 2;
    if (r) continue;
    if (!strcmp(argv[i], "--session") && i + 1 < argc) {
      session = argv[++i];
    } else {
      cli_fail(2, "chat: unknown argument %s", argv[i]);
      return usage();
    }
  }
  int json = lo.json;
  struct err e = {0};
  char name[SESSION_MAX_NAME + 1];
  if (session) {
    if (session_check_name(session, &e)) return cli_fail(2, "chat: %s", e.msg);
    snprintf(name, sizeof name, "%s", session);
  } else {
    session_new_name(name);
  }

  /* Ctrl-C stops the turn (the model call, tools and approval prompts see
   * the flag); a second Ctrl-C before the turn ends exits at once. */
  volatile int *stop = cli_loop_stop_flag();
  struct cli_loop l;
  struct steer *st = NULL;
  struct store *db = NULL;
  cJSON *messages = NULL;
  int held = -1; /* the session's lock: one chat per session */
  /* one for the session: each turn's requests append to the history
   * already printed (llm.h) */
  struct llm_body_cache *bodies = llm_body_cache_new();
  int code = cli_loop_open(&l, o, &lo);
  if (code) goto out;
  struct react_opts base = {.provider = lo.provider, .kind = "chat", .name = name, .mode = lo.mode,
                            .limits = l.limits, .tool_patterns = l.patterns,
                            .body_cache = bodies};
  int exists = 0;
  if (session_hold(l.rt->workspace, name, &held, &e)) {
    code = cli_fail(e.rc == ERR_DENIED ? 1 : 2, "chat: %s", e.msg);
    goto out;
  }
  if (runtime_store(l.rt, &db, &e) || session_load(db, name, &messages, &exists, &e)) {
    code = cli_fail(2, "%s", e.msg);
    goto out;
  }
  /* One run state for the whole conversation: a page read in turn 1 is in
   * the history of turn 2, so its taint must be too (and across processes
   * for a resumed session). */
  struct run_state chat_run = {0};
  chat_run.taint = session_tainted(db, name);
  int tty = isatty(STDIN_FILENO);
  if (!json)
    fprintf(stderr, "luagent chat: session %s (%s, %d messages)%s\n", name,
            exists ? "resumed" : "new", cJSON_GetArraySize(messages),
            tty ? "; type while it works to steer, Ctrl-C stops a turn, Ctrl-D ends" : "");
  /* stdin unbuffered: the steer reader and an approval prompt share it */
  setvbuf(stdin, NULL, _IONBF, 0);
  if (steer_start(STDIN_FILENO, &st, &e)) {
    code = cli_fail(1, "%s", e.msg);
    goto out;
  }
  approver_set_terminal_hook(steer_terminal, st);
  struct sigaction old_sa;
  cli_loop_sigint(1, &old_sa);
  for (;;) {
    *stop = 0;
    if (tty && !json) {
      fputs("you> ", stderr);
      fflush(stderr);
    }
    char *line = NULL;
    int r = steer_next_line(st, stop, &line);
    if (r < 0) { /* Ctrl-C at the prompt */
      if (tty && !json) fputc('\n', stderr);
      code = 130;
      break;
    }
    if (r == 0) {
      if (tty && !json) fputc('\n', stderr);
      break;
    }
    if (!line[0]) {
      free(line);
      continue;
    }
    if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) {
      free(line);
      break;
    }
    struct react_opts ro = base;
    ro.message = line;
    ro.messages = messages;
    ro.steer = steer_drain;
    ro.steer_ud = st;
    struct context_state cst;
    context_prepare(&cst, &l.ccfg, l.rt, l.llm, line, &ro);
    struct call_ctx ctx;
    call_ctx_init(&ctx, l.rt, CALLER_OPERATOR, "chat");
    ctx.run = &chat_run;
    ctx.events = &l.sink;
    ctx.stop = stop;
    l.rd.top_run[0] = 0; /* each turn is a top-level run */
    l.rd.at_line_start = 1;
    struct react_result res;
    struct err te = {0};
    cli_loop_watchdog(&l, ctx.run_id);
    int rc = react_run(&ctx, l.llm, &ro, &res, &te);
    cli_loop_watchdog_end();
    context_state_free(&cst);
    fflush(stdout);
    if (rc == ERR_STOPPED) note_stopped(messages, res.answer);
    if (rc && !json) {
      struct sbuf m = {0}; /* the message may carry the model's text (a refusal) */
      util_escape_text(&m, te.msg, strlen(te.msg), 2000);
      fprintf(stderr, "luagent: run %s %s: %s [%s]\n", ctx.run_id, res.status, m.s ? m.s : "",
              te.code);
      sbuf_free(&m);
    } else if (!json && !res.answer[0])
      fprintf(stderr, "luagent: the model gave an empty answer\n");
    react_result_free(&res);
    free(line);
    clearerr(stdin);
    if (session_save(db, name, messages, &e) ||
        (chat_run.taint && session_set_tainted(db, name, &e))) {
      code = cli_fail(1, "%s", e.msg);
      break;
    }
    if (l.jr) {
      journal_flush(l.jr);
      session_link_run(db, name, ctx.run_id, &e);
    }
  }
  cli_loop_sigint(0, &old_sa);
out:
  session_release(held);
  approver_set_terminal_hook(NULL, NULL);
  steer_free(st);
  cJSON_Delete(messages);
  llm_body_cache_free(bodies);
  cli_loop_close(&l);
  return code;
}
