/* skills.c - see skills.h. */
#include "skills.h"
#include "skills_tools.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "call.h"
#include "config.h"
#include "embed.h"
#include "sandbox.h"
#include "schema.h"
#include "skillmd.h"
#include "skills_impl.h"
#include "store.h"
#include "tool.h"
#include "util.h"

#define MAX_SKILL_FILE (1u << 20)
#define MAX_DESCRIPTION 1024 /* Agent Skills limit */

struct skillset {
  struct skill *skills;
  size_t n, cap;
  struct skill_problem *probs;
  size_t np, capp;
  struct skill_problem *hints; /* advice, not problems: `skills check` lists them */
  size_t nh, caph;
  struct sel_params params;
  struct selector *sel;     /* built on first use (index_ensure) */
  struct embedder *emb;     /* borrowed, for the index build */
  struct store *st;         /* borrowed embedding cache, or NULL */
  pthread_mutex_t index_mu; /* a tool thread may be the first to select */
  struct embedder *own_emb; /* made by skills_load */
  char *warning;
};

/* Builds the selection index the first time something selects or asks
 * about it, so commands that only run tools (`run`, daemon workers, `tools
 * list`) never embed skills or touch the embedding endpoint at start-up. */
static void index_ensure(struct skillset *s) {
  pthread_mutex_lock(&s->index_mu);
  if (!s->sel) {
    s->sel = selector_new(&s->params);
    for (size_t i = 0; i < s->n; i++) {
      const struct skill *k = &s->skills[i];
      struct sel_doc doc = {
          .name = k->name,
          .description = k->description,
          .keywords = (const char *const *)k->keywords,
          .tags = (const char *const *)k->tags,
          .examples = (const char *const *)k->examples,
          .extra = (const char *const *)k->tool_descriptions,
          .body = k->prompt,
          .always = k->always,
      };
      selector_add(s->sel, &doc);
    }
    int degraded = 0;
    struct err w;
    memset(&w, 0, sizeof w);
    selector_build(s->sel, s->emb, s->st, &degraded, &w);
    if (degraded && !s->warning) s->warning = xstrdup(w.msg);
  }
  pthread_mutex_unlock(&s->index_mu);
}

/* ---- small helpers ----------------------------------------------------- */

/* Characters (code points) of a UTF-8 string; an invalid byte counts as
 * one. The Agent Skills limits are in characters: a description in
 * Chinese is within 1,024 at three times as many bytes. */
static size_t utf8_chars(const char *s) {
  size_t n = 0, len = strlen(s);
  for (size_t i = 0; i < len; n++) {
    size_t l = util_utf8_len((const unsigned char *)s + i, len - i, NULL);
    i += l ? l : 1;
  }
  return n;
}

bool skills_valid_name(const char *name) {
  if (!name || !(*name >= 'a' && *name <= 'z')) return false;
  size_t n = 0;
  for (const char *p = name; *p; p++, n++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
      return false;
  return n <= 64;
}

static void problem(struct skillset *s, const char *file, int line, bool fatal, const char *fmt,
                    ...) __attribute__((format(printf, 5, 6)));
static void problem(struct skillset *s, const char *file, int line, bool fatal, const char *fmt,
                    ...) {
  if (s->np == s->capp) {
    s->capp = s->capp ? s->capp * 2 : 16;
    s->probs = xrealloc(s->probs, sizeof *s->probs * s->capp);
  }
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  s->probs[s->np++] = (struct skill_problem){xstrdup(file), line, xstrdup(buf), fatal};
}

static char **list_new(void) {
  return xcalloc(1, sizeof(char *));
}
static size_t list_len(char *const *l) {
  size_t n = 0;
  while (l && l[n]) n++;
  return n;
}
static void list_push(char ***l, const char *v) {
  size_t n = list_len(*l);
  *l = xrealloc(*l, sizeof(char *) * (n + 2));
  (*l)[n] = xstrdup(v);
  (*l)[n + 1] = NULL;
}
static void list_free(char **l) {
  for (size_t i = 0; l && l[i]; i++) free(l[i]);
  free(l);
}
static char **list_dup(char *const *src) {
  char **l = list_new();
  for (size_t i = 0; src && src[i]; i++) list_push(&l, src[i]);
  return l;
}

static void skill_clear(struct skill *k) {
  free(k->name);
  free(k->description);
  list_free(k->keywords);
  list_free(k->tags);
  list_free(k->examples);
  list_free(k->tools);
  list_free(k->tool_descriptions);
  free(k->prompt);
  free(k->source);
  free(k->md_source);
  memset(k, 0, sizeof *k);
}

void skillset_free(struct skillset *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n; i++) skill_clear(&s->skills[i]);
  free(s->skills);
  for (size_t i = 0; i < s->np; i++) {
    free(s->probs[i].file);
    free(s->probs[i].msg);
  }
  free(s->probs);
  for (size_t i = 0; i < s->nh; i++) {
    free(s->hints[i].file);
    free(s->hints[i].msg);
  }
  free(s->hints);
  selector_free(s->sel);
  embedder_free(s->own_emb);
  free(s->warning);
  pthread_mutex_destroy(&s->index_mu);
  free(s);
}

