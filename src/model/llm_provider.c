/* llm_provider.c - the client: its provider list, parsed from JSON
 * (luagent.lua) or the environment, in priority order (see llm.h). */
#include "llm.h"

#include <ctype.h>
#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "llm_impl.h"
#include "sse.h"
#include "util.h"

/* ------------------------------------------------------------------ */
/* Client and configuration                                            */

static __thread llm_secret_fn secret_fn; /* per thread: delegates may build clients in parallel */
static __thread void *secret_ud;

void llm_set_secret_resolver(llm_secret_fn fn, void *ud) {
  secret_fn = fn;
  secret_ud = ud;
}

static void provider_clear(struct llm_provider *p) {
  free(p->name);
  free(p->base_url);
  free(p->model);
  cJSON_Delete(p->script);
  free(p->script_src);
  if (p->api_key) {
    memset(p->api_key, 0, strlen(p->api_key));
    free(p->api_key);
  }
}

void llm_client_free(struct llm_client *c) {
  if (!c) return;
  for (size_t i = 0; i < c->n; i++) provider_clear(&c->p[i]);
  free(c->p);
  llm__proxy_env_free(&c->env);
  free(c);
}

size_t llm_client_count(const struct llm_client *c) {
  return c ? c->n : 0;
}
const struct llm_provider *llm_client_provider(const struct llm_client *c, size_t i) {
  return c && i < c->n ? &c->p[i] : NULL;
}

static const char *default_base(enum llm_kind k) {
  return k == LLM_ANTHROPIC ? "https://api.anthropic.com/v1" : "https://api.openai.com/v1";
}

static void provider_defaults(struct llm_provider *p) {
  p->timeout_s = 120;
  p->max_tokens = 4096;
  p->max_retries = 3;
  p->backoff_s = 0.5;
  p->stream = true;
}

static char *trim_slash(const char *s) {
  char *r = xstrdup(s);
  size_t n = strlen(r);
  while (n && r[n - 1] == '/') r[--n] = 0;
  return r;
}

static int parse_kind(const char *s, enum llm_kind *k) {
  if (!strcmp(s, "openai") || !strcmp(s, "ollama"))
    *k = LLM_OPENAI;
  else if (!strcmp(s, "anthropic"))
    *k = LLM_ANTHROPIC;
  else if (!strcmp(s, "script"))
    *k = LLM_SCRIPT;
  else
    return -1;
  return 0;
}

/* One entry of `providers`. where is e.g. "luagent.lua:12: providers[1]";
 * basedir is where a script's `file` is looked for (NULL: here). */
