/* test_writer.c - the store writer (writer.c) and the run journal on it:
 *  - writer_sync is a barrier: what was queued before it is drained when
 *    it returns; a client's due time wakes the thread without a sync;
 *  - fork: a child that journals its own run gets it written (its own
 *    thread and connection), and what the parent had queued is written
 *    once, by the parent (no duplicate row, no constraint error);
 *  - exit() without journal_close still writes what was queued;
 *  - a database locked by another process: the emitting thread does not
 *    wait, the writer reports the same error as before, keeps the rows,
 *    and writes them once the lock goes;
 *  - a kill -9 right after run_start returns: the run's row is there;
 *  - a non-streamed event is committed on its own within the group
 *    window, a streamed piece within half a second.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "journal.h"
#include "journal_fixture.h"
#include "store.h"
#include "test.h"
#include "util.h"
#include "writer.h"

/* --- a fake client ------------------------------------------------------ */

struct fake {
  struct writer_client wc;
  pthread_mutex_t mu;
  int queued, written, drains;
  double due_in; /* <0: everything due at once */
};

static double fake_drain(struct writer_client *c, struct writer *w, int force) {
  struct fake *f = (struct fake *)c;
  (void)w;
  pthread_mutex_lock(&f->mu);
  f->drains++;
  if (force || f->due_in < 0) {
    f->written += f->queued;
    f->queued = 0;
  }
  pthread_mutex_unlock(&f->mu);
  return -1;
}

static void test_barrier_and_due(void) {
  struct writer *w = writer_get(dir);
  struct fake f = {.wc = {.drain = fake_drain}, .due_in = -1};
  pthread_mutex_init(&f.mu, NULL);
  f.wc.lock = &f.mu;
  writer_attach(w, &f.wc);
  pthread_mutex_lock(&f.mu);
  f.queued = 5;
  pthread_mutex_unlock(&f.mu);
  writer_sync(w);
  CHECK_INT(f.written, 5); /* the barrier drained it, due or not */
  pthread_mutex_lock(&f.mu);
  f.queued = 3;
  pthread_mutex_unlock(&f.mu);
  writer_due(w, &f.wc, util_monotonic() + 0.05); /* no sync: the thread wakes by itself */
  int seen = 0;
  for (int i = 0; i < 200 && !seen; i++) {
    pthread_mutex_lock(&f.mu);
    seen = f.written == 8;
    pthread_mutex_unlock(&f.mu);
    if (!seen) util_sleep(0.01);
  }
  CHECK(seen);
  writer_detach(w, &f.wc);
  writer_put(w);
  pthread_mutex_destroy(&f.mu);
}

/* --- the journal on it ---------------------------------------------------- */

static long long q1(const char *sql, const char *arg) {
  struct store *st = NULL;
  struct err e = {0};
  long long n = -1;
  if (store_open(dir, &st, &e)) return -1;
  sqlite3_stmt *q = NULL;
  if (!store_prepare(st, sql, &q, &e)) {
    if (arg) sqlite3_bind_text(q, 1, arg, -1, SQLITE_STATIC);
    if (sqlite3_step(q) == SQLITE_ROW) n = sqlite3_column_int64(q, 0);
  }
  sqlite3_finalize(q);
  store_close(st);
  return n;
}

/* A streamed piece that keeps a row of its own: its member n makes it
 * one the journal does not join to the piece before it (journal.c,
 * piece_head), so these tests count rows, one an event. */
static void own_piece(struct event_sink *s, const char *run, const char *text, int n) {
  char js[96];
  snprintf(js, sizeof js, "{\"text\":\"%s\",\"n\":%d}", text, n);
  emit(s, run, "text_delta", js);
}

/* A run of n streamed pieces and one turn_complete. */
static void some_run(struct event_sink *s, const char *run, int n, int end) {
  emit(s, run, "run_start", "{\"kind\":\"ask\"}");
  for (int i = 0; i < n; i++) own_piece(s, run, "x", i);
  emit(s, run, "turn_complete", "{}");
  if (end) emit(s, run, "run_end", "{\"status\":\"ok\"}");
}

/* Sends stderr to path (NULL: back to where it went before, *saved). */
static void capture_stderr(const char *path, int *saved) {
  fflush(stderr);
  if (!path) {
    dup2(*saved, 2);
    close(*saved);
    return;
  }
  *saved = dup(2);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fd, 2);
  close(fd);
}

