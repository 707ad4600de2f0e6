/* cli_check.c - `luagent check [--json]`: the whole workspace at once:
 * luagent.lua, hooks.lua, skills and automations. Nothing runs but the
 * files' top-level code, in the same sandboxes the loaders use. Exit 1 when
 * any problem is an error; warnings (a schedule that never fires) are
 * shown but do not fail the check. */
#include "cli_check.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "hooks.h"
#include "runtime.h"
#include "skills.h"
#include "util.h"

int cli_check(const struct cli_opts *o, int argc, char **argv) {
  int json = o->json;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = 1;
    else
      return cli_usage_fail("check", "check: unexpected argument '%s'", argv[i]);
  }
  cJSON *problems = cJSON_CreateArray();
  struct err e = {0};
  int config_ok = 1, nhooks = 0;
  size_t nskills = 0, ntools = 0, nauto = 0;

  struct config *cfg = NULL;
  if (config_load(o->workspace, &cfg, &e)) {
    cli_problem_add(problems, "config", e.msg, "luagent.lua", "error");
    config_ok = 0;
  }
  config_free(cfg);

  struct hooks *h = NULL;
  memset(&e, 0, sizeof e);
  if (hooks_load(o->workspace, &h, &e)) {
    cli_problem_add(problems, "hooks", e.msg, "hooks.lua", "error");
    config_ok = 0;
  } else if (h) {
    nhooks = hooks_has_before(h) + hooks_has_after(h);
  }
  hooks_free(h);

  /* Skills need the runtime, which needs a valid config (providers,
   * selection, ...); the rest of the config is checked on the way. */
  int skills_checked = 0;
  if (config_ok) {
    struct runtime *rt = NULL;
    memset(&e, 0, sizeof e);
    if (runtime_open(o->workspace, &rt, &e) || skills_ensure(rt, &e)) {
      cli_problem_add(problems, "config", e.msg, "luagent.lua", "error");
    } else {
      skills_checked = 1;
      struct skillset *ss = rt->skills;
      nskills = skillset_count(ss);
      for (size_t i = 0; i < nskills; i++)
        for (size_t n = 0; skillset_at(ss, i)->tools[n]; n++) ntools++;
      for (size_t i = 0; i < skillset_nproblems(ss); i++) {
        const struct skill_problem *p = skillset_problem(ss, i);
        char msg[2600];
        if (p->line)
          snprintf(msg, sizeof msg, "%s:%d: %s", p->file, p->line, p->msg);
        else
          snprintf(msg, sizeof msg, "%s: %s", p->file, p->msg);
        cli_problem_add(problems, "skill", msg, p->file, "error");
      }
      cJSON *kept = cli_skills_kept(o->workspace, ss);
      const cJSON *k;
      cJSON_ArrayForEach(k, kept) {
        cli_problem_add(problems, "skill", cJSON_GetStringValue(cJSON_GetObjectItem(k, "message")),
                        cJSON_GetStringValue(cJSON_GetObjectItem(k, "file")), "warning");
      }
      cJSON_Delete(kept);
    }
    runtime_free(rt);
  }
  cli_automations_problems(o->workspace, problems, &nauto);

  size_t errors = cli_problems_count(problems, "error");
  size_t warnings = (size_t)cJSON_GetArraySize(problems) - errors;
  if (json) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddBoolToObject(j, "ok", errors == 0);
    cJSON_AddNumberToObject(j, "errors", (double)errors);
    cJSON_AddNumberToObject(j, "warnings", (double)warnings);
    if (skills_checked)
      cJSON_AddNumberToObject(j, "skills", (double)nskills);
    else
      cJSON_AddNullToObject(j, "skills");
    cJSON_AddNumberToObject(j, "tools", (double)ntools);
    cJSON_AddNumberToObject(j, "automations", (double)nauto);
    cJSON_AddNumberToObject(j, "hooks", nhooks);
    cJSON_AddItemToObject(j, "problems", problems);
    cli_print_json(j);
    cJSON_Delete(j);
  } else {
    const cJSON *p;
    cJSON_ArrayForEach(p, problems) cli_problem_print(p);
    if (!skills_checked) printf("skills: not checked, luagent.lua or hooks.lua must load first\n");
    printf(
        "%s: %zu skill(s) with %zu tool(s), %zu automation(s), %d hook(s); %zu problem(s), "
        "%zu warning(s)\n",
        errors ? "check failed" : "check passed", nskills, ntools, nauto, nhooks, errors, warnings);
    cJSON_Delete(problems);
  }
  return errors ? 1 : 0;
}
