/* llm_anthropic.c - the Anthropic messages wire format (POST
 * {base}/messages, anthropic-version 2023-06-01), streamed or not. Tool
 * results go back as tool_result blocks in one user message. */
#include <stdlib.h>
#include <string.h>

#include "llm.h"
#include "json.h"
#include "util.h"

/* Appends a content block to the last wire message if it has role, else
 * starts a new message (Anthropic wants user/assistant to alternate). */
static void add_block(cJSON *msgs, const char *role, cJSON *block) {
  cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
  const char *lr = last ? cJSON_GetStringValue(cJSON_GetObjectItem(last, "role")) : NULL;
  if (!lr || strcmp(lr, role)) {
    last = cJSON_CreateObject();
    cJSON_AddStringToObject(last, "role", role);
    cJSON_AddArrayToObject(last, "content");
    cJSON_AddItemToArray(msgs, last);
  }
  cJSON_AddItemToArray(cJSON_GetObjectItem(last, "content"), block);
}

static cJSON *text_block(const char *t) {
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "type", "text");
  cJSON_AddStringToObject(b, "text", t);
  return b;
}

/* The tool_use block for one neutral tool call. */
static cJSON *tool_use_block(const cJSON *c) {
  char w[65];
  llm_wire_name(cJSON_GetStringValue(cJSON_GetObjectItem(c, "name")) ?: "", w);
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "type", "tool_use");
  cJSON_AddStringToObject(b, "id", cJSON_GetStringValue(cJSON_GetObjectItem(c, "id")) ?: "");
  cJSON_AddStringToObject(b, "name", w);
  /* parsed as react.c parsed it for the call, so a call refused
   * there (broken JSON, a repeated key) is echoed as an empty input */
  cJSON *input = json_parse_str(cJSON_GetStringValue(cJSON_GetObjectItem(c, "arguments")),
                                JSON_NO_DUPLICATES, NULL);
  if (!cJSON_IsObject(input)) {
    cJSON_Delete(input);
    input = cJSON_CreateObject();
  }
  cJSON_AddItemToObject(b, "input", input);
  return b;
}

static const cJSON *call_by_id(const cJSON *calls, const char *id) {
  const cJSON *c;
  cJSON_ArrayForEach(c, calls) {
    const char *cid = cJSON_GetStringValue(cJSON_GetObjectItem(c, "id"));
    if (id && cid && !strcmp(id, cid)) return c;
  }
  return NULL;
}

/* An assistant turn that kept its content blocks (anthropic_content):
 * every block goes back as it came, in order (thinking with its signature
 * before the tool_use blocks, server_tool_use and its *_tool_result, text
 * with citations, types this code does not know); a tool_use block is
 * rebuilt from the neutral call of the same id (the arguments as the loop
 * ran them), or dropped when the loop did not run it. Returns the number
 * of blocks added. */

/* Whether blocks hold the tool_use block of the call with this id (a call
 * without one gets a block made from the call itself). */
static bool has_tool_use(const cJSON *blocks, const char *id) {
  const cJSON *b;
  cJSON_ArrayForEach(b, blocks) {
    const char *bt = cJSON_GetStringValue(cJSON_GetObjectItem(b, "type"));
    const char *bid = cJSON_GetStringValue(cJSON_GetObjectItem(b, "id"));
    if (bt && !strcmp(bt, "tool_use") && id && bid && !strcmp(id, bid)) return true;
  }
  return false;
}