static void test_fork(void) {
  struct err e = {0};
  struct event_sink s;
  struct journal *j = fixture_journal(&s);
  if (!j) return;
  char errf[128];
  snprintf(errf, sizeof errf, "%s/fork.err", dir);
  int saved;
  capture_stderr(errf, &saved);
  /* The parent's run: its pieces wait (streamed, not yet due) at the fork. */
  emit(&s, "r-parent", "run_start", "{\"kind\":\"ask\"}");
  for (int i = 0; i < 20; i++) own_piece(&s, "r-parent", "p", i);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20); /* a writer waiting for a thread that is not there fails loudly */
    some_run(&s, "r-child", 7, 1);
    journal_close(j);
    _exit(q1("SELECT count(*) FROM events WHERE run_id = ?", "r-child") == 10 ? 0 : 3);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) fprintf(stderr, "child status %#x sig %d\n", status, WIFSIGNALED(status) ? WTERMSIG(status) : -1);
  CHECK(WIFEXITED(status));
  CHECK_INT(WEXITSTATUS(status), 0);
  emit(&s, "r-parent", "turn_complete", "{}");
  emit(&s, "r-parent", "run_end", "{\"status\":\"ok\"}");
  journal_close(j);
  capture_stderr(NULL, &saved);
  CHECK_INT(q1("SELECT count(*) FROM events WHERE run_id = ?", "r-parent"), 23);
  CHECK_INT(q1("SELECT count(DISTINCT seq) FROM events WHERE run_id = ?", "r-parent"), 23);
  CHECK_INT(q1("SELECT count(*) FROM events WHERE run_id = ?", "r-child"), 10);
  CHECK_INT(q1("SELECT count(*) FROM runs WHERE id = ? AND status = 'ok'", "r-child"), 1);
  CHECK_INT(q1("SELECT worker_pid FROM runs WHERE id = ?", "r-child"), pid);
  CHECK_INT(q1("SELECT worker_pid FROM runs WHERE id = ?", "r-parent"), getpid());
  char *log = NULL;
  size_t n = 0;
  CHECK_INT(util_read_file(errf, 1 << 20, &log, &n, &e), 0);
  if (log && n) fprintf(stderr, "stderr of the fork test: %s\n", log);
  CHECK_INT(n, 0); /* no constraint error, nothing "could not be written" */
  free(log);
}

