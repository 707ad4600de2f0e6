/* test_journal.c - the run journal's rows read back exactly as emitted,
 * whether they went in one to an INSERT or up to 32 to one, in drains of
 * every size from 1 to 70 rows, and a row that cannot be written costs
 * only itself, not the rows beside it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "events.h"
#include "journal.h"
#include "journal_fixture.h"
#include "store.h"
#include "test.h"
#include "util.h"

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

/* The text of every events row of run of type, in seq order, joined by
 * '|' into out (NULL data as "-"): -1 when the query fails. */
static int rows_of(struct store *st, const char *run, const char *type, struct sbuf *out) {
  sqlite3_stmt *q = NULL;
  struct err e = {0};
  if (store_prepare(st, "SELECT coalesce(data, '-') FROM events WHERE run_id = ? AND type = ? "
                    "ORDER BY seq", &q, &e))
    return -1;
  sqlite3_bind_text(q, 1, run, -1, SQLITE_STATIC);
  sqlite3_bind_text(q, 2, type, -1, SQLITE_STATIC);
  int n = 0;
  out->len = 0;
  while (sqlite3_step(q) == SQLITE_ROW) {
    if (n++) sbuf_puts(out, "|");
    sbuf_puts(out, (const char *)sqlite3_column_text(q, 0));
  }
  sqlite3_finalize(q);
  return n;
}

static void collect(void *ud, const char *text, size_t len) {
  sbuf_append(ud, text, len);
  sbuf_puts(ud, "|");
}

static cJSON *tree_text(const void *f) {
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "text", f);
  return d;
}

/* A piece whose text is exactly its bytes, no NUL after them (events.h
 * allows it): joining reads none past them (red team 14; ASan saw the
 * read of one byte past the buffer). */
static void test_pieces_not_nul_ended(void) {
  struct event_sink s;
  struct journal *j = fixture_journal(&s);
  if (!j) return;
  emit(&s, "r-nonul", "run_start", "{\"kind\":\"ask\"}");
  static const char *const texts[] = {"abc", "def", "g"};
  for (int i = 0; i < 3; i++) {
    char tmp[64];
    int n = snprintf(tmp, sizeof tmp, "{\"text\":\"%s\"}", texts[i]);
    char *exact = malloc((size_t)n);
    memcpy(exact, tmp, (size_t)n);
    events_emit_text(&s, "r-nonul", "text_delta", exact, (size_t)n, tree_text, texts[i]);
    free(exact);
  }
  emit(&s, "r-nonul", "run_end", "{\"status\":\"ok\"}");
  struct store *st = NULL;
  struct err e = {0};
  CHECK_INT(store_open(dir, &st, &e), 0);
  if (st) {
    struct sbuf b = {0};
    CHECK_INT(rows_of(st, "r-nonul", "text_delta", &b), 1);
    CHECK_STR(b.s, "{\"text\":\"abcdefg\"}");
    free(b.s);
    store_close(st);
  }
  journal_close(j);
}

/* journal_pieces on rows whose pieces do not fit their data (a hand-edited
 * or damaged row): the row comes back whole, once. */
