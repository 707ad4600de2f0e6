/* proc.c - see proc.h. */
#include "proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"

int proc_stat_read(long long pid, struct proc_stat *ps) {
  char path[64], buf[1024];
  if (pid <= 0) return ERR_NOTFOUND;
  snprintf(path, sizeof path, "/proc/%lld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return ERR_NOTFOUND;
  size_t got = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[got] = 0;
  const char *p = strrchr(buf, ')'); /* the end of "(comm)", field 2 */
  if (!p || sscanf(++p, " %c %d", &ps->state, &ps->ppid) != 2) return ERR_NOTFOUND;
  /* p is at the space before field 3; the one before field 22 is 19 on
   * (one more lands on vsize, which changes as the process runs, and once
   * made every live run look dead). */
  for (int field = 3; field < 22 && p; field++) p = strchr(p + 1, ' ');
  if (!p) return ERR_NOTFOUND;
  char *end;
  ps->start = strtoll(p + 1, &end, 10);
  return end == p + 1 ? ERR_NOTFOUND : 0;
}

int proc_exe_is(long long pid, const char *exe) {
  char path[64], l[4096], self[4096];
  snprintf(path, sizeof path, "/proc/%lld/exe", pid);
  ssize_t n = readlink(path, l, sizeof l - 1);
  if (n <= 0) return 0;
  l[n] = 0;
  if (!exe) {
    ssize_t m = readlink("/proc/self/exe", self, sizeof self - 1);
    if (m <= 0) return 0;
    self[m] = 0;
    exe = self;
  }
  return !strcmp(l, exe);
}

int proc_alive(long long pid, long long start) {
  struct proc_stat ps;
  if (proc_stat_read(pid, &ps)) return 0;
  return start <= 0 || ps.start == start;
}
