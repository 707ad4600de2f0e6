/* console_http.c - the console's server core: libmicrohttpd setup, the
 * login token and sessions, the Host/Origin/CSRF checks, body limits, and
 * replies (every body is scrubbed of secret values on its way out). The
 * routes themselves are in console_api.c and console_chat.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "console_assets.h"
#include "console_impl.h"
#include "mhd_dyn.h"
#include "json.h"
#include "secrets.h"
#include "store.h"

/* ------------------------------------------------------------------ */
/* addresses */

int console_parse_addr(const char *addr, char *host, size_t hostn, int *port, struct err *e) {
  if (!addr || !*addr) addr = "127.0.0.1:8765";
  const char *colon = NULL;
  size_t hl;
  const char *h = addr;
  if (addr[0] == '[') { /* [::1]:8765 */
    const char *close = strchr(addr, ']');
    if (!close || (close[1] && close[1] != ':'))
      return err_set(e, ERR_INVALID, "bad_addr", "console: '%s' is not [IPV6]:PORT", addr);
    h = addr + 1;
    hl = (size_t)(close - h);
    colon = close[1] ? close + 1 : NULL;
  } else {
    colon = strrchr(addr, ':');
    if (colon && strchr(addr, ':') != colon)
      return err_set(e, ERR_INVALID, "bad_addr",
                     "console: '%s': write an IPv6 address as [ADDR]:PORT", addr);
    hl = colon ? (size_t)(colon - addr) : strlen(addr);
  }
  const char *ps = colon ? colon + 1 : NULL;
  if (!colon && strspn(addr, "0123456789") == strlen(addr)) { /* just a port */
    ps = addr;
    h = "127.0.0.1";
    hl = strlen(h);
  }
  if (!ps) ps = "8765";
  char *end;
  long p = strtol(ps, &end, 10);
  if (!*ps || *end || p < 1 || p > 65535)
    return err_set(e, ERR_INVALID, "bad_addr", "console: '%s': the port must be 1-65535", addr);
  if (hl == 0 || hl >= hostn)
    return err_set(e, ERR_INVALID, "bad_addr", "console: '%s' has no host", addr);
  memcpy(host, h, hl);
  host[hl] = 0;
  *port = (int)p;
  return 0;
}

int console_is_loopback(const char *host) {
  if (!strcmp(host, "localhost")) return 1;
  struct in_addr a4;
  struct in6_addr a6;
  if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, host, &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return 0;
}

/* ------------------------------------------------------------------ */
/* replies */

int console__error(struct console_reply *r, int status, const char *fmt, ...) {
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  cJSON_Delete(r->json);
  free(r->text);
  r->text = NULL;
  r->json = cJSON_CreateObject();
  cJSON_AddStringToObject(r->json, "error", msg);
  r->status = status;
  return 0;
}

const char *console__query(const struct console_req *q, const char *key) {
  return MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, key);
}

static void add_common_headers(struct MHD_Response *rs, const char *type) {
  MHD_add_response_header(rs, "Content-Type", type);
  MHD_add_response_header(rs, "Cache-Control", "no-store");
  MHD_add_response_header(rs, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(rs, "X-Frame-Options", "DENY");
  MHD_add_response_header(rs, "Referrer-Policy", "no-referrer");
  MHD_add_response_header(rs, "Cross-Origin-Resource-Policy", "same-origin");
  MHD_add_response_header(rs, "Content-Security-Policy",
                          "default-src 'self'; script-src 'self'; style-src 'self'; "
                          "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
                          "base-uri 'none'; form-action 'self'");
}

/* Queues text (scrubbed of secrets) with status. */
static enum MHD_Result send_text(struct console *c, struct MHD_Connection *conn, int status,
                                 const char *type, const char *text, size_t len,
                                 const char *cookie) {
  size_t n = 0;
  char *body = console__redact(c, text, len, &n);
  struct MHD_Response *rs = MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE);
  add_common_headers(rs, type);
  if (cookie) MHD_add_response_header(rs, "Set-Cookie", cookie);
  enum MHD_Result ok = MHD_queue_response(conn, (unsigned)status, rs);
  MHD_destroy_response(rs);
  return ok;
}

