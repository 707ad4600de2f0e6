/* test_llm_body.c - the request bodies (llm_emit.h, llm_body.c): over long
 * conversations with tool calls, unicode, invalid UTF-8, U+0000, kept
 * Anthropic blocks, role-less and odd-role messages, and histories that
 * change behind the cache's back (compaction, in-place edits of earlier
 * messages, removed turns, another system prompt or tool list), every body
 * built from the cache (the print emitter) must be byte for byte the body
 * a full rebuild prints (the tree emitter and json_print), for both wire
 * formats and every provider variant, and be json_print's own compact form
 * of itself. It also checks that the cache is really used (a test of a
 * cache that never hits would pass on the full path alone) and that a
 * changed history is rebuilt; hostile messages (invalid UTF-8 and control
 * characters everywhere, huge tool arguments, empty and missing content,
 * wrong types, failed tool results, every mix of kept blocks) grown one
 * message at a time; and a few bodies written out in full, the wire rules
 * as the providers document them.
 *
 * LUAGENT_BODY_DUMP=FILE appends every body built to FILE, so two builds
 * can be shown to send the same bytes for every input here (this source
 * uses only what both had: compile it against the older build too). */
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "llm.h"
#include "llm_emit.h"
#include "test.h"
#include "util.h"

static struct llm_client *providers(void) {
  const char *js =
      "[{\"name\":\"o1\",\"kind\":\"openai\",\"base_url\":\"http://x/v1\",\"model\":\"gpt-\\u00e9\"},"
      "{\"name\":\"o2\",\"kind\":\"openai\",\"base_url\":\"http://x/v1\",\"model\":\"m\","
      "\"prompt_cache\":true,\"max_tokens\":77},"
      "{\"name\":\"o3\",\"kind\":\"openai\",\"base_url\":\"http://x/v1\",\"model\":\"m\","
      "\"max_tokens\":5,\"max_tokens_field\":\"max_tokens\"},"
      "{\"name\":\"a1\",\"kind\":\"anthropic\",\"base_url\":\"http://x/v1\",\"model\":\"c\"},"
      "{\"name\":\"a2\",\"kind\":\"anthropic\",\"base_url\":\"http://x/v1\",\"model\":\"c\","
      "\"prompt_cache\":false,\"thinking_budget\":2048,\"max_tokens\":9000}]";
  cJSON *j = cJSON_Parse(js);
  struct llm_client *c = NULL;
  struct err e = {0};
  if (llm_client_from_json(j, "test", &c, &e)) fprintf(stderr, "providers: %s\n", e.msg);
  cJSON_Delete(j);
  return c;
}

/* A deterministic generator, so a failure replays. */
static unsigned long long rng = 88172645463325252ull;
static unsigned rnd(unsigned n) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (unsigned)(rng % n);
}

static const char *const texts[] = {
    "",
    "plain text",
    "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 (unicode)",
    "bad \xff\xfe bytes \xc3 cut",
    "nul \xc0\x80 inside",
    "quotes \" and \\ backslash\n\ttab\r\x01\x1f",
    "</script> \\u0000 literally",
    "[luagent] note",
};
static const char *text(void) { return texts[rnd(sizeof texts / sizeof *texts)]; }

static cJSON *msg(const char *role, const char *content) {
  cJSON *m = cJSON_CreateObject();
  if (role) cJSON_AddStringToObject(m, "role", role);
  if (content) cJSON_AddStringToObject(m, "content", content);
  return m;
}

static int call_seq = 0;

/* An assistant turn with k tool calls (some with broken or duplicate-key
 * arguments), sometimes with kept Anthropic blocks. */
static cJSON *assistant(int k, char ids[][16]) {
  cJSON *m = msg("assistant", text());
  if (k) {
    cJSON *tc = cJSON_AddArrayToObject(m, "tool_calls");
    for (int i = 0; i < k; i++) {
      snprintf(ids[i], 16, "c%d", call_seq++);
      cJSON *c = cJSON_CreateObject();
      cJSON_AddStringToObject(c, "id", ids[i]);
      static const char *const names[] = {"echo", "notes.add", "skill.t\xc3\xa9st", "a b/c"};
      cJSON_AddStringToObject(c, "name", names[rnd(4)]);
      static const char *const args[] = {"{\"step\":1,\"note\":\"caf\\u00e9\"}", "{}",
                                         "{not json", "{\"a\":1,\"a\":2}",
                                         "{\"s\":\"\\ud83d\\ude00\",\"n\":1e5}", "[1,2]"};
      cJSON_AddStringToObject(c, "arguments", args[rnd(6)]);
      cJSON_AddItemToArray(tc, c);
    }
  }
  if (rnd(3) == 0) { /* kept blocks, as an Anthropic answer leaves them */
    cJSON *b = cJSON_AddArrayToObject(m, "anthropic_content");
    cJSON *th = cJSON_CreateObject();
    cJSON_AddStringToObject(th, "type", "thinking");
    cJSON_AddStringToObject(th, "thinking", text());
    cJSON_AddStringToObject(th, "signature", "sig==");
    cJSON_AddItemToArray(b, th);
    if (rnd(2)) {
      cJSON *t = cJSON_CreateObject();
      cJSON_AddStringToObject(t, "type", "text");
      cJSON_AddStringToObject(t, "text", text());
      cJSON *cit = cJSON_AddArrayToObject(t, "citations");
      cJSON *ci = cJSON_CreateObject();
      cJSON_AddNumberToObject(ci, "start", 0.1 + rnd(5));
      cJSON_AddNumberToObject(ci, "end", 12);
      cJSON_AddItemToArray(cit, ci);
      if (rnd(3) == 0) { /* a block that has its breakpoint already: no second one */
        cJSON *cc = cJSON_AddObjectToObject(t, "cache_control");
        cJSON_AddStringToObject(cc, "type", "ephemeral");
      }
      cJSON_AddItemToArray(b, t);
    }
    for (int i = 0; i < k; i++) {
      if (rnd(4) == 0) continue; /* a call without a block of its own */
      cJSON *u = cJSON_CreateObject();
      cJSON_AddStringToObject(u, "type", "tool_use");
      cJSON_AddStringToObject(u, "id", ids[i]);
      cJSON_AddStringToObject(u, "name", "echo");
      cJSON_AddItemToObject(u, "input", cJSON_CreateObject());
      cJSON_AddItemToArray(b, u);
    }
    if (rnd(5) == 0) { /* a type the breakpoint skips, last */
      cJSON *x = cJSON_CreateObject();
      cJSON_AddStringToObject(x, "type", rnd(2) ? "redacted_thinking" : "future_block");
      cJSON_AddStringToObject(x, "data", "d");
      cJSON_AddItemToArray(b, x);
    }
    if (rnd(4) == 0) {
      cJSON *x = cJSON_CreateObject();
      cJSON_AddStringToObject(x, "type", "web_search_tool_result");
      cJSON_AddStringToObject(x, "tool_use_id", "srv1");
      cJSON_AddItemToArray(b, x);
    }
  }
  return m;
}

static cJSON *tool_result(const char *id) {
  cJSON *m = msg("tool", text());
  cJSON_AddStringToObject(m, "tool_call_id", id);
  cJSON_AddStringToObject(m, "name", "echo");
  if (rnd(3) == 0) cJSON_AddTrueToObject(m, "is_error");
  return m;
}

static cJSON *make_tools(int n) {
  cJSON *tools = cJSON_CreateArray();
  for (int i = 0; i < n; i++) {
    cJSON *t = cJSON_CreateObject();
    char name[32];
    snprintf(name, sizeof name, i % 2 ? "skill.tool%d" : "echo%d", i);
    cJSON_AddStringToObject(t, "name", name);
    cJSON_AddStringToObject(t, "description", i == 1 ? "d\xc3\xa9sc \"q\"" : "desc");
    cJSON *p = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"zeta\":{\"type\":\"string\"},"
                           "\"alpha\":{\"type\":\"integer\",\"enum\":[3,1,2.5]}},"
                           "\"required\":[\"zeta\"]}");
    cJSON_AddItemToObject(t, "parameters", p);
    cJSON_AddItemToArray(tools, t);
  }
  return tools;
}

