/* test_automation.c - loading and validating automation files. */
#include <stdlib.h>

#include "automation.h"
#include "util.h"
#include "test.h"

static struct automation *load(const char *src, struct err *e) {
  struct automation *a = NULL;
  err_clear(e);
  automation_load_source(src, strlen(src), "automations/x.lua", "x", &a, e);
  return a;
}

static void test_good(void) {
  struct err e;
  struct automation *a = load(
      "return { name = 'x', description = 'd', every = '15s', timeout = '10s',\n"
      "  mode = 'queued', max = 3, catch_up = true, run = function(ctx) end }",
      &e);
  CHECK(a != NULL);
  if (!a) {
    fprintf(stderr, "%s\n", e.msg);
    return;
  }
  CHECK_STR(a->name, "x");
  CHECK_STR(a->description, "d");
  CHECK_INT(a->trig, TRIG_EVERY);
  CHECK(a->every_s == 15);
  CHECK(a->timeout_s == 10);
  CHECK_INT(a->mode, MODE_QUEUED);
  CHECK_INT(a->max, 3);
  CHECK_INT(a->catch_up, 1);
  CHECK_INT(a->enabled, 1);
  CHECK_INT(a->rerun_lost, 0); /* on_lost's default: "interrupt" */
  CHECK_STR(a->trigger_text, "every 15s");
  CHECK(automation_next_after(a, 1000) == 1015);
  automation_free(a);

  a = load("return { cron = '0 7 * * 1-5', tz = 'Europe/Paris', run = function() end }", &e);
  CHECK(a != NULL);
  if (a) {
    CHECK_STR(a->name, "x"); /* from the file name */
    CHECK_INT(a->trig, TRIG_CRON);
    CHECK_STR(a->trigger_text, "cron 0 7 * * 1-5 (Europe/Paris)");
    CHECK_INT(a->mode, MODE_SINGLE);
    /* Mon 2026-01-05 06:00Z = 07:00 Paris */
    CHECK(automation_next_after(a, 1767571200.0 /* 2026-01-05T00:00Z */) == 1767592800.0);
    char k1[256];
    automation_trigger_key(a, k1, sizeof k1);
    CHECK_CONTAINS(k1, "Europe/Paris");
    automation_free(a);
  }
  a = load("return { at = '2026-12-01T07:00:00Z', enabled = false, run = function() end }", &e);
  CHECK(a && a->trig == TRIG_AT && a->enabled == 0);
  if (a) {
    CHECK(automation_next_after(a, 0) == 1796108400.0);
    CHECK(automation_next_after(a, 1796108400.0) == 0);
  }
  automation_free(a);
  a = load("return { every = '1m', on_lost = 'rerun', run = function() end }", &e);
  CHECK(a && a->rerun_lost == 1);
  automation_free(a);
  a = load("return { every = '1m', on_lost = 'interrupt', run = function() end }", &e);
  CHECK(a && a->rerun_lost == 0);
  automation_free(a);
  a = load("return { on = 'deploy.*', run = function() end }", &e);
  CHECK(a && a->trig == TRIG_EVENT);
  if (a) CHECK_STR(a->event, "deploy.*");
  automation_free(a);
  a = load("return { run = function() end }", &e); /* manual only */
  CHECK(a && a->trig == TRIG_MANUAL);
  automation_free(a);
  a = load("return { every = 90, run = function() end }", &e); /* seconds as a number */
  CHECK(a && a->every_s == 90);
  automation_free(a);
}

