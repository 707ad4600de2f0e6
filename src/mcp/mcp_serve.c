/* mcp_serve.c - `luagent mcp serve`: the workspace's tools to an MCP
 * client over stdio (one JSON-RPC 2.0 message per line).
 *
 * Requests are answered one at a time, in order. A tools/call becomes one
 * tool_call as caller kind mcp, named by the client's clientInfo.name, so
 * rules can target it, escalations go to the configured approver (the
 * terminal is never asked: stdin is the protocol) and the audit records
 * it. Tools are offered under their wire names (tool_wire_name, unique in
 * the registry: "fs.read" is fs__read), which every model API accepts;
 * tools/call takes the full name too.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "call.h"
#include "json.h"
#include "mcp_impl.h"
#include "rules.h"
#include "security.h"
#include "skills.h"
#include "util.h"

#define SERVE_MAX_MESSAGE ((size_t)16 << 20)

struct serve {
  struct runtime *rt;
  int out_fd;           /* stdio: where answers go; -1 with capture */
  struct sbuf *capture; /* HTTP: the answer to this request, one message */
  const cJSON *patterns;
  char client[128];  /* clientInfo.name, the caller name */
  /* One session is one run for the pipeline: an open_world result taints
   * it, and the client's later medium+ calls escalate (stdio: the
   * process; HTTP: the Mcp-Session-Id). */
  char run_id[40];
  struct run_state run;
  int initialized;
  void (*log)(void *ud, const char *line);
  void *ud;
};

static void say(struct serve *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct serve *sv, const char *fmt, ...) {
  if (!sv->log) return;
  char buf[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  sv->log(sv->ud, buf);
}

static int write_all(int fd, const char *s, size_t n) {
  while (n) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    s += w;
    n -= (size_t)w;
  }
  return 0;
}

static void send_msg(struct serve *sv, cJSON *msg) {
  char *text = json_print(msg, 0);
  if (sv->capture) {
    sbuf_puts(sv->capture, text);
    free(text);
    return;
  }
  size_t n = strlen(text);
  text = xrealloc(text, n + 2);
  text[n] = '\n';
  write_all(sv->out_fd, text, n + 1);
  free(text);
}

static void reply(struct serve *sv, const cJSON *id, cJSON *result) {
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "jsonrpc", "2.0");
  cJSON_AddItemToObject(r, "id", cJSON_Duplicate(id, 0));
  cJSON_AddItemToObject(r, "result", result);
  send_msg(sv, r);
  cJSON_Delete(r);
}

static void reply_error(struct serve *sv, const cJSON *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reply_error(struct serve *sv, const cJSON *id, int code, const char *fmt, ...) {
  char buf[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "jsonrpc", "2.0");
  cJSON_AddItemToObject(r, "id", id ? cJSON_Duplicate(id, 0) : cJSON_CreateNull());
  cJSON *er = cJSON_AddObjectToObject(r, "error");
  cJSON_AddNumberToObject(er, "code", code);
  cJSON_AddStringToObject(er, "message", buf);
  send_msg(sv, r);
  cJSON_Delete(r);
}

static int exposed(const struct serve *sv, const struct tool *t) {
  if (!sv->patterns || !cJSON_GetArraySize(sv->patterns)) return 1;
  const cJSON *p;
  cJSON_ArrayForEach(p, sv->patterns)
    if (cJSON_IsString(p) && rules_glob(p->valuestring, t->name)) return 1;
  return 0;
}

/* The description a client shows: the tool's own, then its skill's. */
static char *description(struct serve *sv, const struct tool *t) {
  struct sbuf b = {0};
  sbuf_puts(&b, t->description);
  const struct skill *k = t->skill && sv->rt->skills ? skillset_find(sv->rt->skills, t->skill) : NULL;
  if (k && k->description && *k->description)
    sbuf_printf(&b, "%s(skill %s: %s)", b.len ? " " : "", k->name, k->description);
  if (!b.len) sbuf_puts(&b, t->name);
  return sbuf_take(&b);
}

static cJSON *tool_entry(struct serve *sv, const struct tool *t) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", t->wire);
  cJSON_AddStringToObject(o, "title", t->name);
  char *d = description(sv, t);
  cJSON_AddStringToObject(o, "description", d);
  free(d);
  cJSON *schema = cJSON_Duplicate(t->params, 1);
  if (!cJSON_GetObjectItemCaseSensitive(schema, "type")) cJSON_AddStringToObject(schema, "type", "object");
  cJSON_AddItemToObject(o, "inputSchema", schema);
  cJSON *a = cJSON_AddObjectToObject(o, "annotations");
  cJSON_AddStringToObject(a, "title", t->name);
  cJSON_AddBoolToObject(a, "readOnlyHint", t->impact == IMPACT_READ);
  cJSON_AddBoolToObject(a, "destructiveHint", t->impact >= IMPACT_HIGH);
  cJSON_AddBoolToObject(a, "openWorldHint", t->open_world);
  return o;
}