/* cJSON's insert and replace refuse some cases (an index past the end, a
 * missing key, an array its detach left odd): the item is freed then, so
 * the test leaks nothing whatever happened. */
static void insert_at(cJSON *arr, int at, cJSON *item) {
  if (!cJSON_InsertItemInArray(arr, at, item)) cJSON_Delete(item);
}
static void replace_in(cJSON *obj, const char *key, cJSON *item) {
  if (!cJSON_ReplaceItemInObject(obj, key, item)) cJSON_Delete(item);
}

static int mismatches = 0;
/* case 13 of mutate: a big number's digits, edited after the cache saw them */
static bool compare_later = false;
static char *pending_digit = NULL;

static int req_max_tokens = 0; /* the request's max_tokens (0: the provider's) */
static unsigned long req_stamp = 0; /* the cached request's stamp (0: none) */
static FILE *dump_file = NULL;
static void dump(const char *body) {
  if (dump_file) fprintf(dump_file, "%s\n", body);
}

/* Every provider, streamed and not: the cached body equals the full one. */
static void compare_all(struct llm_client *cl, struct llm_body_cache **caches,
                        const char *system, const cJSON *messages, const cJSON *tools,
                        bool no_tools, const char *where) {
  for (size_t i = 0; i < llm_client_count(cl); i++) {
    const struct llm_provider *p = llm_client_provider(cl, i);
    const struct llm__wire *w = p->kind == LLM_ANTHROPIC ? &llm__anthropic_wire : &llm__openai_wire;
    for (int stream = 0; stream < 2; stream++) {
      struct llm_request full = {.system = system,
                                 .messages = messages,
                                 .tools = tools,
                                 .no_tools = no_tools,
                                 .max_tokens = req_max_tokens};
      struct llm_request cached = full;
      cached.body_cache = caches[i];
      cached.stamp = req_stamp;
      char *a = w->body(p, &full, stream);
      char *b = w->body(p, &cached, stream);
      test_checks_++;
      if (strcmp(a, b)) {
        size_t k = 0;
        while (a[k] && a[k] == b[k]) k++;
        if (mismatches++ < 5)
          fprintf(stderr,
                  "%s: provider %s stream %d: bodies differ at byte %zu\n  full:   ...%.120s\n"
                  "  cached: ...%.120s\n",
                  where, p->name, stream, k, a + (k > 40 ? k - 40 : 0), b + (k > 40 ? k - 40 : 0));
        test_failures_++;
      }
      /* and the body is JSON (a splice that dropped a comma would not be),
       * in json_print's compact form: what parsing and printing it gives */
      cJSON *j = json_parse_str(b, JSON_NO_DUPLICATES, NULL);
      if (j) {
        char *again = json_print(j, 0);
        test_checks_++;
        if (strcmp(again, b)) {
          if (mismatches++ < 5)
            fprintf(stderr, "%s: provider %s stream %d: the body is not json_print's form\n",
                    where, p->name, stream);
          test_failures_++;
        }
        free(again);
      } else { /* a key the input holds twice is sent twice, and would not come back */
        j = json_parse_str(b, 0, NULL);
        CHECK(j != NULL);
      }
      cJSON_Delete(j);
      dump(a);
      dump(b);
      free(a);
      free(b);
    }
  }
}

/* One random change behind the cache's back. */
static void mutate(cJSON *messages, char *what, size_t n) {
  int len = cJSON_GetArraySize(messages);
  if (len < 2) {
    snprintf(what, n, "nothing");
    return;
  }
  /* half the time near the end, where the cached and the open part meet */
  int at = rnd(2) ? (int)rnd((unsigned)len) : len - 1 - (int)rnd(len < 4 ? (unsigned)len : 4u);
  cJSON *m = cJSON_GetArrayItem(messages, at);
  int kind = (int)rnd(15);
  if (kind >= 9) { /* the in-place edits: the nearest message they apply to */
    for (int k = 0; k < len; k++) {
      cJSON *q = cJSON_GetArrayItem(messages, (at + k) % len);
      bool fits = kind == 10 || (kind == 14 && cJSON_GetObjectItem(q, "is_error")) ||
                  cJSON_GetObjectItem(q, kind == 9 ? "tool_calls" : "anthropic_content");
      if (kind == 12 || kind == 13)
        fits = cJSON_GetObjectItem(q, "anthropic_content") != NULL;
      if (fits) {
        m = q, at = (at + k) % len;
        break;
      }
    }
  }
  switch (kind) {
    case 0: { /* compaction: the head replaced by one summary */
      int cut = 1 + (int)rnd((unsigned)len - 1);
      for (int i = 0; i < cut; i++) cJSON_DeleteItemFromArray(messages, 0);
      insert_at(messages, 0, msg("user", "[luagent] Summary of earlier messages"));
      snprintf(what, n, "compaction of %d", cut);
      break;
    }
    case 1: /* a content edited in place, same length */
      if (cJSON_GetStringValue(cJSON_GetObjectItem(m, "content")) &&
          cJSON_GetObjectItem(m, "content")->valuestring[0]) {
        cJSON_GetObjectItem(m, "content")->valuestring[0] ^= 1;
        snprintf(what, n, "byte flipped in message %d", at);
      } else {
        replace_in(m, "content", cJSON_CreateString("edited"));
        snprintf(what, n, "content replaced in message %d", at);
      }
      break;
    case 2: /* the last message removed (a refused turn, a retry) */
      cJSON_DeleteItemFromArray(messages, len - 1);
      snprintf(what, n, "last removed");
      break;
    case 3: /* a message removed in the middle */
      cJSON_DeleteItemFromArray(messages, at);
      snprintf(what, n, "message %d removed", at);
      break;
    case 4: /* a role changed: Anthropic's merging moves */
      replace_in(m, "role", cJSON_CreateString(rnd(2) ? "user" : "assistant"));
      snprintf(what, n, "role of %d changed", at);
      break;
    case 5: /* the role removed: the message drops out of the wire */
      cJSON_DeleteItemFromObject(m, "role");
      snprintf(what, n, "role of %d removed", at);
      break;
    case 6: { /* a tool call's arguments or a kept block's number changed */
      cJSON *tc = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "tool_calls"), 0);
      cJSON *kb = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "anthropic_content"), 1);
      cJSON *cit = cJSON_GetArrayItem(cJSON_GetObjectItem(kb, "citations"), 0);
      if (cit) {
        cJSON_GetObjectItem(cit, "start")->valuedouble += 1e-12; /* prints differently */
        snprintf(what, n, "citation number of %d nudged", at);
      } else if (tc) {
        replace_in(tc, "arguments", cJSON_CreateString("{\"changed\":true}"));
        snprintf(what, n, "arguments of %d changed", at);
      } else {
        cJSON_AddTrueToObject(m, "is_error");
        snprintf(what, n, "is_error added to %d", at);
      }
      break;
    }
    case 7: /* a message inserted in the middle */
      insert_at(messages, at, msg("user", "inserted"));
      snprintf(what, n, "inserted at %d", at);
      break;
    case 9: { /* a nested string edited in place, same length */
      cJSON *tc = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "tool_calls"), 0);
      cJSON *kb = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "anthropic_content"), 0);
      cJSON *v = kb ? cJSON_GetObjectItem(kb, "signature") : cJSON_GetObjectItem(tc, "arguments");
      if (cJSON_GetStringValue(v) && v->valuestring[0]) {
        v->valuestring[0] ^= 1;
        snprintf(what, n, "nested string of %d edited in place", at);
      } else {
        snprintf(what, n, "nothing nested in %d", at);
      }
      break;
    }
    case 10: { /* replaced by the same members in another order */
      cJSON *r = cJSON_CreateObject();
      cJSON *kids[16];
      int k = 0;
      for (cJSON *c = m ? m->child : NULL; c && k < 16; c = c->next) kids[k++] = c;
      while (k-- > 0) cJSON_AddItemToObject(r, kids[k]->string, cJSON_Duplicate(kids[k], 1));
      if (!cJSON_ReplaceItemInArray(messages, at, r)) cJSON_Delete(r);
      snprintf(what, n, "message %d rebuilt in another key order", at);
      break;
    }
    case 11: { /* a kept block's members reordered in place (its copy prints in order) */
      cJSON *kb = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "anthropic_content"), 0);
      cJSON *first = kb ? kb->child : NULL;
      if (first && first->next) {
        cJSON_DetachItemViaPointer(kb, first);
        cJSON_AddItemToObject(kb, first->string, first);
        /* AddItemToObject replaced the key with a copy: the node is the same */
        snprintf(what, n, "block members of %d reordered", at);
      } else {
        snprintf(what, n, "no block in %d", at);
      }
      break;
    }
    case 12: { /* numbers: the same double written otherwise, or one digit past 2^53 */
      cJSON *kb = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "anthropic_content"), 1);
      cJSON *cit = cJSON_GetArrayItem(cJSON_GetObjectItem(kb, "citations"), 0);
      static const char *const nums[] = {"12", "12.0", "1.2e1", "9007199254740993",
                                         "9007199254740992", "-0", "0"};
      if (cit) {
        replace_in(cit, "end", json_parse_str(nums[rnd(7)], 0, NULL));
        snprintf(what, n, "citation end of %d rewritten", at);
      } else if (cJSON_GetObjectItem(m, "tool_calls")) {
        cJSON_AddItemToObject(m, "n", json_parse_str(nums[rnd(7)], 0, NULL));
        snprintf(what, n, "a number added to %d", at);
      } else {
        snprintf(what, n, "no number in %d", at);
      }
      break;
    }
    case 13: { /* a big number's digits edited in place: the double stays */
      cJSON *big = json_parse_str("9007199254740993", 0, NULL);
      cJSON *kb = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "anthropic_content"), 0);
      if (kb && big && big->valuestring) {
        cJSON_AddItemToObject(kb, "big", big);
        big = NULL;
        compare_later = true; /* the cache sees it first */
        cJSON *v = cJSON_GetObjectItem(kb, "big");
        pending_digit = v->valuestring;
        snprintf(what, n, "big number in %d", at);
      } else {
        snprintf(what, n, "no big number in %d", at);
      }
      cJSON_Delete(big);
      break;
    }
    case 14: { /* a type flipped in place, or a block's key re-cased in place */
      cJSON *e = cJSON_GetObjectItem(m, "is_error");
      cJSON *kb = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "anthropic_content"), 0);
      if (e) {
        e->type = cJSON_IsTrue(e) ? cJSON_False : cJSON_True;
        snprintf(what, n, "is_error of %d flipped in place", at);
      } else if (kb && kb->child && kb->child->string && kb->child->string[0]) {
        kb->child->string[0] ^= 0x20;
        snprintf(what, n, "a block key of %d re-cased in place", at);
      } else {
        snprintf(what, n, "nothing to flip in %d", at);
      }
      break;
    }
    default: /* two messages swapped */
      if (at + 1 < len) {
        cJSON *x = cJSON_DetachItemFromArray(messages, at);
        insert_at(messages, at + 1, x);
      }
      snprintf(what, n, "swap at %d", at);
  }
}

