/* test_util.c - util_nearest, the "did you mean" hints: what counts as
 * close, case, transpositions, NULL and empty inputs, long words; and
 * util_copy and util_run_id_text, which write what snprintf did. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "util.h"

static void test_nearest(void) {
  static const char *const keys[] = {"limits", "http_allow", "approver", "approval_threshold",
                                     "memory", "providers",  "secrets",  "selection"};
  const size_t n = sizeof keys / sizeof keys[0];
  static const struct {
    const char *word, *want; /* want NULL: no suggestion */
  } cases[] = {
      {"limts", "limits"},       /* a deletion */
      {"limitss", "limits"},     /* an insertion */
      {"aprover", "approver"},   /* one letter short */
      {"approvre", "approver"},  /* a transposition is one edit */
      {"LIMITS", "limits"},      /* case does not count */
      {"provider", "providers"}, /* the plural */
      {"sekrets", "secrets"},    /* a substitution */
      {"zzzzzz", NULL},          /* nothing close */
      {"ab", NULL},              /* too short for any edit to be a hint */
      {"memoryxyz", NULL},       /* three edits: too far */
      {"", NULL},                /* empty */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *got = util_nearest(cases[i].word, keys, n);
    if (cases[i].want)
      CHECK_STR(got, cases[i].want);
    else if (got)
      CHECK_STR(got, "(no suggestion)");
  }
  /* "lsit" is one transposition from "list": short words still get a hint */
  static const char *const subs[] = {"list", "check", "next", "run", "history"};
  CHECK_STR(util_nearest("lsit", subs, 5), "list");
  CHECK_STR(util_nearest("nxet", subs, 5), "next");
  CHECK(util_nearest("x", subs, 5) == NULL);
  /* NULL word, NULL candidates, no candidates */
  CHECK(util_nearest(NULL, subs, 5) == NULL);
  static const char *const holes[] = {NULL, "list", NULL};
  CHECK_STR(util_nearest("lst", holes, 3), "list");
  CHECK(util_nearest("list", subs, 0) == NULL);
  /* words longer than the compared prefix do not overflow */
  char longw[200];
  memset(longw, 'a', sizeof longw - 1);
  longw[sizeof longw - 1] = 0;
  CHECK(util_nearest(longw, subs, 5) == NULL);
}

/* util_copy and util_run_id_text: byte for byte what snprintf writes. */
static void test_copy_and_run_id(void) {
  static const char *const texts[] = {"", "a", "ok", "interrupted", "0123456789abcdefghij"};
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
    for (size_t n = 1; n <= 24; n++) {
      char got[32], want[32];
      memset(got, 'x', sizeof got);
      memset(want, 'x', sizeof want);
      util_copy(got, n, texts[i]);
      snprintf(want, n, "%s", texts[i]);
      CHECK(memcmp(got, want, sizeof got) == 0);
    }
  static const unsigned long times[] = {0, 1, 15, 16, 0x692f3a1bUL, 1800000000UL, ~0UL};
  static const char *const hexes[] = {"8e6c252d6b0e", "", "0123456789abcdef01234567"};
  for (size_t i = 0; i < sizeof times / sizeof times[0]; i++)
    for (size_t j = 0; j < sizeof hexes / sizeof hexes[0]; j++) {
      char got[40], want[40];
      util_run_id_text(got, times[i], hexes[j]);
      snprintf(want, sizeof want, "r%lx-%s", times[i], hexes[j]);
      CHECK_STR(got, want);
    }
}

int main(void) {
  test_nearest();
  test_copy_and_run_id();
  return TEST_END();
}
