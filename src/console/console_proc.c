#define _GNU_SOURCE /* pipe2 */
/* console_proc.c - the console's child commands: `luagent --json ...` run
 * from the same binary, so an answer about automations, skills or the
 * audit chain is exactly what the CLI would print. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "console_impl.h"
#include "json.h"

extern char **environ;

#define CLI_OUT_MAX (16u << 20)

int console__spawn(struct console *c, const char *const *argv, pid_t *pid, int *in_fd,
                   int *out_fd, int *err_fd, struct err *e) {
  int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
  if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC)) {
    int en = errno;
    for (int i = 0; i < 2; i++) {
      if (pin[i] >= 0) close(pin[i]);
      if (pout[i] >= 0) close(pout[i]);
      if (perr[i] >= 0) close(perr[i]);
    }
    return err_set(e, ERR_IO, "pipe", "console: pipe: %s", strerror(en));
  }
  const char *args[48];
  size_t n = 0;
  args[n++] = c->exe;
  args[n++] = "--workspace";
  args[n++] = c->workspace;
  args[n++] = "--json";
  for (; *argv && n < 46; argv++) args[n++] = *argv;
  args[n] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
  posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
  posix_spawn_file_actions_adddup2(&fa, perr[1], 2);
  /* The child gets default signal handling (the daemon blocks some). */
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&at, &none);
  sigset_t def;
  sigemptyset(&def);
  sigaddset(&def, SIGINT);
  sigaddset(&def, SIGTERM);
  sigaddset(&def, SIGPIPE);
  sigaddset(&def, SIGCHLD);
  posix_spawnattr_setsigdefault(&at, &def);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  int rc = posix_spawn(pid, c->exe, &fa, &at, (char *const *)args, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(pin[0]);
  close(pout[1]);
  close(perr[1]);
  if (rc) {
    close(pin[1]);
    close(pout[0]);
    close(perr[0]);
    return err_set(e, ERR_IO, "spawn", "console: cannot run %s: %s", c->exe, strerror(rc));
  }
  *in_fd = pin[1];
  *out_fd = pout[0];
  *err_fd = perr[0];
  return 0;
}

int console__cli(struct console *c, const char *const *argv, double timeout_s, char **out,
                 char **err_text, int *code, struct err *e) {
  *out = *err_text = NULL;
  *code = -1;
  pid_t pid;
  int in, fo, fe;
  int rc = console__spawn(c, argv, &pid, &in, &fo, &fe, e);
  if (rc) return rc;
  close(in);
  struct sbuf so = {0}, se = {0};
  sbuf_puts(&so, "");
  sbuf_puts(&se, "");
  double deadline = util_monotonic() + timeout_s;
  int open_o = 1, open_e = 1, killed = 0;
  while (open_o || open_e) {
    struct pollfd p[2] = {{.fd = open_o ? fo : -1, .events = POLLIN},
                          {.fd = open_e ? fe : -1, .events = POLLIN}};
    double left = deadline - util_monotonic();
    if (left <= 0 || c->stopping) {
      kill(pid, SIGKILL);
      killed = 1;
      break;
    }
    /* short waits: a stopping console ends the command soon */
    int r = poll(p, 2, left > 0.2 ? 200 : (int)(left * 1000) + 1);
    if (r < 0 && errno != EINTR) break;
    char buf[8192];
    for (int i = 0; i < 2; i++) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t k = read(p[i].fd, buf, sizeof buf);
      if (k <= 0) {
        if (i == 0) open_o = 0;
        else open_e = 0;
        continue;
      }
      struct sbuf *b = i == 0 ? &so : &se;
      if (b->len + (size_t)k <= CLI_OUT_MAX) sbuf_append(b, buf, (size_t)k);
    }
  }
  close(fo);
  close(fe);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  *code = killed ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  *out = sbuf_take(&so);
  *err_text = sbuf_take(&se);
  return 0;
}

cJSON *console__parse_output(const char *out) {
  cJSON *j = json_parse_str(out, 0, NULL);
  if (j) return j;
  cJSON *arr = cJSON_CreateArray();
  const char *p = out;
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    size_t k = n;
    while (k && (p[k - 1] == '\r' || p[k - 1] == ' ')) k--;
    if (k) {
      cJSON *item = NULL;
      if (json_parse(p, k, 0, &item, NULL)) {
        cJSON_Delete(arr);
        return NULL;
      }
      cJSON_AddItemToArray(arr, item);
    }
    p += n + (nl ? 1 : 0);
  }
  return arr;
}