static void test_conversations(void) {
  struct llm_client *cl = providers();
  CHECK(cl != NULL);
  if (!cl) return;
  size_t np = llm_client_count(cl);
  CHECK_INT(np, 5);
  struct llm_body_cache *caches[8] = {0};
  for (size_t i = 0; i < np; i++) caches[i] = llm_body_cache_new();
  cJSON *tools = make_tools(4);
  const char *systems[] = {"You are a test.\n\xe2\x9c\x93", "", NULL, "other \xff system"};
  const char *system = systems[0];
  for (int conv = 0; conv < 12; conv++) {
    cJSON *messages = cJSON_CreateArray();
    cJSON_AddItemToArray(messages, msg("user", text()));
    char where[160];
    for (int turn = 0; turn < 40; turn++) {
      snprintf(where, sizeof where, "conversation %d turn %d", conv, turn);
      compare_all(cl, caches, system, messages, tools, turn % 7 == 6, where);
      /* the model answers; its calls get results; sometimes a note, a
       * steer line, a role-less or odd-role message */
      char ids[4][16];
      int k = (int)rnd(4);
      cJSON_AddItemToArray(messages, assistant(k, ids));
      for (int i = 0; i < k; i++) cJSON_AddItemToArray(messages, tool_result(ids[i]));
      switch (rnd(8)) {
        case 0: cJSON_AddItemToArray(messages, msg("user", "[luagent] a note after results")); break;
        case 1: cJSON_AddItemToArray(messages, msg(NULL, "no role")); break;
        case 2: cJSON_AddItemToArray(messages, msg("system", text())); break;
        case 3: cJSON_AddItemToArray(messages, msg("user", NULL)); break;
        default: break;
      }
      /* now and then the history changes behind the cache's back */
      if (rnd(4) == 0) {
        char what[80];
        mutate(messages, what, sizeof what);
        snprintf(where, sizeof where, "conversation %d turn %d after %s", conv, turn, what);
        compare_all(cl, caches, system, messages, tools, false, where);
        if (compare_later && pending_digit) { /* 9007199254740993 -> ...992, in place */
          size_t len = strlen(pending_digit);
          pending_digit[len - 1] = pending_digit[len - 1] == '3' ? '2' : '3';
          snprintf(where, sizeof where, "conversation %d turn %d after big digits edited", conv, turn);
          compare_all(cl, caches, system, messages, tools, false, where);
        }
        compare_later = false;
        pending_digit = NULL;
      }
      if (rnd(15) == 0) system = systems[rnd(4)];
      if (rnd(15) == 0) { /* skills.load offers another tool */
        cJSON *more = make_tools(1 + (int)rnd(6));
        cJSON_Delete(tools);
        tools = more;
      }
      if (rnd(20) == 0) { /* a tool schema edited in place */
        cJSON *p = cJSON_GetObjectItem(cJSON_GetArrayItem(tools, 0), "parameters");
        replace_in(p, "type", cJSON_CreateString("array"));
      }
      if (rnd(12) == 0) { /* a nested schema string edited in place, same length */
        cJSON *p = cJSON_GetObjectItem(cJSON_GetArrayItem(tools, (int)rnd(3)), "parameters");
        cJSON *z = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(p, "properties"),
                                                           "zeta"), "type");
        if (cJSON_GetStringValue(z) && z->valuestring[0]) z->valuestring[0] ^= 1;
      }
      if (rnd(12) == 0) { /* an enum number nudged in place */
        cJSON *p = cJSON_GetObjectItem(cJSON_GetArrayItem(tools, 0), "parameters");
        cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(
                                          p, "properties"), "alpha"), "enum"), 2);
        if (cJSON_IsNumber(e)) e->valuedouble += 1e-9;
      }
    }
    /* the same conversation asked again, unchanged (a retry) */
    compare_all(cl, caches, system, messages, tools, false, "unchanged repeat");
    cJSON_Delete(messages);
  }
  /* an empty conversation, no tools */
  cJSON *empty = cJSON_CreateArray();
  compare_all(cl, caches, "s", empty, NULL, false, "empty");
  compare_all(cl, caches, NULL, NULL, NULL, false, "no messages at all");
  cJSON_Delete(empty);
  /* the cache was used, and rebuilt when the history changed */
  for (size_t i = 0; i < np; i++) {
    long hits, rebuilds;
    llm__body_cache_stats(caches[i], &hits, &rebuilds);
    CHECK(hits > 100);
    CHECK(rebuilds > 5);
    llm_body_cache_free(caches[i]);
  }
  cJSON_Delete(tools);
  llm_client_free(cl);
}

