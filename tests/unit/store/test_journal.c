/* test_journal.c - the run journal's rows read back exactly as emitted,
 * whether they went in one to an INSERT or up to 32 to one, in drains of
 * every size from 1 to 70 rows, and a row that cannot be written costs
 * only itself, not the rows beside it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "journal.h"
#include "journal_fixture.h"
#include "store.h"
#include "test.h"

struct want {
  long seq;
  char type[32];
  char data[128]; /* "" = NULL */
};

/* emit, and what the row must read back as into *w. */
static void emit_want(struct event_sink *s, const char *run, const char *type, const char *json,
                      struct want *w, long seq) {
  emit(s, run, type, json);
  if (!w) return;
  w->seq = seq;
  snprintf(w->type, sizeof w->type, "%s", type);
  snprintf(w->data, sizeof w->data, "%s", json ? json : "");
}

/* Every events row of run, in seq order, against want[0..n). */
static void check_rows(struct store *st, const char *run, const struct want *want, int n) {
  sqlite3_stmt *q = NULL;
  struct err e = {0};
  CHECK_INT(store_prepare(st, "SELECT seq, type, data, ts FROM events WHERE run_id = ? ORDER BY seq",
                          &q, &e),
            0);
  if (!q) return;
  sqlite3_bind_text(q, 1, run, -1, SQLITE_STATIC);
  int i = 0;
  double last_ts = 0;
  while (sqlite3_step(q) == SQLITE_ROW) {
    if (i < n) {
      CHECK_INT(sqlite3_column_int64(q, 0), want[i].seq);
      CHECK_STR((const char *)sqlite3_column_text(q, 1), want[i].type);
      const char *d = (const char *)sqlite3_column_text(q, 2);
      CHECK_STR(d ? d : "", want[i].data);
      CHECK(sqlite3_column_double(q, 3) >= last_ts);
      last_ts = sqlite3_column_double(q, 3);
    }
    i++;
  }
  CHECK_INT(i, n);
  sqlite3_finalize(q);
}

/* run_start, 19 streamed pieces (two eight-row statements and three
 * single rows at the turn's commit), a turn_complete, run_end. */
static void test_rows_read_back(void) {
  struct err e = {0};
  struct event_sink s;
  struct journal *j = fixture_journal(&s);
  if (!j) return;
  struct want w[40];
  int n = 0;
  const char *run = "r-rows";
  emit_want(&s, run, "run_start", "{\"kind\":\"ask\",\"name\":\"t\"}", &w[n], n + 1), n++;
  for (int i = 0; i < 19; i++) {
    char js[96];
    snprintf(js, sizeof js, "{\"text\":\"piece %d \\\"q\\\" \xc3\xa9\",\"i\":%d}", i, i);
    emit_want(&s, run, i % 7 == 6 ? "usage" : "text_delta", i == 11 ? NULL : js, &w[n], n + 1), n++;
  }
  emit_want(&s, run, "turn_complete", "{\"turn\":1}", &w[n], n + 1), n++;
  emit_want(&s, run, "run_end", "{\"status\":\"done\",\"answer\":\"ok\",\"tool_calls\":0}", &w[n],
            n + 1),
      n++;
  struct store *st = NULL;
  CHECK_INT(store_open(dir, &st, &e), 0);
  if (st) {
    check_rows(st, run, w, n);
    sqlite3_stmt *q = NULL;
    CHECK_INT(store_prepare(st, "SELECT status, result FROM runs WHERE id = 'r-rows'", &q, &e), 0);
    CHECK_INT(q ? sqlite3_step(q) : -1, SQLITE_ROW);
    if (q) {
      CHECK_STR((const char *)sqlite3_column_text(q, 0), "done");
      CHECK_STR((const char *)sqlite3_column_text(q, 1), "ok");
      sqlite3_finalize(q);
    }
    store_close(st);
  }
  journal_close(j);
}

/* Another connection takes seq 5 of the run while its pieces wait in the
 * queue: the eight-row statement holding seq 5 fails, the journal writes
 * those eight one by one, and only seq 5's row is lost (the other
 * connection's row stays). */
