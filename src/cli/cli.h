/* cli.h - the command-line commands. main.c only dispatches to these.
 *
 * Each command gets the runtime options and its own argv (argv[0] is the
 * command name). Exit codes: 0 success, 1 the work failed, 2 usage or
 * configuration error.
 */
#ifndef LUAGENT_CLI_H
#define LUAGENT_CLI_H

struct cli_opts {
  const char *workspace;  /* --workspace DIR, default "." */
  int json;               /* --json where supported */
  int verbose;
};

int cli_run(const struct cli_opts *o, int argc, char **argv);
int cli_tools(const struct cli_opts *o, int argc, char **argv);
int cli_skills(const struct cli_opts *o, int argc, char **argv);
int cli_audit(const struct cli_opts *o, int argc, char **argv);
int cli_approvals(const struct cli_opts *o, int argc, char **argv);
int cli_secrets(const struct cli_opts *o, int argc, char **argv);
int cli_ask(const struct cli_opts *o, int argc, char **argv);
int cli_runs(const struct cli_opts *o, int argc, char **argv);
int cli_daemon(const struct cli_opts *o, int argc, char **argv);
int cli_automations(const struct cli_opts *o, int argc, char **argv);
int cli_emit(const struct cli_opts *o, int argc, char **argv);
int cli_chat(const struct cli_opts *o, int argc, char **argv);
int cli_sessions(const struct cli_opts *o, int argc, char **argv);
int cli_console(const struct cli_opts *o, int argc, char **argv);

/* The console options `console` and `daemon --console` share. */
#define CLI_CONSOLE_MAX_HOSTS 8
struct cli_console_opts {
  int allow_remote;                            /* --allow-remote */
  const char *hosts[CLI_CONSOLE_MAX_HOSTS + 1]; /* --host NAME ..., NULL-terminated */
  int nhosts;
};
/* Takes argv[*i] if it is --allow-remote or --host NAME. Returns 1 if
 * taken, 0 if not ours, or 2 after printing what was wrong. */
int cli_console_option(struct cli_console_opts *co, int argc, char **argv, int *i);

struct llm_client;
struct cJSON;
/* "fs.*,notes.add" -> a JSON array of patterns (caller frees). */
struct cJSON *cli_split_patterns(const char *csv);
/* 1 if the client has a provider with this name. */
int cli_has_provider(struct llm_client *llm, const char *name);

/* Shared helper: prints "luagent: <msg>" to stderr and returns code. */
int cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