static int provider_from_json(const cJSON *o, const char *where, size_t idx, const char *basedir,
                              struct llm_provider *p, struct err *e) {
  provider_defaults(p);
  p->priority = (int)idx + 1;
  if (!cJSON_IsObject(o)) return err_set(e, ERR_INVALID, "config", "%s: must be a table", where);
  const char *kind = NULL, *key_env = NULL, *key_secret = NULL;
  bool cache_set = false;
  const cJSON *it;
  cJSON_ArrayForEach(it, o) {
    const char *k = it->string;
#define WANT(cond, what) \
  if (!(cond)) return err_set(e, ERR_INVALID, "config", "%s.%s: expected %s", where, k, what);
    if (!strcmp(k, "name")) {
      WANT(cJSON_IsString(it) && it->valuestring[0], "a non-empty string");
      p->name = xstrdup(it->valuestring);
    } else if (!strcmp(k, "kind")) {
      enum llm_kind kk;
      WANT(cJSON_IsString(it) && !parse_kind(it->valuestring, &kk),
           "\"openai\", \"anthropic\" or \"script\"");
      kind = it->valuestring;
      p->kind = kk;
    } else if (!strcmp(k, "base_url")) {
      WANT(cJSON_IsString(it) && (!strncmp(it->valuestring, "http://", 7) ||
                                  !strncmp(it->valuestring, "https://", 8)),
           "an http:// or https:// URL");
      p->base_url = trim_slash(it->valuestring);
    } else if (!strcmp(k, "model")) {
      WANT(cJSON_IsString(it) && it->valuestring[0], "a non-empty string");
      p->model = xstrdup(it->valuestring);
    } else if (!strcmp(k, "api_key_env")) {
      WANT(cJSON_IsString(it) && it->valuestring[0], "the name of an environment variable");
      key_env = it->valuestring;
    } else if (!strcmp(k, "api_key_secret")) {
      WANT(cJSON_IsString(it) && it->valuestring[0], "the name of a secret");
      key_secret = it->valuestring;
    } else if (!strcmp(k, "api_key")) {
      return err_set(e, ERR_INVALID, "config",
                     "%s.api_key: keys do not belong in luagent.lua; use api_key_env = "
                     "\"VARIABLE\" or api_key_secret = \"NAME\"",
                     where);
    } else if (!strcmp(k, "timeout_s")) {
      WANT(cJSON_IsNumber(it) && it->valuedouble > 0, "a positive number of seconds");
      p->timeout_s = it->valuedouble;
    } else if (!strcmp(k, "priority")) {
      WANT(cJSON_IsNumber(it), "a number");
      p->priority = (int)it->valuedouble;
    } else if (!strcmp(k, "max_tokens")) {
      WANT(cJSON_IsNumber(it) && it->valuedouble >= 1, "a positive integer");
      p->max_tokens = (int)it->valuedouble;
      p->max_tokens_set = true;
    } else if (!strcmp(k, "max_tokens_field")) {
      WANT(cJSON_IsString(it) && (!strcmp(it->valuestring, "max_completion_tokens") ||
                                  !strcmp(it->valuestring, "max_tokens")),
           "\"max_completion_tokens\" or \"max_tokens\"");
      p->max_tokens_legacy = !strcmp(it->valuestring, "max_tokens");
    } else if (!strcmp(k, "thinking_budget")) {
      WANT(cJSON_IsNumber(it) && it->valuedouble >= 1024 && it->valuedouble < 1e9,
           "a number of tokens >= 1024 (the provider's minimum)");
      p->thinking_budget = (int)it->valuedouble;
    } else if (!strcmp(k, "max_retries")) {
      WANT(cJSON_IsNumber(it) && it->valuedouble >= 0 && it->valuedouble <= 20,
           "an integer from 0 to 20");
      p->max_retries = (int)it->valuedouble;
    } else if (!strcmp(k, "backoff_s")) {
      WANT(cJSON_IsNumber(it) && it->valuedouble >= 0, "a number of seconds >= 0");
      p->backoff_s = it->valuedouble;
    } else if (!strcmp(k, "prompt_cache")) {
      WANT(cJSON_IsBool(it), "true or false");
      p->prompt_cache = cJSON_IsTrue(it);
      cache_set = true;
    } else if (!strcmp(k, "stream")) {
      WANT(cJSON_IsBool(it), "true or false");
      p->stream = cJSON_IsTrue(it);
    } else if (!strcmp(k, "mode")) {
      WANT(cJSON_IsString(it) &&
               (!strcmp(it->valuestring, "lua") || !strcmp(it->valuestring, "tools")),
           "\"lua\" (code mode) or \"tools\"");
      p->code_mode = !strcmp(it->valuestring, "lua");
    } else if (!strcmp(k, "turns") || !strcmp(k, "file")) {
      /* the scripted provider's; read below, once the kind is known */
    } else {
      return err_set(e, ERR_INVALID, "config",
                     "%s: unknown key '%s' (known: name, kind, base_url, model, api_key_env, "
                     "api_key_secret, timeout_s, priority, max_tokens, max_tokens_field, "
                     "thinking_budget, prompt_cache, max_retries, backoff_s, stream, mode, turns, "
                     "file)",
                     where, k);
    }
#undef WANT
  }
  if (!kind)
    return err_set(e, ERR_INVALID, "config",
                   "%s: missing kind (\"openai\", \"anthropic\" or \"script\")", where);
  if (p->kind == LLM_SCRIPT) {
    if (key_env || key_secret || p->base_url)
      return err_set(e, ERR_INVALID, "config",
                     "%s: a script provider reaches no server: base_url, api_key_env and "
                     "api_key_secret do not apply",
                     where);
    if (!p->name) p->name = xstrdup("script");
    if (!p->model) p->model = xstrdup("script");
    p->base_url = xstrdup("script:");
    p->max_retries = 0;
    return llm__script_config(o, where, basedir, p, e);
  }
  if (cJSON_GetObjectItem(o, "turns") || cJSON_GetObjectItem(o, "file"))
    return err_set(e, ERR_INVALID, "config",
                   "%s: turns and file belong to kind = \"script\" providers", where);
  if (!p->model) return err_set(e, ERR_INVALID, "config", "%s: missing model", where);
  if (p->thinking_budget && p->kind != LLM_ANTHROPIC)
    return err_set(e, ERR_INVALID, "config",
                   "%s.thinking_budget: extended thinking is an Anthropic setting (kind = "
                   "\"anthropic\")",
                   where);
  if (p->thinking_budget && p->thinking_budget >= p->max_tokens)
    return err_set(e, ERR_INVALID, "config",
                   "%s.thinking_budget: %d must be below max_tokens (%d): the thinking counts "
                   "toward it",
                   where, p->thinking_budget, p->max_tokens);
  if (!p->name) p->name = xstrdup(kind);
  if (!p->base_url) p->base_url = xstrdup(default_base(p->kind));
  if (!cache_set)
    p->prompt_cache =
        p->kind == LLM_ANTHROPIC || !strncmp(p->base_url, "https://api.openai.com/", 23);
  if (key_env) {
    const char *v = getenv(key_env);
    if (!v || !*v)
      return err_set(e, ERR_INVALID, "config",
                     "%s: api_key_env names %s, which is not set in the environment", where,
                     key_env);
    p->api_key = xstrdup(v);
  } else if (key_secret) {
    if (!secret_fn)
      return err_set(e, ERR_INVALID, "config",
                     "%s: api_key_secret needs the secrets store, which this build lacks; use "
                     "api_key_env",
                     where);
    char *v = NULL;
    struct err se = {0};
    if (secret_fn(secret_ud, key_secret, &v, &se) || !v) {
      free(v);
      return err_set(e, ERR_INVALID, "config", "%s: api_key_secret %s: %s", where, key_secret,
                     se.msg[0] ? se.msg : "not found");
    }
    p->api_key = v;
  }
  return 0;
}

