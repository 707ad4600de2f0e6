/* test_json.c - the strict parser, the printer, canonical form, hash and
 * equality (src/base/json.c). Each refusal class of RFC 8259 is tried, with the
 * exact message for each; cJSON's own parser (what main used) accepts most
 * of these inputs, which is what this module replaces. */
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <sodium.h>
#include <string.h>

#include "json.h"
#include "test.h"
#include "util.h"

/* Parses s (n bytes; 0: strlen) and returns the canonical text or NULL. */
static char *canon_of(const char *s, size_t n, unsigned flags, struct err *e) {
  cJSON *v = NULL;
  err_clear(e);
  if (json_parse(s, n ? n : strlen(s), flags, &v, e)) return NULL;
  char *t = json_canonical(v);
  cJSON_Delete(v);
  return t;
}

struct accept_case {
  const char *in;
  size_t n;
  const char *out; /* canonical print */
};

static const struct accept_case accepts[] = {
    {"[1]", 0, "[1]"},
    {" \t\n\r{ } \r\n", 0, "{}"},
    {"[ ]", 0, "[]"},
    {"[true,false,null]", 0, "[true,false,null]"},
    {"\"\"", 0, "\"\""},
    {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", 0, "\"\\\"\\\\/\\b\\f\\n\\r\\t\""},
    {"\"a\\u0000b\"", 0, "\"a\\u0000b\""},
    {"\"\\u00e9\\u20AC\"", 0, "\"\xC3\xA9\xE2\x82\xAC\""},
    {"\"\\ud834\\udd1e\"", 0, "\"\xF0\x9D\x84\x9E\""},
    {"\"\xF4\x8F\xBF\xBF\"", 0, "\"\xF4\x8F\xBF\xBF\""}, /* U+10FFFF */
    {"\"\\u001f\\u007f\"", 0, "\"\\u001f\x7F\""},
    {"0", 0, "0"},
    {"-0", 0, "0"},
    {"-0.0e0", 0, "0"},
    {"1E+2", 0, "100"},
    {"1e-2", 0, "0.01"},
    {"0.1", 0, "0.1"},
    {"-12.5e-1", 0, "-1.25"},
    {"1e-400", 0, "0"}, /* underflow is zero, not an error */
    {"1e300", 0, "1e+300"},
    {"9007199254740991", 0, "9007199254740991"},
    {"12345678901234567890", 0, "12345678901234567890"},
    {"-9007199254740993", 0, "-9007199254740993"},
    {"[123456789012345678901234567890]", 0, "[123456789012345678901234567890]"},
    {"{\"b\":1,\"a\":[{\"d\":1,\"c\":2}]}", 0, "{\"a\":[{\"c\":2,\"d\":1}],\"b\":1}"},
};

struct refuse_case {
  const char *in;
  size_t n;
  const char *msg; /* the exact message */
};

static const struct refuse_case refuses[] = {
    /* trailing content */
    {"[1]x", 0, "invalid JSON at byte 3: unexpected content after the value"},
    {"[][]", 0, "invalid JSON at byte 2: unexpected content after the value"},
    {"{} {}", 0, "invalid JSON at byte 3: unexpected content after the value"},
    {"1\0", 2, "invalid JSON at byte 1: unexpected content after the value"},
    /* numbers */
    {"-01", 0, "invalid JSON at byte 2: leading zero in number"},
    {"{\"a\":-01}", 0, "invalid JSON at byte 7: leading zero in number"},
    {"00", 0, "invalid JSON at byte 1: leading zero in number"},
    {"2.", 0, "invalid JSON at byte 2: unexpected end of input, expected a digit after the decimal point"},
    {"2.e3", 0, "invalid JSON at byte 2: unexpected character 'e', expected a digit after the decimal point"},
    {".5", 0, "invalid JSON at byte 0: unexpected character '.', expected a value"},
    {"+1", 0, "invalid JSON at byte 0: unexpected character '+', expected a value"},
    {"-", 0, "invalid JSON at byte 1: unexpected end of input, expected a digit in a number"},
    {"1e", 0, "invalid JSON at byte 2: unexpected end of input, expected a digit in the exponent"},
    {"1e+", 0, "invalid JSON at byte 3: unexpected end of input, expected a digit in the exponent"},
    {"[1 2]", 0, "invalid JSON at byte 3: unexpected character '2', expected ',' or ']' in an array"},
    {"0x1F", 0, "invalid JSON at byte 1: unexpected content after the value"},
    {"NaN", 0, "invalid JSON at byte 0: unexpected character 'N', expected a value"},
    {"-Infinity", 0, "invalid JSON at byte 1: unexpected character 'I', expected a digit in a number"},
    {"1e400", 0, "invalid JSON at byte 0: number out of range"},
    {"[-1e999]", 0, "invalid JSON at byte 1: number out of range"},
    /* strings */
    {"\"\\uqqqq\"", 0, "invalid JSON at byte 1: invalid \\u escape (expected four hex digits)"},
    {"\"\\u12\"", 0, "invalid JSON at byte 1: invalid \\u escape (expected four hex digits)"},
    {"\"\\x\"", 0, "invalid JSON at byte 1: invalid escape '\\x' in a string"},
    {"\"\\'\"", 0, "invalid JSON at byte 1: invalid escape '\\'' in a string"},
    {"\"a\nb\"", 0, "invalid JSON at byte 2: control character 0x0A in a string must be escaped"},
    {"\"\t\"", 0, "invalid JSON at byte 1: control character 0x09 in a string must be escaped"},
    {"\"a\0b\"", 5, "invalid JSON at byte 2: control character 0x00 in a string must be escaped"},
    {"\"abc", 0, "invalid JSON at byte 0: unterminated string"},
    {"\"abc\\", 0, "invalid JSON at byte 0: unterminated string"},
    {"'a'", 0, "invalid JSON at byte 0: unexpected character ''', expected a value"},
    /* lone surrogates in \u escapes: refused (they have no UTF-8 form) */
    {"\"\\ud800\"", 0, "invalid JSON at byte 1: lone UTF-16 surrogate \\uD800 (not followed by a low surrogate)"},
    {"\"\\ud800\\u0041\"", 0, "invalid JSON at byte 1: lone UTF-16 surrogate \\uD800 (not followed by a low surrogate)"},
    {"\"\\udc00\"", 0, "invalid JSON at byte 1: lone UTF-16 surrogate \\uDC00 (a low surrogate without a high one)"},
    /* invalid UTF-8 */
    {"\"\xC0\x80\"", 0, "invalid JSON at byte 1: invalid UTF-8 (overlong encoding)"},
    {"\"\xE0\x80\xAF\"", 0, "invalid JSON at byte 1: invalid UTF-8 (overlong encoding)"},
    {"\"\xF0\x82\x82\xAC\"", 0, "invalid JSON at byte 1: invalid UTF-8 (overlong encoding)"},
    {"\"\xED\xA0\x80\"", 0, "invalid JSON at byte 1: invalid UTF-8 (UTF-16 surrogate encoded in UTF-8)"},
    {"\"\xF4\x90\x80\x80\"", 0, "invalid JSON at byte 1: invalid UTF-8 (code point above U+10FFFF)"},
    {"\"ab\xE2\x82\"", 0, "invalid JSON at byte 3: invalid UTF-8 (truncated sequence)"},
    {"\"\xE2\x82", 0, "invalid JSON at byte 1: invalid UTF-8 (truncated sequence)"},
    {"\"\x80\"", 0, "invalid JSON at byte 1: invalid UTF-8 (unexpected continuation byte)"},
    {"\"\xFF\"", 0, "invalid JSON at byte 1: invalid UTF-8 (invalid byte)"},
    {"\xC3\xA9", 0, "invalid JSON at byte 0: unexpected byte 0xC3, expected a value"},
    /* structure */
    {"", 0, "invalid JSON at byte 0: no value (empty input)"},
    {" \n", 0, "invalid JSON at byte 2: no value (only whitespace)"},
    {"\xEF\xBB\xBF{}", 0, "invalid JSON at byte 0: byte order mark is not allowed"},
    {"\f1", 0, "invalid JSON at byte 0: unexpected byte 0x0C, expected a value"},
    {"[1,]", 0, "invalid JSON at byte 3: unexpected character ']', expected a value"},
    {"{\"a\":1,}", 0, "invalid JSON at byte 7: unexpected character '}', expected a key (a string)"},
    {"{\"a\" 1}", 0, "invalid JSON at byte 5: unexpected character '1', expected ':' after a key"},
    {"{1:1}", 0, "invalid JSON at byte 1: unexpected character '1', expected a key (a string) or '}'"},
    {"[", 0, "invalid JSON at byte 1: unexpected end of input, expected a value"},
    {"{\"a\":1", 0, "invalid JSON at byte 6: unexpected end of input, expected ',' or '}' in an object"},
    {"nul", 0, "invalid JSON at byte 3: unexpected end of input in 'null'"},
    {"tru e", 0, "invalid JSON at byte 0: invalid literal (expected 'true')"},
    {"True", 0, "invalid JSON at byte 0: unexpected character 'T', expected a value"},
    {"[1] // c", 0, "invalid JSON at byte 4: unexpected content after the value"},
};

