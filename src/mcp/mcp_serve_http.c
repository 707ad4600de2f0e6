/* mcp_serve_http.c - `luagent mcp serve --http ADDR`: the same sessions as
 * the stdio server (mcp_serve.c) behind Streamable HTTP, on libmicrohttpd.
 *
 * One POST carries one JSON-RPC message; a request is answered with an
 * application/json body, a notification or response with 202. No SSE
 * stream is offered (GET is 405): luagent's server sends nothing of its
 * own. libmicrohttpd runs one internal thread, so requests (and the tool
 * calls they make) run one at a time, never beside the main thread.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "call.h"
#include "json.h"
#include "mcp_impl.h"
#include "mhd_dyn.h"
#include "security.h"
#include "secrets.h"
#include "util.h"

#define HTTP_MAX_BODY ((size_t)16 << 20)
#define HTTP_SESSIONS 64
/* Connections: requests run one at a time, so a few suffice; an idle or
 * slow one is dropped (a body trickled in to hold memory) */
#define HTTP_CONN_LIMIT 32
#define HTTP_CONN_PER_IP 16
#define HTTP_CONN_TIMEOUT 30

struct session {
  char id[65];
  struct serve *sv;
  double used; /* monotonic, for eviction */
};

struct hserver {
  struct runtime *rt;
  int loopback; /* listening on 127.0.0.1: the Host must name loopback too */
  const cJSON *patterns;
  char token[65];
  struct session sessions[HTTP_SESSIONS];
  void (*log)(void *ud, const char *line);
  void *ud;
};

struct hreq {
  struct sbuf body;
  int too_big;
};

static void say(struct hserver *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct hserver *h, const char *fmt, ...) {
  if (!h->log) return;
  char buf[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  h->log(h->ud, buf);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *ctype,
                             const char *body, const char *session) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  if (ctype) MHD_add_response_header(r, "Content-Type", ctype);
  if (session) MHD_add_response_header(r, "Mcp-Session-Id", session);
  if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
  enum MHD_Result ok = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ok;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, int code,
                                   const char *msg) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "jsonrpc", "2.0");
  cJSON_AddNullToObject(o, "id");
  cJSON *er = cJSON_AddObjectToObject(o, "error");
  cJSON_AddNumberToObject(er, "code", code);
  cJSON_AddStringToObject(er, "message", msg);
  char *t = json_print(o, 0);
  cJSON_Delete(o);
  enum MHD_Result r = reply(c, status, "application/json", t, NULL);
  free(t);
  return r;
}

/* Only a page served from this machine may call in from a browser. */
static int origin_ok(const char *origin) {
  if (!origin) return 1; /* not a browser */
  static const char *const ok[] = {"http://localhost", "http://127.0.0.1", "http://[::1]",
                                   "https://localhost", "https://127.0.0.1", "https://[::1]", NULL};
  for (int i = 0; ok[i]; i++) {
    size_t n = strlen(ok[i]);
    if (!strncmp(origin, ok[i], n) && (origin[n] == 0 || origin[n] == ':')) return 1;
  }
  return 0;
}

/* On loopback, a Host that is not loopback is a DNS name rebound to us. */
static int host_ok(const struct hserver *h, const char *host) {
  if (!h->loopback) return 1;
  if (!host) return 0;
  static const char *const ok[] = {"localhost", "127.0.0.1", "[::1]", NULL};
  for (int i = 0; ok[i]; i++) {
    size_t n = strlen(ok[i]);
    if (!strncasecmp(host, ok[i], n) && (host[n] == 0 || host[n] == ':')) return 1;
  }
  return 0;
}

static int authorized(struct hserver *h, struct MHD_Connection *c) {
  const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
  if (!a || strncasecmp(a, "Bearer ", 7)) return 0;
  a += 7;
  return strlen(a) == 64 && sodium_memcmp(a, h->token, 64) == 0;
}

static struct session *find_session(struct hserver *h, const char *id) {
  for (int i = 0; id && i < HTTP_SESSIONS; i++)
    if (h->sessions[i].sv && !strcmp(h->sessions[i].id, id)) return &h->sessions[i];
  return NULL;
}