static int cmp_priority(const void *a, const void *b) {
  const struct llm_provider *x = a, *y = b;
  return (x->priority > y->priority) - (x->priority < y->priority);
}

static void client_push(struct llm_client *c, const struct llm_provider *p) {
  c->p = xrealloc(c->p, (c->n + 1) * sizeof *c->p);
  c->p[c->n++] = *p;
}

/* The quick-start provider from LUAGENT_* variables. 1 if defined, 0 if
 * not, <0 on a bad value. */
static int provider_from_env(struct llm_provider *p, struct err *e) {
  const char *kind = getenv("LUAGENT_PROVIDER"), *url = getenv("LUAGENT_BASE_URL"),
             *model = getenv("LUAGENT_MODEL"), *key = getenv("LUAGENT_API_KEY");
  if (!(kind && *kind) && !(url && *url) && !(model && *model)) return 0;
  provider_defaults(p);
  p->priority = -1000;
  if (!kind || !*kind) kind = "openai";
  if (parse_kind(kind, &p->kind))
    return err_set(e, ERR_INVALID, "config",
                   "LUAGENT_PROVIDER=%s: expected \"openai\" or \"anthropic\"", kind);
  if (!model || !*model)
    return err_set(e, ERR_INVALID, "config",
                   "LUAGENT_PROVIDER is set but LUAGENT_MODEL is not: set the model name too");
  if (url && *url && strncmp(url, "http://", 7) && strncmp(url, "https://", 8))
    return err_set(e, ERR_INVALID, "config", "LUAGENT_BASE_URL=%s: expected an http(s) URL", url);
  const char *to = getenv("LUAGENT_TIMEOUT_S");
  if (to && *to) {
    double t = atof(to);
    if (t > 0) p->timeout_s = t;
  }
  p->name = xstrdup("env");
  p->model = xstrdup(model);
  p->base_url = trim_slash(url && *url ? url : default_base(p->kind));
  p->prompt_cache =
      p->kind == LLM_ANTHROPIC || !strncmp(p->base_url, "https://api.openai.com/", 23);
  if (key && *key) p->api_key = xstrdup(key);
  return 1;
}

