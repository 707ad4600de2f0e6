/* mcp_tools.c - MCP servers' tools as luagent tools: registration from the
 * operator's pin, the handler every call goes through (called only by
 * tool_call), result mapping, and the trust file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "call.h"
#include "json.h"
#include "mcp_impl.h"
#include "schema.h"
#include "util.h"

/* ------------------------------------------------------------- helpers */

void mcp__tool_hash(const cJSON *tool, char out[65]) {
  static const char *const fields[] = {"name",        "title",        "description", "inputSchema",
                                       "outputSchema", "annotations", "execution",   NULL};
  cJSON *h = cJSON_CreateObject();
  for (int i = 0; fields[i]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(tool, fields[i]);
    if (v) cJSON_AddItemToObject(h, fields[i], cJSON_Duplicate(v, 1));
  }
  json_hash_hex(h, out);
  cJSON_Delete(h);
}

const cJSON *mcp__find_tool(const cJSON *tools, const char *name) {
  const cJSON *t;
  cJSON_ArrayForEach(t, tools) {
    const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "name"));
    if (n && !strcmp(n, name)) return t;
  }
  return NULL;
}

static void problem(struct mcp_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(struct mcp_server *s, const char *fmt, ...) {
  char buf[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  cJSON_AddItemToArray(s->problems, cJSON_CreateString(buf));
}

/* The config's override for one tool: per tool first, then per server. */
static void overrides(const struct mcp_server *s, const char *tool, const char **imp,
                      const cJSON **ow) {
  const cJSON *tc = s->tool_cfg ? cJSON_GetObjectItemCaseSensitive(s->tool_cfg, tool) : NULL;
  const cJSON *ti = tc ? cJSON_GetObjectItemCaseSensitive(tc, "impact") : NULL;
  const cJSON *to = tc ? cJSON_GetObjectItemCaseSensitive(tc, "open_world") : NULL;
  *imp = cJSON_IsString(ti) ? ti->valuestring : s->impact;
  *ow = to ? to : s->open_world;
}

/* ------------------------------------------------------------- handler */

struct mcp_ref {
  struct mcp *m;
  struct mcp_server *s;
  char *tool;             /* the server's name for it */
  char full[200];         /* mcp.SERVER.TOOL */
  char hash[65];          /* of the pinned definition */
  cJSON *out_doc;         /* outputSchema, owned, or NULL */
  struct schema *out;     /* compiled, borrows out_doc */
};

static void ref_free(void *ud) {
  struct mcp_ref *r = ud;
  if (!r) return;
  free(r->tool);
  schema_free(r->out);
  cJSON_Delete(r->out_doc);
  free(r);
}

/* The text of a result's text blocks, joined by newlines. */
static char *joined_text(const cJSON *content) {
  struct sbuf b = {0};
  const cJSON *c;
  cJSON_ArrayForEach(c, content) {
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "type"));
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "text"));
    if (type && !strcmp(type, "text") && text) {
      if (b.len) sbuf_puts(&b, "\n");
      sbuf_puts(&b, text);
    }
  }
  return b.s ? sbuf_take(&b) : NULL;
}

/* A tools/call result as a Lua table: { content = { blocks as sent },
 * text = the text blocks joined, structured = structuredContent }. */
static int map_result(const struct mcp_ref *r, cJSON *res, cJSON **out, struct err *e) {
  if (!cJSON_IsObject(res))
    return err_set(e, ERR_INVALID, "mcp_protocol", "%s: the server's result is not an object", r->full);
  const cJSON *content = cJSON_GetObjectItemCaseSensitive(res, "content");
  if (content && !cJSON_IsArray(content))
    return err_set(e, ERR_INVALID, "mcp_protocol", "%s: the result's content is not a list", r->full);
  const cJSON *c;
  cJSON_ArrayForEach(c, content) {
    if (!cJSON_IsObject(c) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "type")))
      return err_set(e, ERR_INVALID, "mcp_protocol",
                     "%s: a content block of the result has no type", r->full);
  }
  char *text = joined_text(content);
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "isError"))) {
    struct sbuf b = {0};
    util_escape_text(&b, text ? text : "(no text)", text ? strlen(text) : 9, 800);
    err_set(e, ERR_FAIL, "tool_error", "%s: %s", r->full, b.s ? b.s : "");
    sbuf_free(&b);
    free(text);
    return ERR_FAIL;
  }
  const cJSON *sc = cJSON_GetObjectItemCaseSensitive(res, "structuredContent");
  if (r->out) {
    if (!sc) {
      free(text);
      return err_set(e, ERR_INVALID, "mcp_protocol",
                     "%s: the tool declares an outputSchema but its result has no structuredContent",
                     r->full);
    }
    struct err se = {0};
    if (schema_run(r->out, sc, "structuredContent", &se)) {
      free(text);
      return err_set(e, ERR_INVALID, "mcp_protocol", "%s: the result does not match the tool's outputSchema: %s",
                     r->full, se.msg);
    }
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "content", content ? cJSON_Duplicate(content, 1) : cJSON_CreateArray());
  if (text) cJSON_AddStringToObject(o, "text", text);
  if (sc) cJSON_AddItemToObject(o, "structured", cJSON_Duplicate(sc, 1));
  free(text);
  *out = o;
  return 0;
}

