/* mcp_http.c - the Streamable HTTP transport of the MCP client: every
 * message is a POST to the server's URL; a request's answer comes back as
 * one JSON body or as a text/event-stream carrying the server's own
 * messages first and the answer last. The session id the server gives at
 * initialize goes with every later POST.
 *
 * Before each POST the URL's origin must be on http_allow, and a header
 * that carries a secret ({ secret = "NAME" }) may only go to an origin
 * the secret's declaration allows, as for http.request. Redirects are not
 * followed (a 3xx is an error), so the origin checked is the one reached.
 *
 * Resumability: when an event stream ends or breaks before the answer and
 * the server gave its events ids, the client reconnects with a GET and
 * Last-Event-ID (after the server's retry delay), bounded per request; the
 * origin and headers are checked again for each.
 */
#include <curl/curl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "config.h"
#include "curl_dyn.h"
#include "json.h"
#include "mcp_impl.h"
#include "secrets.h"
#include "sse.h"
#include "util.h"

#define MCP_SSE_RESUMES 5          /* reconnections for one request's broken stream */
#define MCP_SSE_RETRY_DEFAULT_S 0.5 /* when the server gave no retry field */
#define MCP_SSE_RETRY_MAX_S 10.0    /* the most of a server's retry we wait */
#define MCP_SSE_ID_MAX 256          /* a longer event id is not sent back */

struct post {
  struct mcp_server *s;
  struct call_ctx *ctx;
  long want_id;           /* the answer we wait for; 0: none (a notification) */
  cJSON *answer;          /* the message with want_id, once seen */
  struct sbuf body;       /* a JSON body, or nothing when SSE */
  struct sse_parser *sse; /* set once the Content-Type says text/event-stream */
  int is_sse, is_json;
  char session[256];      /* Mcp-Session-Id of the response */
  int notes;              /* the server's own messages on this stream */
  struct err perr;        /* why a stream was refused */
  int failed;
  volatile int *stop;
};

static int on_message(struct post *p, cJSON *msg) {
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
  if (cJSON_GetObjectItemCaseSensitive(msg, "method")) {
    if (++p->notes > MCP_MAX_NOTIFICATIONS) {
      err_set(&p->perr, ERR_LIMIT, "mcp_flood",
              "mcp server %s sent more than %d messages of its own on one stream", p->s->name,
              MCP_MAX_NOTIFICATIONS);
      return 1;
    }
    mcp__on_server_message(p->s, p->ctx, msg);
    return 0;
  }
  if (p->want_id && cJSON_IsNumber(id) && id->valuedouble == (double)p->want_id) {
    cJSON_Delete(p->answer);
    p->answer = cJSON_Duplicate(msg, 1);
    return 1; /* ours: the stream may close now */
  }
  return 0;
}

static int sse_event(void *ud, const struct sse_event *ev) {
  struct post *p = ud;
  if (!ev->data_len) return 0; /* a priming event */
  cJSON *msg = NULL;
  struct err pe = {0};
  if (json_parse(ev->data, ev->data_len, 0, &msg, &pe) || !cJSON_IsObject(msg)) {
    err_set(&p->perr, ERR_INVALID, "mcp_protocol",
            "mcp server %s sent malformed JSON-RPC in its event stream (%s)", p->s->name,
            pe.msg[0] ? pe.msg : "not an object");
    cJSON_Delete(msg);
    p->failed = 1;
    return 1;
  }
  int r = on_message(p, msg);
  cJSON_Delete(msg);
  if (r && p->perr.rc) p->failed = 1;
  return r;
}

static size_t on_header(char *buf, size_t size, size_t n, void *ud) {
  struct post *p = ud;
  size_t len = size * n;
  if (len > 13 && !strncasecmp(buf, "content-type:", 13)) {
    const char *v = buf + 13;
    while (*v == ' ') v++;
    p->is_sse = !strncasecmp(v, "text/event-stream", 17);
    p->is_json = !strncasecmp(v, "application/json", 16);
  } else if (len > 15 && !strncasecmp(buf, "mcp-session-id:", 15)) {
    const char *v = buf + 15;
    while (*v == ' ') v++;
    size_t k = 0;
    while (v + k < buf + len && v[k] > 0x20 && v[k] < 0x7f && k < sizeof p->session - 1) k++;
    memcpy(p->session, v, k);
    p->session[k] = 0;
  }
  return len;
}

