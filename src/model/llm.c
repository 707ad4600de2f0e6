/* llm.c - see llm.h: the HTTP attempt loop with retries and fallback, and
 * the wire-neutral response assembly. The provider list is parsed in
 * llm_provider.c; the wire formats live in llm_openai.c and
 * llm_anthropic.c. */
#include "llm.h"

#include <ctype.h>
#include <curl/curl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "llm_impl.h"
#include "sse.h"
#include "tool.h"
#include "util.h"

/* ------------------------------------------------------------------ */
/* Wire names                                                          */

/* One mapping for the registry and the wire (tool.h says why it must be
 * one: the registry refuses two tools with one wire name). */
void llm_wire_name(const char *full, char out[65]) { tool_wire_name(full, out); }

/* Whether llm_wire_name(full) is wire, read off as the mapping goes (no
 * name built, and most tools differ in their first bytes): a name whose
 * wire form would be longer than 64 (cut and hashed) or that differs
 * only past where the cut starts is built and compared in full. */
static bool wire_is(const char *full, const char *wire) {
  size_t n = 0; /* wire bytes matched */
  for (const char *s = full; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    const char *m = isalnum(ch) || ch == '_' || ch == '-' ? s : ch == '.' ? "__" : "_";
    size_t k = m == s ? 1 : strlen(m);
    for (size_t i = 0; i < k; i++, n++) {
      if (n >= 55) goto whole; /* the hashed tail of a long name may start here */
      if (wire[n] != m[i]) return false;
    }
  }
  if (!n) return !strcmp(wire, "tool");
  return !wire[n];
whole:;
  char w[65];
  llm_wire_name(full, w);
  return !strcmp(w, wire);
}

const char *llm_full_name(const cJSON *tools, const char *wire) {
  const cJSON *t;
  cJSON_ArrayForEach(t, tools) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(t, "name"));
    if (name && wire_is(name, wire)) return name;
  }
  return NULL;
}

static int cmp_key(const void *a, const void *b) {
  const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
  return strcmp(x->string ? x->string : "", y->string ? y->string : "");
}

cJSON *llm_sorted_dup(const cJSON *v) {
  if (!v) return NULL;
  if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) return cJSON_Duplicate(v, 1);
  if (cJSON_IsArray(v)) {
    cJSON *a = cJSON_CreateArray();
    const cJSON *it;
    cJSON_ArrayForEach(it, v) cJSON_AddItemToArray(a, llm_sorted_dup(it));
    return a;
  }
  size_t n = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, v) n++;
  const cJSON **kids = xcalloc(n ? n : 1, sizeof *kids);
  size_t i = 0;
  cJSON_ArrayForEach(it, v) kids[i++] = it;
  qsort(kids, n, sizeof *kids, cmp_key);
  cJSON *o = cJSON_CreateObject();
  for (i = 0; i < n; i++) cJSON_AddItemToObject(o, kids[i]->string, llm_sorted_dup(kids[i]));
  free(kids);
  return o;
}

/* True when every object in v has its keys in strictly ascending byte
 * order (cmp_key's order; equal keys are left to llm_sorted_dup). */
static bool sorted_already(const cJSON *v) {
  const cJSON *prev = NULL;
  for (const cJSON *c = v->child; c; prev = c, c = c->next) {
    if (cJSON_IsObject(v) && prev && cmp_key(&prev, &c) >= 0) return false;
    if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && !sorted_already(c)) return false;
  }
  return true;
}

cJSON *llm_sorted_view(const cJSON *v) {
  if (cJSON_IsObject(v) && sorted_already(v)) return cJSON_CreateObjectReference(v->child);
  return llm_sorted_dup(v);
}

void llm_cache_key(const struct llm_provider *p, const struct llm_request *req, char out[40]) {
  /* two FNV-1a 64 lanes over model, system and the tools' canonical text */
  uint64_t h1 = 1469598103934665603ull, h2 = 7809847782465536322ull;
  cJSON *t = llm_sorted_dup(req->tools);
  char *tools = t ? json_print(t, 0) : NULL;
  cJSON_Delete(t);
  const char *parts[3] = {p->model, req->system ? req->system : "", tools ? tools : ""};
  for (int k = 0; k < 3; k++) {
    for (const char *c = parts[k]; *c; c++) {
      h1 = (h1 ^ (unsigned char)*c) * 1099511628211ull;
      h2 = (h2 ^ (unsigned char)*c) * 1099511628211ull + 0x9e3779b97f4a7c15ull;
    }
    h1 = (h1 ^ 0x1f) * 1099511628211ull;
    h2 = (h2 ^ 0x1f) * 1099511628211ull;
  }
  free(tools);
  snprintf(out, 40, "lg-%016llx%016llx", (unsigned long long)h1, (unsigned long long)h2);
}

/* ------------------------------------------------------------------ */
/* One attempt                                                         */

struct pending_call {
  int index;
  char *id;
  char *name; /* wire name */
  struct sbuf args;
};

struct pending_block {
  int index;
  cJSON *block;
  char key[2][16]; /* members being streamed in pieces */
  struct sbuf acc[2];
  bool stopped;
};

