/* test_sandbox_reuse.c - sandbox_recycle and sandbox_rerun (issue 20): a
 * reused sandbox gets fresh limits, drops what earlier calls left, runs
 * its kept chunk anew, and is refused once it hit a limit. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sandbox.h"
#include "test.h"

static const char CHUNK[] =
    "local n = 0\n"
    "local keep = {}\n"
    "return { bump = function() n = n + 1 return n end,\n"
    "         hog = function() keep.s = string.rep('x', 1 << 20) return #keep.s end,\n"
    "         spin = function() while true do end end }\n";

static long call_int(struct sandbox *sb, const char *fn, struct err *e) {
  const char *path[] = {fn, NULL};
  cJSON *ret = NULL;
  long v = -1;
  if (!sandbox_call(sb, path, NULL, &ret, NULL, e) && cJSON_IsNumber(ret)) v = (long)ret->valuedouble;
  cJSON_Delete(ret);
  return v;
}

int main(void) {
  struct err e = {0};
  struct sb_limits lim;
  sb_limits_default(&lim);
  struct sandbox *sb = NULL;
  CHECK_INT(sandbox_new(&lim, &sb, &e), 0);

  /* Without sandbox_keep_chunk there is nothing to run again. */
  CHECK_INT(sandbox_run_string(sb, CHUNK, strlen(CHUNK), "reuse.lua", NULL, &e), 0);
  CHECK(sandbox_rerun(sb, &e) < 0);
  CHECK_CONTAINS(e.msg, "no chunk");
  sandbox_free(sb);

  CHECK_INT(sandbox_new(&lim, &sb, &e), 0);
  sandbox_keep_chunk(sb);
  CHECK_INT(sandbox_run_string(sb, CHUNK, strlen(CHUNK), "reuse.lua", NULL, &e), 0);
  CHECK_INT(call_int(sb, "bump", &e), 1);
  CHECK_INT(call_int(sb, "bump", &e), 2); /* the same module: its upvalue counts */
  size_t base = sandbox_memory_used(sb);
  CHECK_INT(call_int(sb, "hog", &e), 1 << 20);
  CHECK(sandbox_memory_used(sb) > base + (900 << 10));

  /* Recycled and run again: a new module (upvalue back at 0), the megabyte
   * held by the old one collected, the instruction count from zero. */
  CHECK_INT(sandbox_recycle(sb, &lim, &e), 0);
  CHECK(sandbox_memory_used(sb) < base + (64 << 10));
  CHECK_INT(sandbox_instructions_used(sb), 0);
  const char *bump[] = {"bump", NULL};
  CHECK(!sandbox_has_function(sb, bump)); /* no module until the rerun */
  CHECK_INT(sandbox_rerun(sb, &e), 0);
  CHECK_INT(call_int(sb, "bump", &e), 1);

  /* The new limits hold: a small budget stops the spin, and a sandbox
   * that hit a limit is never handed out again. */
  struct sb_limits small = lim;
  small.instructions = 100000;
  CHECK_INT(sandbox_recycle(sb, &small, &e), 0);
  CHECK_INT(sandbox_rerun(sb, &e), 0);
  CHECK_INT(call_int(sb, "spin", &e), -1);
  CHECK_STR(e.code, "limit_instructions");
  memset(&e, 0, sizeof e);
  CHECK(sandbox_recycle(sb, &lim, &e) < 0);
  CHECK(sandbox_rerun(sb, &e) < 0);
  sandbox_free(sb);

  /* The deadline is counted from the recycle, not from sandbox_new. */
  struct sb_limits brief = lim;
  brief.deadline_s = 0.2;
  CHECK_INT(sandbox_new(&brief, &sb, &e), 0);
  sandbox_keep_chunk(sb);
  CHECK_INT(sandbox_run_string(sb, CHUNK, strlen(CHUNK), "reuse.lua", NULL, &e), 0);
  CHECK_INT(call_int(sb, "spin", &e), -1);
  CHECK_STR(e.code, "limit_deadline");
  sandbox_free(sb);
  CHECK_INT(sandbox_new(&brief, &sb, &e), 0);
  sandbox_keep_chunk(sb);
  CHECK_INT(sandbox_run_string(sb, CHUNK, strlen(CHUNK), "reuse.lua", NULL, &e), 0);
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL); /* past the first deadline */
  CHECK_INT(sandbox_recycle(sb, &brief, &e), 0);
  CHECK_INT(sandbox_rerun(sb, &e), 0);
  CHECK_INT(call_int(sb, "bump", &e), 1);
  sandbox_free(sb);
  return TEST_END();
}