static void test_exit_without_close(void) {
  pid_t pid = fork();
  if (pid == 0) {
    struct journal *j = NULL;
    struct err e = {0};
    if (journal_open(dir, &j, &e)) _exit(2);
    struct event_sink s = {0};
    journal_sink(j, &s);
    some_run(&s, "r-exit", 12, 0); /* no run_end, no close */
    emit(&s, "r-exit", "text_delta", "{\"text\":\"last\"}");
    exit(0);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  CHECK_INT(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0);
  CHECK_INT(q1("SELECT count(*) FROM events WHERE run_id = ?", "r-exit"), 15);
}

static void test_kill_after_run_start(void) {
  int p[2];
  if (pipe(p)) return;
  pid_t pid = fork();
  if (pid == 0) {
    struct journal *j = NULL;
    struct err e = {0};
    if (journal_open(dir, &j, &e)) _exit(2);
    struct event_sink s = {0};
    journal_sink(j, &s);
    emit(&s, "r-killed", "run_start", "{\"kind\":\"ask\"}");
    if (write(p[1], "s", 1) != 1) _exit(2);
    for (;;) pause();
  }
  char c;
  CHECK_INT(read(p[0], &c, 1), 1);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  close(p[0]);
  close(p[1]);
  CHECK_INT(q1("SELECT count(*) FROM runs WHERE id = ?", "r-killed"), 1);
  CHECK_INT(q1("SELECT count(*) FROM events WHERE run_id = ? AND type = 'run_start'", "r-killed"),
            1);
}

/* A non-streamed event is committed within the group window (5 ms) with no
 * sync and no later event to push it: read back through another
 * connection while the journal stays open. */
static void test_group_window(void) {
  struct event_sink s;
  struct journal *j = fixture_journal(&s);
  if (!j) return;
  emit(&s, "r-window", "run_start", "{\"kind\":\"ask\"}");
  emit(&s, "r-window", "tool_result", "{\"ok\":true}");
  double t0 = util_monotonic();
  long long n = 0;
  while ((n = q1("SELECT count(*) FROM events WHERE run_id = ?", "r-window")) < 2 &&
         util_monotonic() - t0 < 1.0)
    util_sleep(0.002);
  CHECK_INT(n, 2);
  /* A streamed piece alone waits (up to half a second), it is not lost. */
  emit(&s, "r-window", "text_delta", "{\"text\":\"x\"}");
  t0 = util_monotonic();
  while ((n = q1("SELECT count(*) FROM events WHERE run_id = ?", "r-window")) < 3 &&
         util_monotonic() - t0 < 3.0)
    util_sleep(0.01);
  CHECK_INT(n, 3);
  journal_close(j);
}

/* Streamed pieces that join into one row still count one each toward the
 * batch (red team 14, F1): the 256th piece makes the queue due at once,
 * as when every piece was a row, rather than half a second after the
 * first. A kill -9 in a fast stream (a local model: thousands of pieces a
 * second) then loses at most a batch of pieces, not half a second of them. */
static void test_pieces_batch(void) {
  struct event_sink s;
  struct journal *j = fixture_journal(&s);
  if (!j) return;
  emit(&s, "r-fast", "run_start", "{\"kind\":\"ask\"}");
  double t0 = util_monotonic();
  for (int i = 0; i < 256; i++) emit(&s, "r-fast", "text_delta", "{\"text\":\"x\"}");
  long long n = 0;
  while ((n = q1("SELECT count(*) FROM events WHERE run_id = ? AND type = 'text_delta'",
                 "r-fast")) < 1 &&
         util_monotonic() - t0 < 3.0)
    util_sleep(0.002);
  double took = util_monotonic() - t0;
  CHECK_INT(n, 1); /* one row: the pieces joined */
  CHECK(took < 0.4);
  if (took >= 0.4) fprintf(stderr, "  256 pieces on record after %.3f s (the age is 0.5 s)\n", took);
  CHECK_INT(q1("SELECT length(data) FROM events WHERE run_id = ? AND type = 'text_delta'",
               "r-fast"),
            (long long)strlen("{\"text\":\"\"}") + 256);
  journal_close(j);
}

static void test_locked(void) {
  struct err e = {0};
  struct event_sink s;
  struct journal *j = fixture_journal(&s);
  if (!j) return;
  emit(&s, "r-locked", "run_start", "{\"kind\":\"ask\"}");
  struct store *other = NULL;
  CHECK_INT(store_open(dir, &other, &e), 0);
  if (!other) return;
  CHECK_INT(store_exec(other, "BEGIN IMMEDIATE", &e), 0); /* another process holds the lock */
  char errf[128];
  snprintf(errf, sizeof errf, "%s/locked.err", dir);
  int saved;
  capture_stderr(errf, &saved);
  double t0 = util_monotonic();
  for (int i = 0; i < 5; i++) emit(&s, "r-locked", "tool_result", "{\"ok\":true}");
  double took = util_monotonic() - t0;
  util_sleep(5.6); /* past busy_timeout (5 s): the writer's attempt failed */
  CHECK_INT(store_exec(other, "COMMIT", &e), 0);
  store_close(other);
  journal_flush(j);
  capture_stderr(NULL, &saved);
  CHECK(took < 0.5); /* the emitting thread never waited for the lock */
  CHECK_INT(q1("SELECT count(*) FROM events WHERE run_id = ?", "r-locked"), 6);
  char *log = NULL;
  size_t n = 0;
  CHECK_INT(util_read_file(errf, 1 << 20, &log, &n, &e), 0);
  CHECK_CONTAINS(log, "luagent: run journal: ");
  CHECK_CONTAINS(log, "database is locked");
  free(log);
  journal_close(j);
}

int main(void) {
  if (fixture_start("writer")) return 1;
  test_barrier_and_due();
  test_fork();
  test_exit_without_close();
  test_kill_after_run_start();
  test_group_window();
  test_pieces_batch();
  test_locked();
  fixture_end();
  return TEST_END();
}
