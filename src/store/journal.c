/* journal.c - see journal.h. */
#include "journal.h"

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "store.h"
#include "util.h"
#include "writer.h"

struct seqent {
  char run_id[JOURNAL_RUN_ID_MAX + 1];
  long seq;
};

enum { ROW_EVENT, ROW_START, ROW_END };

/* One event waiting to be written. run_start and run_end also carry what
 * their runs row needs (f: kind, name, caller, parent / status, answer,
 * error; NULL when absent). */
struct qrow {
  char run_id[JOURNAL_RUN_ID_MAX + 1];
  long seq;
  double ts;
  char type[32];
  char *text; /* JSON, or NULL */
  /* the strings' lengths, so binding them does not measure them again
   * (SQLite's own measure is a loop over every byte of the text) */
  int run_id_len, type_len, text_len;
  /* a streamed piece's fixed head (piece_head), 0 for any other row; and
   * the capacity of text while pieces may still join it */
  int head, text_cap;
  /* when pieces joined: each one's length within the string, "4,4,1" (the
   * events row's pieces column: `runs show --json` splits the row back) */
  struct sbuf pieces;
  size_t events; /* the events the row holds: 1, or its joined pieces */
  int op;
  char *f[4];
  long tool_calls;
};

/* Events are queued in memory and written by the store writer's thread
 * (writer.h) in short transactions: no transaction ever stays open across
 * a model call, a tool run or an approval wait, so every other process
 * sharing the workspace (the daemon, `luagent emit`, memory.set) keeps
 * writing while a run waits. Streamed pieces wait up to JOURNAL_AGE_S or
 * JOURNAL_BATCH events (pieces joined in one row count one each, so a fast
 * stream is bounded as when every piece was a row); every other event is
 * committed within
 * JOURNAL_GROUP_S, together with whatever else arrived by then;
 * run_start and run_end are committed before journal_emit returns. */
#define JOURNAL_BATCH 256
/* Queued events go up to EVENT_ROWS to an INSERT, in statements of 32, 16,
 * 8, 4, 2 and 1 rows (a drain of 13 rows: 8 + 4 + 1): most of a one-row
 * INSERT's cost is the statement (its start, cursors and halt), not the
 * row, and a drain's rows seldom come in eights. */
#define EVENT_ROWS 32
#define EVENT_PARAMS "(?,?,?,?,?,?)"
#define EVENT_P2 EVENT_PARAMS "," EVENT_PARAMS
#define EVENT_P4 EVENT_P2 "," EVENT_P2
#define EVENT_P8 EVENT_P4 "," EVENT_P4
#define EVENT_P16 EVENT_P8 "," EVENT_P8
#define EVENT_P32 EVENT_P16 "," EVENT_P16
#define JOURNAL_AGE_S 0.5
#define JOURNAL_GROUP_S 0.005
/* A row of joined streamed pieces (piece_head) grows to at most this many
 * bytes of text; the next piece starts a row of its own. */
#define JOURNAL_PIECES_MAX 8192
/* The text a row of pieces starts with room for (bytes). */
#define PIECE_ROW_CAP 256
/* Queued events past which, while the database cannot be written, the
 * oldest half is dropped with a message rather than growing without end. */
#define JOURNAL_KEEP_MAX (16 * JOURNAL_BATCH)

#define EVENT_INSERT "INSERT INTO events(run_id, seq, ts, type, data, pieces) VALUES "
/* SQL_EVENTS[i]: the INSERT of 1 << i rows. */
static const char *const SQL_EVENTS[] = {EVENT_INSERT EVENT_PARAMS, EVENT_INSERT EVENT_P2,
                                         EVENT_INSERT EVENT_P4,     EVENT_INSERT EVENT_P8,
                                         EVENT_INSERT EVENT_P16,    EVENT_INSERT EVENT_P32};
