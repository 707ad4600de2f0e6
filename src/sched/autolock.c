/* autolock.c - see autolock.h. */
#define _GNU_SOURCE
#include "autolock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proc.h"
#include "util.h"

/* The lock's bytes in the file (locks lie beyond what is written there:
 * they are byte ranges, not data). */
#define HELD 0  /* write lock: the holder */
#define QUEUE 1 /* shared locks: the processes waiting for it */
/* The holder's pid and start time, padded to this size (so a shorter one
 * written later leaves nothing of a longer one). */
#define STAMP 40

static int setlk(int fd, short type, off_t start, off_t len) {
  struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
  return fcntl(fd, F_OFD_SETLK, &l);
}

int autolock_dir(const char *ws, const char *name, struct err *e) {
  static const char sub[] = "/.luagent/locks";
  char path[4400];
  size_t nw = strlen(ws);
  if (nw + sizeof sub > sizeof path)
    return err_set(e, ERR_IO, "lock", "the workspace path is too long for .luagent/locks/");
  memcpy(path, ws, nw);
  memcpy(path + nw, sub, sizeof sub); /* with its NUL */
  /* Opened without following a link (a link there could point the stamp
   * and the cut of autolock_release at any directory's files). */
  int dir = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0 && errno == ENOENT) { /* the first lock of this workspace */
    if (util_mkdirs(path, 0700, e)) return ERR_IO;
    dir = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (dir < 0)
    return err_set(e, ERR_IO, "lock",
                   "cannot open .luagent/locks/%s.lock: .luagent/locks (a directory, not a link): %s",
                   name, strerror(errno));
  return dir;
}

int autolock_open_at(int dir, const char *name, struct err *e) {
  /* NAME.lock, put together without snprintf: a daemon opens one per run */
  static const char ext[] = ".lock";
  char file[256]; /* a file name's limit (NAME_MAX 255) and its NUL */
  size_t nn = strlen(name);
  if (nn + sizeof ext > sizeof file) {
    errno = ENAMETOOLONG;
    return err_set(e, ERR_IO, "lock", "cannot open the lock of %.40s...: the name is too long",
                   name);
  }
  memcpy(file, name, nn);
  memcpy(file + nn, ext, sizeof ext); /* with its NUL */
  /* The file is written (the stamp) and cut (its release): only a file of
   * our own may be it. It is opened in the directory without following a
   * link, and it must be a regular file with no other name: a hard link
   * planted there would have the stamp written over, and then cut to
   * nothing, the file it names (state.db, or a file of someone else's
   * outside the workspace; review 15 F1). */
  int fd = openat(dir, file, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    int saved = errno;
    err_set(e, ERR_IO, "lock", "cannot open .luagent/locks/%s.lock: %s", name, strerror(saved));
    errno = saved;
    return ERR_IO;
  }
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    close(fd);
    errno = EPERM;
    return err_set(e, ERR_IO, "lock",
                   ".luagent/locks/%s.lock is not a file of luagent's own (another name links "
                   "to it, or it is not a regular file); remove it",
                   name);
  }
  return fd;
}

int autolock_open(const char *ws, const char *name, struct err *e) {
  int dir = autolock_dir(ws, name, e);
  if (dir < 0) return dir;
  int fd = autolock_open_at(dir, name, e);
  int saved = errno;
  close(dir);
  errno = saved;
  return fd;
}

int autolock_try(int fd, int yield) {
  /* With yield, the queue byte too, in the same call: refused while anyone
   * waits; then handed back at once, so that others may queue while this
   * process holds the lock. */
  if (setlk(fd, F_WRLCK, HELD, yield ? 2 : 1))
    return errno == EAGAIN || errno == EACCES ? 0 : ERR_IO;
  if (yield && setlk(fd, F_UNLCK, QUEUE, 1)) {
    int saved = errno;
    setlk(fd, F_UNLCK, 0, 0);
    errno = saved;
    return ERR_IO;
  }
  return 1;
}

int autolock_want(int fd) {
  if (setlk(fd, F_RDLCK, QUEUE, 1)) return errno == EAGAIN || errno == EACCES ? 0 : ERR_IO;
  return 1;
}

int autolock_wanted(int fd) {
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = QUEUE, .l_len = 1};
  return fcntl(fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
}

void autolock_stamp(int fd) {
  char buf[STAMP], text[STAMP];
  int pid = (int)getpid();
  struct proc_stat ps;
  long long start = proc_stat_read(pid, &ps) ? 0 : ps.start;
  int n = snprintf(text, sizeof text, "%d %lld", pid, start);
  memset(buf, ' ', sizeof buf); /* padded: see STAMP */
  memcpy(buf, text, (size_t)n);
  buf[STAMP - 1] = '\n';
  if (pwrite(fd, buf, STAMP, 0) != STAMP) { /* the name is only for messages */
  }
}

int autolock_holder(int fd) {
  char buf[STAMP + 1];
  ssize_t n = pread(fd, buf, STAMP, 0);
  if (n <= 0) return 0;
  buf[n] = 0;
  int pid = 0;
  long long start = 0;
  if (sscanf(buf, "%d %lld", &pid, &start) != 2 || pid <= 0 || start <= 0) return 0;
  return proc_alive(pid, start) ? pid : 0;
}

void autolock_release(int fd, int clear) {
  if (fd < 0) return;
  if (clear && autolock_holder(fd) == (int)getpid() && ftruncate(fd, 0)) {
  }
  /* Explicitly: a copy of fd that a fork made (a worker not yet exec'd)
   * would otherwise keep the lock after this close. */
  setlk(fd, F_UNLCK, 0, 0);
  close(fd);
}
