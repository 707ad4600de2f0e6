/* test_dynlib.c - libraries loaded on first use (base/dynlib.h): a library
 * that loads fills every slot and runs on_load once, even when many
 * threads ask at the same moment; one that does not (no file, a missing
 * symbol) is an error naming the library, the file and why, which stays
 * the answer without a second attempt; and the environment variable names
 * another file. libm stands in for a real library: it is always there. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dynlib.h"
#include "test.h"

static double (*p_cos)(double);
static double (*p_sqrt)(double);
static int loads;
static void count_load(void) {
  __atomic_add_fetch(&loads, 1, __ATOMIC_RELAXED);
}

static const struct dynlib_sym m_syms[] = {{"cos", (void **)&p_cos}, {"sqrt", (void **)&p_sqrt}};
static struct dynlib libm_ok = {.what = "libm",
                                .soname = "libm.so.6",
                                .syms = m_syms,
                                .nsyms = 2,
                                .on_load = count_load,
                                .lock = PTHREAD_MUTEX_INITIALIZER};

static void *load_thread(void *arg) {
  struct err e = {0};
  *(int *)arg = dynlib_load(&libm_ok, &e);
  return NULL;
}

/* 16 threads at once: every one sees it loaded, on_load ran once. */
static void test_load_once(void) {
  pthread_t t[16];
  int rc[16];
  CHECK_INT(dynlib_loaded(&libm_ok), 0);
  for (int i = 0; i < 16; i++) pthread_create(&t[i], NULL, load_thread, &rc[i]);
  for (int i = 0; i < 16; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 16; i++) CHECK_INT(rc[i], 0);
  CHECK_INT(loads, 1);
  CHECK_INT(dynlib_loaded(&libm_ok), 1);
  CHECK(p_cos && p_sqrt);
  if (p_sqrt) CHECK(p_sqrt(16.0) == 4.0);
  CHECK_STR(dynlib_error(&libm_ok), "");
  struct err e = {0};
  CHECK_INT(dynlib_load(&libm_ok, &e), 0); /* later calls: still loaded, no second on_load */
  CHECK_INT(loads, 1);
}

static void *p_none;
static const struct dynlib_sym none_syms[] = {{"cos", &p_none}};

/* No such file: the message names the library, the file, the package and
 * the variable; the second call gives the same error without trying. */
static void test_missing_file(void) {
  static struct dynlib d = {.what = "libnothing",
                            .soname = "libluagent-no-such-library.so.9",
                            .env = "LUAGENT_TEST_LIBNOTHING",
                            .package = "the libnothing9 package",
                            .syms = none_syms,
                            .nsyms = 1,
                            .on_load = count_load,
                            .lock = PTHREAD_MUTEX_INITIALIZER};
  unsetenv("LUAGENT_TEST_LIBNOTHING");
  int before = loads;
  struct err e = {0};
  CHECK_INT(dynlib_load(&d, &e), ERR_FAIL);
  CHECK_STR(e.code, "library");
  CHECK_CONTAINS(e.msg, "libnothing could not be loaded: libluagent-no-such-library.so.9");
  CHECK_CONTAINS(e.msg, "install the libnothing9 package");
  CHECK_CONTAINS(e.msg, "LUAGENT_TEST_LIBNOTHING");
  CHECK_INT(dynlib_loaded(&d), 0);
  CHECK_STR(dynlib_error(&d), e.msg);
  /* the file appears later (the variable set now): the failure is final */
  setenv("LUAGENT_TEST_LIBNOTHING", "libm.so.6", 1);
  struct err e2 = {0};
  CHECK_INT(dynlib_load(&d, &e2), ERR_FAIL);
  CHECK_STR(e2.msg, e.msg);
  CHECK_INT(loads, before);
  CHECK(p_none == NULL);
  unsetenv("LUAGENT_TEST_LIBNOTHING");
}

/* The variable names the file to load instead of the soname. */
static void test_env_names_file(void) {
  static void *p_cos2;
  static const struct dynlib_sym syms[] = {{"cos", &p_cos2}};
  static struct dynlib d = {.what = "libm",
                            .soname = "libluagent-no-such-library.so.9",
                            .env = "LUAGENT_TEST_LIBM",
                            .syms = syms,
                            .nsyms = 1,
                            .lock = PTHREAD_MUTEX_INITIALIZER};
  setenv("LUAGENT_TEST_LIBM", "libm.so.6", 1);
  struct err e = {0};
  CHECK_INT(dynlib_load(&d, &e), 0);
  CHECK(p_cos2 != NULL);
  unsetenv("LUAGENT_TEST_LIBM");
}

/* A library without one of the functions: named, and no slot is left
 * pointing into it (nothing half-loaded can be called). */
static void test_missing_symbol(void) {
  static void *a, *b;
  static const struct dynlib_sym syms[] = {{"cos", &a}, {"luagent_no_such_function", &b}};
  static struct dynlib d = {.what = "libm",
                            .soname = "libm.so.6",
                            .syms = syms,
                            .nsyms = 2,
                            .on_load = count_load,
                            .lock = PTHREAD_MUTEX_INITIALIZER};
  int before = loads;
  struct err e = {0};
  CHECK_INT(dynlib_load(&d, &e), ERR_FAIL);
  CHECK_CONTAINS(e.msg, "libm could not be loaded: libm.so.6 has no luagent_no_such_function");
  CHECK(a == NULL && b == NULL);
  CHECK_INT(loads, before);
  CHECK_INT(dynlib_loaded(&d), 0);
}

int main(void) {
  test_load_once();
  test_missing_file();
  test_env_names_file();
  test_missing_symbol();
  return TEST_END();
}
