/* test_autolock.c - an automation's lock across processes: one holder at a
 * time, the queue a daemon yields to, the holder's stamp, release on exit
 * (kill -9), and no hold kept by a forked child's copy after release. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "autolock.h"
#include "util.h"
#include "test.h"

static char ws[64];

static int lock_open(void) {
  struct err e;
  int fd = autolock_open(ws, "job", &e);
  if (fd < 0) fprintf(stderr, "%s\n", e.msg);
  return fd;
}

/* A child that opens the lock, does what `what` says, reports 'y' on p,
 * then waits to be killed. Returns its pid. */
static pid_t child(const char *what, int p[2]) {
  if (pipe(p)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    int fd = lock_open();
    int ok = fd >= 0;
    if (ok && !strcmp(what, "hold")) {
      ok = autolock_try(fd, 0) == 1;
      autolock_stamp(fd);
    }
    if (ok && !strcmp(what, "want")) ok = autolock_want(fd) == 1;
    if (write(p[1], ok ? "y" : "n", 1) != 1) _exit(2);
    for (;;) pause();
  }
  close(p[1]);
  char c = 0;
  if (pid > 0 && read(p[0], &c, 1) != 1) c = 0;
  close(p[0]);
  CHECK(c == 'y');
  return pid;
}

static void reap(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

static void test_one_holder(void) {
  int a = lock_open(), b = lock_open();
  CHECK(a >= 0 && b >= 0);
  /* two opens conflict, in one process too (open file description locks) */
  CHECK_INT(autolock_try(a, 1), 1);
  CHECK_INT(autolock_try(b, 1), 0);
  CHECK_INT(autolock_try(b, 0), 0);
  CHECK_INT(autolock_holder(b), 0); /* a daemon writes no stamp */
  autolock_release(a, 0);
  CHECK_INT(autolock_try(b, 0), 1);
  autolock_stamp(b);
  int c = lock_open();
  CHECK_INT(autolock_holder(c), (int)getpid());
  autolock_release(b, 1); /* clears its own stamp */
  CHECK_INT(autolock_holder(c), 0);
  CHECK_INT(autolock_try(c, 1), 1);
  autolock_release(c, 0);
  autolock_release(-1, 0); /* nothing */
}

static void test_queue(void) {
  int p[2];
  pid_t w = child("want", p); /* a manual run waiting for the lock */
  int d = lock_open();
  CHECK_INT(autolock_try(d, 1), 0); /* the daemon yields to it */
  CHECK_INT(autolock_try(d, 0), 1); /* the waiter itself takes it so */
  autolock_release(d, 0);
  reap(w);
  d = lock_open();
  CHECK_INT(autolock_try(d, 1), 1); /* the queue went with the waiter */
  /* a holder that took it with yield leaves the queue free to join... */
  int q = lock_open();
  CHECK_INT(autolock_want(q), 1);
  CHECK_INT(autolock_wanted(d), 1); /* ... and sees who joined */
  autolock_release(q, 0);
  CHECK_INT(autolock_wanted(d), 0);
  autolock_release(d, 0);
}

static void test_killed_holder(void) {
  int p[2];
  pid_t h = child("hold", p);
  int fd = lock_open();
  CHECK_INT(autolock_try(fd, 1), 0);
  CHECK_INT(autolock_holder(fd), (int)h);
  reap(h); /* kill -9: the kernel drops its lock */
  CHECK_INT(autolock_holder(fd), 0); /* its stamp names a process that is gone */
  CHECK_INT(autolock_try(fd, 1), 1);
  /* a child forked while the lock is held shares it (until its exec:
   * O_CLOEXEC); the holder's release unlocks it all the same */
  pid_t c = fork();
  if (c == 0) {
    for (;;) pause();
  }
  autolock_release(fd, 0);
  fd = lock_open();
  CHECK_INT(autolock_try(fd, 1), 1);
  autolock_release(fd, 0);
  reap(c);
}

static void test_errors(void) {
  struct err e;
  char bad[192];
  snprintf(bad, sizeof bad, "%s/file", ws);
  FILE *f = fopen(bad, "w");
  if (f) fclose(f);
  CHECK(autolock_open(bad, "job", &e) == ERR_IO); /* its .luagent cannot be made */
  CHECK_CONTAINS(e.msg, ".luagent/locks/job.lock");
  char slink[160];
  snprintf(slink, sizeof slink, "%s/.luagent/locks/other.lock", ws);
  CHECK(symlink("/etc/passwd", slink) == 0);
  CHECK(autolock_open(ws, "other", &e) == ERR_IO); /* never follows a link */
  CHECK_CONTAINS(e.msg, ".luagent/locks/other.lock");
  /* a hard link planted at a lock's name: refused, and the file it names
   * left as it was (review 15 F1: stamped over, then cut to nothing) */
  char victim[160], hard[160];
  snprintf(victim, sizeof victim, "%s/victim.txt", ws);
  snprintf(hard, sizeof hard, "%s/.luagent/locks/hard.lock", ws);
  f = fopen(victim, "w");
  if (f) fputs("the user's data, not a lock\n", f), fclose(f);
  CHECK(link(victim, hard) == 0);
  CHECK(autolock_open(ws, "hard", &e) == ERR_IO);
  CHECK_CONTAINS(e.msg, ".luagent/locks/hard.lock");
  CHECK_CONTAINS(e.msg, "another name links");
  struct stat st;
  CHECK(stat(victim, &st) == 0 && st.st_size == 28);
  /* a FIFO there: refused at once (O_RDWR does not wait for a writer) */
  char fifo[160];
  snprintf(fifo, sizeof fifo, "%s/.luagent/locks/fifo.lock", ws);
  CHECK(mkfifo(fifo, 0600) == 0);
  CHECK(autolock_open(ws, "fifo", &e) == ERR_IO);
  /* .luagent/locks itself a link: not followed */
  char ws2[128], real[160], locks[192];
  snprintf(ws2, sizeof ws2, "%s/ws2", ws);
  snprintf(real, sizeof real, "%s/elsewhere", ws);
  snprintf(locks, sizeof locks, "%s/.luagent/locks", ws2);
  CHECK(mkdir(ws2, 0700) == 0 && mkdir(real, 0700) == 0);
  snprintf(bad, sizeof bad, "%s/.luagent", ws2);
  CHECK(mkdir(bad, 0700) == 0 && symlink(real, locks) == 0);
  CHECK(autolock_open(ws2, "job", &e) == ERR_IO);
  CHECK_CONTAINS(e.msg, ".luagent/locks");
  snprintf(bad, sizeof bad, "%s/job.lock", real);
  CHECK(access(bad, F_OK) != 0); /* nothing made through the link */
}

/* The two steps the daemon takes (one directory for a pass of runs):
 * the same lock as autolock_open's, the same refusals, and a directory
 * removed since it was opened says ENOENT (the daemon opens it again). */
static void test_open_at(void) {
  struct err e;
  int dir = autolock_dir(ws, "job", &e);
  CHECK(dir >= 0);
  int a = autolock_open_at(dir, "job", &e), b = lock_open();
  CHECK(a >= 0 && b >= 0);
  CHECK_INT(autolock_try(a, 1), 1);
  CHECK_INT(autolock_try(b, 0), 0); /* the same file as autolock_open's */
  autolock_release(a, 0);
  autolock_release(b, 0);
  CHECK(autolock_open_at(dir, "hard", &e) == ERR_IO); /* test_errors' hard link */
  CHECK_CONTAINS(e.msg, "another name links");
  CHECK(autolock_open_at(dir, "other", &e) == ERR_IO); /* its symlink */
  CHECK_CONTAINS(e.msg, ".luagent/locks/other.lock");
  char name[300];
  memset(name, 'x', sizeof name - 1);
  name[sizeof name - 1] = 0;
  CHECK(autolock_open_at(dir, name, &e) == ERR_IO);
  CHECK_CONTAINS(e.msg, "too long");
  /* the directory removed (and made anew by someone else) after the open */
  char cmd[160], fresh[160];
  snprintf(cmd, sizeof cmd, "rm -rf %s/.luagent/locks", ws);
  CHECK(system(cmd) == 0);
  errno = 0;
  CHECK(autolock_open_at(dir, "job", &e) == ERR_IO);
  CHECK_INT(errno, ENOENT);
  CHECK_CONTAINS(e.msg, ".luagent/locks/job.lock");
  close(dir);
  dir = autolock_dir(ws, "job", &e); /* made again */
  CHECK(dir >= 0);
  snprintf(fresh, sizeof fresh, "%s/.luagent/locks", ws);
  struct stat st;
  CHECK(stat(fresh, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
  a = autolock_open_at(dir, "job", &e);
  CHECK(a >= 0);
  CHECK_INT(autolock_try(a, 1), 1);
  b = lock_open();
  CHECK_INT(autolock_try(b, 0), 0);
  autolock_release(a, 0);
  autolock_release(b, 0);
  close(dir);
}

int main(void) {
  snprintf(ws, sizeof ws, "/tmp/luagent-autolock.XXXXXX");
  if (!mkdtemp(ws)) return 1;
  test_one_holder();
  test_queue();
  test_killed_holder();
  test_errors();
  test_open_at();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", ws);
  if (system(cmd)) {
  }
  return TEST_END();
}