static int add_kept_blocks(cJSON *out, const cJSON *blocks, const cJSON *calls) {
  int n = 0;
  const cJSON *b;
  cJSON_ArrayForEach(b, blocks) {
    const char *bt = cJSON_GetStringValue(cJSON_GetObjectItem(b, "type"));
    if (!bt) continue;
    if (!strcmp(bt, "tool_use")) {
      const cJSON *c = call_by_id(calls, cJSON_GetStringValue(cJSON_GetObjectItem(b, "id")));
      if (!c) continue;
      add_block(out, "assistant", tool_use_block(c));
    } else if (!strcmp(bt, "text")) {
      const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(b, "text"));
      if (!t || !*t) continue; /* the API refuses empty text blocks */
      add_block(out, "assistant", cJSON_Duplicate(b, 1));
    } else {
      add_block(out, "assistant", cJSON_Duplicate(b, 1));
    }
    n++;
  }
  /* a call without a block of its own (should not happen): still answered */
  const cJSON *c;
  cJSON_ArrayForEach(c, calls) {
    if (!has_tool_use(blocks, cJSON_GetStringValue(cJSON_GetObjectItem(c, "id")))) {
      add_block(out, "assistant", tool_use_block(c));
      n++;
    }
  }
  return n;
}

/* The wire messages of the neutral messages from first up to end (not
 * included); blocks of one role join one message. */
static cJSON *wire_range(void *ud, const cJSON *first, const cJSON *end) {
  (void)ud;
  cJSON *out = cJSON_CreateArray();
  for (const cJSON *it = first; it && it != end; it = it->next) {
    const char *role = cJSON_GetStringValue(cJSON_GetObjectItem(it, "role"));
    const char *content = cJSON_GetStringValue(cJSON_GetObjectItem(it, "content"));
    if (!role) continue;
    if (!strcmp(role, "assistant")) {
      const cJSON *calls = cJSON_GetObjectItem(it, "tool_calls");
      const cJSON *kept = cJSON_GetObjectItem(it, "anthropic_content");
      if (cJSON_IsArray(kept) && add_kept_blocks(out, kept, calls) > 0) continue;
      if (content && *content) add_block(out, "assistant", text_block(content));
      const cJSON *c;
      cJSON_ArrayForEach(c, calls) add_block(out, "assistant", tool_use_block(c));
      if (!(content && *content) && cJSON_GetArraySize(calls) == 0)
        add_block(out, "assistant", text_block("(no answer)"));
    } else if (!strcmp(role, "tool")) {
      cJSON *b = cJSON_CreateObject();
      cJSON_AddStringToObject(b, "type", "tool_result");
      cJSON_AddStringToObject(b, "tool_use_id",
                              cJSON_GetStringValue(cJSON_GetObjectItem(it, "tool_call_id")) ?: "");
      cJSON_AddStringToObject(b, "content", content ? content : "");
      if (cJSON_IsTrue(cJSON_GetObjectItem(it, "is_error"))) cJSON_AddTrueToObject(b, "is_error");
      add_block(out, "user", b);
    } else {
      add_block(out, "user", text_block(content ? content : ""));
    }
  }
  return out;
}

/* ---- printing straight into the body -----------------------------------
 * The same bytes as printing wire_range's items (json_print's compact form:
 * members in wire_range's order), with mark_conversation's breakpoint when
 * asked: no tree for the messages, their blocks or a tool call's input.
 * With the mark, a dry pass first walks the same blocks without printing
 * to find the one mark_conversation would mark. */

struct printer {
  struct sbuf *out;
  bool *comma;      /* a wire message came before (in this body) */
  const char *role; /* the wire message being written, NULL: none */
  bool dry;         /* only count the blocks and find the one to mark */
  int block;        /* the blocks started so far */
  int mark;         /* the block that gets the breakpoint, -1: none */
  int cand;         /* dry: the last block of a cacheable type in the open wire message */
  bool cand_marked; /* dry: that block has its cache_control already */
};

static bool cacheable(const char *bt) { /* mark_conversation's list */
  static const char *ok[] = {"text",     "tool_result",     "tool_use",
                             "image",    "document",        "server_tool_use",
                             "web_search_tool_result"};
  for (size_t k = 0; bt && k < sizeof ok / sizeof ok[0]; k++)
    if (!strcmp(bt, ok[k])) return true;
  return false;
}