struct llm__stream {
  const struct llm_provider *p;
  const struct llm__wire *w;
  const struct llm_request *req;
  const struct llm_callbacks *cb;
  const struct llm__proxy_env *proxy_env; /* the client's (llm_impl.h) */
  struct sse_parser *sse;
  bool stream;
  bool sse_body;  /* this body is read as an event stream (not a JSON body) */
  char ctype[96]; /* the response's Content-Type */
  char head[160]; /* its first bytes, to name what came when it is not what was asked for */
  size_t nhead, nbytes;
  long nevents; /* SSE events seen */
  long status;
  double retry_after; /* seconds from Retry-After, -1 if none */
  struct sbuf body;   /* error body or whole non-streamed body */
  struct sbuf text;
  struct pending_call *calls;
  size_t ncalls;
  char stop_reason[32];
  enum llm_finish finish;
  struct sbuf refusal, thinking;
  bool refused;
  int redacted;
  struct pending_block *blocks;
  size_t nblocks;
  long in_tok, out_tok, cache_read, cache_write;
  bool done;   /* the stream ended properly */
  bool output; /* something reached a callback */
  size_t invalid_utf8; /* bad bytes in the provider's strings, kept as U+FFFD */
  size_t args_total, blocks_total; /* bytes kept over all calls / all blocks */
  bool text_output; /* answer text reached on_text: never retried after this */
  int perr_rc; /* an error reported by an event */
  struct err perr;
  bool no_fast;     /* tests: every event through the full parse */
  long fast_events; /* events the fast path read (llm_fast.c) */
  struct llm__fast_memo *memo; /* what llm_fast.c keeps from one event to the next */
  struct sbuf fast_scratch;    /* llm_fast.c's buffer for one event's decoded strings */
};

bool llm__fast_ok(struct llm__stream *s) { return !s->no_fast; }
void llm__fast_count(struct llm__stream *s) { s->fast_events++; }
struct llm__fast_memo **llm__fast_memo(struct llm__stream *s) { return &s->memo; }
struct sbuf *llm__fast_scratch(struct llm__stream *s) {
  s->fast_scratch.len = 0;
  return &s->fast_scratch;
}

/* The largest prefix of t[0..n) that ends on a UTF-8 character boundary. */
static size_t utf8_prefix(const char *t, size_t n) {
  size_t k = n;
  while (k > 0 && ((unsigned char)t[k] & 0xC0) == 0x80) k--;
  return k;
}

/* Records a cap being crossed: the transfer stops at the next write. */
static void over_cap(struct llm__stream *s, const char *code, const char *what, size_t cap) {
  if (s->perr_rc) return;
  s->perr_rc = err_set(&s->perr, ERR_LIMIT, code,
                       "%s: %s is larger than %zu bytes; the run keeps what arrived up to the cap",
                       s->p->name, what, cap);
}

void llm__text(struct llm__stream *s, const char *t, size_t n) {
  if (!n || s->perr_rc) return;
  size_t cap = s->req->max_answer_bytes ? s->req->max_answer_bytes : LLM_MAX_ANSWER;
  if (s->text.len + n > cap) {
    n = s->text.len < cap ? utf8_prefix(t, cap - s->text.len) : 0;
    over_cap(s, "answer_too_large", "the answer", cap);
  }
  if (!n) return;
  sbuf_append(&s->text, t, n);
  s->output = true;
  s->text_output = true;
  if (s->cb && s->cb->on_text) s->cb->on_text(s->cb->ud, t, n);
}

static struct pending_call *find_call(struct llm__stream *s, int index) {
  for (size_t i = 0; i < s->ncalls; i++)
    if (s->calls[i].index == index) return &s->calls[i];
  return NULL;
}

void llm__tool_start(struct llm__stream *s, int index, const char *id, const char *wire) {
  struct pending_call *c = find_call(s, index);
  if (!c && s->ncalls >= LLM_MAX_CALLS) {
    over_cap(s, "too_many_tool_calls", "the number of tool calls in one answer", LLM_MAX_CALLS);
    return;
  }
  if (!c) {
    s->calls = xrealloc(s->calls, (s->ncalls + 1) * sizeof *s->calls);
    c = &s->calls[s->ncalls++];
    memset(c, 0, sizeof *c);
    c->index = index;
  }
  if (id && *id && !c->id) c->id = xstrdup(id);
  if (wire && *wire && !c->name) c->name = xstrdup(wire);
  s->output = true;
  if (s->cb && s->cb->on_tool_start) {
    const char *full = wire ? llm_full_name(s->req->tools, wire) : NULL;
    s->cb->on_tool_start(s->cb->ud, (int)(c - s->calls), c->id ? c->id : "",
                         full ? full : (wire ? wire : ""));
  }
}

