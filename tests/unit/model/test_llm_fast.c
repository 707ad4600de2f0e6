/* test_llm_fast.c - the stream events read without a tree (llm_fast.c)
 * against the full parse they stand in for: every stream here is read
 * twice through the real wire code (llm__replay), once with the fast path
 * and once without, split into different random pieces each time, and
 * everything that comes out must be the same: each callback in order,
 * the response (text, tool calls with ids, names and arguments, stop
 * reason, finish, refusal, blocks, usage, invalid UTF-8 count) and the
 * error with its message. The events are hostile on purpose: escaped
 * quotes, \u escapes with surrogate pairs and lone surrogates, \u0000,
 * invalid UTF-8, control bytes, keys repeated or in another case or
 * escaped, objects and arrays where strings or numbers belong, odd
 * numbers, deep nesting, truncation, and random byte damage. The plain
 * events must really take the fast path (a test of a path never taken
 * would pass on the full parse alone). */
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "llm.h"
#include "test.h"
#include "util.h"

static unsigned long long rng = 0x9E3779B97F4A7C15ull;
static unsigned rnd(unsigned n) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (unsigned)(rng % n);
}

/* ---- what came out ------------------------------------------------------ */

static void on_text(void *ud, const char *s, size_t n) {
  sbuf_puts(ud, "T[");
  sbuf_append(ud, s, n);
  sbuf_puts(ud, "]");
}
static void on_tool_start(void *ud, int i, const char *id, const char *name) {
  sbuf_printf(ud, "S[%d|%s|%s]", i, id, name);
}
static void on_tool_args(void *ud, int i, const char *s, size_t n) {
  sbuf_printf(ud, "A[%d|", i);
  sbuf_append(ud, s, n);
  sbuf_puts(ud, "]");
}

/* Everything one reading produced, as one text. */
static char *outcome(const struct llm_provider *p, const char *stream, size_t len, bool fast,
                     long *fast_events) {
  /* split into random pieces, as curl hands them over */
  const char *pieces[4096];
  size_t lens[4096], n = 0, at = 0;
  while (at < len && n < 4095) {
    size_t k = 1 + rnd(rnd(4) ? 7 : 200);
    if (k > len - at) k = len - at;
    pieces[n] = stream + at;
    lens[n++] = k;
    at += k;
  }
  if (at < len) pieces[n] = stream + at, lens[n++] = len - at;
  cJSON *tools = cJSON_Parse("[{\"name\":\"echo\"},{\"name\":\"notes.add\"}]");
  struct llm_request req = {.tools = tools};
  struct sbuf tr = {0};
  struct llm_callbacks cb = {on_text, on_tool_start, on_tool_args, NULL, &tr};
  struct llm_response r;
  struct err e = {0};
  int rc = llm__replay(p, &req, pieces, lens, n, fast, &cb, &r, fast_events, &e);
  sbuf_printf(&tr, "\nrc=%d code=%s msg=%s\ntext=%s\nstop=%s finish=%d refusal=%s thinking=%s "
                   "redacted=%d in=%ld out=%ld cr=%ld cw=%ld bad_utf8=%ld\n",
              rc, e.code, e.msg, r.text, r.stop_reason, (int)r.finish,
              r.refusal ? r.refusal : "(none)", r.thinking ? r.thinking : "(none)",
              r.redacted_thinking, r.input_tokens, r.output_tokens, r.cache_read_tokens,
              r.cache_write_tokens, r.invalid_utf8);
  for (size_t i = 0; i < r.ncalls; i++)
    sbuf_printf(&tr, "call %zu: %s %s %s\n", i, r.calls[i].id, r.calls[i].name,
                r.calls[i].arguments);
  if (r.blocks) {
    char *b = json_print(r.blocks, 0);
    sbuf_printf(&tr, "blocks=%s\n", b);
    free(b);
  }
  llm_response_free(&r);
  cJSON_Delete(tools);
  return sbuf_take(&tr);
}

static long fast_total = 0, cases = 0;

/* Reads the stream both ways; they must agree. Returns the fast path's
 * event count. */
static long same_both_ways_n(const struct llm_provider *p, const char *stream, size_t len,
                             const char *what) {
  long f1 = 0, f2 = 0;
  char *a = outcome(p, stream, len, false, &f1);
  char *b = outcome(p, stream, len, true, &f2);
  cases++;
  test_checks_++;
  if (strcmp(a, b)) {
    test_failures_++;
    fprintf(stderr, "%s: the fast path differs for %s\n--- stream:\n%s\n--- full:\n%s\n--- fast:\n%s\n",
            p->name, what, stream, a, b);
  }
  CHECK_INT(f1, 0);
  fast_total += f2;
  free(a);
  free(b);
  return f2;
}

static long same_both_ways(const struct llm_provider *p, const char *stream, const char *what) {
  return same_both_ways_n(p, stream, strlen(stream), what);
}

/* ---- streams ------------------------------------------------------------- */

/* An OpenAI stream around one chunk under test. */
static char *openai_stream(const char *chunk) {
  struct sbuf b = {0};
  sbuf_puts(&b, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":0,"
                "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
                "\"content\":\"\",\"refusal\":null},\"finish_reason\":null}]}\n\n");
  sbuf_printf(&b, "data: %s\n\n", chunk);
  sbuf_puts(&b, "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
                "\"function\":{\"arguments\":\"}\"}}]}}]}\n\n"
                "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
                "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n"
                "data: [DONE]\n\n");
  return sbuf_take(&b);
}

/* An Anthropic stream around one event under test (blocks 0: text, 1:
 * tool_use, 2: server_tool_use are open). */
