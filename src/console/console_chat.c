/* console_chat.c - chats started from the console. Each is a child
 * process, `luagent --json chat --session NAME` (or `ask MESSAGE`), the
 * very command an operator runs in a terminal: a line on its stdin is a
 * message when it is idle and a steer while a turn runs, SIGINT stops the
 * turn (as Ctrl-C does), end of input ends it. Its JSON event lines (and
 * its stderr, wrapped) are kept in a log the chat stream sends; the runs
 * it makes are journaled like any other, so they show under Runs and their
 * approvals in the queue. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "console_impl.h"
#include "json.h"
#include "session.h"

/* A chat and the console its reader thread reports to. */
struct chat_box {
  struct console_chat ch;
  struct console *c;
};

/* Appends one line to the chat's log (caller holds c->mu). */
static void log_line(struct console *c, struct console_chat *ch, const char *line, size_t n) {
  if (ch->log.len + n + 1 > CONSOLE_CHAT_LOG_MAX) return;
  sbuf_append(&ch->log, line, n);
  sbuf_append(&ch->log, "\n", 1);
  ch->lines++;
  pthread_cond_broadcast(&c->cv);
}

/* A stdout line: a JSON event. Tracks whether a turn is running. */
static void on_out_line(struct console *c, struct console_chat *ch, char *line, size_t n) {
  cJSON *j = NULL;
  if (json_parse(line, n, 0, &j, NULL)) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "output");
    line[n] = 0;
    cJSON_AddStringToObject(o, "text", line);
    char *t = json_print(o, 0);
    pthread_mutex_lock(&c->mu);
    log_line(c, ch, t, strlen(t));
    pthread_mutex_unlock(&c->mu);
    free(t);
    cJSON_Delete(o);
    return;
  }
  const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "type"));
  const char *run = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "run_id"));
  const char *parent = cJSON_GetStringValue(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "data"), "parent"));
  pthread_mutex_lock(&c->mu);
  /* the top-level run of a turn: starts and ends the turn (a delegate's
   * nested run has a parent) */
  if (type && run && !parent) {
    if (!strcmp(type, "run_start")) ch->busy = 1;
    if (!strcmp(type, "run_end")) ch->busy = 0;
  }
  log_line(c, ch, line, n);
  pthread_mutex_unlock(&c->mu);
  cJSON_Delete(j);
}

static void on_err_line(struct console *c, struct console_chat *ch, const char *line, size_t n) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "type", "stderr");
  char *copy = xmalloc(n + 1);
  memcpy(copy, line, n);
  copy[n] = 0;
  cJSON_AddStringToObject(o, "text", copy);
  free(copy);
  char *t = json_print(o, 0);
  pthread_mutex_lock(&c->mu);
  log_line(c, ch, t, strlen(t));
  pthread_mutex_unlock(&c->mu);
  free(t);
  cJSON_Delete(o);
}

/* The reader thread: splits the child's stdout and stderr into lines
 * until both close, then reaps it. */
static void *reader(void *arg) {
  struct chat_box *box = arg;
  struct console_chat *ch = &box->ch;
  struct console *c = box->c;
  struct sbuf bo = {0}, be = {0};
  int open_o = 1, open_e = 1;
  while (open_o || open_e) {
    struct pollfd p[2] = {{.fd = open_o ? ch->out_fd : -1, .events = POLLIN},
                          {.fd = open_e ? ch->err_fd : -1, .events = POLLIN}};
    int r = poll(p, 2, 500);
    if (r < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; i++) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[8192];
      ssize_t k = read(p[i].fd, buf, sizeof buf);
      struct sbuf *b = i == 0 ? &bo : &be;
      if (k <= 0) {
        if (i == 0) open_o = 0;
        else open_e = 0;
        k = 0;
      } else {
        sbuf_append(b, buf, (size_t)k);
      }
      /* whole lines out; at EOF the rest too */
      size_t start = 0;
      for (size_t j = 0; j < b->len; j++) {
        if (b->s[j] != '\n') continue;
        if (j > start) {
          if (i == 0) on_out_line(c, ch, b->s + start, j - start);
          else on_err_line(c, ch, b->s + start, j - start);
        }
        start = j + 1;
      }
      if (!k && start < b->len) {
        if (i == 0) on_out_line(c, ch, b->s + start, b->len - start);
        else on_err_line(c, ch, b->s + start, b->len - start);
        start = b->len;
      }
      if (start) {
        memmove(b->s, b->s + start, b->len - start);
        b->len -= start;
        b->s[b->len] = 0;
      }
    }
  }
  sbuf_free(&bo);
  sbuf_free(&be);
  int st = 0;
  while (waitpid(ch->pid, &st, 0) < 0 && errno == EINTR) {
  }
  char line[96];
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  snprintf(line, sizeof line, "{\"type\":\"exit\",\"code\":%d}", code);
  pthread_mutex_lock(&c->mu);
  log_line(c, ch, line, strlen(line));
  ch->exited = 1;
  ch->exit_code = code;
  ch->busy = 0;
  if (ch->in_fd >= 0) close(ch->in_fd);
  ch->in_fd = -1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static void chat_free(struct console_chat *ch) {
  if (ch->reader_started) pthread_join(ch->reader, NULL);
  if (ch->in_fd >= 0) close(ch->in_fd);
  close(ch->out_fd);
  close(ch->err_fd);
  sbuf_free(&ch->log);
  free((struct chat_box *)ch);
}