_Static_assert(1 << (sizeof SQL_EVENTS / sizeof SQL_EVENTS[0] - 1) == EVENT_ROWS,
               "SQL_EVENTS' largest INSERT holds EVENT_ROWS rows");
#define SQL_EVENT (SQL_EVENTS[0])
static const char SQL_RUN[] =
    "INSERT OR IGNORE INTO runs(id, kind, name, trigger, status, started, "
    "parent, worker_pid, proc_start) VALUES (?,?,?,?, 'running', ?, ?, ?, ?)";
static const char SQL_END[] =
    "UPDATE runs SET status=?, finished=?, result=?, error=?, tool_calls=? WHERE id=?";

struct journal {
  struct writer_client wc; /* first: the writer hands it back */
  struct writer *w;
  pthread_mutex_t mu; /* the queue, the seq counters and st */
  struct store *st;   /* this side's reads (next_seq); writes are the writer's */
  char *workspace;    /* to open st again in a forked child */
  struct qrow *q;
  size_t nq, capq;
  size_t nev;         /* the events in q (a row of joined pieces holds several) */
  struct qrow *spare; /* a drained queue's array, kept for the next (capacity spare_cap) */
  size_t spare_cap;
  double oldest; /* monotonic time of q[0] */
  int draining;  /* rows taken by the writer, not yet committed */
  struct seqent *seqs;
  size_t nseqs;
  size_t last_seq; /* index into seqs of the run seen last (checked before use) */
  long long pid, proc_start;
  int said_long_id; /* a run id over JOURNAL_RUN_ID_MAX was refused (said once) */
};

static void qrow_free(struct qrow *r) {
  free(r->text);
  sbuf_free(&r->pieces);
  for (int i = 0; i < 4; i++) free(r->f[i]);
}

static double drain(struct writer_client *c, struct writer *w, int force);

/* In a forked child: the parent writes what it queued. */
static void forget(struct writer_client *c) {
  struct journal *j = (struct journal *)c;
  for (size_t i = 0; i < j->nq; i++) qrow_free(&j->q[i]);
  j->nq = j->nev = 0;
  j->draining = 0;
  j->st = NULL; /* the parent's connection: left alone, opened anew when needed */
  j->pid = getpid();
  j->proc_start = store_proc_start((int)getpid());
}

int journal_open(const char *workspace, struct journal **out, struct err *e) {
  *out = NULL;
  struct journal *j = xcalloc(1, sizeof *j);
  pthread_mutex_init(&j->mu, NULL);
  j->pid = getpid();
  j->proc_start = store_proc_start((int)getpid());
  j->workspace = xstrdup(workspace);
  int rc = store_open(workspace, &j->st, e);
  if (rc) goto fail;
  /* Runs an earlier process left "running" when it was killed. */
  struct err me = {0};
  store_mark_interrupted(j->st, &me);
  j->w = writer_get(workspace);
  j->wc.drain = drain;
  j->wc.forget = forget;
  j->wc.lock = &j->mu;
  writer_attach(j->w, &j->wc);
  *out = j;
  return 0;
fail:
  journal_close(j);
  return rc;
}

/* Steps s, says what failed, and releases it (bound: a statement from
 * store_cached_bound). */
static void step_release(struct store *st, sqlite3_stmt *s, const char *what, bool bound) {
  int rc = sqlite3_step(s);
  if (rc != SQLITE_DONE)
    fprintf(stderr, "luagent: run journal: %s failed: %s\n", what, sqlite3_errmsg(store_db(st)));
  if (bound) store_release_bound(st, s);
  else store_release(st, s);
}

static void step_reset(struct store *st, sqlite3_stmt *s, const char *what) {
  step_release(st, s, what, false);
}

/* Binds every parameter of the row (the statements come from
 * store_cached_bound: nothing is left of the last use's bindings). The
 * strings are the queue's, alive until the step is done. */