/* The handler of every mcp.* tool. tool_call has run the whole pipeline
 * on args before this runs; this is the only code that sends tools/call. */
static int mcp_tool_handler(struct call_ctx *ctx, const struct tool *t, const cJSON *args,
                            cJSON **result, struct err *e) {
  struct mcp_ref *r = t->ud;
  struct mcp_server *s = r->s;
  *result = NULL;
  pthread_mutex_lock(&s->mu);
  int rc = mcp__ready(r->m, s, ctx, e);
  if (rc) goto out;
  const cJSON *live = mcp__find_tool(s->live, r->tool);
  if (!live) {
    rc = err_set(e, ERR_DENIED, "mcp_untrusted",
                 "%s: the server no longer offers tool '%s'; review with `luagent mcp trust %s`",
                 r->full, r->tool, s->name);
    goto out;
  }
  char now[65];
  mcp__tool_hash(live, now);
  if (strcmp(now, r->hash)) {
    rc = err_set(e, ERR_DENIED, "mcp_untrusted",
                 "%s is held back: the server changed its definition (name, description, schemas "
                 "or annotations) since it was trusted; review the change with `luagent mcp trust %s`",
                 r->full, s->name);
    goto out;
  }
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "name", r->tool);
  cJSON_AddItemToObject(p, "arguments", args ? cJSON_Duplicate(args, 1) : cJSON_CreateObject());
  if (ctx && ctx->events) { /* someone to show progress to: ask for it */
    cJSON *meta = cJSON_AddObjectToObject(p, "_meta");
    cJSON_AddStringToObject(meta, "progressToken", ctx->run_id[0] ? ctx->run_id : "luagent");
  }
  cJSON *res = NULL;
  mcp__progress_begin(s);
  rc = mcp__request(r->m, s, ctx, "tools/call", p, &res, e);
  mcp__progress_end(s, ctx);
  cJSON_Delete(p);
  if (!rc) rc = map_result(r, res, result, e);
  cJSON_Delete(res);
out:
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* ---------------------------------------------------------- registration */

static void register_tool(struct mcp *m, struct mcp_server *s, const cJSON *def) {
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(def, "name"));
  if (!mcp__tool_name_ok(name)) {
    struct sbuf b = {0};
    util_escape_text(&b, name ? name : "(none)", name ? strlen(name) : 6, 80);
    problem(s, "tool name '%s' is not valid (1 to 128 of A-Z a-z 0-9 _ - . /); left out", b.s);
    sbuf_free(&b);
    return;
  }
  const char *task = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(def, "execution"), "taskSupport"));
  if (task && !strcmp(task, "required")) {
    problem(s, "tool '%s' can only be called as a task (execution.taskSupport = required), which "
               "luagent does not support; left out", name);
    return;
  }
  const cJSON *in = cJSON_GetObjectItemCaseSensitive(def, "inputSchema");
  if (!cJSON_IsObject(in)) {
    problem(s, "tool '%s' has no inputSchema object; left out", name);
    return;
  }
  struct mcp_ref *r = xcalloc(1, sizeof *r);
  r->m = m;
  r->s = s;
  r->tool = xstrdup(name);
  snprintf(r->full, sizeof r->full, "mcp.%s.%s", s->name, name);
  mcp__tool_hash(def, r->hash);
  const cJSON *os = cJSON_GetObjectItemCaseSensitive(def, "outputSchema");
  if (os) {
    r->out_doc = cJSON_Duplicate(os, 1);
    struct schema_opts o = {.flags = SCHEMA_LENIENT | SCHEMA_ANY_ROOT};
    struct err se = {0};
    char where[240];
    snprintf(where, sizeof where, "%s outputSchema", r->full);
    if (schema_compile(r->out_doc, &o, where, &r->out, &se)) {
      problem(s, "%s; left out", se.msg);
      ref_free(r);
      return;
    }
  }
  const char *ov_imp;
  const cJSON *ov_ow;
  overrides(s, name, &ov_imp, &ov_ow);
  enum impact imp;
  bool ow;
  mcp_tool_policy(def, ov_imp, ov_ow, &imp, &ow);
  const char *desc = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(def, "description"));
  if (!desc) desc = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(def, "title"));
  char source[200];
  snprintf(source, sizeof source, "mcp server %s", s->name);
  struct err te = {0};
  if (toolreg_add_external(m->rt->tools, r->full, desc ? desc : "", cJSON_Duplicate(in, 1), imp, ow,
                           mcp_tool_handler, r, ref_free, source, &te)) {
    problem(s, "%s; left out", te.msg);
    return;
  }
  s->registered++;
}

