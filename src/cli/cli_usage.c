/* cli_usage.c - the one table of commands, subcommands and options.
 *
 * `luagent --help`, `luagent CMD --help`, `luagent CMD SUB --help`,
 * `luagent help TOPIC`, every command's usage error and the bash
 * completion script are all made from this table, so they cannot drift
 * apart. A command that gains an option adds it here.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "util.h"

/* One usage line: `luagent CMD ARGS`, then what it does. The first word of
 * ARGS is the subcommand when the command has subcommands (sub = 1);
 * alternatives are written "enable|disable". */
static const struct cli_usage_line lines[] = {
    {"init", 0, "[DIR]",
     "create a working workspace in DIR (default: --workspace or the current folder); never "
     "overwrites"},
    {"run", 0, "FILE.lua [--arg key=value ...]", "run a Lua script in a fresh sandbox"},
    {"test", 0, "[PATH...] [--filter TEXT] [--json | --tap] [--junit FILE] [--timeout S] [-v]",
     "run the workspace's *_test.lua files offline, with a scripted model and fakes"},
    {"check", 0, "[--json]",
     "check the whole workspace: luagent.lua, hooks.lua, skills, automations (exit 1 on a "
     "problem)"},
    {"tools", 1, "list [--json]", "list the tools this workspace has"},
    {"skills", 1, "list [--json]", "list the skills and their tools"},
    {"skills", 1, "check [--json]", "report every problem in skills/ (exit 1 on a problem)"},
    {"skills", 1, "select \"message\" [--explain] [--json] [--top N] [--mode MODE]",
     "which skills a message selects (MODE: fused, keyword or embedding)"},
    {"skills", 1, "select --batch FILE [--top N] [--mode MODE]",
     "rank skills for JSON lines {\"id\",\"query\"} (FILE - = stdin)"},
    {"skills", 1, "call TOOL ['{JSON args}']", "run one tool as the operator"},
    {"ask", 0,
     "\"message\" [--json] [--provider NAME] [--max-iterations N] [--tools PATTERN,...] "
     "[--mode lua|tools] [--no-journal]",
     "one question through the ReAct loop"},
    {"chat", 0,
     "[--session NAME] [--json] [--provider NAME] [--max-iterations N] [--tools PATTERN,...] "
     "[--mode lua|tools] [--no-journal]",
     "a conversation with stop (Ctrl-C) and steer"},
    {"sessions", 1, "list [--json]", "the chat sessions"},
    {"sessions", 1, "show NAME [--json]", "one session's messages"},
    {"sessions", 1, "delete NAME", "delete a session"},
    {"runs", 1, "list [--limit N] [--json]", "the run journal, newest first"},
    {"runs", 1, "show ID [--json]", "replay one run's events"},
    {"runs", 1, "prune --older-than DURATION [--json]", "delete runs older than DURATION (30d)"},
    {"daemon", 0,
     "[--grace 10s] [--kill-grace 2s] [--workers 32] [--keep 5000] [--retain 30d] [--quiet]",
     "run the automations on their triggers until SIGTERM or Ctrl-C"},
    {"daemon", 0, "--console [ADDR] [--allow-remote] [--host NAME] [other daemon options]",
     "the same, serving the operator console too (ADDR default 127.0.0.1:8765)"},
    {"console", 0, "[ADDR] [--allow-remote] [--host NAME] [--quiet]",
     "the operator console in a browser, without running automations"},
    {"automations", 1, "list [--json]", "the automations, their triggers and next fire times"},
    {"automations", 1, "check [--json]",
     "report every automation that does not load or never fires"},
    {"automations", 1, "next NAME [-n N] [--json]", "the next N fire times (default 5), with zone"},
    {"automations", 1, "run NAME [--arg key=value ...] [--wait DURATION]",
     "run an automation now (waiting for a run of it in progress elsewhere)"},
    {"automations", 1, "enable|disable NAME", "turn an automation on or off"},
    {"automations", 1, "history NAME [-n N] [--json]", "an automation's latest runs"},
    {"emit", 0, "NAME [JSON]", "fire an event for `on` automations (no JSON: payload {})"},
    {"cluster", 1, "status [--json]",
     "the cluster's nodes (heartbeat, alive or dead), leases, lag and schema version"},
    {"cluster", 1, "migrate [--force] [--json]",
     "copy this workspace's state.db (schedules, ctx.state, queued events, run journal) into "
     "the cluster database; again copies nothing twice"},
    {"approvals", 1, "list [--all] [--json]", "the approval queue (--all: decided ones too)"},
    {"approvals", 1, "approve ID [--args JSON]", "approve a request (optionally edited arguments)"},
    {"approvals", 1, "deny ID [--reason TEXT]", "deny a request"},
    {"audit", 1, "tail [-n N] [--json] [--local]", "the latest audit rows"},
    {"audit", 1, "head [--json] [--local]", "the chain's head, to pin with verify --expect"},
    {"audit", 1, "verify [--expect HEAD] [--strict] [--json] [--local]",
     "check the tamper-evident chain (--local: this host's SQLite one in cluster mode)"},
    {"audit", 1, "compact --keep N [--local]", "prune old rows under a signed checkpoint"},
    {"audit", 1, "key", "print the audit signing public key"},
    {"secrets", 1, "set NAME", "store a secret (the value is read from stdin)"},
    {"secrets", 1, "list [--json]", "secret names and the origins luagent.lua allows"},
    {"secrets", 1, "rm NAME", "delete a secret"},
    {"mcp", 1, "list [--json]", "the MCP servers of luagent.lua, trusted or not, and their problems"},
    {"mcp", 1, "trust SERVER [--yes] [--json]", "start SERVER, show its tools, pin them (changed tools are held back)"},
    {"mcp", 1, "serve [--tools PATTERN,...] [--http [HOST:]PORT]", "serve the workspace's tools to MCP clients (stdio, or HTTP on loopback)"},
    {"completion", 1, "bash", "print the bash completion script"},
    {"help", 0, "[TOPIC]", "this help, a command's usage, or a topic: exit-codes, json, workspace"},
    {"version", 0, "[--json]", "print the version"},
};
static const size_t nlines = sizeof lines / sizeof lines[0];