static void test_accept_refuse(void) {
  struct err e;
  for (size_t i = 0; i < sizeof accepts / sizeof *accepts; i++) {
    char *t = canon_of(accepts[i].in, accepts[i].n, 0, &e);
    if (!t) fprintf(stderr, "  input #%zu refused: %s\n", i, e.msg);
    CHECK_STR(t, accepts[i].out);
    free(t);
  }
  for (size_t i = 0; i < sizeof refuses / sizeof *refuses; i++) {
    char *t = canon_of(refuses[i].in, refuses[i].n, 0, &e);
    if (t) fprintf(stderr, "  input #%zu accepted as %s\n", i, t);
    CHECK(t == NULL);
    CHECK_INT(e.rc, ERR_INVALID);
    CHECK_STR(e.code, "invalid_json");
    CHECK_STR(e.msg, refuses[i].msg);
    free(t);
  }
  /* *out is NULL after an error; e may be NULL; NULL input is an error */
  cJSON *v = (cJSON *)&e;
  CHECK_INT(json_parse("[1]x", 4, 0, &v, NULL), ERR_INVALID);
  CHECK(v == NULL);
  CHECK_INT(json_parse(NULL, 0, 0, &v, &e), ERR_INVALID);
  CHECK_STR(e.msg, "invalid JSON at byte 0: no input");
  CHECK(json_parse_str(NULL, 0, NULL) == NULL);
  CHECK_INT(json_parse("1", 1, 0, NULL, &e), ERR_INVALID);
  /* the input need not be NUL-terminated: only n bytes are read */
  CHECK_INT(json_parse("[12]", 3, 0, &v, &e), ERR_INVALID);
  CHECK_STR(e.msg, "invalid JSON at byte 3: unexpected end of input, expected ',' or ']' in an array");
}

static void test_numbers(void) {
  cJSON *v = json_parse_str("[9007199254740993, 1.5, 42, -9223372036854775809, 1e20]", 0, NULL);
  CHECK(v != NULL);
  if (!v) return;
  const cJSON *a = cJSON_GetArrayItem(v, 0), *b = cJSON_GetArrayItem(v, 1),
              *c = cJSON_GetArrayItem(v, 2), *d = cJSON_GetArrayItem(v, 3),
              *f = cJSON_GetArrayItem(v, 4);
  CHECK_STR(a->valuestring, "9007199254740993"); /* exact text kept */
  CHECK(a->valuedouble == 9007199254740992.0);
  CHECK(b->valuestring == NULL && b->valuedouble == 1.5);
  CHECK(c->valuestring == NULL && c->valueint == 42);
  CHECK_STR(d->valuestring, "-9223372036854775809");
  CHECK(f->valuestring == NULL); /* an exponent form is not an integer text */
  char *t = json_print(v, 0);
  CHECK_STR(t, "[9007199254740993,1.5,42,-9223372036854775809,1e+20]");
  free(t);
  /* a copy keeps the text (cJSON_Duplicate copies valuestring) */
  cJSON *dup = cJSON_Duplicate(v, 1);
  t = json_print(dup, 0);
  CHECK_STR(t, "[9007199254740993,1.5,42,-9223372036854775809,1e+20]");
  free(t);
  cJSON_Delete(dup);
  cJSON_Delete(v);

  /* doubles print in the shortest form that reads back the same */
  static const struct {
    double d;
    const char *out;
  } nums[] = {{0.1, "0.1"},
              {1.0 / 3, "0.3333333333333333"},
              {0.30000000000000004, "0.30000000000000004"},
              {5e-324, "4.94065645841247e-324"},
              {-2.5, "-2.5"},
              {-0.0, "0"},
              {9007199254740992.0, "9007199254740992"},
              {123456789.0, "123456789"},
              {1e21, "1e+21"}};
  for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
    cJSON *n = cJSON_CreateNumber(nums[i].d);
    t = json_print(n, 0);
    CHECK_STR(t, nums[i].out);
    cJSON *back = json_parse_str(t, 0, NULL);
    CHECK(back && back->valuedouble == nums[i].d);
    cJSON_Delete(back);
    free(t);
    cJSON_Delete(n);
  }
  cJSON *arr = cJSON_CreateArray();
  cJSON_AddItemToArray(arr, cJSON_CreateNumber(NAN));
  cJSON_AddItemToArray(arr, cJSON_CreateNumber(INFINITY));
  cJSON_AddItemToArray(arr, cJSON_CreateNumber(-INFINITY));
  cJSON *big = cJSON_CreateNumber(18446744073709551616.0);
  big->valuestring = strdup("18446744073709551616");
  cJSON_AddItemToArray(arr, big);
  cJSON *bad = cJSON_CreateNumber(7);
  bad->valuestring = strdup("7; drop"); /* not a number: the double is printed */
  cJSON_AddItemToArray(arr, bad);
  t = json_print(arr, 0);
  CHECK_STR(t, "[null,null,null,18446744073709551616,7]");
  free(t);
  cJSON_Delete(arr);

  /* a decimal comma locale changes neither reading nor writing */
  if (setlocale(LC_NUMERIC, "de_DE.UTF-8") || setlocale(LC_NUMERIC, "fr_FR.UTF-8")) {
    v = json_parse_str("[0.5]", 0, NULL);
    t = json_print(v, 0);
    CHECK_STR(t, "[0.5]");
    free(t);
    cJSON_Delete(v);
    setlocale(LC_NUMERIC, "C");
  }
}

