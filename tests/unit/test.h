/* test.h - a tiny assert header for the per-module test executables.
 * Each failed check prints the file, line, expression and both values, and
 * the run continues so one execution shows every failure; main() returns
 * TEST_END(). */
#ifndef LUAGENT_TEST_H
#define LUAGENT_TEST_H

#include <stdio.h>
#include <string.h>

static int test_failures_ = 0;
static int test_checks_ = 0;

#define CHECK(cond)                                                             \
  do {                                                                          \
    test_checks_++;                                                             \
    if (!(cond)) {                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      test_failures_++;                                                         \
    }                                                                           \
  } while (0)

#define CHECK_INT(a, b)                                                                    \
  do {                                                                                     \
    long long a_ = (long long)(a), b_ = (long long)(b);                                    \
    test_checks_++;                                                                        \
    if (a_ != b_) {                                                                        \
      fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, \
              a_, b_);                                                                     \
      test_failures_++;                                                                    \
    }                                                                                      \
  } while (0)

#define CHECK_STR(a, b)                                                                      \
  do {                                                                                       \
    const char *a_ = (a), *b_ = (b);                                                         \
    test_checks_++;                                                                          \
    if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                                 \
      fprintf(stderr, "%s:%d: %s == %s failed:\n  got:      \"%s\"\n  expected: \"%s\"\n", \
              __FILE__, __LINE__, #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");          \
      test_failures_++;                                                                      \
    }                                                                                        \
  } while (0)

/* Substring check, for error messages that carry context. */
#define CHECK_CONTAINS(hay, needle)                                                         \
  do {                                                                                      \
    const char *h_ = (hay), *n_ = (needle);                                                 \
    test_checks_++;                                                                         \
    if (!h_ || !strstr(h_, n_)) {                                                           \
      fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__,       \
              h_ ? h_ : "(null)", n_);                                                      \
      test_failures_++;                                                                     \
    }                                                                                       \
  } while (0)

#define TEST_END()                                                                   \
  (printf("%d checks, %d failed\n", test_checks_, test_failures_), test_failures_ ? 1 : 0)

#endif
