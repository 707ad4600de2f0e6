/* mcp_client.c - one connection to an MCP server over stdio: start with
 * backoff, the initialize handshake (or the 2026-07-28 stateless mode
 * when server/discover says so: mcp_discover.c), requests with timeouts,
 * and what the server may send meanwhile (notifications, its own
 * requests, garbage).
 *
 * A server that breaks the protocol (a line that is not a JSON-RPC 2.0
 * message, a message over the size limit, a flood of notifications) is
 * stopped: the request fails with a message saying what it sent, and the
 * next call starts it afresh. Its answer to a request we gave up on
 * (timeout, stop) is dropped by id.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "events.h"
#include "json.h"
#include "mcp_impl.h"
#include "util.h"

const char *const mcp_versions[] = {"2025-11-25", "2025-06-18", NULL};

void mcp__stop(struct mcp_server *s) {
  if (s->url) {
    if (s->http_up) mcp__http_close(s->owner, s);
    s->http_up = 0;
  } else {
    mcp_proc_stop(&s->proc, 0.5);
  }
  s->ready = 0;
  cJSON_Delete(s->live);
  s->live = NULL;
  cJSON_Delete(s->server_info);
  s->server_info = NULL;
  s->version[0] = 0;
  s->stateless = 0;
}

/* A short, printable excerpt of what a server sent, for messages. */
static void excerpt(const char *s, size_t n, char *out, size_t outn) {
  struct sbuf b = {0};
  util_escape_text(&b, s, n, 120);
  snprintf(out, outn, "%s", b.s ? b.s : "");
  sbuf_free(&b);
}

/* The error for a server that died under us: what it was doing, how it
 * ended, and the end of its stderr. */
static int died(struct mcp_server *s, const char *method, struct err *e) {
  /* its output closed; give it a moment to finish exiting, for the status */
  for (int i = 0; i < 50 && mcp_proc_alive(&s->proc); i++) util_sleep(0.01);
  char how[64];
  mcp_proc_describe(&s->proc, how, sizeof how);
  char tail[400] = "";
  if (s->proc.tail_len) {
    const char *t = s->proc.tail;
    size_t n = s->proc.tail_len;
    if (n > 300) t += n - 300, n = 300;
    excerpt(t, n, tail, sizeof tail);
  }
  err_set(e, ERR_IO, "mcp_exited", "mcp server %s exited during %s (%s)%s%s", s->name, method, how,
          tail[0] ? "; its stderr ended with: " : "", tail);
  mcp__stop(s);
  s->deaths++;
  s->died_at = util_monotonic();
  return ERR_IO;
}

static int send_msg(struct mcp_server *s, cJSON *msg, double deadline, struct err *e) {
  if (s->url) return mcp__http_post(s->owner, s, NULL, msg, 0, deadline, NULL, e);
  char *text = json_print(msg, 0); /* compact: no newline inside */
  int rc = mcp_proc_write_line(&s->proc, text, strlen(text), deadline, e);
  free(text);
  return rc;
}

static void send_error(struct mcp_server *s, const cJSON *id, int code, const char *msg,
                       double deadline) {
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "jsonrpc", "2.0");
  cJSON_AddItemToObject(r, "id", cJSON_Duplicate(id, 0));
  cJSON *er = cJSON_AddObjectToObject(r, "error");
  cJSON_AddNumberToObject(er, "code", code);
  cJSON_AddStringToObject(er, "message", msg);
  struct err ignore = {0};
  send_msg(s, r, deadline, &ignore);
  cJSON_Delete(r);
}

static void send_cancel(struct mcp_server *s, long id, const char *why) {
  cJSON *n = cJSON_CreateObject();
  cJSON_AddStringToObject(n, "jsonrpc", "2.0");
  cJSON_AddStringToObject(n, "method", "notifications/cancelled");
  cJSON *p = cJSON_AddObjectToObject(n, "params");
  cJSON_AddNumberToObject(p, "requestId", (double)id);
  cJSON_AddStringToObject(p, "reason", why);
  struct err ignore = {0};
  send_msg(s, n, util_monotonic() + 1.0, &ignore);
  cJSON_Delete(n);
}