size_t skillset_count(const struct skillset *s) {
  return s ? s->n : 0;
}
const struct skill *skillset_at(const struct skillset *s, size_t i) {
  return s && i < s->n ? &s->skills[i] : NULL;
}
const struct skill *skillset_find(const struct skillset *s, const char *name) {
  for (size_t i = 0; s && i < s->n; i++)
    if (!strcmp(s->skills[i].name, name)) return &s->skills[i];
  return NULL;
}
size_t skillset_nproblems(const struct skillset *s) {
  return s ? s->np : 0;
}
const struct skill_problem *skillset_problem(const struct skillset *s, size_t i) {
  return s && i < s->np ? &s->probs[i] : NULL;
}
size_t skillset_nhints(const struct skillset *s) {
  return s ? s->nh : 0;
}
const struct skill_problem *skillset_hint(const struct skillset *s, size_t i) {
  return s && i < s->nh ? &s->hints[i] : NULL;
}
const char *skillset_warning(struct skillset *s) {
  if (!s) return NULL;
  index_ensure(s);
  return s->warning;
}
struct selector *skillset_selector(struct skillset *s) {
  index_ensure(s);
  return s->sel;
}
const struct sel_params *skillset_params(const struct skillset *s) {
  return &s->params;
}

/* The first line at or after `from` where `key` appears as a table field
 * (`key =` or `["key"] =`), for problems in Lua tables that carry no line
 * of their own; 0 if not found. */
static int find_key_line(const char *text, const char *key, int from) {
  size_t kl = strlen(key);
  int line = 1;
  for (const char *p = text; *p; line++) {
    const char *eol = strchr(p, '\n');
    if (!eol) eol = p + strlen(p);
    if (line >= from) {
      for (const char *q = p; q + kl <= eol; q++) {
        if (memcmp(q, key, kl)) continue;
        char before = q > p ? q[-1] : ' ';
        if (isalnum((unsigned char)before) || before == '_') continue;
        const char *r = q + kl;
        if (r < eol && (isalnum((unsigned char)*r) || *r == '_')) continue;
        if (before == '"' || before == '\'') {
          if (r < eol && *r == before) r++;
          if (r < eol && *r == ']') r++;
        }
        while (r < eol && (*r == ' ' || *r == '\t')) r++;
        if (r < eol && *r == '=' && (r + 1 >= eol || r[1] != '=')) return line;
      }
    }
    if (!*eol) break;
    p = eol + 1;
  }
  return 0;
}

static int or_line(int line, int dflt) {
  return line ? line : dflt;
}

/* Strings from a JSON array of strings; problems for anything else. */
static char **json_strings(struct skillset *s, const cJSON *v, const char *key, const char *file,
                           int line) {
  char **l = list_new();
  if (!v) return l;
  if (cJSON_IsString(v)) {
    list_push(&l, v->valuestring);
    return l;
  }
  if (cJSON_IsObject(v) && !v->child) return l; /* {} */
  if (!cJSON_IsArray(v)) {
    problem(s, file, line, false, "'%s' must be a list of strings", key);
    return l;
  }
  const cJSON *it;
  int i = 0;
  cJSON_ArrayForEach(it, v) {
    if (cJSON_IsString(it))
      list_push(&l, it->valuestring);
    else
      problem(s, file, line, false, "'%s[%d]' must be a string", key, i + 1);
    i++;
  }
  return l;
}

/* ---- Lua tools (their handler and sandboxes: skill_tool.c) ------------- */