static enum MHD_Result send_reply(struct console *c, struct MHD_Connection *conn,
                                  struct console_reply *r, const char *cookie) {
  if (r->stream) {
    enum MHD_Result ok = MHD_queue_response(conn, 200, r->stream);
    MHD_destroy_response(r->stream);
    r->stream = NULL;
    return ok;
  }
  char *t = r->text;
  if (!t) t = r->json ? json_print(r->json, 0) : xstrdup("{}");
  enum MHD_Result ok =
      send_text(c, conn, r->status ? r->status : 200, "application/json; charset=utf-8", t,
                strlen(t), cookie);
  if (t != r->text) free(t);
  free(r->text);
  cJSON_Delete(r->json);
  memset(r, 0, sizeof *r);
  return ok;
}

static enum MHD_Result send_error(struct console *c, struct MHD_Connection *conn, int status,
                                  const char *msg) {
  struct console_reply r = {0};
  console__error(&r, status, "%s", msg);
  return send_reply(c, conn, &r, NULL);
}

/* ------------------------------------------------------------------ */
/* secrets: every value in the workspace's store is registered for
 * redaction, so no response can carry one even if a run's journal holds
 * it (a model that repeated a value it saw, a tool that echoed it). */

static void refresh_secrets(struct console *c) {
  struct config *cfg = NULL;
  struct store *st = NULL;
  struct err e = {0};
  char **names = NULL;
  unsigned char key[SECRETS_KEY_BYTES];
  if (store_open(c->workspace, &st, &e)) goto out;
  sqlite3_stmt *q = NULL;
  long long rows = -1;
  double updated = 0;
  if (!store_prepare(st, "SELECT count(*), coalesce(max(updated), 0) FROM secrets", &q, &e) &&
      sqlite3_step(q) == SQLITE_ROW) {
    rows = sqlite3_column_int64(q, 0);
    updated = sqlite3_column_double(q, 1);
  }
  sqlite3_finalize(q);
  if (rows < 0 || (rows == c->secrets_rows && updated == c->secrets_updated)) goto out;
  c->secrets_rows = rows;
  c->secrets_updated = updated;
  if (config_load(c->workspace, &cfg, &e)) goto out;
  const char *env = config_string(cfg, "secrets_key_env", NULL);
  if (secrets_names(st, &names, &e) || !names || !names[0]) goto out;
  if (secrets_load_key(c->workspace, env, 0, key, &e)) goto out;
  for (char **n = names; *n; n++) {
    char *v = NULL;
    size_t len = 0;
    if (secrets_get(st, key, *n, &v, &len, &e)) continue;
    if (len) secrets_register_value(v, len);
    sodium_memzero(v, len);
    free(v);
  }
  sodium_memzero(key, sizeof key);
out:
  secrets_free_names(names);
  store_close(st);
  config_free(cfg);
}

/* A number whose digits hold a secret (a PIN a tool returned as a number)
 * becomes the string "[secret]"; strings are secrets_redact_json's. */
static void redact_numbers(cJSON *v, int depth) {
  for (cJSON *k = v ? v->child : NULL; k && depth < JSON_PARSE_MAX_DEPTH + 8; k = k->next) {
    if (cJSON_IsNumber(k)) {
      char num[64];
      if (k->valuestring)
        snprintf(num, sizeof num, "%s", k->valuestring);
      else
        snprintf(num, sizeof num, "%.17g", k->valuedouble);
      size_t n = 0;
      char *r = secrets_redact(num, strlen(num), &n);
      if (n != strlen(num) || memcmp(r, num, n)) {
        cJSON_free(k->valuestring);
        k->valuestring = NULL;
        k->type = cJSON_String;
        k->valuestring = cJSON_malloc(sizeof "[secret]");
        memcpy(k->valuestring, "[secret]", sizeof "[secret]");
      }
      free(r);
    }
    redact_numbers(k, depth + 1);
  }
}

/* One line (or a whole body) of JSON scrubbed as a tree, appended to b;
 * 0 when it is not JSON. */
