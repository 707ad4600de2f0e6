/* cli_test.c - `luagent test [PATH...] [--filter P] [--json | --junit FILE |
 * --tap] [--timeout S] [-v]`: runs the workspace's *_test.lua files (see
 * testrun.h) and prints the results like other test runners do. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "testrun.h"
#include "util.h"

enum fmt { FMT_TEXT, FMT_JSON, FMT_TAP };

struct out {
  enum fmt fmt;
  int verbose;
  int n;          /* results so far (TAP numbers) */
  cJSON *all;     /* every result, for --json and --junit */
};

/* Indents every line after the first by pad. */
static void print_indented(FILE *f, const char *text, const char *pad) {
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    fprintf(f, "%s%.*s\n", p == text ? "" : pad, (int)n, p);
    p += n + (nl ? 1 : 0);
  }
}

/* A TAP description: "#" escaped, no line breaks. */
static void tap_text(const char *s) {
  for (; s && *s; s++) {
    if (*s == '#') fputs("\\#", stdout);
    else if (*s == '\n' || *s == '\r') fputc(' ', stdout);
    else fputc(*s, stdout);
  }
}

static void on_result(void *ud, const struct test_result *r) {
  struct out *o = ud;
  o->n++;
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "file", r->file);
  cJSON_AddStringToObject(j, "name", r->name);
  cJSON_AddStringToObject(j, "status", r->passed ? "passed" : "failed");
  if (!r->passed) {
    cJSON_AddStringToObject(j, "message", r->message ? r->message : "");
    cJSON_AddStringToObject(j, "where", r->where ? r->where : r->file);
  }
  if (r->output && *r->output) cJSON_AddStringToObject(j, "output", r->output);
  cJSON_AddNumberToObject(j, "seconds", r->seconds);
  cJSON_AddItemToArray(o->all, j);
  if (o->fmt == FMT_TAP) {
    /* "#" starts a directive in TAP (# SKIP, # TODO): escaped in names */
    printf("%s %d - ", r->passed ? "ok" : "not ok", o->n);
    tap_text(r->file);
    fputs(": ", stdout);
    tap_text(r->name);
    fputc('\n', stdout);
    if (!r->passed) {
      cJSON *at = cJSON_CreateString(r->where ? r->where : r->file);
      char *q = json_print(at, 0); /* a JSON string is a YAML scalar */
      printf("  ---\n  at: %s\n  message: |\n", q);
      free(q);
      cJSON_Delete(at);
      const char *m = r->message ? r->message : "";
      for (const char *p = m; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        printf("    %.*s\n", (int)n, p);
        p += n + (nl ? 1 : 0);
      }
      printf("  ...\n");
    }
    fflush(stdout);
  } else if (o->fmt == FMT_TEXT) {
    if (!r->passed) {
      printf("FAIL %s: %s: ", r->where ? r->where : r->file, r->name);
      print_indented(stdout, r->message ? r->message : "failed", "    ");
    } else if (o->verbose) {
      printf("ok   %s: %s (%.3fs)\n", r->file, r->name, r->seconds);
    }
    if (r->output && *r->output && (!r->passed || o->verbose)) {
      printf("    output:\n      ");
      print_indented(stdout, r->output, "      ");
    }
    fflush(stdout);
  }
}

/* XML 1.0 text: the five entities escaped, other control characters
 * (which XML cannot hold at all) shown as '?'. */
static void xml_text(FILE *f, const char *s) {
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    switch (c) {
      case '&': fputs("&amp;", f); break;
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '"': fputs("&quot;", f); break;
      case '\'': fputs("&apos;", f); break;
      default:
        if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') fputc('?', f);
        else fputc(c, f);
    }
  }
}

/* JUnit XML: one testsuite per file, in the order the files ran. */
static int write_junit(const char *path, const cJSON *all, const struct testrun_summary *s) {
  FILE *f = fopen(path, "w");
  if (!f) return cli_fail(2, "test: cannot write %s", path);
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  fprintf(f, "<testsuites name=\"luagent test\" tests=\"%d\" failures=\"%d\" time=\"%.3f\">\n",
          s->passed + s->failed, s->failed, s->seconds);
  const cJSON *it = all ? all->child : NULL;
  while (it) {
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(it, "file"));
    int n = 0, nf = 0;
    double secs = 0;
    const cJSON *k;
    for (k = it; k && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(k, "file")), file); k = k->next) {
      n++;
      secs += cJSON_GetNumberValue(cJSON_GetObjectItem(k, "seconds"));
      if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(k, "status")), "passed")) nf++;
    }
    fprintf(f, "  <testsuite name=\"");
    xml_text(f, file);
    fprintf(f, "\" tests=\"%d\" failures=\"%d\" time=\"%.3f\">\n", n, nf, secs);
    for (; it != k; it = it->next) {
      fprintf(f, "    <testcase classname=\"");
      xml_text(f, file);
      fprintf(f, "\" name=\"");
      xml_text(f, cJSON_GetStringValue(cJSON_GetObjectItem(it, "name")));
      fprintf(f, "\" time=\"%.3f\"", cJSON_GetNumberValue(cJSON_GetObjectItem(it, "seconds")));
      const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(it, "message"));
      if (!msg) {
        fprintf(f, "/>\n");
        continue;
      }
      const char *where = cJSON_GetStringValue(cJSON_GetObjectItem(it, "where"));
      const char *nl = strchr(msg, '\n');
      char first[512];
      snprintf(first, sizeof first, "%.*s", nl ? (int)(nl - msg) : (int)strlen(msg), msg);
      fprintf(f, ">\n      <failure message=\"");
      xml_text(f, first);
      fprintf(f, "\" type=\"failure\">");
      xml_text(f, where);
      fprintf(f, ": ");
      xml_text(f, msg);
      fprintf(f, "</failure>\n");
      const char *outp = cJSON_GetStringValue(cJSON_GetObjectItem(it, "output"));
      if (outp) {
        fprintf(f, "      <system-out>");
        xml_text(f, outp);
        fprintf(f, "</system-out>\n");
      }
      fprintf(f, "    </testcase>\n");
    }
    fprintf(f, "  </testsuite>\n");
  }
  fprintf(f, "</testsuites>\n");
  if (fclose(f) != 0) return cli_fail(2, "test: cannot write %s", path);
  return 0;
}