static void test_pieces_bad(void) {
  static const char *const bad[] = {"x", "1,", ",1", "1,,1", "a,b", "1", "99,1", "1,1,1,1,1,1",
                                    "4294967297,1", "-1,2"};
  const char *data = "{\"text\":\"abcd\"}";
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct sbuf got = {0};
    CHECK_INT(journal_pieces(data, bad[i], collect, &got), 1);
    CHECK_STR(got.s, "{\"text\":\"abcd\"}|");
    free(got.s);
  }
  struct sbuf got = {0};
  CHECK_INT(journal_pieces(data, "1,3", collect, &got), 2);
  CHECK_STR(got.s, "{\"text\":\"a\"}|{\"text\":\"bcd\"}|");
  free(got.s);
  got = (struct sbuf){0};
  CHECK_INT(journal_pieces(data, "0,4,0", collect, &got), 3);
  CHECK_STR(got.s, "{\"text\":\"\"}|{\"text\":\"abcd\"}|{\"text\":\"\"}|");
  free(got.s);
  got = (struct sbuf){0};
  /* a cut inside an escape ("\\n" is one character) */
  CHECK_INT(journal_pieces("{\"text\":\"a\\nb\"}", "2,2", collect, &got), 1);
  free(got.s);
  got = (struct sbuf){0};
  CHECK_INT(journal_pieces("{\"text\":\"a\\nb\"}", "3,1", collect, &got), 2);
  CHECK_STR(got.s, "{\"text\":\"a\\n\"}|{\"text\":\"b\"}|");
  free(got.s);
  got = (struct sbuf){0};
  /* red team 14, F4: a string that is not one string, cuts inside a UTF-8
   * sequence and inside a \u escape */
  static const char *const whole[][2] = {{"{\"text\":\"ab\",\"x\":\"d\"}", "2,8"},
                                         {"{\"text\":\"\xc3\xa9x\"}", "1,2"},
                                         {"{\"text\":\"\\u00e9x\"}", "3,4"},
                                         {"{\"text\":\"\\u00\"}", "1,3"}};
  for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
    got = (struct sbuf){0};
    CHECK_INT(journal_pieces(whole[i][0], whole[i][1], collect, &got), 1);
    CHECK(got.s && !strncmp(got.s, whole[i][0], strlen(whole[i][0])));
    free(got.s);
  }
  got = (struct sbuf){0};
  CHECK_INT(journal_pieces("{\"text\":\"\\u00e9\xc3\xa9x\"}", "6,2,1", collect, &got), 3);
  CHECK_STR(got.s, "{\"text\":\"\\u00e9\"}|{\"text\":\"\xc3\xa9\"}|{\"text\":\"x\"}|");
  free(got.s);
  got = (struct sbuf){0};
  CHECK_INT(journal_pieces(data, NULL, collect, &got), 1);
  CHECK(got.s && !strncmp(got.s, data, strlen(data)));
  CHECK_STR(got.s ? got.s + strlen(data) : "", "|");
  free(got.s);
}

/* Streamed pieces that wait together are one row (journal.c, piece_head):
 * a text_delta's texts and a tool_args_delta's pieces of one index join,
 * escapes and all, into the object the whole stream would give; the seqs
 * stay without a gap. What must not join: another run's piece between
 * them, another index, a piece of another shape (a script's event with
 * members of its own, whose text a join would corrupt), a piece after a
 * commit, and a row past JOURNAL_PIECES_MAX. */
