/* cli_skills.c - `luagent skills list|check|select`.
 *
 *   skills list [--json]                       name, tools, source file
 *   skills check [--json]                      every problem with file:line; exit 1 if any
 *   skills select "message" [--explain] [--json] [--top N] [--mode fused|keyword|embedding]
 *   skills select --batch FILE [--top N] [--mode ...]
 *       JSON lines {"id", "query"} in, {"id", "ranked": [names]} out (FILE "-" = stdin)
 *   skills call TOOL ['{"json": "args"}']      run one tool as the operator (through tool_call)
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_check.h"
#include "daemon.h"
#include "json.h"
#include "runtime.h"
#include "skills.h"
#include "util.h"

static void print_json(cJSON *j) {
  char *s = json_print(j, 0);
  puts(s);
  free(s);
  cJSON_Delete(j);
}

static cJSON *list_json(char *const *l) {
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; l && l[i]; i++) cJSON_AddItemToArray(a, cJSON_CreateString(l[i]));
  return a;
}

static void warn_once(const char *msg, int *shown) {
  if (!msg || (shown && *shown)) return;
  fprintf(stderr, "luagent: warning: %s\n", msg);
  if (shown) *shown = 1;
}

static int cmd_list(struct skillset *ss, int json) {
  cJSON *arr = cJSON_CreateArray();
  for (size_t i = 0; i < skillset_count(ss); i++) {
    const struct skill *k = skillset_at(ss, i);
    if (json) {
      cJSON *j = cJSON_CreateObject();
      cJSON_AddStringToObject(j, "name", k->name);
      cJSON_AddStringToObject(j, "description", k->description);
      cJSON_AddItemToObject(j, "tools", list_json(k->tools));
      cJSON_AddStringToObject(j, "source", k->source);
      if (k->md_source) cJSON_AddStringToObject(j, "skill_md", k->md_source);
      cJSON_AddBoolToObject(j, "always", k->always);
      cJSON_AddItemToObject(j, "keywords", list_json(k->keywords));
      cJSON_AddStringToObject(j, "prompt", k->prompt);
      cJSON_AddItemToArray(arr, j);
    } else {
      struct sbuf t = {0};
      for (size_t n = 0; k->tools[n]; n++) sbuf_printf(&t, "%s%s", n ? "," : "", k->tools[n]);
      printf("%-24s %-40s %s%s\n", k->name, t.s ? t.s : "-", k->source,
             k->always ? " [always]" : "");
      sbuf_free(&t);
    }
  }
  if (json) cli_print_json(arr);
  cJSON_Delete(arr);
  if (skillset_nproblems(ss))
    fprintf(stderr, "luagent: %zu problem(s) in skills; see `luagent skills check`\n",
            skillset_nproblems(ss));
  return 0;
}

/* The skills a daemon runs in a kept last good version (daemon_skills.c)
 * while skills/<folder> still does not load here: a JSON array of
 * {"file": "skills/<folder>", "message": ...}; [] when there are none. */
cJSON *cli_skills_kept(const char *workspace, const struct skillset *ss) {
  cJSON *out = cJSON_CreateArray(), *kept = NULL;
  struct err e = {0};
  if (daemon_skills_kept(workspace, &kept, &e)) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "file", ".luagent/state.db");
    cJSON_AddStringToObject(j, "message", e.msg);
    cJSON_AddItemToArray(out, j);
    return out;
  }
  const cJSON *it;
  cJSON_ArrayForEach(it, kept) {
    char dir[300];
    snprintf(dir, sizeof dir, "skills/%s/", it->string);
    int broken = 0;
    for (size_t i = 0; i < skillset_nproblems(ss); i++) {
      const struct skill_problem *p = skillset_problem(ss, i);
      broken |= p->fatal && !strncmp(p->file, dir, strlen(dir));
    }
    if (!broken) continue; /* fixed: the daemon takes it at its next reload */
    char msg[700];
    snprintf(msg, sizeof msg,
             "the daemon runs the last good version it kept of this skill, not the file here (which "
             "does not load); fix it, or delete skill.lua to remove the skill");
    cJSON *j = cJSON_CreateObject();
    dir[strlen(dir) - 1] = '\0';
    cJSON_AddStringToObject(j, "file", dir);
    cJSON_AddStringToObject(j, "message", msg);
    cJSON_AddItemToArray(out, j);
  }
  cJSON_Delete(kept);
  return out;
}