void llm__tool_args(struct llm__stream *s, int index, const char *piece, size_t n) {
  struct pending_call *c = find_call(s, index);
  if (!c) { /* arguments before a start: start it silently */
    llm__tool_start(s, index, NULL, NULL);
    c = find_call(s, index);
  }
  if (s->perr_rc) return;
  size_t cap = s->req->max_tool_args_bytes ? s->req->max_tool_args_bytes : LLM_MAX_TOOL_ARGS;
  if (c->args.len + n > cap) {
    over_cap(s, "tool_args_too_large", "a tool call's arguments", cap);
    return; /* half an argument object is no use to anyone: none of it runs */
  }
  if (s->args_total + n > LLM_MAX_ARGS_TOTAL) {
    over_cap(s, "tool_args_too_large", "the tool calls' arguments together", LLM_MAX_ARGS_TOTAL);
    return;
  }
  s->args_total += n;
  sbuf_append(&c->args, piece, n);
  if (n && s->cb && s->cb->on_tool_args)
    s->cb->on_tool_args(s->cb->ud, (int)(c - s->calls), piece, n);
}

void llm__usage(struct llm__stream *s, long input, long output) {
  if (input >= 0) s->in_tok = input;
  if (output >= 0) s->out_tok = output;
}

void llm__usage_cache(struct llm__stream *s, long read, long write) {
  if (read >= 0) s->cache_read = read;
  if (write >= 0) s->cache_write = write;
}

void llm__refusal(struct llm__stream *s, const char *t, size_t n) {
  s->refused = true;
  size_t cap = s->req->max_answer_bytes ? s->req->max_answer_bytes : LLM_MAX_ANSWER;
  if (s->refusal.len + n > cap) n = s->refusal.len < cap ? utf8_prefix(t, cap - s->refusal.len) : 0;
  if (n) sbuf_append(&s->refusal, t, n);
}

void llm__finish(struct llm__stream *s, enum llm_finish f) {
  s->finish = f;
}

void llm__thinking(struct llm__stream *s, const char *t, size_t n) {
  size_t cap = s->req->max_answer_bytes ? s->req->max_answer_bytes : LLM_MAX_ANSWER;
  if (s->thinking.len + n > cap)
    n = s->thinking.len < cap ? utf8_prefix(t, cap - s->thinking.len) : 0;
  if (n) sbuf_append(&s->thinking, t, n);
}

void llm__redacted(struct llm__stream *s) {
  s->redacted++;
}

const char *llm__provider_name(struct llm__stream *s) {
  return s->p->name;
}

static struct pending_block *find_block(struct llm__stream *s, int index) {
  for (size_t i = 0; i < s->nblocks; i++)
    if (s->blocks[i].index == index) return &s->blocks[i];
  return NULL;
}

void llm__block_start(struct llm__stream *s, int index, cJSON *block) {
  struct pending_block *b = find_block(s, index);
  if (!b && s->nblocks >= LLM_MAX_BLOCKS) {
    over_cap(s, "answer_too_large", "the number of content blocks", LLM_MAX_BLOCKS);
    cJSON_Delete(block);
    return;
  }
  if (b) { /* a repeated start replaces the block */
    cJSON_Delete(b->block);
    for (int k = 0; k < 2; k++) sbuf_free(&b->acc[k]);
  } else {
    s->blocks = xrealloc(s->blocks, (s->nblocks + 1) * sizeof *s->blocks);
    b = &s->blocks[s->nblocks++];
  }
  memset(b, 0, sizeof *b);
  b->index = index;
  b->block = block;
}

void llm__block_append(struct llm__stream *s, int index, const char *key, const char *piece,
                       size_t n) {
  struct pending_block *b = find_block(s, index);
  if (!b || b->stopped) return;
  int k = 0;
  for (; k < 2; k++) {
    if (!b->key[k][0]) snprintf(b->key[k], sizeof b->key[k], "%s", key);
    if (!strcmp(b->key[k], key)) break;
  }
  if (k == 2) return; /* a block streams at most two members (thinking, signature) */
  /* the same cap as the answer: a block is kept in memory and sent back */
  size_t cap = s->req->max_answer_bytes ? s->req->max_answer_bytes : LLM_MAX_ANSWER;
  if (s->blocks_total + n > cap) { /* all blocks together, not each */
    over_cap(s, "answer_too_large", "the content blocks", cap);
    return;
  }
  s->blocks_total += n;
  sbuf_append(&b->acc[k], piece, n);
}

void llm__block_push(struct llm__stream *s, int index, const char *key, cJSON *item) {
  struct pending_block *b = find_block(s, index);
  if (!b || b->stopped) {
    cJSON_Delete(item);
    return;
  }
  cJSON *arr = cJSON_GetObjectItem(b->block, key);
  if (!cJSON_IsArray(arr)) {
    cJSON_DeleteItemFromObject(b->block, key);
    arr = cJSON_AddArrayToObject(b->block, key);
  }
  cJSON_AddItemToArray(arr, item);
}