/* A 10-turn task's bodies from the cache stay the same size as a rebuild
 * and the cache holds no more messages than the conversation: each turn
 * reuses what came before (hits) and adds only the new turn. */
static void test_append_only(void) {
  struct llm_client *cl = providers();
  if (!cl) return;
  const struct llm_provider *p = llm_client_provider(cl, 0);
  struct llm_body_cache *c = llm_body_cache_new();
  cJSON *messages = cJSON_CreateArray();
  cJSON_AddItemToArray(messages, msg("user", "Do the ten steps."));
  for (int t = 0; t < 10; t++) {
    struct llm_request req = {.system = "sys", .messages = messages, .body_cache = c};
    char *b = llm__openai_wire.body(p, &req, true);
    free(b);
    char ids[4][16];
    cJSON_AddItemToArray(messages, assistant(1, ids));
    cJSON_AddItemToArray(messages, tool_result(ids[0]));
  }
  long hits, rebuilds;
  llm__body_cache_stats(c, &hits, &rebuilds);
  CHECK_INT(hits, 9);
  CHECK_INT(rebuilds, 0);
  /* compaction: the next body is rebuilt, then appended to again */
  cJSON_DeleteItemFromArray(messages, 0);
  struct llm_request req = {.system = "sys", .messages = messages, .body_cache = c};
  free(llm__openai_wire.body(p, &req, true));
  llm__body_cache_stats(c, &hits, &rebuilds);
  CHECK_INT(rebuilds, 1);
  cJSON_AddItemToArray(messages, msg("user", "more"));
  free(llm__openai_wire.body(p, &req, true));
  llm__body_cache_stats(c, &hits, &rebuilds);
  CHECK_INT(hits, 10);
  CHECK_INT(rebuilds, 1);
  cJSON_Delete(messages);
  llm_body_cache_free(c);
  llm_client_free(cl);
}

/* Anthropic's merging at the seam: the message that started the last wire
 * message is removed or changes role, so what follows would join the
 * cached message before it. */
static void test_seams(void) {
  struct llm_client *cl = providers();
  if (!cl) return;
  struct llm_body_cache *caches[8] = {0};
  for (size_t i = 0; i < llm_client_count(cl); i++) caches[i] = llm_body_cache_new();
  for (int variant = 0; variant < 5; variant++) {
    /* cached: the wire message of "q"; open: the one of "a" (index 1) */
    cJSON *messages = cJSON_CreateArray();
    cJSON_AddItemToArray(messages, msg("user", "q"));
    cJSON_AddItemToArray(messages, msg("assistant", "a"));
    compare_all(cl, caches, "s", messages, NULL, false, "seam: before");
    switch (variant) {
      case 0: /* "a" removed, a tool result in its place: it joins "q" */
        cJSON_DeleteItemFromArray(messages, 1);
        cJSON_AddItemToArray(messages, msg("tool", "r"));
        break;
      case 1: /* "a" becomes a user message */
        replace_in(cJSON_GetArrayItem(messages, 1), "role",
                                  cJSON_CreateString("tool"));
        break;
      case 2: /* "a" loses its role, a user message follows */
        cJSON_DeleteItemFromObject(cJSON_GetArrayItem(messages, 1), "role");
        cJSON_AddItemToArray(messages, msg("user", "u"));
        break;
      case 3: /* "a" removed */
        cJSON_DeleteItemFromArray(messages, 1);
        break;
      default: /* "a" removed: "q", cached, is the last message (and takes the mark) */
        cJSON_DeleteItemFromArray(messages, 1);
    }
    /* then an assistant turn, so a new last wire message starts */
    if (variant < 4) cJSON_AddItemToArray(messages, msg("assistant", "b"));
    compare_all(cl, caches, "s", messages, NULL, false, "seam: after");
    cJSON_AddItemToArray(messages, msg("user", "next"));
    compare_all(cl, caches, "s", messages, NULL, false, "seam: next");
    cJSON_Delete(messages);
  }
  for (size_t i = 0; i < llm_client_count(cl); i++) llm_body_cache_free(caches[i]);
  llm_client_free(cl);
}

static void test_json_identical(void) {
  const char *pairs[][2] = {
      {"{\"a\":1}", "{\"a\":1.0}"},     /* same double: same print */
      {"{\"a\":1,\"b\":2}", "{\"b\":2,\"a\":1}"},
      {"[1,2]", "[1,2,3]"},
      {"{\"a\":\"x\"}", "{\"A\":\"x\"}"},
      {"{\"a\":null}", "{\"a\":false}"},
      {"\"x\\u00e9\"", "\"x\xc3\xa9\""},
  };
  int same[] = {1, 0, 0, 0, 0, 1};
  for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
    cJSON *a = json_parse_str(pairs[i][0], 0, NULL), *b = json_parse_str(pairs[i][1], 0, NULL);
    CHECK_INT(json_identical(a, b), same[i]);
    cJSON_Delete(a);
    cJSON_Delete(b);
  }
  CHECK(json_identical(NULL, NULL));
  cJSON *x = cJSON_CreateNumber(0.1);
  cJSON *y = cJSON_CreateNumber(0.1 + 1e-17);
  CHECK_INT(json_identical(x, y), 0.1 == 0.1 + 1e-17);
  cJSON_Delete(x);
  cJSON_Delete(y);
}

/* A kept block nested deeper than the record walk's stack: the history
 * counts as changed (rebuilt), and the body is still a full rebuild's. */
static void test_deep(void) {
  struct llm_client *cl = providers();
  if (!cl) return;
  struct llm_body_cache *caches[8] = {0};
  for (size_t i = 0; i < llm_client_count(cl); i++) caches[i] = llm_body_cache_new();
  cJSON *messages = cJSON_CreateArray();
  cJSON_AddItemToArray(messages, msg("user", "q"));
  cJSON *a = msg("assistant", "a");
  cJSON *blocks = cJSON_AddArrayToObject(a, "anthropic_content");
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "type", "web_search_tool_result");
  cJSON *at = b;
  for (int i = 0; i < 300; i++) at = cJSON_AddObjectToObject(at, "x");
  cJSON_AddItemToArray(blocks, b);
  cJSON_AddItemToArray(messages, a);
  for (int turn = 0; turn < 4; turn++) {
    cJSON_AddItemToArray(messages, msg("user", "next"));
    compare_all(cl, caches, "s", messages, NULL, false, "deep block");
    cJSON_AddItemToArray(messages, msg("assistant", "more"));
  }
  long hits, rebuilds;
  llm__body_cache_stats(caches[0], &hits, &rebuilds);
  CHECK(rebuilds >= 2); /* the deep message is never taken as unchanged */
  cJSON_Delete(messages);
  for (size_t i = 0; i < llm_client_count(cl); i++) llm_body_cache_free(caches[i]);
  llm_client_free(cl);
}

/* ---- hostile input ------------------------------------------------------ */

/* Strings no provider should see raw: invalid UTF-8 of every kind, control
 * characters, escapes, U+0000 as the host stores it, BOM and separators. */
static const char *const nasty[] = {
    "\xff",
    "\xc3",
    "cut \xe2\x82",
    "\xc0\xaf overlong",
    "\xed\xa0\x80 surrogate",
    "\xf4\x90\x80\x80 past U+10FFFF",
    "\x7f del \x01\x02\x1b[31m escape \x08\x0c\x0b",
    "\xc0\x80",
    "\"\\\"\\u0000\\",
    "\xef\xbb\xbf bom \xe2\x80\xa8 \xe2\x80\xa9",
    "",
    "\x80\x80\x80 stray",
    "ok \xf0\x9f\x98\x80 then \xf0\x9f\x98",
};
#define NNASTY (sizeof nasty / sizeof *nasty)

static cJSON *obj_str(cJSON *o, const char *k, const char *v) {
  cJSON_AddItemToObject(o, k, cJSON_CreateString(v));
  return o;
}