/* Splits "chunk:LINE: msg" into line and msg when the message is about
 * the chunk; returns the line (0 if not). */
static int error_line(const char *msg, const char *chunk, const char **rest) {
  size_t cl = strlen(chunk);
  *rest = msg;
  if (strncmp(msg, chunk, cl) || msg[cl] != ':') return 0;
  char *end;
  long line = strtol(msg + cl + 1, &end, 10);
  if (end == msg + cl + 1 || *end != ':') return 0;
  *rest = end + 1;
  while (**rest == ' ') (*rest)++;
  return (int)line;
}

static const char *const skill_keys[] = {"name",   "description", "keywords", "examples", "tags",
                                         "prompt", "always",      "tools",    NULL};
static const char *const tool_keys[] = {"description", "params", "impact", "open_world",
                                        "run",         "returns", NULL};

static int known(const char *const *keys, const char *k) {
  for (int i = 0; keys[i]; i++)
    if (!strcmp(keys[i], k)) return 1;
  return 0;
}

/* Loads one skill.lua into k (name, description, lists, prompt, tools).
 * Returns 0 if the skill can be used, <0 if it must be skipped. */
static int load_lua(struct skillset *s, struct runtime *rt, const char *path, const char *shown,
                    const char *folder, struct skill *k) {
  char *text = NULL;
  size_t len = 0;
  struct skill_source *source = NULL; /* made for the first tool; this function holds one ref */
  struct err e;
  memset(&e, 0, sizeof e);
  if (util_read_file(path, MAX_SKILL_FILE, &text, &len, &e)) {
    problem(s, shown, 0, true, "cannot read: %s", e.msg);
    return -1;
  }
  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_SKILL, folder);
  if (ctx.limits.deadline_at <= 0)
    ctx.limits.deadline_at = util_monotonic() + ctx.limits.deadline_s;
  struct sandbox *sb = NULL;
  cJSON *mod = NULL;
  /* Loading only reads the table: no tools API, so listing or checking
   * skills can have no side effects (top-level code that calls tools.call
   * fails here with the undefined global named). Tools get the API when
   * they run. */
  int rc = sandbox_new(&ctx.limits, &sb, &e);
  if (!rc) {
    sandbox_set_output(sb, &rt->out);
    rc = sandbox_run_string(sb, text, len, shown, &mod, &e); /* the text just read */
  }
  sandbox_free(sb);
  if (rc) {
    const char *rest;
    int line = error_line(e.msg, shown, &rest);
    problem(s, shown, line, true, "%s", rest);
    free(text);
    cJSON_Delete(mod);
    return -1;
  }
  rc = -1;
  if (!cJSON_IsObject(mod)) {
    problem(s, shown, 0, true, "skill.lua must return a table (got %s)",
            !mod || cJSON_IsNull(mod) ? "nothing"
            : cJSON_IsArray(mod)      ? "a list"
                                      : "a value");
    goto out;
  }
  const cJSON *it;
  cJSON_ArrayForEach(it, mod) {
    if (!known(skill_keys, it->string))
      problem(s, shown, or_line(find_key_line(text, it->string, 1), 0), false,
              "unknown key '%s' in the skill table (known: name, description, keywords, "
              "examples, tags, prompt, always, tools)",
              it->string);
  }
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(mod, "name");
  k->line = find_key_line(text, "name", 1);
  if (!cJSON_IsString(name)) {
    problem(s, shown, k->line, true, "the skill table needs a 'name' string");
    goto out;
  }
  if (!skills_valid_name(name->valuestring)) {
    problem(s, shown, k->line, true,
            "skill name '%s' is not valid: use [a-z][a-z0-9_-]*, at most 64 characters",
            name->valuestring);
    goto out;
  }
  if (!strcmp(name->valuestring, SKILLS_RESERVED)) {
    problem(s, shown, k->line, true,
            "skill name '%s' is reserved for the built-in skills.find and skills.load",
            name->valuestring);
    goto out;
  }
  if (!strcmp(name->valuestring, "mcp")) { /* mcp.<server>.<tool> are MCP servers' tools */
    problem(s, shown, k->line, true,
            "skill name 'mcp' is reserved for the tools of MCP servers (mcp.SERVER.TOOL)");
    goto out;
  }
  k->name = xstrdup(name->valuestring);
  const cJSON *desc = cJSON_GetObjectItemCaseSensitive(mod, "description");
  if (desc && !cJSON_IsString(desc))
    problem(s, shown, find_key_line(text, "description", 1), false,
            "'description' must be a string");
  else if (desc)
    k->description = xstrdup(desc->valuestring);
  k->keywords = json_strings(s, cJSON_GetObjectItemCaseSensitive(mod, "keywords"), "keywords",
                             shown, find_key_line(text, "keywords", 1));
  k->examples = json_strings(s, cJSON_GetObjectItemCaseSensitive(mod, "examples"), "examples",
                             shown, find_key_line(text, "examples", 1));
  k->tags = json_strings(s, cJSON_GetObjectItemCaseSensitive(mod, "tags"), "tags", shown,
                         find_key_line(text, "tags", 1));
  const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(mod, "prompt");
  if (prompt && !cJSON_IsString(prompt))
    problem(s, shown, find_key_line(text, "prompt", 1), false, "'prompt' must be a string");
  k->prompt = xstrdup(cJSON_IsString(prompt) ? prompt->valuestring : "");
  const cJSON *always = cJSON_GetObjectItemCaseSensitive(mod, "always");
  if (always && !cJSON_IsBool(always))
    problem(s, shown, find_key_line(text, "always", 1), false, "'always' must be true or false");
  k->always = cJSON_IsTrue(always);
  k->tools = list_new();
  k->tool_descriptions = list_new();

  const cJSON *tools = cJSON_GetObjectItemCaseSensitive(mod, "tools");
  int tools_line = or_line(find_key_line(text, "tools", 1), 1);
  if (tools && !cJSON_IsObject(tools) && !(cJSON_IsArray(tools) && !tools->child)) {
    problem(s, shown, tools_line, false,
            "'tools' must be a table of named tools (tools = { name = { ... } })");
    tools = NULL;
  }
  const cJSON *tv;
  cJSON_ArrayForEach(tv, tools) {
    const char *tn = tv->string;
    int tl = or_line(find_key_line(text, tn, tools_line), tools_line);
    if (!skills_valid_name(tn)) {
      problem(s, shown, tl, true, "tool name '%s' is not valid: use [a-z][a-z0-9_-]*", tn);
      continue;
    }
    if (!cJSON_IsObject(tv)) {
      problem(s, shown, tl, true, "tool '%s' must be a table", tn);
      continue;
    }
    int bad = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, tv) {
      if (!known(tool_keys, f->string))
        problem(s, shown, or_line(find_key_line(text, f->string, tl), tl), false,
                "tool '%s': unknown key '%s' (known: description, params, impact, "
                "open_world, run)",
                tn, f->string);
    }
    const cJSON *td = cJSON_GetObjectItemCaseSensitive(tv, "description");
    if (!cJSON_IsString(td) || !td->valuestring[0])
      problem(s, shown, or_line(find_key_line(text, "description", tl), tl), false,
              "tool '%s' needs a 'description' string (the model reads it)", tn);
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(tv, "params");
    int pl = or_line(find_key_line(text, "params", tl), tl);
    cJSON *schema = NULL;
    if (params) {
      struct err se;
      memset(&se, 0, sizeof se);
      const cJSON *ty =
          cJSON_IsObject(params) ? cJSON_GetObjectItemCaseSensitive(params, "type") : NULL;
      char where[256];
      snprintf(where, sizeof where, "%s.%s params", k->name, tn);
      if (!cJSON_IsObject(params) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "object")) {
        problem(s, shown, pl, true,
                "tool '%s': params must be an object schema ({ type = \"object\", "
                "properties = { ... } })",
                tn);
        bad = 1;
      } else {
        schema = cJSON_Duplicate(params, 1);
        /* An empty Lua table converts to []; in a schema it means {}. */
        cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
        if (cJSON_IsArray(props) && !props->child)
          cJSON_ReplaceItemInObjectCaseSensitive(schema, "properties", cJSON_CreateObject());
        if (schema_check(schema, where, &se)) {
          /* Point at the keyword at fault when it is on its own line. */
          int kl = se.subject[0] ? find_key_line(text, se.subject, pl) : 0;
          problem(s, shown, kl ? kl : pl, true, "tool '%s': %s", tn, se.msg);
          bad = 1;
        }
      }
    }
    enum impact imp = IMPACT_MEDIUM;
    const cJSON *ti = cJSON_GetObjectItemCaseSensitive(tv, "impact");
    if (ti && (!cJSON_IsString(ti) || impact_parse(ti->valuestring, &imp))) {
      problem(s, shown, or_line(find_key_line(text, "impact", tl), tl), true,
              "tool '%s': unknown impact %s%s%s (expected read, low, medium, high or critical)", tn,
              cJSON_IsString(ti) ? "'" : "",
              cJSON_IsString(ti) ? ti->valuestring : "(not a string)",
              cJSON_IsString(ti) ? "'" : "");
      bad = 1;
    }
    const cJSON *ow = cJSON_GetObjectItemCaseSensitive(tv, "open_world");
    if (ow && !cJSON_IsBool(ow)) {
      problem(s, shown, or_line(find_key_line(text, "open_world", tl), tl), false,
              "tool '%s': open_world must be true or false", tn);
    }
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(tv, "run");
    const cJSON *fl =
        cJSON_IsObject(run) ? cJSON_GetObjectItemCaseSensitive(run, "$function") : NULL;
    if (!fl) {
      problem(s, shown, run ? or_line(find_key_line(text, "run", tl), tl) : tl, true,
              "tool '%s' has no run function (run = function(args, call) ... end)", tn);
      bad = 1;
    }
    if (bad) {
      cJSON_Delete(schema);
      continue;
    }
    char full[256];
    snprintf(full, sizeof full, "%s.%s", k->name, tn);
    char src[1200];
    snprintf(src, sizeof src, "%s:%d", shown, fl->valueint ? fl->valueint : tl);
    struct lua_tool *u = xcalloc(1, sizeof *u);
    u->skill = xstrdup(k->name);
    u->tool = xstrdup(tn);
    u->chunk = xstrdup(shown);
    if (!source) source = skills__source_new(text, len);
    u->src = skills__source_ref(source);
    struct err te;
    memset(&te, 0, sizeof te);
    if (toolreg_add_parsed(rt->tools, full, cJSON_IsString(td) ? td->valuestring : "", schema, imp,
                           cJSON_IsTrue(ow), skills__lua_tool_handler, u, skills__lua_tool_free, src, k->name,
                           &te)) {
      if (!strcmp(te.code, "wire_name_collision")) /* the message names the tool already */
        problem(s, shown, tl, true, "%s", te.msg);
      else
        problem(s, shown, tl, true, "tool '%s': %s", full, te.msg);
      continue;
    }
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(tv, "returns");
    if (cJSON_IsObject(rs))
      toolreg_set_returns(rt->tools, full, cJSON_Duplicate(rs, 1));
    else if (rs)
      problem(s, shown, or_line(find_key_line(text, "returns", tl), tl), false,
              "tool '%s': returns must be a table (a JSON Schema of the result); ignored", tn);
    list_push(&k->tools, full);
    list_push(&k->tool_descriptions, cJSON_IsString(td) ? td->valuestring : "");
  }
  /* tools in name order (a Lua table has none) */
  size_t nt = list_len(k->tools);
  for (size_t i = 1; i < nt; i++)
    for (size_t j = i; j > 0 && strcmp(k->tools[j - 1], k->tools[j]) > 0; j--) {
      char *t = k->tools[j];
      k->tools[j] = k->tools[j - 1];
      k->tools[j - 1] = t;
      t = k->tool_descriptions[j];
      k->tool_descriptions[j] = k->tool_descriptions[j - 1];
      k->tool_descriptions[j - 1] = t;
    }
  rc = 0;