/* Sets what was streamed into the block's members. */
static void block_finish(struct pending_block *b) {
  if (b->stopped) return;
  b->stopped = true;
  for (int k = 0; k < 2; k++) {
    if (!b->key[k][0]) continue;
    const char *txt = b->acc[k].s ? b->acc[k].s : "";
    cJSON *v;
    if (!strcmp(b->key[k], "input")) { /* streamed partial JSON of a server tool's input */
      v = json_parse_str(txt, 0, NULL);
      if (!cJSON_IsObject(v)) {
        cJSON_Delete(v);
        v = cJSON_CreateObject();
      }
    } else {
      const char *old = cJSON_GetStringValue(cJSON_GetObjectItem(b->block, b->key[k]));
      if (old && *old) { /* the start carried a first piece */
        struct sbuf j = {0};
        sbuf_puts(&j, old);
        sbuf_puts(&j, txt);
        v = cJSON_CreateString(j.s);
        sbuf_free(&j);
      } else {
        v = cJSON_CreateString(txt);
      }
    }
    cJSON_DeleteItemFromObject(b->block, b->key[k]);
    cJSON_AddItemToObject(b->block, b->key[k], v);
    sbuf_free(&b->acc[k]);
  }
}

void llm__block_stop(struct llm__stream *s, int index) {
  struct pending_block *b = find_block(s, index);
  if (b) block_finish(b);
}

const char *llm__block_type(struct llm__stream *s, int index) {
  struct pending_block *b = find_block(s, index);
  return b ? cJSON_GetStringValue(cJSON_GetObjectItem(b->block, "type")) : NULL;
}

void llm__stop_reason(struct llm__stream *s, const char *reason) {
  if (reason) snprintf(s->stop_reason, sizeof s->stop_reason, "%s", reason);
}

void llm__done(struct llm__stream *s) {
  s->done = true;
}

size_t *llm__invalid_utf8(struct llm__stream *s) { return &s->invalid_utf8; }

int llm__stream_error(struct llm__stream *s, struct err *e) {
  if (s->perr_rc) *e = s->perr;
  return s->perr_rc;
}

static void stream_reset(struct llm__stream *s) {
  llm__fast_memo_free(s->memo);
  s->memo = NULL;
  sbuf_free(&s->fast_scratch);
  s->invalid_utf8 = 0;
  s->args_total = s->blocks_total = 0;
  sse_free(s->sse);
  s->sse = NULL;
  sbuf_free(&s->body);
  sbuf_free(&s->text);
  for (size_t i = 0; i < s->ncalls; i++) {
    free(s->calls[i].id);
    free(s->calls[i].name);
    sbuf_free(&s->calls[i].args);
  }
  free(s->calls);
  s->calls = NULL;
  s->ncalls = 0;
  s->status = 0;
  s->retry_after = -1;
  s->stop_reason[0] = 0;
  s->finish = LLM_FINISH_NONE;
  sbuf_free(&s->refusal);
  sbuf_free(&s->thinking);
  s->refused = false;
  s->redacted = 0;
  for (size_t i = 0; i < s->nblocks; i++) {
    cJSON_Delete(s->blocks[i].block);
    for (int k = 0; k < 2; k++) sbuf_free(&s->blocks[i].acc[k]);
  }
  free(s->blocks);
  s->blocks = NULL;
  s->nblocks = 0;
  s->in_tok = s->out_tok = s->cache_read = s->cache_write = 0;
  s->ctype[0] = 0;
  s->nhead = s->nbytes = 0;
  s->nevents = 0;
  s->sse_body = false;
  s->done = false;
  s->perr_rc = 0;
  err_clear(&s->perr);
}

static int on_sse(void *ud, const struct sse_event *ev) {
  struct llm__stream *s = ud;
  s->nevents++;
  int rc = s->w->event(s, ev->event, ev->data, ev->data_len, &s->perr);
  if (rc) {
    s->perr_rc = rc;
    return rc;
  }
  return 0;
}

#define MAX_BODY ((size_t)32 << 20)

/* A JSON body (a server that ignores "stream": true, or an error) is read
 * whole even when a stream was asked for. */
