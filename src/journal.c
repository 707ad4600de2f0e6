/* journal.c - see journal.h. */
#include "journal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "store.h"
#include "util.h"

struct seqent {
  char run_id[40];
  long seq;
};

struct journal {
  pthread_mutex_t mu;
  struct store *st;
  sqlite3_stmt *ins_event, *ins_run, *end_run;
  bool in_tx;
  int pending;
  struct seqent *seqs;
  size_t nseqs;
};

int journal_open(const char *workspace, struct journal **out, struct err *e) {
  *out = NULL;
  struct journal *j = xcalloc(1, sizeof *j);
  pthread_mutex_init(&j->mu, NULL);
  int rc = store_open(workspace, &j->st, e);
  if (rc) goto fail;
  if ((rc = store_prepare(j->st,
                          "INSERT INTO events(run_id, seq, ts, type, data) VALUES (?,?,?,?,?)",
                          &j->ins_event, e)))
    goto fail;
  if ((rc = store_prepare(j->st,
                          "INSERT OR IGNORE INTO runs(id, kind, name, trigger, status, started, "
                          "parent) VALUES (?,?,?,?, 'running', ?, ?)",
                          &j->ins_run, e)))
    goto fail;
  if ((rc = store_prepare(j->st,
                          "UPDATE runs SET status=?, finished=?, result=?, error=?, "
                          "tool_calls=? WHERE id=?",
                          &j->end_run, e)))
    goto fail;
  *out = j;
  return 0;
fail:
  journal_close(j);
  return rc;
}

static void commit_locked(struct journal *j) {
  if (!j->in_tx) return;
  struct err e = {0};
  if (store_commit(j->st, &e)) store_rollback(j->st);
  j->in_tx = false;
  j->pending = 0;
}

void journal_flush(struct journal *j) {
  if (!j) return;
  pthread_mutex_lock(&j->mu);
  commit_locked(j);
  pthread_mutex_unlock(&j->mu);
}

void journal_close(struct journal *j) {
  if (!j) return;
  journal_flush(j);
  sqlite3_finalize(j->ins_event);
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
  if (!store_prepare(j->st, "SELECT coalesce(max(seq), 0) FROM events WHERE run_id=?", &st, &e)) {
    sqlite3_bind_text(st, 1, run_id, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) seq = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  j->seqs = xrealloc(j->seqs, (j->nseqs + 1) * sizeof *j->seqs);
  snprintf(j->seqs[j->nseqs].run_id, sizeof j->seqs[j->nseqs].run_id, "%s", run_id);
  j->seqs[j->nseqs].seq = seq + 1;
  return j->seqs[j->nseqs++].seq;
}

static void step_reset(struct journal *j, sqlite3_stmt *st, const char *what) {
  int rc = sqlite3_step(st);
  if (rc != SQLITE_DONE)
    fprintf(stderr, "luagent: run journal: %s failed: %s\n", what, sqlite3_errmsg(store_db(j->st)));
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
}

static const char *str_or(const cJSON *d, const char *k, const char *dflt) {
  const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(d, k));
  return s ? s : dflt;
}

static void journal_emit(void *ud, const char *run_id, const char *type, const cJSON *data) {
  struct journal *j = ud;
  if (!run_id || !*run_id) return;
  /* Events of the streaming phase are batched: no tool runs (and so no
   * other connection needs to write) until turn_complete. */
  bool delta = !strcmp(type, "text_delta") || !strcmp(type, "tool_args_delta") ||
               !strcmp(type, "tool_call_start") || !strcmp(type, "usage") ||
               !strcmp(type, "retry") || !strcmp(type, "run_start");
  pthread_mutex_lock(&j->mu);
  if (!j->in_tx) {
    struct err e = {0};
    if (!store_exec(j->st, "BEGIN", &e)) j->in_tx = true;
  }
  double now = util_now();
  if (!strcmp(type, "run_start")) {
    sqlite3_bind_text(j->ins_run, 1, run_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(j->ins_run, 2, str_or(data, "kind", "ask"), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(j->ins_run, 3, str_or(data, "name", ""), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(j->ins_run, 4, str_or(data, "caller", ""), -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(j->ins_run, 5, now);
    const char *parent = str_or(data, "parent", NULL);
    if (parent)
      sqlite3_bind_text(j->ins_run, 6, parent, -1, SQLITE_TRANSIENT);
    else
      sqlite3_bind_null(j->ins_run, 6);
    step_reset(j, j->ins_run, "recording the run");
  }
  char *text = data ? json_print(data, 0) : NULL;
  sqlite3_bind_text(j->ins_event, 1, run_id, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(j->ins_event, 2, next_seq(j, run_id));
  sqlite3_bind_double(j->ins_event, 3, now);
  sqlite3_bind_text(j->ins_event, 4, type, -1, SQLITE_TRANSIENT);
  if (text)
    sqlite3_bind_text(j->ins_event, 5, text, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(j->ins_event, 5);
  step_reset(j, j->ins_event, "recording an event");
  free(text);
  if (!strcmp(type, "run_end")) {
    sqlite3_bind_text(j->end_run, 1, str_or(data, "status", "failed"), -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(j->end_run, 2, now);
    sqlite3_bind_text(j->end_run, 3, str_or(data, "answer", ""), -1, SQLITE_TRANSIENT);
    const char *err = str_or(data, "error", NULL);
    if (err)
      sqlite3_bind_text(j->end_run, 4, err, -1, SQLITE_TRANSIENT);
    else
      sqlite3_bind_null(j->end_run, 4);
    const cJSON *tc = cJSON_GetObjectItem(data, "tool_calls");
    sqlite3_bind_int64(j->end_run, 5, cJSON_IsNumber(tc) ? (long)tc->valuedouble : 0);
    sqlite3_bind_text(j->end_run, 6, run_id, -1, SQLITE_TRANSIENT);
    step_reset(j, j->end_run, "finishing the run");
  }
  j->pending++;
  /* Any other event commits, so nothing is held while tools run (their
   * pipeline may write through its own connection). */
  if (!delta || j->pending >= 256) commit_locked(j);
  pthread_mutex_unlock(&j->mu);
}

void journal_sink(struct journal *j, struct event_sink *s) {
  s->emit = journal_emit;
  s->ud = j;
}

