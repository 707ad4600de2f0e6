/* test_proc.c - proc_stat_read, proc_exe_is, proc_alive: what they read
 * of a live process, of a zombie with a hostile name and of a reaped one,
 * and that every entry that cannot be read answers "no such process"
 * (fails closed). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "err.h"
#include "proc.h"
#include "test.h"

/* A child that exits at once, named name; returns its pid, left a zombie
 * (exited, not reaped), which keeps its name. */
static pid_t zombie(const char *name) {
  pid_t kid = fork();
  if (kid == 0) {
    prctl(PR_SET_NAME, name, 0, 0, 0);
    _exit(0);
  }
  siginfo_t si;
  waitid(P_PID, (id_t)kid, &si, WEXITED | WNOWAIT);
  return kid;
}

static void test_self(void) {
  struct proc_stat ps = {0};
  CHECK_INT(proc_stat_read(getpid(), &ps), 0);
  CHECK_INT(ps.state, 'R');
  CHECK_INT(ps.ppid, getppid());
  CHECK(ps.start > 0);
  CHECK_INT(proc_alive(getpid(), ps.start), 1);
  CHECK_INT(proc_alive(getpid(), 0), 1);             /* no start recorded: the pid alone */
  CHECK_INT(proc_alive(getpid(), ps.start + 1), 0);  /* another start: a reused pid */
  CHECK_INT(proc_exe_is(getpid(), NULL), 1);
  CHECK_INT(proc_exe_is(getpid(), "/nonexistent/luagent"), 0);
}

static void test_zombie_and_gone(void) {
  /* the name holds ") R 1 ": read from its first ')', the child would be
   * running (R) with parent 1; from its last, it is our zombie */
  pid_t kid = zombie("a) R 1 b)");
  struct proc_stat mine, ps = {0};
  CHECK_INT(proc_stat_read(getpid(), &mine), 0);
  CHECK_INT(proc_stat_read(kid, &ps), 0);
  CHECK_INT(ps.state, 'Z');
  CHECK_INT(ps.ppid, getpid());
  CHECK(ps.start >= mine.start); /* started after us */
  CHECK_INT(proc_alive(kid, ps.start), 1);  /* a zombie still has its entry */
  CHECK_INT(proc_exe_is(kid, NULL), 0);     /* but no exe link to read: closed */
  waitpid(kid, NULL, 0);
  /* reaped: every question answers "no such process" */
  CHECK_INT(proc_stat_read(kid, &ps), ERR_NOTFOUND);
  CHECK_INT(proc_alive(kid, 0), 0);
  CHECK_INT(proc_alive(kid, ps.start), 0);
  CHECK_INT(proc_exe_is(kid, NULL), 0);
}

static void test_unreadable(void) {
  struct proc_stat ps;
  CHECK_INT(proc_stat_read(0, &ps), ERR_NOTFOUND);
  CHECK_INT(proc_stat_read(-1, &ps), ERR_NOTFOUND);
  CHECK_INT(proc_stat_read(1LL << 40, &ps), ERR_NOTFOUND); /* past any pid_max */
  CHECK_INT(proc_alive(0, 0), 0);
  CHECK_INT(proc_alive(-5, 0), 0);
  CHECK_INT(proc_exe_is(0, NULL), 0);
  CHECK_INT(proc_exe_is(-1, NULL), 0);
  CHECK_INT(proc_exe_is(1LL << 40, NULL), 0);
}

int main(void) {
  test_self();
  test_zombie_and_gone();
  test_unreadable();
  return TEST_END();
}