out:
  skills__source_unref(source);
  cJSON_Delete(mod);
  free(text);
  return rc;
}

/* ---- SKILL.md ---------------------------------------------------------- */

struct mdrep {
  struct skillset *s;
  const char *file;
};

static void md_report(void *ud, int line, bool fatal, const char *msg) {
  struct mdrep *r = ud;
  problem(r->s, r->file, line, fatal, "%s", msg);
}

static int load_md(struct skillset *s, const char *path, const char *shown, const char *folder,
                   struct skill *k, bool has_lua) {
  char *text = NULL;
  size_t len = 0;
  struct err e;
  memset(&e, 0, sizeof e);
  if (util_read_file(path, MAX_SKILL_FILE, &text, &len, &e)) {
    problem(s, shown, 0, true, "cannot read: %s", e.msg);
    return -1;
  }
  struct mdrep r = {s, shown};
  struct skillmd *m = NULL;
  int rc = skillmd_parse(text, len, shown, md_report, &r, &m, &e);
  free(text);
  if (rc) return -1; /* already reported */
  rc = -1;
  if (!m->name) {
    problem(s, shown, 2, !has_lua, "the front matter needs a 'name'");
    if (!has_lua) goto out;
  } else if (!skills_valid_name(m->name)) {
    problem(s, shown, m->name_line, !has_lua,
            "skill name '%s' is not valid: use lowercase letters, digits, '-' and '_', "
            "at most 64 characters",
            m->name);
    if (!has_lua) goto out;
  } else if (!strcmp(m->name, SKILLS_RESERVED)) {
    problem(s, shown, m->name_line, true,
            "skill name '%s' is reserved for the built-in skills.find and skills.load", m->name);
    goto out;
  } else if (has_lua && k->name && strcmp(k->name, m->name)) {
    problem(s, shown, m->name_line, false, "name '%s' differs from skill.lua's name '%s'", m->name,
            k->name);
  } else if (strcmp(m->name, folder)) {
    problem(s, shown, m->name_line, false,
            "name '%s' does not match its folder '%s' (Agent Skills rule; loaded anyway)", m->name,
            folder);
  }
  const char *d = m->description;
  if (!has_lua || !k->description || !k->description[0]) {
    if (!d || !d[0]) {
      problem(s, shown, or_line(m->description_line, 2), true,
              "the front matter needs a non-empty 'description' (selection reads it)");
      goto out;
    }
  }
  if (d && utf8_chars(d) > MAX_DESCRIPTION)
    problem(s, shown, m->description_line, false,
            "description is %zu characters; the Agent Skills limit is %d", utf8_chars(d),
            MAX_DESCRIPTION);
  if (!has_lua) {
    k->name = xstrdup(m->name);
    k->line = m->name_line;
    k->description = xstrdup(d);
    k->keywords = list_dup(m->keywords);
    k->tags = list_dup(m->tags);
    k->examples = list_dup(m->examples);
    k->prompt = xstrdup(m->body);
    k->always = m->always;
    k->tools = list_new();
    k->tool_descriptions = list_new();
  } else {
    /* skill.lua defines the skill; SKILL.md adds its text. */
    if ((!k->description || !k->description[0]) && d) {
      free(k->description);
      k->description = xstrdup(d);
    }
    for (size_t i = 0; m->keywords[i]; i++) list_push(&k->keywords, m->keywords[i]);
    for (size_t i = 0; m->tags[i]; i++) list_push(&k->tags, m->tags[i]);
    for (size_t i = 0; m->examples[i]; i++) list_push(&k->examples, m->examples[i]);
    k->always = k->always || m->always;
    struct sbuf b = {0};
    sbuf_puts(&b, k->prompt ? k->prompt : "");
    if (b.len && m->body[0]) sbuf_puts(&b, "\n\n");
    sbuf_puts(&b, m->body);
    free(k->prompt);
    k->prompt = sbuf_take(&b);
  }
  k->md_source = xstrdup(shown);
  rc = 0;
out:
  skillmd_free(m);
  return rc;
}

