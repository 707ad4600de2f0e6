/* journal.c - see journal.h. */
#include "journal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "store.h"
#include "util.h"

struct seqent {
  char run_id[40];
  long seq;
};

/* One event waiting to be written. */
struct qrow {
  char run_id[40];
  long seq;
  double ts;
  char type[32];
  char *text; /* JSON, or NULL */
};

/* Events are queued in memory and written in short transactions: no
 * transaction ever stays open across a model call, a tool run or an
 * approval wait, so every other process sharing the workspace (the daemon,
 * `luagent emit`, memory.set) keeps writing while a run waits. */
#define JOURNAL_BATCH 256
/* Queued events go EVENT_ROWS to an INSERT: most of a one-row INSERT's
 * cost is the statement, not the row. */
#define EVENT_ROWS 8
#define EVENT_PARAMS "(?,?,?,?,?)"
#define JOURNAL_AGE_S 0.5

struct journal {
  pthread_mutex_t mu;
  struct store *st;
  sqlite3_stmt *ins_event, *ins_events, *ins_run, *end_run; /* ins_events: EVENT_ROWS rows */
  struct qrow *q;
  size_t nq, capq;
  double oldest;
  struct seqent *seqs;
  size_t nseqs;
  long long pid, proc_start;
};

int journal_open(const char *workspace, struct journal **out, struct err *e) {
  *out = NULL;
  struct journal *j = xcalloc(1, sizeof *j);
  pthread_mutex_init(&j->mu, NULL);
  j->pid = getpid();
  j->proc_start = store_proc_start((int)getpid());
  int rc = store_open(workspace, &j->st, e);
  if (rc) goto fail;
  if ((rc = store_prepare(j->st,
                          "INSERT INTO events(run_id, seq, ts, type, data) VALUES (?,?,?,?,?)",
                          &j->ins_event, e)))
    goto fail;
  if ((rc = store_prepare(j->st,
                          "INSERT OR IGNORE INTO runs(id, kind, name, trigger, status, started, "
                          "parent, worker_pid, proc_start) VALUES (?,?,?,?, 'running', ?, ?, ?, ?)",
                          &j->ins_run, e)))
    goto fail;
  if ((rc = store_prepare(j->st,
                          "UPDATE runs SET status=?, finished=?, result=?, error=?, "
                          "tool_calls=? WHERE id=?",
                          &j->end_run, e)))
    goto fail;
  /* Runs an earlier process left "running" when it was killed. */
  struct err me = {0};
  store_mark_interrupted(j->st, &me);
  *out = j;
  return 0;
fail:
  journal_close(j);
  return rc;
}

static void step_reset(struct journal *j, sqlite3_stmt *st, const char *what) {
  int rc = sqlite3_step(st);
  if (rc != SQLITE_DONE)
    fprintf(stderr, "luagent: run journal: %s failed: %s\n", what, sqlite3_errmsg(store_db(j->st)));
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
}

static void bind_event(sqlite3_stmt *st, int base, const struct qrow *r) {
  sqlite3_bind_text(st, base + 1, r->run_id, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, base + 2, r->seq);
  sqlite3_bind_double(st, base + 3, r->ts);
  sqlite3_bind_text(st, base + 4, r->type, -1, SQLITE_STATIC);
  if (r->text) sqlite3_bind_text(st, base + 5, r->text, -1, SQLITE_STATIC);
  else sqlite3_bind_null(st, base + 5);
}

/* Writes the queued events inside the caller's transaction, EVENT_ROWS to
 * a statement. A statement that fails inserted none of its rows (SQLite
 * undoes a failed statement whole); they are then written one by one, so
 * a bad row costs only itself, as when every row had its own INSERT. */
