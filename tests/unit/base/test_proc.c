/* test_proc.c - proc_stat_read, proc_exe_is, proc_alive: what they read
 * of a live process, of a zombie and of a reaped one, and that every
 * entry that cannot be read answers "no such process" (fails closed). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "proc.h"
#include "test.h"

/* A child that exits at once; returns its pid, left a zombie (not reaped). */
static pid_t zombie(void) {
  pid_t kid = fork();
  if (kid == 0) _exit(0);
  siginfo_t si;
  waitid(P_PID, (id_t)kid, &si, WEXITED | WNOWAIT); /* exited, still unreaped */
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

static void test_hostile_name(void) {
  /* a name with spaces and ')' must not shift the fields */
  int fd[2];
  CHECK_INT(pipe(fd), 0);
  pid_t kid = fork();
  if (kid == 0) {
    prctl(PR_SET_NAME, "a) b ) Z 1 c", 0, 0, 0);
    char x;
    (void)!read(fd[0], &x, 1);
    _exit(0);
  }
  struct proc_stat mine, ps = {0};
  CHECK_INT(proc_stat_read(getpid(), &mine), 0);
  struct timespec ts = {0, 20000000};
  nanosleep(&ts, NULL);
  CHECK_INT(proc_stat_read(kid, &ps), 0);
  CHECK(ps.state != 'Z');
  CHECK_INT(ps.ppid, getpid());
  CHECK(ps.start >= mine.start);
  CHECK_INT(proc_exe_is(kid, NULL), 1); /* a fork runs our binary */
  (void)!write(fd[1], "x", 1);
  waitpid(kid, NULL, 0);
  close(fd[0]);
  close(fd[1]);
}

static void test_zombie_and_gone(void) {
  pid_t kid = zombie();
  struct proc_stat ps = {0};
  CHECK_INT(proc_stat_read(kid, &ps), 0);
  CHECK_INT(ps.state, 'Z');
  CHECK_INT(ps.ppid, getpid());
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
  test_hostile_name();
  test_zombie_and_gone();
  test_unreadable();
  return TEST_END();
}
