/* llm_openai.c - the OpenAI-compatible chat completions wire format
 * (POST {base}/chat/completions), streamed or not. Also serves Ollama,
 * vLLM, llama.cpp server, LM Studio and OpenRouter. */
#include <stdlib.h>
#include <string.h>

#include "llm.h"
#include "llm_emit.h"
#include "json.h"
#include "util.h"

/* ---- the request body ----------------------------------------------------
 * Written once on an emitter (llm_emit.h): a tree for a request without a
 * body cache, printed straight into the body with one. */

/* The system prompt as the first wire message. */
static void walk_system(struct emit *e, struct emit_key k, void *ud) {
  emit_begin_obj(e, k);
  EMIT_CSTR(e, "role", "system");
  emit_str(e, EK("content"), ud);
  emit_end_obj(e);
}

/* The wire messages of the neutral messages from first up to end (not
 * included): one each, role-less ones skipped. This wire has no
 * breakpoint (mark). */
static void walk_messages(struct emit *e, const cJSON *first, const cJSON *end, bool mark) {
  (void)mark;
  for (const cJSON *it = first; it && it != end; it = it->next) {
    const char *role = cJSON_GetStringValue(emit_get(it, "role"));
    const char *content = cJSON_GetStringValue(emit_get(it, "content"));
    if (!role) continue;
    emit_begin_obj(e, EK_ITEM);
    emit_str(e, EK("role"), role);
    if (!strcmp(role, "assistant")) {
      const cJSON *calls = emit_get(it, "tool_calls");
      if (content && *content)
        emit_str(e, EK("content"), content);
      else
        emit_null(e, EK("content"));
      if (cJSON_GetArraySize(calls) > 0) {
        emit_begin_arr(e, EK("tool_calls"));
        const cJSON *c;
        cJSON_ArrayForEach(c, calls) {
          char w[65];
          llm_wire_name(cJSON_GetStringValue(emit_get(c, "name")) ?: "", w);
          emit_begin_obj(e, EK_ITEM);
          emit_str(e, EK("id"), cJSON_GetStringValue(emit_get(c, "id")) ?: "");
          EMIT_CSTR(e, "type", "function");
          emit_begin_obj(e, EK("function"));
          emit_str(e, EK("name"), w);
          emit_str(e, EK("arguments"),
                   cJSON_GetStringValue(emit_get(c, "arguments")) ?: "{}");
          emit_end_obj(e);
          emit_end_obj(e);
        }
        emit_end_arr(e);
      }
    } else if (!strcmp(role, "tool")) {
      emit_str(e, EK("tool_call_id"),
               cJSON_GetStringValue(emit_get(it, "tool_call_id")) ?: "");
      emit_str(e, EK("content"), content ? content : "");
    } else {
      emit_str(e, EK("content"), content ? content : "");
    }
    emit_end_obj(e);
  }
}

static int wire_class(const cJSON *m) {
  return cJSON_GetStringValue(emit_get(m, "role")) ? 1 : 0;
}

/* The wire tools of the neutral tools ud. */
static void walk_tools(struct emit *e, struct emit_key k, void *ud) {
  const cJSON *t;
  emit_begin_arr(e, k);
  cJSON_ArrayForEach(t, (const cJSON *)ud) {
    char w[65];
    llm_wire_name(cJSON_GetStringValue(emit_get(t, "name")) ?: "", w);
    emit_begin_obj(e, EK_ITEM);
    EMIT_CSTR(e, "type", "function");
    emit_begin_obj(e, EK("function"));
    emit_str(e, EK("name"), w);
    emit_str(e, EK("description"),
             cJSON_GetStringValue(emit_get(t, "description")) ?: "");
    const cJSON *params = emit_get(t, "parameters");
    /* keys in a stable order: the same bytes every call (prompt caching) */
    if (params)
      emit_take(e, EK("parameters"), llm_sorted_view(params));
    else
      EMIT_CEMPTY(e, "parameters");
    emit_end_obj(e);
    emit_end_obj(e);
  }
  emit_end_arr(e);
}

struct key_ud {
  const struct llm_provider *p;
  const struct llm_request *req;
};
static void walk_key(struct emit *e, struct emit_key k, void *ud) {
  const struct key_ud *ku = ud;
  char key[40];
  llm_cache_key(ku->p, ku->req, key);
  emit_str(e, k, key);
}

/* max_tokens is deprecated in chat completions (and refused by reasoning
 * models): max_completion_tokens, unless the provider is an older
 * compatible server that wants max_tokens. Sent only when set. */
static int max_tokens_of(const struct llm_provider *p, const struct llm_request *req) {
  return req->max_tokens > 0 ? req->max_tokens : (p->max_tokens_set ? p->max_tokens : 0);
}

/* The body: a tree without a body cache, else printed from it, the
 * pieces (system prompt, tools, cache key) and the final messages reused
 * where their sources are unchanged (llm_body.c). */
static char *openai_body(const struct llm_provider *p, const struct llm_request *req, bool stream) {
  struct llm_body_cache *c = req->body_cache;
  enum { SYSTEM, TOOLS, KEY };
  struct sbuf b = {0};
  struct emit em, *e = &em;
  emit_body_init(e, &b, req);
  emit_begin_obj(e, EK_ITEM);
  emit_str(e, EK("model"), p->model);
  emit_begin_arr(e, EK("messages"));
  if (req->system && *req->system)
    llm__emit_piece(e, EK_ITEM, c, LLM__WIRE_OPENAI, SYSTEM, 0, req->system, NULL, walk_system,
                    (void *)req->system);
  const struct llm__msg_wire mw = {.walk = walk_messages, .cls = wire_class};
  llm__emit_messages(e, c, LLM__WIRE_OPENAI, req->messages, &mw);
  emit_end_arr(e);
  if (cJSON_GetArraySize(req->tools) > 0) {
    llm__emit_piece(e, EK("tools"), c, LLM__WIRE_OPENAI, TOOLS, 0, NULL, req->tools, walk_tools,
                    (void *)req->tools);
    if (req->no_tools)
      EMIT_CSTR(e, "tool_choice", "none");
    else
      EMIT_CSTR(e, "tool_choice", "auto");
  }
  int mt = max_tokens_of(p, req);
  if (mt > 0) emit_int(e, p->max_tokens_legacy ? EK("max_tokens") : EK("max_completion_tokens"), mt);
  if (p->prompt_cache) {
    /* requests sharing model, system and tools share a cache key; the key
     * hashes all three: cached under all three (a length first, so no two
     * keys are alike) */
    struct sbuf k = {0};
    if (c) {
      sbuf_printf(&k, "%zu:%s", strlen(p->model), p->model);
      sbuf_puts(&k, req->system ? req->system : "");
    }
    struct key_ud ku = {p, req};
    llm__emit_piece(e, EK("prompt_cache_key"), c, LLM__WIRE_OPENAI, KEY, 0, k.s, req->tools,
                    walk_key, &ku);
    sbuf_free(&k);
  }
  if (stream) {
    emit_true(e, EK("stream"));
    emit_begin_obj(e, EK("stream_options"));
    emit_true(e, EK("include_usage"));
    emit_end_obj(e);
  }
  emit_end_obj(e);
  return emit_finish(e);
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

static int openai_event(struct llm__stream *s, const char *event, const char *data, size_t len,
                        struct err *e) {
  if (!strcmp(data, "[DONE]")) {
    llm__done(s);
    return 0;
  }
  if (llm__fast_openai(s, data, len, finish_of)) return 0; /* a plain delta: no tree */
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
