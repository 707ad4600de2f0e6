/* main.c - luagent entry point: parses global options and dispatches. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "sandbox.h"

static const struct {
  const char *name;
  int (*fn)(const struct cli_opts *, int, char **);
  const char *help;
} commands[] = {
    {"run", cli_run, "run FILE.lua [--arg k=v ...]     run a Lua script in a fresh sandbox"},
    {"tools", cli_tools, "tools list [--json]              list the tools this workspace has"},
    {"skills", cli_skills, "skills list|check|select ...     inspect skills and skill selection"},
    {"ask", cli_ask, "ask \"message\" [--json]           one question through the ReAct loop"},
    {"chat", cli_chat, "chat [--session NAME]            a conversation with stop and steer"},
    {"sessions", cli_sessions, "sessions list|show|delete NAME   chat sessions"},
    {"runs", cli_runs, "runs list|show ID                the run journal"},
    {"daemon", cli_daemon, "daemon [--console [ADDR]]        run automations on their triggers"},
    {"console", cli_console, "console [ADDR]                   the operator console in a browser"},
    {"automations", cli_automations, "automations list|run|...         list|run|enable|disable|history NAME"},
    {"emit", cli_emit, "emit NAME [JSON]                 fire an event for `on` automations"},
    {"approvals", cli_approvals, "approvals list|approve|deny ID   the approval queue"},
    {"audit", cli_audit, "audit tail|verify                the tamper-evident audit chain"},
    {"secrets", cli_secrets, "secrets set|list|rm NAME         encrypted secrets"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: luagent [--workspace DIR] [--json] COMMAND [ARGS]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %s\n", commands[i].help);
  fprintf(f, "  version                          print the version\n");
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
    if (!strcmp(argv[i], "--workspace") || !strcmp(argv[i], "-w")) {
      if (i + 1 >= argc) return cli_fail(2, "--workspace needs a directory");
      o.workspace = argv[++i];
    } else if (!strncmp(argv[i], "--workspace=", 12)) {
      o.workspace = argv[i] + 12;
    } else if (!strcmp(argv[i], "--json")) {
      o.json = 1;
    } else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) {
      o.verbose = 1;
    } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--version")) {
      puts("luagent " LUAGENT_VERSION);
      return 0;
    } else {
      usage(stderr);
      return cli_fail(2, "unknown option %s", argv[i]);
    }
  }
  if (i >= argc) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[i];
  if (!strcmp(cmd, "version")) {
    puts("luagent " LUAGENT_VERSION);
    return 0;
  }
  if (!strcmp(cmd, "help")) {
    usage(stdout);
    return 0;
  }
  /* Every command that may run user Lua is watched for a C call stuck past
   * its deadline; the daemon supervises its own workers instead. */
  if (strcmp(cmd, "daemon") && strcmp(cmd, "console")) watchdog_enable(1);
  for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++)
    if (!strcmp(cmd, commands[k].name)) return commands[k].fn(&o, argc - i, argv + i);
  usage(stderr);
  return cli_fail(2, "unknown command '%s'", cmd);
}