static cJSON *call(const char *id, const char *name, const char *args) {
  cJSON *c = cJSON_CreateObject();
  if (id) obj_str(c, "id", id);
  if (name) obj_str(c, "name", name);
  if (args) obj_str(c, "arguments", args);
  return c;
}

static cJSON *assistant_calls(const char *content, cJSON *calls) {
  cJSON *m = msg("assistant", content);
  if (calls) cJSON_AddItemToObject(m, "tool_calls", calls);
  return m;
}

static cJSON *result(const char *id, const char *content, cJSON *is_error) {
  cJSON *m = msg("tool", content);
  if (id) obj_str(m, "tool_call_id", id);
  if (is_error) cJSON_AddItemToObject(m, "is_error", is_error);
  return m;
}

static cJSON *block(const char *type) {
  cJSON *b = cJSON_CreateObject();
  if (type) obj_str(b, "type", type);
  return b;
}

/* Huge tool arguments: a valid object of ~250 KB (a long string with every
 * escape, a long array), the same cut short, and nesting past the parser's
 * depth limit. */
static char *huge_args(int kind) {
  struct sbuf b = {0};
  if (kind == 2) {
    sbuf_puts(&b, "{\"deep\":");
    for (int i = 0; i < 600; i++) sbuf_puts(&b, "[");
    for (int i = 0; i < 600; i++) sbuf_puts(&b, "]");
    sbuf_puts(&b, "}");
    return sbuf_take(&b);
  }
  sbuf_puts(&b, "{\"data\":\"");
  for (int i = 0; i < 8000; i++) sbuf_puts(&b, "abc\\n\\u00e9\\\"\\\\\\u0001 ");
  sbuf_puts(&b, "\",\"list\":[");
  for (int i = 0; i < 8000; i++) sbuf_printf(&b, "%s%d.5", i ? "," : "", i);
  sbuf_puts(&b, "],\"z\":{\"b\":1,\"a\":[true,false,null]}}");
  if (kind == 1) b.s[b.len - 7] = 0; /* cut */
  return sbuf_take(&b);
}

/* Every mix of kept blocks, for an assistant turn with calls ids[0..k). */
static cJSON *kept_mix(int variant, char ids[][16], int k) {
  cJSON *bl = cJSON_CreateArray();
  switch (variant) {
    case 0: break; /* empty: the turn as if none was kept */
    case 1: /* only blocks that add nothing: no type, empty text, not objects */
      cJSON_AddItemToArray(bl, block(NULL));
      cJSON_AddItemToArray(bl, obj_str(block("text"), "text", ""));
      cJSON_AddItemToArray(bl, block("text"));
      cJSON_AddItemToArray(bl, cJSON_CreateString("text"));
      cJSON_AddItemToArray(bl, cJSON_CreateNumber(7));
      cJSON_AddItemToArray(bl, cJSON_CreateNull());
      {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "type", 3);
        cJSON_AddItemToArray(bl, t);
      }
      break;
    case 2: /* thinking, redacted, server tool, search result, text, tool_use */
      cJSON_AddItemToArray(bl, obj_str(obj_str(block("thinking"), "thinking", nasty[0]),
                                       "signature", nasty[6]));
      cJSON_AddItemToArray(bl, obj_str(block("redacted_thinking"), "data", nasty[3]));
      {
        cJSON *st = obj_str(obj_str(block("server_tool_use"), "id", "srv1"), "name", "web_search");
        cJSON_AddItemToObject(st, "input", json_parse_str("{\"query\":\"q\",\"n\":2.5}", 0, NULL));
        cJSON_AddItemToArray(bl, st);
      }
      {
        cJSON *r = obj_str(block("web_search_tool_result"), "tool_use_id", "srv1");
        cJSON_AddItemToObject(r, "content", json_parse_str("[{\"type\":\"web_search_result\","
                                                           "\"url\":\"u\",\"title\":\"t\"}]",
                                                           0, NULL));
        cJSON_AddItemToArray(bl, r);
      }
      cJSON_AddItemToArray(bl, obj_str(block("text"), "text", nasty[9]));
      for (int i = 0; i < k; i++)
        cJSON_AddItemToArray(bl, obj_str(obj_str(block("tool_use"), "id", ids[i]), "name", "x"));
      break;
    case 3: /* a tool_use block for a call the loop did not run, one twice, none for the rest */
      cJSON_AddItemToArray(bl, obj_str(block("tool_use"), "id", "never-ran"));
      if (k) {
        cJSON_AddItemToArray(bl, obj_str(block("tool_use"), "id", ids[0]));
        cJSON_AddItemToArray(bl, obj_str(block("tool_use"), "id", ids[0]));
      }
      cJSON_AddItemToArray(bl, obj_str(block("text"), "text", "after the calls"));
      break;
    case 4: { /* the last cacheable block has its breakpoint already (any case of its key) */
      cJSON_AddItemToArray(bl, obj_str(block("image"), "source", "s"));
      cJSON *t = obj_str(block("document"), "title", nasty[12]);
      cJSON *cc = cJSON_AddObjectToObject(t, k & 1 ? "Cache_Control" : "cache_control");
      obj_str(cc, "type", "ephemeral");
      cJSON_AddItemToArray(bl, t);
      break;
    }
    case 5: /* nothing cacheable: no breakpoint in this message */
      cJSON_AddItemToArray(bl, obj_str(block("thinking"), "thinking", "t"));
      cJSON_AddItemToArray(bl, obj_str(block("future_block"), "data", "d"));
      break;
    default: { /* a cacheable block, then non-cacheable ones after it */
      cJSON *t = obj_str(block("text"), "text", "cite");
      cJSON *cit = cJSON_AddArrayToObject(t, "citations");
      cJSON *ci = cJSON_CreateObject();
      cJSON_AddNumberToObject(ci, "start", 1e300);
      cJSON_AddNumberToObject(ci, "end", -0.0);
      cJSON_AddItemToObject(ci, "big", json_parse_str("-123456789012345678901234567890", 0, NULL));
      cJSON_AddItemToArray(cit, ci);
      cJSON_AddItemToArray(bl, t);
      cJSON_AddItemToArray(bl, obj_str(block("redacted_thinking"), "data", "r"));
      cJSON_AddItemToArray(bl, obj_str(block("Text"), "text", "a type in another case"));
    }
  }
  return bl;
}

static cJSON *nasty_tools(void) {
  cJSON *tools = make_tools(2);
  cJSON *t = cJSON_CreateObject(); /* no name, no description, no parameters */
  cJSON_AddItemToArray(tools, t);
  t = obj_str(obj_str(cJSON_CreateObject(), "name", nasty[0]), "description", nasty[6]);
  cJSON_AddItemToObject(t, "parameters", cJSON_CreateString("not a schema"));
  cJSON_AddItemToArray(tools, t);
  t = obj_str(cJSON_CreateObject(), "name",
              "a.very.long.tool.name.that.goes.past.sixty.four.characters.of.the.wire.limit.x");
  cJSON_AddNumberToObject(t, "description", 5);
  cJSON_AddItemToObject(t, "parameters", json_parse_str("[{\"b\":1,\"a\":2},\"\\u0000\"]", 0, NULL));
  cJSON_AddItemToArray(tools, t);
  t = obj_str(cJSON_CreateObject(), "name", "s\xc3\xa9.t\x01ol");
  cJSON_AddItemToObject(t, "parameters",
                        json_parse_str("{\"z\":{\"y\":{\"b\":\"\\u0000\",\"a\":[{\"d\":1,\"c\":2}]}},"
                                       "\"type\":\"object\"}", 0, NULL));
  cJSON_AddItemToArray(tools, t);
  return tools;
}

/* The hostile messages, appended one at a time: each step's body is
 * compared (so every one of them meets the cache at the seam, as the
 * last, open message and as a cached final one). */
