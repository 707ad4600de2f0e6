/* config.c - loads and checks luagent.lua. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util.h"

/* Every top-level key luagent understands, with its JSON type. A module that
 * adds a key adds it here, so typos are caught in one place. */
static const struct {
  const char *key;
  const char *type; /* object, array, string, number, boolean, any */
} known_keys[] = {
    {"limits", "object"},          {"http_allow", "array"},       {"fs", "object"},
    {"rules", "array"},            {"approver", "string"},        {"approval_threshold", "string"},
    {"approval_timeout_s", "number"}, {"taint", "any"},           {"audit", "object"},
    {"secrets_key_env", "string"}, {"providers", "array"},        {"embeddings", "object"},
    {"selection", "object"},       {"agents", "object"},          {"reflexion", "object"},
    {"react", "object"},           {"max_tool_result_chars", "number"}, {"daemon", "object"},
    {"memory", "object"},          {"context", "object"},         {"system_prompt", "string"},
    {"name", "string"},            {"code_mode", "object"},       {"test_paths", "array"},
    {"secrets", "object"},         {"mcp", "object"},          {"cluster", "object"},
};

/* Each limit with the largest value it may take: far past any real need,
 * and small enough that its conversion to bytes or an integer is defined
 * (a double past the target type's range is undefined behaviour in C). */
static const struct {
  const char *key;
  const char *type;
  double max;
} limit_keys[] = {{"memory_mb", "number", 1048576},  {"instructions", "number", 1e15},
                  {"deadline_s", "number", 31536000}, {"max_depth", "number", 1000000},
                  {"output_kb", "number", 1048576},   {"tool_calls", "number", 1e12}};

static const char *type_of(const cJSON *v) {
  if (cJSON_IsObject(v)) return "object";
  if (cJSON_IsArray(v)) return "array";
  if (cJSON_IsString(v)) return "string";
  if (cJSON_IsNumber(v)) return "number";
  if (cJSON_IsBool(v)) return "boolean";
  return "null";
}

/* The first line at or after line `from` that mentions key as a table
 * field ("key =", "["key"] ="), or with as_string the string literal
 * "key" or 'key'; 0 when none. Nested keys are found by searching for each
 * part after the line of the one before (secrets, then API, then origins). */
static int line_of_from(const char *path, const char *key, int from, int as_string) {
  if (!path || !*path || !key || !*key) return 0;
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[4096];
  int n = 0, found = 0;
  size_t klen = strlen(key);
  while (!found && fgets(line, sizeof line, f)) {
    n++;
    if (n < from) continue;
    if (as_string) {
      for (char *p = line; (p = strstr(p, key)); p++)
        if (p > line && (p[-1] == '"' || p[-1] == '\'') && p[klen] == p[-1]) {
          found = n;
          break;
        }
      continue;
    }
    char *comment = strstr(line, "--"); /* a key named in a comment is not the key */
    if (comment) *comment = 0;
    for (char *p = line; (p = strstr(p, key)); p++) {
      if (p > line && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) continue;
      char *q = p + klen;
      if (*q == '"' || *q == '\'') q++; /* ["key"] = */
      if (*q == ']') q++;
      while (*q == ' ' || *q == '\t') q++;
      if (*q == '=' && q[1] != '=') {
        found = n;
        break;
      }
    }
  }
  fclose(f);
  return found;
}

int config_line_of(const char *path, const char *key) { return line_of_from(path, key, 1, 0); }

/* Fails with "luagent.lua:LINE: key 'path': ..." where path is the whole
 * key path ("limits.memory_mb"); the line is that of its last part. */