static bool ctype_is_json(const char *ct) {
  return !strncasecmp(ct, "application/json", 16);
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud) {
  struct llm__stream *s = ud;
  size_t n = size * nmemb;
  if (s->nhead < sizeof s->head - 1) {
    size_t k = n < sizeof s->head - 1 - s->nhead ? n : sizeof s->head - 1 - s->nhead;
    memcpy(s->head + s->nhead, ptr, k);
    s->nhead += k;
    s->head[s->nhead] = 0;
  }
  s->nbytes += n;
  if (s->status >= 200 && s->status < 300 && s->stream && !ctype_is_json(s->ctype)) {
    s->sse_body = true;
    if (!s->sse) s->sse = sse_new(on_sse, s, 0);
    int rc = sse_feed(s->sse, ptr, n, &s->perr);
    if (rc) {
      if (!s->perr_rc) s->perr_rc = rc < 0 ? rc : ERR_FAIL;
      return 0; /* aborts the transfer */
    }
    return s->perr_rc ? 0 : n; /* a cap crossed inside an event ends it too */
  }
  size_t cap = s->status >= 200 && s->status < 300 ? MAX_BODY : 65536;
  if (s->body.len + n > cap) {
    if (s->status >= 200 && s->status < 300) {
      s->perr_rc = err_set(&s->perr, ERR_LIMIT, "provider_error",
                           "%s: response larger than %zu bytes", s->p->name, cap);
      return 0;
    }
    return n; /* error bodies: keep the start */
  }
  sbuf_append(&s->body, ptr, n);
  return n;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud) {
  struct llm__stream *s = ud;
  size_t n = size * nitems;
  if (n > 5 && !strncmp(buf, "HTTP/", 5)) {
    /* a new response (e.g. after 100-continue): reset what we know */
    s->status = 0;
    int code = 0;
    const char *sp = memchr(buf, ' ', n);
    if (sp) code = atoi(sp + 1);
    s->status = code;
  } else if (n > 13 && !strncasecmp(buf, "content-type:", 13)) {
    size_t a = 13;
    while (a < n && (buf[a] == ' ' || buf[a] == '\t')) a++;
    size_t b = n;
    while (b > a && (buf[b - 1] == '\r' || buf[b - 1] == '\n' || buf[b - 1] == ' ')) b--;
    size_t m = b - a < sizeof s->ctype - 1 ? b - a : sizeof s->ctype - 1;
    memcpy(s->ctype, buf + a, m);
    s->ctype[m] = 0;
  } else if (n > 12 && !strncasecmp(buf, "retry-after:", 12)) {
    char tmp[64];
    size_t m = n - 12 < sizeof tmp - 1 ? n - 12 : sizeof tmp - 1;
    memcpy(tmp, buf + 12, m);
    tmp[m] = 0;
    char *end;
    double v = strtod(tmp, &end);
    if (end != tmp && v >= 0) s->retry_after = v;
  }
  return n;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
  struct llm__stream *s = ud;
  return s->req->stop && *s->req->stop ? 1 : 0;
}

/* What kind of failure an attempt had. */
enum outcome { OK, RETRY, NEXT_PROVIDER, FATAL };

/* The provider's own error message from an error body, if it has one. */
static void body_message(const char *body, char *out, size_t n) {
  out[0] = 0;
  cJSON *j = json_parse_str(body, 0, NULL);
  const cJSON *m = NULL;
  const char *type = NULL;
  if (j) {
    const cJSON *er = cJSON_GetObjectItem(j, "error");
    m = cJSON_IsObject(er) ? cJSON_GetObjectItem(er, "message") : er;
    if (!cJSON_IsString(m)) m = cJSON_GetObjectItem(j, "message");
    /* the provider's error type: Anthropic error.type ("overloaded_error"),
     * OpenAI error.type ("server_error") or, when that is null, error.code */
    if (cJSON_IsObject(er)) {
      type = cJSON_GetStringValue(cJSON_GetObjectItem(er, "type"));
      if (!type || !*type) type = cJSON_GetStringValue(cJSON_GetObjectItem(er, "code"));
    }
  }
  if (cJSON_IsString(m)) {
    if (type && *type)
      snprintf(out, n, "%s: %s", type, m->valuestring);
    else
      snprintf(out, n, "%s", m->valuestring);
  } else if (body) {
    struct sbuf b = {0};
    util_escape_text(&b, body, strlen(body), 200);
    snprintf(out, n, "%s", b.s ? b.s : "");
    sbuf_free(&b);
  }
  cJSON_Delete(j);
}

/* What a body that is not what was asked for looked like: status, content
 * type and its first bytes (escaped), or that it was empty. */
static void describe_body(struct llm__stream *s, char *out, size_t n) {
  struct sbuf b = {0};
  sbuf_printf(&b, "HTTP %ld, Content-Type %s, ", s->status, s->ctype[0] ? s->ctype : "(none)");
  if (!s->nbytes) {
    sbuf_puts(&b, "empty body");
  } else {
    sbuf_printf(&b, "%zu bytes starting \"", s->nbytes);
    util_escape_text(&b, s->head, s->nhead, 120);
    sbuf_puts(&b, "\"");
  }
  snprintf(out, n, "%s", b.s);
  sbuf_free(&b);
}