static void test_nul_round_trip(void) {
  const char *in = "{\"k\\u0000\":\"a\\u0000b\",\"k\":\"\\u0000\"}";
  cJSON *v = json_parse_str(in, JSON_NO_DUPLICATES, NULL);
  CHECK(v != NULL);
  if (!v) return;
  /* stored as C0 80 (the host's convention), never cut */
  CHECK_STR(v->child->string, "k\xC0\x80");
  CHECK_STR(v->child->valuestring, "a\xC0\x80" "b");
  CHECK_STR(v->child->next->valuestring, "\xC0\x80");
  char *t = json_print(v, 0);
  CHECK_STR(t, in);
  free(t);
  t = json_canonical(v);
  CHECK_STR(t, "{\"k\":\"\\u0000\",\"k\\u0000\":\"a\\u0000b\"}");
  free(t);
  cJSON_Delete(v);
}

static void test_duplicates(void) {
  struct err e;
  const char *two = "{\"path\":\"secrets/k.txt\",\"path\":\"ok.txt\"}";
  char *t = canon_of(two, 0, JSON_NO_DUPLICATES, &e);
  CHECK(t == NULL);
  CHECK_STR(e.code, "invalid_json");
  CHECK_STR(e.msg, "invalid JSON at byte 24: duplicate key \"path\"");
  /* without the flag one member remains, with the last value */
  cJSON *v = json_parse_str(two, 0, NULL);
  CHECK_INT(cJSON_GetArraySize(v), 1);
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(v, "path")), "ok.txt");
  cJSON_Delete(v);
  v = json_parse_str("{\"a\":1,\"b\":2,\"a\":3}", 0, NULL);
  t = json_print(v, 0);
  CHECK_STR(t, "{\"a\":3,\"b\":2}"); /* at the first one's place */
  free(t);
  cJSON_Delete(v);

  static const struct refuse_case dups[] = {
      {"[{\"x\":{\"a\":1,\"a\":1}}]", 0, "invalid JSON at byte 13: duplicate key \"a\""},
      {"{\"a\":1,\"\\u0061\":2}", 0, "invalid JSON at byte 7: duplicate key \"a\""},
      {"{\"a\\u0000\":1,\"a\\u0000\":2}", 0, "invalid JSON at byte 13: duplicate key \"a\\u0000\""},
      {"{\"q\\\"\\n\":1,\"q\\\"\\n\":2}", 0, "invalid JSON at byte 11: duplicate key \"q\\\"\\n\""},
  };
  for (size_t i = 0; i < sizeof dups / sizeof *dups; i++) {
    t = canon_of(dups[i].in, 0, JSON_NO_DUPLICATES, &e);
    CHECK(t == NULL);
    CHECK_STR(e.msg, dups[i].msg);
    free(t);
  }
  /* a key and the same key cut at a NUL are two keys, not one */
  t = canon_of("{\"path\":1,\"path\\u0000x\":2}", 0, JSON_NO_DUPLICATES, &e);
  CHECK_STR(t, "{\"path\":1,\"path\\u0000x\":2}");
  free(t);
  /* a long key is shown cut */
  struct sbuf b = {0};
  char key[301];
  memset(key, 'k', 300);
  key[300] = 0;
  sbuf_printf(&b, "{\"%s\":1,\"%s\":2}", key, key);
  t = canon_of(b.s, 0, JSON_NO_DUPLICATES, &e);
  CHECK(t == NULL);
  CHECK_STR(e.msg, "invalid JSON at byte 306: duplicate key "
                   "\"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...\"");
  sbuf_free(&b);

  /* many keys: the hashed lookup finds a repeat at the end, and 100,000
   * distinct keys parse in linear time (a quadratic scan would time out) */
  sbuf_puts(&b, "{");
  for (int i = 0; i < 100000; i++) sbuf_printf(&b, "\"k%d\":%d,", i, i);
  sbuf_puts(&b, "\"k77\":-1}");
  t = canon_of(b.s, 0, JSON_NO_DUPLICATES, &e);
  CHECK(t == NULL);
  CHECK_CONTAINS(e.msg, "duplicate key \"k77\"");
  v = json_parse_str(b.s, 0, NULL);
  CHECK_INT(cJSON_GetArraySize(v), 100000);
  CHECK_INT(cJSON_GetObjectItem(v, "k77")->valueint, -1);
  CHECK_INT(cJSON_GetObjectItem(v, "k99999")->valueint, 99999);
  cJSON_Delete(v);
  sbuf_free(&b);
}

