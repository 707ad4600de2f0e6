/* llm_anthropic.c - the Anthropic messages wire format (POST
 * {base}/messages, anthropic-version 2023-06-01), streamed or not. Tool
 * results go back as tool_result blocks in one user message. */
#include <stdlib.h>
#include <string.h>

#include "llm.h"
#include "llm_emit.h"
#include "json.h"
#include "util.h"

/* ---- the request body ----------------------------------------------------
 * Written once on an emitter (llm_emit.h): a tree for a request without a
 * body cache, printed straight into the body with one. */

static const cJSON *call_by_id(const cJSON *calls, const char *id) {
  const cJSON *c;
  cJSON_ArrayForEach(c, calls) {
    const char *cid = cJSON_GetStringValue(emit_get(c, "id"));
    if (id && cid && !strcmp(id, cid)) return c;
  }
  return NULL;
}

/* Whether blocks hold the tool_use block of the call with this id (a call
 * without one gets a block made from the call itself). */
static bool has_tool_use(const cJSON *blocks, const char *id) {
  const cJSON *b;
  cJSON_ArrayForEach(b, blocks) {
    const char *bt = cJSON_GetStringValue(emit_get(b, "type"));
    const char *bid = cJSON_GetStringValue(emit_get(b, "id"));
    if (bt && !strcmp(bt, "tool_use") && id && bid && !strcmp(id, bid)) return true;
  }
  return false;
}

/* The block types the API documents as taking a cache breakpoint; never
 * thinking, never a type this code does not know. */
static bool cacheable(const char *bt) {
  static const char *ok[] = {"text",     "tool_result",     "tool_use",
                             "image",    "document",        "server_tool_use",
                             "web_search_tool_result"};
  for (size_t k = 0; bt && k < sizeof ok / sizeof ok[0]; k++)
    if (!strcmp(bt, ok[k])) return true;
  return false;
}

static void cache_control(struct emit *e) {
  EMIT_CTYPE(e, "cache_control", "ephemeral");
}

/* The walk over neutral messages. Blocks of one role join one wire message
 * (Anthropic wants user and assistant to alternate). The conversation's
 * cache breakpoint goes on the last block of the last wire message that
 * may carry one (a cacheable type, without a cache_control of its own
 * already): with the mark, a dry pass first walks the same blocks without
 * emitting to find it. */
struct walk {
  struct emit *e;
  bool dry;         /* only count the blocks and find the one to mark */
  bool open;        /* a wire message is open */
  bool assistant;   /* ... and it is the assistant's */
  int block;        /* the blocks started so far */
  int mark;         /* the block that gets the breakpoint, -1: none */
  const cJSON *mark_at; /* the message starting the last wire message: there, */
  int mark_in;          /* mark becomes the block count plus this (-1: none) */
  int cand;         /* dry: the last block of a cacheable type in the open wire message */
  bool cand_marked; /* dry: that block has its cache_control already */
};

/* Starts a block of the role: in the open wire message when it has the
 * role, else in a new one. Returns the block's number. */
static int block_start(struct walk *w, bool assistant) {
  bool same = w->open && w->assistant == assistant;
  w->open = true;
  w->assistant = assistant;
  if (w->dry) {
    if (!same) w->cand = -1;
    return w->block++;
  }
  if (!same) {
    struct emit *e = w->e;
    if (w->block) {
      emit_end_arr(e);
      emit_end_obj(e);
    }
    emit_begin_obj(e, EK_ITEM);
    if (assistant)
      EMIT_CSTR(e, "role", "assistant");
    else
      EMIT_CSTR(e, "role", "user");
    emit_begin_arr(e, EK("content"));
  }
  return w->block++;
}

/* Block k, of type bt, in the dry pass: the breakpoint's candidate when
 * its type takes one. */
static void block_note(struct walk *w, int k, const char *bt, bool has_mark) {
  if (!cacheable(bt)) return;
  w->cand = k;
  w->cand_marked = has_mark;
}