static int redact_json_text(const char *text, size_t len, struct sbuf *b) {
  const char *p = text;
  while (p < text + len && (*p == ' ' || *p == '\r' || *p == '\t' || *p == '\n')) p++;
  if (p >= text + len || (*p != '{' && *p != '[')) return 0;
  cJSON *v = NULL;
  struct err e = {0};
  if (json_parse(text, len, 0, &v, &e)) return 0;
  secrets_redact_json(v);
  redact_numbers(v, 0);
  char *out = json_print(v, 0);
  cJSON_Delete(v);
  sbuf_puts(b, out);
  free(out);
  return 1;
}

/* A JSON body is scrubbed as a tree: the values are matched as they are
 * (a secret with a quote, a backslash or a newline is escaped in the
 * text, so a scrub of the printed text never saw it), and the result stays
 * valid JSON (a short secret matching digits of a timestamp no longer
 * breaks the syntax). JSON Lines are scrubbed line by line; anything that
 * is not JSON is scrubbed as text. */
char *console__redact(struct console *c, const char *text, size_t len, size_t *outlen) {
  pthread_mutex_lock(&c->mu);
  double now = util_monotonic();
  if (now - c->secrets_checked > 1.0) {
    c->secrets_checked = now;
    refresh_secrets(c);
  }
  pthread_mutex_unlock(&c->mu);
  struct sbuf b = {0};
  sbuf_append(&b, "", 0);
  if (redact_json_text(text, len, &b)) {
    if (len && text[len - 1] == '\n') sbuf_append(&b, "\n", 1);
  } else {
    for (size_t i = 0; i < len;) {
      const char *nl = memchr(text + i, '\n', len - i);
      size_t n = nl ? (size_t)(nl - (text + i)) : len - i;
      if (!redact_json_text(text + i, n, &b)) {
        size_t m = 0;
        char *r = secrets_redact(text + i, n, &m);
        sbuf_append(&b, r, m);
        free(r);
      }
      if (nl) sbuf_append(&b, "\n", 1);
      i += n + (nl ? 1 : 0);
    }
  }
  if (outlen) *outlen = b.len;
  return sbuf_take(&b);
}

/* ------------------------------------------------------------------ */
/* token and sessions */

static void random_hex(char out[65]) {
  unsigned char b[32];
  randombytes_buf(b, sizeof b);
  sodium_bin2hex(out, 65, b, sizeof b);
  sodium_memzero(b, sizeof b);
}

/* A listening socket on ai's address, or -1 with e naming the address. */
static int listen_on(const struct addrinfo *ai, struct err *e) {
  char host[128] = "?", port[16] = "?";
  getnameinfo(ai->ai_addr, ai->ai_addrlen, host, sizeof host, port, sizeof port,
              NI_NUMERICHOST | NI_NUMERICSERV);
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) return fd;
  }
  int err = errno;
  if (fd >= 0) close(fd);
  err_set(e, ERR_IO, "bind", "console: cannot listen on %s%s%s:%s: %s%s",
          ai->ai_family == AF_INET6 ? "[" : "", host, ai->ai_family == AF_INET6 ? "]" : "", port,
          strerror(err), err == EADDRINUSE ? " (another console or program has the port)" : "");
  return -1;
}

/* The login token: .luagent/console.token (0600, made at first start).
 * *created says whether it was made now. */
static int load_token(struct console *c, int *created, struct err *e) {
  char path[4200];
  snprintf(path, sizeof path, "%s/.luagent", c->workspace);
  if (mkdir(path, 0700) && errno != EEXIST)
    return err_set(e, ERR_IO, "mkdir", "console: %s: %s", path, strerror(errno));
  snprintf(path, sizeof path, "%s/.luagent/console.token", c->workspace);
  unsigned char raw[32];
  /* made by this call or another process's: only ours is ours to remove */
  int rc = secrets_keyfile_new(path, raw, sizeof raw, created, e);
  if (rc) return rc;
  sodium_bin2hex(c->token, sizeof c->token, raw, sizeof raw);
  sodium_memzero(raw, sizeof raw);
  return 0;
}