static void test_pieces_join(void) {
  struct event_sink s;
  struct journal *j = fixture_journal(&s);
  if (!j) return;
  const char *run = "r-join";
  emit(&s, run, "run_start", "{\"kind\":\"ask\"}");
  emit(&s, "r-other", "run_start", "{\"kind\":\"ask\"}");
  emit(&s, run, "text_delta", "{\"text\":\"Say \\\"hi\\\"\"}");
  emit(&s, run, "text_delta", "{\"text\":\" \\\\ caf\u00e9\\n\"}");
  emit(&s, run, "text_delta", "{\"text\":\"\"}");
  emit(&s, run, "text_delta", "{\"text\":\"end\"}");
  emit(&s, run, "tool_call_start", "{\"index\":0,\"id\":\"c0\",\"name\":\"echo\"}");
  emit(&s, run, "tool_args_delta", "{\"index\":0,\"delta\":\"{\\\"a\"}");
  emit(&s, run, "tool_args_delta", "{\"index\":0,\"delta\":\"\\\": 1}\"}");
  emit(&s, run, "tool_args_delta", "{\"index\":1,\"delta\":\"[\"}");
  emit(&s, run, "tool_args_delta", "{\"index\":1,\"delta\":\"]\"}");
  emit(&s, run, "tool_args_delta", "{\"index\":10,\"delta\":\"x\"}");
  emit(&s, run, "tool_args_delta", "{\"index\":0,\"delta\":\" \"}");
  /* other shapes: each its own row, as emitted */
  emit(&s, run, "text_delta", "{\"text\":\"a\",\"b\":\"c\"}");
  emit(&s, run, "text_delta", "{\"text\":\"d\"}");
  emit(&s, run, "text_delta", "{\"b\":\"c\",\"text\":\"e\"}");
  emit(&s, run, "text_delta", "{\"text\":\"f\",\"b\":\"g\"}");
  emit(&s, run, "text_delta", NULL);
  emit(&s, run, "text_delta", "{\"text\":\"h\"}");
  /* another run's piece between two of this one's */
  emit(&s, run, "text_delta", "{\"text\":\"i\"}");
  emit(&s, "r-other", "text_delta", "{\"text\":\"o\"}");
  emit(&s, run, "text_delta", "{\"text\":\"j\"}");
  emit(&s, run, "turn_complete", "{}");
  emit(&s, run, "text_delta", "{\"text\":\"k\"}");
  journal_flush(j);
  emit(&s, run, "text_delta", "{\"text\":\"l\"}");
  /* 2,000 pieces of 10 bytes: rows of at most JOURNAL_PIECES_MAX (8 KiB) */
  for (int i = 0; i < 2000; i++) emit(&s, "r-long", "text_delta", "{\"text\":\"0123456789\"}");
  emit(&s, run, "run_end", "{\"status\":\"ok\"}");
  journal_flush(j);
  struct store *st = NULL;
  struct err e = {0};
  CHECK_INT(store_open(dir, &st, &e), 0);
  if (st) {
    struct sbuf b = {0};
    sqlite3_stmt *q = NULL;
    CHECK_INT(rows_of(st, run, "text_delta", &b), 10);
    CHECK_STR(b.s, "{\"text\":\"Say \\\"hi\\\" \\\\ caf\xc3\xa9\\nend\"}"
                   "|{\"text\":\"a\",\"b\":\"c\"}|{\"text\":\"d\"}|{\"b\":\"c\",\"text\":\"e\"}"
                   "|{\"text\":\"f\",\"b\":\"g\"}|-|{\"text\":\"hi\"}|{\"text\":\"j\"}"
                   "|{\"text\":\"k\"}|{\"text\":\"l\"}");
    /* the joined text parses to the pieces' texts, one after another */
    char *bar = b.s ? strchr(b.s, '|') : NULL;
    if (bar) *bar = 0;
    cJSON *t = b.s ? cJSON_Parse(b.s) : NULL;
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(t, "text")),
              "Say \"hi\" \\ caf\xc3\xa9\nend");
    cJSON_Delete(t);
    CHECK_INT(rows_of(st, run, "tool_args_delta", &b), 4);
    CHECK_STR(b.s, "{\"index\":0,\"delta\":\"{\\\"a\\\": 1}\"}|{\"index\":1,\"delta\":\"[]\"}"
                   "|{\"index\":10,\"delta\":\"x\"}|{\"index\":0,\"delta\":\" \"}");
    CHECK_INT(rows_of(st, "r-other", "text_delta", &b), 1);
    /* each joined row splits back into its pieces as they came */
    CHECK_INT(store_prepare(st, "SELECT group_concat(coalesce(pieces, '-'), '|') FROM "
                            "(SELECT pieces FROM events WHERE run_id = 'r-join' AND "
                            "type IN ('text_delta', 'tool_args_delta') ORDER BY seq)", &q, &e),
              0);
    if (q && sqlite3_step(q) == SQLITE_ROW)
      CHECK_STR((const char *)sqlite3_column_text(q, 0), "10,11,0,3|4,6|1,1|-|-|-|-|-|-|-|1,1|-|-|-");
    sqlite3_finalize(q);
    CHECK_INT(store_prepare(st, "SELECT data, pieces FROM events WHERE run_id = 'r-join' AND "
                            "pieces IS NOT NULL ORDER BY seq", &q, &e),
              0);
    struct sbuf got = {0};
    while (q && sqlite3_step(q) == SQLITE_ROW)
      CHECK(journal_pieces((const char *)sqlite3_column_text(q, 0),
                           (const char *)sqlite3_column_text(q, 1), collect, &got) >= 2);
    sqlite3_finalize(q);
    CHECK_STR(got.s, "{\"text\":\"Say \\\"hi\\\"\"}|{\"text\":\" \\\\ caf\xc3\xa9\\n\"}"
                     "|{\"text\":\"\"}|{\"text\":\"end\"}|{\"index\":0,\"delta\":\"{\\\"a\"}"
                     "|{\"index\":0,\"delta\":\"\\\": 1}\"}|{\"index\":1,\"delta\":\"[\"}"
                     "|{\"index\":1,\"delta\":\"]\"}|{\"text\":\"h\"}|{\"text\":\"i\"}|");
    free(got.s);
    /* seq 1..n without a gap */
    CHECK_INT(rows_of(st, run, "run_end", &b), 1);
    q = NULL;
    CHECK_INT(store_prepare(st, "SELECT count(*), max(seq) FROM events WHERE run_id = 'r-join'",
                            &q, &e),
              0);
    if (q && sqlite3_step(q) == SQLITE_ROW) {
      CHECK_INT(sqlite3_column_int(q, 0), 18);
      CHECK_INT(sqlite3_column_int(q, 1), 18);
    }
    sqlite3_finalize(q);
    /* the long stream: every row at most 8 KiB, valid, and all 20,000 bytes */
    CHECK(store_prepare(st, "SELECT data FROM events WHERE run_id = 'r-long' ORDER BY seq", &q,
                        &e) == 0);
    size_t total = 0;
    int rows = 0, bad = 0;
    while (q && sqlite3_step(q) == SQLITE_ROW) {
      const char *d = (const char *)sqlite3_column_text(q, 0);
      if (strlen(d) > 8192) bad++;
      cJSON *x = cJSON_Parse(d);
      const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(x, "text"));
      if (!v || strspn(v, "0123456789") != strlen(v)) bad++;
      total += v ? strlen(v) : 0;
      cJSON_Delete(x);
      rows++;
    }
    sqlite3_finalize(q);
    CHECK_INT(bad, 0);
    CHECK_INT(total, 20000);
    /* 2,000 rows before; now at least 3 (8 KiB each), and a drain at every
     * 256 pieces (the batch) or 0.5 s cuts more: ~8-16, timing-dependent */
    CHECK(rows >= 3 && rows <= 40);
    free(b.s);
    store_close(st);
  }
  journal_close(j);
}