/* The end of block k's object: its breakpoint first when it is the one. */
static void block_end(struct walk *w, int k) {
  if (k == w->mark) emit_moving_mark(w->e);
  emit_end_obj(w->e);
}

static void text_block(struct walk *w, bool assistant, const char *t) {
  int k = block_start(w, assistant);
  if (w->dry) return block_note(w, k, "text", false);
  emit_begin_obj(w->e, EK_ITEM);
  EMIT_CSTR(w->e, "type", "text");
  emit_str(w->e, EK("text"), t);
  block_end(w, k);
}

/* A kept block as it came, with the breakpoint as the member added last
 * when it is the one. */
static void kept_block(struct walk *w, const cJSON *b) {
  int k = block_start(w, true);
  if (w->dry)
    return block_note(w, k, cJSON_GetStringValue(emit_get(b, "type")),
                      emit_get(b, "cache_control") != NULL);
  if (k == w->mark) { /* an object with members: it has a type */
    emit_copy_open(w->e, EK_ITEM, b);
    block_end(w, k);
  } else {
    emit_copy(w->e, EK_ITEM, b);
  }
}

/* The tool_use block for one neutral tool call. */
static void tool_use_block(struct walk *w, const cJSON *c) {
  int k = block_start(w, true);
  if (w->dry) return block_note(w, k, "tool_use", false);
  struct emit *e = w->e;
  char wn[65];
  llm_wire_name(cJSON_GetStringValue(emit_get(c, "name")) ?: "", wn);
  emit_begin_obj(e, EK_ITEM);
  EMIT_CSTR(e, "type", "tool_use");
  emit_str(e, EK("id"), cJSON_GetStringValue(emit_get(c, "id")) ?: "");
  emit_str(e, EK("name"), wn);
  /* parsed as react.c parsed it for the call, so a call refused
   * there (broken JSON, a repeated key) is echoed as an empty input */
  emit_object_text(e, EK("input"), cJSON_GetStringValue(emit_get(c, "arguments")));
  block_end(w, k);
}

static void tool_result_block(struct walk *w, const cJSON *m, const char *content) {
  int k = block_start(w, false);
  if (w->dry) return block_note(w, k, "tool_result", false);
  struct emit *e = w->e;
  emit_begin_obj(e, EK_ITEM);
  EMIT_CSTR(e, "type", "tool_result");
  emit_str(e, EK("tool_use_id"),
           cJSON_GetStringValue(emit_get(m, "tool_call_id")) ?: "");
  emit_str(e, EK("content"), content ? content : "");
  if (cJSON_IsTrue(emit_get(m, "is_error"))) emit_true(e, EK("is_error"));
  block_end(w, k);
}

/* An assistant turn that kept its content blocks (anthropic_content):
 * every block goes back as it came, in order (thinking with its signature
 * before the tool_use blocks, server_tool_use and its *_tool_result, text
 * with citations, types this code does not know); a tool_use block is
 * rebuilt from the neutral call of the same id (the arguments as the loop
 * ran them), or dropped when the loop did not run it. Returns the number
 * of blocks added. */
static int kept_blocks(struct walk *w, const cJSON *blocks, const cJSON *calls) {
  int n = 0;
  const cJSON *b;
  cJSON_ArrayForEach(b, blocks) {
    const char *bt = cJSON_GetStringValue(emit_get(b, "type"));
    if (!bt) continue;
    if (!strcmp(bt, "tool_use")) {
      const cJSON *c = call_by_id(calls, cJSON_GetStringValue(emit_get(b, "id")));
      if (!c) continue;
      tool_use_block(w, c);
    } else {
      if (!strcmp(bt, "text")) {
        const char *t = cJSON_GetStringValue(emit_get(b, "text"));
        if (!t || !*t) continue; /* the API refuses empty text blocks */
      }
      kept_block(w, b);
    }
    n++;
  }
  /* a call without a block of its own (should not happen): still answered */
  const cJSON *c;
  cJSON_ArrayForEach(c, calls) {
    if (!has_tool_use(blocks, cJSON_GetStringValue(emit_get(c, "id")))) {
      tool_use_block(w, c);
      n++;
    }
  }
  return n;
}