static char *anthropic_stream(const char *event) {
  struct sbuf b = {0};
  sbuf_puts(&b,
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":"
            "{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
            "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,"
            "\"content_block\":{\"type\":\"tool_use\",\"id\":\"tu1\",\"name\":\"echo\",\"input\":{}}}\n\n"
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,"
            "\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"st1\",\"name\":\"web\"}}\n\n");
  sbuf_printf(&b, "event: content_block_delta\ndata: %s\n\n", event);
  sbuf_puts(&b,
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
            "\"delta\":{\"type\":\"text_delta\",\"text\":\" end\"}}\n\n"
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n"
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n"
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
            "\"tool_use\"},\"usage\":{\"output_tokens\":9}}\n\n"
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
  return sbuf_take(&b);
}

/* Hostile string bodies (JSON text between the quotes). */
static const char *const strs[] = {
    "plain",
    "",
    "esc \\\" quote \\\\ back \\/ slash \\b\\f\\n\\r\\t",
    "caf\\u00e9 \\u20ac",
    "pair \\ud83d\\ude00 ok",
    "lone high \\ud83d alone",
    "lone high at end \\ud83d",
    "lone low \\ude00",
    "high then bmp \\ud83d\\u0041",
    "nul \\u0000 inside",
    "bad escape \\x41",
    "short \\u12",
    "raw \x01 control",
    "raw \t tab",
    "raw utf8 caf\xc3\xa9 \xf0\x9f\x98\x80",
    "invalid \xff byte",
    "overlong \xc0\xaf",
    "surrogate in utf8 \xed\xa0\x80",
    "cut \xe2\x82",
    "del \x7f char",
    "upper \\u00C9 hex \\uD83D\\uDE00",
};
static const char *str(void) { return strs[rnd(sizeof strs / sizeof *strs)]; }

/* Values for places that want a string or a number. */
static const char *const odd_values[] = {
    "null", "true", "false", "0", "-0", "1", "-1", "01", "1.0", "1e0", "1E+2", "2.",
    ".5", "99999999999999999", "18446744073709551616", "1e400", "{}", "{\"a\":1}", "[]", "[\"x\"]", "\"0\"",
    "\"\"", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]"
    "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
};
static const char *odd(void) { return odd_values[rnd(sizeof odd_values / sizeof *odd_values)]; }

/* Members no reader wants, to put before or after the ones it reads:
 * valid ones the fast path must skip (nested braces and brackets and the
 * wanted keys inside strings and inside nested objects, escapes, every
 * kind of value, nesting around the reader's depth limit, a huge string)
 * and ones it must leave to the full parse (an escaped key, a key that
 * differs from a wanted one only in case is made by the callers). */
static struct sbuf huge;
static void put_noise(struct sbuf *b, bool valid_only) {
  static const char *const values[] = {
      "\"}{][,:\\\"\\\\\"",
      "\"{\\\"choices\\\":[{\\\"index\\\":0}]}\"",
      "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"inner\"}}],\"content\":\"x\"}",
      "[{\"a\":[[],{}]},\"]\",\"}\",-0.5,1.25,0,true,false,null]",
      "\"caf\\u00e9 \\ud83d\\ude00 \\u0000\"",
      "{\"usage\":{\"prompt_tokens\":99}}",
      "-12.5",
      "12345678901234",
      "\"\"",
      "{ \"k\" : [ 1 , 2 ] , \"l\" :\t{ \t} }",
  };
  static const char *const keys[] = {"x", "object", "indexes", "contents", "choice", "", "de lta",
                                     "\xc3\xa9t\xc3\xa9", "tool_call"};
  unsigned pick = rnd(valid_only ? 14 : 18);
  sbuf_printf(b, "\"%s\":", keys[rnd(sizeof keys / sizeof *keys)]);
  if (pick < 10) {
    sbuf_puts(b, values[pick]);
  } else if (pick < 13) { /* nesting: valid ones stay below the fast path's limit (64) */
    int d = valid_only ? 40 + (int)rnd(20) : 58 + (int)rnd(12);
    char open[80];
    for (int i = 0; i < d; i++) {
      open[i] = rnd(2) ? '[' : '{';
      sbuf_puts(b, open[i] == '[' ? "[" : "{\"a\":");
    }
    sbuf_puts(b, "1");
    for (int i = d; i-- > 0;) sbuf_puts(b, open[i] == '[' ? "]" : "}");
  } else if (pick == 13) { /* a huge string */
    sbuf_printf(b, "\"%s\"", huge.s);
  } else if (pick == 14) {
    sbuf_puts(b, "1e5"); /* the full parse reads it, the fast one does not */
  } else if (pick == 15) {
    sbuf_puts(b, "\"bad \xff\"");
  } else if (pick == 16) {
    sbuf_puts(b, "123456789012345678");
  } else {
    b->len -= 1; /* an escaped key instead */
    while (b->len && b->s[b->len - 1] != '"') b->len--;
    if (b->len) b->len--;
    b->s[b->len] = 0;
    sbuf_puts(b, "\"x\\u0041\":1");
  }
}

/* A few noise members as "m1,m2," (prefix) or ",m1,m2" (suffix), or "". */
static char *noise(bool on, bool valid_only, bool suffix) {
  struct sbuf b = {0};
  sbuf_puts(&b, "");
  if (!on) return sbuf_take(&b);
  int n = (int)rnd(3);
  for (int i = 0; i < n; i++) {
    if (suffix) sbuf_puts(&b, ",");
    put_noise(&b, valid_only);
    if (!suffix) sbuf_puts(&b, ",");
  }
  return sbuf_take(&b);
}