/* A request from the server to us: ping, elicitation (answered by the
 * operator through the approver, mcp_elicit.c) and sampling (refused
 * unless config allows it, mcp_sample.c); roots are not offered. Returns 1
 * after an elicitation or a sampling (the operator's and the model's time
 * are not the server's: the caller restarts its wait). */
static int server_request(struct mcp_server *s, struct call_ctx *ctx, const cJSON *msg,
                          double deadline) {
  const char *method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "method"));
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
  int elicit = method && !strcmp(method, "elicitation/create");
  int sample = method && !strcmp(method, "sampling/createMessage");
  cJSON *result = NULL;
  if (method && !strcmp(method, "ping")) {
    result = cJSON_CreateObject();
  } else if (elicit) {
    result = mcp__elicit(s, ctx, params);
  } else if (sample) {
    int code = 0;
    char m[600];
    mcp__sample(s, ctx, params, &result, &code, m, sizeof m);
    if (!result) {
      send_error(s, id, code, m, util_monotonic() + s->timeout_s);
      return 1;
    }
  } else {
    send_error(s, id, -32601, "method not supported by luagent", deadline);
    return 0;
  }
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "jsonrpc", "2.0");
  cJSON_AddItemToObject(r, "id", cJSON_Duplicate(id, 0));
  cJSON_AddItemToObject(r, "result", result);
  struct err ignore = {0};
  send_msg(s, r, elicit || sample ? util_monotonic() + s->timeout_s : deadline, &ignore);
  cJSON_Delete(r);
  return elicit || sample;
}

static void notification(struct mcp_server *s, struct call_ctx *ctx, const cJSON *msg) {
  const char *method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "method"));
  if (!method) return;
  if (!strcmp(method, "notifications/tools/list_changed")) {
    s->list_changed = 1;
  } else if (!strcmp(method, "notifications/progress")) {
    mcp__progress(s, ctx, cJSON_GetObjectItemCaseSensitive(msg, "params"));
  }
  /* notifications/message and the rest: not shown (the stderr log has the
   * server's own diagnostics) */
}

void mcp__on_server_message(struct mcp_server *s, struct call_ctx *ctx, const cJSON *msg) {
  if (cJSON_GetObjectItemCaseSensitive(msg, "id")) server_request(s, ctx, msg, util_monotonic() + s->timeout_s);
  else notification(s, ctx, msg);
}

/* What an answer says: its result, or the server's error. Takes msg. */
static int answer_of(struct mcp_server *s, const char *method, cJSON *msg, cJSON **result,
                     struct err *e) {
  const cJSON *merr = cJSON_GetObjectItemCaseSensitive(msg, "error");
  if (merr) {
    const char *m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(merr, "message"));
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(merr, "code");
    char ex[300];
    excerpt(m ? m : "(no message)", strlen(m ? m : "(no message)"), ex, sizeof ex);
    err_set(e, ERR_FAIL, "mcp_error", "mcp server %s: %s failed: %s (JSON-RPC error %d)", s->name,
            method, ex, cJSON_IsNumber(code) ? (int)code->valuedouble : 0);
    cJSON_Delete(msg);
    return ERR_FAIL;
  }
  *result = cJSON_DetachItemFromObjectCaseSensitive(msg, "result");
  cJSON_Delete(msg);
  if (!*result) return err_set(e, ERR_INVALID, "mcp_protocol", "mcp server %s: %s: an answer without a result",
                               s->name, method);
  return 0;
}

/* The protocol break: stop the server and say what it sent. */
static int malformed(struct mcp_server *s, const char *method, const char *why, const char *line,
                     size_t len, struct err *e) {
  char ex[200];
  excerpt(line, len, ex, sizeof ex);
  err_set(e, ERR_INVALID, "mcp_protocol",
          "mcp server %s sent malformed JSON-RPC during %s (%s): %s; the server was stopped", s->name,
          method, why, ex);
  mcp__stop(s);
  return ERR_INVALID;
}