static void test_print(void) {
  /* invalid UTF-8 prints as U+FFFD, C0 80 as \u0000, controls escaped */
  cJSON *s = cJSON_CreateString("a\xFF" "b\xC3 \xC0\x81 \xC0\x80 \x01\x1f\x7f \xE2\x82\xAC\xED\xA0\x80");
  char *t = json_print(s, 0);
  CHECK_STR(t, "\"a\xEF\xBF\xBD" "b\xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD \\u0000 \\u0001\\u001f\x7f "
               "\xE2\x82\xAC\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
  cJSON *back = json_parse_str(t, 0, NULL); /* the output is always valid JSON */
  CHECK(back != NULL);
  cJSON_Delete(back);
  free(t);
  cJSON_Delete(s);
  /* a key with invalid UTF-8 too */
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "\xFE", 1);
  t = json_print(o, 0);
  CHECK_STR(t, "{\"\xEF\xBF\xBD\":1}");
  free(t);
  cJSON_Delete(o);

  /* pretty: cJSON_Print's layout, which CLI output and tests rely on */
  cJSON *v = json_parse_str("{\"a\":[1,{\"b\":\"x\"}],\"c\":{},\"d\":[]}", 0, NULL);
  t = json_print(v, JSON_PRETTY);
  CHECK_STR(t, "{\n\t\"a\":\t[1, {\n\t\t\t\"b\":\t\"x\"\n\t\t}],\n\t\"c\":\t{},\n\t\"d\":\t[]\n}");
  free(t);
  t = json_print(v, 0);
  CHECK_STR(t, "{\"a\":[1,{\"b\":\"x\"}],\"c\":{},\"d\":[]}");
  free(t);
  cJSON_Delete(v);
  t = json_print(NULL, 0);
  CHECK_STR(t, "null");
  free(t);
  cJSON *raw = cJSON_CreateRaw("not json");
  t = json_print(raw, 0);
  CHECK_STR(t, "null");
  free(t);
  cJSON_Delete(raw);
}

/* The string printer as it was before it scanned runs with a table (a
 * byte loop over strlen's count), kept here as the reference. */
static void ref_put_string(struct sbuf *b, const char *str) {
  static const char hexd[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)(str ? str : "");
  size_t n = strlen((const char *)p);
  sbuf_append(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = p[i];
    size_t len;
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      sbuf_append(b, (const char *)p + i, 1);
      continue;
    }
    switch (c) {
      case '"': sbuf_append(b, "\\\"", 2); break;
      case '\\': sbuf_append(b, "\\\\", 2); break;
      case '\b': sbuf_append(b, "\\b", 2); break;
      case '\f': sbuf_append(b, "\\f", 2); break;
      case '\n': sbuf_append(b, "\\n", 2); break;
      case '\r': sbuf_append(b, "\\r", 2); break;
      case '\t': sbuf_append(b, "\\t", 2); break;
      default:
        if (c < 0x20) {
          char u[6] = {'\\', 'u', '0', '0', hexd[c >> 4], hexd[c & 15]};
          sbuf_append(b, u, 6);
        } else if (c == 0xC0 && i + 1 < n && p[i + 1] == 0x80) {
          sbuf_append(b, "\\u0000", 6);
          i++;
        } else if ((len = util_utf8_len(p + i, n - i, NULL)) > 0) {
          sbuf_append(b, (const char *)p + i, len);
          i += len - 1;
        } else {
          sbuf_append(b, "\xEF\xBF\xBD", 3);
        }
    }
  }
  sbuf_append(b, "\"", 1);
}

/* json_put_string and json_print write strings as the reference does:
 * random texts of every byte class (plain runs of every length around the
 * four-byte step, quotes, backslashes, controls, DEL, C0 80 and C0 at the
 * end, valid and truncated sequences of two to four bytes, surrogates,
 * overlongs, bytes above F4), each also cut at every length, so a
 * sequence or a run ends at the NUL; and texts past the printer's buffer. */
static void test_print_strings(void) {
  static const char *const atoms[] = {
      "a", "bc", "def", "ghij", "klmno", "\"", "\\", "/", "\b", "\f", "\n", "\r", "\t",
      "\x01", "\x1f", "\x7f", " ", "~", "\xC0\x80", "\xC0", "\xC3\xA9", "\xC3",
      "\xE2\x82\xAC", "\xE2\x82", "\xE2", "\xF0\x9F\x98\x80", "\xF0\x9F\x98", "\xF0\x9F",
      "\xF0", "\xED\xA0\x80", "\xED\x9F\xBF", "\xE0\x80\x80", "\xE0\xA0\x80", "\xF4\x90\x80\x80",
      "\xF4\x8F\xBF\xBF", "\xF5", "\xFF", "\x80", "\xBF", "\xC1\xBF", "\xC2\x80"};
  unsigned long long st = 0x243F6A8885A308D3ull;
  for (int t = 0; t < 4000; t++) {
    struct sbuf in = {0};
    int k = 1 + (int)(st % 12);
    for (int i = 0; i < k; i++) {
      st = st * 6364136223846793005ull + 1442695040888963407ull;
      sbuf_puts(&in, atoms[(st >> 33) % (sizeof atoms / sizeof *atoms)]);
    }
    if (t % 50 == 0) /* past the printer's 256-byte buffer, escapes between */
      for (int i = 0; i < 90; i++) sbuf_puts(&in, i % 7 ? "abcdef" : "\"\xC3\xA9\n");
    for (size_t cut = 0; cut <= in.len; cut++) {
      char *s = xstrdup(in.s);
      s[cut] = 0;
      struct sbuf got = {0}, want = {0};
      sbuf_puts(&got, "x");
      sbuf_puts(&want, "x");
      json_put_string(&got, s);
      ref_put_string(&want, s);
      CHECK_STR(got.s, want.s);
      cJSON *v = cJSON_CreateString(s);
      char *pr = json_print(v, 0);
      CHECK_STR(pr, want.s + 1);
      free(pr);
      cJSON_Delete(v);
      sbuf_free(&got);
      sbuf_free(&want);
      free(s);
      if (in.len > 64 && cut > 8) cut += 7; /* long texts: every eighth cut */
    }
    sbuf_free(&in);
  }
  struct sbuf got = {0}, want = {0};
  json_put_string(&got, NULL);
  ref_put_string(&want, NULL);
  CHECK_STR(got.s, want.s);
  sbuf_free(&got);
  sbuf_free(&want);
}