static size_t on_body(char *buf, size_t size, size_t n, void *ud) {
  struct post *p = ud;
  size_t len = size * n;
  if (p->is_sse) {
    if (!p->sse) p->sse = sse_new(sse_event, p, p->s->max_message);
    struct err e = {0};
    int r = sse_feed(p->sse, buf, len, &e);
    if (r == ERR_LIMIT) {
      err_set(&p->perr, ERR_LIMIT, "mcp_message_too_big",
              "mcp server %s sent an event over the limit of %zu bytes (mcp.servers.%s.max_message_mb)",
              p->s->name, p->s->max_message, p->s->name);
      p->failed = 1;
      return 0;
    }
    return r ? 0 : len; /* our answer came (or a refusal): stop reading */
  }
  if (p->body.len + len > p->s->max_message) {
    err_set(&p->perr, ERR_LIMIT, "mcp_message_too_big",
            "mcp server %s sent a message over the limit of %zu bytes (mcp.servers.%s.max_message_mb)",
            p->s->name, p->s->max_message, p->s->name);
    p->failed = 1;
    return 0;
  }
  sbuf_append(&p->body, buf, len);
  return len;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
  (void)a, (void)b, (void)c, (void)d;
  struct post *p = ud;
  return p->stop && *p->stop;
}

/* The origin of the server's URL, checked against http_allow. */
static int check_origin(struct mcp *m, struct mcp_server *s, struct origin *o, struct err *e) {
  CURLU *u = curl_url();
  char *scheme = NULL, *host = NULL, *port = NULL;
  int rc = 0;
  if (curl_url_set(u, CURLUPART_URL, s->url, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK)
    rc = err_set(e, ERR_INVALID, "config", "mcp.servers.%s.url: '%s' is not a valid URL", s->name, s->url);
  else if ((rc = origin_from_parts(scheme, host, atoi(port), o, e)))
    err_prefix(e, "mcp.servers.%s.url", s->name);
  curl_free(scheme);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
  if (rc) return rc;
  char buf[ORIGIN_HOST_MAX + 32];
  if (!config_http_allowed(m->rt->cfg, o))
    return err_set(e, ERR_DENIED, "host_not_allowed",
                   "mcp server %s: %s is not allowed by http_allow (add it to luagent.lua)", s->name,
                   origin_format(o, buf, sizeof buf));
  return 0;
}

/* The config's headers, secrets resolved after their origin check. */
static int build_headers(struct mcp *m, struct mcp_server *s, const struct origin *o,
                         struct curl_slist **out, struct err *e) {
  struct curl_slist *hl = NULL;
  hl = curl_slist_append(hl, "Content-Type: application/json");
  hl = curl_slist_append(hl, "Accept: application/json, text/event-stream");
  char line[400];
  if (s->version[0]) {
    snprintf(line, sizeof line, "MCP-Protocol-Version: %s", s->version);
    hl = curl_slist_append(hl, line);
  }
  if (s->session[0]) {
    snprintf(line, sizeof line, "Mcp-Session-Id: %s", s->session);
    hl = curl_slist_append(hl, line);
  }
  char what[160];
  snprintf(what, sizeof what, "mcp server %s", s->name);
  for (const cJSON *h = s->headers ? s->headers->child : NULL; h; h = h->next) {
    const cJSON *sec = cJSON_IsObject(h) ? cJSON_GetObjectItemCaseSensitive(h, "secret") : NULL;
    int rc;
    if (cJSON_IsString(sec) && (rc = secrets_check_origin(m->rt->cfg, what, sec->valuestring, o, e))) {
      curl_slist_free_all(hl);
      return rc;
    }
  }
  int rc = secrets_append_headers(m->rt, s->headers, what, &hl, e);
  if (rc) return rc;
  *out = hl;
  return 0;
}

/* One HTTP exchange of p: a POST of body, or (body NULL) the GET that
 * resumes a broken event stream. *status gets the HTTP status. */
static CURLcode transfer(struct post *p, const char *url, const char *body, struct curl_slist *hl,
                         double left, long *status) {
  CURL *c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, url);
  if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  else curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  /* never through a proxy from the environment (http_proxy...): it would
   * see the headers, secrets included, of an http:// server in clear */
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(left * 1000));
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, p);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, p);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, p);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  CURLcode cr = curl_easy_perform(c);
  *status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
  curl_easy_cleanup(c);
  return cr;
}