/* Starts a block of role: in the open wire message when it has the role
 * (add_block's rule), else in a new one. Returns the block's number. */
static int pr_block(struct printer *pr, const char *role) {
  bool same = pr->role && !strcmp(pr->role, role);
  pr->role = role;
  if (pr->dry) {
    if (!same) pr->cand = -1;
    return pr->block++;
  }
  if (same) {
    sbuf_append(pr->out, ",", 1);
    return pr->block++;
  }
  if (pr->block) sbuf_append(pr->out, "]}", 2);
  if (*pr->comma) sbuf_append(pr->out, ",", 1);
  *pr->comma = true;
  sbuf_puts(pr->out, "{\"role\":");
  json_put_string(pr->out, role);
  sbuf_puts(pr->out, ",\"content\":[");
  return pr->block++;
}

/* A block of type bt started as number k, in the dry pass: the
 * breakpoint's candidate when its type takes one. */
static void pr_note(struct printer *pr, int k, const char *bt, bool has_mark) {
  if (!cacheable(bt)) return;
  pr->cand = k;
  pr->cand_marked = has_mark;
}

/* The end of block k's object: its breakpoint first when it is the one. */
static void pr_close(struct printer *pr, int k) {
  if (k == pr->mark) sbuf_puts(pr->out, ",\"cache_control\":{\"type\":\"ephemeral\"}");
  sbuf_append(pr->out, "}", 1);
}

static void pr_text(struct printer *pr, const char *role, const char *t) {
  int k = pr_block(pr, role);
  if (pr->dry) return pr_note(pr, k, "text", false);
  sbuf_puts(pr->out, "{\"type\":\"text\",\"text\":");
  json_put_string(pr->out, t);
  pr_close(pr, k);
}

/* A kept block as it is (its copy prints the same), with the breakpoint
 * as the member added last when it is the one. */
static void pr_kept(struct printer *pr, const cJSON *b) {
  int k = pr_block(pr, "assistant");
  if (pr->dry)
    return pr_note(pr, k, cJSON_GetStringValue(cJSON_GetObjectItem(b, "type")),
                   cJSON_GetObjectItem(b, "cache_control") != NULL);
  char *t = json_print(b, 0);
  size_t n = strlen(t);
  if (k == pr->mark && n > 2) { /* "{...}": an object with members (it has a type) */
    sbuf_append(pr->out, t, n - 1);
    pr_close(pr, k);
  } else {
    sbuf_append(pr->out, t, n);
  }
  free(t);
}

/* tool_use_block(c), printed. */
static void pr_tool_use(struct printer *pr, const cJSON *c) {
  int k = pr_block(pr, "assistant");
  if (pr->dry) return pr_note(pr, k, "tool_use", false);
  char w[65];
  llm_wire_name(cJSON_GetStringValue(cJSON_GetObjectItem(c, "name")) ?: "", w);
  sbuf_puts(pr->out, "{\"type\":\"tool_use\",\"id\":");
  json_put_string(pr->out, cJSON_GetStringValue(cJSON_GetObjectItem(c, "id")) ?: "");
  sbuf_puts(pr->out, ",\"name\":");
  json_put_string(pr->out, w);
  sbuf_puts(pr->out, ",\"input\":");
  cJSON *input = json_parse_str(cJSON_GetStringValue(cJSON_GetObjectItem(c, "arguments")),
                                JSON_NO_DUPLICATES, NULL);
  if (cJSON_IsObject(input)) {
    char *t = json_print(input, 0);
    sbuf_puts(pr->out, t);
    free(t);
  } else {
    sbuf_append(pr->out, "{}", 2);
  }
  cJSON_Delete(input);
  pr_close(pr, k);
}

