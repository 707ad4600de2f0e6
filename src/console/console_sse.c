/* console_sse.c - Server-Sent Events: a run's events as the journal gets
 * them (any process's run: the journal is the one source), and a console
 * chat's event lines. Each stream runs on its connection's own thread
 * (libmicrohttpd's thread per connection), wakes at least every
 * KEEPALIVE_S to send a comment line (so a client that went away is
 * noticed and its thread ends) and ends when the console stops. */
#define _GNU_SOURCE /* POLLRDHUP */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster_runs_read.h"
#include "console_impl.h"
#include "json.h"
#include "store.h"

#define KEEPALIVE_S 5.0
#define POLL_MS 150

struct stream {
  struct console *c;
  struct sbuf out;   /* formatted, not yet sent */
  size_t sent;
  int done;          /* the end event is queued; end after out is sent */
  double last_write; /* util_monotonic of the last bytes queued */
  int fd;            /* the client's socket, watched for a hang-up */
  /* run streams */
  char run_id[128];
  long long cursor;
  struct store *st;
  double waited_missing;
  /* a run of the cluster (another host's, or this one's automation) */
  struct pg *pg;
  int cluster;       /* 0 not looked, 1 the workspace has one, -1 none */
  double cl_next;    /* util_monotonic of the next look in the database */
  /* chat streams */
  int chat_id;
  size_t off, line;
};

static void stream_free(void *cls) {
  struct stream *s = cls;
  sbuf_free(&s->out);
  store_close(s->st);
  pg_close(s->pg);
  free(s);
}

/* Queues one SSE message; data is JSON text (one line), scrubbed here. */
static void put(struct stream *s, const char *event, long long id, const char *data) {
  size_t n = 0;
  char *clean = console__redact(s->c, data, strlen(data), &n);
  if (id >= 0) sbuf_printf(&s->out, "id: %lld\n", id);
  if (event) sbuf_printf(&s->out, "event: %s\n", event);
  sbuf_puts(&s->out, "data: ");
  sbuf_append(&s->out, clean, n);
  sbuf_puts(&s->out, "\n\n");
  free(clean);
  s->last_write = util_monotonic();
}

/* Queues {"key": "val"} as an event of its own (an end, an error). */
static void put_field(struct stream *s, const char *event, const char *key, const char *val) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, key, val);
  char *t = json_print(o, 0);
  put(s, event, -1, t ? t : "{}");
  free(t);
  cJSON_Delete(o);
}

/* Copies what is queued into buf; returns bytes copied (0 when empty). */
static ssize_t drain(struct stream *s, char *buf, size_t max) {
  if (s->sent >= s->out.len) return 0;
  size_t n = s->out.len - s->sent;
  if (n > max) n = max;
  memcpy(buf, s->out.s + s->sent, n);
  s->sent += n;
  if (s->sent == s->out.len) {
    s->out.len = s->sent = 0;
    if (s->out.s) s->out.s[0] = 0;
  }
  return (ssize_t)n;
}

static void keepalive(struct stream *s) {
  sbuf_puts(&s->out, ": keepalive\n\n");
  s->last_write = util_monotonic();
}

/* Waits up to ms; returns 1 when the client has gone (hung up or reset),
 * so its thread and its slot in the per-address limit are freed at once
 * rather than at the next keepalive. */
static int client_gone(struct stream *s, int ms) {
  if (s->fd < 0) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
    return 0;
  }
  struct pollfd p = {.fd = s->fd, .events = POLLRDHUP};
  int r = poll(&p, 1, ms);
  return r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* ------------------------------------------------------------------ */
/* runs */

/* 1 when a run of this status is over (its events are all written). */
static int run_over(const char *status) {
  return status && strcmp(status, "running") && strcmp(status, "queued");
}

/* A run not in this host's journal may be the cluster's. Its row keeps
 * its events when it ends, so they are sent then, with the end event:
 * until then only its status is read (each second), and the row with its
 * events once, when that says it is over. Returns 1 when something was
 * queued; s->cluster is 1 while the run is the cluster's and not over,
 * -1 when it is not the cluster's (or there is no cluster). */
