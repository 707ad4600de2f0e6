/* test_events.c - an event's text as evtext_* print it (src/base/events.c):
 * the same bytes json_print writes for the tree with the same members, for
 * keys of every length around the key printer's 60-byte buffer (a longer
 * one goes through the full string printer), strings that need escapes,
 * and numbers. */
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

int main(void) {
  test_keys_of_every_length();
  return TEST_END();
}