/* ---- loading ----------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}
static int cmp_skill(const void *a, const void *b) {
  const struct skill *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  return x->line_order < y->line_order ? -1 : x->line_order > y->line_order;
}

static bool is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static void load_folder(struct skillset *s, struct runtime *rt, const char *dir, const char *prefix,
                        const char *folder) {
  char base[4096], lua[4200], md[4200], shown_lua[1024], shown_md[1024];
  snprintf(base, sizeof base, "%s/%s", dir, folder);
  snprintf(lua, sizeof lua, "%s/skill.lua", base);
  snprintf(md, sizeof md, "%s/SKILL.md", base);
  snprintf(shown_lua, sizeof shown_lua, "%s/%s/skill.lua", prefix, folder);
  snprintf(shown_md, sizeof shown_md, "%s/%s/SKILL.md", prefix, folder);
  bool has_lua = is_file(lua), has_md = is_file(md);
  if (!has_md) { /* the reference validator also accepts skill.md */
    snprintf(md, sizeof md, "%s/skill.md", base);
    snprintf(shown_md, sizeof shown_md, "%s/%s/skill.md", prefix, folder);
    has_md = is_file(md);
  }
  if (!has_lua && !has_md) {
    char shown[1024];
    snprintf(shown, sizeof shown, "%s/%s", prefix, folder);
    problem(s, shown, 0, true, "no skill.lua or SKILL.md in this skill folder");
    return;
  }
  struct skill k;
  memset(&k, 0, sizeof k);
  if (has_lua) {
    if (!rt) {
      problem(s, shown_lua, 0, true, "Lua skills need a workspace runtime (not loaded here)");
      has_lua = false;
      if (!has_md) return;
    } else if (load_lua(s, rt, lua, shown_lua, folder, &k)) {
      skill_clear(&k);
      return;
    }
  }
  if (has_md && load_md(s, md, shown_md, folder, &k, has_lua)) {
    if (!has_lua) {
      skill_clear(&k);
      return;
    }
  }
  k.source = xstrdup(has_lua ? shown_lua : shown_md);
  if (!k.description) k.description = xstrdup("");
  if (!k.description[0] && has_lua)
    problem(s, k.source, k.line, false,
            "skill '%s' has no description: selection can only match its keywords", k.name);
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 16;
    s->skills = xrealloc(s->skills, sizeof *s->skills * s->cap);
  }
  s->skills[s->n++] = k;
}