/* What decides a join now that the type is compared once (journal.c,
 * journal_event's kind): a piece's shape must be its type's (a text_delta's
 * text under tool_args_delta, and the other way round, stays a row of its
 * own, and two such rows never join), and a run id that merely starts with
 * another's, or is its start, is another run. Pins the rows and the pieces
 * column exactly. */
static void test_pieces_type_and_run(void) {
  struct event_sink s;
  struct journal *j = fixture_journal(&s);
  if (!j) return;
  emit(&s, "r-t", "run_start", "{\"kind\":\"ask\"}");
  emit(&s, "r-tx", "run_start", "{\"kind\":\"ask\"}");
  emit(&s, "r-t", "text_delta", "{\"text\":\"a\"}");
  emit(&s, "r-t", "tool_args_delta", "{\"text\":\"b\"}");
  emit(&s, "r-t", "tool_args_delta", "{\"text\":\"c\"}");
  emit(&s, "r-t", "text_delta", "{\"text\":\"d\"}");
  emit(&s, "r-t", "tool_args_delta", "{\"index\":0,\"delta\":\"e\"}");
  emit(&s, "r-t", "text_delta", "{\"index\":0,\"delta\":\"f\"}");
  emit(&s, "r-t", "text_delta", "{\"index\":0,\"delta\":\"g\"}");
  emit(&s, "r-t", "tool_args_delta", "{\"index\":0,\"delta\":\"h\"}");
  emit(&s, "r-t", "tool_args_delta", "{\"index\":0,\"delta\":\"i\"}");
  emit(&s, "r-t", "text_delta", "{\"text\":\"j\"}");
  emit(&s, "r-tx", "text_delta", "{\"text\":\"k\"}");
  emit(&s, "r-t", "text_delta", "{\"text\":\"l\"}");
  emit(&s, "r-tx", "text_delta", "{\"text\":\"m\"}");
  emit(&s, "r-tx", "text_delta", "{\"text\":\"n\"}");
  emit(&s, "r-t", "run_end", "{\"status\":\"ok\"}");
  emit(&s, "r-tx", "run_end", "{\"status\":\"ok\"}");
  journal_flush(j);
  struct store *st = NULL;
  struct err e = {0};
  CHECK_INT(store_open(dir, &st, &e), 0);
  if (st) {
    sqlite3_stmt *q = NULL;
    CHECK_INT(store_prepare(st, "SELECT group_concat(run_id || ' ' || seq || ' ' || type || ' ' "
                            "|| data || ' ' || coalesce(pieces, '-'), '|') FROM (SELECT * FROM "
                            "events WHERE type NOT IN ('run_start', 'run_end') ORDER BY run_id, "
                            "seq)", &q, &e),
              0);
    if (q && sqlite3_step(q) == SQLITE_ROW)
      CHECK_STR((const char *)sqlite3_column_text(q, 0),
                "r-t 2 text_delta {\"text\":\"a\"} -"
                "|r-t 3 tool_args_delta {\"text\":\"b\"} -"
                "|r-t 4 tool_args_delta {\"text\":\"c\"} -"
                "|r-t 5 text_delta {\"text\":\"d\"} -"
                "|r-t 6 tool_args_delta {\"index\":0,\"delta\":\"e\"} -"
                "|r-t 7 text_delta {\"index\":0,\"delta\":\"f\"} -"
                "|r-t 8 text_delta {\"index\":0,\"delta\":\"g\"} -"
                "|r-t 9 tool_args_delta {\"index\":0,\"delta\":\"hi\"} 1,1"
                "|r-t 10 text_delta {\"text\":\"j\"} -"
                "|r-t 11 text_delta {\"text\":\"l\"} -"
                "|r-tx 2 text_delta {\"text\":\"k\"} -"
                "|r-tx 3 text_delta {\"text\":\"mn\"} 1,1");
    sqlite3_finalize(q);
    store_close(st);
  }
  journal_close(j);
}

