/* test_events.c - an event's text as evtext_* print it (src/base/events.c):
 * the same bytes json_print writes for the tree with the same members, for
 * keys of every length around the key printer's 60-byte buffer (a longer
 * one goes through the full string printer), strings that need escapes,
 * and numbers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "events.h"
#include "json.h"
#include "test.h"
#include "util.h"

static void test_keys_of_every_length(void) {
  for (int n = 0; n <= 70; n++) {
    char k[80];
    for (int i = 0; i < n; i++) k[i] = (char)('a' + i % 26);
    k[n] = 0;
    struct sbuf b = {0};
    evtext_open(&b);
    evtext_str(&b, k, "v\"\\\n\x01\xC0\x80\xFF");
    evtext_num(&b, "index", n);
    evtext_num(&b, k[0] ? "z" : "y", -0.5 * n);
    evtext_bool(&b, "ok", n % 2);
    evtext_str(&b, "last", k);
    evtext_close(&b);
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, k, "v\"\\\n\x01\xC0\x80\xFF");
    cJSON_AddNumberToObject(t, "index", n);
    cJSON_AddNumberToObject(t, k[0] ? "z" : "y", -0.5 * n);
    cJSON_AddBoolToObject(t, "ok", n % 2);
    cJSON_AddStringToObject(t, "last", k);
    char *want = json_print(t, 0);
    CHECK_STR(b.s, want);
    free(want);
    cJSON_Delete(t);
    /* the key after another member: its comma in the same buffer */
    evtext_open(&b);
    evtext_num(&b, "i", 1);
    evtext_num(&b, k, n);
    evtext_close(&b);
    t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "i", 1);
    cJSON_AddNumberToObject(t, k, n);
    want = json_print(t, 0);
    CHECK_STR(b.s, want);
    free(want);
    cJSON_Delete(t);
    sbuf_free(&b);
  }
}

/* An object with no member, in a fresh buffer and in one that held an
 * event before, and a first member of each kind (its "{" comes with its
 * key, events.c): the exact texts. */
static void test_empty_and_first_members(void) {
  struct sbuf b = {0};
  evtext_open(&b);
  evtext_close(&b);
  CHECK_STR(b.s, "{}");
  evtext_open(&b);
  evtext_bool(&b, "ok", 0);
  evtext_close(&b);
  CHECK_STR(b.s, "{\"ok\":false}");
  evtext_open(&b);
  evtext_close(&b);
  CHECK_STR(b.s, "{}");
  evtext_open(&b);
  evtext_num(&b, "index", -12);
  evtext_bool(&b, "ok", 1);
  evtext_num(&b, "ms", 0.25);
  evtext_close(&b);
  CHECK_STR(b.s, "{\"index\":-12,\"ok\":true,\"ms\":0.25}");
  evtext_open(&b);
  evtext_num(&b, "ms", 0.5);
  evtext_str(&b, "text", "a\"b");
  evtext_close(&b);
  CHECK_STR(b.s, "{\"ms\":0.5,\"text\":\"a\\\"b\"}");
  evtext_open(&b);
  evtext_str(&b, "text", "hi");
  evtext_close(&b);
  CHECK_STR(b.s, "{\"text\":\"hi\"}");
  CHECK_INT(b.len, 13);
  sbuf_free(&b);
  /* a key past the 60-byte buffer as the first member of each kind */
  char k[70];
  memset(k, 'k', 65);
  k[65] = 0;
  char want[128];
  const char *tail[] = {"7", "true", "\"v\"", "1.5"};
  for (int i = 0; i < 4; i++) {
    evtext_open(&b);
    if (i == 0) evtext_num(&b, k, 7);
    if (i == 1) evtext_bool(&b, k, 1);
    if (i == 2) evtext_str(&b, k, "v");
    if (i == 3) evtext_num(&b, k, 1.5);
    evtext_close(&b);
    snprintf(want, sizeof want, "{\"%s\":%s}", k, tail[i]);
    CHECK_STR(b.s, want);
  }
  sbuf_free(&b);
}

int main(void) {
  test_keys_of_every_length();
  test_empty_and_first_members();
  return TEST_END();
}