static int cmd_check(const char *workspace, struct skillset *ss, int json) {
  size_t np = skillset_nproblems(ss);
  cJSON *arr = cJSON_CreateArray(); /* [] when all is well: never nothing */
  for (size_t i = 0; i < np; i++) {
    const struct skill_problem *p = skillset_problem(ss, i);
    if (json) {
      cJSON *j = cJSON_CreateObject();
      cJSON_AddStringToObject(j, "file", p->file);
      cJSON_AddNumberToObject(j, "line", p->line);
      cJSON_AddStringToObject(j, "message", p->msg);
      cJSON_AddBoolToObject(j, "fatal", p->fatal);
      cJSON_AddItemToArray(arr, j);
    } else {
      struct sbuf m = {0};
      util_escape_text(&m, p->msg, strlen(p->msg), 2000);
      if (p->line)
        printf("%s:%d: %s%s\n", p->file, p->line, m.s ? m.s : "", p->fatal ? " (not loaded)" : "");
      else
        printf("%s: %s%s\n", p->file, m.s ? m.s : "", p->fatal ? " (not loaded)" : "");
      sbuf_free(&m);
    }
  }
  size_t nh = skillset_nhints(ss);
  for (size_t i = 0; i < nh; i++) { /* advice: listed, never a failure */
    const struct skill_problem *p = skillset_hint(ss, i);
    if (json) {
      cJSON *j = cJSON_CreateObject();
      cJSON_AddStringToObject(j, "file", p->file);
      cJSON_AddNumberToObject(j, "line", p->line);
      cJSON_AddStringToObject(j, "message", p->msg);
      cJSON_AddBoolToObject(j, "fatal", false);
      cJSON_AddBoolToObject(j, "hint", true);
      cJSON_AddItemToArray(arr, j);
    } else if (p->line) {
      printf("%s:%d: hint: %s\n", p->file, p->line, p->msg);
    } else {
      printf("%s: hint: %s\n", p->file, p->msg);
    }
  }
  cJSON *kept = cli_skills_kept(workspace, ss);
  const cJSON *kn;
  cJSON_ArrayForEach(kn, kept) {
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(kn, "file"));
    const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(kn, "message"));
    if (json) {
      cJSON *j = cJSON_CreateObject();
      cJSON_AddStringToObject(j, "file", file);
      cJSON_AddNumberToObject(j, "line", 0);
      cJSON_AddStringToObject(j, "message", msg);
      cJSON_AddBoolToObject(j, "fatal", false);
      cJSON_AddBoolToObject(j, "daemon_kept", true);
      cJSON_AddItemToArray(arr, j);
    } else {
      struct sbuf m = {0};
      util_escape_text(&m, msg, strlen(msg), 2000);
      printf("%s: %s\n", file, m.s ? m.s : "");
      sbuf_free(&m);
    }
  }
  cJSON_Delete(kept);
  if (json) cli_print_json(arr);
  cJSON_Delete(arr);
  if (!json) {
    size_t ntools = 0;
    for (size_t i = 0; i < skillset_count(ss); i++) {
      const struct skill *k = skillset_at(ss, i);
      for (size_t n = 0; k->tools[n]; n++) ntools++;
    }
    printf("%zu skill(s) loaded with %zu tool(s); %zu problem(s), %zu hint(s)\n",
           skillset_count(ss), ntools, np, nh);
  }
  return np ? 1 : 0;
}

