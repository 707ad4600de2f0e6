/* console_impl.h - what the console's files share (console.h is the
 * contract; nothing outside src/console/ includes this). */
#ifndef LUAGENT_CONSOLE_IMPL_H
#define LUAGENT_CONSOLE_IMPL_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <sys/types.h>

#include "console.h"
#include "util.h"

#define CONSOLE_MAX_BODY (64 * 1024)     /* request bodies above this: 413 */
#define CONSOLE_MAX_SESSIONS 32          /* logged-in browsers at once */
#define CONSOLE_SESSION_S (12 * 3600.0)  /* a session's lifetime */
#define CONSOLE_CONN_LIMIT 64            /* connections at once, all clients */
#define CONSOLE_CONN_PER_IP 24           /* connections at once from one address */
#define CONSOLE_CONN_TIMEOUT 20          /* seconds a connection may sit idle */
#define CONSOLE_MAX_CHATS 16             /* chat and ask children at once */
#define CONSOLE_CHAT_LOG_MAX (8u << 20)  /* bytes of one chat's event log kept */

struct console_session {
  char id[65];   /* cookie value, hex; "" = free slot */
  char csrf[65]; /* the X-CSRF-Token this session must send */
  double expires;
};

struct console_chat {
  int id;
  char kind[8];      /* "chat" or "ask" */
  char session[64];  /* chat session name ("" for ask) */
  pid_t pid;
  int in_fd;         /* child's stdin (-1 once closed) */
  int out_fd, err_fd;
  pthread_t reader;
  int reader_started;
  struct sbuf log;   /* JSON lines: the child's events, then {"type":"exit"} */
  size_t lines;
  int busy;          /* a turn is running (between run_start and run_end) */
  int exited, exit_code;
  double started;
  struct console_chat *next;
};

struct console {
  char workspace[4096];
  char exe[4096];
  char host[256];
  int port;
  int allow_remote, quiet;
  char **hosts;        /* allowed Host header values, NULL-terminated */
  char token[65];      /* the login token, hex */
  struct MHD_Daemon *d;
  pthread_mutex_t mu;  /* sessions, chats, secrets refresh */
  pthread_cond_t cv;   /* a chat log grew or a chat ended */
  struct console_session sessions[CONSOLE_MAX_SESSIONS];
  struct console_chat *chats;
  int next_chat;
  double secrets_checked;    /* util_monotonic of the last look at the secrets table */
  long long secrets_rows;    /* what that look saw: rows and latest update, so values */
  double secrets_updated;    /* are decrypted again only when the table changed */
  volatile int stopping;
};

/* One request's reply, filled by a handler. */
struct console_reply {
  int status;            /* HTTP status; 0 = 200 */
  cJSON *json;           /* the body (owned), or NULL with text */
  char *text;            /* a preformatted JSON body (owned), or NULL */
  struct MHD_Response *stream; /* an SSE response made by the handler */
};

/* The request as a handler sees it. */
struct console_req {
  struct MHD_Connection *conn;
  const char *method;    /* "GET" or "POST" */
  const char *path;      /* "/api/..." */
  cJSON *body;           /* POST: the parsed JSON object, or an empty object */
};

/* Fills r with {"error": msg} and status; returns 0 for chaining. */
int console__error(struct console_reply *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A query argument, or NULL. */
const char *console__query(const struct console_req *q, const char *key);

/* console_api.c: routes /api/... (not login/session, which the server
 * core answers). Returns 0 with r filled (r->status 404 for no route). */
int console__api(struct console *c, const struct console_req *q, struct console_reply *r);

/* console_proc.c: runs `luagent --workspace WS --json ARGV...` and waits
 * (at most timeout_s); *out gets its stdout (caller frees), *err_text its
 * stderr (caller frees), *code its exit status (-1 killed). Returns 0 when
 * it ran, ERR_IO when it could not start. */
int console__cli(struct console *c, const char *const *argv, double timeout_s, char **out,
                 char **err_text, int *code, struct err *e);
/* Spawns the same with pipes for stdin, stdout and stderr (non-blocking
 * reads not set); returns 0 and fills the fds and pid. */
int console__spawn(struct console *c, const char *const *argv, pid_t *pid, int *in_fd,
                   int *out_fd, int *err_fd, struct err *e);
/* The JSON text a --json command printed: one JSON value, or JSON lines
 * (made into an array). NULL when it is neither. */
cJSON *console__parse_output(const char *out);

/* console_chat.c */
int console__chat_start(struct console *c, const char *kind, const char *message,
                        const char *session, struct console_reply *r);
int console__chat_route(struct console *c, const struct console_req *q, const char *rest,
                        struct console_reply *r);
void console__chats_stop(struct console *c);
cJSON *console__chats_list(struct console *c);

/* console_sse.c: SSE responses. */
/* conn: the request's connection (its socket is watched for a client
 * that leaves). */
struct MHD_Response *console__run_stream(struct console *c, struct MHD_Connection *conn,
                                         const char *run_id, long long after);
struct MHD_Response *console__chat_stream(struct console *c, struct MHD_Connection *conn,
                                          int chat_id, size_t from_line);

/* Scrubs the workspace's secret values (registered from the store, at most
 * every couple of seconds) from text; returns a malloc'd copy. */
/* A cluster run's kept events (cluster_run_get's "events") in the shape
 * of a local run's (cursor, run_id, seq, ts, type, data): the cursor is
 * the event's place in the run, from 1; those up to after are left out. */
cJSON *console__cluster_events(const char *run_id, const cJSON *kept, long long after);

char *console__redact(struct console *c, const char *text, size_t len, size_t *outlen);

#endif