static void bind_event(sqlite3_stmt *st, int base, const struct qrow *r) {
  sqlite3_bind_text(st, base + 1, r->run_id, r->run_id_len, SQLITE_STATIC);
  sqlite3_bind_int64(st, base + 2, r->seq);
  sqlite3_bind_double(st, base + 3, r->ts);
  sqlite3_bind_text(st, base + 4, r->type, r->type_len, SQLITE_STATIC);
  if (r->text) sqlite3_bind_text(st, base + 5, r->text, r->text_len, SQLITE_STATIC);
  else sqlite3_bind_null(st, base + 5);
  if (r->pieces.len)
    sqlite3_bind_text(st, base + 6, r->pieces.s, (int)r->pieces.len, SQLITE_STATIC);
  else sqlite3_bind_null(st, base + 6);
}

/* One event alone (a statement of several failed, or the cache is full). */
static void write_event(struct store *st, const struct qrow *r) {
  sqlite3_stmt *s = NULL;
  struct err e = {0};
  if (store_cached_bound(st, SQL_EVENT, &s, &e)) {
    fprintf(stderr, "luagent: run journal: recording an event failed: %s\n", e.msg);
    return;
  }
  bind_event(s, 0, r);
  step_release(st, s, "recording an event", true);
}

static void bind_opt(sqlite3_stmt *s, int i, const char *v) {
  if (v) sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
  else sqlite3_bind_null(s, i);
}

/* The runs row of a run_start (before the events: the same transaction). */
static void write_start(struct journal *j, struct store *st, const struct qrow *r) {
  sqlite3_stmt *s = NULL;
  struct err e = {0};
  if (store_cached(st, SQL_RUN, &s, &e)) {
    fprintf(stderr, "luagent: run journal: recording the run failed: %s\n", e.msg);
    return;
  }
  sqlite3_bind_text(s, 1, r->run_id, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, r->f[0] ? r->f[0] : "ask", -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 3, r->f[1] ? r->f[1] : "", -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 4, r->f[2] ? r->f[2] : "", -1, SQLITE_STATIC);
  sqlite3_bind_double(s, 5, r->ts);
  bind_opt(s, 6, r->f[3]);
  sqlite3_bind_int64(s, 7, j->pid);
  if (j->proc_start >= 0) sqlite3_bind_int64(s, 8, j->proc_start);
  else sqlite3_bind_null(s, 8);
  step_reset(st, s, "recording the run");
}

static void write_end(struct store *st, const struct qrow *r) {
  sqlite3_stmt *s = NULL;
  struct err e = {0};
  if (store_cached(st, SQL_END, &s, &e)) {
    fprintf(stderr, "luagent: run journal: finishing the run failed: %s\n", e.msg);
    return;
  }
  sqlite3_bind_text(s, 1, r->f[0] ? r->f[0] : "failed", -1, SQLITE_STATIC);
  sqlite3_bind_double(s, 2, r->ts);
  sqlite3_bind_text(s, 3, r->f[1] ? r->f[1] : "", -1, SQLITE_STATIC);
  bind_opt(s, 4, r->f[2]);
  sqlite3_bind_int64(s, 5, r->tool_calls);
  sqlite3_bind_text(s, 6, r->run_id, -1, SQLITE_STATIC);
  step_reset(st, s, "finishing the run");
}

/* Writes rows q[0..n) inside the writer's transaction: the runs rows of
 * the run_starts, the events in INSERTs of the largest size that fits
 * what is left (EVENT_ROWS, then halves), then the run_ends. A statement
 * that fails inserted none of its rows (SQLite undoes a failed statement
 * whole); they are then written one by one, so a bad row costs only
 * itself, as when every row had its own INSERT. */