/* One pass over [first, end). */
static void walk_range(struct walk *w, const cJSON *first, const cJSON *end) {
  for (const cJSON *it = first; it && it != end; it = it->next) {
    if (it == w->mark_at && w->mark_in >= 0) w->mark = w->block + w->mark_in;
    const char *role = cJSON_GetStringValue(emit_get(it, "role"));
    const char *content = cJSON_GetStringValue(emit_get(it, "content"));
    if (!role) continue;
    if (!strcmp(role, "assistant")) {
      const cJSON *calls = emit_get(it, "tool_calls");
      const cJSON *kept = emit_get(it, "anthropic_content");
      /* a kept list that adds no block: the turn as if none was kept */
      if (cJSON_IsArray(kept) && kept_blocks(w, kept, calls) > 0) continue;
      if (content && *content) text_block(w, true, content);
      const cJSON *c;
      cJSON_ArrayForEach(c, calls) tool_use_block(w, c);
      if (!(content && *content) && cJSON_GetArraySize(calls) == 0)
        text_block(w, true, "(no answer)");
    } else if (!strcmp(role, "tool")) {
      tool_result_block(w, it, content);
    } else {
      text_block(w, false, content ? content : "");
    }
  }
  if (!w->dry && w->block) {
    emit_end_arr(w->e);
    emit_end_obj(w->e);
  }
}

static int wire_class(const cJSON *m);

/* The wire messages of the neutral messages from first up to end (not
 * included), the last one marked when mark: the dry pass walks only the
 * neutral messages of that last wire message (the last run of one class),
 * whose blocks are numbered there as in the whole walk. */
static void walk_messages(struct emit *e, const cJSON *first, const cJSON *end, bool mark) {
  struct walk w = {.e = e, .mark = -1, .mark_in = -1, .cand = -1};
  if (mark) {
    int prev = 0;
    for (const cJSON *it = first; it && it != end; it = it->next) {
      int cl = wire_class(it);
      if (cl && cl != prev) w.mark_at = it;
      if (cl) prev = cl;
    }
    struct walk dry = {.dry = true, .mark = -1, .mark_in = -1, .cand = -1};
    walk_range(&dry, w.mark_at, end);
    if (dry.cand >= 0 && !dry.cand_marked) w.mark_in = dry.cand;
  }
  walk_range(&w, first, end);
}

/* The wire message a neutral message's blocks go to: 0 none (no role),
 * 1 user (user, tool and any other role), 2 assistant; walk_messages makes
 * one message of each run of one class, and every message with a role
 * adds at least one block. */
static int wire_class(const cJSON *m) {
  const char *role = cJSON_GetStringValue(emit_get(m, "role"));
  return !role ? 0 : !strcmp(role, "assistant") ? 2 : 1;
}

struct system_ud {
  const char *system;
  bool cache;
};
static void walk_system(struct emit *e, struct emit_key k, void *ud) {
  const struct system_ud *u = ud;
  if (!u->cache) {
    emit_str(e, k, u->system);
    return;
  }
  /* breakpoint 1: tools + system (the cache order is tools, system, messages) */
  emit_begin_arr(e, k);
  emit_begin_obj(e, EK_ITEM);
  EMIT_CSTR(e, "type", "text");
  emit_str(e, EK("text"), u->system);
  cache_control(e);
  emit_end_obj(e);
  emit_end_arr(e);
}