/* One OpenAI chunk, plain or with one or more hostile parts. */
static char *openai_chunk(bool plain) {
  struct sbuf b = {0};
  /* plain chunks get valid noise now and then: still the fast path */
  bool on = rnd(3) == 0, valid = plain || rnd(2);
  char *n_top = noise(on, valid, false), *n_choice = noise(on, valid, false),
       *n_delta = noise(on, valid, false), *n_call = noise(on, valid, false),
       *n_fn = noise(on, valid, false), *n_end = noise(on, valid, true);
  char content[400], id[64], name[64], args[400], index[64], cindex[64], fin[64];
  snprintf(content, sizeof content, "\"%s\"", plain ? "Step 1: checking." : str());
  snprintf(id, sizeof id, "\"call_%u\"", rnd(9));
  snprintf(name, sizeof name, "\"%s\"", rnd(2) ? "echo" : "notes__add");
  snprintf(args, sizeof args, "\"%s\"", plain ? "{\\\"step\\\":1" : str());
  snprintf(index, sizeof index, "%u", rnd(3));
  snprintf(cindex, sizeof cindex, "0");
  snprintf(fin, sizeof fin, "null");
  if (!plain) { /* damage some of the parts */
    int k = 1 + (int)rnd(3);
    for (int i = 0; i < k; i++) {
      switch (rnd(7)) {
        case 0: snprintf(content, sizeof content, "%s", odd()); break;
        case 1: snprintf(id, sizeof id, "%s", odd()); break;
        case 2: snprintf(index, sizeof index, "%s", odd()); break;
        case 3: snprintf(cindex, sizeof cindex, "%s", odd()); break;
        case 4: snprintf(fin, sizeof fin, rnd(2) ? "\"%s\"" : "%s", rnd(2) ? "length" : odd()); break;
        case 5: snprintf(name, sizeof name, "%s", odd()); break;
        default: snprintf(args, sizeof args, "%s", odd());
      }
    }
  }
  static const char *const content_keys[] = {"content", "Content", "CONTENT", "\\u0063ontent",
                                             "content\\u0000", "conten"};
  const char *ck = plain ? "content" : content_keys[rnd(6)];
  int shape = plain ? (int)rnd(3) : (int)rnd(12);
  sbuf_printf(&b, "{%s\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1733000000,"
                "\"model\":\"m\",\"system_fingerprint\":null,", n_top);
  if (shape == 9) sbuf_puts(&b, rnd(2) ? "\"error\":null," : "\"\\u0065rror\":{\"message\":\"boom\"},");
  if (shape == 10) {
    static const char *const usages[] = {
        "{\"prompt_tokens\":1,\"completion_tokens\":2}",
        "{\"prompt_tokens\":1,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":3}}",
        "{\"prompt_tokens_details\":null,\"cache_read_input_tokens\":4,\"prompt_tokens\":2.5}",
        "{\"prompt_tokens\":1,\"prompt_tokens\":2}",
        "{\"PROMPT_tokens\":1,\"prompt_tokens\":7}",
        "{\"completion_tokens\":\"9\",\"cache_creation_input_tokens\":-3}",
        "[1,2]", "null", "\"usage\"", "{}",
        "{\"cache_read_input_tokens\":-3,\"prompt_tokens_details\":{\"cached_tokens\":4}}",
        "{\"cache_read_input_tokens\":null,\"prompt_tokens_details\":{\"cached_tokens\":4}}",
        "{\"prompt_tokens_details\":[{\"cached_tokens\":4}],\"cache_creation_input_tokens\":5}"};
    sbuf_printf(&b, "\"usage\":%s,", usages[rnd(13)]);
  }
  if (shape == 11)
    sbuf_printf(&b, "\"%s\":[{\"index\":0,\"delta\":{\"content\":\"first\"}}],",
                rnd(2) ? "Choices" : "choices");
  static const char *const choices_keys[] = {"choices", "\\u0063hoices", "CHOICES"};
  sbuf_printf(&b, "\"%s\":[", plain ? "choices" : choices_keys[rnd(3)]);
  if (shape == 8) sbuf_printf(&b, "{\"index\":1,\"delta\":{\"content\":\"other choice\"}},");
  sbuf_printf(&b, "{%s\"index\":%s,\"delta\":", n_choice, cindex);
  switch (shape) {
    case 0: case 8: case 9: case 10: case 11: /* text */
      sbuf_printf(&b, "{%s\"%s\":%s%s}", n_delta, ck, content, n_end);
      break;
    case 1: /* a tool call start */
      sbuf_printf(&b,
                  "{%s\"tool_calls\":[{%s\"index\":%s,\"id\":%s,\"type\":\"function\",\"function\":"
                  "{%s\"name\":%s,\"arguments\":\"\"}}]%s}",
                  n_delta, n_call, index, id, n_fn, name, n_end);
      break;
    case 2: /* an arguments piece */
      sbuf_printf(&b, "{\"tool_calls\":[{%s\"index\":%s,\"function\":{%s\"arguments\":%s}}]}",
                  n_call, index, n_fn, args);
      break;
    case 3: /* text given twice */
      sbuf_printf(&b, "{\"content\":%s,\"content\":\"second\"}", content);
      break;
    case 4: /* a delta that is not an object */
      sbuf_printf(&b, "%s", odd());
      break;
    case 5: /* a refusal piece */
      sbuf_printf(&b, "{\"refusal\":%s}", content);
      break;
    case 6: /* several calls in one delta, and text */
      sbuf_printf(&b,
                  "{\"content\":%s,\"tool_calls\":[{\"index\":0,\"id\":%s,\"function\":{\"name\":"
                  "%s}},{\"index\":1,\"id\":\"b\",\"function\":{\"name\":\"echo\",\"arguments\":%s}}]}",
                  content, id, name, args);
      break;
    default: /* tool_calls given as an object or twice, function given twice */
      switch (rnd(3)) {
        case 0: sbuf_printf(&b, "{\"tool_calls\":{\"index\":%s}}", index); break;
        case 1:
          sbuf_printf(&b,
                      "{\"tool_calls\":[{\"index\":%s,\"function\":{\"name\":\"a\"},"
                      "\"function\":{\"name\":\"b\"}}]}",
                      index);
          break;
        default:
          sbuf_printf(&b,
                      "{\"tool_calls\":[{\"index\":%s,\"id\":\"first\"}],\"content\":\"t\","
                      "\"tool_calls\":[{\"index\":1,\"id\":\"second\"}]}",
                      index);
      }
  }
  sbuf_printf(&b, ",\"logprobs\":null,\"finish_reason\":%s%s}]%s}", fin, n_end, n_end);
  free(n_top), free(n_choice), free(n_delta), free(n_call), free(n_fn), free(n_end);
  return sbuf_take(&b);
}

