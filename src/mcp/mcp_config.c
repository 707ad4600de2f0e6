/* mcp_config.c - luagent.lua's `mcp` table:
 *
 *   mcp = {
 *     timeout_s = 60,          -- per request (default 60)
 *     max_message_mb = 16,     -- largest message a server may send (default 16)
 *     servers = {
 *       everything = { command = "npx", args = { "-y", "@modelcontextprotocol/server-everything" },
 *                      env = { KEY = "value" }, cwd = "/srv/mcp",  -- never inside data/
 *                      timeout_s = 30, max_message_mb = 4,
 *                      impact = "high", open_world = true,           -- every tool of the server
 *                      tools = { echo = { impact = "read", open_world = false } },  -- one tool
 *                      sampling = true },  -- or { max_tokens = 512, provider = "p", approve = true }
 *     },
 *   }
 *
 * A Streamable HTTP server instead: remote = { url = "https://host/mcp",
 * headers = { Authorization = { secret = "TOKEN" } } } (the URL's origin
 * must be on http_allow, and a secret only goes where its declaration
 * allows). Every key is checked; an unknown one or a wrong type fails with
 * the file and line.
 */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "config.h"
#include "json.h"
#include "mcp_impl.h"
#include "util.h"

static const char *type_of(const cJSON *v) {
  if (cJSON_IsObject(v)) return "a table";
  if (cJSON_IsArray(v)) return "a list";
  if (cJSON_IsString(v)) return "a string";
  if (cJSON_IsNumber(v)) return "a number";
  if (cJSON_IsBool(v)) return "a boolean";
  return "nil";
}

