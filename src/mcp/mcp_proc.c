/* mcp_proc.c - see mcp_proc.h: spawn, line I/O with deadlines, stderr to a
 * bounded log, and a stop that leaves no process behind. */
#define _GNU_SOURCE
#include "mcp_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* What a server inherits from luagent's environment: enough to find its
 * interpreter and a home, nothing that could hold a key. */
static const char *const inherited_env[] = {"PATH", "HOME",   "USER",   "LOGNAME", "SHELL",
                                            "TERM", "LANG",   "TMPDIR", "LC_ALL",  NULL};

static char **build_env(const cJSON *env) {
  size_t n = 0, cap = 16 + (size_t)(env ? cJSON_GetArraySize(env) : 0);
  char **v = xcalloc(cap + 1, sizeof *v);
  for (int i = 0; inherited_env[i]; i++) {
    const char *val = getenv(inherited_env[i]);
    if (!val) continue;
    if (env && cJSON_GetObjectItemCaseSensitive(env, inherited_env[i])) continue;
    struct sbuf b = {0};
    sbuf_printf(&b, "%s=%s", inherited_env[i], val);
    v[n++] = sbuf_take(&b);
  }
  const cJSON *it;
  cJSON_ArrayForEach(it, env) {
    if (!cJSON_IsString(it)) continue; /* mcp_config checked the types */
    struct sbuf b = {0};
    sbuf_printf(&b, "%s=%s", it->string, it->valuestring);
    v[n++] = sbuf_take(&b);
  }
  return v;
}

static void free_env(char **v) {
  for (size_t i = 0; v && v[i]; i++) free(v[i]);
  free(v);
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* ------------------------------------------------------------- spawner */

/* PR_SET_PDEATHSIG fires when the *thread* that forked ends (prctl(2)),
 * and parallel tool calls run in threads that end after the call: a
 * server first started there died with it. So every fork happens on one
 * thread that lives as long as the process (and so the kill still comes
 * when luagent dies, however it dies). */
struct spawn_job {
  pid_t (*fn)(void *arg);
  void *arg;
  pid_t pid;
  int err; /* errno of fork */
  int done;
};

static pthread_mutex_t spawn_mu = PTHREAD_MUTEX_INITIALIZER;   /* the job slot */
static pthread_mutex_t spawn_call = PTHREAD_MUTEX_INITIALIZER; /* one caller at a time */
static pthread_cond_t spawn_cv = PTHREAD_COND_INITIALIZER;
static struct spawn_job *spawn_job;
static pthread_once_t spawn_once = PTHREAD_ONCE_INIT;
static int spawn_up;

static void *spawner(void *unused) {
  (void)unused;
  pthread_mutex_lock(&spawn_mu);
  for (;;) {
    while (!spawn_job || spawn_job->done) pthread_cond_wait(&spawn_cv, &spawn_mu);
    struct spawn_job *j = spawn_job;
    pthread_mutex_unlock(&spawn_mu);
    errno = 0;
    j->pid = j->fn(j->arg);
    j->err = errno;
    pthread_mutex_lock(&spawn_mu);
    j->done = 1;
    pthread_cond_broadcast(&spawn_cv);
  }
  return NULL;
}

static void spawner_start(void) {
  /* no signal is handled on it: SIGINT and friends go to the other threads */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&at, 256 * 1024);
  spawn_up = pthread_create(&t, &at, spawner, NULL) == 0;
  pthread_attr_destroy(&at);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* fn(arg) (which forks) on the spawner thread; on the caller's own when
 * that thread could not be made. */
static pid_t spawn_run(pid_t (*fn)(void *), void *arg) {
  pthread_once(&spawn_once, spawner_start);
  if (!spawn_up) return fn(arg);
  struct spawn_job j = {.fn = fn, .arg = arg};
  pthread_mutex_lock(&spawn_call);
  pthread_mutex_lock(&spawn_mu);
  spawn_job = &j;
  pthread_cond_broadcast(&spawn_cv);
  while (!j.done) pthread_cond_wait(&spawn_cv, &spawn_mu);
  spawn_job = NULL;
  pthread_mutex_unlock(&spawn_mu);
  pthread_mutex_unlock(&spawn_call);
  errno = j.err;
  return j.pid;
}

/* Set once, before any server starts (mcp_proc_children_normal_policy). */
static volatile int normal_policy;

void mcp_proc_children_normal_policy(void) { normal_policy = 1; }

struct child_args {
  char *const *argv;
  char **envp;
  const char *cwd;
  int in0, out1, er1, ex1;
  pid_t parent;
};

static pid_t fork_child(void *arg) {
  const struct child_args *a = arg;
  pid_t pid = fork();
  if (pid != 0) return pid;
  /* child: only async-signal-safe calls from here */
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != a->parent) _exit(127);
  dup2(a->in0, 0);
  dup2(a->out1, 1);
  dup2(a->er1, 2);
  /* the spawner blocks every signal; the server starts with none blocked */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  if (normal_policy && sched_getscheduler(0) == SCHED_BATCH) {
    struct sched_param sp = {0};
    sched_setscheduler(0, SCHED_OTHER, &sp); /* a plain syscall: safe here */
  }
  if (a->cwd && chdir(a->cwd) != 0) {
    int err = errno;
    (void)!write(a->ex1, &err, sizeof err);
    _exit(127);
  }
  execvpe(a->argv[0], a->argv, a->envp);
  int err = errno;
  (void)!write(a->ex1, &err, sizeof err);
  _exit(127);
}

