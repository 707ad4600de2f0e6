/* llm_openai.c - the OpenAI-compatible chat completions wire format
 * (POST {base}/chat/completions), streamed or not. Also serves Ollama,
 * vLLM, llama.cpp server, LM Studio and OpenRouter. */
#include <stdlib.h>
#include <string.h>

#include "llm.h"
#include "json.h"
#include "util.h"

static cJSON *system_message(const char *system) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "system");
  cJSON_AddStringToObject(m, "content", system);
  return m;
}

/* The wire messages of the neutral messages from first up to end (not
 * included): one each, role-less ones skipped. */
static cJSON *wire_range(void *ud, const cJSON *first, const cJSON *end) {
  (void)ud;
  cJSON *out = cJSON_CreateArray();
  for (const cJSON *it = first; it && it != end; it = it->next) {
    const char *role = cJSON_GetStringValue(cJSON_GetObjectItem(it, "role"));
    const char *content = cJSON_GetStringValue(cJSON_GetObjectItem(it, "content"));
    if (!role) continue;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    if (!strcmp(role, "assistant")) {
      const cJSON *calls = cJSON_GetObjectItem(it, "tool_calls");
      if (content && *content)
        cJSON_AddStringToObject(m, "content", content);
      else
        cJSON_AddNullToObject(m, "content");
      if (cJSON_GetArraySize(calls) > 0) {
        cJSON *tc = cJSON_AddArrayToObject(m, "tool_calls");
        const cJSON *c;
        cJSON_ArrayForEach(c, calls) {
          char w[65];
          llm_wire_name(cJSON_GetStringValue(cJSON_GetObjectItem(c, "name")) ?: "", w);
          cJSON *o = cJSON_CreateObject();
          cJSON_AddStringToObject(o, "id",
                                  cJSON_GetStringValue(cJSON_GetObjectItem(c, "id")) ?: "");
          cJSON_AddStringToObject(o, "type", "function");
          cJSON *f = cJSON_AddObjectToObject(o, "function");
          cJSON_AddStringToObject(f, "name", w);
          cJSON_AddStringToObject(
              f, "arguments", cJSON_GetStringValue(cJSON_GetObjectItem(c, "arguments")) ?: "{}");
          cJSON_AddItemToArray(tc, o);
        }
      }
    } else if (!strcmp(role, "tool")) {
      cJSON_AddStringToObject(m, "tool_call_id",
                              cJSON_GetStringValue(cJSON_GetObjectItem(it, "tool_call_id")) ?: "");
      cJSON_AddStringToObject(m, "content", content ? content : "");
    } else {
      cJSON_AddStringToObject(m, "content", content ? content : "");
    }
    cJSON_AddItemToArray(out, m);
  }
  return out;
}

/* The same bytes as printing wire_range's items, without the tree: the
 * members in wire_range's order, json_print's compact separators and
 * strings (llm.h, struct llm__msg_wire print). */
static void wire_print(void *ud, const cJSON *first, const cJSON *end, bool mark,
                       struct sbuf *out, bool *comma) {
  (void)ud, (void)mark; /* this wire has no breakpoint */
  for (const cJSON *it = first; it && it != end; it = it->next) {
    const char *role = cJSON_GetStringValue(cJSON_GetObjectItem(it, "role"));
    const char *content = cJSON_GetStringValue(cJSON_GetObjectItem(it, "content"));
    if (!role) continue;
    if (*comma) sbuf_append(out, ",", 1);
    *comma = true;
    sbuf_append(out, "{\"role\":", 8);
    json_put_string(out, role);
    if (!strcmp(role, "assistant")) {
      const cJSON *calls = cJSON_GetObjectItem(it, "tool_calls");
      sbuf_append(out, ",\"content\":", 11);
      if (content && *content)
        json_put_string(out, content);
      else
        sbuf_append(out, "null", 4);
      if (cJSON_GetArraySize(calls) > 0) {
        sbuf_append(out, ",\"tool_calls\":[", 15);
        const cJSON *c;
        bool first_call = true;
        cJSON_ArrayForEach(c, calls) {
          char w[65];
          llm_wire_name(cJSON_GetStringValue(cJSON_GetObjectItem(c, "name")) ?: "", w);
          if (!first_call) sbuf_append(out, ",", 1);
          first_call = false;
          sbuf_append(out, "{\"id\":", 6);
          json_put_string(out, cJSON_GetStringValue(cJSON_GetObjectItem(c, "id")) ?: "");
          sbuf_append(out, ",\"type\":\"function\",\"function\":{\"name\":", 38);
          json_put_string(out, w);
          sbuf_append(out, ",\"arguments\":", 13);
          json_put_string(out, cJSON_GetStringValue(cJSON_GetObjectItem(c, "arguments")) ?: "{}");
          sbuf_append(out, "}}", 2);
        }
        sbuf_append(out, "]", 1);
      }
    } else if (!strcmp(role, "tool")) {
      sbuf_append(out, ",\"tool_call_id\":", 16);
      json_put_string(out, cJSON_GetStringValue(cJSON_GetObjectItem(it, "tool_call_id")) ?: "");
      sbuf_append(out, ",\"content\":", 11);
      json_put_string(out, content ? content : "");
    } else {
      sbuf_append(out, ",\"content\":", 11);
      json_put_string(out, content ? content : "");
    }
    sbuf_append(out, "}", 1);
  }
}