static void test_bad_row_costs_only_itself(void) {
  struct err e = {0};
  struct event_sink s;
  struct journal *j = fixture_journal(&s);
  if (!j) return;
  const char *run = "r-clash";
  struct want w[40];
  int n = 0;
  emit_want(&s, run, "run_start", "{\"kind\":\"ask\"}", &w[n], n + 1), n++;
  struct store *other = NULL;
  CHECK_INT(store_open(dir, &other, &e), 0);
  for (int i = 0; i < 10; i++) {
    char js[32];
    snprintf(js, sizeof js, "{\"i\":%d}", i);
    emit_want(&s, run, "text_delta", js, &w[n], n + 1), n++;
  }
  if (other) {
    CHECK_INT(store_exec(other,
                         "INSERT INTO events(run_id, seq, ts, type, data) VALUES "
                         "('r-clash', 5, 1, 'intruder', NULL)",
                         &e),
              0);
    store_close(other);
  }
  emit_want(&s, run, "turn_complete", "{}", &w[n], n + 1), n++;
  journal_flush(j); /* turn_complete commits within 5 ms (writer.h): now */
  /* seq 5 is the intruder's row now */
  snprintf(w[4].type, sizeof w[4].type, "intruder");
  w[4].data[0] = 0;
  struct store *st = NULL;
  CHECK_INT(store_open(dir, &st, &e), 0);
  if (st) {
    /* the intruder's ts (1) sorts first; compare without the ts order */
    sqlite3_stmt *q = NULL;
    CHECK_INT(store_prepare(st, "SELECT count(*) FROM events WHERE run_id = 'r-clash'", &q, &e),
              0);
    CHECK_INT(q ? sqlite3_step(q) : -1, SQLITE_ROW);
    if (q) {
      CHECK_INT(sqlite3_column_int(q, 0), n);
      sqlite3_finalize(q);
    }
    CHECK_INT(store_prepare(st,
                            "SELECT seq, type, coalesce(data, '') FROM events "
                            "WHERE run_id = 'r-clash' ORDER BY seq",
                            &q, &e),
              0);
    int i = 0;
    while (q && sqlite3_step(q) == SQLITE_ROW && i < n) {
      CHECK_INT(sqlite3_column_int64(q, 0), w[i].seq);
      CHECK_STR((const char *)sqlite3_column_text(q, 1), w[i].type);
      CHECK_STR((const char *)sqlite3_column_text(q, 2), w[i].data);
      i++;
    }
    CHECK_INT(i, n);
    sqlite3_finalize(q);
    store_close(st);
  }
  journal_close(j);
}

/* Drains of 1, 2, ..., 70 rows (journal_flush after each): every size of
 * INSERT, 32 rows to 1, and each mix of them, each statement reused with
 * the last drain's bindings in place. Rows with and without data, types
 * and data of other lengths than the row before them in the same slot:
 * a binding left over from an earlier drain (a text where this row has
 * NULL, a length) would show in the rows read back. */
static void test_every_drain_size(void) {
  struct event_sink s;
  struct journal *j = fixture_journal(&s);
  if (!j) return;
  enum { MAXN = 70, TOTAL = 1 + MAXN * (MAXN + 1) / 2 };
  struct want *w = calloc(TOTAL, sizeof *w);
  const char *run = "r-sizes";
  int n = 0;
  emit_want(&s, run, "run_start", "{\"kind\":\"ask\"}", &w[n], n + 1), n++;
  journal_flush(j);
  static const char *const types[] = {"text_delta", "usage", "tool_args_delta", "retry"};
  for (int size = 1; size <= MAXN; size++) {
    for (int i = 0; i < size; i++) {
      char js[96];
      int seq = n + 1;
      snprintf(js, sizeof js, "{\"d\":\"%.*s\xc3\xa9\",\"seq\":%d}", seq % 17,
               "xyzxyzxyzxyzxyzxyz", seq);
      emit_want(&s, run, types[seq % 4], seq % 3 ? js : NULL, &w[n], seq), n++;
    }
    journal_flush(j);
  }
  struct store *st = NULL;
  struct err e = {0};
  CHECK_INT(store_open(dir, &st, &e), 0);
  if (st) {
    check_rows(st, run, w, n);
    store_close(st);
  }
  free(w);
  journal_close(j);
}

int main(void) {
  if (fixture_start("journal")) return 1;
  test_rows_read_back();
  test_bad_row_costs_only_itself();
  test_every_drain_size();
  fixture_end();
  return TEST_END();
}