/* Writes one request and reads until its answer. */
int mcp__exchange(struct mcp_server *s, struct call_ctx *ctx, const char *method,
                  const cJSON *params, double timeout_s, int keep, cJSON **answer, struct err *e) {
  *answer = NULL;
  long id = ++s->next_id;
  s->samples = 0; /* samplings answered while waiting for this request */
  double deadline = util_monotonic() + timeout_s;
  if (ctx && ctx->limits.deadline_at > 0 && ctx->limits.deadline_at < deadline)
    deadline = ctx->limits.deadline_at; /* the run's own deadline comes first */
  cJSON *req = cJSON_CreateObject();
  cJSON_AddStringToObject(req, "jsonrpc", "2.0");
  cJSON_AddNumberToObject(req, "id", (double)id);
  cJSON_AddStringToObject(req, "method", method);
  if (params) cJSON_AddItemToObject(req, "params", cJSON_Duplicate(params, 1));
  if (s->url) {
    cJSON *ans = NULL;
    int hr = mcp__http_post(s->owner, s, ctx, req, id, deadline, &ans, e);
    cJSON_Delete(req);
    if (hr == ERR_LIMIT && !strcmp(e->code, "timeout")) {
      struct err te = *e;
      send_cancel(s, id, "timed out");
      *e = te;
    }
    if (hr) return hr;
    *answer = ans;
    return 0;
  }
  int rc = send_msg(s, req, deadline, e);
  cJSON_Delete(req);
  if (rc == ERR_IO) return died(s, method, e);
  if (rc) {
    err_prefix(e, "mcp server %s: %s", s->name, method);
    return rc;
  }
  unsigned notes = 0;
  volatile int *stop = ctx ? ctx->stop : NULL;
  for (;;) {
    char *line;
    size_t len;
    rc = mcp_proc_read_line(&s->proc, &line, &len, s->max_message, deadline, stop, e);
    if (rc) {
      if (!strcmp(e->code, "mcp_exited")) return died(s, method, e);
      if (!strcmp(e->code, "mcp_message_too_big")) {
        err_prefix(e, "mcp server %s: %s", s->name, method);
        snprintf(e->msg + strlen(e->msg), sizeof e->msg - strlen(e->msg),
                 " (mcp.servers.%s.max_message_mb); the server was stopped", s->name);
        mcp__stop(s);
        return rc;
      }
      if (rc == ERR_LIMIT || rc == ERR_STOPPED) {
        /* Tell it, then stop it: a server that did not answer in time may
         * never answer, and one that works through requests in order would
         * make every later call wait behind this one. The next call
         * starts it afresh. */
        send_cancel(s, id, rc == ERR_STOPPED ? "stopped by the operator" : "timed out");
        if (!(keep && rc == ERR_LIMIT)) mcp__stop(s);
        if (rc == ERR_LIMIT)
          err_set(e, ERR_LIMIT, "timeout",
                  "mcp server %s did not answer %s within %g s (mcp.servers.%s.timeout_s); the "
                  "server was stopped",
                  s->name, method, timeout_s, s->name);
        else
          err_prefix(e, "mcp server %s: %s", s->name, method);
        return rc;
      }
      err_prefix(e, "mcp server %s: %s", s->name, method);
      return rc;
    }
    cJSON *msg = NULL;
    struct err pe = {0};
    if (!len) { /* a blank line carries nothing; tolerate it */
      free(line);
      continue;
    }
    if (json_parse(line, len, 0, &msg, &pe)) {
      rc = malformed(s, method, pe.msg, line, len, e);
      free(line);
      return rc;
    }
    const char *ver = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "jsonrpc"));
    if (!cJSON_IsObject(msg) || !ver || strcmp(ver, "2.0")) {
      rc = malformed(s, method, "not a JSON-RPC 2.0 object", line, len, e);
      free(line);
      cJSON_Delete(msg);
      return rc;
    }
    const cJSON *mid = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const cJSON *mmethod = cJSON_GetObjectItemCaseSensitive(msg, "method");
    const cJSON *mres = cJSON_GetObjectItemCaseSensitive(msg, "result");
    const cJSON *merr = cJSON_GetObjectItemCaseSensitive(msg, "error");
    if (mmethod) {
      if (!cJSON_IsString(mmethod)) {
        rc = malformed(s, method, "method is not a string", line, len, e);
        free(line);
        cJSON_Delete(msg);
        return rc;
      }
      if (++notes > MCP_MAX_NOTIFICATIONS) {
        free(line);
        cJSON_Delete(msg);
        err_set(e, ERR_LIMIT, "mcp_flood",
                "mcp server %s sent more than %d messages of its own while answering %s; the "
                "server was stopped",
                s->name, MCP_MAX_NOTIFICATIONS, method);
        mcp__stop(s);
        return ERR_LIMIT;
      }
      if (mid && server_request(s, ctx, msg, deadline))
        deadline = util_monotonic() + s->timeout_s; /* the server's clock starts again */
      else if (!mid)
        notification(s, ctx, msg);
      free(line);
      cJSON_Delete(msg);
      continue;
    }
    if (!mid || (!mres && !merr) || (mres && merr)) {
      rc = malformed(s, method, "neither a request, a notification nor a response", line, len, e);
      free(line);
      cJSON_Delete(msg);
      return rc;
    }
    free(line);
    if (!cJSON_IsNumber(mid) || mid->valuedouble != (double)id) { /* late answer to a dropped request */
      cJSON_Delete(msg);
      continue;
    }
    *answer = msg;
    return 0;
  }
}