int skillset_load_dir(const char *skills_dir, const char *display_prefix, struct runtime *rt,
                      const struct sel_params *p, struct embedder *emb, struct store *st,
                      struct skillset **out, struct err *e) {
  *out = NULL;
  struct skillset *s = xcalloc(1, sizeof *s);
  pthread_mutex_init(&s->index_mu, NULL);
  if (p)
    s->params = *p;
  else
    sel_params_default(&s->params);
  DIR *d = opendir(skills_dir);
  if (!d && errno != ENOENT) {
    int en = errno;
    skillset_free(s);
    return err_set(e, ERR_IO, "io", "%s: cannot open the skills folder: %s", display_prefix,
                   strerror(en));
  }
  char **names = NULL;
  size_t nn = 0, cap = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char full[4096];
    struct stat stt;
    snprintf(full, sizeof full, "%s/%s", skills_dir, de->d_name);
    if (stat(full, &stt) || !S_ISDIR(stt.st_mode)) continue;
    if (nn == cap) names = xrealloc(names, sizeof *names * (cap = cap ? cap * 2 : 64));
    names[nn++] = xstrdup(de->d_name);
  }
  if (d) closedir(d);
  if (nn > 1) qsort(names, nn, sizeof *names, cmp_str);
  for (size_t i = 0; i < nn; i++) {
    load_folder(s, rt, skills_dir, display_prefix, names[i]);
    free(names[i]);
  }
  free(names);
  /* Name order; on equal names folder order decides (the sort is made
   * stable by the load position), and later duplicates are dropped. Lua
   * tools of a dropped duplicate are already registered under its name
   * only if the registry accepted them, i.e. they did not clash. */
  for (size_t i = 0; i < s->n; i++) s->skills[i].line_order = i;
  if (s->n > 1) qsort(s->skills, s->n, sizeof *s->skills, cmp_skill);
  size_t kept = 0;
  for (size_t i = 0; i < s->n; i++) {
    if (kept && !strcmp(s->skills[kept - 1].name, s->skills[i].name)) {
      problem(s, s->skills[i].source, s->skills[i].line, true,
              "duplicate skill name '%s' (already defined in %s)", s->skills[i].name,
              s->skills[kept - 1].source);
      skill_clear(&s->skills[i]);
      continue;
    }
    s->skills[kept++] = s->skills[i];
  }
  s->n = kept;
  for (size_t i = 0; i < s->n; i++) { /* advice for the skills that stay */
    const struct skill *k = &s->skills[i];
    if (!k->examples || !k->examples[0]) {
      if (s->nh == s->caph) {
        s->caph = s->caph ? s->caph * 2 : 16;
        s->hints = xrealloc(s->hints, sizeof *s->hints * s->caph);
      }
      struct sbuf b = {0};
      sbuf_printf(&b,
                  "skill '%s' has no examples: two or three requests a user would type "
                  "(examples = { ... } in skill.lua, `examples:` in SKILL.md) help selection find "
                  "it (two per skill took the right skill into the prompt for 54%% of MetaTool "
                  "requests instead of 39%%, bench/README.md)",
                  k->name);
      s->hints[s->nh++] = (struct skill_problem){xstrdup(k->source), k->line, sbuf_take(&b), false};
    }
  }

  /* the selection index (documents in skill order) is built on first use */
  s->emb = emb;
  s->st = st;
  *out = s;
  return 0;
}