static void write_rows(struct journal *j, struct store *st, const struct qrow *q, size_t n) {
  struct err e = {0};
  for (size_t i = 0; i < n; i++)
    if (q[i].op == ROW_START) write_start(j, st, &q[i]);
  size_t i = 0;
  while (i < n) {
    int lg = (int)(sizeof SQL_EVENTS / sizeof SQL_EVENTS[0]) - 1;
    while ((size_t)1 << lg > n - i) lg--;
    size_t k = (size_t)1 << lg;
    sqlite3_stmt *s = NULL;
    if (k > 1 && !store_cached_bound(st, SQL_EVENTS[lg], &s, &e)) {
      for (size_t r = 0; r < k; r++) bind_event(s, 6 * (int)r, &q[i + r]);
      int rc = sqlite3_step(s);
      store_release_bound(st, s);
      if (rc != SQLITE_DONE)
        for (size_t r = 0; r < k; r++) write_event(st, &q[i + r]);
    } else {
      for (size_t r = 0; r < k; r++) write_event(st, &q[i + r]);
    }
    i += k;
  }
  for (size_t k = 0; k < n; k++)
    if (q[k].op == ROW_END) write_end(st, &q[k]);
}

/* Puts rows that could not be written back in front of what came since,
 * keeping at most JOURNAL_KEEP_MAX (j->mu held). */
static void put_back(struct journal *j, struct qrow *q, size_t n) {
  size_t total = n + j->nq;
  if (total > j->capq) {
    j->capq = total;
    j->q = xrealloc(j->q, j->capq * sizeof *j->q);
  }
  memmove(j->q + n, j->q, j->nq * sizeof *j->q);
  memcpy(j->q, q, n * sizeof *q);
  j->nq = total;
  for (size_t i = 0; i < n; i++) j->nev += q[i].events;
  if (j->nev > JOURNAL_KEEP_MAX) {
    /* the oldest rows, until half of the events are gone */
    size_t drop = 0, lost = 0;
    while (drop < j->nq && 2 * lost < j->nev) lost += j->q[drop].events, qrow_free(&j->q[drop++]);
    memmove(j->q, j->q + drop, (j->nq - drop) * sizeof *j->q);
    j->nq -= drop;
    j->nev -= lost;
    fprintf(stderr, "luagent: run journal: dropped %zu unwritten events\n", lost);
  }
}

/* The writer's drain: everything queued goes in one short transaction on
 * the writer's connection. On failure (the database stays locked past
 * busy_timeout, the disk is full, it is read-only) the rows are kept for
 * the next try, a second later or at the next event. */
static double drain(struct writer_client *c, struct writer *w, int force) {
  struct journal *j = (struct journal *)c;
  (void)force; /* the writer calls this when something is due; all goes */
  pthread_mutex_lock(&j->mu);
  struct qrow *q = j->q;
  size_t n = j->nq, cap = j->capq;
  j->q = NULL;
  j->nq = j->capq = j->nev = 0;
  j->draining = n > 0;
  pthread_mutex_unlock(&j->mu);
  if (!n) {
    free(q);
    return -1;
  }
  struct err e = {0};
  struct store *st = NULL;
  int rc = writer_conn(w, &st, &e);
  if (!rc && !(rc = store_begin(st, &e))) {
    write_rows(j, st, q, n);
    if ((rc = store_commit(st, &e))) store_rollback(st);
  }
  if (rc) fprintf(stderr, "luagent: run journal: %s\n", e.msg);
  if (!rc)
    for (size_t i = 0; i < n; i++) qrow_free(&q[i]);
  pthread_mutex_lock(&j->mu);
  if (rc) put_back(j, q, n);
  j->draining = 0;
  double left = rc ? 1.0 : -1;
  if (!j->spare) { /* the next queue starts with this one's array */
    j->spare = q, j->spare_cap = cap;
    q = NULL;
  }
  pthread_mutex_unlock(&j->mu);
  free(q);
  return left;
}

void journal_flush(struct journal *j) {
  if (j) writer_sync(j->w);
}