/* A stream that ended (cleanly or not) before our answer, after the server
 * gave its events ids: the spec's resumability. Anything we stopped
 * ourselves (the operator, the deadline, a refused message) is not. */
static int resumable(const struct post *p, CURLcode cr, long status, const char *last_id) {
  if (!p->want_id || p->answer || p->failed || !p->is_sse || !last_id[0]) return 0;
  if (status < 200 || status > 299) return 0;
  return cr == CURLE_OK || cr == CURLE_PARTIAL_FILE || cr == CURLE_RECV_ERROR ||
         cr == CURLE_GOT_NOTHING;
}

int mcp__http_post(struct mcp *m, struct mcp_server *s, struct call_ctx *ctx, const cJSON *msg,
                   long want_id, double deadline, cJSON **answer, struct err *e) {
  if (answer) *answer = NULL;
  int rc = curl_dyn_load(e); /* libcurl missing: say so before anything else */
  if (rc) {
    err_prefix(e, "mcp server %s", s->name);
    return rc;
  }
  struct origin o;
  rc = check_origin(m, s, &o, e);
  if (rc) return rc;
  struct curl_slist *hl = NULL;
  if ((rc = build_headers(m, s, &o, &hl, e))) return rc;
  double left = deadline - util_monotonic();
  if (left < 0.05) {
    curl_slist_free_all(hl);
    return err_set(e, ERR_LIMIT, "timeout", "mcp server %s: no time left", s->name);
  }
  char *body = json_print(msg, 0);
  struct post p = {.s = s, .ctx = ctx, .want_id = want_id, .stop = ctx ? ctx->stop : NULL};
  long status = 0;
  CURLcode cr = transfer(&p, s->url, body, hl, left, &status);
  curl_slist_free_all(hl);
  hl = NULL;
  free(body);
  /* Resuming: GET with Last-Event-ID, after the server's retry delay (capped),
   * at most MCP_SSE_RESUMES times for one request. The new stream replays
   * what came after that id, then goes on; our answer may be among it. */
  char last_id[MCP_SSE_ID_MAX] = "";
  for (int tries = 0;; tries++) {
    if (p.session[0]) snprintf(s->session, sizeof s->session, "%s", p.session);
    const char *id = sse_last_id(p.sse);
    if (id[0] && strlen(id) < sizeof last_id && !strpbrk(id, "\r\n")) snprintf(last_id, sizeof last_id, "%s", id);
    if (!resumable(&p, cr, status, last_id)) break;
    if (tries == MCP_SSE_RESUMES) {
      rc = err_set(e, ERR_IO, "mcp_http",
                   "mcp server %s: its event stream broke %d times before the answer (resumed with "
                   "Last-Event-ID each time)",
                   s->name, tries + 1);
      goto out;
    }
    long retry = sse_retry_ms(p.sse);
    double wait = retry >= 0 ? retry / 1000.0 : MCP_SSE_RETRY_DEFAULT_S;
    if (wait > MCP_SSE_RETRY_MAX_S) wait = MCP_SSE_RETRY_MAX_S;
    if (util_monotonic() + wait > deadline - 0.05) break; /* no time to resume: the error below */
    for (double t = 0; t < wait && !(p.stop && *p.stop); t += 0.05) util_sleep(wait - t < 0.05 ? wait - t : 0.05);
    if (p.stop && *p.stop) {
      cr = CURLE_ABORTED_BY_CALLBACK;
      break;
    }
    if ((rc = build_headers(m, s, &o, &hl, e))) goto out;
    char line[MCP_SSE_ID_MAX + 20];
    snprintf(line, sizeof line, "Last-Event-ID: %s", last_id);
    hl = curl_slist_append(hl, line);
    sse_free(p.sse);
    p.sse = NULL;
    p.is_sse = p.is_json = 0;
    p.body.len = 0;
    cr = transfer(&p, s->url, NULL, hl, deadline - util_monotonic(), &status);
    curl_slist_free_all(hl);
    hl = NULL;
    if (status == 405) {
      rc = err_set(e, ERR_IO, "mcp_http",
                   "mcp server %s: its event stream broke before the answer, and it does not offer "
                   "resuming it (GET with Last-Event-ID: HTTP 405)",
                   s->name);
      goto out;
    }
  }
  const char *method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "method"));
  if (!method) method = "a response";
  if (p.failed) {
    *e = p.perr;
    rc = e->rc;
    goto out;
  }
  if (cr == CURLE_ABORTED_BY_CALLBACK) {
    rc = err_set(e, ERR_STOPPED, "stopped", "mcp server %s: %s: stopped by the operator", s->name, method);
    goto out;
  }
  if (cr == CURLE_OPERATION_TIMEDOUT) {
    rc = err_set(e, ERR_LIMIT, "timeout", "mcp server %s did not answer %s within %g s (mcp.servers.%s.timeout_s)",
                 s->name, method, s->timeout_s, s->name);
    goto out;
  }
  if (cr != CURLE_OK && !(cr == CURLE_WRITE_ERROR && p.answer)) {
    rc = err_set(e, ERR_IO, "mcp_http", "mcp server %s: %s: %s", s->name, method, curl_easy_strerror(cr));
    goto out;
  }
  if (status == 404 && s->session[0]) { /* the server forgot the session: start over */
    s->session[0] = 0;
    s->ready = 0;
    s->http_up = 0;
    rc = err_set(e, ERR_IO, "mcp_session_expired", "mcp server %s: its session expired (HTTP 404)",
                 s->name);
    goto out;
  }
  if (status < 200 || status > 299) {
    struct sbuf b = {0};
    util_escape_text(&b, p.body.s ? p.body.s : "", p.body.len, 200);
    rc = err_set(e, ERR_IO, "mcp_http", "mcp server %s: %s: HTTP %ld%s%s", s->name, method, status,
                 b.len ? ": " : "", b.s ? b.s : "");
    sbuf_free(&b);
    goto out;
  }
  if (!want_id) goto out; /* a notification or our response: 202 and nothing more */
  if (!p.answer && p.is_json && p.body.len) {
    cJSON *v = NULL;
    struct err pe = {0};
    if (json_parse(p.body.s, p.body.len, 0, &v, &pe) || !cJSON_IsObject(v)) {
      struct sbuf b = {0};
      util_escape_text(&b, p.body.s, p.body.len, 120);
      rc = err_set(e, ERR_INVALID, "mcp_protocol", "mcp server %s sent malformed JSON-RPC during %s (%s): %s",
                   s->name, method, pe.msg[0] ? pe.msg : "not an object", b.s ? b.s : "");
      sbuf_free(&b);
      cJSON_Delete(v);
      goto out;
    }
    on_message(&p, v);
    cJSON_Delete(v);
  }
  if (!p.answer) {
    rc = err_set(e, ERR_INVALID, "mcp_protocol", "mcp server %s: %s: the %s ended without an answer",
                 s->name, method, p.is_sse ? "event stream" : "response");
    goto out;
  }
  *answer = p.answer;
  p.answer = NULL;
out:
  cJSON_Delete(p.answer);
  sse_free(p.sse);
  sbuf_free(&p.body);
  return rc;
}

static size_t discard(char *buf, size_t size, size_t n, void *ud) {
  (void)buf, (void)ud;
  return size * n;
}

void mcp__http_close(struct mcp *m, struct mcp_server *s) {
  if (!s->session[0]) return;
  /* DELETE ends the session on the server (best effort, short) */
  struct origin o;
  struct err e = {0};
  struct curl_slist *hl = NULL;
  if (!check_origin(m, s, &o, &e) && !build_headers(m, s, &o, &hl, &e)) {
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, s->url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2000L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_perform(c);
    curl_easy_cleanup(c);
  }
  curl_slist_free_all(hl);
  s->session[0] = 0;
}