/* "luagent.lua:LINE: mcp.servers.NAME.key: message" with the line of key. */
static int cfg_error(const struct config *c, const char *key, struct err *e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int cfg_error(const struct config *c, const char *key, struct err *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  err_setv(e, ERR_INVALID, "config", fmt, ap);
  va_end(ap);
  return config_error_at(c, key, e);
}

/* Server names become part of tool names (mcp.NAME.TOOL) and wire names
 * (mcp__NAME__TOOL): no '_' or '.', so one name cannot end where another
 * begins. */
static int server_name_ok(const char *n) {
  size_t len = strlen(n);
  if (!len || len > 32 || !islower((unsigned char)n[0])) return 0;
  for (const char *p = n; *p; p++)
    if (!islower((unsigned char)*p) && !isdigit((unsigned char)*p) && *p != '-') return 0;
  return 1;
}

int mcp__tool_name_ok(const char *n) {
  size_t len = n ? strlen(n) : 0;
  if (!len || len > 128) return 0;
  for (const char *p = n; *p; p++)
    if (!isalnum((unsigned char)*p) && !strchr("_.-/", *p)) return 0;
  return n[0] != '.' && n[len - 1] != '.' && !strstr(n, "..");
}

static int check_impact(const struct config *c, const char *where, const cJSON *v, struct err *e) {
  enum impact imp;
  if (!cJSON_IsString(v) || impact_parse(v->valuestring, &imp))
    return cfg_error(c, where, e, "%s: expected one of read, low, medium, high, critical, got %s%s%s",
                     where, cJSON_IsString(v) ? "'" : "", cJSON_IsString(v) ? v->valuestring : type_of(v),
                     cJSON_IsString(v) ? "'" : "");
  return 0;
}

static int number_in(const struct config *c, const char *where, const cJSON *v, double lo, double hi,
                     double *out, struct err *e) {
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
    return cfg_error(c, where, e, "%s: expected a number from %g to %g, got %s", where, lo, hi,
                     cJSON_IsNumber(v) ? "one outside" : type_of(v));
  *out = v->valuedouble;
  return 0;
}

/* sampling = true | false | { max_tokens = N, provider = "NAME", approve = BOOL } */
static int parse_sampling(const struct config *c, const char *where, const cJSON *v,
                          struct mcp_server *s, struct err *e) {
  char kw[200];
  snprintf(kw, sizeof kw, "%s.sampling", where);
  s->sampling_max_tokens = MCP_SAMPLING_DEFAULT_MAX_TOKENS;
  if (!v) return 0;
  if (cJSON_IsBool(v)) {
    s->sampling = cJSON_IsTrue(v);
    return 0;
  }
  if (!cJSON_IsObject(v))
    return cfg_error(c, kw, e,
                     "%s: expected true, false or { max_tokens = N, provider = \"NAME\", approve = "
                     "true }, got %s",
                     kw, type_of(v));
  static const char *const known[] = {"max_tokens", "provider", "approve", NULL};
  if (config_check_keys(v, kw, known, e)) return config_error_at(c, kw, e);
  s->sampling = 1;
  const cJSON *x;
  char k2[240];
  double mt;
  snprintf(k2, sizeof k2, "%s.max_tokens", kw);
  if ((x = cJSON_GetObjectItemCaseSensitive(v, "max_tokens"))) {
    if (number_in(c, k2, x, 1, 1000000, &mt, e)) return ERR_INVALID;
    s->sampling_max_tokens = (long)mt;
  }
  snprintf(k2, sizeof k2, "%s.provider", kw);
  if ((x = cJSON_GetObjectItemCaseSensitive(v, "provider"))) {
    if (!cJSON_IsString(x) || !x->valuestring[0])
      return cfg_error(c, k2, e, "%s: expected a provider's name, got %s", k2, type_of(x));
    s->sampling_provider = xstrdup(x->valuestring);
  }
  snprintf(k2, sizeof k2, "%s.approve", kw);
  if ((x = cJSON_GetObjectItemCaseSensitive(v, "approve"))) {
    if (!cJSON_IsBool(x)) return cfg_error(c, k2, e, "%s: expected a boolean, got %s", k2, type_of(x));
    s->sampling_approve = cJSON_IsTrue(x);
  }
  return 0;
}

/* path as the kernel will find it: the real path of its longest existing
 * prefix (symlinks resolved), then the parts that do not exist yet. NULL
 * when a missing part is "." or "..": that cannot be judged before it
 * exists, so it is refused. */
static char *real_as_far_as_exists(const char *path) {
  char *cut = xstrdup(path);
  size_t n = strlen(cut);
  while (n > 1 && cut[n - 1] == '/') cut[--n] = 0;
  char *tail = NULL;
  for (;;) {
    char *r = realpath(cut, NULL);
    if (r) {
      struct sbuf b = {0};
      sbuf_puts(&b, r);
      free(r);
      char *save = NULL;
      for (char *p = tail ? strtok_r(tail, "/", &save) : NULL; p; p = strtok_r(NULL, "/", &save)) {
        if (!strcmp(p, ".") || !strcmp(p, "..")) {
          sbuf_free(&b);
          free(cut), free(tail);
          return NULL;
        }
        sbuf_printf(&b, "%s%s", b.len && b.s[b.len - 1] == '/' ? "" : "/", p);
      }
      free(cut), free(tail);
      return sbuf_take(&b);
    }
    char *slash = strrchr(cut, '/');
    if (!slash) break;
    struct sbuf t = {0};
    sbuf_printf(&t, "%s%s%s", slash + 1, tail ? "/" : "", tail ? tail : "");
    free(tail);
    tail = sbuf_take(&t);
    if (slash == cut) slash[1] = 0;
    else *slash = 0;
  }
  free(cut), free(tail);
  return NULL;
}

/* 1 when path (absolute) is inside the folder the fs.* tools write
 * (<workspace>/data, hosttools.c), or is it, or cannot be judged. A server
 * started there runs what a script or the model planted with fs.write:
 * python -m finds data/NAME.py first, npx reads data/.npmrc and
 * data/node_modules, a relative command resolves there. */
int mcp__in_writable(const char *workspace, const char *path) {
  struct sbuf d = {0};
  sbuf_printf(&d, "%s/data", workspace);
  char *data = real_as_far_as_exists(d.s);
  char *p = real_as_far_as_exists(path);
  sbuf_free(&d);
  int in = 1;
  if (data && p) {
    size_t n = strlen(data);
    in = !strncmp(p, data, n) && (p[n] == 0 || p[n] == '/');
  }
  free(data), free(p);
  return in;
}

static int parse_server(struct mcp *m, const cJSON *sv, double dtimeout, double dmax_mb,
                        struct err *e) {
  const struct config *c = m->rt->cfg;
  char where[160];
  snprintf(where, sizeof where, "mcp.servers.%s", sv->string);
  if (!server_name_ok(sv->string))
    return cfg_error(c, where, e,
                     "%s: invalid server name (a lower-case letter, then letters, digits and '-', "
                     "at most 32; no '_' or '.': it becomes part of tool names mcp.NAME.TOOL)",
                     where);
  if (!cJSON_IsObject(sv))
    return cfg_error(c, where, e, "%s: expected a table { command = ..., args = { ... } }, got %s",
                     where, type_of(sv));
  static const char *const known[] = {"command", "args", "env", "cwd", "timeout_s",
                                      "max_message_mb", "impact", "open_world", "tools",
                                      "url", "headers", "sampling", NULL};
  if (config_check_keys(sv, where, known, e)) return config_error_at(c, where, e);
  const cJSON *url = cJSON_GetObjectItemCaseSensitive(sv, "url");
  const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(sv, "command");
  if (!url == !cmd)
    return cfg_error(c, where, e,
                     "%s: give either command (a stdio server) or url (Streamable HTTP), %s", where,
                     url ? "not both" : "got neither");
  static const char *const stdio_only[] = {"args", "env", "cwd", NULL};
  for (int i = 0; url && stdio_only[i]; i++)
    if (cJSON_GetObjectItemCaseSensitive(sv, stdio_only[i]))
      return cfg_error(c, where, e, "%s.%s: only for a stdio server (command = ...)", where, stdio_only[i]);
  if (cmd && cJSON_GetObjectItemCaseSensitive(sv, "headers"))
    return cfg_error(c, where, e, "%s.headers: only for an HTTP server (url = ...)", where);
  struct mcp_server *s = xcalloc(1, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  mcp_proc_init(&s->proc);
  s->name = xstrdup(sv->string);
  s->owner = m;
  s->problems = cJSON_CreateArray();
  m->v = xrealloc(m->v, (m->n + 1) * sizeof *m->v);
  m->v[m->n++] = s; /* freed with m from here on */

  char kw[200];
  const cJSON *headers = cJSON_GetObjectItemCaseSensitive(sv, "headers");
  if (url) {
    snprintf(kw, sizeof kw, "%s.url", where);
    if (!cJSON_IsString(url) || (strncmp(url->valuestring, "http://", 7) && strncmp(url->valuestring, "https://", 8)))
      return cfg_error(c, kw, e, "%s: expected an http:// or https:// URL, got %s", kw,
                       cJSON_IsString(url) ? url->valuestring : type_of(url));
    s->url = xstrdup(url->valuestring);
    snprintf(kw, sizeof kw, "%s.headers", where);
    if (headers && !cJSON_IsObject(headers))
      return cfg_error(c, kw, e, "%s: expected a table of NAME = \"value\" or { secret = \"NAME\" }, got %s",
                       kw, type_of(headers));
    for (const cJSON *h = headers ? headers->child : NULL; h; h = h->next) {
      const cJSON *sec = cJSON_IsObject(h) ? cJSON_GetObjectItemCaseSensitive(h, "secret") : NULL;
      if (!cJSON_IsString(h) && !(cJSON_IsString(sec) && cJSON_GetArraySize(h) == 1))
        return cfg_error(c, kw, e, "%s.%s: expected a string or { secret = \"NAME\" }, got %s", kw,
                         h->string, type_of(h));
      if (strpbrk(h->string, ":\r\n ") || (cJSON_IsString(h) && strpbrk(h->valuestring, "\r\n")))
        return cfg_error(c, kw, e, "%s.%s: forbidden characters in the header", kw, h->string);
    }
    if (headers) s->headers = cJSON_Duplicate(headers, 1);
  }
  s->argv = xcalloc(2, sizeof *s->argv);
  snprintf(kw, sizeof kw, "%s.command", where);
  if (url) {
    s->argv[0] = xstrdup(url->valuestring); /* shown by mcp list */
  } else if (!cJSON_IsString(cmd) || !cmd->valuestring[0])
    return cfg_error(c, kw, e, "%s: expected the server's program (a non-empty string), got %s", kw,
                     cmd ? type_of(cmd) : "nothing");
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(sv, "args");
  snprintf(kw, sizeof kw, "%s.args", where);
  if (args && !cJSON_IsArray(args) && !(cJSON_IsObject(args) && !args->child))
    return cfg_error(c, kw, e, "%s: expected a list of strings, got %s", kw, type_of(args));
  size_t na = args ? (size_t)cJSON_GetArraySize(args) : 0;
  free(s->argv[0]);
  s->argv = xrealloc(s->argv, (na + 2) * sizeof *s->argv);
  memset(s->argv, 0, (na + 2) * sizeof *s->argv);
  s->argv[0] = xstrdup(url ? url->valuestring : cmd->valuestring);
  size_t k = 1;
  for (const cJSON *a = args ? args->child : NULL; a; a = a->next) {
    if (!cJSON_IsString(a))
      return cfg_error(c, kw, e, "%s[%zu]: expected a string, got %s", kw, k, type_of(a));
    s->argv[k++] = xstrdup(a->valuestring);
  }
  const cJSON *env = cJSON_GetObjectItemCaseSensitive(sv, "env");
  snprintf(kw, sizeof kw, "%s.env", where);
  if (env) {
    if (!cJSON_IsObject(env))
      return cfg_error(c, kw, e, "%s: expected a table of NAME = \"value\", got %s", kw, type_of(env));
    for (const cJSON *v = env->child; v; v = v->next) {
      if (!cJSON_IsString(v))
        return cfg_error(c, kw, e, "%s.%s: expected a string, got %s", kw, v->string, type_of(v));
      if (!v->string[0] || strchr(v->string, '='))
        return cfg_error(c, kw, e, "%s: invalid variable name '%s'", kw, v->string);
    }
    s->env = cJSON_Duplicate(env, 1);
  }
  const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(sv, "cwd");
  snprintf(kw, sizeof kw, "%s.cwd", where);
  if (cwd) {
    if (!cJSON_IsString(cwd) || !cwd->valuestring[0])
      return cfg_error(c, kw, e, "%s: expected a folder (a string), got %s", kw, type_of(cwd));
    struct sbuf b = {0};
    if (cwd->valuestring[0] == '/') sbuf_puts(&b, cwd->valuestring);
    else sbuf_printf(&b, "%s/%s", m->rt->workspace, cwd->valuestring);
    s->cwd = sbuf_take(&b);
    if (mcp__in_writable(m->rt->workspace, s->cwd))
      return cfg_error(c, kw, e,
                       "%s: '%s' is the workspace's data/ folder or inside it (or has a '..' "
                       "past what exists, which cannot be told apart), which scripts and the "
                       "model write with fs.write: a server started there would run what "
                       "they planted (python -m, npx and relative paths look there first); use a "
                       "folder outside data/ (the default is the workspace)",
                       kw, cwd->valuestring);
  }
  /* a command with a '/' is found from the server's folder, not PATH */
  if (cmd && strchr(cmd->valuestring, '/')) {
    struct sbuf b = {0};
    if (cmd->valuestring[0] == '/') sbuf_puts(&b, cmd->valuestring);
    else sbuf_printf(&b, "%s/%s", s->cwd ? s->cwd : m->rt->workspace, cmd->valuestring);
    int bad = mcp__in_writable(m->rt->workspace, b.s);
    sbuf_free(&b);
    snprintf(kw, sizeof kw, "%s.command", where);
    if (bad)
      return cfg_error(c, kw, e,
                       "%s: '%s' is inside the workspace's data/ folder, which scripts and the "
                       "model write with fs.write: it would run what they planted; install the "
                       "server outside data/",
                       kw, cmd->valuestring);
  }
  s->timeout_s = dtimeout;
  double mb = dmax_mb;
  const cJSON *v;
  snprintf(kw, sizeof kw, "%s.timeout_s", where);
  if ((v = cJSON_GetObjectItemCaseSensitive(sv, "timeout_s")) &&
      number_in(c, kw, v, 0.1, 86400, &s->timeout_s, e))
    return ERR_INVALID;
  snprintf(kw, sizeof kw, "%s.max_message_mb", where);
  if ((v = cJSON_GetObjectItemCaseSensitive(sv, "max_message_mb")) &&
      number_in(c, kw, v, 0.001, 1024, &mb, e))
    return ERR_INVALID;
  s->max_message = (size_t)(mb * 1048576.0);
  snprintf(kw, sizeof kw, "%s.impact", where);
  if ((v = cJSON_GetObjectItemCaseSensitive(sv, "impact"))) {
    if (check_impact(c, kw, v, e)) return ERR_INVALID;
    s->impact = xstrdup(v->valuestring);
  }
  snprintf(kw, sizeof kw, "%s.open_world", where);
  if ((v = cJSON_GetObjectItemCaseSensitive(sv, "open_world"))) {
    if (!cJSON_IsBool(v)) return cfg_error(c, kw, e, "%s: expected a boolean, got %s", kw, type_of(v));
    s->open_world = cJSON_Duplicate(v, 0);
  }
  const cJSON *tools = cJSON_GetObjectItemCaseSensitive(sv, "tools");
  snprintf(kw, sizeof kw, "%s.tools", where);
  if (tools) {
    if (!cJSON_IsObject(tools))
      return cfg_error(c, kw, e, "%s: expected a table { TOOL = { impact = ..., open_world = ... } }, got %s",
                       kw, type_of(tools));
    for (const cJSON *t = tools->child; t; t = t->next) {
      char tw[400];
      snprintf(tw, sizeof tw, "%s.%s", kw, t->string);
      if (!cJSON_IsObject(t))
        return cfg_error(c, tw, e, "%s: expected a table { impact = ..., open_world = ... }, got %s",
                         tw, type_of(t));
      static const char *const tk[] = {"impact", "open_world", NULL};
      if (config_check_keys(t, tw, tk, e)) return config_error_at(c, tw, e);
      const cJSON *ti = cJSON_GetObjectItemCaseSensitive(t, "impact");
      const cJSON *to = cJSON_GetObjectItemCaseSensitive(t, "open_world");
      char ek[420];
      snprintf(ek, sizeof ek, "%s.impact", tw);
      if (ti && check_impact(c, ek, ti, e)) return ERR_INVALID;
      snprintf(ek, sizeof ek, "%s.open_world", tw);
      if (to && !cJSON_IsBool(to))
        return cfg_error(c, ek, e, "%s: expected a boolean, got %s", ek, type_of(to));
    }
    s->tool_cfg = cJSON_Duplicate(tools, 1);
  }
  if (parse_sampling(c, where, cJSON_GetObjectItemCaseSensitive(sv, "sampling"), s, e))
    return ERR_INVALID;
  /* the pin holds for exactly this program, arguments, environment and
   * folder: change one and the operator reviews the server again */
  cJSON *h = cJSON_CreateObject();
  cJSON_AddItemToObject(h, "command", cmd ? cJSON_Duplicate(cmd, 0) : cJSON_CreateNull());
  cJSON_AddItemToObject(h, "url", url ? cJSON_Duplicate(url, 0) : cJSON_CreateNull());
  cJSON_AddItemToObject(h, "headers", headers ? cJSON_Duplicate(headers, 1) : cJSON_CreateNull());
  cJSON_AddItemToObject(h, "args", args ? cJSON_Duplicate(args, 1) : cJSON_CreateArray());
  cJSON_AddItemToObject(h, "env", env ? cJSON_Duplicate(env, 1) : cJSON_CreateObject());
  cJSON_AddItemToObject(h, "cwd", cwd ? cJSON_Duplicate(cwd, 0) : cJSON_CreateNull());
  json_hash_hex(h, s->config_hash);
  cJSON_Delete(h);
  snprintf(s->trust_path, sizeof s->trust_path, "%s/.luagent/mcp/%s.trust.json",
           m->rt->workspace, s->name);
  snprintf(s->log_path, sizeof s->log_path, "%s/.luagent/mcp/%s.stderr.log", m->rt->workspace,
           s->name);
  return 0;
}

int mcp__config(struct mcp *m, struct err *e) {
  const struct config *c = m->rt->cfg;
  const cJSON *root = config_get(c, "mcp");
  if (!root) return 0;
  static const char *const known[] = {"servers", "timeout_s", "max_message_mb", NULL};
  if (config_check_keys(root, "mcp", known, e)) return config_error_at(c, "mcp", e);
  double timeout = MCP_DEFAULT_TIMEOUT_S, mb = (double)MCP_DEFAULT_MAX_MESSAGE / 1048576.0;
  const cJSON *v;
  if ((v = cJSON_GetObjectItemCaseSensitive(root, "timeout_s")) &&
      number_in(c, "mcp.timeout_s", v, 0.1, 86400, &timeout, e))
    return ERR_INVALID;
  if ((v = cJSON_GetObjectItemCaseSensitive(root, "max_message_mb")) &&
      number_in(c, "mcp.max_message_mb", v, 0.001, 1024, &mb, e))
    return ERR_INVALID;
  const cJSON *servers = cJSON_GetObjectItemCaseSensitive(root, "servers");
  if (!servers) return 0;
  if (!cJSON_IsObject(servers))
    return cfg_error(c, "mcp.servers", e,
                     "mcp.servers: expected a table { NAME = { command = ... } }, got %s",
                     type_of(servers));
  for (const cJSON *sv = servers->child; sv; sv = sv->next)
    if (parse_server(m, sv, timeout, mb, e)) return ERR_INVALID;
  return 0;
}

void mcp__server_free(struct mcp_server *s) {
  if (!s) return;
  mcp__stop(s);
  pthread_mutex_destroy(&s->mu);
  free(s->name);
  free(s->url);
  cJSON_Delete(s->headers);
  for (size_t i = 0; s->argv && s->argv[i]; i++) free(s->argv[i]);
  free(s->argv);
  cJSON_Delete(s->env);
  free(s->cwd);
  free(s->impact);
  cJSON_Delete(s->open_world);
  cJSON_Delete(s->tool_cfg);
  free(s->sampling_provider);
  cJSON_Delete(s->pinned);
  cJSON_Delete(s->problems);
  cJSON_Delete(s->progress_last);
  free(s);
}

/* The one place the annotation rule is written (mcp.h). */
void mcp_tool_policy(const cJSON *tool, const char *ov_impact, const cJSON *ov_open_world,
                     enum impact *impact, bool *open_world) {
  const cJSON *ann = cJSON_GetObjectItemCaseSensitive(tool, "annotations");
  if (!cJSON_IsObject(ann)) ann = NULL;
  if (ann && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ann, "readOnlyHint")))
    *impact = IMPACT_READ;
  else if (ann && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ann, "destructiveHint")))
    *impact = IMPACT_HIGH;
  else
    *impact = IMPACT_MEDIUM;
  *open_world = !(ann && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(ann, "openWorldHint")));
  if (ov_impact) impact_parse(ov_impact, impact);
  if (cJSON_IsBool(ov_open_world)) *open_world = cJSON_IsTrue(ov_open_world);
}