int llm__no_provider(struct err *e) {
  return err_set(e, ERR_NOTFOUND, "no_provider",
                 "no model provider configured: set LUAGENT_PROVIDER (openai or anthropic), "
                 "LUAGENT_MODEL, LUAGENT_BASE_URL and LUAGENT_API_KEY, or add providers = { { "
                 "kind = \"openai\", base_url = \"http://127.0.0.1:11434/v1\", model = \"...\" } "
                 "} to luagent.lua");
}

int llm__client_from_json(const cJSON *providers, const char *where, const char *basedir,
                          struct llm_client **out, struct err *e) {
  *out = NULL;
  struct llm_client *c = xcalloc(1, sizeof *c);
  if (providers && !cJSON_IsArray(providers)) {
    llm_client_free(c);
    return err_set(e, ERR_INVALID, "config", "%s: providers must be a list of tables", where);
  }
  size_t i = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, providers) {
    char w[512];
    snprintf(w, sizeof w, "%s: providers[%zu]", where, i + 1);
    struct llm_provider p = {0};
    int rc = provider_from_json(it, w, i, basedir, &p, e);
    if (rc) {
      provider_clear(&p);
      llm_client_free(c);
      return rc;
    }
    client_push(c, &p);
    i++;
  }
  struct llm_provider p = {0};
  int rc = provider_from_env(&p, e);
  if (rc < 0) {
    provider_clear(&p);
    llm_client_free(c);
    return rc;
  }
  if (rc == 1) client_push(c, &p);
  if (!c->n) {
    llm_client_free(c);
    return llm__no_provider(e);
  }
  qsort(c->p, c->n, sizeof *c->p, cmp_priority);
  llm__proxy_env_read(&c->env); /* once per client, not per request */
  *out = c;
  return 0;
}

int llm_client_from_json(const cJSON *providers, const char *where, struct llm_client **out,
                         struct err *e) {
  return llm__client_from_json(providers, where, NULL, out, e);
}

int llm_client_scripted(const cJSON *turns, llm_script_fn fn, void *ud, struct llm_client **out,
                        struct err *e) {
  *out = NULL;
  if (!turns && !fn)
    return err_set(e, ERR_INVALID, "config", "a scripted model needs turns or a function");
  if (turns && llm__script_check(turns, "the scripted model", e)) return e->rc;
  struct llm_client *c = xcalloc(1, sizeof *c);
  struct llm_provider p = {0};
  provider_defaults(&p);
  p.kind = LLM_SCRIPT;
  p.name = xstrdup("script");
  p.model = xstrdup("script");
  p.base_url = xstrdup("script:");
  p.max_retries = 0;
  p.script = turns ? cJSON_Duplicate(turns, 1) : NULL;
  p.script_src = xstrdup("the scripted model");
  p.script_fn = fn;
  p.script_ud = ud;
  client_push(c, &p);
  *out = c;
  return 0;
}