/* A run id the row cannot hold whole (40 bytes or more: call_ctx's ids are
 * at most 39) is refused, never stored cut: cut, it is another run's id
 * when that run's id is the cut, and its rows would land under that run,
 * clash on (run_id, seq) and its run_end set that run's status (review 17
 * F1). The 39-byte run keeps exactly its own rows and status. */
static void test_long_run_id_refused(void) {
  struct event_sink s;
  struct journal *j = fixture_journal(&s);
  if (!j) return;
  char a[64], b[80];
  memset(a, 'a', 39), a[39] = 0;
  snprintf(b, sizeof b, "%sX", a); /* 40 bytes: a is its first 39 */
  emit(&s, a, "run_start", "{\"kind\":\"ask\"}");
  emit(&s, a, "turn_complete", "{\"who\":\"a\"}");
  emit(&s, b, "run_start", "{\"kind\":\"ask\"}");
  emit(&s, b, "turn_complete", "{\"who\":\"b1\"}");
  emit(&s, b, "text_delta", "{\"text\":\"b2\"}");
  emit(&s, a, "run_end", "{\"status\":\"ok\"}");
  emit(&s, b, "run_end", "{\"status\":\"error\",\"error\":\"from b\"}");
  journal_flush(j);
  struct store *st = NULL;
  struct err e = {0};
  CHECK_INT(store_open(dir, &st, &e), 0);
  if (st) {
    sqlite3_stmt *q = NULL;
    CHECK_INT(store_prepare(st, "SELECT group_concat(length(run_id) || ' ' || seq || ' ' || type, "
                            "'|') FROM (SELECT * FROM events WHERE length(run_id) >= 39 ORDER BY "
                            "run_id, seq)", &q, &e),
              0);
    if (q && sqlite3_step(q) == SQLITE_ROW)
      CHECK_STR((const char *)sqlite3_column_text(q, 0),
                "39 1 run_start|39 2 turn_complete|39 3 run_end");
    sqlite3_finalize(q);
    q = NULL;
    CHECK_INT(store_prepare(st, "SELECT group_concat(length(id) || ' ' || status || ' ' || "
                            "coalesce(error, '-'), '|') FROM runs WHERE length(id) >= 39", &q, &e),
              0);
    if (q && sqlite3_step(q) == SQLITE_ROW)
      CHECK_STR((const char *)sqlite3_column_text(q, 0), "39 ok -");
    sqlite3_finalize(q);
    store_close(st);
  }
  journal_close(j);
}

int main(void) {
  if (fixture_start("journal")) return 1;
  test_pieces_type_and_run();
  test_pieces_join();
  test_pieces_bad();
  test_pieces_not_nul_ended();
  test_rows_read_back();
  test_bad_row_costs_only_itself();
  test_every_drain_size();
  test_long_run_id_refused(); /* last: its rows stay in the shared workspace */
  fixture_end();
  return TEST_END();
}