static const char *cookie_value(struct MHD_Connection *conn) {
  return MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, "luagent_console");
}

/* The session of this request, or NULL. Caller holds c->mu. */
static struct console_session *find_session(struct console *c, struct MHD_Connection *conn) {
  const char *v = cookie_value(conn);
  if (!v || strlen(v) != 64) return NULL;
  double now = util_now();
  for (int i = 0; i < CONSOLE_MAX_SESSIONS; i++) {
    struct console_session *s = &c->sessions[i];
    if (!s->id[0]) continue;
    if (s->expires < now) {
      memset(s, 0, sizeof *s);
      continue;
    }
    if (!sodium_memcmp(s->id, v, 64)) return s;
  }
  return NULL;
}

static struct console_session *new_session(struct console *c) {
  struct console_session *slot = &c->sessions[0];
  for (int i = 0; i < CONSOLE_MAX_SESSIONS; i++) {
    struct console_session *s = &c->sessions[i];
    if (!s->id[0] || s->expires < util_now()) {
      slot = s;
      break;
    }
    if (s->expires < slot->expires) slot = s; /* all taken: the oldest goes */
  }
  random_hex(slot->id);
  random_hex(slot->csrf);
  slot->expires = util_now() + CONSOLE_SESSION_S;
  return slot;
}

/* ------------------------------------------------------------------ */
/* Host and Origin: a page on another site (or a rebinding DNS name that
 * points at 127.0.0.1) must not be able to talk to the console. */

static int host_allowed(struct console *c, const char *host) {
  if (!host) return 0;
  for (char **h = c->hosts; *h; h++)
    if (!strcasecmp(*h, host)) return 1;
  return 0;
}

static int origin_allowed(struct console *c, const char *origin) {
  const char *rest = NULL;
  if (!strncasecmp(origin, "http://", 7)) rest = origin + 7;
  else if (!strncasecmp(origin, "https://", 8)) rest = origin + 8;
  return rest && host_allowed(c, rest);
}

/* ------------------------------------------------------------------ */
/* static pages */

static const char *content_type(const char *name) {
  const char *dot = strrchr(name, '.');
  if (!dot) return "application/octet-stream";
  if (!strcmp(dot, ".html")) return "text/html; charset=utf-8";
  if (!strcmp(dot, ".css")) return "text/css; charset=utf-8";
  if (!strcmp(dot, ".js")) return "text/javascript; charset=utf-8";
  if (!strcmp(dot, ".svg")) return "image/svg+xml";
  if (!strcmp(dot, ".png")) return "image/png";
  return "application/octet-stream";
}

static enum MHD_Result send_asset(struct console *c, struct MHD_Connection *conn,
                                  const char *name) {
  for (const struct console_asset *a = console_assets; a->name; a++) {
    if (strcmp(a->name, name)) continue;
    struct MHD_Response *rs = MHD_create_response_from_buffer(a->len, (void *)a->data,
                                                              MHD_RESPMEM_PERSISTENT);
    add_common_headers(rs, content_type(name));
    enum MHD_Result ok = MHD_queue_response(conn, 200, rs);
    MHD_destroy_response(rs);
    return ok;
  }
  return send_error(c, conn, 404, "no such page");
}

/* ------------------------------------------------------------------ */
/* requests */

struct conn_state {
  struct sbuf body;
  int too_big;
};

static int is_post(const char *m) { return !strcmp(m, "POST"); }

static enum MHD_Result login(struct console *c, struct MHD_Connection *conn, cJSON *body) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(body, "token");
  if (!cJSON_IsString(t) || strlen(t->valuestring) != 64 ||
      sodium_memcmp(t->valuestring, c->token, 64)) {
    /* a wrong guess costs the guesser time (one thread per connection,
     * and CONSOLE_CONN_PER_IP of them at most) */
    usleep(300 * 1000);
    return send_error(c, conn, 401, "wrong token (it is in .luagent/console.token)");
  }
  pthread_mutex_lock(&c->mu);
  struct console_session *s = new_session(c);
  char cookie[200], csrf[65];
  snprintf(cookie, sizeof cookie,
           "luagent_console=%s; Path=/; HttpOnly; SameSite=Strict; Max-Age=%d", s->id,
           (int)CONSOLE_SESSION_S);
  memcpy(csrf, s->csrf, sizeof csrf);
  pthread_mutex_unlock(&c->mu);
  struct console_reply r = {.json = cJSON_CreateObject()};
  cJSON_AddStringToObject(r.json, "csrf", csrf);
  enum MHD_Result ok = send_reply(c, conn, &r, cookie);
  sodium_memzero(cookie, sizeof cookie);
  return ok;
}

