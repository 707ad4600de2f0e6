/* cli_mcp.c - `luagent mcp list|trust|serve`.
 *
 *   mcp list [--json]            the servers of luagent.lua, trusted or not
 *   mcp trust SERVER [--yes]     start SERVER, show its tools, pin them
 *   mcp serve [--tools P,...] [--http [HOST:]PORT]
 *                                serve the workspace's tools over stdio, or
 *                                Streamable HTTP on loopback (bearer token)
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "json.h"
#include "mcp.h"
#include "runtime.h"
#include "skills.h"
#include "util.h"

static int usage(void) { return cli_usage_fail("mcp", NULL); }

static int cmd_list(struct runtime *rt, int json) {
  if (json) { /* one JSON value, as every --json */
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < mcp_count(rt->mcp); i++) cJSON_AddItemToArray(arr, mcp_describe(rt->mcp, i));
    cli_print_json(arr);
    cJSON_Delete(arr);
    return 0;
  }
  if (!mcp_count(rt->mcp)) puts("no MCP servers in luagent.lua (mcp = { servers = { ... } })");
  for (size_t i = 0; i < mcp_count(rt->mcp); i++) {
    cJSON *d = mcp_describe(rt->mcp, i);
    const cJSON *probs = cJSON_GetObjectItem(d, "problems");
    char *cmd = cli_safe(cJSON_GetStringValue(cJSON_GetObjectItem(d, "command")), 400);
    printf("%-16s %-10s %3d tool(s)  %s\n", mcp_name(rt->mcp, i),
           cJSON_IsTrue(cJSON_GetObjectItem(d, "trusted")) ? "trusted" : "untrusted",
           (int)cJSON_GetNumberValue(cJSON_GetObjectItem(d, "tools")), cmd);
    free(cmd);
    const cJSON *p;
    cJSON_ArrayForEach(p, probs) { /* a problem quotes the server's names and schemas */
      char *t = cli_safe(p->valuestring, 2000);
      printf("  problem: %s\n", t);
      free(t);
    }
    cJSON_Delete(d);
  }
  return 0;
}

static void print_list(const char *what, const cJSON *names) {
  if (!cJSON_GetArraySize(names)) return;
  printf("%s:", what);
  const cJSON *n;
  cJSON_ArrayForEach(n, names) { /* the server's tool names */
    char *t = cli_safe(n->valuestring, 300);
    printf(" %s", t);
    free(t);
  }
  putchar('\n');
}

static int cmd_trust(struct runtime *rt, const char *name, int yes, int json) {
  struct err e = {0};
  cJSON *tools = NULL, *info = NULL, *changes = NULL;
  if (mcp_fetch(rt->mcp, name, &tools, &info, &changes, &e))
    return cli_fail(e.rc == ERR_NOTFOUND ? 2 : 1, "%s", e.msg);
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "info", cJSON_Duplicate(info, 1));
    cJSON_AddItemToObject(o, "changes", cJSON_Duplicate(changes, 1));
    cJSON_AddItemToObject(o, "tools", cJSON_Duplicate(tools, 1));
    cli_print_json(o);
    cJSON_Delete(o);
  } else {
    const cJSON *si = cJSON_GetObjectItem(info, "serverInfo");
    /* everything below but our own words is the server's text: escaped */
    char *sn = cli_safe(cJSON_GetStringValue(cJSON_GetObjectItem(si, "name")) ?: "?", 200);
    char *sv = cli_safe(cJSON_GetStringValue(cJSON_GetObjectItem(si, "version")) ?: "", 100);
    char *pv = cli_safe(cJSON_GetStringValue(cJSON_GetObjectItem(info, "protocolVersion")) ?: "?", 100);
    printf("MCP server %s: %s %s, protocol %s, %d tool(s)\n", name, sn, sv, pv,
           cJSON_GetArraySize(tools));
    free(sn), free(sv), free(pv);
    puts("Read every description and schema below: they are the server's text, and the model "
         "will read the descriptions.\n");
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
      const cJSON *x = cJSON_GetObjectItem(t, "x-luagent");
      char *tn = cli_safe(cJSON_GetStringValue(cJSON_GetObjectItem(x, "tool")), 400);
      char *pr = cli_safe(cJSON_GetStringValue(cJSON_GetObjectItem(x, "problem")) ?: "", 2000);
      printf("== %s  (impact %s%s)%s%s\n", tn,
             cJSON_GetStringValue(cJSON_GetObjectItem(x, "impact")),
             cJSON_IsTrue(cJSON_GetObjectItem(x, "open_world")) ? ", open world" : "",
             cJSON_GetObjectItem(x, "problem") ? "  PROBLEM: " : "", pr);
      free(tn), free(pr);
      const char *d = cJSON_GetStringValue(cJSON_GetObjectItem(t, "description"));
      struct sbuf b = {0};
      util_escape_output(&b, d ? d : "", d ? strlen(d) : 0, 4000);
      printf("   description: %s\n", b.s ? b.s : "");
      sbuf_free(&b);
      const char *keys[] = {"annotations", "inputSchema", "outputSchema", NULL};
      for (int k = 0; keys[k]; k++) {
        const cJSON *v = cJSON_GetObjectItem(t, keys[k]);
        if (!v) continue;
        char *s = json_print(v, 0);
        util_escape_output(&b, s, strlen(s), 4000);
        printf("   %s: %s\n", keys[k], b.s ? b.s : "");
        sbuf_free(&b);
        free(s);
      }
    }
    putchar('\n');
    print_list("new since the last trust", cJSON_GetObjectItem(changes, "added"));
    print_list("CHANGED since the last trust", cJSON_GetObjectItem(changes, "changed"));
    print_list("removed since the last trust", cJSON_GetObjectItem(changes, "removed"));
  }
  int rc = 0;
  if (!yes) {
    if (!isatty(0)) {
      rc = cli_fail(2, "mcp trust %s: not pinned; review the list above and run again with --yes "
                       "(no terminal to ask)", name);
      goto out;
    }
    printf("Trust these %d tool(s) of %s? [y/N] ", cJSON_GetArraySize(tools), name);
    fflush(stdout);
    char ans[16] = "";
    if (!fgets(ans, sizeof ans, stdin) || (ans[0] != 'y' && ans[0] != 'Y')) {
      puts("not trusted");
      rc = 1;
      goto out;
    }
  }
  if (mcp_trust(rt->mcp, name, tools, info, &e)) {
    rc = cli_fail(1, "%s", e.msg);
    goto out;
  }
  if (!json) printf("trusted: %d tool(s) of %s pinned in .luagent/mcp/%s.trust.json\n",
                    cJSON_GetArraySize(tools), name, name);