void journal_close(struct journal *j) {
  if (!j) return;
  if (j->w) {
    writer_detach(j->w, &j->wc); /* writes what is queued */
    writer_put(j->w);
  }
  if (j->nq) fprintf(stderr, "luagent: run journal: %zu events could not be written\n", j->nev);
  for (size_t i = 0; i < j->nq; i++) qrow_free(&j->q[i]);
  free(j->q);
  free(j->spare);
  store_close(j->st);
  free(j->workspace);
  free(j->seqs);
  pthread_mutex_destroy(&j->mu);
  free(j);
}

/* The next seq for a run, continuing after what the table holds. */
static long next_seq(struct journal *j, const char *run_id) {
  if (j->last_seq < j->nseqs && !strcmp(j->seqs[j->last_seq].run_id, run_id))
    return ++j->seqs[j->last_seq].seq; /* the usual case: the run of the last event */
  for (size_t i = 0; i < j->nseqs; i++)
    if (!strcmp(j->seqs[i].run_id, run_id)) {
      j->last_seq = i;
      return ++j->seqs[i].seq;
    }
  long seq = 0;
  sqlite3_stmt *st = NULL;
  struct err e = {0};
  if ((j->st || !store_open(j->workspace, &j->st, &e)) &&
      !store_cached(j->st, "SELECT coalesce(max(seq), 0) FROM events WHERE run_id=?", &st, &e)) {
    sqlite3_bind_text(st, 1, run_id, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) seq = sqlite3_column_int64(st, 0);
    store_release(j->st, st);
  }
  j->seqs = xrealloc(j->seqs, (j->nseqs + 1) * sizeof *j->seqs);
  snprintf(j->seqs[j->nseqs].run_id, sizeof j->seqs[j->nseqs].run_id, "%s", run_id);
  j->seqs[j->nseqs].seq = seq + 1;
  j->last_seq = j->nseqs;
  return j->seqs[j->nseqs++].seq;
}

/* Forgets a finished run's counter, so a journal that lives as long as the
 * process (delegate()'s) does not grow with every run; should an event of
 * it still come, next_seq continues from the table, which holds all of
 * the run by then (run_end commits the queue). */
static void forget_seq(struct journal *j, const char *run_id) {
  for (size_t i = 0; i < j->nseqs; i++)
    if (!strcmp(j->seqs[i].run_id, run_id)) {
      j->seqs[i] = j->seqs[--j->nseqs];
      return;
    }
}

/* The length of the fixed head of t (len bytes, the event's JSON text) when
 * it is a streamed piece the journal may join to the one queued before it:
 * {"text":"..."} for a text_delta, {"index":N,"delta":"..."} for a
 * tool_args_delta, where "..." is one JSON string, the object's last
 * member, ended by the text's last two bytes. Two pieces with the same head
 * join as that head, the first string's contents, the second's, and the
 * close: the object the model's stream would give for both at once (a JSON
 * string's escapes never span its bytes, so contents concatenate). 0 for
 * any other text, e.g. a script's event of the same type with members of
 * its own: it keeps a row of its own. */
static size_t head_of(const char *t, size_t len) {
  static const char TEXT[] = "{\"text\":\"", INDEX[] = "{\"index\":", DELTA[] = ",\"delta\":\"";
  if (len >= sizeof TEXT - 1 && !memcmp(t, TEXT, sizeof TEXT - 1)) return sizeof TEXT - 1;
  size_t h = sizeof INDEX - 1;
  if (len < h || memcmp(t, INDEX, h)) return 0;
  size_t d = h;
  while (h < len && h - d < 9 && t[h] >= '0' && t[h] <= '9') h++;
  if (h == d || len - h < sizeof DELTA - 1 || memcmp(t + h, DELTA, sizeof DELTA - 1)) return 0;
  return h + sizeof DELTA - 1;
}

/* kind: what journal_event's switch found the type to be (1 text_delta, 2
 * tool_args_delta), so the type is not compared again here. */
