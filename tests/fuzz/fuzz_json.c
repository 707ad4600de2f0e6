/* fuzz_json.c - libFuzzer target for the strict JSON parser and printer.
 *
 * Build and run: sh tests/fuzz/run_fuzz_json.sh [seconds]
 * For each input: json_parse must return 0 or an "invalid JSON at byte N"
 * error with N inside the input; an accepted text must print as valid
 * JSON that parses back json_equal to the first tree, with the same
 * canonical text; and a text accepted with JSON_NO_DUPLICATES must give the
 * same tree without it. Crashes, leaks and sanitizer reports are findings;
 * so is a broken promise (abort). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
  const char *s = (const char *)d;
  struct err e = {0};
  cJSON *v = NULL;
  if (json_parse(s, n, 0, &v, &e)) {
    size_t at;
    if (sscanf(e.msg, "invalid JSON at byte %zu:", &at) != 1 || at > n) abort();
    if (json_parse(s, n, JSON_NO_DUPLICATES, &v, &e) == 0) abort();
    return 0;
  }
  char *t = json_print(v, 0), *c1 = json_canonical(v), *pt = json_print(v, JSON_PRETTY);
  cJSON *w = NULL, *x = NULL;
  if (json_parse(t, strlen(t), JSON_NO_DUPLICATES, &w, &e)) abort();
  if (!json_equal(v, w) || !json_equal(w, v)) abort();
  char *c2 = json_canonical(w);
  if (strcmp(c1, c2)) abort();
  if (json_parse(pt, strlen(pt), 0, &x, &e) || !json_equal(v, x)) abort();
  cJSON *y = NULL;
  if (json_parse(s, n, JSON_NO_DUPLICATES, &y, &e) == 0 && !json_equal(v, y)) abort();
  cJSON_Delete(y);
  free(t), free(c1), free(c2), free(pt);
  cJSON_Delete(v), cJSON_Delete(w), cJSON_Delete(x);
  return 0;
}