static void test_canonical_and_hash(void) {
  /* byte order of the keys' UTF-8, NUL (stored C0 80) lowest */
  cJSON *v = json_parse_str("{\"b\":1,\"\\u00e9\":2,\"a\\u0001\":3,\"a\\u0000\":4,\"A\":5,\"a\":6,\"\":7}",
                            0, NULL);
  char *t = json_canonical(v);
  CHECK_STR(t, "{\"\":7,\"A\":5,\"a\":6,\"a\\u0000\":4,\"a\\u0001\":3,\"b\":1,\"\xC3\xA9\":2}");
  free(t);
  t = json_print(v, JSON_CANONICAL | JSON_PRETTY);
  CHECK(t && !strncmp(t, "{\n\t\"\":\t7,\n\t\"A\":\t5,", 17));
  free(t);
  cJSON_Delete(v);

  char h1[65], h2[65], h3[65];
  cJSON *a = json_parse_str("{\"b\":1,\"a\":2}", 0, NULL);
  cJSON *b = json_parse_str(" { \"a\" : 2.0 , \"b\" : 1e0 } ", 0, NULL);
  json_hash_hex(a, h1);
  json_hash_hex(b, h2);
  /* BLAKE2b-256 of {"a":2,"b":1}: pinned, approvals and audit rows use it */
  CHECK_STR(h1, "264a84ee9c449ee90c05c62a542cde93a8ea646394268de1a5be06433ce369f4");
  CHECK_STR(h2, h1);
  json_hash_hex(NULL, h3);
  CHECK_STR(h3, "6bfb9a89e7917438ddb17fb73d74243df565eae70968b5a290cf5f3563d76bef");
  cJSON_Delete(a);
  cJSON_Delete(b);
}

static int equal_texts(const char *x, const char *y) {
  cJSON *a = json_parse_str(x, 0, NULL), *b = json_parse_str(y, 0, NULL);
  int r = a && b && json_equal(a, b);
  cJSON_Delete(a);
  cJSON_Delete(b);
  return r;
}

static void test_equal(void) {
  CHECK(equal_texts("1", "1.0"));
  CHECK(equal_texts("1", "1e0"));
  CHECK(equal_texts("0", "-0"));
  CHECK(!equal_texts("0.3", "0.30000000000000004"));
  CHECK(equal_texts("9007199254740993", "9007199254740993"));
  CHECK(!equal_texts("9007199254740993", "9007199254740992"));
  CHECK(!equal_texts("9007199254740992", "9007199254740991"));
  CHECK(!equal_texts("12345678901234567890", "12345678901234567891"));
  CHECK(equal_texts("{\"a\":1,\"b\":[1,{\"c\":null}]}", "{\"b\":[1,{\"c\":null}],\"a\":1}"));
  CHECK(!equal_texts("{\"a\":1,\"b\":[1,2]}", "{\"b\":[2,1],\"a\":1}"));
  CHECK(!equal_texts("{\"a\":1}", "{\"a\":1,\"b\":1}"));
  CHECK(!equal_texts("{\"a\":1}", "{\"b\":1}"));
  CHECK(!equal_texts("[1,2]", "[1,2,3]"));
  CHECK(!equal_texts("null", "false"));
  CHECK(!equal_texts("true", "false"));
  CHECK(!equal_texts("\"a\"", "\"a\\u0000\""));
  CHECK(!equal_texts("\"1\"", "1"));
  CHECK(equal_texts("{}", "{}") && equal_texts("[]", "[]") && !equal_texts("{}", "[]"));
  /* an exact integer text against a double */
  cJSON *t = json_parse_str("9007199254740992", 0, NULL), *t3 = json_parse_str("9007199254740993", 0, NULL);
  cJSON *d = cJSON_CreateNumber(9007199254740992.0), *s = cJSON_CreateNumber(5);
  cJSON *s5 = cJSON_CreateNumber(5);
  s5->valuestring = strdup("5");
  CHECK(t->valuestring != NULL);
  CHECK(json_equal(t, d) && json_equal(d, t));
  CHECK(!json_equal(t3, d) && !json_equal(d, t3));
  CHECK(json_equal(s, s5));
  cJSON *nan = cJSON_CreateNumber(NAN);
  CHECK(!json_equal(nan, nan));
  CHECK(json_equal(NULL, NULL) && !json_equal(NULL, s));
  cJSON_Delete(t);
  cJSON_Delete(t3);
  cJSON_Delete(d);
  cJSON_Delete(s);
  cJSON_Delete(s5);
  cJSON_Delete(nan);
}

static void test_depth(void) {
  struct err e;
  struct sbuf b = {0};
  for (int i = 0; i < JSON_PARSE_MAX_DEPTH; i++) sbuf_puts(&b, "[");
  for (int i = 0; i < JSON_PARSE_MAX_DEPTH; i++) sbuf_puts(&b, "]");
  cJSON *v = NULL;
  CHECK_INT(json_parse(b.s, b.len, 0, &v, &e), 0);
  cJSON_Delete(v);
  sbuf_free(&b);
  sbuf_puts(&b, "{\"a\":");
  for (int i = 0; i < JSON_PARSE_MAX_DEPTH; i++) sbuf_puts(&b, "[");
  CHECK_INT(json_parse(b.s, b.len, 0, &v, &e), ERR_INVALID);
  CHECK_STR(e.msg, "invalid JSON at byte 516: nested deeper than 512 levels");
  sbuf_free(&b);
  /* JSONTestSuite's n_structure_100000_opening_arrays: an error, no crash */
  for (int i = 0; i < 100000; i++) sbuf_puts(&b, "[");
  CHECK_INT(json_parse(b.s, b.len, 0, &v, &e), ERR_INVALID);
  CHECK_STR(e.msg, "invalid JSON at byte 512: nested deeper than 512 levels");
  sbuf_free(&b);
  for (int i = 0; i < 50000; i++) sbuf_puts(&b, "{\"a\":[");
  CHECK_INT(json_parse(b.s, b.len, 0, &v, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "nested deeper than 512 levels");
  sbuf_free(&b);
}

/* Makes the Nth cJSON allocation fail, for every N: each parse either
 * succeeds or reports out of memory, and never leaks (ASan checks). */
static long alloc_left = -1;
static void *failing_malloc(size_t n) {
  if (alloc_left == 0) return NULL;
  if (alloc_left > 0) alloc_left--;
  return malloc(n);
}

static void test_alloc_failure(void) {
  cJSON_Hooks hooks = {failing_malloc, free};
  cJSON_InitHooks(&hooks);
  const char *doc = "{\"a\":[1,\"x\",{\"b\":null,\"c\":12345678901234567890}],\"d\":true,"
                    "\"e\":\"\\u0000\",\"a\":false}";
  int ok = 0, nomem = 0;
  for (long n = 0; n < 200; n++) {
    alloc_left = n;
    struct err e = {0};
    cJSON *v = NULL;
    int rc = json_parse(doc, strlen(doc), 0, &v, &e);
    alloc_left = -1;
    if (rc == 0) {
      ok++;
      CHECK(v != NULL);
      cJSON_Delete(v);
      break;
    }
    CHECK_INT(rc, ERR_NOMEM);
    CHECK(v == NULL);
    nomem++;
  }
  CHECK_INT(ok, 1);
  CHECK(nomem > 5);
  cJSON_InitHooks(NULL);
}

/* Provider text: invalid UTF-8 in a string is kept as U+FFFD and counted,
 * never cut and never refused; everything else stays strict. */
static void test_lossy(void) {
  struct err e = {0};
  size_t n = 0;
  cJSON *v = json_parse_lossy("{\"t\":\"a\xff\xfe b \xc3\"}", 0, &n, &e);
  CHECK(v != NULL);
  CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(v, "t")), "a\xEF\xBF\xBD\xEF\xBF\xBD b \xEF\xBF\xBD");
  CHECK_INT(n, 3);
  cJSON_Delete(v);
  CHECK(json_parse_lossy("[1]x", 0, &n, &e) == NULL);
  CHECK_CONTAINS(e.msg, "unexpected content after the value");
  cJSON *w = NULL;
  CHECK(json_parse("\"\xff\"", 3, 0, &w, &e) != 0); /* the strict parser still refuses */
}