static cJSON *hit_json(const struct skill_pick *p, int selected) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "name", p->skill->name);
  cJSON_AddNumberToObject(j, "bm25", p->hit.bm25);
  cJSON_AddNumberToObject(j, "embed", p->hit.cosine);
  cJSON_AddNumberToObject(j, "fused", p->hit.fused);
  cJSON_AddNumberToObject(j, "confidence", p->hit.confidence);
  cJSON_AddNumberToObject(j, "coverage", p->hit.coverage);
  cJSON_AddNumberToObject(j, "embed_z", p->hit.cos_z);
  cJSON_AddNumberToObject(j, "margin", p->hit.margin);
  cJSON_AddNumberToObject(j, "rank_bm25", p->hit.rank_bm25);
  cJSON_AddNumberToObject(j, "rank_embed", p->hit.rank_embed);
  cJSON_AddBoolToObject(j, "keyword_hit", p->hit.keyword_hit);
  cJSON_AddBoolToObject(j, "always", p->hit.always);
  cJSON_AddBoolToObject(j, "selected", selected);
  return j;
}

static int picked(const struct skill_pick *sel, size_t n, const struct skill *k) {
  for (size_t i = 0; i < n; i++)
    if (sel[i].skill == k) return 1;
  return 0;
}

static int cmd_select(struct skillset *ss, const char *msg, int explain, int json, size_t top,
                      enum sel_mode mode) {
  const struct sel_params *p = skillset_params(ss);
  size_t max = skillset_count(ss) + 1;
  struct skill_pick *sel = xcalloc(max, sizeof *sel);
  struct skill_pick *rank = xcalloc(top ? top : 1, sizeof *rank);
  size_t ns = 0, nr = 0;
  int degraded = 0, shown = 0;
  struct err w;
  memset(&w, 0, sizeof w);
  warn_once(skillset_warning(ss), &shown);
  skills_select(ss, msg, sel, max, &ns, &degraded, &w);
  if (degraded) warn_once(w.msg, &shown);
  if (explain || json) skills_rank(ss, msg, mode, rank, top, &nr, &degraded, &w);
  if (json) {
    cJSON *j = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(j, "selected");
    for (size_t i = 0; i < ns; i++) cJSON_AddItemToArray(a, hit_json(&sel[i], 1));
    cJSON *r = cJSON_AddArrayToObject(j, "ranked");
    for (size_t i = 0; i < nr; i++)
      cJSON_AddItemToArray(r, hit_json(&rank[i], picked(sel, ns, rank[i].skill)));
    cJSON_AddBoolToObject(j, "embeddings",
                          selector_has_embeddings(skillset_selector(ss)) && !degraded);
    const char *wm = degraded ? w.msg : skillset_warning(ss);
    if (wm) cJSON_AddStringToObject(j, "warning", wm);
    print_json(j);
  } else if (explain) {
    printf("selected: ");
    if (!ns) printf("(none)");
    for (size_t i = 0; i < ns; i++) printf("%s%s", i ? ", " : "", sel[i].skill->name);
    printf("\n\n%-4s %-28s %8s %5s %7s %5s %8s %6s  %s\n", "rank", "skill", "bm25", "#", "embed",
           "#", "fused", "conf", "verdict");
    for (size_t i = 0; i < nr; i++) {
      const struct skill_pick *k = &rank[i];
      const char *verdict;
      int is = picked(sel, ns, k->skill);
      if (k->hit.always)
        verdict = "selected (always)";
      else if (is)
        verdict = "selected";
      else if (k->hit.confidence < p->min_confidence)
        verdict = "below min_confidence";
      else
        verdict = "beyond max_skills";
      char rb[16], re[16];
      snprintf(rb, sizeof rb, "%d", k->hit.rank_bm25);
      snprintf(re, sizeof re, "%d", k->hit.rank_embed);
      printf("%-4zu %-28s %8.3f %5s %7.3f %5s %8.5f %6.3f  %s%s\n", i + 1, k->skill->name,
             k->hit.bm25, k->hit.rank_bm25 ? rb : "-", k->hit.cosine, k->hit.rank_embed ? re : "-",
             k->hit.fused, k->hit.confidence, verdict, k->hit.keyword_hit ? " [keyword hit]" : "");
    }
    printf("\nmax_skills=%d min_confidence=%g rrf_k=%g weights: bm25=%g embed=%g; %s\n",
           p->max_skills, p->min_confidence, p->rrf_k, p->w_bm25, p->w_embed,
           selector_has_embeddings(skillset_selector(ss)) && !degraded ? "embeddings on"
                                                                       : "keyword only");
  } else {
    for (size_t i = 0; i < ns; i++)
      printf("%-24s %.3f%s\n", sel[i].skill->name, sel[i].hit.confidence,
             sel[i].hit.always ? " (always)" : "");
    /* on stderr, so stdout stays one selected name per line */
    if (!ns)
      fprintf(stderr, "luagent: no skill selected for this message (see --explain for why)\n");
  }
  free(sel);
  free(rank);
  return 0;
}

