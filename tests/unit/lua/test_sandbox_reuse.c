/* test_sandbox_reuse.c - sandbox_recycle and sandbox_rerun (issue 20): a
 * reused sandbox gets fresh limits, drops what earlier calls left, runs
 * its kept chunk anew, and is refused once it hit a limit. Then
 * sandbox_run_cached (the daemon's workers): chunks kept compiled by name
 * and exact text, each run in a fresh _ENV, an edit compiled anew, and the
 * kept chunks never counted against a call's memory cap. */
#include <stdio.h>
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

  /* sandbox_run_cached: two chunks by name in one recycled sandbox. */
  static const char OTHER[] = "x = (rawget(_ENV, 'x') or 0) + 1\nreturn { bump = function() return x * 100 end }\n";
  CHECK_INT(sandbox_new(&lim, &sb, &e), 0);
  CHECK_INT(sandbox_run_cached(sb, CHUNK, strlen(CHUNK), "a.lua", NULL, &e), 0);
  CHECK_INT(call_int(sb, "bump", &e), 1);
  CHECK_INT(call_int(sb, "bump", &e), 2);
  for (int i = 0; i < 3; i++) { /* cache hits: a new module and _ENV every time */
    CHECK_INT(sandbox_recycle(sb, &lim, &e), 0);
    CHECK_INT(sandbox_run_cached(sb, OTHER, strlen(OTHER), "b.lua", NULL, &e), 0);
    CHECK_INT(call_int(sb, "bump", &e), 100); /* global x never seen again */
    CHECK_INT(sandbox_recycle(sb, &lim, &e), 0);
    CHECK_INT(sandbox_run_cached(sb, CHUNK, strlen(CHUNK), "a.lua", NULL, &e), 0);
    CHECK_INT(call_int(sb, "bump", &e), 1); /* its local n back at 0 */
  }
  /* The same name with other text: the new text runs, not the kept one. */
  CHECK_INT(sandbox_recycle(sb, &lim, &e), 0);
  CHECK_INT(sandbox_run_cached(sb, OTHER, strlen(OTHER), "a.lua", NULL, &e), 0);
  CHECK_INT(call_int(sb, "bump", &e), 100);
  /* A syntax error is reported as by sandbox_run_string, and not kept. */
  static const char BROKEN[] = "return {";
  CHECK_INT(sandbox_recycle(sb, &lim, &e), 0);
  CHECK(sandbox_run_cached(sb, BROKEN, strlen(BROKEN), "a.lua", NULL, &e) < 0);
  CHECK_STR(e.code, "syntax");
  CHECK_CONTAINS(e.msg, "a.lua:1:");
  memset(&e, 0, sizeof e);
  CHECK_INT(sandbox_run_cached(sb, OTHER, strlen(OTHER), "a.lua", NULL, &e), 0);
  CHECK_INT(call_int(sb, "bump", &e), 100);
  /* Binary chunks stay refused. */
  static const char BIN[] = "\x1bLua";
  CHECK(sandbox_run_cached(sb, BIN, strlen(BIN), "bin.lua", NULL, &e) < 0);
  CHECK_CONTAINS(e.msg, "binary");
  sandbox_free(sb);

  /* The kept chunks are the host's: with about 1 MB of them, a call
   * capped at 2 MB still has the room a new sandbox has (about 1.6 MB). */
  struct sb_limits two = lim;
  two.memory_bytes = (size_t)2 << 20;
  CHECK_INT(sandbox_new(&two, &sb, &e), 0);
  static const char HOG[] = "return { hog = function() local s = string.rep('y', 700 << 10) return #s end }\n";
  char big[8192], name[32];
  for (int i = 0; i < 200; i++) {
    int n = snprintf(big, sizeof big, "local t = { '%0*d' }\nreturn {}\n", 4000, i);
    snprintf(name, sizeof name, "fill%d.lua", i);
    CHECK_INT(sandbox_recycle(sb, &two, &e), 0);
    CHECK_INT(sandbox_run_cached(sb, big, (size_t)n, name, NULL, &e), 0);
  }
  CHECK_INT(sandbox_recycle(sb, &two, &e), 0);
  CHECK(sandbox_memory_used(sb) > ((size_t)1 << 20)); /* the kept chunks */
  CHECK_INT(sandbox_run_cached(sb, HOG, strlen(HOG), "hog.lua", NULL, &e), 0);
  CHECK_INT(call_int(sb, "hog", &e), 700 << 10);
  sandbox_free(sb);
  return TEST_END();
}