int skills_load(struct runtime *rt, struct skillset **out, struct err *e) {
  return skills_load_from(rt, NULL, out, e);
}

int skills_load_from(struct runtime *rt, const char *from, struct skillset **out, struct err *e) {
  *out = NULL;
  struct sel_params p;
  if (sel_params_from_config(rt->cfg, &p, e)) return ERR_INVALID;
  struct embedder *emb = NULL;
  if (embedder_from_config(rt->cfg, &emb, e)) return ERR_INVALID;
  struct store *st = NULL;
  struct err se;
  memset(&se, 0, sizeof se);
  char *store_warn = NULL;
  /* Only a model behind HTTP is worth caching: the builtin embedding is
   * faster to recompute than to look up (bench_select measures both), and
   * not opening the store keeps workspaces without one free of state.db. */
  if (embedder_kind(emb) == EMBED_OPENAI && runtime_store(rt, &st, &se)) {
    st = NULL; /* no cache: embeddings are recomputed, selection still works */
    store_warn = xstrdup(se.msg);
  }
  char dir[4200];
  if (from)
    snprintf(dir, sizeof dir, "%s", from);
  else
    snprintf(dir, sizeof dir, "%s/skills", rt->workspace);
  int rc = skillset_load_dir(dir, "skills", rt, &p, emb, st, out, e);
  if (rc) {
    embedder_free(emb);
    free(store_warn);
    return rc;
  }
  (*out)->own_emb = emb;
  if (p.recovery && skills_tools_register(rt, e)) {
    skillset_free(*out);
    *out = NULL;
    return ERR_FAIL;
  }
  if (store_warn && !(*out)->warning) {
    struct sbuf b = {0};
    sbuf_printf(&b, "embedding cache unavailable (%s)", store_warn);
    (*out)->warning = sbuf_take(&b);
  }
  free(store_warn);
  return 0;
}