/* One request, its result or the server's error; a stateless connection
 * adds the per-request _meta and checks the resultType. */
static int roundtrip(struct mcp_server *s, struct call_ctx *ctx, const char *method,
                     const cJSON *params, cJSON **result, struct err *e) {
  *result = NULL;
  cJSON *meta_params = s->stateless ? mcp__stateless_params(params) : NULL;
  cJSON *ans = NULL;
  int rc = mcp__exchange(s, ctx, method, meta_params ? meta_params : params, s->timeout_s, 0, &ans,
                         e);
  cJSON_Delete(meta_params);
  if (rc) return rc;
  if ((rc = answer_of(s, method, ans, result, e))) return rc;
  if (s->stateless && (rc = mcp__stateless_result(s, method, *result, e))) {
    cJSON_Delete(*result);
    *result = NULL;
  }
  return rc;
}

/* Starts the stdio server's process, its stderr going to the log. */
static int spawn(struct mcp *m, struct mcp_server *s, struct err *e) {
  char dir[4300]; /* .luagent/mcp/, the log's folder */
  snprintf(dir, sizeof dir, "%s", s->log_path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  struct err me = {0};
  util_mkdirs(dir, 0700, &me);
  int rc = mcp_proc_start(&s->proc, s->argv, s->env, s->cwd ? s->cwd : m->rt->workspace, s->log_path,
                          MCP_LOG_MAX, e);
  if (rc) {
    err_prefix(e, "mcp server %s", s->name);
    s->deaths++;
    s->died_at = util_monotonic();
  }
  return rc;
}

/* Starts the process and finds out what it speaks: on stdio the
 * server/discover probe first (2026-07-28, mcp_discover.c); otherwise the
 * handshake: initialize with our newest version, accept the server's
 * answer if we speak it too. */
static int start(struct mcp *m, struct mcp_server *s, struct call_ctx *ctx, struct err *e) {
  (void)m;
  if (s->deaths) {
    /* 0.25 s, 0.5 s, 1 s ... at most 8 s after the last death; a wait
     * longer than the request's own timeout fails instead */
    double backoff = 0.25 * (double)(1u << (s->deaths > 6 ? 5 : s->deaths - 1));
    double wait = s->died_at + backoff - util_monotonic();
    if (wait > s->timeout_s)
      return err_set(e, ERR_IO, "mcp_exited",
                     "mcp server %s died %d times in a row; next start in %.1f s", s->name,
                     s->deaths, wait);
    if (wait > 0) util_sleep(wait);
  }
  int rc;
  s->stateless = 0;
  if (s->url) goto handshake;
  if ((rc = spawn(m, s, e))) return rc;
  /* stdio: a server that speaks 2026-07-28 answers server/discover and
   * needs no handshake; any other answer means initialize, as before */
  int modern = 0;
  if ((rc = mcp__discover(s, ctx, &modern, e))) {
    mcp__stop(s);
    return rc;
  }
  if (modern) {
    s->started_at = util_monotonic();
    return 0;
  }
  if (!s->proc.pid && (rc = spawn(m, s, e))) return rc; /* the probe killed it: a fresh one */
handshake:
  s->started_at = util_monotonic();
  s->version[0] = 0;
  s->session[0] = 0;
  cJSON *p = cJSON_CreateObject();
  cJSON_AddStringToObject(p, "protocolVersion", mcp_versions[0]);
  cJSON *caps = cJSON_AddObjectToObject(p, "capabilities");
  cJSON *el = cJSON_AddObjectToObject(caps, "elicitation"); /* answered through the approver */
  cJSON_AddObjectToObject(el, "form");
  cJSON_AddObjectToObject(el, "url");
  if (s->sampling) cJSON_AddObjectToObject(caps, "sampling"); /* only when config allows it */
  cJSON *ci = cJSON_AddObjectToObject(p, "clientInfo");
  cJSON_AddStringToObject(ci, "name", "luagent");
  cJSON_AddStringToObject(ci, "version", LUAGENT_VERSION);
  cJSON *res = NULL;
  rc = roundtrip(s, ctx, "initialize", p, &res, e);
  cJSON_Delete(p);
  if (rc) {
    mcp__stop(s);
    if (s->url) { /* counts for the backoff like a dead process */
      s->deaths++;
      s->died_at = util_monotonic();
    }
    return rc;
  }
  const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "protocolVersion"));
  int ok = 0;
  for (int i = 0; v && mcp_versions[i]; i++) ok |= !strcmp(v, mcp_versions[i]);
  /* 2025-03-26 (the first with Streamable HTTP) is accepted from a server
   * too: what luagent uses of it is the same; a batch it might send is
   * refused as malformed like any non-object message */
  ok |= v && !strcmp(v, "2025-03-26");
  if (!ok) {
    char ex[80];
    excerpt(v ? v : "(none)", strlen(v ? v : "(none)"), ex, sizeof ex);
    cJSON_Delete(res);
    mcp__stop(s);
    return err_set(e, ERR_INVALID, "mcp_version",
                   "mcp server %s speaks protocol version %s; luagent speaks %s, %s and 2025-03-26",
                   s->name, ex, mcp_versions[0], mcp_versions[1]);
  }
  snprintf(s->version, sizeof s->version, "%s", v);
  cJSON_Delete(s->server_info);
  s->server_info = cJSON_DetachItemFromObjectCaseSensitive(res, "serverInfo");
  cJSON_Delete(res);
  cJSON *n = cJSON_CreateObject();
  cJSON_AddStringToObject(n, "jsonrpc", "2.0");
  cJSON_AddStringToObject(n, "method", "notifications/initialized");
  if (s->url) s->http_up = 1;
  rc = send_msg(s, n, util_monotonic() + s->timeout_s, e);
  cJSON_Delete(n);
  if (rc) return s->url ? rc : died(s, "initialize", e);
  return 0;
}