static void write_queue_locked(struct journal *j) {
  size_t i = 0;
  /* Prepared when first needed (a command that writes a few events never
   * pays for it); should that fail, every row gets its own INSERT. */
  if (j->nq >= EVENT_ROWS && !j->ins_events &&
      sqlite3_prepare_v3(store_db(j->st),
                         "INSERT INTO events(run_id, seq, ts, type, data) VALUES " EVENT_PARAMS
                         "," EVENT_PARAMS "," EVENT_PARAMS "," EVENT_PARAMS "," EVENT_PARAMS
                         "," EVENT_PARAMS "," EVENT_PARAMS "," EVENT_PARAMS,
                         -1, SQLITE_PREPARE_PERSISTENT, &j->ins_events, NULL) != SQLITE_OK) {
    sqlite3_finalize(j->ins_events);
    j->ins_events = NULL;
  }
  while (i < j->nq) {
    if (j->ins_events && j->nq - i >= EVENT_ROWS) {
      for (int k = 0; k < EVENT_ROWS; k++) bind_event(j->ins_events, 5 * k, &j->q[i + k]);
      int rc = sqlite3_step(j->ins_events);
      sqlite3_reset(j->ins_events);
      sqlite3_clear_bindings(j->ins_events);
      if (rc == SQLITE_DONE) {
        for (int k = 0; k < EVENT_ROWS; k++) free(j->q[i + k].text);
        i += EVENT_ROWS;
        continue;
      }
      for (int k = 0; k < EVENT_ROWS; k++, i++) {
        bind_event(j->ins_event, 0, &j->q[i]);
        step_reset(j, j->ins_event, "recording an event");
        free(j->q[i].text);
      }
      continue;
    }
    bind_event(j->ins_event, 0, &j->q[i]);
    step_reset(j, j->ins_event, "recording an event");
    free(j->q[i].text);
    i++;
  }
  j->nq = 0;
}

/* Opens a short write transaction; on failure (the database stays locked
 * past busy_timeout, the disk is full) the queue is kept for the next try,
 * up to a bound past which the oldest streamed events are dropped with a
 * message rather than growing without end. */
static int begin_locked(struct journal *j) {
  struct err e = {0};
  if (!store_begin(j->st, &e)) return 0;
  fprintf(stderr, "luagent: run journal: %s\n", e.msg);
  if (j->nq > 16 * JOURNAL_BATCH) {
    size_t drop = j->nq / 2;
    for (size_t i = 0; i < drop; i++) free(j->q[i].text);
    memmove(j->q, j->q + drop, (j->nq - drop) * sizeof *j->q);
    j->nq -= drop;
    fprintf(stderr, "luagent: run journal: dropped %zu unwritten events\n", drop);
  }
  return -1;
}

static void commit_locked(struct journal *j) {
  struct err e = {0};
  if (store_commit(j->st, &e)) {
    fprintf(stderr, "luagent: run journal: %s\n", e.msg);
    store_rollback(j->st);
  }
}

static void flush_locked(struct journal *j) {
  if (!j->nq || begin_locked(j)) return;
  write_queue_locked(j);
  commit_locked(j);
}

void journal_flush(struct journal *j) {
  if (!j) return;
  pthread_mutex_lock(&j->mu);
  flush_locked(j);
  pthread_mutex_unlock(&j->mu);
}

void journal_close(struct journal *j) {
  if (!j) return;
  journal_flush(j);
  for (size_t i = 0; i < j->nq; i++) free(j->q[i].text);
  free(j->q);
  sqlite3_finalize(j->ins_event);
  sqlite3_finalize(j->ins_events);
  sqlite3_finalize(j->ins_run);
  sqlite3_finalize(j->end_run);
  store_close(j->st);
  free(j->seqs);
  pthread_mutex_destroy(&j->mu);
  free(j);
}

/* The next seq for a run, continuing after what the table holds. */
static long next_seq(struct journal *j, const char *run_id) {
  for (size_t i = 0; i < j->nseqs; i++)
    if (!strcmp(j->seqs[i].run_id, run_id)) return ++j->seqs[i].seq;
  long seq = 0;
  sqlite3_stmt *st = NULL;
  struct err e = {0};
  if (!store_cached(j->st, "SELECT coalesce(max(seq), 0) FROM events WHERE run_id=?", &st, &e)) {
    sqlite3_bind_text(st, 1, run_id, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) seq = sqlite3_column_int64(st, 0);
    store_release(j->st, st);
  }
  j->seqs = xrealloc(j->seqs, (j->nseqs + 1) * sizeof *j->seqs);
  snprintf(j->seqs[j->nseqs].run_id, sizeof j->seqs[j->nseqs].run_id, "%s", run_id);
  j->seqs[j->nseqs].seq = seq + 1;
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

static const char *str_or(const cJSON *d, const char *k, const char *dflt) {
  const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(d, k));
  return s ? s : dflt;
}