/* Canonical member order whichever sort runs (insertion on the stack for
 * up to 16 members, qsort above): for random objects of 1..40 members the
 * keys come out in byte order (C0 80 as the zero byte, first), any
 * permutation of the members prints the same bytes, and the text parses
 * back to the same object. */
static int ref_key_cmp(const char *a, const char *b) {
  for (;;) {
    int x = (unsigned char)*a, y = (unsigned char)*b;
    if (x == 0xC0 && (unsigned char)a[1] == 0x80) x = 0, a++;
    else if (!x) x = -1;
    if (y == 0xC0 && (unsigned char)b[1] == 0x80) y = 0, b++;
    else if (!y) y = -1;
    if (x != y || x < 0) return x < y ? -1 : x > y;
    a++, b++;
  }
}

static void test_canonical_order(void) {
  unsigned seed = 12345;
  for (int round = 0; round < 300; round++) {
    int n = 1 + round % 40;
    char keys[40][8];
    cJSON *o = cJSON_CreateObject(), *p = cJSON_CreateObject();
    for (int i = 0; i < n; i++) {
      int len;
      do {
        seed = seed * 1103515245u + 12345u;
        len = 1 + (int)((seed >> 16) % 3);
        for (int k = 0; k < len; k++) {
          seed = seed * 1103515245u + 12345u;
          keys[i][k] = "abAB_z\x01"[(seed >> 16) % 7];
        }
        keys[i][len] = 0;
        if ((seed >> 20) % 9 == 0 && len < 5) memcpy(keys[i] + len, "\xc0\x80", 3);
      } while (cJSON_GetObjectItemCaseSensitive(o, keys[i]));
      cJSON_AddNumberToObject(o, keys[i], i);
    }
    for (int i = n - 1; i >= 0; i--) cJSON_AddNumberToObject(p, keys[i], i);
    char *a = json_canonical(o), *b = json_canonical(p);
    CHECK_STR(a, b);
    cJSON *back = NULL;
    struct err e = {0};
    CHECK_INT(json_parse(a, strlen(a), 0, &back, &e), 0);
    int members = 0;
    const cJSON *prev = NULL;
    for (const cJSON *c = back ? back->child : NULL; c; prev = c, c = c->next, members++) {
      if (prev) CHECK(ref_key_cmp(prev->string, c->string) < 0);
      const cJSON *orig = cJSON_GetObjectItemCaseSensitive(o, c->string);
      CHECK(orig && orig->valuedouble == c->valuedouble);
    }
    CHECK_INT(members, n);
    cJSON_Delete(back);
    free(a);
    free(b);
    cJSON_Delete(o);
    cJSON_Delete(p);
  }
}

/* json_hash_hex hashes the canonical text as it prints it, through a
 * small buffer: on random trees (any bytes in strings and keys, invalid
 * UTF-8 and C0 80 included, strings longer than the buffer, big-integer
 * texts, NaN, deep and wide objects) it is BLAKE2b-256 of json_canonical,
 * and json_print's text through the same buffer is what it was (pretty and
 * compact printed again from the parsed text agree). */
static unsigned rnd_state = 12345;
static unsigned rnd(unsigned n) {
  rnd_state = rnd_state * 1103515245u + 12345u;
  return (rnd_state >> 8) % n;
}
static char *rnd_bytes(void) {
  static const char *const pieces[] = {"a", "b", "\xc0\x80", "\xff", "\xe2\x82", "\xc3\xa9", "\"",
                                       "\\", "\n", "\x01", "\x1f", "\x7f", "/", "\xf0\x9f\x98\x80", "k"};
  struct sbuf b = {0};
  unsigned n = rnd(12) == 0 ? 200 + rnd(600) : rnd(6);
  sbuf_append(&b, "", 0);
  for (unsigned i = 0; i < n; i++) sbuf_puts(&b, pieces[rnd(sizeof pieces / sizeof *pieces)]);
  return sbuf_take(&b);
}
static cJSON *rnd_tree(int depth) {
  unsigned r = rnd(depth > 4 ? 6 : 9);
  char *s;
  cJSON *v;
  switch (r) {
    case 0: return cJSON_CreateNull();
    case 1: return cJSON_CreateBool(rnd(2));
    case 2: return cJSON_CreateNumber((double)rnd(100000) / (1 + rnd(1000)) - 50);
    case 3:
      v = cJSON_CreateNumber(rnd(3) ? 1e300 : NAN);
      if (!rnd(3)) v->valuestring = strdup(rnd(2) ? "123456789012345678901234567890" : "12x");
      return v;
    case 4:
    case 5:
      s = rnd_bytes();
      v = cJSON_CreateString(s);
      free(s);
      return v;
    case 6:
      v = cJSON_CreateArray();
      for (unsigned i = rnd(6); i > 0; i--) cJSON_AddItemToArray(v, rnd_tree(depth + 1));
      return v;
    default:
      v = cJSON_CreateObject();
      for (unsigned i = rnd(3) == 0 ? 17 + rnd(30) : rnd(8); i > 0; i--) {
        s = rnd_bytes(); /* each key once, as json_canonical assumes */
        if (!cJSON_GetObjectItemCaseSensitive(v, s)) cJSON_AddItemToObject(v, s, rnd_tree(depth + 1));
        free(s);
      }
      return v;
  }
}
static void test_hash_streaming(void) {
  int long_ones = 0;
  for (int i = 0; i < 3000; i++) {
    cJSON *v = rnd_tree(0);
    char *c = json_canonical(v);
    unsigned char h[32];
    char want[65], got[65];
    crypto_generichash(h, sizeof h, (const unsigned char *)c, strlen(c), NULL, 0);
    util_hex(h, sizeof h, want);
    json_hash_hex(v, got);
    CHECK_STR(got, want);
    long_ones += strlen(c) > 600;
    /* the printer through the buffer: compact and pretty reparse to the
     * tree the canonical text reparses to */
    char *p = json_print(v, JSON_PRETTY), *q = json_print(v, 0);
    cJSON *a = json_parse_str(c, 0, NULL), *b = json_parse_str(p, 0, NULL), *d = json_parse_str(q, 0, NULL);
    /* (invalid UTF-8 prints as U+FFFD, which can make two keys one) */
    if (!strstr(c, "\xEF\xBF\xBD")) CHECK(a && b && d && json_equal(a, b) && json_equal(a, d));
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(d);
    free(p);
    free(q);
    free(c);
    cJSON_Delete(v);
  }
  CHECK(long_ones > 100);
  /* a known digest: Python's hashlib.blake2b(b'{"a":1}', digest_size=32) */
  cJSON *o = json_parse_str("{\"a\":1}", 0, NULL);
  char got[65];
  json_hash_hex(o, got);
  CHECK_STR(got, "10a7ff3e312baec0c356be489739b93f63af84416c40f1c13023eb96c7ed50aa");
  cJSON_Delete(o);
}