int skills_ensure(struct runtime *rt, struct err *e) {
  if (rt->skills) return 0;
  return skills_load(rt, &rt->skills, e);
}

/* ---- selection --------------------------------------------------------- */

static int picks(struct skillset *s, int select, const char *message, enum sel_mode mode,
                 struct skill_pick *out, size_t max, size_t *n, int *degraded, struct err *warn) {
  *n = 0;
  if (degraded) *degraded = 0;
  if (!s || !max) return 0;
  index_ensure(s);
  struct sel_hit stack[32];
  struct sel_hit *hits = max <= 32 ? stack : xmalloc(sizeof *hits * max);
  size_t nh = 0;
  if (select)
    selector_select(s->sel, message, hits, max, &nh, degraded, warn);
  else
    selector_rank(s->sel, message, mode, hits, max, &nh, degraded, warn);
  for (size_t i = 0; i < nh; i++) {
    out[i].skill = &s->skills[hits[i].doc];
    out[i].hit = hits[i];
  }
  *n = nh;
  if (hits != stack) free(hits);
  return 0;
}

int skills_select(struct skillset *s, const char *message, struct skill_pick *out, size_t max,
                  size_t *n, int *degraded, struct err *warn) {
  return picks(s, 1, message, SEL_FUSED, out, max, n, degraded, warn);
}

int skills_rank(struct skillset *s, const char *message, enum sel_mode mode, struct skill_pick *out,
                size_t max, size_t *n, int *degraded, struct err *warn) {
  return picks(s, 0, message, mode, out, max, n, degraded, warn);
}

void skills_prompt(const struct skill_pick *picks, size_t n, struct sbuf *b) {
  for (size_t i = 0; i < n; i++) {
    const struct skill *k = picks[i].skill;
    sbuf_printf(b, "## Skill: %s\n%s\n\n", k->name, k->description ? k->description : "");
    if (k->prompt && k->prompt[0]) {
      sbuf_puts(b, k->prompt);
      size_t l = strlen(k->prompt);
      sbuf_puts(b, k->prompt[l - 1] == '\n' ? "\n" : "\n\n");
    }
  }
}

bool skills_offers_tool(const struct skill_pick *picks, size_t n, const struct tool *t) {
  if (!t->skill) return true;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(picks[i].skill->name, t->skill)) return true;
  return false;
}