static int wire_class(const cJSON *m) {
  return cJSON_GetStringValue(cJSON_GetObjectItem(m, "role")) ? 1 : 0;
}

static cJSON *wire_tools(const cJSON *tools) {
  cJSON *out = cJSON_CreateArray();
  const cJSON *t;
  cJSON_ArrayForEach(t, tools) {
    char w[65];
    llm_wire_name(cJSON_GetStringValue(cJSON_GetObjectItem(t, "name")) ?: "", w);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(o, "function");
    cJSON_AddStringToObject(f, "name", w);
    cJSON_AddStringToObject(f, "description",
                            cJSON_GetStringValue(cJSON_GetObjectItem(t, "description")) ?: "");
    const cJSON *params = cJSON_GetObjectItem(t, "parameters");
    /* keys in a stable order: the same bytes every call (prompt caching) */
    cJSON_AddItemToObject(f, "parameters", params ? llm_sorted_view(params) : cJSON_CreateObject());
    cJSON_AddItemToArray(out, o);
  }
  return out;
}

/* max_tokens is deprecated in chat completions (and refused by reasoning
 * models): max_completion_tokens, unless the provider is an older
 * compatible server that wants max_tokens. Sent only when set. */
static int max_tokens_of(const struct llm_provider *p, const struct llm_request *req) {
  return req->max_tokens > 0 ? req->max_tokens : (p->max_tokens_set ? p->max_tokens : 0);
}

/* The whole body as one tree: the reference the cached path below must
 * print the same bytes as (tests/unit/model/test_llm_body.c). */
static char *full_body(const struct llm_provider *p, const struct llm_request *req, bool stream) {
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "model", p->model);
  cJSON *msgs = wire_range(NULL, req->messages ? req->messages->child : NULL, NULL);
  if (req->system && *req->system) cJSON_InsertItemInArray(msgs, 0, system_message(req->system));
  cJSON_AddItemToObject(b, "messages", msgs);
  if (cJSON_GetArraySize(req->tools) > 0) {
    cJSON_AddItemToObject(b, "tools", wire_tools(req->tools));
    cJSON_AddStringToObject(b, "tool_choice", req->no_tools ? "none" : "auto");
  }
  int mt = max_tokens_of(p, req);
  if (mt > 0)
    cJSON_AddNumberToObject(b, p->max_tokens_legacy ? "max_tokens" : "max_completion_tokens", mt);
  if (p->prompt_cache) { /* requests sharing model, system and tools share a cache key */
    char key[40];
    llm_cache_key(p, req, key);
    cJSON_AddStringToObject(b, "prompt_cache_key", key);
  }
  if (stream) {
    cJSON_AddTrueToObject(b, "stream");
    cJSON *so = cJSON_AddObjectToObject(b, "stream_options");
    cJSON_AddTrueToObject(so, "include_usage");
  }
  char *s = json_print(b, 0);
  cJSON_Delete(b);
  return s;
}


static char *make_system(void *ud) {
  cJSON *m = system_message(ud);
  char *t = json_print(m, 0);
  cJSON_Delete(m);
  return t;
}
static char *make_tools(void *ud) {
  cJSON *t = wire_tools(ud);
  char *s = json_print(t, 0);
  cJSON_Delete(t);
  return s;
}
struct key_ud {
  const struct llm_provider *p;
  const struct llm_request *req;
};
static char *make_key(void *ud) {
  const struct key_ud *k = ud;
  char key[40];
  llm_cache_key(k->p, k->req, key);
  cJSON *v = cJSON_CreateString(key);
  char *t = json_print(v, 0);
  cJSON_Delete(v);
  return t;
}