struct tools_ud {
  const cJSON *tools;
  bool mark_last; /* breakpoint 1 on the last tool (no system prompt carries it) */
};
static void walk_tools(struct emit *e, struct emit_key k, void *ud) {
  const struct tools_ud *u = ud;
  emit_begin_arr(e, k);
  const cJSON *t;
  cJSON_ArrayForEach(t, u->tools) {
    char w[65];
    llm_wire_name(cJSON_GetStringValue(emit_get(t, "name")) ?: "", w);
    emit_begin_obj(e, EK_ITEM);
    emit_str(e, EK("name"), w);
    emit_str(e, EK("description"),
             cJSON_GetStringValue(emit_get(t, "description")) ?: "");
    const cJSON *params = emit_get(t, "parameters");
    /* keys in a stable order: the same bytes every call (prompt caching) */
    if (params)
      emit_take(e, EK("input_schema"), llm_sorted_view(params));
    else
      EMIT_CEMPTY(e, "input_schema");
    if (u->mark_last && !t->next) cache_control(e);
    emit_end_obj(e);
  }
  emit_end_arr(e);
}

/* The body: a tree without a body cache, else printed from it, the
 * pieces (system prompt, tools) and the final messages reused where their
 * sources are unchanged (llm_body.c). */
static char *anthropic_body(const struct llm_provider *p, const struct llm_request *req,
                            bool stream) {
  struct llm_body_cache *c = req->body_cache;
  enum { SYSTEM, TOOLS };
  struct sbuf b = {0};
  struct emit em, *e = &em;
  emit_body_init(e, &b, req);
  emit_begin_obj(e, EK_ITEM);
  emit_str(e, EK("model"), p->model);
  emit_int(e, EK("max_tokens"), req->max_tokens > 0 ? req->max_tokens : p->max_tokens);
  bool sys = req->system && *req->system;
  if (sys) {
    struct system_ud u = {req->system, p->prompt_cache};
    llm__emit_piece(e, EK("system"), c, LLM__WIRE_ANTHROPIC, SYSTEM, p->prompt_cache,
                    req->system, NULL, walk_system, &u);
  }
  emit_begin_arr(e, EK("messages"));
  /* breakpoint 2: the conversation so far */
  const struct llm__msg_wire mw = {
      .walk = walk_messages, .cls = wire_class, .merge = true, .mark = p->prompt_cache};
  llm__emit_messages(e, c, LLM__WIRE_ANTHROPIC, req->messages, &mw);
  emit_end_arr(e);
  if (cJSON_GetArraySize(req->tools) > 0) {
    /* without a system prompt, the tools get breakpoint 1 themselves */
    struct tools_ud u = {req->tools, p->prompt_cache && !sys};
    llm__emit_piece(e, EK("tools"), c, LLM__WIRE_ANTHROPIC, TOOLS, u.mark_last, NULL, req->tools,
                    walk_tools, &u);
    if (req->no_tools)
      EMIT_CTYPE(e, "tool_choice", "none");
    else
      EMIT_CTYPE(e, "tool_choice", "auto");
  }
  if (p->thinking_budget > 0) { /* extended thinking (llm.h: provider thinking_budget) */
    emit_begin_obj(e, EK("thinking"));
    EMIT_CSTR(e, "type", "enabled");
    emit_int(e, EK("budget_tokens"), p->thinking_budget);
    emit_end_obj(e);
  }
  if (stream) emit_true(e, EK("stream"));
  emit_end_obj(e);
  return emit_finish(e);
}

static int error_of(const cJSON *j, struct err *e) {
  const cJSON *er = cJSON_GetObjectItem(j, "error");
  if (!cJSON_IsObject(er)) return 0;
  const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(er, "type"));
  const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(er, "message"));
  return err_set(e, ERR_FAIL, "provider_error", "provider error: %s%s%s", type ? type : "",
                 type ? ": " : "", msg ? msg : "(no message)");
}

/* stop_reason in the neutral terms (llm.h); a refusal's stop_details
 * (category, explanation) become its text. */