static int cmd_batch(struct skillset *ss, const char *file, size_t top, enum sel_mode mode) {
  FILE *f = strcmp(file, "-") ? fopen(file, "r") : stdin;
  if (!f) return cli_fail(2, "skills select --batch: cannot open %s", file);
  struct skill_pick *rank = xcalloc(top ? top : 1, sizeof *rank);
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int lineno = 0, bad = 0, shown = 0;
  warn_once(skillset_warning(ss), &shown);
  while ((len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    if (!len) continue;
    struct err pe = {0};
    cJSON *j = NULL;
    if (json_parse(line, (size_t)len, 0, &j, &pe)) {
      fprintf(stderr, "luagent: %s:%d: %s\n", file, lineno, pe.msg);
      bad++;
      continue;
    }
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "query");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
    if (!cJSON_IsObject(j) || !cJSON_IsString(q) || !id) {
      fprintf(stderr, "luagent: %s:%d: expected a JSON object with \"id\" and a \"query\" string\n",
              file, lineno);
      bad++;
      cJSON_Delete(j);
      continue;
    }
    size_t nr = 0;
    int degraded = 0;
    struct err w;
    memset(&w, 0, sizeof w);
    skills_rank(ss, q->valuestring, mode, rank, top, &nr, &degraded, &w);
    if (degraded) warn_once(w.msg, &shown);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", cJSON_Duplicate(id, 1));
    cJSON *a = cJSON_AddArrayToObject(o, "ranked");
    for (size_t i = 0; i < nr; i++)
      cJSON_AddItemToArray(a, cJSON_CreateString(rank[i].skill->name));
    print_json(o);
    cJSON_Delete(j);
  }
  free(line);
  free(rank);
  if (f != stdin) fclose(f);
  if (bad) fprintf(stderr, "luagent: %d bad line(s) in %s\n", bad, file);
  return bad ? 1 : 0;
}

static int cmd_call(struct runtime *rt, const char *tool, const char *args_text, int json) {
  struct err pe = {0};
  cJSON *args = args_text ? json_parse_str(args_text, JSON_NO_DUPLICATES, &pe) : cJSON_CreateObject();
  if (!args) return cli_fail(2, "skills call: the arguments are not valid JSON: %s", pe.msg);
  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_OPERATOR, "cli");
  ctx.limits.deadline_at = util_monotonic() + ctx.limits.deadline_s;
  /* Hooks stop Lua code; the watchdog covers a C call no hook reaches. */
  char msg[300];
  snprintf(msg, sizeof msg,
           "luagent: error: %s: wall-clock deadline of %gs exceeded inside a call that could "
           "not be interrupted; stopped by the watchdog",
           tool, ctx.limits.deadline_s);
  watchdog_arm(ctx.limits.deadline_at, 2.0, 1, msg);
  cJSON *res = NULL;
  struct err e;
  memset(&e, 0, sizeof e);
  int rc = tool_call(&ctx, tool, args, &res, &e);
  watchdog_disarm();
  cJSON_Delete(args);
  if (rc) {
    cJSON_Delete(res);
    return cli_fail(1, "%s (%s)", e.msg, e.code);
  }
  if (json) { /* --json: the one-line rule; otherwise indented to read */
    cli_print_json(res);
  } else {
    char *t = json_print(res, JSON_PRETTY);
    puts(t);
    free(t);
  }
  cJSON_Delete(res);
  return 0;
}