/* One Anthropic delta, plain or hostile. */
static char *anthropic_event(bool plain) {
  struct sbuf b = {0};
  char text[400], index[64], type[64], dtype[64];
  snprintf(text, sizeof text, "\"%s\"", plain ? "Hello, wor" : str());
  snprintf(index, sizeof index, "%u", rnd(4));
  snprintf(type, sizeof type, "\"content_block_delta\"");
  snprintf(dtype, sizeof dtype, "\"%s\"", rnd(2) ? "text_delta" : "input_json_delta");
  if (!plain) {
    int k = 1 + (int)rnd(3);
    for (int i = 0; i < k; i++) {
      switch (rnd(5)) {
        case 0: snprintf(text, sizeof text, "%s", odd()); break;
        case 1: snprintf(index, sizeof index, "%s", odd()); break;
        case 2:
          snprintf(type, sizeof type, "%s",
                   rnd(2) ? odd() : rnd(2) ? "\"content_block_d\\u0065lta\"" : "\"ping\"");
          break;
        case 3:
          snprintf(dtype, sizeof dtype, "%s",
                   rnd(2) ? odd() : rnd(2) ? "\"thinking_delta\"" : "\"signature_delta\"");
          break;
        default: break;
      }
    }
  }
  int shape = plain ? 0 : (int)rnd(6);
  const char *tk = shape == 1 ? "Type" : "type";
  sbuf_printf(&b, "{\"%s\":%s,\"index\":%s,", tk, type, index);
  if (shape == 2) sbuf_printf(&b, "\"index\":1,");
  sbuf_printf(&b, "\"delta\":{\"type\":%s,\"text\":%s,\"partial_json\":%s,\"thinking\":%s",
              dtype, text, text, text);
  if (shape == 3) sbuf_printf(&b, ",\"text\":\"again\"");
  if (shape == 4) sbuf_printf(&b, ",\"TEXT\":\"case\"");
  sbuf_puts(&b, "}");
  if (shape == 5) sbuf_puts(&b, ",\"delta\":{\"type\":\"text_delta\",\"text\":\"second delta\"}");
  sbuf_puts(&b, "}");
  return sbuf_take(&b);
}

/* One Anthropic event of the other kinds the fast path reads (block
 * start and stop, message start, delta and stop, ping), plain or hostile:
 * odd values, repeated or case-changed members, refusal details, noise. */
static char *anthropic_other(bool plain) {
  struct sbuf b = {0};
  bool on = rnd(3) == 0, valid = plain || rnd(2);
  char *n1 = noise(on, valid, false), *n2 = noise(on, valid, false), *n3 = noise(on, valid, true);
  char index[64], num[64], sr[64];
  snprintf(index, sizeof index, "%u", rnd(4));
  snprintf(num, sizeof num, "%u", rnd(50));
  snprintf(sr, sizeof sr, "\"%s\"", rnd(2) ? "end_turn" : rnd(2) ? "tool_use" : "max_tokens");
  if (!plain) {
    switch (rnd(4)) {
      case 0: snprintf(index, sizeof index, "%s", odd()); break;
      case 1: snprintf(num, sizeof num, "%s", odd()); break;
      case 2: snprintf(sr, sizeof sr, "%s", rnd(2) ? odd() : "\"refusal\""); break;
      default: break;
    }
  }
  static const char *const blocks[] = {
      "{\"type\":\"text\",\"text\":\"\"}",
      "{\"type\":\"text\",\"text\":\"start \\\"piece\\\" \\u00e9\"}",
      "{\"type\":\"tool_use\",\"id\":\"tu9\",\"name\":\"notes__add\",\"input\":{}}",
      "{\"type\":\"thinking\",\"thinking\":\"hm\",\"signature\":\"\"}",
      "{\"type\":\"redacted_thinking\",\"data\":\"xyz\"}",
      "{\"type\":\"server_tool_use\",\"id\":\"s2\",\"name\":\"web\",\"input\":{\"q\":[1,2.5,{}]}}",
      "{\"type\":\"tool_use\",\"id\":\"a\",\"id\":\"b\",\"name\":\"echo\"}",
      "{\"Type\":\"text\",\"type\":\"text\",\"text\":\"x\"}",
      "{\"type\":\"web_search_tool_result\",\"content\":[{\"type\":\"r\",\"n\":12345678901234567}]}",
      "{\"type\":\"text\",\"text\":\"x\",\"n\":-5,\"z\":0,\"e\":{},\"a\":[ ],\"t\":true,"
      "\"f\":false,\"u\":null,\"s\":\"\\ud83d\\ude00\\u0000\"}",
      "{\"type\":\"thinking\",\"thinking\":\"a\",\"n\":1.5,\"m\":-0,\"o\":{\"x\":1}}",
      "[\"not an object\"]",
      "null",
  };
  int kind = (int)rnd(6), nb = plain ? 7 : 13;
  const char *type = kind == 0   ? "message_start"
                     : kind == 1 ? "content_block_start"
                     : kind == 2 ? "content_block_stop"
                     : kind == 3 ? "message_delta"
                     : kind == 4 ? "message_stop"
                                 : "ping";
  if (!plain && rnd(8) == 0) type = rnd(2) ? "message_st\\u0061rt" : "error";
  sbuf_printf(&b, "{%s\"type\":\"%s\"", n1, type);
  switch (kind) {
    case 0:
      sbuf_printf(&b, ",\"message\":{%s\"id\":\"msg_1\",\"type\":\"message\",\"content\":[],"
                      "\"stop_reason\":null,\"usage\":{\"input_tokens\":%s,\"output_tokens\":1%s}}",
                  n2, num, plain || rnd(2) ? "" : ",\"cache_read_input_tokens\":7");
      if (!plain && rnd(4) == 0) sbuf_puts(&b, ",\"usage\":{\"input_tokens\":1000}");
      break;
    case 1:
      sbuf_printf(&b, ",\"index\":%s,\"content_block\":%s", index, blocks[rnd((unsigned)nb)]);
      break;
    case 2:
      sbuf_printf(&b, ",\"index\":%s", index);
      break;
    case 3:
      sbuf_printf(&b, ",\"delta\":{%s\"stop_reason\":%s,\"stop_sequence\":null%s}", n2, sr,
                  plain || rnd(2) ? "" : ",\"stop_details\":{\"category\":\"c\",\"explanation\":\"e\"}");
      sbuf_printf(&b, ",\"usage\":{\"output_tokens\":%s}", num);
      break;
    default: break;
  }
  if (!plain && rnd(6) == 0) sbuf_printf(&b, ",\"%s\":1", rnd(2) ? "TYPE" : "index\":2,\"index");
  sbuf_printf(&b, "%s}", n3);
  free(n1), free(n2), free(n3);
  return sbuf_take(&b);
}

