/* bench_startup.c - the process-level figures of bench/run_startup.sh:
 * the wall time of whole processes, their peak RSS, and the shared
 * libraries they had mapped. It links nothing but libc, so its own size
 * never leaks into what it measures.
 *
 *   bench_startup time N CMD [ARG...]
 *       runs CMD once to warm the page cache, then N times, each a fresh
 *       process (posix_spawn, stdout and stderr to /dev/null); prints
 *       "median_ms=M min_ms=m cpu_ms=C": wall time, and the median CPU
 *       time (user + system) of the process, which a loaded machine
 *       stretches less than the wall. Exit 1 when any run fails.
 *   bench_startup peak [-v] CMD [ARG...]
 *       runs CMD once, stopped by ptrace just before it exits, and reads
 *       its /proc status and maps there; prints "hwm_kib=K anon_kib=A
 *       file_kib=F libs=L": the peak resident set (VmHWM), the private
 *       (RssAnon) and file-backed (RssFile) resident memory at exit, and
 *       how many shared objects were mapped (the dynamic loader included,
 *       the vDSO not). -v lists them on stderr. VmHWM is the child's own
 *       figure: unlike wait4's ru_maxrss it never includes the parent's
 *       memory from before the exec. RssFile counts the pages of the
 *       binary and its libraries mapped in, which varies from run to run
 *       with what the page cache holds (the kernel maps cached neighbours
 *       of a faulting page too): take the median of several runs.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One run of argv, its output discarded; the wait status, and in *cpu the
 * child's CPU seconds. */
static int spawn_wait(char **argv, double *cpu) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc) {
    fprintf(stderr, "bench_startup: cannot start %s: %s\n", argv[0], strerror(rc));
    return -1;
  }
  int st;
  struct rusage ru;
  if (wait4(pid, &st, 0, &ru) < 0) return -1;
  *cpu =
      ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  return st;
}

static int cmd_time(int n, char **argv) {
  if (n < 1) n = 1;
  double *t = calloc((size_t)n, sizeof *t), *c = calloc((size_t)n, sizeof *c);
  if (!t || !c) return 1;
  for (int i = -1; i < n; i++) { /* run -1 warms the page cache */
    double t0 = now_s(), cpu = 0;
    int st = spawn_wait(argv, &cpu);
    double dt = now_s() - t0;
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
      fprintf(stderr, "bench_startup: %s failed (status %d)\n", argv[0], st);
      free(t);
      free(c);
      return 1;
    }
    if (i >= 0) t[i] = dt, c[i] = cpu;
  }
  qsort(t, (size_t)n, sizeof *t, cmp_d);
  qsort(c, (size_t)n, sizeof *c, cmp_d);
  printf("median_ms=%.3f min_ms=%.3f cpu_ms=%.3f\n", t[n / 2] * 1e3, t[0] * 1e3, c[n / 2] * 1e3);
  free(t);
  free(c);
  return 0;
}

/* VmHWM and the shared objects of a process stopped at its exit. */
static int read_proc(pid_t pid, int verbose, long kib[3], int *libs) {
  char path[64], line[4096];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  kib[0] = kib[1] = kib[2] = -1;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "VmHWM:", 6)) kib[0] = strtol(line + 6, NULL, 10);
    if (!strncmp(line, "RssAnon:", 8)) kib[1] = strtol(line + 8, NULL, 10);
    if (!strncmp(line, "RssFile:", 8)) kib[2] = strtol(line + 8, NULL, 10);
  }
  fclose(f);
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  if (!(f = fopen(path, "r"))) return -1;
  char seen[256][256];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    char *name = strchr(line, '/');
    if (!name) continue;
    name[strcspn(name, "\n")] = 0;
    const char *base = strrchr(name, '/') + 1;
    if (!strstr(base, ".so")) continue;
    int k = 0;
    while (k < n && strcmp(seen[k], name)) k++;
    if (k < n || n == 256) continue;
    snprintf(seen[n++], sizeof seen[0], "%s", name);
    if (verbose) fprintf(stderr, "  %s\n", name);
  }
  fclose(f);
  *libs = n;
  return 0;
}

static int cmd_peak(int verbose, char **argv) {
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    int dn = open("/dev/null", O_WRONLY);
    if (dn >= 0) {
      dup2(dn, 1);
      dup2(dn, 2);
    }
    ptrace(PTRACE_TRACEME, 0, NULL, NULL);
    execvp(argv[0], argv); /* stops with SIGTRAP once the new image is in */
    _exit(127);
  }
  int st;
  long kib[3] = {-1, -1, -1};
  int libs = -1, got = 0;
  if (waitpid(pid, &st, 0) < 0 || !WIFSTOPPED(st)) {
    fprintf(stderr, "bench_startup: %s did not start\n", argv[0]);
    return 1;
  }
  ptrace(PTRACE_SETOPTIONS, pid, NULL, (void *)(long)(PTRACE_O_TRACEEXIT | PTRACE_O_EXITKILL));
  ptrace(PTRACE_CONT, pid, NULL, NULL);
  for (;;) {
    if (waitpid(pid, &st, 0) < 0) return 1;
    if (WIFEXITED(st) || WIFSIGNALED(st)) break;
    if (!WIFSTOPPED(st)) continue;
    int sig = WSTOPSIG(st);
    if (sig == SIGTRAP && (st >> 16) == PTRACE_EVENT_EXIT) {
      got = !read_proc(pid, verbose, kib, &libs);
      sig = 0;
    } else if (sig == SIGTRAP) {
      sig = 0;
    }
    ptrace(PTRACE_CONT, pid, NULL, (void *)(long)sig); /* pass real signals on */
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) || !got) {
    fprintf(stderr, "bench_startup: %s failed (status %d)\n", argv[0], st);
    return 1;
  }
  printf("hwm_kib=%ld anon_kib=%ld file_kib=%ld libs=%d\n", kib[0], kib[1], kib[2], libs);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 4 && !strcmp(argv[1], "time")) return cmd_time(atoi(argv[2]), argv + 3);
  if (argc >= 4 && !strcmp(argv[1], "peak") && !strcmp(argv[2], "-v")) return cmd_peak(1, argv + 3);
  if (argc >= 3 && !strcmp(argv[1], "peak")) return cmd_peak(0, argv + 2);
  fprintf(stderr, "usage: bench_startup time N CMD [ARG...] | peak [-v] CMD [ARG...]\n");
  return 2;
}