static enum MHD_Result handle(struct console *c, struct MHD_Connection *conn, const char *url,
                              const char *method, struct conn_state *cs) {
  if (cs->too_big) {
    char m[120];
    snprintf(m, sizeof m, "request body over %d bytes", CONSOLE_MAX_BODY);
    return send_error(c, conn, 413, m);
  }
  /* pages: no data in them, no login needed to load them */
  if (strncmp(url, "/api/", 5) != 0) {
    if (strcmp(method, "GET")) return send_error(c, conn, 405, "pages are GET only");
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) return send_asset(c, conn, "index.html");
    if (!strncmp(url, "/assets/", 8) && !strchr(url + 8, '/')) return send_asset(c, conn, url + 8);
    return send_error(c, conn, 404, "no such page");
  }
  cJSON *body = NULL;
  if (is_post(method)) {
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    if (cs->body.len && (!ct || strncasecmp(ct, "application/json", 16)))
      return send_error(c, conn, 415, "POST bodies must be Content-Type: application/json");
    struct err je = {0};
    if (!cs->body.len) {
      body = cJSON_CreateObject();
    } else if (json_parse(cs->body.s, cs->body.len, JSON_NO_DUPLICATES, &body, &je)) {
      char m[1100];
      snprintf(m, sizeof m, "malformed JSON body: %s", je.msg);
      return send_error(c, conn, 400, m);
    } else if (!cJSON_IsObject(body)) {
      cJSON_Delete(body);
      return send_error(c, conn, 400, "the JSON body must be an object");
    }
  }
  enum MHD_Result ok;
  if (!strcmp(url, "/api/login")) {
    ok = is_post(method) ? login(c, conn, body) : send_error(c, conn, 405, "POST /api/login");
    cJSON_Delete(body);
    return ok;
  }
  pthread_mutex_lock(&c->mu);
  struct console_session *s = find_session(c, conn);
  char csrf[65] = "";
  if (s) memcpy(csrf, s->csrf, sizeof csrf);
  int csrf_ok = 0;
  if (s && is_post(method)) {
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-CSRF-Token");
    csrf_ok = h && strlen(h) == 64 && !sodium_memcmp(h, s->csrf, 64);
  }
  if (s && is_post(method) && csrf_ok && !strcmp(url, "/api/logout")) memset(s, 0, sizeof *s);
  pthread_mutex_unlock(&c->mu);
  if (!s) {
    cJSON_Delete(body);
    return send_error(c, conn, 401, "not logged in");
  }
  if (is_post(method) && !csrf_ok) {
    cJSON_Delete(body);
    return send_error(c, conn, 403, "missing or wrong X-CSRF-Token");
  }
  struct console_reply r = {0};
  if (!strcmp(url, "/api/logout")) {
    r.json = cJSON_CreateObject();
    cJSON_AddBoolToObject(r.json, "ok", 1);
    cJSON_Delete(body);
    return send_reply(c, conn, &r,
                      "luagent_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
  }
  if (!strcmp(url, "/api/session")) {
    r.json = cJSON_CreateObject();
    cJSON_AddStringToObject(r.json, "csrf", csrf);
    cJSON_AddStringToObject(r.json, "workspace", c->workspace);
    cJSON_AddStringToObject(r.json, "version", LUAGENT_VERSION);
  } else {
    struct console_req q = {.conn = conn, .method = method, .path = url, .body = body};
    console__api(c, &q, &r);
  }
  cJSON_Delete(body);
  return send_reply(c, conn, &r, NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  struct console *c = cls;
  struct conn_state *cs = *con_cls;
  if (!cs) {
    /* First call: headers only. Refuse what needs no body to refuse. */
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
    if (!host_allowed(c, host)) {
      char m[400];
      snprintf(m, sizeof m,
               "Host '%.200s' is not this console (a DNS name pointing here from another site "
               "is refused; a proxy's name goes in --host)",
               host ? host : "");
      return send_error(c, conn, 421, m);
    }
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    if (origin && !origin_allowed(c, origin)) {
      char m[400];
      snprintf(m, sizeof m, "Origin '%.200s' is not this console", origin);
      return send_error(c, conn, 403, m);
    }
    const char *site = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-Fetch-Site");
    if (site && strcmp(site, "same-origin") && strcmp(site, "none"))
      return send_error(c, conn, 403, "cross-site requests are refused");
    if (strcmp(method, "GET") && strcmp(method, "POST"))
      return send_error(c, conn, 405, "only GET and POST");
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > CONSOLE_MAX_BODY) {
      char m[120];
      snprintf(m, sizeof m, "request body over %d bytes", CONSOLE_MAX_BODY);
      return send_error(c, conn, 413, m);
    }
    cs = xcalloc(1, sizeof *cs);
    *con_cls = cs;
    return MHD_YES;
  }
  if (*upload_data_size) {
    if (cs->body.len + *upload_data_size > CONSOLE_MAX_BODY)
      cs->too_big = 1;
    else if (!cs->too_big)
      sbuf_append(&cs->body, upload_data, *upload_data_size);
    *upload_data_size = 0;
    return MHD_YES;
  }
  enum MHD_Result ok = handle(c, conn, url, method, cs);
  if (!c->quiet) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
    printf("console: %s %s %u\n", method, url, ci ? ci->http_status : 0);
  }
  return ok;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  struct conn_state *cs = *con_cls;
  if (!cs) return;
  sbuf_free(&cs->body);
  free(cs);
  *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
  struct console *c = cls;
  if (c->quiet) return;
  fputs("console: ", stderr);
  vfprintf(stderr, fmt, ap);
}