/* Random damage: a cut, a flipped or inserted byte, trailing bytes. */
static void damage(char *s) {
  size_t n = strlen(s);
  if (!n) return;
  switch (rnd(5)) {
    case 0: s[rnd((unsigned)n)] = 0; break;
    case 1: s[rnd((unsigned)n)] ^= (char)(1u << rnd(8)); break;
    case 2: s[rnd((unsigned)n)] = "\"\\{}[],:0 \x80"[rnd(11)]; break;
    case 3: if (n > 2) s[n - 1] = ' '; break;
    default: break;
  }
  if (rnd(8) == 0) { /* something after the object */
    static const char *const tails[] = {"x", "}", " {}", "\t", ",", "\xef\xbb\xbf"};
    const char *t = tails[rnd(6)];
    size_t k = strlen(s), m = strlen(t);
    memmove(s + k, t, m + 1); /* callers leave room */
  }
  /* the stream framing stays: no raw line breaks */
  for (char *p = s; *p; p++)
    if (*p == '\n' || *p == '\r') *p = ' ';
}

static struct llm_client *client(void) {
  cJSON *j = cJSON_Parse(
      "[{\"name\":\"o\",\"kind\":\"openai\",\"base_url\":\"http://x/v1\",\"model\":\"m\"},"
      "{\"name\":\"a\",\"kind\":\"anthropic\",\"base_url\":\"http://x/v1\",\"model\":\"c\"}]");
  struct llm_client *c = NULL;
  struct err e = {0};
  if (llm_client_from_json(j, "test", &c, &e)) fprintf(stderr, "client: %s\n", e.msg);
  cJSON_Delete(j);
  return c;
}

static void test_plain_events_take_the_fast_path(const struct llm_provider *o,
                                                 const struct llm_provider *a) {
  for (int i = 0; i < 50; i++) {
    char *c = openai_chunk(true);
    char *s = openai_stream(c);
    /* the role chunk, the chunk, the arguments, the finish and the usage
     * chunks; [DONE] is not */
    CHECK_INT(same_both_ways(o, s, "a plain chunk"), 5);
    free(s);
    free(c);
    char *ev = anthropic_event(true);
    s = anthropic_stream(ev);
    CHECK_INT(same_both_ways(a, s, "a plain delta"), 11); /* every event */
    free(s);
    free(ev);
    ev = anthropic_other(true);
    s = anthropic_stream(ev);
    CHECK_INT(same_both_ways(a, s, ev), 11);
    free(s);
    free(ev);
  }
  /* the shapes the mock server and the real APIs send */
  static const char *const chunks[] = {
      "{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi \\\"there\\\"\\n\"},"
      "\"finish_reason\":null}]}",
      "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"caf\\u00e9 \\ud83d\\ude00\"}}]}",
      "{\"choices\":[{\"delta\":{\"content\":\"no index\"}}]}",
      "{\"choices\":[{\"index\":1,\"delta\":{\"content\":\"b\"}},{\"index\":0,\"delta\":"
      "{\"content\":\"a\"}}]}",
      "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\","
      "\"type\":\"function\",\"function\":{\"name\":\"notes__add\",\"arguments\":\"\"}}]}}]}",
      "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
      "{\"arguments\":\"{\\\"x\\\":\"}}]}}]}",
      "{\"choices\":null}",
      "{\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}",
      "{\"choices\":[{\"index\":0,\"delta\":null,\"finish_reason\":\"length\"}]}",
  };
  for (size_t i = 0; i < sizeof chunks / sizeof *chunks; i++) {
    char *s = openai_stream(chunks[i]);
    CHECK_INT(same_both_ways(o, s, chunks[i]), 5);
    free(s);
  }
  /* usage objects, each count read as llm__usage_json reads it (a
   * negative count is a number, so the details' count is not used) */
  static const char *const usages[] = {
      "{\"prompt_tokens\":1,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":3}}",
      "{\"cache_read_input_tokens\":-3,\"prompt_tokens_details\":{\"cached_tokens\":4}}",
      "{\"cache_read_input_tokens\":null,\"prompt_tokens_details\":{\"cached_tokens\":4}}",
      "{\"prompt_tokens_details\":[{\"cached_tokens\":4}],\"cache_creation_input_tokens\":5}",
      "{\"completion_tokens\":\"9\",\"prompt_tokens\":true,\"cache_creation_input_tokens\":-3}",
      "{\"prompt_tokens_details\":{\"cached_tokens\":{},\"x\":1},\"prompt_tokens\":0}",
      "[1,2]", "null", "\"usage\"", "{}", "7"};
  for (size_t i = 0; i < sizeof usages / sizeof *usages; i++) {
    struct sbuf c = {0};
    sbuf_printf(&c, "{\"id\":\"x\",\"choices\":[],\"usage\":%s}", usages[i]);
    char *s = openai_stream(c.s);
    CHECK_INT(same_both_ways(o, s, c.s), 5);
    free(s);
    sbuf_free(&c);
    sbuf_printf(&c, "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},"
                    "\"usage\":%s}", usages[i]);
    s = anthropic_stream(c.s);
    CHECK_INT(same_both_ways(a, s, c.s), 11);
    free(s);
    sbuf_free(&c);
  }
}