static void finish_of(struct llm__stream *s, const char *reason, const cJSON *details) {
  if (!reason) return;
  llm__stop_reason(s, reason);
  if (!strcmp(reason, "end_turn") || !strcmp(reason, "stop_sequence"))
    llm__finish(s, LLM_FINISH_STOP);
  else if (!strcmp(reason, "tool_use"))
    llm__finish(s, LLM_FINISH_TOOLS);
  else if (!strcmp(reason, "max_tokens") || !strcmp(reason, "model_context_window_exceeded"))
    llm__finish(s, LLM_FINISH_LENGTH);
  else if (!strcmp(reason, "pause_turn"))
    llm__finish(s, LLM_FINISH_PAUSE);
  else if (!strcmp(reason, "refusal")) {
    const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(details, "explanation"));
    const char *cat = cJSON_GetStringValue(cJSON_GetObjectItem(details, "category"));
    struct sbuf t = {0};
    if (why && *why) sbuf_puts(&t, why);
    if (cat && *cat) sbuf_printf(&t, "%s(category: %s)", t.len ? " " : "", cat);
    llm__refusal(s, t.s ? t.s : "", t.len);
    sbuf_free(&t);
    llm__finish(s, LLM_FINISH_REFUSAL);
  } else
    llm__finish(s, LLM_FINISH_OTHER);
}

/* A whole content block of the response, kept to be sent back. */
static void keep_block(struct llm__stream *s, int index, const cJSON *b) {
  llm__block_start(s, index, cJSON_Duplicate(b, 1));
  llm__block_stop(s, index);
}

static void usage_of(struct llm__stream *s, const cJSON *u) {
  llm__usage_json(s, u, "input_tokens", "output_tokens");
}

static int anthropic_event(struct llm__stream *s, const char *event, const char *data,
                           size_t len, struct err *e) {
  if (llm__fast_anthropic(s, data, len, finish_of)) return 0; /* a plain event: no tree */
  struct err pe = {0};
  cJSON *j = json_parse_lossy(data, 0, llm__invalid_utf8(s), &pe);
  if (!j)
    return err_set(e, ERR_FAIL, "provider_error", "stream: event %s is not JSON: %s", event, pe.msg);
  int rc = 0;
  const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(j, "type"));
  if (!type) type = event;
  const cJSON *ix = cJSON_GetObjectItem(j, "index");
  int index = cJSON_IsNumber(ix) ? (int)ix->valuedouble : 0;
  if (!strcmp(type, "error")) {
    rc = error_of(j, e);
    if (!rc) rc = err_set(e, ERR_FAIL, "provider_error", "provider error event");
  } else if (!strcmp(type, "message_start")) {
    usage_of(s, cJSON_GetObjectItem(cJSON_GetObjectItem(j, "message"), "usage"));
  } else if (!strcmp(type, "content_block_start")) {
    /* Every block is kept, to go back unchanged; only a tool_use block is
     * a local tool call. server_tool_use runs at the provider: its input
     * streams as input_json_delta too, but never becomes a local call. */
    const cJSON *cb = cJSON_GetObjectItem(j, "content_block");
    const char *bt = cJSON_GetStringValue(cJSON_GetObjectItem(cb, "type"));
    if (cJSON_IsObject(cb)) llm__block_start(s, index, cJSON_Duplicate(cb, 1));
    if (bt && !strcmp(bt, "tool_use")) {
      llm__tool_start(s, index, cJSON_GetStringValue(cJSON_GetObjectItem(cb, "id")),
                      cJSON_GetStringValue(cJSON_GetObjectItem(cb, "name")));
    } else if (bt && !strcmp(bt, "text")) {
      const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(cb, "text"));
      if (t) llm__text(s, t, strlen(t));
    } else if (bt && !strcmp(bt, "thinking")) {
      const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(cb, "thinking"));
      if (t) llm__thinking(s, t, strlen(t));
    }
  } else if (!strcmp(type, "content_block_delta")) {
    const cJSON *d = cJSON_GetObjectItem(j, "delta");
    const char *dt = cJSON_GetStringValue(cJSON_GetObjectItem(d, "type"));
    const char *bt = llm__block_type(s, index);
    if (dt && !strcmp(dt, "text_delta")) {
      const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(d, "text"));
      if (t) {
        llm__text(s, t, strlen(t));
        llm__block_append(s, index, "text", t, strlen(t));
      }
    } else if (dt && !strcmp(dt, "input_json_delta")) {
      const char *pj = cJSON_GetStringValue(cJSON_GetObjectItem(d, "partial_json"));
      if (pj && bt && !strcmp(bt, "tool_use"))
        llm__tool_args(s, index, pj, strlen(pj));
      else if (pj) /* a server tool's input: kept for the block, never run here */
        llm__block_append(s, index, "input", pj, strlen(pj));
    } else if (dt && !strcmp(dt, "thinking_delta")) {
      const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(d, "thinking"));
      if (t) {
        llm__thinking(s, t, strlen(t));
        llm__block_append(s, index, "thinking", t, strlen(t));
      }
    } else if (dt && !strcmp(dt, "signature_delta")) {
      const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(d, "signature"));
      if (t) llm__block_append(s, index, "signature", t, strlen(t));
    } else if (dt && !strcmp(dt, "citations_delta")) {
      const cJSON *c = cJSON_GetObjectItem(d, "citation");
      if (c) llm__block_push(s, index, "citations", cJSON_Duplicate(c, 1));
    }
  } else if (!strcmp(type, "content_block_stop")) {
    const char *bt = llm__block_type(s, index);
    if (bt && !strcmp(bt, "redacted_thinking")) llm__redacted(s);
    llm__block_stop(s, index);
  } else if (!strcmp(type, "message_delta")) {
    const cJSON *d = cJSON_GetObjectItem(j, "delta");
    finish_of(s, cJSON_GetStringValue(cJSON_GetObjectItem(d, "stop_reason")),
              cJSON_GetObjectItem(d, "stop_details"));
    usage_of(s, cJSON_GetObjectItem(j, "usage"));
  } else if (!strcmp(type, "message_stop")) {
    llm__done(s);
  }
  /* ping and unknown events: nothing to do */
  cJSON_Delete(j);
  return rc;
}

