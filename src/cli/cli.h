/* cli.h - the command-line commands. main.c only dispatches to these.
 *
 * Each command gets the runtime options and its own argv (argv[0] is the
 * command name). Exit codes: 0 success, 1 the work failed, 2 usage or
 * configuration error. main.c has already answered -h/--help and refused a
 * --workspace folder that does not exist.
 *
 * --json output (`luagent help json`): compact JSON, one value per line; a
 * list is one array ([] when empty), a single answer one object, a stream
 * (ask, chat, runs show) one event object per line.
 */
#include <stddef.h>
#include <stdio.h>

struct llm_client;
struct cJSON;

#ifndef LUAGENT_CLI_H
#define LUAGENT_CLI_H

#include <stdarg.h>

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
int cli_cluster(const struct cli_opts *o, int argc, char **argv);
int cli_chat(const struct cli_opts *o, int argc, char **argv);
int cli_sessions(const struct cli_opts *o, int argc, char **argv);
int cli_mcp(const struct cli_opts *o, int argc, char **argv);
int cli_test(const struct cli_opts *o, int argc, char **argv);
int cli_init(const struct cli_opts *o, int argc, char **argv);
int cli_check(const struct cli_opts *o, int argc, char **argv);
int cli_completion(const struct cli_opts *o, int argc, char **argv);

/* --- the usage table (cli_usage.c) ------------------------------------- */
struct cli_usage_line {
  const char *cmd;  /* "automations" */
  int sub;          /* 1: the first word of args is a subcommand */
  const char *args; /* "next NAME [-n N] [--json]" */
  const char *what; /* one line saying what it does */
};
/* The whole table (borrowed, static). */
const struct cli_usage_line *cli_usage_lines(size_t *n);
/* 1 when cmd is in the table (and, with sub, has that subcommand). */
int cli_usage_has(const char *cmd, const char *sub);
/* 1 when cmd takes a subcommand. */
int cli_usage_has_subs(const char *cmd);
/* Prints cmd's usage lines to f; with sub, only that subcommand's (all of
 * them when sub is NULL or unknown). */
void cli_usage_print(FILE *f, const char *cmd, const char *sub);
/* The overview: every command, one line each. */
void cli_usage_all(FILE *f);
/* `luagent help TOPIC`: a command's usage or a topic (exit-codes, json,
 * workspace) on stdout; 0, or 2 naming an unknown topic. */
int cli_help_topic(const char *topic);
/* Prints "luagent: MSG" (fmt may be NULL) and cmd's usage to stderr;
 * returns 2. */
int cli_usage_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "CMD: unknown subcommand 'SUB'; did you mean ...?" and the usage; 2. */
int cli_unknown_sub(const char *cmd, const char *sub);

/* Prints j as one compact JSON line on stdout (the --json rule). Does not
 * take ownership. */
void cli_print_json(const struct cJSON *j);
/* s made safe for a terminal (util_escape_text: controls, ESC, C1 and bidi
 * characters escaped, cut at max bytes); for text a server or a script
 * controls. The caller frees it. */
char *cli_safe(const char *s, size_t max);
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

/* "fs.*,notes.add" -> a JSON array of patterns (caller frees). */
struct cJSON *cli_split_patterns(const char *csv);
/* 1 if the client has a provider with this name. */
int cli_has_provider(struct llm_client *llm, const char *name);

/* Shared helper: prints "luagent: <msg>" to stderr and returns code. */
int cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with a va_list. */
int cli_vfail(int code, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

#endif