static void test_hostile(const struct llm_provider *o, const struct llm_provider *a) {
  char *s;
  for (int i = 0; i < 6000; i++) {
    bool plain = rnd(5) == 0;
    char *c = i % 2 ? openai_chunk(plain) : rnd(2) ? anthropic_event(plain) : anthropic_other(plain);
    if (rnd(3) == 0) {
      c = xrealloc(c, strlen(c) + 8);
      damage(c);
    }
    /* a plain event, then this one twice: the reader resumes after a
     * prefix it kept from an earlier event (llm_fast.c's memo) whenever
     * this one starts with the same bytes */
    char *pl = i % 2 ? openai_chunk(true) : anthropic_event(true);
    struct sbuf cc = {0};
    sbuf_printf(&cc, "%s\n\ndata: %s\n\ndata: %s", pl, c, c);
    s = i % 2 ? openai_stream(cc.s) : anthropic_stream(cc.s);
    same_both_ways(i % 2 ? o : a, s, c);
    sbuf_free(&cc);
    free(pl);
    free(s);
    free(c);
  }
  /* nesting deeper than the full parse takes (512) is its error, not ours */
  struct sbuf deep = {0};
  sbuf_puts(&deep, "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}],\"x\":");
  for (int i = 0; i < 600; i++) sbuf_puts(&deep, "[");
  for (int i = 0; i < 600; i++) sbuf_puts(&deep, "]");
  sbuf_puts(&deep, "}");
  s = openai_stream(deep.s);
  same_both_ways(o, s, "600 levels deep");
  free(s);
  sbuf_free(&deep);
  /* a malformed chunk is the same error either way */
  s = openai_stream("{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\\ud800\"}}]}");
  char *r = outcome(o, s, strlen(s), true, &(long){0});
  CHECK_CONTAINS(r, "provider_error");
  CHECK_CONTAINS(r, "lone UTF-16 surrogate");
  free(r);
  free(s);
  /* invalid UTF-8 is kept as U+FFFD and counted, by the full parse */
  s = openai_stream("{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\xff" "b\"}}]}");
  r = outcome(o, s, strlen(s), true, &(long){0});
  CHECK_CONTAINS(r, "a\xef\xbf\xbd" "b");
  CHECK_CONTAINS(r, "bad_utf8=1");
  free(r);
  free(s);
}

/* The SSE layer joins a line before the reader sees it, wherever curl
 * cut it: every split point of a stream full of escapes and surrogate
 * pairs, in two pieces and in three, reads as the whole stream does. */
static void test_every_split(const struct llm_provider *o, const struct llm_provider *a) {
  const char *streams[2] = {
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\\\"b\\\\c\\u00e9\\ud83d\\ude00"
      "\xf0\x9f\x98\x80}\"}}]}\r\n\r\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\\u0031\","
      "\"function\":{\"name\":\"echo\",\"arguments\":\"{\\\"s\\\":\\\"}\\\"}\"}}]}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}],"
      "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\r\rdata: [DONE]\n\n",
      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":"
      "{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"
      "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
      "\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\\u00e9\",\"name\":\"echo\",\"input\":{}}}\n\n"
      "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
      "\"input_json_delta\",\"partial_json\":\"{\\\"k\\\": \\\"\\\\ud83d\\\\ude00\\\"}\"}}\r\n\r\n"
      "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
      "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":"
      "{\"output_tokens\":9}}\n\ndata: {\"type\":\"message_stop\"}\n\n",
  };
  for (int k = 0; k < 2; k++) {
    const struct llm_provider *p = k ? a : o;
    const char *st = streams[k];
    size_t len = strlen(st);
    long f0 = 0;
    char *whole = outcome(p, st, len, false, &f0);
    CHECK_CONTAINS(whole, "rc=0");
    for (size_t cut = 1; cut < len; cut++) {
      for (int three = 0; three < 2; three++) {
        size_t cut2 = three ? cut + rnd((unsigned)(len - cut)) : len;
        const char *pieces[3] = {st, st + cut, st + cut2};
        size_t lens[3] = {cut, cut2 - cut, len - cut2};
        cJSON *tools = cJSON_Parse("[{\"name\":\"echo\"},{\"name\":\"notes.add\"}]");
        struct llm_request req = {.tools = tools};
        struct sbuf tr = {0};
        struct llm_callbacks cb = {on_text, on_tool_start, on_tool_args, NULL, &tr};
        struct llm_response r;
        struct err e = {0};
        long fe = 0;
        int rc = llm__replay(p, &req, pieces, lens, three ? 3 : 2, true, &cb, &r, &fe, &e);
        CHECK_INT(rc, 0);
        CHECK_INT(fe, k ? 6 : 3);
        /* the callbacks in the same order as the unsplit full reading */
        struct sbuf head = {0};
        sbuf_append(&head, whole, (size_t)(strchr(whole, '\n') - whole));
        CHECK_STR(tr.s ? tr.s : "", head.s ? head.s : "");
        sbuf_free(&head);
        sbuf_free(&tr);
        llm_response_free(&r);
        cJSON_Delete(tools);
      }
    }
    free(whole);
  }
}

/* The prefix memo resumed deep inside an event: after a chunk that ends
 * its prefix at the first choice's delta value (OpenAI) or at the text
 * or partial_json value of a delta (Anthropic), events that share those
 * bytes and then differ in what the reader had seen by then (an index, a
 * finish_reason, a key given again, in another case or escaped), hold
 * nested or huge members nobody reads, are cut short, have a NUL inside,
 * or continue as another shape. Each is read after the plain event and
 * twice, so it is also resumed from its own prefix. */