static int read_pin(struct mcp_server *s, cJSON **out) {
  *out = NULL;
  char *text = NULL;
  size_t len = 0;
  struct err e = {0};
  struct stat st;
  if (stat(s->trust_path, &st) != 0) return 0;
  if (util_read_file(s->trust_path, (size_t)64 << 20, &text, &len, &e)) {
    problem(s, "cannot read its trust file: %s", e.msg);
    return 0;
  }
  cJSON *v = NULL;
  if (json_parse(text, len, JSON_NO_DUPLICATES, &v, &e) || !cJSON_IsObject(v)) {
    problem(s, "its trust file .luagent/mcp/%s.trust.json is damaged (%s); run `luagent mcp trust %s`",
            s->name, e.msg[0] ? e.msg : "not an object", s->name);
    cJSON_Delete(v);
    free(text);
    return 0;
  }
  free(text);
  *out = v;
  return 1;
}

int mcp_open(struct runtime *rt, struct mcp **out, struct err *e) {
  *out = NULL;
  struct mcp *m = xcalloc(1, sizeof *m);
  m->rt = rt;
  int rc = mcp__config(m, e);
  if (!rc && m->n) rc = mcp__register_lua_tools(m, e);
  if (rc || !m->n) {
    mcp_free(m);
    return rc;
  }
  for (size_t i = 0; i < m->n; i++) {
    struct mcp_server *s = m->v[i];
    cJSON *pin;
    if (!read_pin(s, &pin)) continue;
    const char *ch = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pin, "config_hash"));
    cJSON *tools = cJSON_GetObjectItemCaseSensitive(pin, "tools");
    if (!ch || strcmp(ch, s->config_hash)) {
      s->pin_stale = 1;
      problem(s, "its command, args, env or cwd changed since it was trusted: no tools until "
                 "`luagent mcp trust %s`", s->name);
    } else if (cJSON_IsArray(tools)) {
      s->pinned = cJSON_DetachItemViaPointer(pin, tools);
      const cJSON *t;
      cJSON_ArrayForEach(t, s->pinned) register_tool(m, s, t);
    }
    cJSON_Delete(pin);
  }
  *out = m;
  return 0;
}

void mcp_free(struct mcp *m) {
  if (!m) return;
  for (size_t i = 0; i < m->n; i++) mcp__server_free(m->v[i]);
  free(m->v);
  free(m);
}

size_t mcp_count(const struct mcp *m) { return m ? m->n : 0; }
const char *mcp_name(const struct mcp *m, size_t i) { return m && i < m->n ? m->v[i]->name : NULL; }

static struct mcp_server *find_server(struct mcp *m, const char *name) {
  for (size_t i = 0; m && i < m->n; i++)
    if (!strcmp(m->v[i]->name, name)) return m->v[i];
  return NULL;
}

cJSON *mcp_describe(const struct mcp *m, size_t i) {
  if (!m || i >= m->n) return NULL;
  const struct mcp_server *s = m->v[i];
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", s->name);
  struct sbuf b = {0};
  for (size_t k = 0; s->argv[k]; k++) sbuf_printf(&b, "%s%s", k ? " " : "", s->argv[k]);
  cJSON_AddStringToObject(o, "command", b.s ? b.s : "");
  sbuf_free(&b);
  cJSON_AddBoolToObject(o, "trusted", s->pinned != NULL);
  cJSON_AddNumberToObject(o, "tools", s->registered);
  cJSON_AddItemToObject(o, "problems", cJSON_Duplicate(s->problems, 1));
  return o;
}