/* ------------------------------------------------------------------ */
/* start and stop */

static void add_host(char ***list, size_t *n, const char *fmt, ...) {
  char buf[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  *list = xrealloc(*list, (*n + 2) * sizeof **list);
  (*list)[(*n)++] = xstrdup(buf);
  (*list)[*n] = NULL;
}

int console_start(const struct console_opts *o, struct console **out, struct err *e) {
  *out = NULL;
  if (sodium_init() < 0) return err_set(e, ERR_FAIL, "sodium", "console: libsodium failed");
  struct console *c = xcalloc(1, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->quiet = o->quiet;
  c->allow_remote = o->allow_remote;
  c->next_chat = 1;
  c->secrets_rows = -1;
  int rc = 0;
  if (!realpath(o->workspace ? o->workspace : ".", c->workspace)) {
    rc = err_set(e, ERR_NOTFOUND, "workspace", "console: workspace %s: %s", o->workspace,
                 strerror(errno));
    goto fail;
  }
  if (o->exe)
    snprintf(c->exe, sizeof c->exe, "%s", o->exe);
  else {
    ssize_t n = readlink("/proc/self/exe", c->exe, sizeof c->exe - 1);
    if (n <= 0) {
      rc = err_set(e, ERR_IO, "exe", "console: cannot find the luagent binary: %s",
                   strerror(errno));
      goto fail;
    }
    c->exe[n] = 0;
  }
  if ((rc = console_parse_addr(o->addr, c->host, sizeof c->host, &c->port, e))) goto fail;
  if ((rc = mhd_dyn_load(e))) { /* before the token: nothing made for a server that cannot start */
    err_prefix(e, "console");
    goto fail;
  }
  int loop = console_is_loopback(c->host);
  if (!loop && !o->allow_remote) {
    rc = err_set(e, ERR_INVALID, "not_loopback",
                 "console: %s is not a loopback address; the console binds loopback only "
                 "unless --allow-remote is given (and then put it behind a TLS reverse proxy)",
                 c->host);
    goto fail;
  }
  size_t nh = 0;
  add_host(&c->hosts, &nh, "127.0.0.1:%d", c->port);
  add_host(&c->hosts, &nh, "localhost:%d", c->port);
  add_host(&c->hosts, &nh, "[::1]:%d", c->port);
  int v6 = strchr(c->host, ':') != NULL;
  add_host(&c->hosts, &nh, v6 ? "[%s]:%d" : "%s:%d", c->host, c->port);
  for (const char *const *h = o->hosts; h && *h; h++) add_host(&c->hosts, &nh, "%s", *h);

  struct addrinfo hints = {.ai_flags = AI_NUMERICSERV, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", c->port);
  int gai = getaddrinfo(c->host, ps, &hints, &ai);
  if (gai || !ai) {
    rc = err_set(e, ERR_INVALID, "bad_addr", "console: cannot resolve '%s': %s", c->host,
                 gai_strerror(gai));
    goto fail;
  }
  /* Bound here, before the token is read or made: a start that cannot
   * listen (the port is taken, another console starting at the same
   * moment) makes nothing, and never has to take back a token another
   * process may have read meanwhile. */
  int lfd = listen_on(ai, e);
  if (lfd < 0) {
    freeaddrinfo(ai);
    rc = ERR_IO;
    goto fail;
  }
  int created = 0;
  if ((rc = load_token(c, &created, e))) {
    close(lfd);
    freeaddrinfo(ai);
    goto fail;
  }
  /* A chat child writing into a closed pipe must not kill the server. */
  signal(SIGPIPE, SIG_IGN);
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                   MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
  /* The server's threads take no signals: the process's own handlers
   * (the daemon's self-pipe, the console command's sigwait) run in the
   * thread that installed them. Threads inherit this mask. */
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGHUP);
  sigaddset(&block, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  c->d = MHD_start_daemon(flags, (uint16_t)c->port, NULL, NULL, on_request, c,
                          MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, c,
                          MHD_OPTION_LISTEN_SOCKET, lfd,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONSOLE_CONN_LIMIT,
                          MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)CONSOLE_CONN_PER_IP,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONSOLE_CONN_TIMEOUT,
                          MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, c, MHD_OPTION_END);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  freeaddrinfo(ai);
  if (!c->d) {
    close(lfd);
    rc = err_set(e, ERR_IO, "start", "console: the HTTP server did not start on %s:%d",
                 c->host, c->port);
    goto fail;
  }
  char shown[300];
  snprintf(shown, sizeof shown, v6 ? "[%s]:%d" : "%s:%d", c->host, c->port);
  if (!loop)
    fprintf(stderr,
            "luagent: warning: the console listens on %s, reachable from other machines; "
            "anyone with the token can approve tool calls. Put it behind a TLS reverse proxy.\n",
            shown);
  if (created)
    printf("console: http://%s/#token=%s\n"
           "console: (the token is printed this once; it is kept in %s/.luagent/console.token)\n",
           shown, c->token, c->workspace);
  else
    printf("console: http://%s/ (log in with the token in %s/.luagent/console.token)\n", shown,
           c->workspace);
  /* Escalations reach the console only through the queue. */
  struct config *cfg = NULL;
  struct err ce = {0};
  if (!config_load(c->workspace, &cfg, &ce)) {
    const char *ap = config_string(cfg, "approver", "auto");
    if (strcmp(ap, "queue"))
      printf("console: note: approver is \"%s\" in luagent.lua, so escalated tool calls never "
             "reach the approval queue here; set approver = \"queue\" to decide them in the "
             "console\n",
             ap);
    config_free(cfg);
  }
  fflush(stdout);
  *out = c;
  return 0;
fail:
  console_stop(c);
  return rc;
}

void console_stop(struct console *c) {
  if (!c) return;
  c->stopping = 1;
  pthread_mutex_lock(&c->mu);
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  console__chats_stop(c);
  if (c->d) MHD_stop_daemon(c->d);
  for (char **h = c->hosts; h && *h; h++) free(*h);
  free(c->hosts);
  sodium_memzero(c->token, sizeof c->token);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  free(c);
}
