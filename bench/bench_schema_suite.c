/* bench_schema_suite.c - luagent's JSON Schema validator against the public
 * JSON-Schema-Test-Suite (json-schema-org/JSON-Schema-Test-Suite, not part
 * of this repository).
 *
 * Usage: bench_schema_suite DIR [-v] [--assert-format]
 *   DIR is a checkout's tests/draft2020-12. Runs every *.json there (the
 *   required tests; optional/ is not read). Schemas are compiled lenient
 *   (as for schemas from elsewhere) with any root. refRemote.json and every
 *   case whose schema has a remote $ref (compile error "remote") are
 *   skipped and counted. Prints passed/total per file and overall; -v also
 *   prints each failing test; --assert-format compiles with
 *   SCHEMA_ASSERT_FORMAT (for DIR/optional/format). Exits 0 whatever the
 *   score (a measurement).
 * Also times validation of a typical tool schema (the per-call cost).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json.h"
#include "schema.h"
#include "util.h"

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void time_tool_schema(void) {
  const char *schema_text =
      "{\"type\":\"object\",\"required\":[\"path\",\"content\"],\"additionalProperties\":false,"
      "\"properties\":{\"path\":{\"type\":\"string\",\"minLength\":1,\"pattern\":\"^[a-z/._-]+$\"},"
      "\"content\":{\"type\":\"string\"},\"mode\":{\"enum\":[\"overwrite\",\"append\"]}}}";
  cJSON *doc = cJSON_Parse(schema_text);
  cJSON *args =
      cJSON_Parse("{\"path\":\"notes/today.txt\",\"content\":\"hello\",\"mode\":\"append\"}");
  struct schema *s;
  struct err e = {0};
  double t0 = now();
  int n = 2000;
  for (int i = 0; i < n; i++) {
    schema_compile(doc, NULL, "bench", &s, &e);
    schema_free(s);
  }
  double t1 = now();
  schema_compile(doc, NULL, "bench", &s, &e);
  int m = 200000, bad = 0;
  for (int i = 0; i < m; i++) bad += schema_run(s, args, "args", &e) != 0;
  double t2 = now();
  printf("tool schema: compile %.2f us, validate %.3f us per call (%d failures)\n",
         (t1 - t0) / n * 1e6, (t2 - t1) / m * 1e6, bad);
  schema_free(s);
  cJSON_Delete(doc);
  cJSON_Delete(args);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s JSON-Schema-Test-Suite/tests/draft2020-12 [-v]\n", argv[0]);
    return 2;
  }
  int verbose = 0;
  unsigned extra = 0;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "-v"))
      verbose = 1;
    else if (!strcmp(argv[i], "--assert-format"))
      extra |= SCHEMA_ASSERT_FORMAT;
  }
  DIR *d = opendir(argv[1]);
  if (!d) {
    perror(argv[1]);
    return 2;
  }
  char *names[256];
  int nn = 0;
  for (struct dirent *de; (de = readdir(d)) && nn < 256;) {
    size_t l = strlen(de->d_name);
    if (l > 5 && !strcmp(de->d_name + l - 5, ".json")) names[nn++] = xstrdup(de->d_name);
  }
  closedir(d);
  qsort(names, (size_t)nn, sizeof *names, by_name);
  int all_pass = 0, all_total = 0, all_skip = 0;
  for (int f = 0; f < nn; f++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", argv[1], names[f]);
    char *text = NULL;
    size_t len = 0;
    struct err e = {0};
    if (util_read_file(path, 64 << 20, &text, &len, &e)) {
      fprintf(stderr, "%s: %s\n", names[f], e.msg);
      continue;
    }
    cJSON *groups = NULL;
    if (json_parse(text, len, 0, &groups, &e)) fprintf(stderr, "%s: %s\n", names[f], e.msg);
    free(text);
    int pass = 0, total = 0, skip = 0;
    int remote_file = !strcmp(names[f], "refRemote.json");
    for (const cJSON *g = groups ? groups->child : NULL; g; g = g->next) {
      const cJSON *schema = cJSON_GetObjectItem(g, "schema");
      const cJSON *tests = cJSON_GetObjectItem(g, "tests");
      const char *gd = cJSON_GetStringValue(cJSON_GetObjectItem(g, "description"));
      int nt = cJSON_GetArraySize(tests);
      if (remote_file) {
        skip += nt;
        continue;
      }
      struct schema *s = NULL;
      struct schema_opts o = {SCHEMA_LENIENT | SCHEMA_ANY_ROOT | extra, NULL, NULL};
      struct err ce = {0};
      if (schema_compile(schema, &o, names[f], &s, &ce)) {
        if (strstr(ce.msg, "remote")) {
          skip += nt;
          continue;
        }
        total += nt;
        if (verbose) printf("  FAIL %s / %s: schema refused: %s\n", names[f], gd, ce.msg);
        continue;
      }
      for (const cJSON *t = tests ? tests->child : NULL; t; t = t->next) {
        const cJSON *data = cJSON_GetObjectItem(t, "data");
        int want = cJSON_IsTrue(cJSON_GetObjectItem(t, "valid"));
        struct err ve = {0};
        int got = schema_run(s, data, "data", &ve) == 0;
        total++;
        if (got == want)
          pass++;
        else if (verbose)
          printf("  FAIL %s / %s / %s: wanted %s%s%s\n", names[f], gd,
                 cJSON_GetStringValue(cJSON_GetObjectItem(t, "description")),
                 want ? "valid" : "invalid", got ? "" : ", got: ", got ? "" : ve.msg);
      }
      schema_free(s);
    }
    cJSON_Delete(groups);
    printf("%-32s %4d/%-4d%s", names[f], pass, total, pass == total ? "" : "  <- failures");
    if (skip) printf("  (%d skipped: remote refs)", skip);
    printf("\n");
    all_pass += pass, all_total += total, all_skip += skip;
    free(names[f]);
  }
  printf("%s: %d/%d passed (%.1f%%), %d skipped (remote refs)\n", argv[1], all_pass, all_total,
         all_total ? 100.0 * all_pass / all_total : 0.0, all_skip);
  time_tool_schema();
  return 0;
}