static void test_hostile(void) {
  struct llm_client *cl = providers();
  CHECK(cl != NULL);
  if (!cl) return;
  cJSON *tools_sets[3] = {nasty_tools(), NULL, cJSON_CreateArray()};
  char *huge[3] = {huge_args(0), huge_args(1), huge_args(2)};
  const char *systems[] = {"s", nasty[0], nasty[6], NULL, ""};
  for (int pass = 0; pass < 3; pass++) {
    struct llm_body_cache *caches[8] = {0};
    for (size_t i = 0; i < llm_client_count(cl); i++) caches[i] = llm_body_cache_new();
    cJSON *messages = cJSON_CreateArray();
    const cJSON *tools = tools_sets[pass];
    req_max_tokens = pass == 1 ? 123 : 0;
    int step = 0;
    char where[96];
#define ADD(m)                                                                       \
  do {                                                                               \
    cJSON_AddItemToArray(messages, (m));                                             \
    snprintf(where, sizeof where, "hostile pass %d step %d (line %d)", pass, step++, \
             __LINE__);                                                              \
    compare_all(cl, caches, systems[step % 5], messages, tools, step % 3 == 0, where); \
  } while (0)
    for (size_t i = 0; i < NNASTY; i++) ADD(msg("user", nasty[i]));
    ADD(msg("user", NULL));
    {
      cJSON *m = msg("user", NULL);
      cJSON_AddNumberToObject(m, "content", 5);
      ADD(m);
      m = msg("user", NULL);
      cJSON_AddItemToObject(m, "content", json_parse_str("{\"text\":\"x\"}", 0, NULL));
      ADD(m);
    }
    ADD(msg("assistant", ""));  /* no content, no calls: "(no answer)" */
    ADD(msg("assistant", NULL));
    ADD(msg("user", "u"));
    for (size_t i = 0; i < NNASTY; i++) ADD(msg("assistant", nasty[i]));
    /* calls of every shape */
    {
      cJSON *calls = cJSON_CreateArray();
      cJSON_AddItemToArray(calls, call(NULL, NULL, NULL));
      cJSON_AddItemToArray(calls, call(nasty[0], nasty[1], nasty[2]));
      cJSON_AddItemToArray(calls, call("h2", "echo", huge[2]));
      cJSON_AddItemToArray(calls, call("n", "x", "null"));
      cJSON_AddItemToArray(calls, call("s", "x", "\"a string\""));
      cJSON_AddItemToArray(calls, call("z", "x", "{\"nul\":\"\\u0000\",\"e\":\"\\ud83d\\ude00\"}"));
      cJSON_AddItemToArray(calls, call("bad", "x", "{\"s\":\"\xff\"}"));
      cJSON_AddItemToArray(calls, call("ws", "x", " {\"a\" : 1 } "));
      cJSON_AddItemToArray(calls, call("long", "a.very.long.tool.name.that.goes.past.sixty.four."
                                               "characters.of.the.wire.limit.for.sure", "{}"));
      cJSON *c = call("num", "x", NULL);
      cJSON_AddNumberToObject(c, "arguments", 1);
      cJSON_AddItemToArray(calls, c);
      ADD(assistant_calls(nasty[6], calls));
      ADD(result(NULL, NULL, NULL));
      ADD(result(nasty[0], nasty[6], cJSON_CreateTrue()));
      ADD(result("h2", "", cJSON_CreateNumber(1)));
      ADD(result("z", "error", cJSON_CreateString("true")));
      ADD(result("s", "ok", cJSON_CreateFalse()));
      ADD(result("n", "failed", cJSON_CreateTrue()));
    }
    /* tool_calls that are not an array, or empty */
    {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddItemToObject(o, "first", call("o1", "echo", "{}"));
      ADD(assistant_calls("", o));
      ADD(assistant_calls("", cJSON_CreateString("calls")));
      ADD(assistant_calls("", cJSON_CreateArray()));
      ADD(result("o1", "r", NULL));
    }
    /* kept blocks of every mix, with and without calls */
    for (int v = 0; v < 7; v++) {
      char ids[2][16];
      int k = v % 3;
      cJSON *calls = cJSON_CreateArray();
      for (int i = 0; i < k; i++) {
        snprintf(ids[i], sizeof ids[i], "k%d_%d", v, i);
        cJSON_AddItemToArray(calls, call(ids[i], "echo", i ? huge[2] : "{\"i\":1}"));
      }
      cJSON *m = assistant_calls(v % 2 ? "" : nasty[9], calls);
      cJSON_AddItemToObject(m, "anthropic_content", kept_mix(v, ids, k));
      ADD(m);
      for (int i = 0; i < k; i++) ADD(result(ids[i], nasty[(size_t)(v + i) % NNASTY],
                                             i ? cJSON_CreateTrue() : NULL));
      if (v == 4) ADD(msg("user", "after a kept breakpoint"));
    }
    {
      cJSON *m = msg("assistant", "kept is an object");
      cJSON_AddItemToObject(m, "anthropic_content", obj_str(block("text"), "text", "t"));
      ADD(m);
    }
    /* not messages, odd roles, runs of one role */
    ADD(cJSON_CreateString("a string"));
    ADD(cJSON_CreateNumber(1));
    ADD(cJSON_CreateNull());
    ADD(cJSON_CreateArray());
    {
      cJSON *m = msg(NULL, "role is a number");
      cJSON_AddNumberToObject(m, "role", 2);
      ADD(m);
    }
    ADD(msg(nasty[0], "role is invalid UTF-8"));
    ADD(msg("", "empty role"));
    ADD(msg("system", nasty[6]));
    ADD(msg("developer", "d"));
    ADD(msg("user", "1"));
    ADD(msg("user", "2"));
    ADD(result("x", "3", NULL));
    ADD(msg("assistant", "4"));
    ADD(msg("assistant", "5"));
    ADD(msg("Assistant", "6"));
    cJSON_Delete(messages);
    for (size_t i = 0; i < llm_client_count(cl); i++) llm_body_cache_free(caches[i]);
  }
  /* huge tool arguments and results (a short conversation: every body
   * carries them) */
  {
    int pass = 3, step = 0;
    char where[96];
    struct llm_body_cache *caches[8] = {0};
    for (size_t i = 0; i < llm_client_count(cl); i++) caches[i] = llm_body_cache_new();
    cJSON *messages = cJSON_CreateArray();
    const cJSON *tools = tools_sets[0];
    ADD(msg("user", "big"));
    cJSON *calls = cJSON_CreateArray();
    cJSON_AddItemToArray(calls, call("h0", "echo", huge[0]));
    cJSON_AddItemToArray(calls, call("h1", "echo", huge[1]));
    cJSON_AddItemToArray(calls, call("h2", "echo", huge[2]));
    cJSON *m = assistant_calls("", calls);
    char ids[3][16] = {"h0", "h1", "h2"};
    cJSON_AddItemToObject(m, "anthropic_content", kept_mix(2, ids, 3));
    ADD(m);
    ADD(result("h0", huge[0], cJSON_CreateFalse()));
    ADD(result("h1", "error: cut", cJSON_CreateTrue()));
    ADD(result("h2", huge[2], NULL));
    ADD(msg("assistant", huge[1]));
    cJSON_Delete(messages);
    for (size_t i = 0; i < llm_client_count(cl); i++) llm_body_cache_free(caches[i]);
  }
#undef ADD
  req_max_tokens = 0;
  for (int i = 0; i < 3; i++) {
    cJSON_Delete(tools_sets[i]);
    free(huge[i]);
  }
  llm_client_free(cl);
}

/* ---- bodies written out ------------------------------------------------- */

/* Provider i's body for the request, with and without a cache, is
 * expected (the wire rules spelled out, not one build's output against
 * another's). */