static int cluster_poll(struct stream *s) {
  if (s->cluster < 0) return 0;
  double now = util_monotonic();
  if (now < s->cl_next) return 0;
  s->cl_next = now + 1.0;
  struct err e = {0};
  if (!s->pg) {
    int on = cluster_connect(s->c->workspace, &s->pg, NULL, 0, &e);
    if (on == 0) {
      s->cluster = -1;
      return 0;
    }
    if (on < 0) goto fail;
  }
  char polled[64];
  int rc = cluster_run_status(s->pg, s->run_id, polled, sizeof polled, &e);
  cJSON *run = NULL;
  if (!rc && run_over(polled)) rc = cluster_run_get(s->pg, s->run_id, &run, &e);
  if (rc < 0) goto fail;
  if (rc) {
    s->cluster = -1; /* nowhere: the local wait decides */
    return 0;
  }
  s->cluster = 1;
  /* the row's own status: a run taken over since the look may run again */
  const char *status = cJSON_GetStringValue(cJSON_GetObjectItem(run, "status"));
  if (!run_over(status)) {
    cJSON_Delete(run);
    return 0;
  }
  cJSON *evs = console__cluster_events(s->run_id, cJSON_GetObjectItem(run, "events"), s->cursor);
  const cJSON *ev;
  cJSON_ArrayForEach(ev, evs) {
    char *t = json_print(ev, 0);
    long long cur = (long long)cJSON_GetObjectItem(ev, "cursor")->valuedouble;
    put(s, NULL, cur, t);
    free(t);
    s->cursor = cur;
  }
  cJSON_Delete(evs);
  put_field(s, "end", "status", status);
  cJSON_Delete(run);
  s->done = 1;
  return 1;
fail:
  put_field(s, "error", "error", e.msg);
  s->done = 1;
  return 1;
}

/* Looks for new events; queues them and, once the run is over and all its
 * events are out, the end event. Returns 1 when something was queued. */
static int run_poll(struct stream *s) {
  struct err e = {0};
  if (!s->st && store_open(s->c->workspace, &s->st, &e)) {
    put_field(s, "error", "error", e.msg);
    s->done = 1;
    return 1;
  }
  sqlite3_stmt *st = NULL;
  int got = 0;
  if (!store_prepare(s->st,
                     "SELECT rowid, run_id, seq, ts, type, data FROM events WHERE rowid > ?2 AND "
                     "(run_id=?1 OR run_id IN (SELECT id FROM runs WHERE parent=?1)) "
                     "ORDER BY rowid LIMIT 200",
                     &st, &e)) {
    sqlite3_bind_text(st, 1, s->run_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, s->cursor);
    while (sqlite3_step(st) == SQLITE_ROW) {
      long long rowid = sqlite3_column_int64(st, 0);
      cJSON *o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "cursor", (double)rowid);
      cJSON_AddStringToObject(o, "run_id", (const char *)sqlite3_column_text(st, 1));
      cJSON_AddNumberToObject(o, "seq", sqlite3_column_int(st, 2));
      cJSON_AddNumberToObject(o, "ts", sqlite3_column_double(st, 3));
      cJSON_AddStringToObject(o, "type", (const char *)sqlite3_column_text(st, 4));
      const unsigned char *d = sqlite3_column_text(st, 5);
      cJSON *dj = d ? json_parse_str((const char *)d, 0, NULL) : NULL;
      cJSON_AddItemToObject(o, "data", dj ? dj : cJSON_CreateNull());
      char *t = json_print(o, 0);
      put(s, NULL, rowid, t);
      free(t);
      cJSON_Delete(o);
      s->cursor = rowid;
      got = 1;
    }
    sqlite3_finalize(st);
  }
  if (got) return 1;
  /* nothing new: is the run over? */
  if (!store_prepare(s->st, "SELECT status FROM runs WHERE id=?", &st, &e)) {
    sqlite3_bind_text(st, 1, s->run_id, -1, SQLITE_STATIC);
    int found = sqlite3_step(st) == SQLITE_ROW;
    char status[32] = "";
    if (found) snprintf(status, sizeof status, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (!found && cluster_poll(s)) return 1;
    if (!found && s->cluster == 1) return 0; /* the cluster's, not over yet */
    if (!found) {
      /* a run that is about to start (a chat just sent) gets a while */
      if (!s->waited_missing) s->waited_missing = util_monotonic();
      if (util_monotonic() - s->waited_missing < 30) return 0;
      put(s, "error", -1, "{\"error\":\"no such run\"}");
      s->done = 1;
      return 1;
    }
    if (run_over(status)) {
      put_field(s, "end", "status", status);
      s->done = 1;
      return 1;
    }
  }
  return 0;
}