/* The same bytes as full_body, from the request's body cache: the member
 * order and separators of json_print's compact form, each piece printed
 * on its own (llm_body.c). */
static char *openai_body(const struct llm_provider *p, const struct llm_request *req, bool stream) {
  struct llm_body_cache *c = req->body_cache;
  if (!c) return full_body(p, req, stream);
  enum { SYSTEM, TOOLS, KEY };
  struct sbuf b = {0};
  sbuf_puts(&b, "{\"model\":");
  json_put_string(&b, p->model);
  sbuf_puts(&b, ",\"messages\":[");
  bool sys = req->system && *req->system;
  if (sys) {
    llm__body_piece(c, LLM__WIRE_OPENAI, SYSTEM, 0, req->system, NULL, make_system,
                                  (void *)req->system, &b);
  }
  const struct llm__msg_wire mw = {.range = wire_range, .cls = wire_class, .print = wire_print};
  struct sbuf m = {0};
  llm__body_messages(c, LLM__WIRE_OPENAI, req->messages, &mw, &m);
  if (sys && m.len) sbuf_append(&b, ",", 1);
  if (m.len) sbuf_append(&b, m.s, m.len);
  sbuf_free(&m);
  sbuf_puts(&b, "]");
  if (cJSON_GetArraySize(req->tools) > 0) {
    sbuf_puts(&b, ",\"tools\":");
    llm__body_piece(c, LLM__WIRE_OPENAI, TOOLS, 0, NULL, req->tools, make_tools,
                                  (void *)req->tools, &b);
    sbuf_puts(&b, req->no_tools ? ",\"tool_choice\":\"none\"" : ",\"tool_choice\":\"auto\"");
  }
  int mt = max_tokens_of(p, req);
  if (mt > 0)
    sbuf_printf(&b, ",\"%s\":%d", p->max_tokens_legacy ? "max_tokens" : "max_completion_tokens",
                mt);
  if (p->prompt_cache) {
    /* the key hashes model, system and tools: cached under all three */
    struct sbuf k = {0};
    sbuf_printf(&k, "%zu:%s", strlen(p->model), p->model); /* a length: no two keys alike */
    sbuf_puts(&k, req->system ? req->system : "");
    struct key_ud ku = {p, req};
    sbuf_puts(&b, ",\"prompt_cache_key\":");
    llm__body_piece(c, LLM__WIRE_OPENAI, KEY, 0, k.s, req->tools, make_key, &ku, &b);
    sbuf_free(&k);
  }
  if (stream) sbuf_puts(&b, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
  sbuf_puts(&b, "}");
  return sbuf_take(&b);
}

static int error_of(const cJSON *j, struct err *e) {
  const cJSON *er = cJSON_GetObjectItem(j, "error");
  if (!er || cJSON_IsNull(er)) return 0;
  const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(er, "message"));
  if (!msg) msg = cJSON_GetStringValue(er);
  const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(er, "type"));
  if (!type || !*type) type = cJSON_GetStringValue(cJSON_GetObjectItem(er, "code"));
  return err_set(e, ERR_FAIL, "provider_error", "provider error: %s%s%s", type ? type : "",
                 type ? ": " : "", msg ? msg : "(no message)");
}

/* finish_reason in the neutral terms (llm.h). */
static void finish_of(struct llm__stream *s, const char *fin) {
  if (!fin) return;
  llm__stop_reason(s, fin);
  if (!strcmp(fin, "stop"))
    llm__finish(s, LLM_FINISH_STOP);
  else if (!strcmp(fin, "tool_calls") || !strcmp(fin, "function_call"))
    llm__finish(s, LLM_FINISH_TOOLS);
  else if (!strcmp(fin, "length"))
    llm__finish(s, LLM_FINISH_LENGTH);
  else if (!strcmp(fin, "content_filter")) {
    /* the provider's filter withheld the content: a refusal, said so */
    llm__refusal(s, "", 0);
    llm__finish(s, LLM_FINISH_REFUSAL);
  } else
    llm__finish(s, LLM_FINISH_OTHER);
}

/* The first choice (index 0): a server asked for one answer may still send
 * several (n > 1, or a proxy's); the others are ignored, streamed too. */
