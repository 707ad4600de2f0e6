/* cli_tools.c - `luagent tools list [--json]`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "skills.h"
#include "runtime.h"

int cli_tools(const struct cli_opts *o, int argc, char **argv) {
  int json = o->json;
  const char *sub = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!sub) sub = argv[i];
    else if (argv[i][0] == '-') return cli_usage_fail("tools", "tools: unknown option %s", argv[i]);
    else return cli_usage_fail("tools", "tools: unexpected argument '%s'", argv[i]);
  }
  if (sub && strcmp(sub, "list") != 0) return cli_unknown_sub("tools", sub);
  struct err e = {0};
  struct runtime *rt;
  if (runtime_open(o->workspace, &rt, &e)) return cli_fail(2, "%s", e.msg);
  if (skills_ensure(rt, &e)) { /* skill tools are listed too */
    runtime_free(rt);
    return cli_fail(2, "%s", e.msg);
  }
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; i < toolreg_count(rt->tools); i++) {
    const struct tool *t = toolreg_at(rt->tools, i);
    if (json) {
      cJSON *j = cJSON_CreateObject();
      cJSON_AddStringToObject(j, "name", t->name);
      cJSON_AddStringToObject(j, "description", t->description);
      cJSON_AddStringToObject(j, "impact", impact_name(t->impact));
      cJSON_AddBoolToObject(j, "open_world", t->open_world);
      cJSON_AddStringToObject(j, "source", t->source);
      cJSON_AddItemToObject(j, "params", cJSON_Duplicate(t->params, 1));
      cJSON_AddItemToArray(arr, j);
    } else {
      /* an MCP tool's name and description are its server's text */
      char *n = cli_safe(t->name, 300), *d = cli_safe(t->description, 4000);
      printf("%-24s %-8s %s%s\n", n, impact_name(t->impact), d, t->open_world ? " [open world]" : "");
      free(n), free(d);
    }
  }
  if (json) cli_print_json(arr);
  cJSON_Delete(arr);
  runtime_free(rt);
  return 0;
}