static void test_deep_memo(const struct llm_provider *o, const struct llm_provider *a) {
  static const char *const oa_pre[] = {
      "{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":",
      "{\"id\":\"x\",\"choices\":[{\"index\":1,\"delta\":",
      "{\"id\":\"x\",\"choices\":[{\"delta\":",
      "{\"id\":\"x\",\"choices\":[{\"index\":null,\"delta\":",
      "{\"id\":\"x\",\"choices\":[{\"logprobs\":{\"a\":[1,{\"b\":\"}\"}]},\"index\":0,\"delta\":",
      "{\"id\":\"x\",\"choices\":[{\"finish_reason\":\"length\",\"index\":0,\"delta\":",
      "{\"id\":\"x\", \"choices\" : [ { \"index\" : 0 , \"delta\" : ",
  };
  static const char *const oa_tail[] = {
      "{\"content\":\"a\"}}]}",
      "{\"content\":\"a\"},\"finish_reason\":null}]}",
      "{\"content\":\"a\"},\"finish_reason\":\"length\"}]}",
      "{\"content\":\"a\"},\"finish_reason\":\"stop\",\"finish_reason\":null}]}",
      "{\"content\":\"a\"},\"index\":0}]}",
      "{\"content\":\"a\"},\"index\":1}]}",
      "{\"content\":\"a\"},\"Index\":1}]}",
      "{\"content\":\"a\"},\"\\u0069ndex\":1}]}",
      "{\"content\":\"a\"},\"delta\":{\"content\":\"b\"}}]}",
      "{\"content\":\"a\"},\"DELTA\":{\"content\":\"b\"}}]}",
      "{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"echo\"}}]},"
      "\"delta\":{\"content\":\"b\"}}]}",
      "{\"content\":\"a\",\"content\":\"b\"}}]}",
      "{\"content\":\"a\\u0000\\ud83d\\ude00\\\"\\\\\"}}]}",
      "{\"content\":\"caf\u00c3\u00a9\"}}]}",
      "{\"content\":\"a\"},\"x\":{\"y\":[1,{\"z\":\"}]\\\"\"}],\"w\":{}}}]}",
      "{\"content\":\"a\"},\"n\":123456789012345678901234567890}]}",
      "{\"content\":\"a\"},\"n\":1e400}]}",
      "{\"content\":\"a\"},\"n\":-0.5}]}",
      "{\"content\":\"a\"}},{\"index\":0,\"delta\":{\"content\":\"second\"}}]}",
      "{\"content\":\"a\"}},{\"index\":1,\"delta\":{\"content\":\"second\"}}]}",
      "{\"content\":\"a\"}},7]}",
      "{\"content\":\"a\"}}],\"choices\":[]}",
      "{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}",
      "{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":1e3}}",
      "{\"content\":\"a\"}}],\"error\":{\"message\":\"x\"}}",
      "{\"content\":\"a\"}}],\"error\":null}",
      "{\"content\":\"a\"}}],\"id\":\"again\"}",
      "{\"content\":\"a\"}}]",
      "{\"content\":\"a\"}}]}x",
      "{\"content\":\"a\"}}]} ",
      "{\"content\":\"a\"}",
      "{\"content\":\"a",
      "{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"echo\",\"arguments\":\"\"}}]}}]}",
      "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"s\\\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}",
      "{\"refusal\":\"no\"}}]}",
      "{}}]}",
      "null}]}",
      "[]}]}",
      "\"x\"}]}",
  };
  for (size_t i = 0; i < sizeof oa_pre / sizeof *oa_pre; i++) {
    for (size_t j = 0; j < sizeof oa_tail / sizeof *oa_tail; j++) {
      struct sbuf c = {0}, cc = {0};
      sbuf_printf(&c, "%s%s", oa_pre[i], oa_tail[j]);
      /* the plain chunk keeps the first prefix, then this one twice with
       * a chunk between that keeps no prefix (something comes before its
       * choices) but finishes otherwise, so what the second reading of
       * this one finishes with is the stream's */
      sbuf_printf(&cc, "data: %s{\"content\":\"p\"}}]}\n\ndata: %s\n\n"
                       "data: {\"usage\":null,\"choices\":[{\"index\":0,\"delta\":"
                       "{\"content\":\"-\"},\"finish_reason\":\"stop\"}]}\n\n"
                       "data: %s\n\ndata: [DONE]\n\n",
                  oa_pre[0], c.s, c.s);
      same_both_ways(o, cc.s, c.s);
      sbuf_free(&cc);
      sbuf_free(&c);
    }
  }
  static const char *const an_pre[] = {
      "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":",
      "{\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":",
      "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":",
      "{\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":",
      "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"partial_json\":",
      "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"text\":",
      "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"x\":[{}],\"type\":\"text_delta\",\"text\":",
      "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"stop_reason\":\"x\",\"type\":\"text_delta\",\"text\":",
      "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"text\":\"t\",\"type\":\"input_json_delta\",\"partial_json\":",
      "{\"type\":\"message_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":",
      "{\"type\" : \"content_block_delta\" , \"index\" : 0 , \"delta\" : { \"type\" : \"text_delta\" , \"text\" : ",
  };
  static const char *const an_tail[] = {
      "\"a\"}}",
      "\"a\\n\\u00e9\\ud83d\\ude00\\u0000\"}}",
      "\"a\"},\"type\":\"content_block_delta\"}",
      "\"a\"},\"type\":\"content_block_start\"}",
      "\"a\"},\"type\":\"c\\u006fntent_block_delta\"}",
      "\"a\"},\"index\":1}",
      "\"a\"},\"index\":0}",
      "\"a\"},\"Index\":1}",
      "\"a\",\"type\":\"text_delta\"}}",
      "\"a\",\"type\":\"input_json_delta\"}}",
      "\"a\",\"TYPE\":\"x\"}}",
      "\"a\",\"text\":\"b\"}}",
      "\"a\",\"partial_json\":\"b\"}}",
      "\"a\",\"text\":\"b\",\"partial_json\":\"c\"}}",
      "\"a\",\"stop_reason\":\"end_turn\"}}",
      "\"a\",\"stop_details\":{\"k\":[1,2,{\"z\":null}]}}}",
      "\"a\",\"n\":123456789012345678901234567890}}",
      "\"a\"},\"usage\":{\"output_tokens\":3}}",
      "\"a\"},\"usage\":{\"output_tokens\":3.5}}",
      "\"a\"},\"delta\":{}}",
      "\"a\"},\"content_block\":{\"type\":\"text\",\"text\":\"\"}}",
      "\"a\"},\"message\":{\"usage\":{\"input_tokens\":1}}}",
      "\"a\"}",
      "\"a\"}}x",
      "\"a\"}} ",
      "\"a",
      "null}}",
      "7}}",
      "{\"x\":\"y\"}}}",
      "[\"a\"]}}",
  };
  for (size_t i = 0; i < sizeof an_pre / sizeof *an_pre; i++) {
    for (size_t j = 0; j < sizeof an_tail / sizeof *an_tail; j++) {
      struct sbuf c = {0}, cc = {0};
      sbuf_printf(&c, "%s%s", an_pre[i], an_tail[j]);
      sbuf_printf(&cc, "%s\"p\"}}\n\ndata: %s\n\ndata: {\"type\":\"ping\"}\n\ndata: %s", an_pre[0],
                  c.s, c.s);
      char *s = anthropic_stream(cc.s);
      same_both_ways(a, s, c.s);
      free(s);
      sbuf_free(&cc);
      sbuf_free(&c);
    }
  }
  /* a NUL in the data: the readers see the length SSE gives; the full
   * parse reads up to the NUL, and so the fast path leaves it there */
  static const char nul_oa[] = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"p\"}}]}\n\n"
                               "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}"
                               "\0{\"x\":1}\n\n"
                               "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\0c\"}}]}\n\n"
                               "data: [DONE]\n\n";
  same_both_ways_n(o, nul_oa, sizeof nul_oa - 1, "a NUL inside a chunk");
  static const char nul_an[] = "data: {\"type\":\"content_block_start\",\"index\":0,"
                               "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
                               "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
                               "{\"type\":\"text_delta\",\"text\":\"a\"}}\0 {\n\n"
                               "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":"
                               "{\"type\":\"text_delta\",\"text\":\"b\0\"}}\n\n"
                               "data: {\"type\":\"message_stop\"}\n\n";
  same_both_ways_n(a, nul_an, sizeof nul_an - 1, "a NUL inside an event");
}