/* add_kept_blocks, printed. */
static int pr_kept_blocks(struct printer *pr, const cJSON *blocks, const cJSON *calls) {
  int n = 0;
  const cJSON *b;
  cJSON_ArrayForEach(b, blocks) {
    const char *bt = cJSON_GetStringValue(cJSON_GetObjectItem(b, "type"));
    if (!bt) continue;
    if (!strcmp(bt, "tool_use")) {
      const cJSON *c = call_by_id(calls, cJSON_GetStringValue(cJSON_GetObjectItem(b, "id")));
      if (!c) continue;
      pr_tool_use(pr, c);
    } else {
      if (!strcmp(bt, "text")) {
        const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(b, "text"));
        if (!t || !*t) continue;
      }
      pr_kept(pr, b);
    }
    n++;
  }
  const cJSON *c;
  cJSON_ArrayForEach(c, calls) {
    if (!has_tool_use(blocks, cJSON_GetStringValue(cJSON_GetObjectItem(c, "id")))) {
      pr_tool_use(pr, c);
      n++;
    }
  }
  return n;
}

/* One pass of wire_print's over [first, end). */
static void pr_range(struct printer *pr, const cJSON *first, const cJSON *end) {
  for (const cJSON *it = first; it && it != end; it = it->next) {
    const char *role = cJSON_GetStringValue(cJSON_GetObjectItem(it, "role"));
    const char *content = cJSON_GetStringValue(cJSON_GetObjectItem(it, "content"));
    if (!role) continue;
    if (!strcmp(role, "assistant")) {
      const cJSON *calls = cJSON_GetObjectItem(it, "tool_calls");
      const cJSON *kept = cJSON_GetObjectItem(it, "anthropic_content");
      /* a kept list that adds no block prints nothing (add_kept_blocks
       * adds nothing then either) */
      if (cJSON_IsArray(kept) && pr_kept_blocks(pr, kept, calls) > 0) continue;
      if (content && *content) pr_text(pr, "assistant", content);
      const cJSON *c;
      cJSON_ArrayForEach(c, calls) pr_tool_use(pr, c);
      if (!(content && *content) && cJSON_GetArraySize(calls) == 0)
        pr_text(pr, "assistant", "(no answer)");
    } else if (!strcmp(role, "tool")) {
      int k = pr_block(pr, "user");
      if (pr->dry) {
        pr_note(pr, k, "tool_result", false);
        continue;
      }
      sbuf_puts(pr->out, "{\"type\":\"tool_result\",\"tool_use_id\":");
      json_put_string(pr->out,
                      cJSON_GetStringValue(cJSON_GetObjectItem(it, "tool_call_id")) ?: "");
      sbuf_puts(pr->out, ",\"content\":");
      json_put_string(pr->out, content ? content : "");
      if (cJSON_IsTrue(cJSON_GetObjectItem(it, "is_error")))
        sbuf_puts(pr->out, ",\"is_error\":true");
      pr_close(pr, k);
    } else {
      pr_text(pr, "user", content ? content : "");
    }
  }
  if (!pr->dry && pr->block) sbuf_append(pr->out, "]}", 2);
}

/* wire_range, printed (and marked as mark_conversation marks the last
 * wire message, when mark): each wire message after a ',' when *comma. */
static void wire_print(void *ud, const cJSON *first, const cJSON *end, bool mark,
                       struct sbuf *out, bool *comma) {
  (void)ud;
  struct printer pr = {.out = out, .comma = comma, .mark = -1, .cand = -1};
  if (mark) {
    struct printer dry = {.out = out, .comma = comma, .dry = true, .mark = -1, .cand = -1};
    pr_range(&dry, first, end);
    if (dry.cand >= 0 && !dry.cand_marked) pr.mark = dry.cand;
  }
  pr_range(&pr, first, end);
}

/* The wire message a neutral message's blocks go to: 0 none (no role),
 * 1 user (user, tool and any other role), 2 assistant; wire_range makes
 * one message of each run of one class, and every message with a role
 * adds at least one block. */
