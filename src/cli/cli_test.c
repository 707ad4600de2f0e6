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

/* Text from a test (a name, a message, what it printed) for a terminal or
 * a report read line by line: controls, ESC, C1/bidi controls and bytes
 * that are not UTF-8 are shown escaped (util_term_escape). With pad, a
 * newline starts a new line indented by pad, so no line of the text can
 * pass for one of the runner's own (a summary, "ok 7 - ..."); without,
 * the text stays on one line (\n, \t and a backslash written as \n, \t, \\). */
static void term_text(FILE *f, const char *s, const char *pad) {
  size_t len = s ? strlen(s) : 0;
  for (size_t i = 0; i < len;) {
    char c = s[i];
    if (c == '\n') {
      if (pad) fprintf(f, "\n%s", pad);
      else fputs("\\n", f);
      i++;
    } else if (c == '\t') {
      fputs(pad ? "\t" : "\\t", f);
      i++;
    } else if (c == '\\' && !pad) {
      fputs("\\\\", f);
      i++;
    } else {
      char out[16];
      size_t n = util_term_escape(s + i, len - i, out);
      if (out[0]) fputs(out, f);
      else fwrite(s + i, 1, n, f);
      i += n;
    }
  }
}

/* A TAP description: one line, "#" (a directive: # TODO, # SKIP) written
 * as \# and a backslash as \\ (TAP 13), controls escaped. */
static void tap_text(const char *s) {
  size_t len = s ? strlen(s) : 0;
  for (size_t i = 0; i < len;) {
    if (s[i] == '#') {
      fputs("\\#", stdout);
      i++;
      continue;
    }
    size_t n = 1;
    while (i + n < len && s[i + n] != '#') n++;
    char *part = xmalloc(n + 1);
    memcpy(part, s + i, n);
    part[n] = 0;
    term_text(stdout, part, NULL);
    free(part);
    i += n;
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
      fputs("    ", stdout); /* a YAML block scalar: every line indented */
      term_text(stdout, r->message ? r->message : "", "    ");
      printf("\n  ...\n");
    }
    fflush(stdout);
  } else if (o->fmt == FMT_TEXT) {
    if (!r->passed) {
      fputs("FAIL ", stdout);
      term_text(stdout, r->where ? r->where : r->file, NULL);
      fputs(": ", stdout);
      term_text(stdout, r->name, NULL);
      fputs(": ", stdout);
      term_text(stdout, r->message ? r->message : "failed", "    ");
      fputc('\n', stdout);
    } else if (o->verbose) {
      fputs("ok   ", stdout);
      term_text(stdout, r->file, NULL);
      fputs(": ", stdout);
      term_text(stdout, r->name, NULL);
      printf(" (%.3fs)\n", r->seconds);
    }
    if (r->output && *r->output && (!r->passed || o->verbose)) {
      char *outp = xstrdup(r->output);
      size_t ol = strlen(outp);
      if (outp[ol - 1] == '\n') outp[ol - 1] = 0; /* the last line's own end */
      printf("    output:\n      ");
      term_text(stdout, outp, "      ");
      fputc('\n', stdout);
      free(outp);
    }
    fflush(stdout);
  }
}

/* XML 1.0 text, well-formed whatever s holds: the five entities escaped;
 * controls XML cannot hold at all shown as \xNN; bytes that are not UTF-8
 * (a cut character, binary output) and U+FFFE/U+FFFF as U+FFFD. */
static void xml_text_n(FILE *f, const char *s, size_t len) {
  for (size_t i = 0; s && i < len;) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x80) {
      switch (c) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
          if ((c < 0x20 && c != '\n' && c != '\t' && c != '\r') || c == 0x7f) fprintf(f, "\\x%02x", c);
          else fputc(c, f);
      }
      i++;
      continue;
    }
    size_t n = util_utf8_len((const unsigned char *)s + i, len - i, NULL);
    if (n == 0) {
      fputs("\xEF\xBF\xBD", f);
      i++;
    } else {
      const unsigned char *u = (const unsigned char *)s + i;
      if (n == 3 && u[0] == 0xEF && u[1] == 0xBF && (u[2] == 0xBE || u[2] == 0xBF)) fputs("\xEF\xBF\xBD", f);
      else fwrite(u, 1, n, f);
      i += n;
    }
  }
}

static void xml_text(FILE *f, const char *s) { xml_text_n(f, s, s ? strlen(s) : 0); }

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
      /* the first line, at most 511 bytes, cut between characters */
      const char *nl = strchr(msg, '\n');
      size_t flen = nl ? (size_t)(nl - msg) : strlen(msg);
      if (flen > 511) {
        flen = 511;
        while (flen > 0 && ((unsigned char)msg[flen] & 0xC0) == 0x80) flen--;
      }
      fprintf(f, ">\n      <failure message=\"");
      xml_text_n(f, msg, flen);
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