/* One HTTP attempt on the client conn, whose handle has no options set. */
static enum outcome attempt(struct llm__stream *s, struct llm__conn *conn, struct err *e) {
  const struct llm_provider *p = s->p;
  const struct llm_request *req = s->req;
  CURL *h = conn->h;
  s->stream = p->stream && !req->force_nostream;
  char *body = s->w->body(p, req, s->stream);
  /* parsed once per client and endpoint (llm_conn.c), not per request */
  CURLU *cu = llm__conn_url(conn, p->base_url, s->w->path);
  const char *url = conn->url;
  struct curl_slist *hd = NULL;
  hd = curl_slist_append(hd, "Content-Type: application/json");
  hd = curl_slist_append(hd, s->stream ? "Accept: text/event-stream" : "Accept: application/json");
  char auth[4200];
  if (p->kind == LLM_ANTHROPIC) {
    hd = curl_slist_append(hd, "anthropic-version: 2023-06-01");
    if (p->api_key) {
      snprintf(auth, sizeof auth, "x-api-key: %s", p->api_key);
      hd = curl_slist_append(hd, auth);
    }
  } else if (p->api_key) {
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", p->api_key);
    hd = curl_slist_append(hd, auth);
  }
  memset(auth, 0, sizeof auth);
  double timeout = p->timeout_s;
  if (req->timeout_s > 0 && req->timeout_s < timeout) timeout = req->timeout_s;
  if (req->deadline_at > 0) {
    double left = req->deadline_at - util_monotonic();
    if (left < timeout) timeout = left;
  }
  if (timeout < 0.05) timeout = 0.05;
  /* The options every attempt sets alike, set once per handle (until it
   * is reset, llm_impl.h): libcurl copies the strings, and the callbacks
   * are this file's. The progress callback is how an operator's stop ends
   * a transfer that is waiting on the network. */
  if (!conn->base_set) {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "luagent/" LUAGENT_VERSION);
    conn->base_set = true;
  }
  /* this attempt's: the URL (CURLU wins over CURLOPT_URL, so it is
   * cleared when the text is used), body, headers, data and deadlines */
  if (cu) {
    curl_easy_setopt(h, CURLOPT_CURLU, cu);
  } else {
    curl_easy_setopt(h, CURLOPT_CURLU, NULL);
    curl_easy_setopt(h, CURLOPT_URL, url);
  }
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, s);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, s);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout * 1000));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(timeout < 10 ? timeout * 1000 : 10000));
  /* the environment's proxy, read once per client; set every attempt, as
   * clients made at different times share parked handles */
  llm__conn_proxy(conn, cu ? s->proxy_env : NULL);
  char cerr[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
  CURLcode rc = curl_easy_perform(h);
  /* No option may point at what this attempt frees or leaves: the body,
   * the headers, s and cerr (on the stack), the URL handle (the conn may
   * parse another). What stays are the constant options above. */
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, NULL);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, NULL);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
  curl_easy_setopt(h, CURLOPT_CURLU, NULL);
  curl_slist_free_all(hd);
  free(body);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  if (status) s->status = status;

  if (req->stop && *req->stop) {
    err_set(e, ERR_STOPPED, "stopped", "%s: model call stopped by the operator", p->name);
    return FATAL;
  }
  if (s->perr_rc == ERR_LIMIT) { /* a cap: retrying would only hit it again */
    *e = s->perr;
    return FATAL;
  }
  if (s->perr_rc && s->status >= 200 && s->status < 300) {
    /* an error event from the provider, or a malformed stream */
    *e = s->perr;
    if (!e->code[0] || !strcmp(e->code, "sse_too_large"))
      snprintf(e->code, sizeof e->code, "provider_error");
    e->rc = ERR_FAIL;
    return RETRY;
  }
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    err_set(e, ERR_LIMIT, "timeout", "%s: no complete answer within %.1f s (%s)", p->name, timeout,
            url);
    return RETRY;
  }
  if (rc != CURLE_OK && !(s->status >= 200 && s->status < 300)) {
    err_set(e, ERR_IO, "provider_error", "%s: %s (%s)", p->name,
            cerr[0] ? cerr : curl_easy_strerror(rc), url);
    return RETRY; /* connection refused, reset, nothing received */
  }
  if (s->status < 200 || s->status >= 300) {
    char msg[400];
    body_message(s->body.s, msg, sizeof msg);
    err_set(e, ERR_FAIL, "provider_error", "%s: HTTP %ld from %s%s%s", p->name, s->status, url,
            msg[0] ? ": " : "", msg);
    if (s->status == 429 || s->status == 408 || s->status >= 500) return RETRY;
    return NEXT_PROVIDER; /* 400, 401, 403, 404...: retrying cannot fix it */
  }
  if (rc != CURLE_OK) { /* HTTP 200, then the transfer broke */
    err_set(e, ERR_IO, "provider_error", "%s: the response broke off: %s", p->name,
            cerr[0] ? cerr : curl_easy_strerror(rc));
    return RETRY;
  }
  if (s->sse_body) {
    if (s->sse) sse_finish(s->sse);
    /* A clean end after the finish reason but without the closing marker
     * ([DONE] / message_stop) still carries a whole answer. */
    if (!s->done && s->stop_reason[0]) s->done = true;
    if (!s->done && !s->nevents) { /* not an event stream at all: say what came */
      char what[400];
      describe_body(s, what, sizeof what);
      err_set(e, ERR_IO, "provider_error", "%s: expected an event stream, got %s", p->name, what);
      return RETRY;
    }
    if (!s->done) {
      err_set(e, ERR_IO, "provider_error", "%s: the stream ended before the answer was complete",
              p->name);
      return RETRY;
    }
    return OK;
  }
  if (s->w->whole(s, s->body.s ? s->body.s : "", e)) {
    if (!e->code[0]) snprintf(e->code, sizeof e->code, "provider_error");
    const char *b = s->body.s ? s->body.s : "";
    while (*b == ' ' || *b == '\n' || *b == '\r' || *b == '\t') b++;
    if (*b != '{') { /* not JSON: name the status, content type and first bytes */
      char what[400];
      describe_body(s, what, sizeof what);
      err_set(e, ERR_IO, "provider_error", "%s: expected a JSON body, got %s", p->name, what);
    } else {
      err_prefix(e, "%s", p->name);
    }
    return RETRY;
  }
  if (s->perr_rc == ERR_LIMIT) { /* a cap crossed while reading the whole body */
    *e = s->perr;
    return FATAL;
  }
  return OK;
}