/* Topics of `luagent help TOPIC` that are not commands. */
static const struct {
  const char *name;
  const char *text;
} topics[] = {
    {"exit-codes",
     "Exit codes of every command:\n"
     "  0  success\n"
     "  1  the work failed: a check found a problem, a run or tool failed, the store failed\n"
     "  2  usage or configuration error: unknown command or option, a missing file, a\n"
     "     --workspace folder that does not exist, an invalid luagent.lua\n"
     "  3  ask: the model refused        4  ask: the answer was cut at the output limit\n"},
    {"json",
     "--json (before or after the command) prints compact JSON, one value per line:\n"
     "  - a command that answers with one thing (version, check, audit verify, audit head,\n"
     "    runs prune) prints one object;\n"
     "  - a list (tools, skills, runs, automations, approvals, secrets, sessions, audit tail,\n"
     "    skills check, automations next, history) prints one array, [] when empty;\n"
     "  - a stream (ask, chat, runs show) prints one event object per line as it happens:\n"
     "    {\"run_id\":..., \"type\":..., \"data\":...}.\n"
     "Errors still go to stderr as text, and the exit code says what happened.\n"},
    {"workspace",
     "A workspace is a folder: luagent.lua (config), hooks.lua, skills/<name>/, automations/,\n"
     "and .luagent/state.db. --workspace DIR (or -w DIR; default: the current folder) picks it,\n"
     "before or after the command. A folder that does not exist is an error (exit 2) for\n"
     "every command; only `luagent init DIR` creates one.\n"},
};

const struct cli_usage_line *cli_usage_lines(size_t *n) {
  *n = nlines;
  return lines;
}

/* 1 when the first word of args (alternatives split on '|') is sub. */
static int line_is_sub(const struct cli_usage_line *l, const char *sub) {
  size_t len = strcspn(l->args, " ");
  const char *p = l->args, *end = l->args + len;
  while (p < end) {
    size_t w = strcspn(p, "|");
    if (p + w > end) w = (size_t)(end - p);
    if (w == strlen(sub) && !strncmp(p, sub, w)) return 1;
    p += w + 1;
  }
  return 0;
}

int cli_usage_has(const char *cmd, const char *sub) {
  for (size_t i = 0; i < nlines; i++)
    if (!strcmp(lines[i].cmd, cmd) && (!sub || (lines[i].sub && line_is_sub(&lines[i], sub))))
      return 1;
  return 0;
}

int cli_usage_has_subs(const char *cmd) {
  for (size_t i = 0; i < nlines; i++)
    if (!strcmp(lines[i].cmd, cmd)) return lines[i].sub;
  return 0;
}

void cli_usage_print(FILE *f, const char *cmd, const char *sub) {
  int any = 0;
  if (sub && !cli_usage_has(cmd, sub)) sub = NULL; /* unknown: the whole command */
  for (size_t i = 0; i < nlines; i++) {
    if (strcmp(lines[i].cmd, cmd) || (sub && !line_is_sub(&lines[i], sub))) continue;
    fprintf(f, "%s luagent %s %s\n        %s\n", any ? "      " : "usage:", cmd, lines[i].args,
            lines[i].what);
    any = 1;
  }
  if (any)
    fprintf(f, "global options: --workspace DIR, --json, -h/--help (see `luagent help json`)\n");
}