void mcp_proc_init(struct mcp_proc *p) {
  memset(p, 0, sizeof *p);
  p->to_child = p->from_child = p->err_child = -1;
  p->exit_status = -1;
}

int mcp_proc_start(struct mcp_proc *p, char *const argv[], const cJSON *env, const char *cwd,
                   const char *log_path, size_t log_max, struct err *e) {
  mcp_proc_init(p);
  snprintf(p->log_path, sizeof p->log_path, "%s", log_path ? log_path : "");
  p->log_max = log_max;
  /* A write to a server that just died must fail with EPIPE, not kill us. */
  struct sigaction old;
  if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  int in[2] = {-1, -1}, out[2] = {-1, -1}, er[2] = {-1, -1}, ex[2] = {-1, -1};
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(er, O_CLOEXEC) ||
      pipe2(ex, O_CLOEXEC)) {
    int err = errno;
    for (int *f = in; f <= in + 1; f++) close_fd(f);
    for (int *f = out; f <= out + 1; f++) close_fd(f);
    for (int *f = er; f <= er + 1; f++) close_fd(f);
    return err_set(e, ERR_IO, "mcp_start", "cannot start '%s': pipe: %s", argv[0], strerror(err));
  }
  char **envp = build_env(env);
  struct child_args ca = {.argv = argv, .envp = envp, .cwd = cwd, .in0 = in[0], .out1 = out[1],
                          .er1 = er[1], .ex1 = ex[1], .parent = getpid()};
  pid_t pid = spawn_run(fork_child, &ca);
  int fork_err = errno;
  free_env(envp);
  close_fd(&in[0]);
  close_fd(&out[1]);
  close_fd(&er[1]);
  close_fd(&ex[1]);
  if (pid < 0) {
    close_fd(&in[1]);
    close_fd(&out[0]);
    close_fd(&er[0]);
    close_fd(&ex[0]);
    return err_set(e, ERR_IO, "mcp_start", "cannot start '%s': fork: %s", argv[0],
                   strerror(fork_err));
  }
  /* exec succeeded when the CLOEXEC pipe closes with nothing in it */
  int child_err = 0;
  ssize_t r;
  do r = read(ex[0], &child_err, sizeof child_err);
  while (r < 0 && errno == EINTR);
  close_fd(&ex[0]);
  if (r == (ssize_t)sizeof child_err) {
    waitpid(pid, NULL, 0);
    close_fd(&in[1]);
    close_fd(&out[0]);
    close_fd(&er[0]);
    return err_set(e, ERR_IO, "mcp_start", "cannot start '%s'%s%s: %s", argv[0],
                   cwd ? " in " : "", cwd ? cwd : "", strerror(child_err));
  }
  p->pid = pid;
  p->to_child = in[1];
  p->from_child = out[0];
  p->err_child = er[0];
  fcntl(p->to_child, F_SETFL, O_NONBLOCK);
  fcntl(p->from_child, F_SETFL, O_NONBLOCK);
  fcntl(p->err_child, F_SETFL, O_NONBLOCK);
  return 0;
}

/* ---------------------------------------------------------------- stderr */