/* Each bad file gives an error with file:line naming the problem. */
static void test_bad(void) {
  static const struct {
    const char *src, *want;
  } cases[] = {
      {"return 42", "automations/x.lua: an automation file must return a table"},
      {"return {\n every = '1s' }", "missing 'run'"},
      {"return {\n run = 5 }", "automations/x.lua:2: 'run' must be a function"},
      {"return { run = function() end,\n  evry = '1s' }",
       "automations/x.lua:2: unknown key 'evry'"},
      {"return { run = function() end,\n every = '1s',\n cron = '* * * * *' }",
       "automations/x.lua:3: 'every' and 'cron' are both set"},
      {"return { run = function() end,\n\n every = 'often' }",
       "automations/x.lua:3: every: bad duration 'often'"},
      {"return { run = function() end, every = '500ms' }", "'every' must be at least 1s"},
      {"return { run = function() end,\n cron = '61 * * * *' }",
       "automations/x.lua:2: cron '61 * * * *': minute field: '61' is out of range 0-59"},
      {"return { run = function() end,\n cron = '0 7 * * *',\n tz = 'Nowhere/City' }",
       "automations/x.lua:3: unknown time zone 'Nowhere/City'"},
      {"return { run = function() end,\n every = '1s',\n tz = 'UTC' }",
       "'tz' only applies to a 'cron' trigger"},
      {"return { run = function() end,\n at = 'tomorrow' }",
       "automations/x.lua:2: bad timestamp 'tomorrow'"},
      {"return { run = function() end,\n mode = 'often' }",
       "automations/x.lua:2: mode 'often' is unknown"},
      {"return { run = function() end,\n mode = 'single', max = 2 }", "'max' only applies"},
      {"return { run = function() end,\n mode = 'parallel', max = 0 }",
       "'max' must be a whole number"},
      {"return { run = function() end,\n catch_up = 'yes' }",
       "automations/x.lua:2: 'catch_up' must be true or false"},
      {"return { run = function() end,\n\n on_lost = 'retry' }",
       "automations/x.lua:3: on_lost 'retry' is unknown (expected \"interrupt\" or \"rerun\")"},
      {"return { run = function() end,\n on_lost = true }", "automations/x.lua:2: 'on_lost' must be a string"},
      {"return { run = function() end,\n name = 'other' }",
       "automations/x.lua:2: name 'other' does not match the file name"},
      {"return { run = function() end,\n name = 'Bad Name' }", "name 'Bad Name' is invalid"},
      {"return { run = function() end, on = '' }", "'on' must name an event"},
      {"return { run = function() end end }", "automations/x.lua:1:"},
      /* the key also appears in a string before the field: the line search
       * skips it (and must not loop) */
      {"local s = print(\"every\")\nreturn { run = function() end,\n every = 'bad' }",
       "automations/x.lua:3: every: bad duration 'bad'"},
      {"error('boom')", "automations/x.lua:1: boom"},
      {"while true do end", "instruction limit"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct err e;
    struct automation *a = load(cases[i].src, &e);
    CHECK(a == NULL);
    CHECK_CONTAINS(e.msg, cases[i].want);
    automation_free(a);
  }
}

static void test_names(void) {
  CHECK(automation_name_valid("site_watch"));
  CHECK(automation_name_valid("a-1"));
  CHECK(!automation_name_valid("1abc"));
  CHECK(!automation_name_valid("Abc"));
  CHECK(!automation_name_valid(""));
  CHECK(!automation_name_valid(NULL));
  CHECK(!automation_name_valid("a/b"));
  struct err e;
  struct automation *a = NULL;
  CHECK_INT(automation_load_file("/nonexistent/x.lua", "automations/x.lua", "x", &a, &e) < 0, 1);
  CHECK_CONTAINS(e.msg, "automations/x.lua: cannot read the file");
  automation_free(NULL);
}

static void test_event_regex(void) {
  static const char *const cases[][2] = {
      {"job.*", "^job\\..*$"},      {"a-b:c/d_e", "^a\\-b\\:c\\/d\\_e$"},
      {"q?", "^q.*$"},              {"br[ae]ck", "^.*$"},
      {"x\\*y", "^x\\*y$"},        {"tail\\", "^tail\\\\$"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct sbuf b = {0};
    automation_event_regex(cases[i][0], &b);
    CHECK_STR(b.s, cases[i][1]);
    sbuf_free(&b);
  }
}

int main(void) {
  test_event_regex();
  test_good();
  test_bad();
  test_names();
  return TEST_END();
}
