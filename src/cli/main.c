/* main.c - luagent entry point: global options, --help, the workspace rule,
 * then dispatch. Usage texts live in cli_usage.c. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "audit_queue.h"
#include "cli.h"
#include "sandbox.h"
#include "util.h"

static const struct {
  const char *name;
  int (*fn)(const struct cli_opts *, int, char **);
} commands[] = {
    {"init", cli_init},         {"run", cli_run},           {"check", cli_check},
    {"tools", cli_tools},
    {"skills", cli_skills},     {"ask", cli_ask},           {"chat", cli_chat},
    {"sessions", cli_sessions}, {"runs", cli_runs},         {"daemon", cli_daemon},     {"console", cli_console},
    {"automations", cli_automations}, {"emit", cli_emit}, {"cluster", cli_cluster},   {"approvals", cli_approvals},
    {"audit", cli_audit},       {"secrets", cli_secrets},   {"completion", cli_completion},
    {"test", cli_test},         {"mcp", cli_mcp},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

/* Commands that do not read a workspace, so a missing --workspace folder
 * is not their business: `init` creates one; help and version read none. */
static int needs_workspace(const char *cmd) {
  return strcmp(cmd, "init") && strcmp(cmd, "help") && strcmp(cmd, "version");
}

/* The one workspace rule: the folder must exist (only `init` creates one).
 * Without this, commands that open the store would create DIR/.luagent/
 * under a mistyped name and report on an empty workspace. */
static int check_workspace(const char *ws) {
  struct stat st;
  if (stat(ws, &st) != 0) {
    if (errno == ENOENT)
      return cli_fail(2, "workspace '%s' does not exist (create one with `luagent init %s`)", ws,
                      ws);
    return cli_fail(2, "workspace '%s': %s", ws, strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) return cli_fail(2, "workspace '%s' is not a folder", ws);
  return 0;
}

static int version(int json) {
  if (!json) {
    puts("luagent " LUAGENT_VERSION);
    return 0;
  }
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "version", LUAGENT_VERSION);
  cli_print_json(j);
  cJSON_Delete(j);
  return 0;
}

static int unknown_command(const char *cmd) {
  const char *names[NCOMMANDS + 2];
  size_t n = 0;
  for (size_t k = 0; k < NCOMMANDS; k++) names[n++] = commands[k].name;
  names[n++] = "help";
  names[n++] = "version";
  const char *near = util_nearest(cmd, names, n);
  return cli_fail(2, "unknown command '%s'%s%s%s (see `luagent help`)", cmd,
                  near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
}

int main(int argc, char **argv) {
  struct cli_opts o = {.workspace = "."};
  /* --workspace may stand anywhere (`luagent daemon --workspace DIR`, as
   * the docs show it): take it out before the command sees its argv. */
  int n = 1;
  for (int k = 1; k < argc; k++) {
    if (!strcmp(argv[k], "--")) {
      while (k < argc) argv[n++] = argv[k++];
      break;
    }
    if (!strcmp(argv[k], "--workspace") || !strcmp(argv[k], "-w")) {
      if (k + 1 >= argc) return cli_fail(2, "--workspace needs a directory");
      o.workspace = argv[++k];
    } else if (!strncmp(argv[k], "--workspace=", 12)) {
      o.workspace = argv[k] + 12;
    } else {
      argv[n++] = argv[k];
    }
  }
  argc = n;
  argv[argc] = NULL;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "--json")) {
      o.json = 1;
    } else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) {
      o.verbose = 1;
    } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      cli_usage_all(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--version")) {
      return version(o.json);
    } else {
      return cli_fail(2, "unknown option '%s' (see `luagent help`)", argv[i]);
    }
  }
  if (i >= argc) {
    cli_usage_all(stderr);
    return 2;
  }
  const char *cmd = argv[i];
  int cargc = argc - i;
  char **cargv = argv + i;
  if (!strcmp(cmd, "help")) {
    if (cargc < 2) {
      cli_usage_all(stdout);
      return 0;
    }
    if (cargc == 3 && cli_usage_has(cargv[1], cargv[2])) { /* help automations next */
      cli_usage_print(stdout, cargv[1], cargv[2]);
      return 0;
    }
    if (cargc > 2) return cli_fail(2, "help: one topic at a time (see `luagent help`)");
    return cli_help_topic(cargv[1]);
  }
  size_t k = 0;
  while (k < NCOMMANDS && strcmp(cmd, commands[k].name)) k++;
  if (k == NCOMMANDS && strcmp(cmd, "version")) return unknown_command(cmd);
  /* -h/--help anywhere among the command's arguments (before a `--`):
   * that command's (or subcommand's) usage on stdout, exit 0. */
  for (int a = 1; a < cargc && strcmp(cargv[a], "--"); a++) {
    if (strcmp(cargv[a], "-h") && strcmp(cargv[a], "--help")) continue;
    const char *sub = cli_usage_has_subs(cmd) && a > 1 ? cargv[1] : NULL;
    cli_usage_print(stdout, cmd, sub);
    return 0;
  }
  if (!strcmp(cmd, "version")) {
    for (int a = 1; a < cargc; a++) {
      if (!strcmp(cargv[a], "--json")) o.json = 1;
      else return cli_usage_fail("version", "version: unexpected argument '%s'", cargv[a]);
    }
    return version(o.json);
  }
  if (needs_workspace(cmd) && check_workspace(o.workspace)) return 2;
  /* Every command that may run user Lua is watched for a C call stuck past
   * its deadline; the daemon supervises its own workers instead. */
  if (strcmp(cmd, "daemon") && strcmp(cmd, "console")) watchdog_enable(1);
  int rc = commands[k].fn(&o, cargc, cargv);
  /* Calls ran whose audit rows could not be written (a full disk, a
   * database that went read-only): the chain lacks them, so the command
   * did not succeed, whatever it did (red team 8: it exited 0). */
  size_t lost = audit_queue_lost();
  if (lost && rc == 0) {
    fprintf(stderr, "luagent: %zu audit row(s) were not written (above): exit status 1\n", lost);
    rc = 1;
  }
  return rc;
}
