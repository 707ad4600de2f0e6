/* test_watchdog.c - the process watchdog ends a run stuck in a C call that
 * no Lua hook can reach, with its message and exit code; disarming it
 * lets the process go on. Runs each case in a child process. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox.h"
#include "test.h"
#include "util.h"

static int child(int disarm, char *msg, size_t n, double *elapsed) {
  int fd[2];
  if (pipe(fd) != 0) return -1;
  double t0 = util_monotonic();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    watchdog_arm(util_monotonic() + 0.2, 0.1, 7, "watchdog: stuck in a C call");
    if (disarm) watchdog_disarm();
    util_sleep(1.5); /* stands in for a C call that never returns to Lua */
    _exit(0);
  }
  close(fd[1]);
  ssize_t r = read(fd[0], msg, n - 1);
  msg[r > 0 ? r : 0] = 0;
  close(fd[0]);
  int st;
  waitpid(pid, &st, 0);
  *elapsed = util_monotonic() - t0;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void) {
  char msg[256];
  double dt;
  CHECK_INT(child(0, msg, sizeof msg, &dt), 7);
  CHECK_CONTAINS(msg, "watchdog: stuck in a C call");
  CHECK(dt < 1.4); /* fired at deadline + grace, not when the call ended */
  CHECK_INT(child(1, msg, sizeof msg, &dt), 0);
  CHECK_STR(msg, "");
  return TEST_END();
}
