/* skills_tools.c - see skills_tools.h. */
#include "skills_tools.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define FIND_DEFAULT 5
#define FIND_MAX 10
#define LINE_MAX_BYTES 160 /* a one-line description */

bool skills_tool_matches(const char *pattern, const char *name) {
  return !strcmp(pattern, name) || !fnmatch(pattern, name, 0);
}

bool skills_in_scope(const cJSON *scope, const char *name) {
  if (!scope) return true;
  const cJSON *p;
  cJSON_ArrayForEach(p, scope) {
    if (cJSON_IsString(p) && skills_tool_matches(p->valuestring, name)) return true;
  }
  return false;
}

bool skills_skill_in_scope(const cJSON *scope, const struct skill *k) {
  if (!scope) return true;
  for (size_t i = 0; k->tools[i]; i++)
    if (skills_in_scope(scope, k->tools[i])) return true;
  return false;
}

/* The first line (or sentence) of a description, at most LINE_MAX_BYTES
 * bytes cut on a UTF-8 boundary, with "..." when cut. */
static char *one_line(const char *d) {
  size_t n = strcspn(d, "\r\n");
  const char *dot = strstr(d, ". ");
  if (dot && (size_t)(dot - d) + 1 < n) n = (size_t)(dot - d) + 1;
  bool cut = n > LINE_MAX_BYTES;
  if (cut) {
    n = LINE_MAX_BYTES;
    while (n > 0 && ((unsigned char)d[n] & 0xC0) == 0x80) n--;
  }
  struct sbuf b = {0};
  sbuf_append(&b, d, n);
  if (cut) sbuf_puts(&b, "...");
  return b.s ? sbuf_take(&b) : xstrdup("");
}

static cJSON *tool_names(const cJSON *scope, const struct skill *k) {
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; k->tools[i]; i++)
    if (skills_in_scope(scope, k->tools[i])) cJSON_AddItemToArray(a, cJSON_CreateString(k->tools[i]));
  return a;
}

static int t_find(struct call_ctx *ctx, const struct tool *t, const cJSON *args, cJSON **result,
                  struct err *e) {
  (void)t;
  struct skillset *ss = ctx->rt ? ctx->rt->skills : NULL;
  const char *q = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(args, "query"));
  const cJSON *lim = cJSON_GetObjectItemCaseSensitive(args, "limit");
  size_t limit = cJSON_IsNumber(lim) ? (size_t)lim->valuedouble : FIND_DEFAULT;
  cJSON *res = cJSON_CreateObject();
  cJSON *arr = cJSON_AddArrayToObject(res, "skills");
  size_t count = ss ? skillset_count(ss) : 0;
  if (!count || !q) {
    *result = res;
    return 0;
  }
  /* rank everything, then keep the first `limit` the loop may use */
  struct skill_pick *picks = xcalloc(count, sizeof *picks);
  size_t n = 0;
  int degraded = 0;
  struct err w = {0};
  if (skills_rank(ss, q, SEL_FUSED, picks, count, &n, &degraded, &w)) {
    free(picks);
    cJSON_Delete(res);
    return err_set(e, ERR_FAIL, "tool_error", "skills.find: ranking failed");
  }
  size_t kept = 0;
  for (size_t i = 0; i < n && kept < limit; i++) {
    const struct skill *k = picks[i].skill;
    if (!skills_skill_in_scope(ctx->tool_scope, k)) continue;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", k->name);
    char *line = one_line(k->description ? k->description : "");
    cJSON_AddStringToObject(o, "description", line);
    free(line);
    cJSON_AddItemToObject(o, "tools", tool_names(ctx->tool_scope, k));
    cJSON_AddNumberToObject(o, "confidence",
                            (double)(long)(picks[i].hit.confidence * 1000 + 0.5) / 1000);
    cJSON_AddItemToArray(arr, o);
    kept++;
  }
  free(picks);
  if (degraded) cJSON_AddStringToObject(res, "note", "embeddings unavailable: keyword ranking");
  *result = res;
  return 0;
}

static int t_load(struct call_ctx *ctx, const struct tool *t, const cJSON *args, cJSON **result,
                  struct err *e) {
  (void)t;
  struct skillset *ss = ctx->rt ? ctx->rt->skills : NULL;
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(args, "name"));
  const struct skill *k = ss && name ? skillset_find(ss, name) : NULL;
  if (!k)
    return err_set(e, ERR_NOTFOUND, "not_found",
                   "skills.load: there is no skill named '%s' (skills.find lists them)",
                   name ? name : "");
  if (!skills_skill_in_scope(ctx->tool_scope, k))
    return err_set(e, ERR_DENIED, "not_allowed",
                   "skills.load: skill '%s' is not available here: none of its tools is in this "
                   "run's tool list",
                   k->name);
  cJSON *res = cJSON_CreateObject();
  cJSON_AddStringToObject(res, "skill", k->name);
  cJSON_AddStringToObject(res, "description", k->description ? k->description : "");
  cJSON_AddItemToObject(res, "tools", tool_names(ctx->tool_scope, k));
  cJSON_AddStringToObject(res, "prompt", k->prompt ? k->prompt : "");
  *result = res;
  return 0;
}

static const char FIND_PARAMS[] =
    "{\"type\":\"object\",\"required\":[\"query\"],\"additionalProperties\":false,"
    "\"properties\":{\"query\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4000},"
    "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":10}}}";
static const char LOAD_PARAMS[] =
    "{\"type\":\"object\",\"required\":[\"name\"],\"additionalProperties\":false,"
    "\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":64}}}";

int skills_tools_register(struct runtime *rt, struct err *e) {
  if (!toolreg_find(rt->tools, SKILLS_FIND) &&
      toolreg_add(rt->tools, SKILLS_FIND,
                  "Find workspace skills (tools and instructions) for a task when none of the "
                  "tools offered fits. Returns the best matches with one-line descriptions; "
                  "then call skills.load with the one you want.",
                  FIND_PARAMS, IMPACT_READ, false, t_find, NULL, NULL, "host", NULL, e))
    return ERR_FAIL;
  if (!toolreg_find(rt->tools, SKILLS_LOAD) &&
      toolreg_add(rt->tools, SKILLS_LOAD,
                  "Load a skill by name (from skills.find): returns its instructions, and its "
                  "tools are offered from your next turn on.",
                  LOAD_PARAMS, IMPACT_READ, false, t_load, NULL, NULL, "host", NULL, e))
    return ERR_FAIL;
  return 0;
}