static int wire_class(const cJSON *m) {
  const char *role = cJSON_GetStringValue(cJSON_GetObjectItem(m, "role"));
  return !role ? 0 : !strcmp(role, "assistant") ? 2 : 1;
}

static void add_cache_control(cJSON *block) {
  cJSON *cc = cJSON_AddObjectToObject(block, "cache_control");
  cJSON_AddStringToObject(cc, "type", "ephemeral");
}

/* The conversation's cache breakpoint: the last block of the last message
 * that may carry one. */
static void mark_conversation(cJSON *msgs) {
  cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
  cJSON *content = cJSON_GetObjectItem(last, "content");
  for (int i = cJSON_GetArraySize(content) - 1; i >= 0; i--) {
    cJSON *bl = cJSON_GetArrayItem(content, i);
    const char *bt = cJSON_GetStringValue(cJSON_GetObjectItem(bl, "type"));
    /* the types the API documents as cacheable; never thinking, never a type
     * this code does not know */
    static const char *ok[] = {"text",
                               "tool_result",
                               "tool_use",
                               "image",
                               "document",
                               "server_tool_use",
                               "web_search_tool_result"};
    bool known = false;
    for (size_t k = 0; bt && k < sizeof ok / sizeof ok[0]; k++) known = known || !strcmp(bt, ok[k]);
    if (!known) continue;
    if (cJSON_GetObjectItem(bl, "cache_control")) return;
    add_cache_control(bl);
    return;
  }
}

static cJSON *system_value(const char *system, bool cache) {
  if (!cache) return cJSON_CreateString(system);
  /* breakpoint 1: tools + system (the cache order is tools, system, messages) */
  cJSON *arr = cJSON_CreateArray();
  cJSON *tb = text_block(system);
  add_cache_control(tb);
  cJSON_AddItemToArray(arr, tb);
  return arr;
}

/* The wire tools; mark_last puts breakpoint 1 on the last one (when there
 * is no system prompt to carry it). */
static cJSON *wire_tools(const cJSON *in, bool mark_last) {
  cJSON *tools = cJSON_CreateArray();
  const cJSON *t;
  cJSON_ArrayForEach(t, in) {
    char w[65];
    llm_wire_name(cJSON_GetStringValue(cJSON_GetObjectItem(t, "name")) ?: "", w);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", w);
    cJSON_AddStringToObject(o, "description",
                            cJSON_GetStringValue(cJSON_GetObjectItem(t, "description")) ?: "");
    const cJSON *params = cJSON_GetObjectItem(t, "parameters");
    /* keys in a stable order: the same bytes every call (prompt caching) */
    cJSON_AddItemToObject(o, "input_schema",
                          params ? llm_sorted_view(params) : cJSON_CreateObject());
    cJSON_AddItemToArray(tools, o);
  }
  if (mark_last && cJSON_GetArraySize(tools) > 0)
    add_cache_control(cJSON_GetArrayItem(tools, cJSON_GetArraySize(tools) - 1));
  return tools;
}

static void mark_hook(void *ud, cJSON *msgs) {
  (void)ud;
  mark_conversation(msgs);
}

/* The whole body as one tree: the reference the cached path below must
 * print the same bytes as (tests/unit/model/test_llm_body.c). */