static void on_initialize(struct serve *sv, const cJSON *id, const cJSON *params) {
  const char *want = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(params, "protocolVersion"));
  const char *v = mcp_versions[0];
  for (int i = 0; want && mcp_versions[i]; i++)
    if (!strcmp(want, mcp_versions[i])) v = mcp_versions[i];
  const cJSON *ci = cJSON_GetObjectItemCaseSensitive(params, "clientInfo");
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ci, "name"));
  /* the caller name rules match on: printable ASCII only, bounded */
  size_t k = 0;
  for (const char *p = name ? name : "unknown"; *p && k < sizeof sv->client - 1; p++)
    sv->client[k++] = (*p > 0x20 && *p < 0x7f) ? *p : '_';
  sv->client[k] = 0;
  if (!k) snprintf(sv->client, sizeof sv->client, "unknown");
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "protocolVersion", v);
  cJSON *caps = cJSON_AddObjectToObject(r, "capabilities");
  cJSON *tc = cJSON_AddObjectToObject(caps, "tools");
  cJSON_AddBoolToObject(tc, "listChanged", 0);
  /* the rest is answered valid and empty (empty_answer): luagent serves
   * tools only, but a client that lists resources or prompts, sets a log
   * level or asks for completions gets a proper answer, not an error */
  cJSON_AddObjectToObject(caps, "logging");
  cJSON_AddObjectToObject(caps, "completions");
  cJSON_AddObjectToObject(caps, "resources");
  cJSON_AddObjectToObject(caps, "prompts");
  cJSON *si = cJSON_AddObjectToObject(r, "serverInfo");
  cJSON_AddStringToObject(si, "name", "luagent");
  cJSON_AddStringToObject(si, "version", LUAGENT_VERSION);
  cJSON_AddStringToObject(r, "instructions",
                          "luagent's sandboxed tools; every call passes its security pipeline "
                          "(rules, hooks, approval, audit).");
  reply(sv, id, r);
  sv->initialized = 1;
  say(sv, "client %s connected (protocol %s)", sv->client, v);
}

static void on_list(struct serve *sv, const cJSON *id) {
  cJSON *r = cJSON_CreateObject();
  cJSON *arr = cJSON_AddArrayToObject(r, "tools");
  for (size_t i = 0; i < toolreg_count(sv->rt->tools); i++) {
    const struct tool *t = toolreg_at(sv->rt->tools, i);
    if (exposed(sv, t)) cJSON_AddItemToArray(arr, tool_entry(sv, t));
  }
  reply(sv, id, r);
}