static int key_error(const struct config *c, const char *path, struct err *e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int key_error(const struct config *c, const char *path, struct err *e, const char *fmt, ...) {
  char msg[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *last = strrchr(path, '.');
  int line = 0;
  if (last) { /* the part's line after its parent's ("limits", then "memory_mb") */
    char top[128];
    snprintf(top, sizeof top, "%.*s", (int)(last - path), path);
    int base = config_line_of(c->path, top);
    line = line_of_from(c->path, last + 1, base ? base : 1, 0);
  } else {
    line = config_line_of(c->path, path);
  }
  if (line) return err_set(e, ERR_INVALID, "config", "luagent.lua:%d: key '%s': %s", line, path, msg);
  return err_set(e, ERR_INVALID, "config", "luagent.lua: key '%s': %s", path, msg);
}

/* "; did you mean 'limits.memory_mb'?" into out ("" when nothing is close). */
static void suggest(const char *prefix, const char *word, const char *const *known, size_t n,
                    char *out, size_t size) {
  const char *near = util_nearest(word, known, n);
  if (near)
    snprintf(out, size, "; did you mean '%s%s%s'?", prefix ? prefix : "", prefix ? "." : "", near);
  else
    out[0] = 0;
}

/* Functions are marked {"$function": line} by the sandbox; none belong in
 * the config. */
static int find_function(const cJSON *v, const char **where) {
  for (const cJSON *c = v ? v->child : NULL; c; c = c->next) {
    if (cJSON_IsObject(c) && cJSON_GetObjectItemCaseSensitive(c, "$function")) {
      *where = c->string ? c->string : (v->string ? v->string : "?");
      return 1;
    }
    if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && find_function(c, where)) return 1;
  }
  return 0;
}

static int check_type(const struct config *c, const char *key, cJSON *v, const char *want,
                      struct err *e) {
  if (!strcmp(want, "any")) return 0;
  /* Lua's {} is an empty object to the converter; accept it as a list. */
  if (!strcmp(want, "array") && cJSON_IsObject(v) && !v->child) return 0;
  if (strcmp(type_of(v), want) != 0)
    return key_error(c, key, e, "expected %s, got %s", want, type_of(v));
  return 0;
}

/* Fails with "luagent.lua:LINE: MESSAGE" (or without LINE when 0). */
static int line_error(const struct config *c, int line, struct err *e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int line_error(const struct config *c, int line, struct err *e, const char *fmt, ...) {
  (void)c;
  char msg[800];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (line) return err_set(e, ERR_INVALID, "config", "luagent.lua:%d: %s", line, msg);
  return err_set(e, ERR_INVALID, "config", "luagent.lua: %s", msg);
}

/* http_allow = { "host", "https://host:port", ... }: each entry parsed into
 * an origin pattern (origin.h says what each form allows). */
static int apply_http_allow(struct config *c, struct err *e) {
  const cJSON *allow = cJSON_GetObjectItemCaseSensitive(c->root, "http_allow");
  int n = allow ? cJSON_GetArraySize(allow) : 0, j = 0;
  int base = config_line_of(c->path, "http_allow");
  c->allow = xcalloc((size_t)n + 1, sizeof *c->allow);
  for (const cJSON *h = allow ? allow->child : NULL; h; h = h->next) {
    if (!cJSON_IsString(h))
      return key_error(c, "http_allow", e,
                       "entries must be strings: a host pattern or [scheme://]host[:port]");
    struct err pe = {0};
    if (origin_pattern_parse(h->valuestring, &c->allow[j], &pe)) {
      int line = line_of_from(c->path, h->valuestring, base, 1);
      return line_error(c, line ? line : base, e, "%s", pe.msg);
    }
    j++;
  }
  c->n_allow = (size_t)j;
  return 0;
}

/* The grammar of secrets_name_valid (secrets.h, a layer above config). */
static int secret_name_ok(const char *name) {
  if (!(isalpha((unsigned char)name[0]) || name[0] == '_') || strlen(name) > 64) return 0;
  for (const char *p = name + 1; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.' && *p != '-') return 0;
  return 1;
}

/* secrets = { NAME = { origins = { "https://host[:port]", ... } } }: the
 * only origins each secret may be sent to. Declared here, in the file an
 * operator reviews, rather than stored beside the value, so where a secret
 * can go is visible in one place and changes with the config's history. */
static int apply_secrets(struct config *c, struct err *e) {
  const cJSON *sec = cJSON_GetObjectItemCaseSensitive(c->root, "secrets");
  int base = config_line_of(c->path, "secrets");
  int n = sec ? cJSON_GetArraySize(sec) : 0;
  c->secrets = xcalloc((size_t)n + 1, sizeof *c->secrets);
  for (const cJSON *s = sec ? sec->child : NULL; s; s = s->next) {
    int sline = line_of_from(c->path, s->string, base, 0);
    if (!sline) sline = base;
    if (!secret_name_ok(s->string))
      return line_error(c, sline, e,
                        "secrets.%s: invalid secret name (letters, digits, _ . -, at most 64, "
                        "starting with a letter or _)",
                        s->string);
    if (!cJSON_IsObject(s))
      return line_error(c, sline, e,
                        "secrets.%s: expected a table { origins = { \"https://host\" } }, got %s",
                        s->string, type_of(s));
    struct config_secret *cs = &c->secrets[c->n_secrets++];
    cs->name = xstrdup(s->string);
    const cJSON *origins = NULL;
    for (const cJSON *k = s->child; k; k = k->next) {
      if (strcmp(k->string, "origins") != 0) {
        int kl = line_of_from(c->path, k->string, sline, 0);
        return line_error(c, kl ? kl : sline, e, "secrets.%s.%s: unknown key (known: origins)",
                          s->string, k->string);
      }
      origins = k;
    }
    int oline = origins ? line_of_from(c->path, "origins", sline, 0) : 0;
    if (!oline) oline = sline;
    if (!origins || !cJSON_IsArray(origins) || cJSON_GetArraySize(origins) == 0)
      return line_error(c, oline, e,
                        "secrets.%s.origins: expected a non-empty list of origins such as "
                        "{ \"https://api.example.com\" }%s",
                        s->string, origins ? "" : " (missing)");
    cs->origins = xcalloc((size_t)cJSON_GetArraySize(origins), sizeof *cs->origins);
    for (const cJSON *o = origins->child; o; o = o->next) {
      struct err pe = {0};
      if (!cJSON_IsString(o))
        return line_error(c, oline, e, "secrets.%s.origins: entries must be strings, got %s",
                          s->string, type_of(o));
      if (origin_parse(o->valuestring, &cs->origins[cs->n_origins], &pe)) {
        int vl = line_of_from(c->path, o->valuestring, oline, 1);
        return line_error(c, vl ? vl : oline, e, "secrets.%s.origins: %s", s->string, pe.msg);
      }
      cs->n_origins++;
    }
  }
  return 0;
}

static int apply(struct config *c, struct err *e) {
  cJSON *root = c->root;
  const char *fn;
  if (find_function(root, &fn))
    return key_error(c, fn, e, "functions are not allowed in the config (hooks go in hooks.lua)");
  for (cJSON *k = root->child; k; k = k->next) {
    size_t i;
    for (i = 0; i < sizeof known_keys / sizeof known_keys[0]; i++)
      if (!strcmp(k->string, known_keys[i].key)) break;
    if (i == sizeof known_keys / sizeof known_keys[0]) {
      const char *names[sizeof known_keys / sizeof known_keys[0]];
      for (size_t j = 0; j < sizeof known_keys / sizeof known_keys[0]; j++)
        names[j] = known_keys[j].key;
      char hint[200];
      suggest(NULL, k->string, names, sizeof names / sizeof names[0], hint, sizeof hint);
      return key_error(c, k->string, e, "unknown key%s", hint);
    }
    if (check_type(c, k->string, k, known_keys[i].type, e)) return ERR_INVALID;
  }
  sb_limits_default(&c->limits);
  c->max_script_tool_calls = CONFIG_SCRIPT_TOOL_CALLS;
  const cJSON *lim = cJSON_GetObjectItemCaseSensitive(root, "limits");
  for (const cJSON *k = lim ? lim->child : NULL; k; k = k->next) {
    size_t i;
    for (i = 0; i < sizeof limit_keys / sizeof limit_keys[0]; i++)
      if (!strcmp(k->string, limit_keys[i].key)) break;
    char path[200];
    snprintf(path, sizeof path, "limits.%s", k->string);
    if (i == sizeof limit_keys / sizeof limit_keys[0]) {
      const char *names[sizeof limit_keys / sizeof limit_keys[0]];
      for (size_t j = 0; j < sizeof limit_keys / sizeof limit_keys[0]; j++)
        names[j] = limit_keys[j].key;
      char hint[200];
      suggest("limits", k->string, names, sizeof names / sizeof names[0], hint, sizeof hint);
      return key_error(c, path, e,
                       "unknown key (known: memory_mb, instructions, deadline_s, max_depth, "
                       "output_kb, tool_calls)%s",
                       hint);
    }
    if (!cJSON_IsNumber(k) || k->valuedouble <= 0)
      return key_error(c, path, e, "expected a positive number, got %s", type_of(k));
    double d = k->valuedouble;
    if (!(d <= limit_keys[i].max))
      return key_error(c, path, e, "expected at most %.15g, got %.15g", limit_keys[i].max, d);
    if (!strcmp(k->string, "memory_mb")) c->limits.memory_bytes = (size_t)(d * 1048576.0);
    else if (!strcmp(k->string, "instructions")) c->limits.instructions = (uint64_t)d;
    else if (!strcmp(k->string, "deadline_s")) c->limits.deadline_s = d;
    else if (!strcmp(k->string, "max_depth")) c->limits.max_depth = (int)d;
    else if (!strcmp(k->string, "output_kb")) c->limits.output_bytes = (size_t)(d * 1024.0);
    else if (!strcmp(k->string, "tool_calls")) c->max_script_tool_calls = (unsigned long)d;
  }
  c->max_output_bytes = c->limits.output_bytes;
  if (apply_http_allow(c, e) || apply_secrets(c, e)) return ERR_INVALID;
  double fsmax = config_number(c, "fs.max_bytes", 1048576);
  if (!(fsmax >= 1 && fsmax <= 1e12))
    return key_error(c, "fs.max_bytes", e, "expected a number of bytes from 1 to 1e12, got %.15g",
                     fsmax);
  c->fs_max_bytes = (size_t)fsmax;
  return 0;
}

static struct config *config_empty(void) {
  struct config *c = xcalloc(1, sizeof *c);
  c->root = cJSON_CreateObject();
  sb_limits_default(&c->limits);
  c->allow = xcalloc(1, sizeof *c->allow);
  c->secrets = xcalloc(1, sizeof *c->secrets);
  c->fs_max_bytes = 1048576;
  c->max_output_bytes = c->limits.output_bytes;
  c->max_script_tool_calls = CONFIG_SCRIPT_TOOL_CALLS;
  return c;
}

int config_eval_file(const char *path, const char *chunkname, cJSON **out, struct err *e) {
  /* A sandbox with no tools and tight limits: the file is data. */
  struct sb_limits lim;
  sb_limits_default(&lim);
  lim.memory_bytes = (size_t)16 << 20;
  lim.instructions = 10000000;
  lim.deadline_s = 5;
  struct sandbox *sb = NULL;
  *out = NULL;
  int rc = sandbox_new(&lim, &sb, e);
  if (!rc) rc = sandbox_run_file(sb, path, chunkname, out, e);
  sandbox_free(sb);
  return rc;
}

int config_load_file(const char *path, struct config **out, struct err *e) {
  *out = NULL;
  struct config *c = config_empty();
  if (!path) {
    *out = c;
    return 0;
  }
  snprintf(c->path, sizeof c->path, "%s", path);
  cJSON *v = NULL;
  int rc = config_eval_file(path, "luagent.lua", &v, e);
  if (rc) goto fail;
  if (!v || !cJSON_IsObject(v)) {
    rc = err_set(e, ERR_INVALID, "config", "luagent.lua: must return a table, got %s",
                 v ? type_of(v) : "nothing");
    cJSON_Delete(v);
    goto fail;
  }
  cJSON_Delete(c->root);
  c->root = v;
  free(c->allow);
  c->allow = NULL;
  free(c->secrets);
  c->secrets = NULL;
  if ((rc = apply(c, e))) goto fail;
  *out = c;
  return 0;
fail:
  config_free(c);
  return rc ? rc : ERR_INVALID;
}

int config_load(const char *workspace, struct config **out, struct err *e) {
  char path[4200];
  snprintf(path, sizeof path, "%s/luagent.lua", workspace);
  struct stat st;
  if (stat(path, &st) != 0) {
    if (errno == ENOENT) return config_load_file(NULL, out, e);
    return err_set(e, ERR_IO, "config", "luagent.lua: %s", strerror(errno));
  }
  return config_load_file(path, out, e);
}

void config_free(struct config *c) {
  if (!c) return;
  cJSON_Delete(c->root);
  free(c->allow);
  for (size_t i = 0; i < c->n_secrets; i++) {
    free(c->secrets[i].name);
    free(c->secrets[i].origins);
  }
  free(c->secrets);
  free(c);
}

const struct config_secret *config_secret(const struct config *c, const char *name) {
  for (size_t i = 0; c && name && i < c->n_secrets; i++)
    if (!strcmp(c->secrets[i].name, name)) return &c->secrets[i];
  return NULL;
}

int config_http_allowed(const struct config *c, const struct origin *o) {
  for (size_t i = 0; c && i < c->n_allow; i++)
    if (origin_pattern_match(&c->allow[i], o)) return 1;
  return 0;
}

const cJSON *config_get(const struct config *c, const char *key) {
  return c ? cJSON_GetObjectItemCaseSensitive(c->root, key) : NULL;
}

static const cJSON *lookup(const struct config *c, const char *path) {
  if (!c) return NULL;
  const cJSON *v = c->root;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *save = NULL, *tok = strtok_r(buf, ".", &save); tok && v; tok = strtok_r(NULL, ".", &save))
    v = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, tok) : NULL;
  return v;
}

double config_number(const struct config *c, const char *path, double dflt) {
  const cJSON *v = lookup(c, path);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

const char *config_string(const struct config *c, const char *path, const char *dflt) {
  const cJSON *v = lookup(c, path);
  return cJSON_IsString(v) ? v->valuestring : dflt;
}

int config_bool(const struct config *c, const char *path, int dflt) {
  const cJSON *v = lookup(c, path);
  return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

int config_error_at(const struct config *c, const char *key, struct err *e) {
  if (!e) return ERR_INVALID;
  if (!c || !c->path[0] || strstr(e->msg, "luagent.lua")) return e->rc ? e->rc : ERR_INVALID;
  const char *last = strrchr(key, '.');
  int line = last ? config_line_of(c->path, last + 1) : 0;
  if (!line) {
    char top[128];
    snprintf(top, sizeof top, "%.*s", (int)(last ? (size_t)(last - key) : strlen(key)), key);
    line = config_line_of(c->path, top);
  }
  if (line) err_prefix(e, "luagent.lua:%d", line);
  else err_prefix(e, "luagent.lua");
  return e->rc ? e->rc : ERR_INVALID;
}

int config_check_keys(const cJSON *t, const char *where, const char *const *known, struct err *e) {
  const cJSON *it;
  cJSON_ArrayForEach(it, t) {
    int ok = 0;
    for (int i = 0; known[i] && !ok; i++) ok = !strcmp(it->string, known[i]);
    if (ok) continue;
    struct sbuf list = {0};
    size_t n = 0;
    for (int i = 0; known[i]; i++, n++) sbuf_printf(&list, "%s%s", i ? ", " : "", known[i]);
    char hint[200];
    suggest(where, it->string, known, n, hint, sizeof hint);
    err_set(e, ERR_INVALID, "config", "%s.%s is not a known key (%s)%s", where, it->string,
            list.s ? list.s : "", hint);
    sbuf_free(&list);
    return ERR_INVALID;
  }
  return 0;
}