int cli_skills(const struct cli_opts *o, int argc, char **argv) {
  if (argc < 2) return cli_usage_fail("skills", NULL);
  const char *sub = argv[1];
  if (!cli_usage_has("skills", sub)) return cli_unknown_sub("skills", sub);
  int json = o->json, explain = 0;
  const char *batch = NULL, *msg = NULL;
  size_t top = 10;
  enum sel_mode mode = SEL_FUSED;
  for (int i = 2; i < argc && strcmp(sub, "call"); i++) {
    if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (!strcmp(argv[i], "--") && i + 1 < argc && !msg) /* a message that starts with '-' */
      msg = argv[++i];
    else if (!strcmp(argv[i], "--explain"))
      explain = 1;
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = argv[++i];
    else if (!strcmp(argv[i], "--top") && i + 1 < argc) {
      char *end;
      long n = strtol(argv[++i], &end, 10);
      if (*end || n < 1 || n > 100000) return cli_fail(2, "--top needs a number from 1 to 100000");
      top = (size_t)n;
    } else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
      const char *m = argv[++i];
      if (!strcmp(m, "fused"))
        mode = SEL_FUSED;
      else if (!strcmp(m, "keyword"))
        mode = SEL_BM25;
      else if (!strcmp(m, "embedding"))
        mode = SEL_EMBED;
      else
        return cli_fail(2, "--mode is fused, keyword or embedding, not '%s'", m);
    } else if (argv[i][0] == '-' && argv[i][1]) {
      return cli_usage_fail("skills", "skills %s: unknown option %s", sub, argv[i]);
    } else if (!msg)
      msg = argv[i];
    else
      return cli_fail(2, "skills %s: unexpected argument '%s' (quote the message)", sub, argv[i]);
  }
  int is_list = !strcmp(sub, "list"), is_check = !strcmp(sub, "check"),
      is_select = !strcmp(sub, "select"), is_call = !strcmp(sub, "call");
  const char *call_args = NULL;
  if (is_call) {
    if (argc < 3 || argc > 4) return cli_usage_fail("skills", "skills call needs TOOL and at most one JSON argument");
    msg = argv[2];
    call_args = argc == 4 ? argv[3] : NULL;
  }
  if (is_select && !batch && !msg)
    return cli_fail(2, "skills select needs a message or --batch FILE");
  if (!is_select && !is_call && msg)
    return cli_fail(2, "skills %s: unexpected argument '%s'", sub, msg);

  struct err e;
  memset(&e, 0, sizeof e);
  struct runtime *rt;
  if (runtime_open(o->workspace, &rt, &e)) return cli_fail(2, "%s", e.msg);
  if (skills_ensure(rt, &e)) {
    runtime_free(rt);
    return cli_fail(2, "%s", e.msg);
  }
  struct skillset *ss = rt->skills;
  int rc;
  for (size_t i = 0; is_call && i < skillset_nproblems(ss); i++) {
    const struct skill_problem *p = skillset_problem(ss, i);
    fprintf(stderr, "luagent: warning: %s:%d: %s\n", p->file, p->line, p->msg);
  }
  if (is_call)
    rc = cmd_call(rt, msg, call_args, json);
  else if (is_list)
    rc = cmd_list(ss, json);
  else if (is_check)
    rc = cmd_check(o->workspace, ss, json);
  else if (batch)
    rc = cmd_batch(ss, batch, top, mode);
  else
    rc = cmd_select(ss, msg, explain, json, top, mode);
  runtime_free(rt); /* frees the skills too */
  return rc;
}