static cJSON *chat_json(const struct console_chat *ch) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "id", ch->id);
  cJSON_AddStringToObject(o, "kind", ch->kind);
  if (ch->session[0]) cJSON_AddStringToObject(o, "session", ch->session);
  cJSON_AddBoolToObject(o, "busy", ch->busy);
  cJSON_AddBoolToObject(o, "exited", ch->exited);
  if (ch->exited) cJSON_AddNumberToObject(o, "exit_code", ch->exit_code);
  cJSON_AddNumberToObject(o, "started", ch->started);
  cJSON_AddNumberToObject(o, "events", (double)ch->lines);
  return o;
}

/* Writes one line to the child; 0 or an HTTP status. Caller holds c->mu. */
static int say(struct console_chat *ch, const char *text) {
  if (ch->exited || ch->in_fd < 0) return 409;
  size_t n = strlen(text);
  struct sbuf b = {0};
  sbuf_append(&b, text, n);
  sbuf_append(&b, "\n", 1);
  size_t off = 0;
  while (off < b.len) {
    ssize_t k = write(ch->in_fd, b.s + off, b.len - off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      sbuf_free(&b);
      return 409;
    }
    off += (size_t)k;
  }
  sbuf_free(&b);
  return 0;
}

static int check_line(const char *s, struct console_reply *r, const char *what) {
  if (!*s) return console__error(r, 400, "%s is empty", what), 1;
  if (strlen(s) > 16000) return console__error(r, 400, "%s is over 16000 bytes", what), 1;
  if (strpbrk(s, "\r\n"))
    return console__error(r, 400, "%s must be one line (a line break would be a second message)",
                          what), 1;
  return 0;
}

int console__chat_start(struct console *c, const char *kind, const char *message,
                        const char *session, struct console_reply *r) {
  if (check_line(message, r, "message")) return 0;
  struct err e = {0};
  char name[64] = "";
  if (!strcmp(kind, "chat")) {
    if (session && *session) {
      if (session_check_name(session, &e)) return console__error(r, 400, "%s", e.msg);
      snprintf(name, sizeof name, "%s", session);
    }
  } else if (session) {
    return console__error(r, 400, "an ask has no session (use mode \"chat\")");
  }
  pthread_mutex_lock(&c->mu);
  /* drop finished chats beyond the limit, oldest first */
  int live = 0;
  for (struct console_chat *ch = c->chats; ch; ch = ch->next) live++;
  while (live >= CONSOLE_MAX_CHATS) {
    struct console_chat **pp = &c->chats, **oldest = NULL;
    for (; *pp; pp = &(*pp)->next)
      if ((*pp)->exited) oldest = pp;
    if (!oldest) break;
    struct console_chat *dead = *oldest;
    *oldest = dead->next;
    pthread_mutex_unlock(&c->mu);
    chat_free(dead);
    pthread_mutex_lock(&c->mu);
    live--;
  }
  if (live >= CONSOLE_MAX_CHATS) {
    pthread_mutex_unlock(&c->mu);
    return console__error(r, 429, "%d chats are running; stop one first", CONSOLE_MAX_CHATS);
  }
  int id = c->next_chat++;
  pthread_mutex_unlock(&c->mu);
  if (!name[0] && !strcmp(kind, "chat"))
    snprintf(name, sizeof name, "console-%lld-%d", (long long)util_now(), id);

  struct chat_box *box = xcalloc(1, sizeof *box);
  struct console_chat *ch = &box->ch;
  box->c = c;
  ch->id = id;
  snprintf(ch->kind, sizeof ch->kind, "%s", kind);
  snprintf(ch->session, sizeof ch->session, "%s", name);
  ch->started = util_now();
  sbuf_puts(&ch->log, "");
  const char *chat_argv[] = {"chat", "--session", name, NULL};
  const char *ask_argv[] = {"ask", "--", message, NULL};
  if (console__spawn(c, !strcmp(kind, "chat") ? chat_argv : ask_argv, &ch->pid, &ch->in_fd,
                     &ch->out_fd, &ch->err_fd, &e)) {
    sbuf_free(&ch->log);
    free(box);
    return console__error(r, 500, "%s", e.msg);
  }
  if (!strcmp(kind, "ask")) {
    close(ch->in_fd);
    ch->in_fd = -1;
    ch->busy = 1;
  }
  pthread_mutex_lock(&c->mu);
  if (!strcmp(kind, "chat")) {
    say(ch, message);
    ch->busy = 1;
  }
  ch->next = c->chats;
  c->chats = ch;
  if (!pthread_create(&ch->reader, NULL, reader, box)) ch->reader_started = 1;
  r->json = chat_json(ch);
  pthread_mutex_unlock(&c->mu);
  r->status = 201;
  return 0;
}