/* What each command is for, in the overview. */
static const struct {
  const char *cmd, *what;
} summaries[] = {
    {"init", "create a working workspace"},
    {"run", "run a Lua script in a fresh sandbox"},
    {"test", "run the workspace's tests offline"},
    {"check", "check the whole workspace (config, hooks, skills, automations)"},
    {"tools", "the tools this workspace has"},
    {"skills", "inspect skills, their problems and skill selection"},
    {"ask", "one question through the ReAct loop"},
    {"chat", "a conversation with stop and steer"},
    {"sessions", "chat sessions"},
    {"runs", "the run journal"},
    {"daemon", "run automations on their triggers"},
    {"console", "the operator console in a browser"},
    {"automations", "list, check, run and schedule automations"},
    {"emit", "fire an event for `on` automations"},
    {"cluster", "several hosts sharing one workspace through PostgreSQL"},
    {"approvals", "the approval queue"},
    {"audit", "the tamper-evident audit chain"},
    {"secrets", "encrypted secrets"},
    {"mcp", "MCP servers' tools, and serving ours to MCP clients"},
    {"completion", "shell completion"},
    {"help", "a command's usage, or a topic"},
    {"version", "print the version"},
};

static const char *summary(const char *cmd) {
  for (size_t i = 0; i < sizeof summaries / sizeof summaries[0]; i++)
    if (!strcmp(summaries[i].cmd, cmd)) return summaries[i].what;
  return "";
}

void cli_usage_all(FILE *f) {
  fprintf(f,
          "usage: luagent [--workspace DIR] [--json] COMMAND [ARGS]\n"
          "       luagent COMMAND --help    a command's usage\n\ncommands:\n");
  for (size_t i = 0; i < nlines; i++) {
    if (i && !strcmp(lines[i - 1].cmd, lines[i].cmd)) continue;
    struct sbuf b = {0};
    sbuf_printf(&b, "%s", lines[i].cmd);
    if (lines[i].sub) { /* "skills list|check|select|call" */
      const char *sep = " ";
      for (size_t k = i; k < nlines && !strcmp(lines[k].cmd, lines[i].cmd); k++) {
        int w = (int)strcspn(lines[k].args, " ");
        if (k > i && !strncmp(lines[k - 1].args, lines[k].args, (size_t)w + 1)) continue;
        sbuf_printf(&b, "%s%.*s", sep, w, lines[k].args);
        sep = "|";
      }
    } else { /* the arguments without the options: "run FILE.lua" */
      const char *opt = strstr(lines[i].args, "[-");
      int w = opt ? (int)(opt - lines[i].args) : (int)strlen(lines[i].args);
      while (w > 0 && lines[i].args[w - 1] == ' ') w--;
      if (w) sbuf_printf(&b, " %.*s", w, lines[i].args);
    }
    if (strlen(b.s) > 34)
      fprintf(f, "  %s\n  %-34s %s\n", b.s, "", summary(lines[i].cmd));
    else
      fprintf(f, "  %-34s %s\n", b.s, summary(lines[i].cmd));
    sbuf_free(&b);
  }
  fprintf(f, "\ntopics: luagent help exit-codes | json | workspace\n");
}

int cli_help_topic(const char *topic) {
  for (size_t i = 0; i < sizeof topics / sizeof topics[0]; i++)
    if (!strcmp(topics[i].name, topic)) {
      fputs(topics[i].text, stdout);
      return 0;
    }
  if (cli_usage_has(topic, NULL)) {
    cli_usage_print(stdout, topic, NULL);
    return 0;
  }
  const char *names[64];
  size_t n = 0;
  for (size_t i = 0; i < nlines && n < 60; i++)
    if (!i || strcmp(lines[i - 1].cmd, lines[i].cmd)) names[n++] = lines[i].cmd;
  for (size_t i = 0; i < sizeof topics / sizeof topics[0]; i++) names[n++] = topics[i].name;
  const char *near = util_nearest(topic, names, n);
  return cli_fail(2, "help: unknown topic '%s'%s%s%s (see `luagent help`)", topic,
                  near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
}

int cli_usage_fail(const char *cmd, const char *fmt, ...) {
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    cli_vfail(2, fmt, ap);
    va_end(ap);
  }
  cli_usage_print(stderr, cmd, NULL);
  return 2;
}

int cli_unknown_sub(const char *cmd, const char *sub) {
  const char *names[32];
  char buf[32][32];
  size_t n = 0;
  for (size_t i = 0; i < nlines && n < 32; i++) {
    if (strcmp(lines[i].cmd, cmd) || !lines[i].sub) continue;
    /* only the first alternative is offered ("enable", not "disable") */
    snprintf(buf[n], sizeof buf[n], "%.*s", (int)strcspn(lines[i].args, " |"), lines[i].args);
    names[n] = buf[n];
    n++;
  }
  const char *near = util_nearest(sub, names, n);
  return cli_usage_fail(cmd, "%s: unknown subcommand '%s'%s%s%s", cmd, sub,
                        near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
}