static int piece_head(int kind, const char *t, size_t len) {
  size_t h = head_of(t, len);
  if (!h || kind != (t[2] == 't' ? 1 : 2)) return 0;
  if (len < h + 2 || t[len - 2] != '"' || t[len - 1] != '}') return 0;
  /* the string must run to that quote: no unescaped quote before it, and
   * the quote itself not escaped */
  for (size_t i = h; i < len - 2; i++) {
    if (t[i] == '\\') {
      if (i + 1 >= len - 2) return 0;
      i++;
    } else if (t[i] == '"') {
      return 0;
    }
  }
  return (int)h;
}

/* Joins the piece t (len bytes, head h) to the last queued row when that
 * row is a piece of the same run (rl: strlen(run_id)) and head (j->mu
 * held): true when it did. The row keeps its seq and ts, the first
 * piece's. A piece's head fixes its type (piece_head: {"text": only for a
 * text_delta, {"index": only for a tool_args_delta), so equal heads are
 * equal types. */
static bool join_piece(struct journal *j, const char *run_id, size_t rl, const char *t, size_t len,
                       int h) {
  if (!j->nq) return false;
  struct qrow *p = &j->q[j->nq - 1];
  size_t add = len - (size_t)h;
  if (p->head != h || p->op != ROW_EVENT || (size_t)p->run_id_len != rl ||
      memcmp(p->run_id, run_id, rl) || memcmp(p->text, t, (size_t)h) ||
      (size_t)p->text_len + add > JOURNAL_PIECES_MAX)
    return false;
  size_t need = (size_t)p->text_len + add - 1; /* less the close, plus the NUL */
  if (need > (size_t)p->text_cap) {
    size_t cap = 2 * (size_t)p->text_cap;
    if (cap < need) cap = need;
    p->text = xrealloc(p->text, cap);
    p->text_cap = (int)cap;
  }
  /* the lengths, "a,b" at the first join and ",b" after: one append */
  char d[2 * 24 + 2], *end = d + sizeof d;
  char *at = util_dec_before(end, add - 2);
  *--at = ',';
  if (!p->pieces.len) at = util_dec_before(at, (size_t)p->text_len - (size_t)h - 2);
  sbuf_append(&p->pieces, at, (size_t)(end - at));
  /* over the first piece's closing quote and brace: the second's contents
   * and its close (t need not end in a NUL: events_emit_text's text) */
  memcpy(p->text + p->text_len - 2, t + h, add);
  p->text_len += (int)add - 2;
  p->text[p->text_len] = 0;
  p->events++;
  j->nev++;
  return true;
}

int journal_pieces(const char *data, const char *pieces,
                   void (*each)(void *ud, const char *text, size_t len), void *ud) {
  size_t len = strlen(data), sum = 0, n = 0;
  const char *c = pieces;
  /* the lengths: digits separated by commas, adding up to no more than the
   * string can hold; anything else, and the row is one piece */
  while (c && *c) {
    size_t v = 0;
    const char *d = c;
    while (*c >= '0' && *c <= '9' && c - d < 9) v = 10 * v + (size_t)(*c++ - '0');
    if (c == d || (*c && *c != ',')) goto whole;
    sum += v, n++;
    if (*c) c++;
    if (sum + 4 > len) goto whole;
  }
  if (n < 2 || data[len - 2] != '"' || data[len - 1] != '}') goto whole;
  size_t head = len - 2 - sum, end = len - 2;
  if (head != head_of(data, len)) goto whole;
  /* The data must be one string, as the journal joined it (no unescaped
   * quote), and every cut must fall between two of its characters: not
   * inside an escape (\n, \uXXXX) or a UTF-8 sequence. */
  size_t at = head, i = head;
  for (c = pieces; *c;) {
    at += (size_t)strtoul(c, (char **)&c, 10);
    if (*c) c++;
    while (i < at) {
      if (data[i] == '"') goto whole;
      i += data[i] != '\\' ? 1 : data[i + 1] == 'u' ? 6 : 2;
    }
    if (i != at || (at < end && ((unsigned char)data[at] & 0xC0) == 0x80)) goto whole;
  }
  struct sbuf b = {0};
  at = head;
  for (c = pieces; *c;) {
    size_t v = (size_t)strtoul(c, (char **)&c, 10);
    if (*c) c++;
    b.len = 0;
    sbuf_append(&b, data, head);
    sbuf_append(&b, data + at, v);
    sbuf_append(&b, "\"}", 2);
    at += v;
    each(ud, b.s, b.len);
  }
  sbuf_free(&b);
  return (int)n;
whole:
  each(ud, data, len);
  return 1;
}