static void fill_response(struct llm__stream *s, struct llm_response *out);

int llm__replay(const struct llm_provider *p, const struct llm_request *req,
                const char *const *pieces, const size_t *lens, size_t npieces, bool fast,
                const struct llm_callbacks *cb, struct llm_response *out, long *fast_events,
                struct err *e) {
  memset(out, 0, sizeof *out);
  out->text = xstrdup("");
  struct llm__stream s = {
      .p = p,
      .w = p->kind == LLM_ANTHROPIC ? &llm__anthropic_wire : &llm__openai_wire,
      .req = req,
      .cb = cb,
      .no_fast = !fast};
  stream_reset(&s);
  s.stream = true;
  s.status = 200;
  for (size_t i = 0; i < npieces && !s.perr_rc; i++) on_write((char *)pieces[i], 1, lens[i], &s);
  if (s.sse) sse_finish(s.sse);
  int rc = s.perr_rc;
  if (rc) *e = s.perr;
  fill_response(&s, out);
  *fast_events = s.fast_events;
  stream_reset(&s);
  return rc;
}

/* Fills out from s. Every caller resets s right after, so its strings
 * move into out rather than being copied and freed (out->text, each call's
 * id, wire name and arguments). */
static void fill_response(struct llm__stream *s, struct llm_response *out) {
  free(out->text);
  out->text = sbuf_take(&s->text); /* "" when nothing came */
  for (size_t i = 0; i < out->ncalls; i++) {
    free(out->calls[i].id);
    free(out->calls[i].name);
    free(out->calls[i].arguments);
  }
  free(out->calls);
  out->calls = s->ncalls ? xcalloc(s->ncalls, sizeof *out->calls) : NULL;
  out->ncalls = s->ncalls;
  for (size_t i = 0; i < s->ncalls; i++) {
    struct pending_call *c = &s->calls[i];
    char idbuf[32];
    if (!c->id) snprintf(idbuf, sizeof idbuf, "call_%zu", i);
    out->calls[i].id = c->id ? c->id : xstrdup(idbuf);
    c->id = NULL;
    const char *full = c->name ? llm_full_name(s->req->tools, c->name) : NULL;
    if (c->name && (!full || !strcmp(full, c->name))) { /* the wire name is the name */
      out->calls[i].name = c->name;
      c->name = NULL;
    } else {
      out->calls[i].name = xstrdup(full ? full : "");
    }
    out->calls[i].arguments = c->args.len ? sbuf_take(&c->args) : xstrdup("{}");
  }
  util_copy(out->stop_reason, sizeof out->stop_reason, s->stop_reason);
  out->finish = s->refused ? LLM_FINISH_REFUSAL : s->finish;
  free(out->refusal);
  out->refusal = s->refused ? xstrdup(s->refusal.s ? s->refusal.s : "") : NULL;
  free(out->thinking);
  out->thinking = s->thinking.len ? xstrdup(s->thinking.s) : NULL;
  out->redacted_thinking = s->redacted;
  cJSON_Delete(out->blocks);
  out->blocks = NULL;
  if (s->nblocks) { /* in the wire's index order, as the model wrote them */
    out->blocks = cJSON_CreateArray();
    for (size_t k = 0; k < s->nblocks; k++) {
      size_t best = SIZE_MAX;
      for (size_t i = 0; i < s->nblocks; i++)
        if (s->blocks[i].block && (best == SIZE_MAX || s->blocks[i].index < s->blocks[best].index))
          best = i;
      if (best == SIZE_MAX) break;
      block_finish(&s->blocks[best]);
      cJSON_AddItemToArray(out->blocks, s->blocks[best].block);
      s->blocks[best].block = NULL; /* moved */
    }
  }
  out->input_tokens += s->in_tok;
  out->output_tokens += s->out_tok;
  out->cache_read_tokens += s->cache_read;
  out->cache_write_tokens += s->cache_write;
  util_copy(out->provider, sizeof out->provider, s->p->name);
  out->output_started = out->output_started || s->text_output;
  out->invalid_utf8 += (long)s->invalid_utf8;
}

void llm_response_free(struct llm_response *r) {
  if (!r) return;
  free(r->text);
  for (size_t i = 0; i < r->ncalls; i++) {
    free(r->calls[i].id);
    free(r->calls[i].name);
    free(r->calls[i].arguments);
  }
  free(r->calls);
  free(r->refusal);
  free(r->thinking);
  cJSON_Delete(r->blocks);
  memset(r, 0, sizeof *r);
}

/* Sleeps up to d seconds in small steps; false if stopped. */
static bool backoff_sleep(const struct llm_request *req, double d) {
  double until = util_monotonic() + d;
  while (util_monotonic() < until) {
    if (req->stop && *req->stop) return false;
    double left = until - util_monotonic();
    util_sleep(left < 0.05 ? left : 0.05);
  }
  return true;
}