out:
  cJSON_Delete(tools);
  cJSON_Delete(info);
  cJSON_Delete(changes);
  return rc;
}

static void serve_log(void *ud, const char *line) {
  (void)ud;
  fprintf(stderr, "luagent mcp: %s\n", line);
}

/* Lua's print and log go to stderr: stdout carries the protocol only. */
static void serve_out(void *ud, const char *stream, const char *text, size_t len) {
  (void)ud, (void)stream;
  fwrite(text, 1, len, stderr);
}

static volatile int serve_stop;
static void on_signal(int sig) {
  (void)sig;
  serve_stop = 1;
}

static int cmd_serve(struct runtime *rt, const char *patterns, const char *http) {
  struct err e = {0};
  rt->out.write = serve_out;
  rt->out.ud = NULL;
  if (skills_ensure(rt, &e)) return cli_fail(2, "%s", e.msg);
  cJSON *pats = patterns ? cli_split_patterns(patterns) : NULL;
  int rc;
  if (http) {
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    rc = mcp_serve_http(rt, http, pats, &serve_stop, serve_log, NULL, &e);
  } else {
    rc = mcp_serve(rt, 0, 1, pats, serve_log, NULL, &e);
  }
  cJSON_Delete(pats);
  if (rc) return cli_fail(!strcmp(e.code, "usage") ? 2 : 1, "%s", e.msg);
  return 0;
}

int cli_mcp(const struct cli_opts *o, int argc, char **argv) {
  if (argc < 2) return usage();
  const char *sub = argv[1], *server = NULL, *patterns = NULL, *http = NULL;
  int yes = 0, json = o->json;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--yes") || !strcmp(argv[i], "-y")) yes = 1;
    else if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--tools") && i + 1 < argc) patterns = argv[++i];
    else if (!strncmp(argv[i], "--tools=", 8)) patterns = argv[i] + 8;
    else if (!strcmp(argv[i], "--http") && i + 1 < argc) http = argv[++i];
    else if (!strncmp(argv[i], "--http=", 7)) http = argv[i] + 7;
    else if (argv[i][0] != '-' && !server) server = argv[i];
    else return usage();
  }
  int is_list = !strcmp(sub, "list"), is_trust = !strcmp(sub, "trust"), is_serve = !strcmp(sub, "serve");
  if (!is_list && !is_trust && !is_serve) return cli_unknown_sub("mcp", sub);
  if (is_trust != (server != NULL)) return usage();
  if ((patterns || http) && !is_serve) return usage();
  struct err e = {0};
  struct runtime *rt;
  if (runtime_open(o->workspace, &rt, &e)) return cli_fail(2, "%s", e.msg);
  int rc = is_list ? cmd_list(rt, json) : is_trust ? cmd_trust(rt, server, yes, json) : cmd_serve(rt, patterns, http);
  runtime_free(rt);
  return rc;
}