int mcp__page_take(cJSON *all, cJSON *res, const char *key, char **cursor) {
  free(*cursor);
  *cursor = NULL;
  cJSON *list = cJSON_GetObjectItemCaseSensitive(res, key);
  if (!cJSON_IsArray(list)) return -1;
  for (cJSON *t = list->child; t;) {
    cJSON *next = t->next;
    cJSON_AddItemToArray(all, cJSON_DetachItemViaPointer(list, t));
    t = next;
  }
  const char *nc = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "nextCursor"));
  *cursor = nc && *nc ? xstrdup(nc) : NULL;
  return 0;
}

/* tools/list, every page. */
static int list_tools(struct mcp *m, struct mcp_server *s, struct call_ctx *ctx, struct err *e) {
  (void)m;
  cJSON *all = cJSON_CreateArray();
  char *cursor = NULL;
  int rc = 0;
  s->list_changed = 0;
  for (int page = 0;; page++) {
    if (page == MCP_MAX_PAGES) {
      rc = err_set(e, ERR_LIMIT, "mcp_protocol", "mcp server %s: tools/list has more than %d pages",
                   s->name, MCP_MAX_PAGES);
      break;
    }
    cJSON *p = cJSON_CreateObject();
    if (cursor) cJSON_AddStringToObject(p, "cursor", cursor);
    cJSON *res = NULL;
    rc = roundtrip(s, ctx, "tools/list", p, &res, e);
    cJSON_Delete(p);
    if (rc) break;
    int bad = mcp__page_take(all, res, "tools", &cursor);
    cJSON_Delete(res);
    if (bad) {
      rc = err_set(e, ERR_INVALID, "mcp_protocol", "mcp server %s: tools/list answered without a tools list",
                   s->name);
      break;
    }
    if (!cursor) break;
  }
  free(cursor);
  if (rc) {
    cJSON_Delete(all);
    return rc;
  }
  cJSON_Delete(s->live);
  s->live = all;
  return 0;
}

