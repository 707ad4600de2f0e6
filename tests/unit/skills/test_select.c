/* test_select.c - tokenizer, builtin embedding, selector, embedding cache,
 * and the SKILL.md side of the skills loader. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "embed.h"
#include "select.h"
#include "skills.h"
#include "skills_tools.h"
#include "store.h"
#include "test.h"
#include "tokenize.h"
#include "tool.h"
#include "util.h"

/* ---- tokenizer --------------------------------------------------------- */

struct toks {
  char buf[1024];
};
static int collect(void *ud, const char *w, size_t wl, const char *stem, size_t sl) {
  struct toks *t = ud;
  (void)wl;
  (void)sl;
  size_t n = strlen(t->buf);
  snprintf(t->buf + n, sizeof t->buf - n, "%s%s/%s", n ? " " : "", w, stem);
  return 0;
}
static const char *toks(const char *s, struct toks *t) {
  t->buf[0] = 0;
  tok_words(s, strlen(s), collect, t);
  return t->buf;
}

static void test_tokenize(void) {
  struct toks t;
  CHECK_STR(toks("getHealthWorkforce", &t), "get/get health/health workforce/workforc");
  CHECK_STR(toks("HTTPServer", &t), "http/http server/serv");
  CHECK_STR(toks("Is the site UP?", &t), "site/sit up/up");
  CHECK_STR(toks("notes noting", &t), "notes/not noting/not");
  CHECK_STR(toks("checks checking checked", &t), "checks/check checking/check checked/check");
  CHECK_STR(toks("running queries", &t), "running/run queries/queri");
  CHECK_STR(toks("飞书", &t), "飞/飞 书/书");
  /* names run together split at case changes, digits, '_' and '-' */
  CHECK_STR(toks("mp3Player", &t), "mp/mp 3/3 player/plai");
  CHECK_STR(toks("base64_decode-tool", &t), "base/bas 64/64 decode/decod tool/tool");
  CHECK_STR(toks("HouseRentingTool", &t), "house/hous renting/rent tool/tool");
  CHECK_STR(toks("getForensicAnalysis2", &t), "get/get forensic/forensic analysis/analysis 2/2");
  CHECK_STR(toks("", &t), "");
  CHECK(tok_is_stopword("the", 3));
  CHECK(!tok_is_stopword("note", 4));
}

/* ---- builtin embedding ------------------------------------------------- */