static void on_call(struct serve *sv, const cJSON *id, const cJSON *params) {
  const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(params, "name"));
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(params, "arguments");
  if (!name) {
    reply_error(sv, id, -32602, "tools/call needs a tool name");
    return;
  }
  const struct tool *t = toolreg_find_wire(sv->rt->tools, name);
  if (!t) t = toolreg_find(sv->rt->tools, name);
  if (!t || !exposed(sv, t)) {
    reply_error(sv, id, -32602, "Unknown tool: %s", name);
    return;
  }
  if (args && !cJSON_IsObject(args)) {
    reply_error(sv, id, -32602, "%s: arguments must be an object", t->name);
    return;
  }
  struct call_ctx ctx;
  call_ctx_init(&ctx, sv->rt, CALLER_MCP, sv->client);
  if (!sv->run_id[0]) runtime_new_run_id(sv->run_id);
  snprintf(ctx.run_id, sizeof ctx.run_id, "%s", sv->run_id);
  sv->run.script_calls = 0; /* limits.tool_calls holds per call; the taint stays */
  ctx.run = &sv->run;
  cJSON *result = NULL;
  struct err e = {0};
  cJSON *empty = args ? NULL : cJSON_CreateObject();
  int rc = tool_call(&ctx, t->name, args ? args : empty, &result, &e);
  cJSON_Delete(empty);
  sec_flush(sv->rt->sec);
  cJSON *r = cJSON_CreateObject();
  cJSON *content = cJSON_AddArrayToObject(r, "content");
  cJSON *block = cJSON_CreateObject();
  cJSON_AddStringToObject(block, "type", "text");
  if (rc) {
    char msg[1200];
    snprintf(msg, sizeof msg, "%s: %s", e.code[0] ? e.code : "error", e.msg);
    cJSON_AddStringToObject(block, "text", msg);
    cJSON_AddBoolToObject(r, "isError", 1);
    say(sv, "%s called %s: %s", sv->client, t->name, msg);
  } else {
    if (cJSON_IsString(result)) {
      cJSON_AddStringToObject(block, "text", result->valuestring);
    } else {
      char *text = json_print(result, 0);
      cJSON_AddStringToObject(block, "text", text);
      free(text);
    }
    if (cJSON_IsObject(result)) cJSON_AddItemToObject(r, "structuredContent", cJSON_Duplicate(result, 1));
    say(sv, "%s called %s: ok", sv->client, t->name);
  }
  cJSON_AddItemToArray(content, block);
  cJSON_Delete(result);
  reply(sv, id, r);
}

/* The methods luagent answers without having anything to offer: empty
 * lists, an accepted log level (it sends no log messages), no completions.
 * Returns 0 when m is none of them. */
static int empty_answer(struct serve *sv, const cJSON *id, const char *m, const cJSON *params) {
  static const char *const lists[][2] = {{"resources/list", "resources"},
                                         {"resources/templates/list", "resourceTemplates"},
                                         {"prompts/list", "prompts"}};
  for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
    if (!strcmp(m, lists[i][0])) {
      cJSON *r = cJSON_CreateObject();
      cJSON_AddArrayToObject(r, lists[i][1]);
      reply(sv, id, r);
      return 1;
    }
  if (!strcmp(m, "logging/setLevel")) {
    static const char *const levels[] = {"debug", "info", "notice", "warning", "error",
                                         "critical", "alert", "emergency", NULL};
    const char *l = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(params, "level"));
    int ok = 0;
    for (int i = 0; l && levels[i]; i++) ok |= !strcmp(l, levels[i]);
    if (ok) reply(sv, id, cJSON_CreateObject());
    else reply_error(sv, id, -32602, "logging/setLevel: level must be one of debug, info, notice, "
                                     "warning, error, critical, alert, emergency");
    return 1;
  }
  if (!strcmp(m, "completion/complete")) {
    cJSON *r = cJSON_CreateObject();
    cJSON *c = cJSON_AddObjectToObject(r, "completion");
    cJSON_AddArrayToObject(c, "values");
    cJSON_AddNumberToObject(c, "total", 0);
    cJSON_AddBoolToObject(c, "hasMore", 0);
    reply(sv, id, r);
    return 1;
  }
  if (!strcmp(m, "resources/read")) {
    reply_error(sv, id, -32002, "Resource not found: luagent serves no resources");
    return 1;
  }
  if (!strcmp(m, "prompts/get")) {
    reply_error(sv, id, -32602, "Unknown prompt: luagent serves no prompts");
    return 1;
  }
  return 0;
}