static struct session *new_session(struct hserver *h) {
  struct session *slot = &h->sessions[0];
  for (int i = 0; i < HTTP_SESSIONS; i++) {
    if (!h->sessions[i].sv) {
      slot = &h->sessions[i];
      break;
    }
    if (h->sessions[i].used < slot->used) slot = &h->sessions[i];
  }
  mcp__serve_free(slot->sv); /* the least recently used goes when all are taken */
  unsigned char raw[32];
  randombytes_buf(raw, sizeof raw);
  util_hex(raw, sizeof raw, slot->id);
  slot->sv = mcp__serve_new(h->rt, h->patterns, h->log, h->ud);
  slot->used = util_monotonic();
  return slot;
}

static enum MHD_Result on_post(struct hserver *h, struct MHD_Connection *c, struct hreq *q) {
  if (q->too_big) return reply_error(c, 413, -32600, "message over 16 MiB");
  cJSON *msg = NULL;
  struct err pe = {0};
  if (json_parse(q->body.s ? q->body.s : "", q->body.len, JSON_NO_DUPLICATES, &msg, &pe)) {
    char m[1100];
    snprintf(m, sizeof m, "Parse error: %s", pe.msg);
    return reply_error(c, 400, -32700, m);
  }
  const char *method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "method"));
  int is_request = method && cJSON_GetObjectItemCaseSensitive(msg, "id");
  int is_init = method && !strcmp(method, "initialize");
  cJSON_Delete(msg);
  const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
  struct session *s = NULL;
  if (is_init) {
    s = new_session(h);
  } else if (!sid) {
    return reply_error(c, 400, -32000, "Bad Request: Mcp-Session-Id header is required");
  } else if (!(s = find_session(h, sid))) {
    return reply_error(c, 404, -32001, "Session not found: initialize again");
  }
  s->used = util_monotonic();
  struct sbuf answer = {0};
  int initialized = mcp__serve_handle(s->sv, q->body.s, q->body.len, &answer);
  enum MHD_Result r;
  if (!is_request && !answer.len) r = reply(c, 202, NULL, "", NULL);
  else r = reply(c, 200, "application/json", answer.s ? answer.s : "{}", is_init ? s->id : NULL);
  if (is_init && !initialized) { /* a failed initialize leaves no session behind */
    mcp__serve_free(s->sv);
    s->sv = NULL;
  }
  sbuf_free(&answer);
  return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)version;
  struct hserver *h = cls;
  struct hreq *q = *con_cls;
  if (!q) {
    /* headers only so far: everything that needs no body is refused now,
     * before a byte of it is read (no one without the token makes us hold
     * 16 MiB) */
    if (strcmp(url, "/mcp") && strcmp(url, "/")) return reply(c, 404, "text/plain", "not found: use /mcp\n", NULL);
    if (!host_ok(h, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host")))
      return reply(c, 421, "text/plain", "this Host is not luagent's MCP server (loopback only)\n", NULL);
    if (!origin_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin")))
      return reply(c, 403, "text/plain", "forbidden origin\n", NULL);
    if (!authorized(h, c)) {
      say(h, "refused a request without the bearer token");
      return reply(c, 401, "text/plain", "a bearer token is required (.luagent/mcp/serve.token)\n", NULL);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > HTTP_MAX_BODY) return reply_error(c, 413, -32600, "message over 16 MiB");
    q = xcalloc(1, sizeof *q);
    *con_cls = q;
    return MHD_YES;
  }
  if (*upload_size) {
    if (q->body.len + *upload_size > HTTP_MAX_BODY) q->too_big = 1;
    else if (!q->too_big) sbuf_append(&q->body, upload, *upload_size);
    *upload_size = 0;
    return MHD_YES;
  }
  if (!strcmp(method, "POST")) {
    enum MHD_Result r = on_post(h, c, q);
    /* the call may have run longer than the idle timeout: its answer
     * still goes out (setting the timeout restarts its clock) */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)HTTP_CONN_TIMEOUT);
    return r;
  }
  if (!strcmp(method, "DELETE")) {
    struct session *s = find_session(h, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id"));
    if (!s) return reply(c, 404, "text/plain", "no such session\n", NULL);
    mcp__serve_free(s->sv);
    s->sv = NULL;
    return reply(c, 200, "text/plain", "", NULL);
  }
  return reply(c, 405, "text/plain", "luagent's MCP server answers POST (and DELETE) only\n", NULL);
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode why) {
  (void)cls, (void)c, (void)why;
  struct hreq *q = *con_cls;
  if (!q) return;
  sbuf_free(&q->body);
  free(q);
  *con_cls = NULL;
}

/* The token of .luagent/mcp/serve.token, made (and shown) the first time.
 * Made by secrets_keyfile_new: servers started at the same moment on a
 * fresh workspace all use the one token the file holds (each used to make
 * its own and rename it into place; the last rename won, and the other
 * server refused the token in the file for as long as it ran). */
static int load_token(struct hserver *h, struct err *e) {
  char dir[4200], path[4300];
  snprintf(dir, sizeof dir, "%s/.luagent/mcp", h->rt->workspace);
  snprintf(path, sizeof path, "%s/serve.token", dir);
  struct stat st;
  if (stat(path, &st) == 0 && (st.st_mode & 077))
    return err_set(e, ERR_DENIED, "mcp_http",
                   "%s is readable by others (mode %03o): anyone who reads it can call the "
                   "workspace's tools; chmod 600 it, or delete it for a new token",
                   path, (unsigned)(st.st_mode & 0777));
  if (util_mkdirs(dir, 0700, e)) return ERR_IO;
  unsigned char raw[32];
  int created = 0;
  int rc = secrets_keyfile_new(path, raw, sizeof raw, &created, e);
  if (rc == ERR_INVALID) err_prefix(e, "mcp serve: delete it for a new token");
  if (rc) return rc;
  util_hex(raw, sizeof raw, h->token);
  sodium_memzero(raw, sizeof raw);
  if (created)
    say(h, "bearer token (shown once; kept in .luagent/mcp/serve.token, mode 0600): %s", h->token);
  else
    say(h, "bearer token: in .luagent/mcp/serve.token");
  return 0;
}

static int parse_addr(const char *addr, struct sockaddr_in *sa, struct err *e) {
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  char host[128] = "127.0.0.1";
  const char *colon = strrchr(addr, ':');
  const char *port = colon ? colon + 1 : addr;
  if (colon && colon > addr) snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
  if (!strcmp(host, "localhost")) snprintf(host, sizeof host, "127.0.0.1");
  char *end;
  long p = strtol(port, &end, 10);
  if (!*port || *end || p < 1 || p > 65535)
    return err_set(e, ERR_INVALID, "usage", "--http %s: expected PORT or HOST:PORT", addr);
  if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
    return err_set(e, ERR_INVALID, "usage", "--http %s: '%s' is not an IPv4 address", addr, host);
  sa->sin_port = htons((uint16_t)p);
  return 0;
}

int mcp_serve_http(struct runtime *rt, const char *addr, const cJSON *patterns,
                   volatile int *stop, void (*log)(void *ud, const char *line), void *ud,
                   struct err *e) {
  struct hserver *h = xcalloc(1, sizeof *h);
  h->rt = rt;
  h->patterns = patterns;
  h->log = log;
  h->ud = ud;
  struct sockaddr_in sa;
  int rc = parse_addr(addr, &sa, e);
  if (!rc && (rc = mhd_dyn_load(e))) err_prefix(e, "mcp serve --http");
  if (!rc) rc = load_token(h, e);
  if (rc) {
    free(h);
    return rc;
  }
  h->loopback = sa.sin_addr.s_addr == htonl(INADDR_LOOPBACK);
  sec_set_interactive(rt->sec, 0);
  struct MHD_Daemon *d = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, ntohs(sa.sin_port), NULL, NULL,
      on_request, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED,
      on_done, h, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_CONN_TIMEOUT,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_CONN_LIMIT, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      (unsigned)HTTP_CONN_PER_IP, MHD_OPTION_END);
  if (!d) {
    free(h);
    return err_set(e, ERR_IO, "mcp_http", "cannot listen on %s (in use, or not an address of this machine)", addr);
  }
  char ip[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
  say(h, "serving MCP (Streamable HTTP) on http://%s:%d/mcp%s", ip, ntohs(sa.sin_port),
      sa.sin_addr.s_addr == htonl(INADDR_LOOPBACK) ? "" : "  (NOT loopback: reachable from the network)");
  while (!*stop) util_sleep(0.1);
  MHD_stop_daemon(d);
  for (int i = 0; i < HTTP_SESSIONS; i++) mcp__serve_free(h->sessions[i].sv);
  sodium_memzero(h->token, sizeof h->token);
  free(h);
  return 0;
}