/* Reads what the server sent since the last answer (a list_changed that
 * followed it, a ping), without waiting. A protocol break stops it. */
static void drain_pending(struct mcp_server *s, struct call_ctx *ctx) {
  if (s->url) return; /* HTTP: what the server sends comes on our requests' streams */
  for (int i = 0; s->proc.pid && i < MCP_MAX_NOTIFICATIONS; i++) {
    char *line;
    size_t len;
    struct err e = {0};
    if (mcp_proc_read_line(&s->proc, &line, &len, s->max_message, util_monotonic(), NULL, &e)) {
      if (strcmp(e.code, "timeout")) mcp__stop(s); /* died, or sent too much: start afresh */
      return;
    }
    cJSON *msg = NULL;
    if (len && (json_parse(line, len, 0, &msg, &e) || !cJSON_IsObject(msg))) {
      cJSON_Delete(msg);
      free(line);
      mcp__stop(s);
      return;
    }
    free(line);
    const cJSON *mm = cJSON_GetObjectItemCaseSensitive(msg, "method");
    if (cJSON_IsString(mm)) {
      if (cJSON_GetObjectItemCaseSensitive(msg, "id")) server_request(s, ctx, msg, util_monotonic() + 1.0);
      else notification(s, ctx, msg);
    }
    cJSON_Delete(msg);
  }
}

int mcp__ready(struct mcp *m, struct mcp_server *s, struct call_ctx *ctx, struct err *e) {
  int rc;
  drain_pending(s, ctx);
  if (!s->url && s->proc.pid && !mcp_proc_alive(&s->proc)) { /* died between calls */
    struct err ignore = {0};
    died(s, "idle time", &ignore);
  }
  if (s->url ? !s->http_up : !s->proc.pid) {
    s->ready = 0;
    if ((rc = start(m, s, ctx, e))) return rc;
  }
  if (!s->ready || s->list_changed) {
    if ((rc = list_tools(m, s, ctx, e))) return rc;
    s->ready = 1;
    /* it lived through a handshake and a listing: the backoff starts over */
    s->deaths = 0;
  }
  return 0;
}

int mcp__request(struct mcp *m, struct mcp_server *s, struct call_ctx *ctx, const char *method,
                 const cJSON *params, cJSON **result, struct err *e) {
  *result = NULL;
  int rc = mcp__ready(m, s, ctx, e);
  if (rc) return rc;
  rc = roundtrip(s, ctx, method, params, result, e);
  if (rc == ERR_IO && !strcmp(e->code, "mcp_session_expired")) {
    /* the server restarted and forgot us without running the request:
     * a new session (initialize again), then the request once more */
    if ((rc = mcp__ready(m, s, ctx, e))) return rc;
    rc = roundtrip(s, ctx, method, params, result, e);
  }
  return rc;
}