static ssize_t run_read(void *cls, uint64_t pos, char *buf, size_t max) {
  struct stream *s = cls;
  for (;;) {
    ssize_t n = drain(s, buf, max);
    if (n) return n;
    if (s->done || s->c->stopping) return MHD_CONTENT_READER_END_OF_STREAM;
    if (run_poll(s)) continue;
    if (util_monotonic() - s->last_write > KEEPALIVE_S) {
      keepalive(s);
      continue;
    }
    if (client_gone(s, POLL_MS)) return MHD_CONTENT_READER_END_WITH_ERROR;
  }
}

static struct MHD_Response *sse_response(struct stream *s,
                                         ssize_t (*fn)(void *, uint64_t, char *, size_t)) {
  s->last_write = util_monotonic();
  sbuf_puts(&s->out, "retry: 1000\n\n");
  struct MHD_Response *rs =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, fn, s, stream_free);
  MHD_add_response_header(rs, "Content-Type", "text/event-stream; charset=utf-8");
  MHD_add_response_header(rs, "Cache-Control", "no-store");
  MHD_add_response_header(rs, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(rs, "X-Accel-Buffering", "no");
  return rs;
}

static int conn_fd(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *ci =
      conn ? MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
  return ci ? ci->connect_fd : -1;
}

struct MHD_Response *console__run_stream(struct console *c, struct MHD_Connection *conn,
                                         const char *run_id, long long after) {
  struct stream *s = xcalloc(1, sizeof *s);
  s->c = c;
  s->fd = conn_fd(conn);
  snprintf(s->run_id, sizeof s->run_id, "%s", run_id);
  s->cursor = after > 0 ? after : 0;
  return sse_response(s, run_read);
}

/* ------------------------------------------------------------------ */
/* chats */

static struct console_chat *chat_find(struct console *c, int id) {
  for (struct console_chat *ch = c->chats; ch; ch = ch->next)
    if (ch->id == id) return ch;
  return NULL;
}

static ssize_t chat_read(void *cls, uint64_t pos, char *buf, size_t max) {
  struct stream *s = cls;
  struct console *c = s->c;
  for (;;) {
    ssize_t n = drain(s, buf, max);
    if (n) return n;
    if (s->done || c->stopping) return MHD_CONTENT_READER_END_OF_STREAM;
    pthread_mutex_lock(&c->mu);
    struct console_chat *ch = chat_find(c, s->chat_id);
    if (!ch) {
      pthread_mutex_unlock(&c->mu);
      put(s, "error", -1, "{\"error\":\"no such chat\"}");
      s->done = 1;
      continue;
    }
    if (s->off < ch->log.len) {
      /* copy whole lines out under the lock, scrub and queue them after */
      struct sbuf lines = {0};
      size_t first = s->line;
      while (s->off < ch->log.len) {
        const char *p = ch->log.s + s->off;
        const char *nl = memchr(p, '\n', ch->log.len - s->off);
        if (!nl) break;
        sbuf_append(&lines, p, (size_t)(nl - p + 1));
        s->off += (size_t)(nl - p + 1);
        s->line++;
      }
      pthread_mutex_unlock(&c->mu);
      size_t id = first;
      for (char *p = lines.s; p && *p;) {
        char *nl = strchr(p, '\n');
        *nl = 0;
        put(s, NULL, (long long)++id, p);
        p = nl + 1;
      }
      sbuf_free(&lines);
      continue;
    }
    if (ch->exited) {
      pthread_mutex_unlock(&c->mu);
      put(s, "end", -1, "{}");
      s->done = 1;
      continue;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += POLL_MS * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&c->cv, &c->mu, &until);
    pthread_mutex_unlock(&c->mu);
    if (client_gone(s, 0)) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (util_monotonic() - s->last_write > KEEPALIVE_S) keepalive(s);
  }
}

struct MHD_Response *console__chat_stream(struct console *c, struct MHD_Connection *conn,
                                          int chat_id, size_t from_line) {
  struct stream *s = xcalloc(1, sizeof *s);
  s->c = c;
  s->fd = conn_fd(conn);
  s->chat_id = chat_id;
  /* skip to the line after from_line */
  pthread_mutex_lock(&c->mu);
  struct console_chat *ch = chat_find(c, chat_id);
  if (ch) {
    while (s->line < from_line && s->off < ch->log.len) {
      const char *nl = memchr(ch->log.s + s->off, '\n', ch->log.len - s->off);
      if (!nl) break;
      s->off = (size_t)(nl - ch->log.s) + 1;
      s->line++;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return sse_response(s, chat_read);
}