static int anthropic_whole(struct llm__stream *s, const char *body, struct err *e) {
  struct err pe = {0};
  cJSON *j = json_parse_lossy(body, 0, llm__invalid_utf8(s), &pe);
  if (!j) return err_set(e, ERR_FAIL, "provider_error", "the response is not JSON: %s", pe.msg);
  int rc = error_of(j, e);
  if (rc) goto out;
  usage_of(s, cJSON_GetObjectItem(j, "usage"));
  int k = 0;
  const cJSON *b;
  cJSON_ArrayForEach(b, cJSON_GetObjectItem(j, "content")) {
    const char *bt = cJSON_GetStringValue(cJSON_GetObjectItem(b, "type"));
    if (!bt) continue;
    keep_block(s, k, b); /* every block goes back unchanged (see the stream) */
    if (!strcmp(bt, "text")) {
      const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(b, "text"));
      if (t) llm__text(s, t, strlen(t));
    } else if (!strcmp(bt, "thinking")) {
      const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(b, "thinking"));
      if (t) llm__thinking(s, t, strlen(t));
    } else if (!strcmp(bt, "redacted_thinking")) {
      llm__redacted(s);
    } else if (!strcmp(bt, "tool_use")) {
      llm__tool_start(s, k, cJSON_GetStringValue(cJSON_GetObjectItem(b, "id")),
                      cJSON_GetStringValue(cJSON_GetObjectItem(b, "name")));
      const cJSON *in = cJSON_GetObjectItem(b, "input");
      if (cJSON_IsString(in)) {
        llm__tool_args(s, k, in->valuestring, strlen(in->valuestring));
      } else if (in) {
        char *txt = json_print(in, 0);
        llm__tool_args(s, k, txt, strlen(txt));
        free(txt);
      }
    }
    k++; /* the block index: the tool call's index in the stream too */
  }
  finish_of(s, cJSON_GetStringValue(cJSON_GetObjectItem(j, "stop_reason")),
            cJSON_GetObjectItem(j, "stop_details"));
  llm__done(s);
out:
  cJSON_Delete(j);
  return rc;
}

const struct llm__wire llm__anthropic_wire = {
    .body = anthropic_body,
    .path = "/messages",
    .event = anthropic_event,
    .whole = anthropic_whole,
};