/* cJSON's sibling links in t's tree: next ends at NULL, prev goes back,
 * and a first child's prev is the last one. 0 when one is wrong. */
static int links_ok(const cJSON *t) {
  const cJSON *last = NULL;
  for (const cJSON *c = t->child; c; c = c->next) {
    if (last && c->prev != last) return 0;
    if (!links_ok(c)) return 0;
    last = c;
  }
  return !t->child || t->child->prev == last;
}

/* json_flat_copy and json_flat_move, on the random trees above (bytes of
 * every kind, number texts, NaN, deep and wide objects): a copy that fits
 * is json_identical to its tree, prints and hashes the same, keeps cJSON's
 * sibling links, and is whole once moved and its first block overwritten;
 * one byte less than it needs is refused without writing past the
 * capacity; NULL copies nothing. */
static void test_flat_copy(void) {
  static _Alignas(16) unsigned char a[1 << 20], b[(1 << 20) + 64];
  int copied = 0, refused = 0;
  for (int i = 0; i < 2000; i++) {
    cJSON *v = rnd_tree(0);
    size_t need = json_flat_copy(v, a, sizeof a);
    if (!need) { /* too big for this test's block: rare */
      cJSON_Delete(v);
      continue;
    }
    CHECK(json_identical(json_flat_root(a), v));
    /* one byte short: refused, and nothing past it written */
    memset(b, 0xA5, need + 64);
    CHECK(json_flat_copy(v, b, need - 1) == 0);
    int clean = 1;
    for (size_t k = need - 1; k < need + 64; k++) clean &= b[k] == 0xA5;
    CHECK(clean);
    refused++;
    /* moved, at an odd distance (8 bytes, a pointer's alignment), and the
     * first block overwritten */
    unsigned char *to = b + 8 * (1 + rnd(7));
    const cJSON *m = json_flat_move(to, a, need);
    memset(a, 0x5A, need);
    CHECK(m == json_flat_root(to));
    CHECK(json_identical(m, v));
    CHECK(links_ok(m));
    char *c1 = json_canonical(v), *c2 = json_canonical(m);
    CHECK_STR(c2, c1);
    char h1[65], h2[65];
    json_hash_hex(v, h1);
    json_hash_hex(m, h2);
    CHECK_STR(h2, h1);
    free(c1);
    free(c2);
    cJSON_Delete(v);
    copied++;
  }
  CHECK(copied > 1900 && refused == copied);
  CHECK(json_flat_copy(NULL, a, sizeof a) == 0);
  /* a member whose key and value are both set, a number with its text */
  cJSON *o = json_parse_str("{\"b\":[1,{\"c\":null}],\"a\":12345678901234567890}", 0, NULL);
  size_t n = json_flat_copy(o, a, sizeof a);
  CHECK(n > 0);
  const cJSON *m = json_flat_move(b, a, n);
  memset(a, 0, n);
  char *c = json_canonical(m);
  CHECK_STR(c, "{\"a\":12345678901234567890,\"b\":[1,{\"c\":null}]}");
  free(c);
  cJSON_Delete(o);
}

/* json_put_string and json_reprint against the printer of the tree:
 * random strings (every byte class put_string treats apart: printable
 * ASCII, the short escapes, other control bytes, C0 80, valid and broken
 * UTF-8) and random texts (valid ones, with whitespace, repeated keys,
 * every number form, escapes, nesting, objects past the key count the
 * reprinter checks itself, and broken ones), byte for byte. */
static unsigned long long fz = 0x9E3779B97F4A7C15ull;
static unsigned fzr(unsigned n) {
  fz ^= fz << 13, fz ^= fz >> 7, fz ^= fz << 17;
  return (unsigned)(fz % n);
}
static const char *const fz_bits[] = {
    "a", "Z", " ", "~", "\x7f", "\"", "\\", "\n", "\t", "\r", "\b", "\f", "\x01", "\x1f",
    "\xC0\x80", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xC0", "\xFF", "\xE2\x82",
    "\xED\xA0\x80", "abcdefghijklmnopqrstuvwxyz0123456789"};
static void fz_string(struct sbuf *b) {
  int n = (int)fzr(12);
  for (int i = 0; i < n; i++) sbuf_puts(b, fz_bits[fzr(sizeof fz_bits / sizeof *fz_bits)]);
}
static const char *const fz_nums[] = {
    "0", "-0", "1", "-12", "9007199254740992", "-9007199254740993", "123456789012345678901234",
    "0.1", "1.5e-7", "2.5E+3", "1e400", "-1e-400", "3.14159265358979323846", "1e22", "01",
    "1.", ".5", "+1", "1e", "4.35", "1234567.125"};
static const char *const fz_strs[] = {
    "\"\"", "\"plain\"", "\"q\\\"b\\\\s\\/\"", "\"\\u0000\"", "\"\\u00e9\\u20AC\"",
    "\"\\ud83d\\ude00\"", "\"\\ud83d\"", "\"\\x\"", "\"tab\\tnl\\n\"", "\"\xC3\xA9\"",
    "\"\xFF\"", "\"raw\ttab\"", "\"\\u001f\\b\\f\\r\""};
