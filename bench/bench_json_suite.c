/* bench_json_suite.c - JSONTestSuite conformance of json_parse.
 *
 * usage: bench_json_suite DIR [-v]
 * DIR is the test_parsing folder of a checkout of nst/JSONTestSuite (not
 * part of this repository). Every file is parsed in its own child process
 * under a 10 s alarm, so a crash or a hang is caught and counted instead of
 * ending the run. y_ files must be accepted, n_ files refused; i_ files may
 * go either way but must not crash. For every accepted file the child also
 * prints the tree, parses that text again and checks that it is valid and
 * json_equal to the first tree (the printer's round trip). Exits 0 when
 * every y_ is accepted, every n_ refused, and nothing crashed.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "json.h"
#include "util.h"

enum { ACCEPTED = 0, REFUSED = 1, ROUNDTRIP_BAD = 2, UNREADABLE = 3 };

/* Runs in the child: the exit status says what happened. */
static int check_file(const char *path, int verbose) {
  char *buf = NULL;
  size_t len = 0;
  struct err e = {0};
  if (util_read_file(path, (size_t)64 << 20, &buf, &len, &e)) return UNREADABLE;
  cJSON *v = NULL;
  int rc = json_parse(buf, len, 0, &v, &e);
  free(buf);
  if (rc) {
    if (verbose) printf("    %s\n", e.msg);
    return REFUSED;
  }
  char *text = json_print(v, 0);
  cJSON *again = NULL;
  int ok = !json_parse(text, strlen(text), 0, &again, &e) && json_equal(v, again);
  if (!ok && verbose) printf("    round trip failed: %s\n", text);
  free(text);
  cJSON_Delete(again);
  cJSON_Delete(v);
  return ok ? ACCEPTED : ROUNDTRIP_BAD;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s JSONTestSuite/test_parsing [-v]\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  int verbose = argc > 2 && !strcmp(argv[2], "-v");
  DIR *d = opendir(dir);
  if (!d) {
    perror(dir);
    return 2;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t l = strlen(de->d_name);
    if (l < 7 || de->d_name[1] != '_' || strcmp(de->d_name + l - 5, ".json")) continue;
    if (n == cap) names = xrealloc(names, (cap = cap ? cap * 2 : 512) * sizeof *names);
    names[n++] = xstrdup(de->d_name);
  }
  closedir(d);
  qsort(names, n, sizeof *names, cmp_names);

  int y = 0, y_ok = 0, nn = 0, n_ok = 0, i = 0, i_acc = 0, i_ref = 0, i_crashed = 0, crashed = 0,
      rt = 0, rt_ok = 0;
  for (size_t k = 0; k < n; k++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[k]);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      alarm(10);
      if (verbose) printf("  %s\n", names[k]);
      int r = check_file(path, verbose);
      fflush(stdout);
      _exit(r);
    }
    int st = 0;
    char kind = names[k][0];
    if (pid < 0 || waitpid(pid, &st, 0) < 0) {
      perror("fork");
      return 2;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) == UNREADABLE) {
      crashed++;
      if (kind == 'i') i_crashed++, i++;
      else if (kind == 'y') y++;
      else if (kind == 'n') nn++;
      printf("CRASH %s (%s %d)\n", names[k], WIFSIGNALED(st) ? "signal" : "status",
             WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
      continue;
    }
    int code = WEXITSTATUS(st), accepted = code == ACCEPTED || code == ROUNDTRIP_BAD;
    if (accepted) {
      rt++;
      if (code == ACCEPTED) rt_ok++;
      else printf("ROUND TRIP FAILED %s\n", names[k]);
    }
    if (kind == 'y') {
      y++;
      if (accepted) y_ok++;
      else printf("REFUSED (should accept) %s\n", names[k]);
    } else if (kind == 'n') {
      nn++;
      if (!accepted) n_ok++;
      else printf("ACCEPTED (should refuse) %s\n", names[k]);
    } else if (kind == 'i') {
      i++;
      if (accepted) i_acc++;
      else i_ref++;
    }
  }
  printf("JSONTestSuite test_parsing: %zu files\n", n);
  printf("y_ accepted %d/%d\n", y_ok, y);
  printf("n_ refused %d/%d\n", n_ok, nn);
  printf("i_ crashed %d (of %d: %d accepted, %d refused)\n", i_crashed, i, i_acc, i_ref);
  printf("crashes or hangs in all files: %d\n", crashed);
  printf("round trip (print, parse again, json_equal) %d/%d accepted files\n", rt_ok, rt);
  for (size_t k = 0; k < n; k++) free(names[k]);
  free(names);
  return y_ok == y && n_ok == nn && !crashed && rt_ok == rt ? 0 : 1;
}
