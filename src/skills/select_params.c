/* select_params.c - the selection parameters: defaults and the `selection`
 * table of luagent.lua (see select.h). */
#include <cjson/cJSON.h>

#include "config.h"
#include "select.h"

void sel_params_default(struct sel_params *p) {
  p->max_skills = 3;
  p->min_confidence = 0.35;
  p->rrf_k = 20;
  p->w_bm25 = 1.0;
  p->w_embed = 1.0;
  p->k1 = 1.2;
  p->b = 0.75;
  p->keyword_boost = 1.0;
  p->f_name = 2.0;
  p->f_description = 1.0;
  p->f_keywords = 2.0;
  p->f_tags = 1.5;
  p->f_examples = 0;
  p->f_tools = 0.7;
  p->f_body = 0.4;
  p->extra_share = 1.0;
  p->w_examples = 0.5;
  p->recovery = true;
  p->rank_fused_rrf = false;
  p->conf_w_emb = p->conf_w_kw = NULL;
}

static int num_key(const cJSON *t, const char *key, const char *where, double lo, double hi,
                   double *out, struct err *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, key);
  if (!v) return 0;
  if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi)
    return err_set(e, ERR_INVALID, "config", "%s.%s must be a number from %g to %g", where, key, lo,
                   hi);
  *out = v->valuedouble;
  return 0;
}

static int sel_params_check(const struct config *cfg, struct sel_params *p, struct err *e) {
  sel_params_default(p);
  const cJSON *t = cfg ? config_get(cfg, "selection") : NULL;
  if (!t) return 0;
  if (!cJSON_IsObject(t)) return err_set(e, ERR_INVALID, "config", "selection must be a table");
  static const char *const known[] = {"max_skills", "min_confidence", "rrf_k",
                                      "weights",    "k1",             "b",
                                      "keyword_boost", "fields",      "extra_share",
                                      "recovery",   NULL};
  if (config_check_keys(t, "selection", known, e)) return ERR_INVALID;
  double ms = p->max_skills;
  if (num_key(t, "max_skills", "selection", 0, 100, &ms, e) ||
      num_key(t, "min_confidence", "selection", 0, 1, &p->min_confidence, e) ||
      num_key(t, "rrf_k", "selection", 0, 1e6, &p->rrf_k, e) ||
      num_key(t, "k1", "selection", 0, 100, &p->k1, e) ||
      num_key(t, "b", "selection", 0, 1, &p->b, e) ||
      num_key(t, "keyword_boost", "selection", 0, 1000, &p->keyword_boost, e) ||
      num_key(t, "extra_share", "selection", 0, 1, &p->extra_share, e))
    return ERR_INVALID;
  p->max_skills = (int)ms;
  const cJSON *rec = cJSON_GetObjectItemCaseSensitive(t, "recovery");
  if (rec) {
    if (!cJSON_IsBool(rec))
      return err_set(e, ERR_INVALID, "config",
                     "selection.recovery must be true or false (skills.find and skills.load)");
    p->recovery = cJSON_IsTrue(rec);
  }
  const cJSON *w = cJSON_GetObjectItemCaseSensitive(t, "weights");
  if (w) {
    if (!cJSON_IsObject(w))
      return err_set(e, ERR_INVALID, "config",
                     "selection.weights must be a table { bm25 =, embed = }");
    static const char *const wknown[] = {"bm25", "embed", NULL};
    if (config_check_keys(w, "selection.weights", wknown, e)) return ERR_INVALID;
    if (num_key(w, "bm25", "selection.weights", 0, 1000, &p->w_bm25, e) ||
        num_key(w, "embed", "selection.weights", 0, 1000, &p->w_embed, e))
      return ERR_INVALID;
  }
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "fields");
  if (f) {
    if (!cJSON_IsObject(f))
      return err_set(e, ERR_INVALID, "config",
                     "selection.fields must be a table { name =, description =, keywords =, "
                     "tags =, examples =, tools =, body = }");
    static const char *const fknown[] = {"name",  "description", "keywords", "tags",
                                         "examples", "tools",     "body",     NULL};
    if (config_check_keys(f, "selection.fields", fknown, e)) return ERR_INVALID;
    const char *fw = "selection.fields";
    if (num_key(f, "name", fw, 0, 100, &p->f_name, e) ||
        num_key(f, "description", fw, 0, 100, &p->f_description, e) ||
        num_key(f, "keywords", fw, 0, 100, &p->f_keywords, e) ||
        num_key(f, "tags", fw, 0, 100, &p->f_tags, e) ||
        num_key(f, "examples", fw, 0, 100, &p->f_examples, e) ||
        num_key(f, "tools", fw, 0, 100, &p->f_tools, e) ||
        num_key(f, "body", fw, 0, 100, &p->f_body, e))
      return ERR_INVALID;
  }
  return 0;
}

int sel_params_from_config(const struct config *cfg, struct sel_params *p, struct err *e) {
  int rc = sel_params_check(cfg, p, e);
  return rc ? config_error_at(cfg, "selection", e) : 0;
}