static const cJSON *first_choice(const cJSON *j, bool streamed) {
  const cJSON *ch, *first = NULL;
  cJSON_ArrayForEach(ch, cJSON_GetObjectItem(j, "choices")) {
    const cJSON *ix = cJSON_GetObjectItem(ch, "index");
    if (!cJSON_IsNumber(ix) || ix->valuedouble == 0) return ch;
    if (!first) first = ch;
  }
  return streamed ? NULL : first; /* a streamed chunk of another choice: not ours */
}

static void usage_of(struct llm__stream *s, const cJSON *u) {
  llm__usage_json(s, u, "prompt_tokens", "completion_tokens");
}

static int openai_event(struct llm__stream *s, const char *event, const char *data, struct err *e) {
  if (!strcmp(data, "[DONE]")) {
    llm__done(s);
    return 0;
  }
  if (llm__fast_openai(s, data, finish_of)) return 0; /* a plain delta: no tree */
  struct err pe = {0};
  cJSON *j = json_parse_lossy(data, 0, llm__invalid_utf8(s), &pe);
  if (!j) return err_set(e, ERR_FAIL, "provider_error", "stream: a chunk is not JSON: %s", pe.msg);
  int rc = error_of(j, e);
  if (rc) goto out;
  usage_of(s, cJSON_GetObjectItem(j, "usage"));
  const cJSON *ch = first_choice(j, true);
  if (!ch) goto out;
  const cJSON *d = cJSON_GetObjectItem(ch, "delta");
  const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(d, "content"));
  if (text) llm__text(s, text, strlen(text));
  const char *refusal = cJSON_GetStringValue(cJSON_GetObjectItem(d, "refusal"));
  if (refusal && *refusal) llm__refusal(s, refusal, strlen(refusal));
  const cJSON *tc;
  cJSON_ArrayForEach(tc, cJSON_GetObjectItem(d, "tool_calls")) {
    const cJSON *ix = cJSON_GetObjectItem(tc, "index");
    int index = cJSON_IsNumber(ix) ? (int)ix->valuedouble : 0;
    const cJSON *f = cJSON_GetObjectItem(tc, "function");
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(tc, "id"));
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(f, "name"));
    if (id || name) llm__tool_start(s, index, id, name);
    const char *args = cJSON_GetStringValue(cJSON_GetObjectItem(f, "arguments"));
    if (args && *args) llm__tool_args(s, index, args, strlen(args));
  }
  finish_of(s, cJSON_GetStringValue(cJSON_GetObjectItem(ch, "finish_reason")));
out:
  cJSON_Delete(j);
  return rc;
}

static int openai_whole(struct llm__stream *s, const char *body, struct err *e) {
  struct err pe = {0};
  cJSON *j = json_parse_lossy(body, 0, llm__invalid_utf8(s), &pe);
  if (!j) return err_set(e, ERR_FAIL, "provider_error", "the response is not JSON: %s", pe.msg);
  int rc = error_of(j, e);
  if (rc) goto out;
  usage_of(s, cJSON_GetObjectItem(j, "usage"));
  const cJSON *ch = first_choice(j, false);
  const cJSON *m = cJSON_GetObjectItem(ch, "message");
  if (!m) {
    rc = err_set(e, ERR_FAIL, "provider_error", "the response has no choices[0].message");
    goto out;
  }
  const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(m, "content"));
  if (text) llm__text(s, text, strlen(text));
  const char *refusal = cJSON_GetStringValue(cJSON_GetObjectItem(m, "refusal"));
  if (refusal && *refusal) llm__refusal(s, refusal, strlen(refusal));
  int k = 0;
  const cJSON *tc;
  cJSON_ArrayForEach(tc, cJSON_GetObjectItem(m, "tool_calls")) {
    const cJSON *f = cJSON_GetObjectItem(tc, "function");
    llm__tool_start(s, k, cJSON_GetStringValue(cJSON_GetObjectItem(tc, "id")),
                    cJSON_GetStringValue(cJSON_GetObjectItem(f, "name")));
    const char *args = cJSON_GetStringValue(cJSON_GetObjectItem(f, "arguments"));
    if (args) llm__tool_args(s, k, args, strlen(args));
    k++;
  }
  finish_of(s, cJSON_GetStringValue(cJSON_GetObjectItem(ch, "finish_reason")));
  llm__done(s);
out:
  cJSON_Delete(j);
  return rc;
}

const struct llm__wire llm__openai_wire = {
    .body = openai_body,
    .path = "/chat/completions",
    .event = openai_event,
    .whole = openai_whole,
};