static void fz_ws(struct sbuf *b) {
  static const char *const ws[] = {"", "", "", " ", "\n\t ", "\r"};
  sbuf_puts(b, ws[fzr(6)]);
}
static void fz_value(struct sbuf *b, int depth) {
  unsigned k = fzr(depth > 4 ? 6 : 9);
  fz_ws(b);
  if (k < 2) sbuf_puts(b, fz_nums[fzr(sizeof fz_nums / sizeof *fz_nums)]);
  else if (k < 4) sbuf_puts(b, fz_strs[fzr(sizeof fz_strs / sizeof *fz_strs)]);
  else if (k == 4) sbuf_puts(b, (const char *[]){"true", "false", "null", "nul"}[fzr(4)]);
  else if (k == 5) {
    sbuf_puts(b, "\"");
    fz_string(b);
    sbuf_puts(b, "\"");
  } else if (k == 6 || k == 7) {
    static const char *const keys[] = {"a", "b", "A", "ab", "a\\u0062", "\\u0000", "\xC3\xA9"};
    int n = (int)fzr(k == 7 && depth < 2 ? 20 : 4);
    sbuf_puts(b, "{");
    for (int i = 0; i < n; i++) {
      if (i) sbuf_puts(b, ",");
      fz_ws(b);
      if (n > 4) sbuf_printf(b, "\"k%d\"", fzr(40)); /* many keys, now and then one twice */
      else sbuf_printf(b, "\"%s\"", keys[fzr(sizeof keys / sizeof *keys)]);
      fz_ws(b);
      sbuf_puts(b, ":");
      fz_value(b, depth + (n > 4 ? 4 : 1)); /* many keys: small values */
    }
    fz_ws(b);
    sbuf_puts(b, "}");
  } else {
    int n = (int)fzr(4);
    sbuf_puts(b, "[");
    for (int i = 0; i < n; i++) {
      if (i) sbuf_puts(b, ",");
      fz_value(b, depth + 1);
    }
    sbuf_puts(b, "]");
  }
  fz_ws(b);
}
static void test_reprint(void) {
  int ok = 0, refused = 0, differ = 0;
  for (int round = 0; round < 20000; round++) {
    struct sbuf t = {0};
    fz_string(&t);
    if (fzr(3) == 0) fz_string(&t);
    /* json_put_string: what json_print writes for the string node, after
     * what the buffer held */
    cJSON *sv = cJSON_CreateString(t.s ? t.s : "");
    char *want = json_print(sv, 0);
    struct sbuf got = {0};
    sbuf_puts(&got, "x");
    json_put_string(&got, t.s);
    if (strcmp(got.s + 1, want) || got.s[0] != 'x' || strlen(got.s) != got.len) differ++;
    free(want);
    cJSON_Delete(sv);
    sbuf_free(&got);
    sbuf_free(&t);
    /* json_reprint */
    struct sbuf in = {0};
    fz_value(&in, 0);
    if (fzr(8) == 0 && in.len) { /* broken: a byte dropped or changed */
      size_t at = fzr((unsigned)in.len);
      if (fzr(2)) memmove(in.s + at, in.s + at + 1, in.len - at), in.len--;
      else in.s[at] = "{}[],:\"\\ x"[fzr(10)];
    }
    for (unsigned flags = 0; flags <= JSON_NO_DUPLICATES; flags++) {
      cJSON *v = NULL;
      int prc = json_parse(in.s, in.len, flags, &v, NULL);
      char *ref = prc ? NULL : json_print(v, 0);
      cJSON_Delete(v);
      struct sbuf out = {0};
      sbuf_puts(&out, "pre");
      int rrc = json_reprint(&out, in.s, in.len, flags);
      if (prc ? rrc != -1 || strcmp(out.s, "pre") || out.len != 3
              : rrc != 0 || strncmp(out.s, "pre", 3) || strcmp(out.s + 3, ref) ||
                    strlen(out.s) != out.len) {
        if (differ++ < 5)
          fprintf(stderr, "json_reprint(%u) of %s: %d %s, want %d %s\n", flags, in.s, rrc,
                  out.s, prc, ref ? ref : "-");
      }
      if (prc) refused++;
      else ok++;
      free(ref);
      sbuf_free(&out);
    }
    sbuf_free(&in);
  }
  CHECK_INT(differ, 0);
  CHECK(ok > 10000);
  CHECK(refused > 2000);
  /* past what the reprinter checks itself (a key longer than its key
   * room, more keys than it compares): the tree's way, the same bytes */
  struct sbuf big = {0}, longkey = {0};
  for (int i = 0; i < 1500; i++) sbuf_puts(&longkey, i % 7 ? "k" : "\\u00e9");
  sbuf_printf(&big, "{\"%s\":1, \"x\":{\"%s\":2,\"%s\":3}}", longkey.s, longkey.s, longkey.s);
  for (unsigned flags = 0; flags <= JSON_NO_DUPLICATES; flags++) {
    cJSON *v = NULL;
    int prc = json_parse(big.s, big.len, flags, &v, NULL);
    char *ref = prc ? NULL : json_print(v, 0);
    struct sbuf out = {0};
    int rrc = json_reprint(&out, big.s, big.len, flags);
    CHECK_INT(rrc, prc ? -1 : 0);
    CHECK_STR(out.s ? out.s : "", ref ? ref : "");
    CHECK_INT(prc != 0, flags == JSON_NO_DUPLICATES);
    free(ref);
    sbuf_free(&out);
    cJSON_Delete(v);
  }
  sbuf_free(&big);
  sbuf_free(&longkey);
  /* a long string with escapes that use up the room made first */
  struct sbuf t = {0};
  for (int i = 0; i < 3000; i++) sbuf_puts(&t, i % 3 ? "\"" : "a\n");
  cJSON *sv = cJSON_CreateString(t.s);
  char *want = json_print(sv, 0);
  struct sbuf got = {0};
  json_put_string(&got, t.s);
  CHECK_STR(got.s, want);
  free(want);
  cJSON_Delete(sv);
  sbuf_free(&got);
  sbuf_free(&t);
}

int main(void) {
  test_reprint();
  test_hash_streaming();
  test_flat_copy();
  test_lossy();
  test_accept_refuse();
  test_numbers();
  test_nul_round_trip();
  test_duplicates();
  test_print();
  test_print_strings();
  test_canonical_and_hash();
  test_canonical_order();
  test_equal();
  test_depth();
  test_alloc_failure();
  return TEST_END();
}