static const char *str_or(const cJSON *d, const char *k, const char *dflt) {
  const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(d, k));
  return s ? s : dflt;
}

static char *dup_or_null(const char *s) { return s ? xstrdup(s) : NULL; }

/* The sink: an event's text is stored as it comes (the emitter printed it
 * once, or event_json prints its tree: json_print either way); only
 * run_start and run_end read their tree, for the runs row. */
static void journal_event(void *ud, struct event *ev) {
  struct journal *j = ud;
  const char *run_id = ev->run_id, *type = ev->type;
  if (!run_id || !*run_id) return;
  size_t rl = strlen(run_id);
  if (rl > JOURNAL_RUN_ID_MAX) {
    /* The row holds JOURNAL_RUN_ID_MAX bytes: cut, the id could be another
     * run's, whose rows and status this run's would then take over
     * (review 17 F1). Said once per journal. */
    if (!__atomic_exchange_n(&j->said_long_id, 1, __ATOMIC_RELAXED))
      fprintf(stderr, "luagent: run journal: an event of a run id over %d bytes was not recorded "
                      "(\"%.16s...\", %zu bytes)\n",
              JOURNAL_RUN_ID_MAX, run_id, rl);
    return;
  }
  /* Events of the streaming phase wait in memory for the next other event
   * (or a batch, or half a second); every other event is due now. kind:
   * 1 text_delta, 2 tool_args_delta (the pieces piece_head may join), 3
   * another streamed event; the type is compared here and nowhere after. */
  int kind = 0;
  bool start = false, end = false;
  switch (type[0]) { /* one strcmp per event, not seven */
    case 't':
      /* type[1] tells text_delta from the tool_* two (a NUL there: neither) */
      kind = type[1] == 'e'                     ? (!strcmp(type, "text_delta") ? 1 : 0)
             : !strcmp(type, "tool_args_delta") ? 2
             : !strcmp(type, "tool_call_start") ? 3
                                                : 0;
      break;
    case 'u': kind = !strcmp(type, "usage") ? 3 : 0; break;
    case 'r':
      kind = !strcmp(type, "retry") ? 3 : 0;
      start = !kind && !strcmp(type, "run_start");
      end = !kind && !start && !strcmp(type, "run_end");
      break;
  }
  bool delta = kind != 0;
  size_t len = 0;
  const char *json = event_json(ev, &len);
  /* Consecutive streamed pieces of a run that wait together are one row
   * (piece_head): a model streams an answer in pieces of a few tokens, and
   * a row each would be most of the journal's rows and its writer's work.
   * Every piece is in the row; the pieces' own boundaries and times are
   * not kept (they are the provider's chunking), beyond their lengths. */
  int head =
      json && kind && kind < 3 && len <= JOURNAL_PIECES_MAX ? piece_head(kind, json, len) : 0;
  char *text = NULL; /* copied outside the lock (a piece: inside, if it starts a row) */
  if (json && !head) {
    text = xmalloc(len + 1);
    memcpy(text, json, len);
    text[len] = 0;
  }
  const cJSON *data = start || end ? event_data(ev) : NULL;
  pthread_mutex_lock(&j->mu);
  if (head && join_piece(j, run_id, rl, json, len, head)) {
    /* the queue's due time stands (it is no later than its oldest row's)
     * unless the pieces make a batch; a joined piece keeps the row's time,
     * so it reads no clock */
    bool batch = j->nev >= JOURNAL_BATCH;
    pthread_mutex_unlock(&j->mu);
    if (batch) writer_due(j->w, &j->wc, 0);
    return;
  }
  int cap = 0;
  if (head) {
    /* room for the pieces that may join it, so the first few do not each
     * grow it (join_piece doubles it past that) */
    cap = len < PIECE_ROW_CAP ? PIECE_ROW_CAP : (int)len + 1;
    text = xmalloc((size_t)cap);
    memcpy(text, json, len);
    text[len] = 0;
  }
  /* A new row's clocks, read once for it (under the lock, so the queue's
   * times are in its order) */
  double now = util_now(), mono = util_monotonic();
  if (!j->q && j->spare) {
    j->q = j->spare, j->capq = j->spare_cap;
    j->spare = NULL;
  }
  if (j->nq == j->capq) {
    j->capq = j->capq ? 2 * j->capq : 64;
    j->q = xrealloc(j->q, j->capq * sizeof *j->q);
  }
  if (!j->nq) j->oldest = mono;
  struct qrow *r = &j->q[j->nq++];
  if (rl < sizeof r->run_id) {
    memcpy(r->run_id, run_id, rl + 1);
    r->run_id_len = (int)rl;
  } else {
    r->run_id_len = (int)util_copy(r->run_id, sizeof r->run_id, run_id);
  }
  r->seq = next_seq(j, run_id);
  r->ts = now;
  r->type_len = (int)util_copy(r->type, sizeof r->type, type);
  r->text = text;
  r->text_len = len <= INT_MAX ? (int)len : -1; /* -1: SQLite measures it */
  r->head = head;
  r->text_cap = cap;
  r->pieces = (struct sbuf){0};
  r->events = 1;
  j->nev++;
  r->op = start ? ROW_START : end ? ROW_END : ROW_EVENT;
  memset(r->f, 0, sizeof r->f);
  r->tool_calls = 0;
  if (start) {
    r->f[0] = dup_or_null(str_or(data, "kind", NULL));
    r->f[1] = dup_or_null(str_or(data, "name", NULL));
    r->f[2] = dup_or_null(str_or(data, "caller", NULL));
    r->f[3] = dup_or_null(str_or(data, "parent", NULL));
  } else if (end) {
    r->f[0] = dup_or_null(str_or(data, "status", NULL));
    r->f[1] = dup_or_null(str_or(data, "answer", NULL));
    r->f[2] = dup_or_null(str_or(data, "error", NULL));
    const cJSON *tc = cJSON_GetObjectItem(data, "tool_calls");
    r->tool_calls = cJSON_IsNumber(tc) ? (long)tc->valuedouble : 0;
  }
  /* Group commit: what else happens within JOURNAL_GROUP_S of an event
   * (the next tool's result, the next turn's first pieces) goes in its
   * transaction; run_start and run_end do not wait for company. */
  double due = start || end || j->nev >= JOURNAL_BATCH ? 0
               : !delta                            ? mono + JOURNAL_GROUP_S
                                                   : j->oldest + JOURNAL_AGE_S;
  pthread_mutex_unlock(&j->mu);
  writer_due(j->w, &j->wc, due);
  if (start || end) {
    /* The run row exists before the first model call, and a finished run
     * is on record whole: both wait for their commit. */
    writer_sync(j->w);
    if (end) {
      pthread_mutex_lock(&j->mu);
      if (!j->nq && !j->draining) forget_seq(j, run_id);
      pthread_mutex_unlock(&j->mu);
    }
  }
}

/* The tree entry, for a caller that calls s->emit itself. */
static void journal_emit(void *ud, const char *run_id, const char *type, const cJSON *data) {
  struct event ev = {.run_id = run_id, .type = type, .data = data};
  journal_event(ud, &ev);
  free(ev.own_json);
}

void journal_sink(struct journal *j, struct event_sink *s) {
  s->emit = journal_emit;
  s->emit_event = journal_event;
  s->ud = j;
}