int llm_complete(struct llm_client *c, const struct llm_request *req,
                 const struct llm_callbacks *cb, struct llm_response *out, struct err *e) {
  memset(out, 0, sizeof *out);
  out->text = xstrdup("");
  if (!c || !c->n) return llm__no_provider(e);
  bool any = false;
  struct err last = {0};
  /* Taken before the first attempt that goes to the network, not before: a
   * scripted provider never loads libcurl (tools/curl_dyn.c loads it, and
   * initialises it, on first use). */
  struct llm__conn *h = NULL;
  bool h_used = false; /* an attempt set its options: reset before the next */
  int result = ERR_FAIL;
  for (size_t i = 0; i < c->n; i++) {
    const struct llm_provider *p = &c->p[i];
    if (req->provider && strcmp(req->provider, p->name)) continue;
    any = true;
    struct llm__stream s = {
        .p = p,
        .w = p->kind == LLM_ANTHROPIC ? &llm__anthropic_wire : &llm__openai_wire,
        .req = req,
        .cb = cb,
        .proxy_env = &c->env};
    for (int try = 0;; try++) {
      stream_reset(&s);
      struct err ae = {0};
      out->attempts++;
      enum outcome oc;
      if (p->kind == LLM_SCRIPT) { /* no network: the scripted answer, or why not */
        int src = llm__script_attempt(p, req, &s, &ae);
        oc = !src ? OK : src == ERR_STOPPED || src == ERR_LIMIT ? FATAL : NEXT_PROVIDER;
      } else if (!h && !(h = llm__conn_take())) { /* its last connection stays open */
        err_set(&ae, ERR_NOMEM, "provider_error", "%s: cannot start an HTTP client", p->name);
        oc = FATAL;
      } else {
        if (h_used) llm__conn_reset(h); /* a retry starts from a clean handle */
        h_used = true;
        oc = attempt(&s, h, &ae);
      }
      if (oc == OK) {
        fill_response(&s, out);
        stream_reset(&s);
        result = 0;
        goto done;
      }
      last = ae;
      if (s.text_output || oc == FATAL) {
        /* answer text reached the operator (or a stop, or a cap): never
         * retry. A tool call still being written has shown nothing that
         * must be kept (none of it runs), so that attempt is retried. */
        bool text = s.text_output;
        fill_response(&s, out);
        stream_reset(&s);
        if (text && oc != FATAL) err_prefix(&last, "after partial output, not retried");
        *e = last;
        result = last.rc ? last.rc : ERR_FAIL;
        goto done;
      }
      if (oc == NEXT_PROVIDER || try >= p->max_retries) break;
      double delay = p->backoff_s * pow(2.0, try);
      if (s.retry_after >= 0)
        delay = s.retry_after > delay ? s.retry_after : delay;
      else
        delay *= 0.75 + 0.5 * ((double)rand() / RAND_MAX); /* jitter */
      if (delay > 60) delay = 60;
      if (req->deadline_at > 0 && util_monotonic() + delay >= req->deadline_at) {
        err_prefix(&last, "deadline reached while retrying");
        break;
      }
      if (cb && cb->on_retry) cb->on_retry(cb->ud, p->name, try + 1, delay, last.msg);
      if (!backoff_sleep(req, delay)) {
        err_set(&last, ERR_STOPPED, "stopped", "%s: stopped while waiting to retry", p->name);
        stream_reset(&s);
        *e = last;
        result = ERR_STOPPED;
        goto done;
      }
    }
    stream_reset(&s);
    if (cb && cb->on_retry && i + 1 < c->n && !req->provider)
      cb->on_retry(cb->ud, p->name, 0, 0, last.msg); /* attempt 0: falling through */
  }
  if (!any) {
    result = err_set(e, ERR_NOTFOUND, "no_provider", "no provider named '%s' is configured",
                     req->provider);
    goto done;
  }
  *e = last;
  if (!e->code[0]) snprintf(e->code, sizeof e->code, "provider_error");
  result = last.rc ? last.rc : ERR_FAIL;
done:
  if (h) llm__conn_give(h);
  return result;
}

void llm__usage_json(struct llm__stream *s, const cJSON *u, const char *in_key,
                     const char *out_key) {
  if (!cJSON_IsObject(u)) return;
  const cJSON *in = cJSON_GetObjectItem(u, in_key), *out = cJSON_GetObjectItem(u, out_key);
  llm__usage(s, cJSON_IsNumber(in) ? (long)in->valuedouble : -1,
             cJSON_IsNumber(out) ? (long)out->valuedouble : -1);
  /* cached prompt tokens: Anthropic at the top, OpenAI in prompt_tokens_details */
  const cJSON *cr = cJSON_GetObjectItem(u, "cache_read_input_tokens");
  const cJSON *cw = cJSON_GetObjectItem(u, "cache_creation_input_tokens");
  if (!cJSON_IsNumber(cr))
    cr = cJSON_GetObjectItem(cJSON_GetObjectItem(u, "prompt_tokens_details"), "cached_tokens");
  llm__usage_cache(s, cJSON_IsNumber(cr) ? (long)cr->valuedouble : -1,
                   cJSON_IsNumber(cw) ? (long)cw->valuedouble : -1);
}