static void golden(struct llm_client *cl, size_t i, bool stream, const char *system,
                   const char *messages_json, const char *tools_json, bool no_tools,
                   const char *expected) {
  const struct llm_provider *p = llm_client_provider(cl, i);
  const struct llm__wire *w = p->kind == LLM_ANTHROPIC ? &llm__anthropic_wire : &llm__openai_wire;
  cJSON *messages = json_parse_str(messages_json, 0, NULL);
  cJSON *tools = tools_json ? json_parse_str(tools_json, 0, NULL) : NULL;
  CHECK(messages != NULL);
  struct llm_body_cache *c = llm_body_cache_new();
  struct llm_request req = {
      .system = system, .messages = messages, .tools = tools, .no_tools = no_tools};
  char *full = w->body(p, &req, stream);
  req.body_cache = c;
  char *cached = w->body(p, &req, stream);
  char *again = w->body(p, &req, stream); /* from the cache's history */
  CHECK_STR(full, expected);
  CHECK_STR(cached, expected);
  CHECK_STR(again, expected);
  free(full);
  free(cached);
  free(again);
  llm_body_cache_free(c);
  cJSON_Delete(messages);
  cJSON_Delete(tools);
}

static void test_golden(void) {
  struct llm_client *cl = providers();
  CHECK(cl != NULL);
  if (!cl) return;
  const char *conv =
      "[{\"role\":\"user\",\"content\":\"hi \\\"there\\\"\"},"
      "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"name\":"
      "\"notes.add\",\"arguments\":\"{\\\"b\\\":2,\\\"a\\\":1}\"}],"
      "\"anthropic_content\":[{\"type\":\"thinking\",\"thinking\":\"hm\",\"signature\":\"s=\"},"
      "{\"type\":\"tool_use\",\"id\":\"c1\",\"name\":\"notes__add\",\"input\":{}}]},"
      "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"name\":\"notes.add\",\"content\":\"ok\"},"
      "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"bad\",\"is_error\":true},"
      "{\"role\":\"user\",\"content\":\"next\"}]";
  const char *tools =
      "[{\"name\":\"notes.add\",\"description\":\"Adds\",\"parameters\":{\"type\":\"object\","
      "\"properties\":{\"b\":{\"type\":\"integer\"},\"a\":{}}}}]";
  /* OpenAI: the system prompt first, one wire message per message, the
   * arguments as the model sent them, tools with sorted schema keys */
  golden(cl, 0, true, "sys", conv, tools, false,
         "{\"model\":\"gpt-\xc3\xa9\",\"messages\":[{\"role\":\"system\",\"content\":\"s"
         "ys\"},{\"role\":\"user\",\"content\":\"hi \\\"there\\\"\"},{\"role\":\"assista"
         "nt\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"f"
         "unction\":{\"name\":\"notes__add\",\"arguments\":\"{\\\"b\\\":2,\\\"a\\\":1}\""
         "}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\"},{\"role\":"
         "\"tool\",\"tool_call_id\":\"c2\",\"content\":\"bad\"},{\"role\":\"user\",\"con"
         "tent\":\"next\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"n"
         "otes__add\",\"description\":\"Adds\",\"parameters\":{\"properties\":{\"a\":{},"
         "\"b\":{\"type\":\"integer\"}},\"type\":\"object\"}}}],\"tool_choice\":\"auto\""
         ",\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
  /* an older server's max_tokens; no tools: no tool_choice */
  golden(cl, 2, false, NULL, conv, NULL, false,
         "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi \\\"there\\"
         "\"\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","
         "\"type\":\"function\",\"function\":{\"name\":\"notes__add\",\"arguments\":\"{\\"
         "\"b\\\":2,\\\"a\\\":1}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"cont"
         "ent\":\"ok\"},{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"bad\"},"
         "{\"role\":\"user\",\"content\":\"next\"}],\"max_tokens\":5}");
  /* Anthropic with prompt caching: the system prompt as a marked block,
   * the thinking block kept before its tool_use, whose input is the
   * arguments parsed, the tool results and the next user text in one
   * user message, its last block marked */
  golden(cl, 3, false, "sys", conv, tools, false,
         "{\"model\":\"c\",\"max_tokens\":4096,\"system\":[{\"type\":\"text\",\"text\":\""
         "sys\",\"cache_control\":{\"type\":\"ephemeral\"}}],\"messages\":[{\"role\":\"u"
         "ser\",\"content\":[{\"type\":\"text\",\"text\":\"hi \\\"there\\\"\"}]},{\"role"
         "\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\",\"sig"
         "nature\":\"s=\"},{\"type\":\"tool_use\",\"id\":\"c1\",\"name\":\"notes__add\","
         "\"input\":{\"b\":2,\"a\":1}}]},{\"role\":\"user\",\"content\":[{\"type\":\"too"
         "l_result\",\"tool_use_id\":\"c1\",\"content\":\"ok\"},{\"type\":\"tool_result\""
         ",\"tool_use_id\":\"c2\",\"content\":\"bad\",\"is_error\":true},{\"type\":\"tex"
         "t\",\"text\":\"next\",\"cache_control\":{\"type\":\"ephemeral\"}}]}],\"tools\""
         ":[{\"name\":\"notes__add\",\"description\":\"Adds\",\"input_schema\":{\"proper"
         "ties\":{\"a\":{},\"b\":{\"type\":\"integer\"}},\"type\":\"object\"}}],\"tool_c"
         "hoice\":{\"type\":\"auto\"}}");
  /* without a system prompt the last tool takes breakpoint 1 */
  golden(cl, 3, true, NULL, conv, tools, true,
         "{\"model\":\"c\",\"max_tokens\":4096,\"messages\":[{\"role\":\"user\",\"conten"
         "t\":[{\"type\":\"text\",\"text\":\"hi \\\"there\\\"\"}]},{\"role\":\"assistant"
         "\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\",\"signature\":\"s=\""
         "},{\"type\":\"tool_use\",\"id\":\"c1\",\"name\":\"notes__add\",\"input\":{\"b\""
         ":2,\"a\":1}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"too"
         "l_use_id\":\"c1\",\"content\":\"ok\"},{\"type\":\"tool_result\",\"tool_use_id\""
         ":\"c2\",\"content\":\"bad\",\"is_error\":true},{\"type\":\"text\",\"text\":\"n"
         "ext\",\"cache_control\":{\"type\":\"ephemeral\"}}]}],\"tools\":[{\"name\":\"no"
         "tes__add\",\"description\":\"Adds\",\"input_schema\":{\"properties\":{\"a\":{}"
         ",\"b\":{\"type\":\"integer\"}},\"type\":\"object\"},\"cache_control\":{\"type\""
         ":\"ephemeral\"}}],\"tool_choice\":{\"type\":\"none\"},\"stream\":true}");
  /* no caching, extended thinking; an assistant turn without text or calls */
  golden(cl, 4, true, "sys", "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\"}]",
         tools, true, "{\"model\":\"c\",\"max_tokens\":9000,\"system\":\"sys\",\"messages\":[{\"role\""
         ":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"q\"}]},{\"role\":\"assist"
         "ant\",\"content\":[{\"type\":\"text\",\"text\":\"(no answer)\"}]}],\"tools\":["
         "{\"name\":\"notes__add\",\"description\":\"Adds\",\"input_schema\":{\"properti"
         "es\":{\"a\":{},\"b\":{\"type\":\"integer\"}},\"type\":\"object\"}}],\"tool_cho"
         "ice\":{\"type\":\"none\"},\"thinking\":{\"type\":\"enabled\",\"budget_tokens\""
         ":2048},\"stream\":true}");
  llm_client_free(cl);
}

/* emit_get, the walks' member lookup, is cJSON_GetObjectItem: the first
 * member whose key equals the name, letters in either case, over keys
 * that differ in case, in a letter's neighbours in ASCII ('@' and '`',
 * '[' and '{', '_'), in length, and over members without keys (an
 * array's items). */
static void test_emit_get(void) {
  static const char *const keys[] = {"role", "Role", "ROLE", "rolE", "roles", "rol", "",
                                     "r_le", "r\x7fle", "@ole", "`ole", "[x", "{x", "_x",
                                     "tool_call_id", "TOOL_CALL_ID", "tool_calls", "\xc3\xa9",
                                     "\xc3\x89", "content", "Content"};
  enum { NK = sizeof keys / sizeof *keys };
  int differ = 0;
  for (int round = 0; round < 4000; round++) {
    bool array = rnd(10) == 0;
    cJSON *o = array ? cJSON_CreateArray() : cJSON_CreateObject();
    int n = (int)rnd(6);
    for (int i = 0; i < n; i++) {
      if (array) cJSON_AddItemToArray(o, cJSON_CreateNumber(i));
      else cJSON_AddItemToObject(o, keys[rnd(NK)], cJSON_CreateNumber(i));
    }
    for (int k = 0; k < NK; k++)
      if (emit_get(o, keys[k]) != cJSON_GetObjectItem(o, keys[k])) differ++;
    if (emit_get(o, NULL) || emit_get(NULL, "role")) differ++;
    cJSON_Delete(o);
  }
  CHECK_INT(differ, 0);
}

/* A call's arguments as the Anthropic wire's tool_use input: the print
 * path reprints the text (json_reprint) where the tree path parses it,
 * byte for byte the same, over the texts models send (spaced, nested,
 * every number form and escape, many keys, repeated keys at any depth,
 * not JSON, not an object). */
static void test_tool_inputs(void) {
  static const char *const args[] = {
      "{\"step\": 0, \"note\": \"turn 0\"}",
      " {\n\t\"a\" : [ 1 , 2.50 , -0 , 1e2 , 12345678901234567890 , 0.1 ] ,\r\n \"b\" : { } } ",
      "{\"s\":\"\\u00e9\\ud83d\\ude00\\u0000\\/\\b\\f\\n\\r\\t\\\"\\\\\",\"t\":\"\xc3\xa9\"}",
      "{\"x\":{\"y\":{\"y\":1,\"y\":2}}}", "{\"x\":{\"a\":1},\"x\":2}", "{\"x\":1e400}",
      "{\"k0\":0,\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,"
      "\"k9\":9,\"k10\":10,\"k11\":11,\"k12\":12,\"k13\":13,\"k14\":14,\"k15\":15,\"k16\":16,"
      "\"k17\":[true,false,null]}",
      "{\"k0\":0,\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,"
      "\"k9\":9,\"k10\":10,\"k11\":11,\"k12\":12,\"k13\":13,\"k14\":14,\"k15\":15,\"k16\":16,"
      "\"k0\":1}",
      "{\"a\":\"\xff\"}", "{\"a\":1,}", "{\"a\" 1}", "\"{}\"", "[{}]", "7", "null", "", "{}",
      "{\"\":\"\",\"A\":1,\"a\":2}", "\xef\xbb\xbf{}", "{\"a\":[[[[[[[[]]]]]]]],\"b\":-1.5E-7}"};
  enum { NA = sizeof args / sizeof *args };
  struct llm_client *cl = providers();
  struct llm_body_cache *caches[8] = {0};
  for (size_t i = 0; i < llm_client_count(cl); i++) caches[i] = llm_body_cache_new();
  cJSON *messages = cJSON_CreateArray();
  cJSON_AddItemToArray(messages, msg("user", "go"));
  for (int k = 0; k < NA; k++) {
    char id[16];
    snprintf(id, sizeof id, "t%d", k);
    cJSON *calls = cJSON_CreateArray();
    cJSON_AddItemToArray(calls, call(id, "echo", args[k]));
    cJSON_AddItemToArray(messages, assistant_calls(k % 2 ? "" : "calling", calls));
    char where[32];
    snprintf(where, sizeof where, "tool input %d", k);
    compare_all(cl, caches, "s", messages, NULL, false, where); /* the call open */
    cJSON_AddItemToArray(messages, result(id, "ok", NULL));
    compare_all(cl, caches, "s", messages, NULL, false, where); /* and final */
  }
  for (size_t i = 0; i < llm_client_count(cl); i++) llm_body_cache_free(caches[i]);
  cJSON_Delete(messages);
  llm_client_free(cl);
}

/* The open wire message (Anthropic: the user message of the last tool
 * results) is kept without its mark and joins the history at the next
 * request, not walked again, only when its messages are unchanged and
 * closed: here each of them is changed in place after the request that
 * printed it open (content, a flag added, a member removed or renamed in
 * case, a number's bits), or grown (another user-class message after it),
 * before the next wire message comes; each time the bodies must be the
 * full rebuild's, and the keep must have been taken when nothing changed. */
static void test_open_kept(void) {
  struct llm_client *cl = providers();
  /* stamped: the loop's way, a stamp vouching for the appends and a new
   * one taken at each change in place */
  for (int run = 0; run < 16; run++) {
    int change = run % 8;
    bool stamped = run >= 8;
    req_stamp = stamped ? llm_body_stamp() : 0;
    struct llm_body_cache *caches[8] = {0};
    for (size_t i = 0; i < llm_client_count(cl); i++) caches[i] = llm_body_cache_new();
    cJSON *messages = cJSON_CreateArray();
    cJSON_AddItemToArray(messages, msg("user", "go"));
    char where[48];
    for (int turn = 0; turn < 4; turn++) {
      char id[16];
      snprintf(id, sizeof id, "o%d", turn);
      cJSON *calls = cJSON_CreateArray();
      cJSON_AddItemToArray(calls, call(id, "echo", "{\"n\": 1}"));
      cJSON_AddItemToArray(messages, assistant_calls("step", calls));
      cJSON *res = result(id, "result text", turn == 2 ? cJSON_CreateFalse() : NULL);
      cJSON_AddItemToArray(messages, res);
      snprintf(where, sizeof where, "open kept %d/%d (stamped %d)", change, turn, stamped);
      compare_all(cl, caches, "s", messages, NULL, false, where);
      if ((turn == 1 || turn == 3) && stamped && change) req_stamp = llm_body_stamp();
      if (turn == 1 || turn == 3) switch (change) { /* behind the cache's back */
        case 1: cJSON_SetValuestring(cJSON_GetObjectItem(res, "content"), "edited"); break;
        case 2: cJSON_AddItemToObject(res, "is_error", cJSON_CreateTrue()); break;
        case 3: cJSON_DeleteItemFromObject(res, "tool_call_id"); break;
        case 4: cJSON_GetObjectItem(res, "role")->string[0] = 'R'; break;
        case 5: cJSON_AddItemToObject(res, "n", cJSON_CreateNumber(turn)); break;
        case 6: cJSON_AddItemToArray(messages, msg("user", "and one more thing")); break;
        case 7: { /* a message of no class after it: the next one still closes it */
          cJSON *nr = cJSON_CreateObject();
          cJSON_AddStringToObject(nr, "note", "no role");
          cJSON_AddItemToArray(messages, nr);
          break;
        }
        default: break;
      }
    }
    cJSON_AddItemToArray(messages, msg("assistant", "done"));
    snprintf(where, sizeof where, "open kept %d (stamped %d): final", change, stamped);
    compare_all(cl, caches, "s", messages, NULL, false, where);
    long kept = 0;
    for (size_t i = 0; i < llm_client_count(cl); i++) {
      kept += llm__body_cache_kept(caches[i]);
      llm_body_cache_free(caches[i]);
    }
    /* unchanged (0): every turn's open message is taken at the next, on the
     * merging providers (two bodies per turn: the second finds the keep
     * from the first as open, not final, and takes nothing) */
    if (change == 0) CHECK(kept >= 4);
    cJSON_Delete(messages);
  }
  req_stamp = 0;
  llm_client_free(cl);
}

int main(void) {
  const char *dp = getenv("LUAGENT_BODY_DUMP");
  if (dp && *dp && !(dump_file = fopen(dp, "a"))) {
    fprintf(stderr, "LUAGENT_BODY_DUMP: cannot open %s\n", dp);
    return 1;
  }
  test_json_identical();
  test_conversations();
  test_append_only();
  test_seams();
  test_deep();
  test_hostile();
  test_golden();
  test_emit_get();
  test_tool_inputs();
  test_open_kept();
  if (dump_file) fclose(dump_file);
  return TEST_END();
}