static void bind_run_start(struct journal *j, const char *run_id, const cJSON *data, double now) {
  sqlite3_bind_text(j->ins_run, 1, run_id, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(j->ins_run, 2, str_or(data, "kind", "ask"), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(j->ins_run, 3, str_or(data, "name", ""), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(j->ins_run, 4, str_or(data, "caller", ""), -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(j->ins_run, 5, now);
  const char *parent = str_or(data, "parent", NULL);
  if (parent) sqlite3_bind_text(j->ins_run, 6, parent, -1, SQLITE_TRANSIENT);
  else sqlite3_bind_null(j->ins_run, 6);
  sqlite3_bind_int64(j->ins_run, 7, j->pid);
  if (j->proc_start >= 0) sqlite3_bind_int64(j->ins_run, 8, j->proc_start);
  else sqlite3_bind_null(j->ins_run, 8);
}

static void bind_run_end(struct journal *j, const char *run_id, const cJSON *data, double now) {
  sqlite3_bind_text(j->end_run, 1, str_or(data, "status", "failed"), -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(j->end_run, 2, now);
  sqlite3_bind_text(j->end_run, 3, str_or(data, "answer", ""), -1, SQLITE_TRANSIENT);
  const char *err = str_or(data, "error", NULL);
  if (err) sqlite3_bind_text(j->end_run, 4, err, -1, SQLITE_TRANSIENT);
  else sqlite3_bind_null(j->end_run, 4);
  const cJSON *tc = cJSON_GetObjectItem(data, "tool_calls");
  sqlite3_bind_int64(j->end_run, 5, cJSON_IsNumber(tc) ? (long)tc->valuedouble : 0);
  sqlite3_bind_text(j->end_run, 6, run_id, -1, SQLITE_TRANSIENT);
}

/* s cut to fit a field of n bytes (n > 0), as snprintf("%s") would, at a
 * tenth of its cost: this runs for every streamed piece. */
static void copy_field(char *dst, size_t n, const char *s) {
  size_t k = strnlen(s, n - 1);
  memcpy(dst, s, k);
  dst[k] = 0;
}

static void journal_emit(void *ud, const char *run_id, const char *type, const cJSON *data) {
  struct journal *j = ud;
  if (!run_id || !*run_id) return;
  /* Events of the streaming phase wait in memory for the next other event
   * (or a batch, or half a second); every other event is written now. */
  bool delta = !strcmp(type, "text_delta") || !strcmp(type, "tool_args_delta") ||
               !strcmp(type, "tool_call_start") || !strcmp(type, "usage") ||
               !strcmp(type, "retry");
  bool start = !strcmp(type, "run_start"), end = !strcmp(type, "run_end");
  double now = util_now();
  pthread_mutex_lock(&j->mu);
  if (j->nq == j->capq) {
    j->capq = j->capq ? 2 * j->capq : 64;
    j->q = xrealloc(j->q, j->capq * sizeof *j->q);
  }
  if (!j->nq) j->oldest = now;
  struct qrow *r = &j->q[j->nq++];
  copy_field(r->run_id, sizeof r->run_id, run_id);
  r->seq = next_seq(j, run_id);
  r->ts = now;
  copy_field(r->type, sizeof r->type, type);
  r->text = data ? json_print(data, 0) : NULL;
  if (start || end || !delta || j->nq >= JOURNAL_BATCH || now - j->oldest >= JOURNAL_AGE_S) {
    /* The run row exists before the first model call: run_start commits
     * at once, in the same short transaction as what is queued. */
    if (!begin_locked(j)) {
      if (start) {
        bind_run_start(j, run_id, data, now);
        step_reset(j, j->ins_run, "recording the run");
      }
      write_queue_locked(j);
      if (end) {
        bind_run_end(j, run_id, data, now);
        step_reset(j, j->end_run, "finishing the run");
      }
      commit_locked(j);
      if (end && !j->nq) forget_seq(j, run_id);
    }
  }
  pthread_mutex_unlock(&j->mu);
}

void journal_sink(struct journal *j, struct event_sink *s) {
  s->emit = journal_emit;
  s->ud = j;
}