cJSON *console__chats_list(struct console *c) {
  cJSON *a = cJSON_CreateArray();
  pthread_mutex_lock(&c->mu);
  for (struct console_chat *ch = c->chats; ch; ch = ch->next)
    cJSON_AddItemToArray(a, chat_json(ch));
  pthread_mutex_unlock(&c->mu);
  return a;
}

int console__chat_route(struct console *c, const struct console_req *q, const char *rest,
                        struct console_reply *r) {
  char *end;
  long id = strtol(rest, &end, 10);
  if (end == rest || id <= 0 || (*end && *end != '/'))
    return console__error(r, 404, "no such chat");
  const char *verb = *end ? end + 1 : "";
  int get = !strcmp(q->method, "GET");
  if (get && !strcmp(verb, "stream")) {
    const char *lei = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "Last-Event-ID");
    const char *from = console__query(q, "from");
    long long n = lei ? atoll(lei) : from ? atoll(from) : 0;
    pthread_mutex_lock(&c->mu);
    struct console_chat *ch = c->chats;
    while (ch && ch->id != id) ch = ch->next;
    pthread_mutex_unlock(&c->mu);
    if (!ch) return console__error(r, 404, "no chat %ld", id);
    r->stream = console__chat_stream(c, q->conn, (int)id, n > 0 ? (size_t)n : 0);
    return 0;
  }
  pthread_mutex_lock(&c->mu);
  struct console_chat *ch = c->chats;
  while (ch && ch->id != id) ch = ch->next;
  if (!ch) {
    pthread_mutex_unlock(&c->mu);
    return console__error(r, 404, "no chat %ld", id);
  }
  int status = 0;
  const char *msg = NULL;
  if (get && !*verb) {
    r->json = chat_json(ch);
  } else if (get) {
    status = 404;
    msg = "no such route";
  } else if (!strcmp(verb, "send") || !strcmp(verb, "steer")) {
    int steer = !strcmp(verb, "steer");
    const char *field = steer ? "text" : "message";
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(q->body, field);
    if (!cJSON_IsString(t)) {
      status = 400;
      msg = steer ? "steer needs {\"text\": \"...\"}" : "send needs {\"message\": \"...\"}";
    } else if (check_line(t->valuestring, r, field)) {
      pthread_mutex_unlock(&c->mu);
      return 0;
    } else if (strcmp(ch->kind, "chat")) {
      status = 409;
      msg = "an ask takes no further lines; start a chat";
    } else if (steer && !ch->busy) {
      status = 409;
      msg = "no turn is running to steer; send it as a message";
    } else if (!steer && ch->busy) {
      status = 409;
      msg = "a turn is running: steer it, or wait for it to finish";
    } else if (say(ch, t->valuestring)) {
      status = 409;
      msg = "the chat has ended";
    } else {
      if (!steer) ch->busy = 1;
      r->json = chat_json(ch);
    }
  } else if (!strcmp(verb, "stop")) {
    if (ch->exited) {
      status = 409;
      msg = "the chat has ended";
    } else {
      kill(ch->pid, SIGINT); /* as Ctrl-C: the turn stops, the chat stays */
      r->json = chat_json(ch);
    }
  } else if (!strcmp(verb, "close")) {
    if (ch->in_fd >= 0) close(ch->in_fd); /* end of input ends the chat */
    ch->in_fd = -1;
    r->json = chat_json(ch);
  } else {
    status = 404;
    msg = "no such route";
  }
  pthread_mutex_unlock(&c->mu);
  if (status) console__error(r, status, "%s", msg);
  return 0;
}

void console__chats_stop(struct console *c) {
  pthread_mutex_lock(&c->mu);
  struct console_chat *list = c->chats;
  c->chats = NULL;
  for (struct console_chat *ch = list; ch; ch = ch->next)
    if (!ch->exited) kill(ch->pid, SIGTERM);
  pthread_mutex_unlock(&c->mu);
  while (list) {
    struct console_chat *next = list->next;
    chat_free(list);
    list = next;
  }
}