static void handle(struct serve *sv, const char *line, size_t len) {
  cJSON *msg = NULL;
  struct err pe = {0};
  if (json_parse(line, len, JSON_NO_DUPLICATES, &msg, &pe)) {
    reply_error(sv, NULL, -32700, "Parse error: %s", pe.msg);
    return;
  }
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
  const char *ver = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "jsonrpc"));
  const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
  if (!cJSON_IsObject(msg) || !ver || strcmp(ver, "2.0") ||
      (id && !cJSON_IsNumber(id) && !cJSON_IsString(id))) {
    reply_error(sv, cJSON_IsNumber(id) || cJSON_IsString(id) ? id : NULL, -32600,
                "Invalid Request: not a JSON-RPC 2.0 message");
    goto out;
  }
  if (!method) goto out; /* a response to us: we send no requests */
  if (!cJSON_IsString(method)) {
    if (id) reply_error(sv, id, -32600, "Invalid Request: method must be a string");
    goto out;
  }
  const char *m = method->valuestring;
  if (!id) goto out; /* notifications (initialized, cancelled): nothing to answer */
  if (params && !cJSON_IsObject(params)) {
    reply_error(sv, id, -32602, "params must be an object");
    goto out;
  }
  if (!strcmp(m, "initialize")) on_initialize(sv, id, params);
  else if (!strcmp(m, "ping")) reply(sv, id, cJSON_CreateObject());
  else if (!sv->initialized) reply_error(sv, id, -32002, "the session is not initialized: send initialize first");
  else if (!strcmp(m, "tools/list")) on_list(sv, id);
  else if (!strcmp(m, "tools/call")) on_call(sv, id, params);
  else if (empty_answer(sv, id, m, params)) {}
  else reply_error(sv, id, -32601, "Method not found: %s", m);
out:
  cJSON_Delete(msg);
}

struct serve *mcp__serve_new(struct runtime *rt, const cJSON *patterns,
                            void (*log)(void *ud, const char *line), void *ud) {
  struct serve *sv = xcalloc(1, sizeof *sv);
  sv->rt = rt;
  sv->out_fd = -1;
  sv->patterns = patterns;
  sv->log = log;
  sv->ud = ud;
  snprintf(sv->client, sizeof sv->client, "unknown");
  return sv;
}

int mcp__serve_handle(struct serve *sv, const char *msg, size_t len, struct sbuf *answer) {
  int was = sv->initialized;
  sv->capture = answer;
  handle(sv, msg, len);
  sv->capture = NULL;
  return !was && sv->initialized;
}

const char *mcp__serve_client(const struct serve *sv) { return sv->client; }

void mcp__serve_free(struct serve *sv) { free(sv); }

int mcp_serve(struct runtime *rt, int in_fd, int out_fd, const cJSON *patterns,
              void (*log)(void *ud, const char *line), void *ud, struct err *e) {
  struct serve sv = {.rt = rt, .out_fd = out_fd, .patterns = patterns, .log = log, .ud = ud};
  snprintf(sv.client, sizeof sv.client, "unknown");
  /* stdin is the protocol: no approval may be asked on it */
  sec_set_interactive(rt->sec, 0);
  struct sbuf in = {0};
  int discarding = 0, rc = 0;
  char buf[65536];
  for (;;) {
    ssize_t r = read(in_fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = err_set(e, ERR_IO, "mcp_io", "reading the client's messages: %s", strerror(errno));
      break;
    }
    if (r == 0) break;
    size_t start = 0;
    for (size_t i = 0; i < (size_t)r; i++) {
      if (buf[i] != '\n') continue;
      if (discarding) {
        discarding = 0;
      } else {
        sbuf_append(&in, buf + start, i - start);
        size_t n = in.len;
        if (n && in.s[n - 1] == '\r') n--;
        if (n) handle(&sv, in.s, n);
      }
      in.len = 0;
      start = i + 1;
    }
    if (!discarding) sbuf_append(&in, buf + start, (size_t)r - start);
    if (in.len > SERVE_MAX_MESSAGE) {
      reply_error(&sv, NULL, -32600, "message over %zu bytes", SERVE_MAX_MESSAGE);
      in.len = 0;
      discarding = 1;
    }
  }
  sbuf_free(&in);
  say(&sv, "client %s disconnected", sv.client);
  return rc;
}