static void log_append(struct mcp_proc *p, const char *s, size_t n) {
  /* keep the tail for messages */
  if (n >= MCP_PROC_TAIL) {
    memcpy(p->tail, s + n - MCP_PROC_TAIL, MCP_PROC_TAIL);
    p->tail_len = MCP_PROC_TAIL;
  } else {
    if (p->tail_len + n > MCP_PROC_TAIL) {
      size_t drop = p->tail_len + n - MCP_PROC_TAIL;
      memmove(p->tail, p->tail + drop, p->tail_len - drop);
      p->tail_len -= drop;
    }
    memcpy(p->tail + p->tail_len, s, n);
    p->tail_len += n;
  }
  p->tail[p->tail_len] = 0;
  if (!p->log_path[0]) return;
  /* bounded: past log_max the file moves to .1 (one old file kept). The
   * old .1 is emptied before the rename drops its name: a hard link to it
   * planted elsewhere (data/) would otherwise keep the server's stderr,
   * credentials it printed included, as a file of one link that fs.read
   * no longer refuses (red team 11, F1). */
  struct stat st;
  if (p->log_max && stat(p->log_path, &st) == 0 && (size_t)st.st_size + n > p->log_max) {
    char old[4300];
    snprintf(old, sizeof old, "%s.1", p->log_path);
    int ofd = open(old, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (ofd >= 0) close(ofd);
    rename(p->log_path, old);
  }
  int fd = open(p->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  size_t cap = p->log_max && n > p->log_max ? p->log_max : n;
  (void)!write(fd, s + n - cap, cap);
  close(fd);
}

static void drain_stderr(struct mcp_proc *p) {
  char buf[8192];
  for (int i = 0; p->err_child >= 0 && i < 64; i++) { /* at most 512 KiB per turn */
    ssize_t r = read(p->err_child, buf, sizeof buf);
    if (r > 0) {
      log_append(p, buf, (size_t)r);
      continue;
    }
    if (r == 0) close_fd(&p->err_child);
    break;
  }
}

/* ------------------------------------------------------------------ I/O */

int mcp_proc_write_line(struct mcp_proc *p, const char *s, size_t len, double deadline,
                        struct err *e) {
  if (p->to_child < 0) return err_set(e, ERR_IO, "mcp_exited", "the server is not running");
  size_t off = 0, total = len + 1;
  while (off < total) {
    const char *src = off < len ? s + off : "\n";
    size_t n = off < len ? len - off : 1;
    ssize_t w = write(p->to_child, src, n);
    if (w > 0) {
      off += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN)
      return err_set(e, ERR_IO, "mcp_exited", "the server closed its input (%s)", strerror(errno));
    double left = deadline - util_monotonic();
    if (left <= 0) return err_set(e, ERR_LIMIT, "timeout", "the server did not read its input in time");
    struct pollfd fds[2] = {{p->to_child, POLLOUT, 0}, {p->err_child, POLLIN, 0}};
    int ms = left > 0.05 ? 50 : (int)(left * 1000) + 1;
    if (poll(fds, p->err_child >= 0 ? 2 : 1, ms) > 0 && (fds[1].revents & (POLLIN | POLLHUP)))
      drain_stderr(p);
  }
  return 0;
}

/* The next whole line in p->in, or NULL. */
static char *take_line(struct mcp_proc *p, size_t *len) {
  char *start = p->in.s ? p->in.s + p->in_off : NULL;
  size_t avail = p->in.len - p->in_off;
  char *nl = start ? memchr(start, '\n', avail) : NULL;
  if (!nl) return NULL;
  size_t n = (size_t)(nl - start);
  if (n && start[n - 1] == '\r') n--; /* tolerate CRLF */
  char *line = xmalloc(n + 1);
  memcpy(line, start, n);
  line[n] = 0;
  p->in_off += (size_t)(nl - start) + 1;
  if (p->in_off == p->in.len) p->in.len = p->in_off = 0;
  *len = n;
  return line;
}

int mcp_proc_read_line(struct mcp_proc *p, char **line, size_t *len, size_t max, double deadline,
                       volatile int *stop, struct err *e) {
  *line = NULL;
  *len = 0;
  for (;;) {
    if (p->discarding) {
      char *nl = p->in.s ? memchr(p->in.s + p->in_off, '\n', p->in.len - p->in_off) : NULL;
      if (nl) {
        p->in_off = (size_t)(nl - p->in.s) + 1;
        p->discarding = 0;
      } else {
        p->in.len = p->in_off = 0;
      }
    }
    if (!p->discarding && (*line = take_line(p, len))) {
      if (*len > max) {
        free(*line);
        *line = NULL;
        return err_set(e, ERR_LIMIT, "mcp_message_too_big",
                       "the server sent a message of %zu bytes, over the limit of %zu", *len, max);
      }
      return 0;
    }
    /* a line still growing past the limit: stop reading it now */
    if (!p->discarding && p->in.len - p->in_off > max) {
      size_t had = p->in.len - p->in_off;
      p->in.len = p->in_off = 0;
      p->discarding = 1;
      return err_set(e, ERR_LIMIT, "mcp_message_too_big",
                     "the server sent a message over the limit of %zu bytes (%zu bytes so far)",
                     max, had);
    }
    if (p->from_child < 0) {
      mcp_proc_alive(p);
      char how[64];
      mcp_proc_describe(p, how, sizeof how);
      return err_set(e, ERR_IO, "mcp_exited", "the server closed its output (%s)", how);
    }
    if (stop && *stop) return err_set(e, ERR_STOPPED, "stopped", "stopped by the operator");
    double left = deadline - util_monotonic();
    if (left <= 0) return err_set(e, ERR_LIMIT, "timeout", "no answer in time");
    struct pollfd fds[2] = {{p->from_child, POLLIN, 0}, {p->err_child, POLLIN, 0}};
    int ms = left > 0.05 ? 50 : (int)(left * 1000) + 1;
    int pr = poll(fds, p->err_child >= 0 ? 2 : 1, ms);
    if (pr < 0 && errno != EINTR)
      return err_set(e, ERR_IO, "mcp_io", "poll: %s", strerror(errno));
    if (pr <= 0) continue;
    if (p->err_child >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) drain_stderr(p);
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[65536];
      for (int i = 0; i < 16; i++) {
        ssize_t r = read(p->from_child, buf, sizeof buf);
        if (r > 0) {
          if (p->in_off && p->in_off == p->in.len) p->in.len = p->in_off = 0;
          if (p->in_off > (1u << 20)) { /* compact now and then */
            memmove(p->in.s, p->in.s + p->in_off, p->in.len - p->in_off);
            p->in.len -= p->in_off;
            p->in_off = 0;
          }
          sbuf_append(&p->in, buf, (size_t)r);
          if (memchr(buf, '\n', (size_t)r) || p->in.len - p->in_off > max) break;
          continue;
        }
        if (r == 0) close_fd(&p->from_child);
        else if (errno != EAGAIN && errno != EINTR) close_fd(&p->from_child);
        break;
      }
    }
  }
}

/* ------------------------------------------------------------ lifetime */

int mcp_proc_alive(struct mcp_proc *p) {
  if (!p->pid) return 0;
  if (p->exit_status >= 0) return 0;
  int st;
  pid_t r = waitpid(p->pid, &st, WNOHANG);
  if (r == p->pid) {
    p->exit_status = st;
    drain_stderr(p);
    return 0;
  }
  return r == 0;
}

void mcp_proc_describe(const struct mcp_proc *p, char *out, size_t n) {
  if (p->exit_status < 0) snprintf(out, n, p->pid ? "still running" : "not started");
  else if (WIFEXITED(p->exit_status)) snprintf(out, n, "exit status %d", WEXITSTATUS(p->exit_status));
  else if (WIFSIGNALED(p->exit_status)) snprintf(out, n, "killed by signal %d", WTERMSIG(p->exit_status));
  else snprintf(out, n, "wait status %d", p->exit_status);
}

/* Waits up to secs for the child to exit; 1 when it did. */
static int wait_exit(struct mcp_proc *p, double secs) {
  double until = util_monotonic() + secs;
  do {
    if (!mcp_proc_alive(p)) return 1;
    util_sleep(0.01);
  } while (util_monotonic() < until);
  return !mcp_proc_alive(p);
}

void mcp_proc_stop(struct mcp_proc *p, double grace) {
  if (!p) return;
  if (p->pid) {
    close_fd(&p->to_child); /* the stdio transport's "please exit" */
    if (!wait_exit(p, grace)) {
      kill(-p->pid, SIGTERM);
      kill(p->pid, SIGTERM);
      if (!wait_exit(p, 1.0)) {
        kill(-p->pid, SIGKILL);
        kill(p->pid, SIGKILL);
        if (p->exit_status < 0) {
          int st;
          if (waitpid(p->pid, &st, 0) == p->pid) p->exit_status = st;
        }
      }
    }
    /* a server's own children (npx starts node) go with it */
    kill(-p->pid, SIGKILL);
    drain_stderr(p);
  }
  close_fd(&p->to_child);
  close_fd(&p->from_child);
  close_fd(&p->err_child);
  sbuf_free(&p->in);
  p->in_off = 0;
  p->discarding = 0;
  p->pid = 0;
}