static float dot(const float *a, const float *b, int n) {
  float s = 0;
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

static void test_builtin_embedding(void) {
  enum { D = 512 };
  static float a[D], b[D], c[D], z[D];
  embed_builtin("checking the websites", 21, a, D);
  embed_builtin("check a website", 15, b, D);
  embed_builtin("bake a chocolate cake", 21, c, D);
  CHECK(fabsf(dot(a, a, D) - 1.0f) < 1e-4);
  CHECK(dot(a, b, D) > 0.5f);                /* inflections meet */
  CHECK(dot(a, b, D) > dot(a, c, D) + 0.3f); /* unrelated is far */
  static float a2[D];
  embed_builtin("checking the websites", 21, a2, D);
  CHECK(memcmp(a, a2, sizeof a) == 0); /* deterministic */
  embed_builtin("the of and", 10, z, D);
  CHECK(dot(z, z, D) == 0.0f); /* only stopwords: zero vector */
}

/* ---- selector ---------------------------------------------------------- */

static const char *const kw_notes[] = {"jot down", "memo", NULL};
static const char *const ex_notes[] = {"write down that the meeting moved", NULL};
static const char *const kw_web[] = {"uptime", "health check", NULL};
static const char *const ex_web[] = {"is the status page up?", NULL};
static const char *const tool_web[] = {"Check one URL: HTTP status and response time", NULL};

static struct selector *make(struct embedder *m, const struct sel_params *p) {
  struct selector *s = selector_new(p);
  struct sel_doc d1 = {.name = "notes",
                       .description = "Keep workspace notes: add, read, search",
                       .keywords = kw_notes,
                       .examples = ex_notes};
  struct sel_doc d2 = {.name = "webcheck",
                       .description = "Check that websites are up",
                       .keywords = kw_web,
                       .examples = ex_web,
                       .extra = tool_web};
  struct sel_doc d3 = {
      .name = "house-rules", .description = "Rules that always apply", .always = true};
  struct sel_doc d4 = {.name = "recipes", .description = "Cooking recipes and baking times"};
  CHECK_INT(selector_add(s, &d1), 0);
  CHECK_INT(selector_add(s, &d2), 1);
  CHECK_INT(selector_add(s, &d3), 2);
  CHECK_INT(selector_add(s, &d4), 3);
  int deg = 0;
  struct err w;
  CHECK_INT(selector_build(s, m, NULL, &deg, &w), 0);
  CHECK_INT(deg, 0);
  return s;
}

static void test_selector(void) {
  struct embed_opts o = {.kind = EMBED_BUILTIN};
  struct embedder *m;
  struct err e;
  CHECK_INT(embedder_new(&o, &m, &e), 0);
  CHECK_STR(embedder_model(m), "builtin-v1/2048");
  struct selector *s = make(m, NULL);
  CHECK(selector_has_embeddings(s));
  CHECK_STR(selector_name(s, 1), "webcheck");
  struct sel_hit h[8];
  size_t n;
  int deg;
  struct err w;

  selector_rank(s, "please jot down my wifi password", SEL_BM25, h, 8, &n, &deg, &w);
  CHECK(n >= 1);
  CHECK_INT(h[0].doc, 0);
  CHECK(h[0].keyword_hit);
  CHECK(h[0].bm25 > 0);
  CHECK_INT(h[0].rank_bm25, 1);

  selector_rank(s, "are the web sites checked for uptime", SEL_FUSED, h, 8, &n, &deg, &w);
  CHECK(n >= 1 && h[0].doc == 1);
  CHECK(h[0].rank_bm25 == 1 && h[0].rank_embed == 1);
  CHECK(h[0].fused > h[1].fused);

  selector_rank(s, "checking websites", SEL_EMBED, h, 8, &n, &deg, &w);
  CHECK_INT(n, 4); /* embedding ranks every document */
  CHECK_INT(h[0].doc, 1);
  CHECK(h[0].cosine > h[3].cosine);

  /* selection: always first; an unrelated message selects only it */
  selector_select(s, "what is the capital of Peru", h, 8, &n, &deg, &w);
  CHECK_INT(n, 1);
  CHECK_INT(h[0].doc, 2);
  CHECK(h[0].always);
  selector_select(s, "is the status page up? check its uptime", h, 8, &n, &deg, &w);
  CHECK_INT(n, 2);
  CHECK_INT(h[0].doc, 2);
  CHECK_INT(h[1].doc, 1);
  CHECK(h[1].confidence >= 0.25f);
  selector_free(s);

  /* max_skills and min_confidence come from the params */
  struct sel_params p;
  sel_params_default(&p);
  p.max_skills = 1;
  p.min_confidence = 0;
  s = make(m, &p);
  selector_select(s, "notes about baking and websites", h, 8, &n, &deg, &w);
  CHECK_INT(n, 2); /* always + one */
  selector_free(s);

  /* keyword only: no embedder */
  s = make(NULL, NULL);
  CHECK(!selector_has_embeddings(s));
  selector_rank(s, "checking websites", SEL_EMBED, h, 8, &n, &deg, &w);
  CHECK(n >= 1 && h[0].doc == 1); /* falls back to keywords */
  selector_free(s);

  /* an empty selector */
  s = selector_new(NULL);
  selector_build(s, m, NULL, NULL, &w);
  selector_rank(s, "anything", SEL_FUSED, h, 8, &n, &deg, &w);
  CHECK_INT(n, 0);
  selector_free(s);
  embedder_free(m);
}

/* ---- confidence -------------------------------------------------------- */

/* The confidence is a probability, the same words score the same in any
 * collection of a given size, and an unrelated request scores below the
 * default threshold while a right one clears it. */
static void test_confidence(void) {
  struct embed_opts o = {.kind = EMBED_BUILTIN};
  struct embedder *m;
  struct err e;
  CHECK_INT(embedder_new(&o, &m, &e), 0);
  /* a collection big enough to have a score distribution */
  struct selector *s = selector_new(NULL);
  static const char *const topics[] = {
      "weather forecast for a city",        "translate text between languages",
      "book a table at a restaurant",       "track a parcel delivery",
      "convert currencies at today's rate", "find recipes for dinner",
      "search academic papers",             "check the stock price of a company",
      "plan a road trip route",             "generate a QR code",
      "summarise a YouTube video",          "find flights between two airports",
  };
  char name[32];
  for (size_t i = 0; i < sizeof topics / sizeof topics[0]; i++) {
    snprintf(name, sizeof name, "tool%zu", i);
    struct sel_doc d = {.name = name, .description = topics[i]};
    selector_add(s, &d);
  }
  CHECK_INT(selector_build(s, m, NULL, NULL, &e), 0);
  struct sel_hit h[8];
  size_t n;
  int deg;
  selector_rank(s, "what is the weather forecast for Paris tomorrow", SEL_FUSED, h, 8, &n, &deg, &e);
  CHECK(n >= 2 && h[0].doc == 0);
  CHECK(h[0].confidence >= 0.35f && h[0].confidence <= 1.0f);
  CHECK(h[1].confidence < h[0].confidence && h[1].confidence >= 0.0f);
  CHECK(h[0].margin > 0 && h[1].margin < 0);
  CHECK(h[0].coverage > 0.5f && h[0].cos_z > 1.0f);
  selector_select(s, "my cat keeps knocking plants over, any advice", h, 8, &n, &deg, &e);
  CHECK_INT(n, 0); /* unrelated: nothing selected */
  selector_select(s, "please translate this text into other languages", h, 8, &n, &deg, &e);
  CHECK(n >= 1 && h[0].doc == 1);
  /* extra_share: once the best clears min_confidence, runners-up need less */
  struct sel_params p;
  sel_params_default(&p);
  p.min_confidence = 0.99;
  selector_free(s);
  s = selector_new(&p);
  for (size_t i = 0; i < sizeof topics / sizeof topics[0]; i++) {
    snprintf(name, sizeof name, "tool%zu", i);
    struct sel_doc d = {.name = name, .description = topics[i]};
    selector_add(s, &d);
  }
  CHECK_INT(selector_build(s, m, NULL, NULL, &e), 0);
  selector_select(s, "what is the weather forecast for Paris tomorrow", h, 8, &n, &deg, &e);
  CHECK_INT(n, 0); /* nothing reaches 0.99 */
  selector_free(s);
  embedder_free(m);
}

/* ---- the scope of skills.find / skills.load ---------------------------- */

static void test_scope(void) {
  cJSON *scope = cJSON_Parse("[\"notes.*\", \"time.now\"]");
  CHECK(skills_in_scope(NULL, "anything.at_all"));
  CHECK(skills_in_scope(scope, "notes.add"));
  CHECK(skills_in_scope(scope, "time.now"));
  CHECK(!skills_in_scope(scope, "tracks.nearest"));
  CHECK(!skills_in_scope(scope, "notesx.add") || skills_tool_matches("notes.*", "notesx.add"));
  char *tn[] = {"tracks.nearest", NULL}, *tn2[] = {NULL};
  struct skill k = {.name = "tracks", .tools = tn}, k2 = {.name = "howto", .tools = tn2};
  CHECK(skills_skill_in_scope(NULL, &k));
  CHECK(!skills_skill_in_scope(scope, &k));
  CHECK(skills_skill_in_scope(NULL, &k2));
  CHECK(!skills_skill_in_scope(scope, &k2)); /* instruction-only: not inside a tool list */
  cJSON *empty = cJSON_CreateArray();
  CHECK(!skills_skill_in_scope(empty, &k));
  cJSON_Delete(empty);
  cJSON_Delete(scope);
}

/* ---- cache and a failing endpoint -------------------------------------- */

static void test_cache_and_failure(void) {
  char dir[] = "/tmp/luagent-test-select-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char db[256];
  snprintf(db, sizeof db, "%s/state.db", dir);
  struct store *st;
  struct err e;
  CHECK_INT(store_open_path(db, &st, &e), 0);
  struct embed_opts o = {.kind = EMBED_BUILTIN, .dim = 64};
  struct embedder *m;
  CHECK_INT(embedder_new(&o, &m, &e), 0);
  const char *texts[] = {"alpha beta", "gamma delta", "alpha beta"};
  float *v1, *v2;
  int dim;
  size_t hits = 99;
  CHECK_INT(embedder_embed_cached(m, st, texts, 3, &v1, &dim, &hits, &e), 0);
  CHECK_INT(dim, 64);
  CHECK_INT(hits, 0);
  CHECK_INT(embedder_embed_cached(m, st, texts, 3, &v2, &dim, &hits, &e), 0);
  CHECK_INT(hits, 3);
  CHECK(memcmp(v1, v2, sizeof(float) * 3 * 64) == 0);
  free(v1);
  free(v2);
  embedder_free(m);

  /* nothing listens on port 9 of 127.0.0.1: the error names the endpoint,
   * and a selector built with it works keyword-only */
  struct embed_opts oo = {
      .kind = EMBED_OPENAI, .base_url = "http://127.0.0.1:9/v1", .model = "m", .timeout_s = 2};
  CHECK_INT(embedder_new(&oo, &m, &e), 0);
  float *v = NULL;
  CHECK(embedder_embed(m, texts, 1, &v, &dim, &e) < 0);
  CHECK_CONTAINS(e.msg, "http://127.0.0.1:9/v1/embeddings");
  struct selector *s = selector_new(NULL);
  struct sel_doc d = {.name = "webcheck", .description = "Check that websites are up"};
  selector_add(s, &d);
  int deg = 0;
  struct err w;
  memset(&w, 0, sizeof w);
  CHECK_INT(selector_build(s, m, st, &deg, &w), 0);
  CHECK_INT(deg, 1);
  CHECK_CONTAINS(w.msg, "keywords only");
  struct sel_hit h[4];
  size_t n;
  selector_rank(s, "is the website up", SEL_FUSED, h, 4, &n, &deg, &w);
  CHECK_INT(n, 1);
  CHECK(h[0].bm25 > 0 && h[0].cosine == 0);
  selector_select(s, "check that the websites are up", h, 4, &n, &deg, &w);
  CHECK_INT(n, 1);
  selector_free(s);
  embedder_free(m);

  /* a missing base_url is a config error */
  struct embed_opts bad = {.kind = EMBED_OPENAI};
  CHECK(embedder_new(&bad, &m, &e) < 0);
  CHECK_CONTAINS(e.msg, "base_url");
  store_close(st);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_INT(system(cmd), 0);
}

/* ---- config ------------------------------------------------------------ */

static void test_config(void) {
  char dir[] = "/tmp/luagent-test-selcfg-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[256];
  snprintf(path, sizeof path, "%s/luagent.lua", dir);
  FILE *f = fopen(path, "w");
  fputs(
      "return { selection = { max_skills = 2, rrf_k = 30, weights = { embed = 0.5 } },\n"
      "  embeddings = { kind = \"openai\", base_url = \"http://127.0.0.1:1/v1\", model = \"x\" } "
      "}\n",
      f);
  fclose(f);
  struct config *c = NULL;
  struct err e;
  CHECK_INT(config_load_file(path, &c, &e), 0);
  struct sel_params p;
  CHECK_INT(sel_params_from_config(c, &p, &e), 0);
  CHECK_INT(p.max_skills, 2);
  CHECK(p.rrf_k == 30 && p.w_embed == 0.5 && p.w_bm25 == 1);
  struct embedder *m = NULL;
  CHECK_INT(embedder_from_config(c, &m, &e), 0);
  CHECK(m && embedder_kind(m) == EMBED_OPENAI);
  CHECK_STR(embedder_model(m), "openai:http://127.0.0.1:1/v1:x");
  embedder_free(m);
  config_free(c);

  f = fopen(path, "w");
  fputs("return { selection = { max_skill = 2 }, embeddings = { kind = \"magic\" } }\n", f);
  fclose(f);
  CHECK_INT(config_load_file(path, &c, &e), 0);
  CHECK(sel_params_from_config(c, &p, &e) < 0);
  CHECK_CONTAINS(e.msg, "selection.max_skill is not a known key");
  CHECK(embedder_from_config(c, &m, &e) < 0);
  CHECK_CONTAINS(e.msg, "\"magic\" is unknown");
  config_free(c);

  /* field weights, extra_share and the recovery switch */
  f = fopen(path, "w");
  fputs("return { selection = { fields = { examples = 3, name = 0.5 }, extra_share = 0.5,\n"
        "  recovery = false, min_confidence = 0.2 } }\n",
        f);
  fclose(f);
  CHECK_INT(config_load_file(path, &c, &e), 0);
  CHECK_INT(sel_params_from_config(c, &p, &e), 0);
  CHECK(p.f_examples == 3 && p.f_name == 0.5 && p.f_description == 1 && p.f_keywords == 2);
  CHECK(p.extra_share == 0.5 && !p.recovery && p.min_confidence == 0.2);
  config_free(c);
  static const char *const bad[][2] = {
      {"selection = { fields = { exampels = 3 } }", "selection.fields.exampels is not a known key"},
      {"selection = { fields = 3 }", "selection.fields must be a table"},
      {"selection = { fields = { name = -1 } }", "selection.fields.name must be a number from 0"},
      {"selection = { recovery = \"no\" }", "selection.recovery must be true or false"},
      {"selection = { extra_share = 2 }", "selection.extra_share must be a number from 0 to 1"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    f = fopen(path, "w");
    fprintf(f, "return { %s }\n", bad[i][0]);
    fclose(f);
    CHECK_INT(config_load_file(path, &c, &e), 0);
    CHECK(sel_params_from_config(c, &p, &e) < 0);
    CHECK_CONTAINS(e.msg, bad[i][1]);
    config_free(c);
  }
  unlink(path);
  rmdir(dir);
}

/* ---- the SKILL.md loader without a runtime ----------------------------- */

static void write_file(const char *dir, const char *sub, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, sub);
  char *slash = strrchr(p, '/');
  *slash = 0;
  mkdir(p, 0755);
  *slash = '/';
  FILE *f = fopen(p, "w");
  fputs(text, f);
  fclose(f);
}

static int has_problem(struct skillset *s, const char *file, int line, const char *needle) {
  for (size_t i = 0; i < skillset_nproblems(s); i++) {
    const struct skill_problem *p = skillset_problem(s, i);
    if (!strcmp(p->file, file) && p->line == line && strstr(p->msg, needle)) return 1;
  }
  fprintf(stderr, "no problem %s:%d: %s among:\n", file, line, needle);
  for (size_t i = 0; i < skillset_nproblems(s); i++) {
    const struct skill_problem *p = skillset_problem(s, i);
    fprintf(stderr, "  %s:%d: %s\n", p->file, p->line, p->msg);
  }
  return 0;
}

static void test_loader(void) {
  char dir[] = "/tmp/luagent-test-skills-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  write_file(dir, "good/SKILL.md",
             "---\nname: good\ndescription: Water the plants on schedule\n"
             "examples: [water the ferns]\nalways: false\n---\nUse the watering can.\n");
  write_file(dir, "broken-yaml/SKILL.md",
             "---\nname: broken-yaml\ndescription: x\ntags: [a\n---\n");
  write_file(dir, "no-desc/SKILL.md", "---\nname: no-desc\n---\nbody\n");
  write_file(dir, "zz-dup/SKILL.md", "---\nname: good\ndescription: again\n---\n");
  write_file(dir, "Bad_Name/SKILL.md", "---\nname: Bad_Name\ndescription: d\n---\n");
  write_file(dir, "mismatch/SKILL.md", "---\nname: other\ndescription: d\n---\n");
  write_file(dir, "lua/skill.lua", "return { name = 'lua' }\n");
  mkdir(strcat(strcpy((char[256]){0}, dir), "/empty"), 0755);
  struct skillset *s;
  struct err e;
  CHECK_INT(skillset_load_dir(dir, "skills", NULL, NULL, NULL, NULL, &s, &e), 0);
  CHECK_INT(skillset_count(s), 2); /* good, other */
  const struct skill *g = skillset_find(s, "good");
  CHECK(g != NULL);
  if (g) {
    CHECK_STR(g->prompt, "Use the watering can.\n");
    CHECK_STR(g->source, "skills/good/SKILL.md");
    CHECK_STR(g->examples[0], "water the ferns");
  }
  CHECK(skillset_find(s, "other") != NULL);
  CHECK(has_problem(s, "skills/broken-yaml/SKILL.md", 5, "flow sequence that starts on line 4"));
  CHECK(has_problem(s, "skills/no-desc/SKILL.md", 2, "needs a non-empty 'description'"));
  CHECK(has_problem(s, "skills/zz-dup/SKILL.md", 2, "duplicate skill name 'good'"));
  CHECK(has_problem(s, "skills/Bad_Name/SKILL.md", 2, "is not valid"));
  CHECK(has_problem(s, "skills/mismatch/SKILL.md", 2, "does not match its folder"));
  CHECK(has_problem(s, "skills/lua/skill.lua", 0, "need a workspace runtime"));
  CHECK(has_problem(s, "skills/empty", 0, "no skill.lua or SKILL.md"));
  CHECK_INT(skillset_nproblems(s), 8); /* + zz-dup's folder mismatch */
  /* advice is not a problem: "other" has no examples, "good" has one */
  CHECK(skillset_nhints(s) >= 1);
  for (size_t i = 0; i < skillset_nhints(s); i++) {
    CHECK_CONTAINS(skillset_hint(s, i)->msg, "has no examples");
    CHECK(!skillset_hint(s, i)->fatal);
    CHECK(strstr(skillset_hint(s, i)->msg, "'good'") == NULL);
  }

  struct skill_pick pk[4];
  size_t n;
  int deg;
  struct err w;
  CHECK_INT(skills_select(s, "please water the ferns", pk, 4, &n, &deg, &w), 0);
  CHECK(n >= 1 && !strcmp(pk[0].skill->name, "good"));
  struct sbuf b = {0};
  skills_prompt(pk, 1, &b);
  CHECK_STR(b.s, "## Skill: good\nWater the plants on schedule\n\nUse the watering can.\n\n");
  sbuf_free(&b);
  struct tool host = {.name = "fs.read"}, mine = {.name = "good.x", .skill = "good"},
              other = {.name = "other.x", .skill = "other"};
  CHECK(skills_offers_tool(pk, 1, &host));
  CHECK(skills_offers_tool(pk, 1, &mine));
  CHECK(!skills_offers_tool(pk, 1, &other));
  skillset_free(s);

  /* a missing skills folder is an empty set */
  CHECK_INT(skillset_load_dir("/nonexistent/skills", "skills", NULL, NULL, NULL, NULL, &s, &e), 0);
  CHECK_INT(skillset_count(s), 0);
  skillset_free(s);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_INT(system(cmd), 0);
  CHECK(skills_valid_name("a-b_c9"));
  CHECK(!skills_valid_name("9a"));
  CHECK(!skills_valid_name("a.b"));
}

int main(void) {
  test_tokenize();
  test_builtin_embedding();
  test_selector();
  test_cache_and_failure();
  test_config();
  test_confidence();
  test_scope();
  test_loader();
  return TEST_END();
}