/* Keys one byte off a wanted one, at every position (and one byte short
 * or long), in the chunks and events the readers match keys in place: a
 * key is wanted only when every byte and the closing quote match. */
static void test_near_keys(const struct llm_provider *o, const struct llm_provider *a) {
  static const char *const oa_fmt[] = {
      "{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"%s\":\"a\"}}]}",
      "{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"%s\":\"stop\"}]}",
      "{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"%s\":[{\"index\":0,\"function\":"
      "{\"arguments\":\"{}\"}}]}}]}",
      "{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
      "{\"%s\":\"{}\"}}]}}]}",
      "{\"id\":\"x\",\"choices\":[],\"usage\":{\"%s\":4,\"completion_tokens\":2}}",
      "{\"id\":\"x\",\"%s\":[{\"index\":1,\"delta\":{\"content\":\"a\"}}]}",
      "{\"id\":\"x\",\"choices\":[{\"%s\":1,\"delta\":{\"content\":\"a\"}}]}",
      "{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"%s\":\"c\","
      "\"function\":{\"name\":\"echo\"}}]}}]}",
  };
  static const char *const oa_key[] = {"content", "finish_reason", "tool_calls", "arguments",
                                       "prompt_tokens", "choices", "index", "id"};
  static const char *const an_fmt[] = {
      "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"%s\":\"a\"}}",
      "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\","
      "\"%s\":\"{}\"}}",
      "{\"type\":\"content_block_delta\",\"%s\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}",
      "{\"type\":\"message_delta\",\"delta\":{\"%s\":\"max_tokens\"},\"usage\":{\"output_tokens\":9}}",
      "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"%s\":9}}",
  };
  static const char *const an_key[] = {"text", "partial_json", "index", "stop_reason",
                                       "output_tokens"};
  for (int w = 0; w < 2; w++) {
    size_t nf = w ? sizeof an_fmt / sizeof *an_fmt : sizeof oa_fmt / sizeof *oa_fmt;
    for (size_t f = 0; f < nf; f++) {
      const char *k = w ? an_key[f] : oa_key[f];
      size_t n = strlen(k);
      for (size_t pos = 0; pos <= n + 1; pos++) {
        char near[64];
        if (pos == n) { /* one byte short */
          snprintf(near, sizeof near, "%.*s", (int)n - 1, k);
        } else if (pos == n + 1) { /* one byte long */
          snprintf(near, sizeof near, "%sx", k);
        } else {
          snprintf(near, sizeof near, "%s", k);
          near[pos] = near[pos] == 'x' ? 'y' : 'x';
        }
        for (int exact = 0; exact < 2; exact++) {
          struct sbuf c = {0};
          sbuf_printf(&c, w ? an_fmt[f] : oa_fmt[f], exact ? k : near);
          char *s = w ? anthropic_stream(c.s) : openai_stream(c.s);
          same_both_ways(w ? a : o, s, c.s);
          free(s);
          sbuf_free(&c);
        }
      }
    }
  }
}

/* Values far larger than a chunk usually is: a 70 KB text piece with
 * escapes, and a huge member nobody reads, either way. */
static void test_huge(const struct llm_provider *o, const struct llm_provider *a) {
  struct sbuf c = {0};
  sbuf_printf(&c, "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"}}],\"pad\":\"%s\"}",
              huge.s, huge.s);
  char *st = openai_stream(c.s);
  CHECK_INT(same_both_ways(o, st, "huge"), 5);
  free(st);
  sbuf_free(&c);
  sbuf_printf(&c, "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
                  "\"text_delta\",\"text\":\"%s\"},\"pad\":[\"%s\"]}",
              huge.s, huge.s);
  st = anthropic_stream(c.s);
  CHECK_INT(same_both_ways(a, st, "huge"), 11);
  free(st);
  sbuf_free(&c);
}

int main(void) {
  for (int i = 0; i < 7000; i++) /* a huge string body, escapes now and then */
    sbuf_puts(&huge, i % 97 == 0 ? "\\\"q\\u00e9\\ud83d\\ude00" : i % 13 ? "abcdefghij" : "\\n{}[]");
  struct llm_client *c = client();
  CHECK(c != NULL);
  if (!c) return TEST_END();
  const struct llm_provider *o = llm_client_provider(c, 0), *a = llm_client_provider(c, 1);
  test_plain_events_take_the_fast_path(o, a);
  test_hostile(o, a);
  test_every_split(o, a);
  test_deep_memo(o, a);
  test_near_keys(o, a);
  test_huge(o, a);
  /* the hostile cases reached both paths: some fast, most not */
  CHECK(fast_total > cases);
  printf("%ld streams, %ld events on the fast path\n", cases, fast_total);
  llm_client_free(c);
  sbuf_free(&huge);
  return TEST_END();
}