static volatile int stop_flag;
static void on_signal(int sig) {
  (void)sig;
  stop_flag = 1;
}

static const char *USAGE =
    "usage: luagent test [PATH...] [--filter PATTERN] [--json | --tap] [--junit FILE] "
    "[--timeout SECONDS] [-v]";

int cli_test(const struct cli_opts *co, int argc, char **argv) {
  struct out out = {.fmt = co->json ? FMT_JSON : FMT_TEXT, .verbose = co->verbose};
  const char **paths = xcalloc((size_t)argc + 1, sizeof *paths);
  size_t np = 0;
  const char *filter = NULL, *junit = NULL;
  double timeout = 0;
  int code = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = NULL;
#define OPTVAL(name)                                                            \
  (!strcmp(a, name) ? (i + 1 < argc ? (val = argv[++i]) : NULL)                 \
   : !strncmp(a, name "=", strlen(name) + 1) ? (val = a + strlen(name) + 1) : NULL)
    if (!strcmp(a, "--json")) {
      if (out.fmt == FMT_TAP) goto both;
      out.fmt = FMT_JSON;
    } else if (!strcmp(a, "--tap")) {
      if (out.fmt == FMT_JSON) goto both;
      out.fmt = FMT_TAP;
    } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
      out.verbose = 1;
    } else if (!strncmp(a, "--filter", 8) && (a[8] == 0 || a[8] == '=')) {
      if (!OPTVAL("--filter")) {
        code = cli_fail(2, "test: --filter needs a pattern\n%s", USAGE);
        goto done;
      }
      filter = val;
    } else if (!strncmp(a, "--junit", 7) && (a[7] == 0 || a[7] == '=')) {
      if (!OPTVAL("--junit") || !*val) {
        code = cli_fail(2, "test: --junit needs a file name\n%s", USAGE);
        goto done;
      }
      junit = val;
    } else if (!strncmp(a, "--timeout", 9) && (a[9] == 0 || a[9] == '=')) {
      char *end = NULL;
      if (!OPTVAL("--timeout") || !((timeout = strtod(val, &end)) > 0) || *end || timeout > 86400) {
        code = cli_fail(2, "test: --timeout needs seconds (more than 0, at most 86400)\n%s", USAGE);
        goto done;
      }
    } else if (a[0] == '-' && a[1]) {
      code = cli_fail(2, "test: unknown option %s\n%s", a, USAGE);
      goto done;
    } else {
      paths[np++] = a;
    }
#undef OPTVAL
  }
  out.all = cJSON_CreateArray();
  /* Interrupted or cut off (`| head`), the run still ends cleanly and
   * removes its temporary workspaces. */
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  if (out.fmt == FMT_TAP) printf("TAP version 13\n");
  struct testrun_opts o = {.workspace = co->workspace, .paths = paths, .npaths = np,
                           .filter = filter, .timeout_s = timeout, .on_result = on_result,
                           .ud = &out, .stop = &stop_flag};
  struct testrun_summary sum;
  struct err e = {0};
  int rc = testrun_run(&o, &sum, &e);
  if (rc) {
    code = cli_fail(rc == ERR_NOTFOUND && !strcmp(e.code, "no_tests") ? 1 : 2, "%s", e.msg);
    goto done;
  }
  int total = sum.passed + sum.failed;
  if (out.fmt == FMT_TAP) {
    printf("1..%d\n# %d passed, %d failed\n", total, sum.passed, sum.failed);
  } else if (out.fmt == FMT_JSON) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "passed", sum.passed);
    cJSON_AddNumberToObject(j, "failed", sum.failed);
    cJSON_AddNumberToObject(j, "files", sum.files);
    cJSON_AddNumberToObject(j, "seconds", sum.seconds);
    cJSON_AddItemReferenceToObject(j, "tests", out.all);
    char *s = json_print(j, JSON_PRETTY);
    puts(s);
    free(s);
    cJSON_Delete(j);
  } else {
    printf("%d passed, %d failed (%d file%s, %.2fs)\n", sum.passed, sum.failed, sum.files,
           sum.files == 1 ? "" : "s", sum.seconds);
  }
  if (junit && (code = write_junit(junit, out.all, &sum))) goto done;
  if (sum.stopped) code = cli_fail(1, "test: stopped before every test ran");
  else if (!total) code = cli_fail(1, "test: no tests ran%s", filter ? " (none matches --filter)" : "");
  else code = sum.failed ? 1 : 0;
  goto done;
both:
  code = cli_fail(2, "test: --json and --tap are two outputs; pick one\n%s", USAGE);
done:
  cJSON_Delete(out.all);
  free(paths);
  return code;
}