/* ---------------------------------------------------------------- trust */

int mcp_fetch(struct mcp *m, const char *name, cJSON **tools, cJSON **info, cJSON **changes,
              struct err *e) {
  *tools = *info = *changes = NULL;
  struct mcp_server *s = find_server(m, name);
  if (!s) return err_set(e, ERR_NOTFOUND, "mcp_unknown", "no MCP server named '%s' in luagent.lua", name);
  pthread_mutex_lock(&s->mu);
  int rc = mcp__ready(m, s, NULL, e);
  if (rc) {
    pthread_mutex_unlock(&s->mu);
    return rc;
  }
  cJSON *list = cJSON_Duplicate(s->live, 1);
  cJSON *in = cJSON_CreateObject();
  cJSON_AddStringToObject(in, "protocolVersion", s->version);
  if (s->server_info) cJSON_AddItemToObject(in, "serverInfo", cJSON_Duplicate(s->server_info, 1));
  pthread_mutex_unlock(&s->mu);
  cJSON *ch = cJSON_CreateObject();
  cJSON *added = cJSON_AddArrayToObject(ch, "added");
  cJSON *changed = cJSON_AddArrayToObject(ch, "changed");
  cJSON *removed = cJSON_AddArrayToObject(ch, "removed");
  cJSON *t;
  cJSON_ArrayForEach(t, list) {
    const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "name"));
    const cJSON *old = n ? mcp__find_tool(s->pinned, n) : NULL;
    char h1[65], h2[65];
    mcp__tool_hash(t, h1);
    if (!old) cJSON_AddItemToArray(added, cJSON_CreateString(n ? n : "?"));
    else if (mcp__tool_hash(old, h2), strcmp(h1, h2)) cJSON_AddItemToArray(changed, cJSON_CreateString(n));
    const char *ov_imp;
    const cJSON *ov_ow;
    overrides(s, n ? n : "", &ov_imp, &ov_ow);
    enum impact imp;
    bool ow;
    mcp_tool_policy(t, ov_imp, ov_ow, &imp, &ow);
    cJSON *x = cJSON_AddObjectToObject(t, "x-luagent");
    char full[200];
    snprintf(full, sizeof full, "mcp.%s.%s", s->name, n ? n : "?");
    cJSON_AddStringToObject(x, "tool", full);
    cJSON_AddStringToObject(x, "impact", impact_name(imp));
    cJSON_AddBoolToObject(x, "open_world", ow);
    const char *task = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(t, "execution"), "taskSupport"));
    if (!mcp__tool_name_ok(n)) cJSON_AddStringToObject(x, "problem", "invalid tool name: will be left out");
    else if (task && !strcmp(task, "required"))
      cJSON_AddStringToObject(x, "problem", "callable only as a task, which luagent does not support: will be left out");
  }
  cJSON_ArrayForEach(t, s->pinned) {
    const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "name"));
    if (n && !mcp__find_tool(list, n)) cJSON_AddItemToArray(removed, cJSON_CreateString(n));
  }
  *tools = list;
  *info = in;
  *changes = ch;
  return 0;
}

int mcp_trust(struct mcp *m, const char *name, const cJSON *tools, const cJSON *info,
              struct err *e) {
  struct mcp_server *s = find_server(m, name);
  if (!s) return err_set(e, ERR_NOTFOUND, "mcp_unknown", "no MCP server named '%s' in luagent.lua", name);
  cJSON *pin = cJSON_CreateObject();
  cJSON_AddStringToObject(pin, "server", s->name);
  cJSON_AddStringToObject(pin, "config_hash", s->config_hash);
  cJSON_AddNumberToObject(pin, "trusted_at", util_now());
  if (info) cJSON_AddItemToObject(pin, "info", cJSON_Duplicate(info, 1));
  cJSON *list = cJSON_AddArrayToObject(pin, "tools");
  const cJSON *t;
  cJSON_ArrayForEach(t, tools) {
    cJSON *c = cJSON_Duplicate(t, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(c, "x-luagent");
    cJSON_AddItemToArray(list, c);
  }
  char *text = json_print(pin, JSON_PRETTY);
  cJSON_Delete(pin);
  char dir[4300];
  snprintf(dir, sizeof dir, "%s", s->trust_path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  int rc = util_mkdirs(dir, 0700, e);
  if (!rc) rc = util_write_file_atomic(s->trust_path, text, strlen(text), e);
  if (!rc) chmod(s->trust_path, 0600);
  free(text);
  return rc;
}