static char *full_body(const struct llm_provider *p, const struct llm_request *req, bool stream) {
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "model", p->model);
  cJSON_AddNumberToObject(b, "max_tokens", req->max_tokens > 0 ? req->max_tokens : p->max_tokens);
  bool sys = req->system && *req->system;
  if (sys) cJSON_AddItemToObject(b, "system", system_value(req->system, p->prompt_cache));
  cJSON *msgs = wire_range(NULL, req->messages ? req->messages->child : NULL, NULL);
  if (p->prompt_cache) mark_conversation(msgs); /* breakpoint 2: the conversation so far */
  cJSON_AddItemToObject(b, "messages", msgs);
  if (cJSON_GetArraySize(req->tools) > 0) {
    /* without a system prompt, the tools get breakpoint 1 themselves */
    cJSON_AddItemToObject(b, "tools", wire_tools(req->tools, p->prompt_cache && !sys));
    cJSON *tc = cJSON_AddObjectToObject(b, "tool_choice");
    cJSON_AddStringToObject(tc, "type", req->no_tools ? "none" : "auto");
  }
  if (p->thinking_budget > 0) { /* extended thinking (llm.h: provider thinking_budget) */
    cJSON *th = cJSON_AddObjectToObject(b, "thinking");
    cJSON_AddStringToObject(th, "type", "enabled");
    cJSON_AddNumberToObject(th, "budget_tokens", p->thinking_budget);
  }
  if (stream) cJSON_AddTrueToObject(b, "stream");
  char *s = json_print(b, 0);
  cJSON_Delete(b);
  return s;
}

struct piece_ud {
  const struct llm_provider *p;
  const struct llm_request *req;
  bool flag;
};
static char *print_free(cJSON *v) {
  char *t = json_print(v, 0);
  cJSON_Delete(v);
  return t;
}
static char *make_system(void *ud) {
  const struct piece_ud *u = ud;
  return print_free(system_value(u->req->system, u->flag));
}
static char *make_tools(void *ud) {
  const struct piece_ud *u = ud;
  return print_free(wire_tools(u->req->tools, u->flag));
}

/* The same bytes as full_body, from the request's body cache: the member
 * order and separators of json_print's compact form, each piece printed
 * on its own (llm_body.c). */
static char *anthropic_body(const struct llm_provider *p, const struct llm_request *req,
                            bool stream) {
  struct llm_body_cache *c = req->body_cache;
  if (!c) return full_body(p, req, stream);
  enum { SYSTEM, TOOLS };
  struct sbuf b = {0};
  cJSON *model = cJSON_CreateStringReference(p->model);
  char *mt = json_print(model, 0);
  cJSON_Delete(model);
  sbuf_printf(&b, "{\"model\":%s,\"max_tokens\":%d", mt,
              req->max_tokens > 0 ? req->max_tokens : p->max_tokens);
  free(mt);
  bool sys = req->system && *req->system;
  if (sys) {
    struct piece_ud u = {p, req, p->prompt_cache};
    sbuf_puts(&b, ",\"system\":");
    llm__body_piece(c, LLM__WIRE_ANTHROPIC, SYSTEM, p->prompt_cache, req->system,
                                  NULL, make_system, &u, &b);
  }
  sbuf_puts(&b, ",\"messages\":[");
  const struct llm__msg_wire mw = {.range = wire_range,
                                   .cls = wire_class,
                                   .merge = true,
                                   .mark = p->prompt_cache ? mark_hook : NULL,
                                   .print = wire_print};
  llm__body_messages(c, LLM__WIRE_ANTHROPIC, req->messages, &mw, &b);
  sbuf_puts(&b, "]");
  if (cJSON_GetArraySize(req->tools) > 0) {
    struct piece_ud u = {p, req, p->prompt_cache && !sys};
    sbuf_puts(&b, ",\"tools\":");
    llm__body_piece(c, LLM__WIRE_ANTHROPIC, TOOLS, u.flag, NULL, req->tools,
                                  make_tools, &u, &b);
    sbuf_puts(&b, req->no_tools ? ",\"tool_choice\":{\"type\":\"none\"}"
                                : ",\"tool_choice\":{\"type\":\"auto\"}");
  }
  if (p->thinking_budget > 0)
    sbuf_printf(&b, ",\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":%d}",
                p->thinking_budget);
  if (stream) sbuf_puts(&b, ",\"stream\":true");
  sbuf_puts(&b, "}");
  return sbuf_take(&b);
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
                           struct err *e) {
  if (llm__fast_anthropic(s, data, finish_of)) return 0; /* a plain event: no tree */
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
