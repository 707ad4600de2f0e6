/* test_daemon_wire.c - the scheduler <-> worker records (daemon_wire.c),
 * and the scheduler against workers that break the protocol: garbage,
 * a reply for another run, cut-off and lying fields, an oversized frame,
 * death in the middle of a reply, a ctx.state that is not JSON, a reply
 * that fills the pipe then death with a run queued behind, a start time
 * that lies, a deadline passed with the reply unread, death before a
 * queued job was read whole. Each run
 * must be journaled crashed with a message that says what was wrong, the
 * worker replaced, and the next run (a well-behaved worker) recorded ok.
 * Also: the locks' directory removed while a pass holds it open.
 * The workers are a Python script the scheduler execs in place of
 * luagent (d->exe), told what to do by $FAKE_MODE. */
#define _GNU_SOURCE
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "autolock.h"
#include "daemon_impl.h"
#include "automation.h"
#include "json.h"
#include "test.h"

static char ws[] = "/tmp/luagent-test-wire.XXXXXX";

/* ------------------------------------------------------------ records */

static void test_records(void) {
  struct sbuf b = {0};
  daemon__rec_begin(&b, 'R');
  daemon__rec_str(&b, REC_RUN_ID, "r1");
  daemon__rec_num(&b, REC_TOOL_CALLS, 3);
  daemon__rec_put(&b, REC_TAINTED, "", 0);
  daemon__rec_put(&b, REC_RESULT, "a\0b", 3);
  CHECK_INT(daemon__rec_end(&b), 0);
  size_t off = 0;
  const char *p;
  size_t n;
  CHECK_INT(daemon__frame_next(&b, &off, &p, &n), 1);
  CHECK_INT((int)off, (int)b.len);
  struct daemon_rec r;
  char why[200];
  CHECK_INT(daemon__rec_parse(p, n, 'R', &r, why, sizeof why), 0);
  CHECK_STR(daemon__rec_text(&r, REC_RUN_ID), "r1");
  double v = 0;
  CHECK_INT(daemon__rec_number(&r, REC_TOOL_CALLS, &v), 0);
  CHECK(v == 3);
  CHECK(r.have & (1u << REC_TAINTED));
  CHECK(daemon__rec_text(&r, REC_RESULT) == NULL); /* a NUL inside: no C string */
  CHECK(daemon__rec_number(&r, REC_RUN_ID, &v) < 0); /* not 8 bytes */
  CHECK(daemon__rec_text(&r, REC_ERROR) == NULL);    /* absent */
  CHECK(daemon__rec_parse(p, n, 'J', &r, why, sizeof why) < 0);
  CHECK(strstr(why, "not a job record"));

  /* every cut of the record is refused, never read past */
  for (size_t cut = 0; cut < n; cut++) {
    char *c = malloc(cut ? cut : 1);
    memcpy(c, p, cut);
    int rc = daemon__rec_parse(c, cut, 'R', &r, why, sizeof why);
    /* a cut exactly between two fields is a shorter, valid record */
    if (rc == 0) CHECK(cut == 1 || p[cut - 1] == 0);
    free(c);
  }
  struct {
    const char *bytes;
    size_t n;
    const char *why;
  } bad[] = {
      {"R\x01\x05\0\0\0r1\0", 9, "claims 5 bytes"},
      {"R\x01\x02\0\0\0r1X", 9, "not terminated"},
      {"R\x01\x02\0\0\0r1\0\x01\x02\0\0\0r2\0", 17, "appears twice"},
      {"R\x63\x00\0\0\0\0", 7, "unknown field 99"},
      {"R\x00\x00\0\0\0\0", 7, "unknown field 0"},
      {"R\x01\x02\0", 4, "cut off"},
      {"R\x01\xff\xff\xff\xff", 6, "claims 4294967295 bytes"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    why[0] = 0;
    CHECK(daemon__rec_parse(bad[i].bytes, bad[i].n, 'R', &r, why, sizeof why) < 0);
    if (!strstr(why, bad[i].why)) {
      fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, why, bad[i].why);
      CHECK(0);
    }
  }

  /* frames: one announcing more than MAX_FRAME is refused at its header */
  struct sbuf f = {0};
  sbuf_append(&f, "\xff\xff\xff\x7f", 4);
  off = 0;
  CHECK_INT(daemon__frame_next(&f, &off, &p, &n), -1);
  f.len = 0;
  sbuf_append(&f, "\x05\0\0\0abc", 7); /* not all there yet */
  off = 0;
  CHECK_INT(daemon__frame_next(&f, &off, &p, &n), 0);
  sbuf_free(&f);
  sbuf_free(&b);
}

/* daemon__trigger_text prints exactly what json_print does. */
static void test_trigger_text(void) {
  srand(7);
  const char *names[] = {"every 1s", "cron 0 7 * * 1-5 (Europe/Paris)", "a \"q\"", "\xc3\xa9t\xc3\xa9",
                         "tab\there", ""};
  for (int i = 0; i < 20000; i++) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "kind", i % 3 ? "every" : "cron");
    cJSON_AddStringToObject(t, "name", names[i % 6]);
    double slot;
    switch (i % 7) {
      case 5: slot = 1764600000 + (rand() % 10000000) / 1024.0; break; /* decimal ties */
      case 6: slot = 3020379868.4101562 + (rand() % 1000); break;
      case 0: slot = 1764600000 + (rand() % 100000); break;                   /* whole */
      case 1: slot = 1764600000 + (rand() % 100000) + (rand() % 1000000) / 1e6; break;
      case 2: slot = 1764600000 + (double)rand() / RAND_MAX; break;            /* any double */
      case 3: slot = (rand() % 1000) / 7.0; break;                             /* small */
      default: slot = 1764600000.5 + (rand() % 1000) * 0.1; break;
    }
    cJSON_AddNumberToObject(t, "slot", slot);
    if (i % 11 == 0) cJSON_AddTrueToObject(t, "tainted"); /* another shape: json_print */
    char *a = daemon__trigger_text(t), *b = json_print(t, 0);
    if (strcmp(a, b)) {
      fprintf(stderr, "slot %.17g: '%s' != '%s'\n", slot, a, b);
      CHECK(0);
    }
    cJSON *back = json_parse_str(a, 0, NULL);
    CHECK(back && cJSON_GetObjectItem(back, "slot")->valuedouble == slot);
    cJSON_Delete(back);
    free(a);
    free(b);
    cJSON_Delete(t);
  }
}

/* ------------------------------------------------- hostile workers */

static const char *fake_worker =
    "#!/usr/bin/env python3\n"
    "import os, signal, struct, sys, time\n"
    "signal.signal(signal.SIGPIPE, signal.SIG_DFL)\n"
    "mode = os.environ.get('FAKE_MODE', 'ok')\n"
    "def rd(n):\n"
    "    b = b''\n"
    "    while len(b) < n:\n"
    "        c = os.read(3, n - len(b))\n"
    "        if not c: sys.exit(0)\n"
    "        b += c\n"
    "    return b\n"
    "def field(tag, raw): return bytes([tag]) + struct.pack('<I', len(raw)) + raw + b'\\0'\n"
    "def send(p): os.write(5, struct.pack('<I', len(p)) + p)\n"
    "jobs = 0\n"
    "while True:\n"
    "    (n,) = struct.unpack('<I', rd(4))\n"
    "    job = rd(n)\n"
    "    i, run_id = 1, b''\n"
    "    while i < len(job):\n"
    "        (ln,) = struct.unpack('<I', job[i + 1:i + 5])\n"
    "        if job[i] == 1: run_id = job[i + 5:i + 5 + ln]\n"
    "        i += 5 + ln + 1\n"
    "    ok = b'R' + field(1, run_id) + field(15, b'ok')\n"
    "    jobs += 1\n"
    "    if 'FAKE_LOG' in os.environ:\n"
    "        with open(os.environ['FAKE_LOG'], 'ab') as log: log.write(run_id + b'\\n')\n"
    "    if mode == 'ok': send(ok + field(9, b'{\"n\":1}') + field(19, struct.pack('<d', 2)))\n"
    "    elif mode == 'garbage': send(b'\\x99garbage that is no record')\n"
    "    elif mode == 'other_run': send(b'R' + field(1, b'r-not-this-one') + field(15, b'ok'))\n"
    "    elif mode == 'lying_field': send(b'R' + field(1, run_id) + b'\\x0f\\xff\\0\\0\\0ok\\0')\n"
    "    elif mode == 'oversized': os.write(5, struct.pack('<I', 0x7fffffff) + b'R')\n"
    "    elif mode == 'dies_mid_reply':\n"
    "        p = ok + field(16, b'x' * 100)\n"
    "        os.write(5, struct.pack('<I', len(p)) + p[:20]); sys.exit(3)\n"
    "    elif mode == 'bad_state': send(ok + field(9, b'{not json'))\n"
    "    elif mode == 'nul_in_text': send(ok + field(16, b'a\\0b'))\n"
    "    elif mode == 'bad_status': send(b'R' + field(1, run_id) + field(15, b'great'))\n"
    "    elif mode == 'bad_count': send(ok + field(19, struct.pack('<d', -1)))\n"
    "    elif mode == 'event_garbage': send(b'{\"run_id\": \"' + run_id + b'\", \"ev\": ')\n"
    "    elif mode == 'twice': send(ok); send(ok)\n"
    "    elif mode == 'bad_started': send(ok + field(20, b'soon'))\n"
    /* says when each job began (CLOCK_MONOTONIC, as the worker does),
     * or for the second, $FAKE_STARTED; replies to that one 0.2 s later */
    "    elif mode == 'stamps':\n"
    "        began = time.monotonic()\n"
    "        if jobs > 1:\n"
    "            time.sleep(float(os.environ.get('FAKE_SLEEP', '0.2')))\n"
    "            began = float(os.environ.get('FAKE_STARTED', began))\n"
    "        send(ok + (b'' if 'FAKE_NOSTAMP' in os.environ else field(20, struct.pack('<d', began))))\n"
    "    elif mode == 'hang': time.sleep(60)\n"
    "    elif mode == 'reply_then_exit': send(ok); sys.exit(5)\n"
    /* its first reply fills the reply pipe to the byte (64 KiB, a frame
     * of 65,532), then it dies in the run queued behind */
    "    elif mode == 'full_pipe_then_die':\n"
    "        if jobs > 1: sys.exit(4)\n"
    "        base = ok + field(9, b'{\"p\":\"\"}')\n"
    "        send(ok + field(9, b'{\"p\":\"' + b'x' * (65532 - len(base)) + b'\"}'))\n";

static struct run *run_on_pool(struct daemon *d, struct entry *ent);

/* The workers started from now on act as mode says. The mode is read
 * when a worker starts: the idle ones are retired. */
static void set_mode(struct daemon *d, const char *mode) {
  for (struct worker *w = d->workers; w; w = w->next)
    if (!w->run) {
      daemon__close_worker_fd(w);
      w->killed = 1;
    }
  for (int i = 0; i < 500 && d->workers; i++) {
    daemon__reap(d);
    if (d->workers) util_sleep(0.01);
  }
  CHECK(d->workers == NULL);
  setenv("FAKE_MODE", mode, 1);
}

/* One run of automation t against a worker in FAKE_MODE mode; returns
 * the finished run (still linked in d->runs). */
static struct run *finish_on_pool(struct daemon *d, struct run *r);
static struct run *run_with(struct daemon *d, struct entry *ent, const char *mode) {
  set_mode(d, mode);
  return run_on_pool(d, ent);
}

/* One run of ent on the workers there are (or new ones); returns it
 * finished (still linked in d->runs). */
static struct run *run_on_pool(struct daemon *d, struct entry *ent) {
  struct run *r = daemon__new_run(d, ent, daemon__make_trigger(ent, "manual", 0), NULL);
  daemon__start_pending(d);
  return finish_on_pool(d, r);
}

/* r, started or pending, driven until it finished (or 15 s passed). */
static struct run *finish_on_pool(struct daemon *d, struct run *r) {
  double until = util_monotonic() + 15;
  while (!r->finished && util_monotonic() < until) {
    struct pollfd pf[8];
    struct worker *pw[8];
    int n = 0;
    for (struct worker *w = d->workers; w && n < 8; w = w->next)
      if (w->fd >= 0) pw[n] = w, pf[n++] = (struct pollfd){.fd = w->fd, .events = POLLIN};
    poll(pf, (nfds_t)n, 50);
    for (int i = 0; i < n; i++)
      if (pf[i].revents && pw[i]->fd >= 0) daemon__read_worker(d, pw[i]);
    daemon__reap(d);
    daemon__start_pending(d);
  }
  daemon__tx_commit(d);
  return r;
}

static char *db_text(struct daemon *d, const char *sql, const char *arg) {
  sqlite3_stmt *s;
  struct err e;
  char *out = NULL;
  if (store_prepare(d->st, sql, &s, &e)) return NULL;
  sqlite3_bind_text(s, 1, arg, -1, SQLITE_TRANSIENT);
  if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
    out = xstrdup((const char *)sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
  return out;
}

static void expect_run(struct daemon *d, struct entry *ent, const char *mode, const char *status,
                       const char *error_has) {
  struct run *r = run_with(d, ent, mode);
  if (!r->finished) {
    fprintf(stderr, "mode %s: the run did not finish\n", mode);
    CHECK(0);
  }
  char *st = db_text(d, "SELECT status FROM runs WHERE id = ?", r->id);
  char *er = db_text(d, "SELECT error FROM runs WHERE id = ?", r->id);
  if (!st || strcmp(st, status) || (error_has && (!er || !strstr(er, error_has)))) {
    fprintf(stderr, "mode %s: journaled %s / %s, wanted %s / ...%s...\n", mode, st ? st : "(none)",
            er ? er : "(none)", status, error_has ? error_has : "");
    CHECK(0);
  }
  free(st);
  free(er);
  daemon__unlink_run(d, r);
  daemon__free_run(r);
}

/* Review 19's R2: a worker that fills its reply pipe with the reply to
 * its run (64 KiB to the byte) and dies in the run queued behind it. The
 * scheduler reads the reply and the end of the pipe in one go; the run
 * behind was handed over and may have started, so it is journaled
 * crashed and never run again (it was put back to pending, and ran twice,
 * when the end of the pipe closed the worker before its reply was read). */
/* Automation q (mode parallel), loaded once. */
static struct entry *entry_q(struct daemon *d) {
  struct entry *ent = daemon__find_entry(d, "q");
  if (ent) return ent;
  char p[4300];
  snprintf(p, sizeof p, "%s/automations/q.lua", d->ws);
  FILE *f = fopen(p, "w");
  CHECK(f);
  if (!f) return NULL;
  fputs("return { mode = 'parallel', max = 4, run = function(ctx) end }\n", f);
  fclose(f);
  daemon__load_one(d, "q.lua", 0);
  ent = daemon__find_entry(d, "q");
  CHECK(ent && ent->a);
  return ent && ent->a ? ent : NULL;
}

/* Two runs of q on one worker in mode: the second queued behind the
 * first, as the daemon queues short runs (not a one-shot scheduler),
 * both jobs wholly sent when flush. Returns the worker, NULL (a failed
 * check) when it did not go so. */
static struct worker *queue_two(struct daemon *d, const char *mode, struct run *r[2], int flush) {
  struct entry *ent = entry_q(d);
  if (!ent) return NULL;
  set_mode(d, mode);
  d->oneshot = 0;
  d->o.max_workers = 1;
  d->burst = 1;
  ent->last_s = 0.001; /* its runs are short */
  for (int i = 0; i < 2; i++)
    r[i] = daemon__new_run(d, ent, daemon__make_trigger(ent, "manual", 0), NULL);
  daemon__start_pending(d);
  struct worker *w = r[0]->w;
  CHECK(w && r[1]->w == w && r[1]->queued);
  if (!w || r[1]->w != w) return NULL;
  /* all of both jobs in the pipe (q's state may be more than it takes at once) */
  for (int i = 0; flush && i < 500 && w->out_sent < w->out_ready; i++) {
    daemon__send_more(d, w);
    if (w->out_sent < w->out_ready) util_sleep(0.01);
  }
  CHECK(!flush || w->out_ready == 0);
  return w;
}

/* Back to the one-shot scheduler of the other tests. */
static void unqueue(struct daemon *d) {
  d->oneshot = 1;
  d->o.max_workers = 2;
}

/* The daemon's loop, as run_on_pool has it and with what a job pipe
 * could not take at once (q's state is 64 KiB after test_reply_then_exit),
 * until r's runs are finished or for at most secs seconds (at least secs,
 * with all). */
static void pump(struct daemon *d, struct run *r[2], double secs, int all) {
  double until = util_monotonic() + secs;
  while (util_monotonic() < until && (all || !r[0]->finished || !r[1]->finished)) {
    daemon__start_pending(d);
    for (struct worker *x = d->workers; x; x = x->next)
      if (x->out_sent < x->out_ready) daemon__send_more(d, x);
    for (struct worker *x = d->workers; x; x = x->next)
      if (x->fd >= 0) daemon__read_worker(d, x);
    daemon__reap(d);
    util_sleep(0.01);
  }
  daemon__tx_commit(d);
}

/* The workers started from now on note each job they read whole in
 * WS/name (FAKE_LOG), its path in out. */
static void job_log(struct daemon *d, const char *name, char *out, size_t n) {
  snprintf(out, n, "%s/%s", d->ws, name);
  unlink(out);
  setenv("FAKE_LOG", out, 1);
}

static int log_lines(const char *path) {
  FILE *f = fopen(path, "r");
  int lines = 0;
  char buf[256];
  while (f && fgets(buf, sizeof buf, f)) lines++;
  if (f) fclose(f);
  return lines;
}

static void free_two(struct daemon *d, struct run *r[2]) {
  for (int k = 0; k < 2; k++) {
    daemon__unlink_run(d, r[k]);
    daemon__free_run(r[k]);
  }
}

static double db_started(struct daemon *d, const struct run *r) {
  char *st = db_text(d, "SELECT started FROM runs WHERE id = ?", r->id);
  double v = st ? atof(st) : 0;
  free(st);
  return v;
}

/* A run queued behind another begins when the worker has replied for
 * that one, which may be long before the scheduler reads the reply: the
 * journal's started is when the worker says it began, kept within the
 * time the worker had the job (not before it was handed out, nor after
 * the scheduler read its reply) whatever the worker says. */
static void test_queued_start(struct daemon *d) {
  const char *says[] = {NULL, "1.0", "1e300"};
  for (int i = 0; i < 3; i++) {
    if (says[i]) setenv("FAKE_STARTED", says[i], 1);
    else unsetenv("FAKE_STARTED");
    struct run *r[2];
    double before = util_now();
    struct worker *w = queue_two(d, "stamps", r, 1);
    if (!w) return;
    util_sleep(0.6); /* both replies written, neither read */
    double read = util_now();
    pump(d, r, 5, 0);
    double after = util_now(), s0 = db_started(d, r[0]), s1 = db_started(d, r[1]);
    CHECK(r[0]->finished && r[1]->finished);
    int ok = s0 >= before && s0 < read;
    if (!says[i]) ok = ok && s1 >= before && s1 < read - 0.3; /* at the reply in front */
    else if (i == 1) ok = ok && s1 >= before && s1 < read;  /* not before it was handed out */
    else ok = ok && s1 >= read && s1 <= after;              /* nor after its reply was read */
    if (!ok) {
      fprintf(stderr, "queued start (%s): started %.3f then %.3f; handed %.3f, read %.3f-%.3f\n",
              says[i] ? says[i] : "as it began", s0, s1, before, read, after);
      CHECK(0);
    }
    free_two(d, r);
  }
  unsetenv("FAKE_STARTED");
  unqueue(d);
}


/* last_s of q after a run queued behind another that sleeps sleep_s, its
 * worker saying when it began (started: what it says instead; !stamp: it
 * says nothing), its replies read lag seconds late. */
static double queued_last_s(struct daemon *d, const char *sleep_s, const char *started, int stamp,
                            double lag) {
  setenv("FAKE_SLEEP", sleep_s, 1);
  if (started) setenv("FAKE_STARTED", started, 1);
  else unsetenv("FAKE_STARTED");
  if (stamp) unsetenv("FAKE_NOSTAMP");
  else setenv("FAKE_NOSTAMP", "1", 1);
  struct run *r[2];
  double v = -2;
  if (queue_two(d, "stamps", r, 1)) {
    if (lag > 0) util_sleep(lag);
    pump(d, r, 5, 0);
    CHECK(r[0]->finished && r[1]->finished);
    v = r[1]->ent->last_s;
    free_two(d, r);
  }
  unsetenv("FAKE_SLEEP");
  unsetenv("FAKE_STARTED");
  unsetenv("FAKE_NOSTAMP");
  unqueue(d);
  return v;
}

/* Whether an automation looks short (last_s, which decides what is queued
 * behind what) is the scheduler's measure, not the worker's start: with
 * the start, a run of no time whose replies were read 50 ms late (a burst)
 * looked slow, and a worker saying it began at the end of time made a
 * 200 ms run look short (review 20: R-A, R-B). */
static void test_short_judgement(struct daemon *d) {
  double a0 = queued_last_s(d, "0", NULL, 0, 0.05), a1 = queued_last_s(d, "0", NULL, 1, 0.05);
  if (a0 < 0 || a1 < 0 || a1 > DAEMON_PIPE_FAST_S) {
    fprintf(stderr, "a run of no time, replies read 50 ms late: last_s %.4f (%.4f unstamped)\n",
            a1, a0);
    CHECK(0);
  }
  double b0 = queued_last_s(d, "0.2", NULL, 0, 0), b1 = queued_last_s(d, "0.2", "1e300", 1, 0);
  if (b0 < 0.15 || b1 < 0.15) {
    fprintf(stderr, "a 200 ms run, its worker saying it began at 1e300: last_s %.4f (%.4f unstamped)\n",
            b1, b0);
    CHECK(0);
  }
}

/* A run queued behind one that is killed goes back to pending; its row,
 * written when it was queued, said `running` for good when the run was
 * then dropped (its automation's file removed; the daemon stopping): now
 * `skipped`, saying why (review 20: R-C). */
static void test_dropped_requeued(struct daemon *d) {
  struct run *r[2];
  struct worker *w = queue_two(d, "hang", r, 0); /* it never reads the second */
  if (w) {
    char id1[40];
    snprintf(id1, sizeof id1, "%s", r[1]->id);
    daemon__kill_run(d, r[0], "timeout", "killed by the test");
    CHECK(r[1]->w == NULL && !r[1]->finished && r[1]->row_in_db);
    daemon__drop_pending(d, r[1]->ent); /* frees r[1] */
    daemon__tx_commit(d);
    char *st = db_text(d, "SELECT status FROM runs WHERE id = ?", id1);
    char *er = db_text(d, "SELECT error FROM runs WHERE id = ?", id1);
    if (!st || strcmp(st, "skipped") || !er || !strstr(er, "dropped before it could start")) {
      fprintf(stderr, "a requeued run, dropped: journaled %s / %s\n", st ? st : "(none)",
              er ? er : "(none)");
      CHECK(0);
    }
    free(st);
    free(er);
    daemon__unlink_run(d, r[0]);
    daemon__free_run(r[0]);
  }
  set_mode(d, "ok");
  unqueue(d);
}

/* A run past its deadline whose reply is in the pipe, unread, and whose
 * worker is on the run queued behind: the kill must not put that one back
 * to pending (it would run twice). The deadline check reads first: the
 * first run is ok, and the second, on its own deadline, is not touched. */
static void test_deadline_reply_waiting(struct daemon *d) {
  char log[4300];
  job_log(d, "jobs-deadline.log", log, sizeof log);
  setenv("FAKE_SLEEP", "2", 1); /* the second job: 2 s */
  struct run *r[2];
  struct worker *w = queue_two(d, "stamps", r, 1);
  if (w) {
    util_sleep(0.4); /* the first reply written, the second job begun */
    r[0]->kill_at = util_monotonic() - 1; /* overdue */
    double wake = 0;
    daemon__check_deadlines(d, &wake);
    CHECK(r[0]->finished && r[0]->status && !strcmp(r[0]->status, "ok"));
    CHECK(!w->killed && w->run == r[1] && !r[1]->finished);
    CHECK(wake > 0); /* the second's deadline */
    pump(d, r, 5, 0);
    CHECK(r[1]->finished && r[1]->status && !strcmp(r[1]->status, "ok"));
    CHECK_INT(log_lines(log), 2); /* each run handed to a worker once */
    free_two(d, r);
  }
  unsetenv("FAKE_SLEEP");
  unsetenv("FAKE_LOG");
  unqueue(d);
}

/* A worker that replies and exits before it has read the job queued
 * behind, which its pipe could not hold whole (q's ctx.state is 64 KiB
 * after test_reply_then_exit): that run never began, so it goes back to
 * pending and runs on another worker, ok; journaled crashed before. */
static void test_unread_job(struct daemon *d) {
  char log[4300];
  job_log(d, "jobs-unread.log", log, sizeof log);
  struct run *r[2];
  struct worker *w = queue_two(d, "reply_then_exit", r, 0);
  if (w) {
    CHECK(w->out_ready > w->out_sent); /* the second job is not all in the pipe */
    pump(d, r, 5, 0);
    char *st1 = db_text(d, "SELECT status FROM runs WHERE id = ?", r[1]->id);
    if (!r[0]->finished || strcmp(r[0]->status, "ok") || !r[1]->finished || !st1 ||
        strcmp(st1, "ok")) {
      fprintf(stderr, "a job never read whole: journaled %s, then %s (%s)\n",
              r[0]->status ? r[0]->status : "-", st1 ? st1 : "(none)",
              r[1]->error ? r[1]->error : "");
      CHECK(0);
    }
    free(st1);
    CHECK_INT(log_lines(log), 2); /* each read whole by a worker once */
    free_two(d, r);
  }
  unsetenv("FAKE_LOG");
  unqueue(d);
}

static void test_reply_then_exit(struct daemon *d) {
  char log[4300];
  job_log(d, "jobs.log", log, sizeof log);
  struct run *r[2];
  struct worker *w = queue_two(d, "full_pipe_then_die", r, 1);
  if (!w) return;
  /* until the worker has replied and died: /proc says zombie */
  char stat[64], buf[256];
  snprintf(stat, sizeof stat, "/proc/%d/stat", (int)w->pid);
  int dead = 0;
  for (int i = 0; i < 1000 && !dead; i++) {
    FILE *sf = fopen(stat, "r");
    if (sf && fgets(buf, sizeof buf, sf)) {
      const char *c = strrchr(buf, ')');
      dead = c && c[1] == ' ' && c[2] == 'Z';
    }
    if (sf) fclose(sf);
    if (!dead) util_sleep(0.01);
  }
  CHECK(dead);
  daemon__read_worker(d, w); /* 65,536 bytes, then the end of the pipe */
  daemon__reap(d);
  pump(d, r, 1.5, 1); /* the daemon goes on: a run put back would start again */
  char *st0 = db_text(d, "SELECT status FROM runs WHERE id = ?", r[0]->id);
  char *st1 = db_text(d, "SELECT status FROM runs WHERE id = ?", r[1]->id);
  char *er1 = db_text(d, "SELECT error FROM runs WHERE id = ?", r[1]->id);
  if (!st0 || strcmp(st0, "ok") || !st1 || strcmp(st1, "crashed") || !er1 ||
      !strstr(er1, "exited with status 4 during the run")) {
    fprintf(stderr, "reply then exit: journaled %s, then %s / %s\n", st0 ? st0 : "(none)",
            st1 ? st1 : "(none)", er1 ? er1 : "(none)");
    CHECK(0);
  }
  free(st0);
  free(st1);
  free(er1);
  /* each run was handed to a worker once */
  FILE *f = fopen(log, "r");
  CHECK(f);
  int seen[2] = {0, 0}, lines = 0;
  while (f && fgets(buf, sizeof buf, f)) {
    buf[strcspn(buf, "\n")] = 0;
    lines++;
    for (int i = 0; i < 2; i++) seen[i] += !strcmp(buf, r[i]->id);
  }
  if (f) fclose(f);
  if (seen[0] != 1 || seen[1] != 1 || lines != 2) {
    fprintf(stderr, "reply then exit: the workers got %d jobs, run 1 %d time(s), run 2 %d\n", lines,
            seen[0], seen[1]);
    CHECK(0);
  }
  unsetenv("FAKE_LOG");
  unqueue(d);
}

/* The locks' directory, opened once per pass (daemon_lock.c, open_lock),
 * removed while a pass holds it: opened (made) again, and the run starts
 * in that same pass (without that, a run of mode single, as t is, was
 * journaled skipped: "cannot open .luagent/locks/t.lock"). */
static void test_lock_dir_removed(struct daemon *d, struct entry *ent) {
  set_mode(d, "ok");
  struct err e;
  d->lock_dir = autolock_dir(d->ws, ent->name, &e); /* as the pass had opened it */
  CHECK(d->lock_dir >= 0);
  char path[4400], cmd[4500];
  snprintf(path, sizeof path, "%.4000s/.luagent/locks", d->ws);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  CHECK(system(cmd) == 0);
  struct run *r = daemon__new_run(d, ent, daemon__make_trigger(ent, "manual", 0), NULL);
  daemon__start_pending(d);
  CHECK(r->w != NULL); /* started now: not held back */
  CHECK(d->lock_retry == 0);
  CHECK_INT(d->lock_dir, -1); /* closed with the pass */
  snprintf(path, sizeof path, "%.4000s/.luagent/locks/%s.lock", d->ws, ent->name);
  struct stat st;
  CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode));
  finish_on_pool(d, r);
  char *status = db_text(d, "SELECT status FROM runs WHERE id = ?", r->id);
  CHECK_STR(status, "ok");
  free(status);
  daemon__unlink_run(d, r);
  daemon__free_run(r);
}

static void test_hostile_workers(void) {
  struct daemon d;
  memset(&d, 0, sizeof d);
  d.lock_fd = d.lock_dir = d.ino = -1;
  d.sigpipe[0] = d.sigpipe[1] = -1;
  d.o.max_workers = 2;
  d.o.kill_grace_s = 2;
  d.o.quiet = 1;
  d.oneshot = 1; /* no schedule: runs are made here */
  CHECK(realpath(ws, d.ws));
  snprintf(d.exe, sizeof d.exe, "%.4000s/fake_worker.py", d.ws);
  FILE *f = fopen(d.exe, "w");
  CHECK(f);
  fputs(fake_worker, f);
  fclose(f);
  chmod(d.exe, 0755);
  char p[4300];
  snprintf(p, sizeof p, "%s/automations", d.ws);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/automations/t.lua", d.ws);
  f = fopen(p, "w");
  CHECK(f);
  fputs("return { run = function(ctx) end }\n", f);
  fclose(f);
  struct err e;
  CHECK_INT(store_open(d.ws, &d.st, &e), 0);
  daemon__load_one(&d, "t.lua", 0);
  struct entry *ent = daemon__find_entry(&d, "t");
  CHECK(ent && ent->a);
  sqlite3_stmt *s;
  CHECK_INT(store_prepare(d.st, "INSERT OR IGNORE INTO automations(name) VALUES ('t')", &s, &e), 0);
  sqlite3_step(s);
  sqlite3_finalize(s);

  expect_run(&d, ent, "ok", "ok", NULL);
  char *state = db_text(&d, "SELECT state FROM automations WHERE name = ?", "t");
  CHECK_STR(state, "{\"n\":1}");
  free(state);
  test_lock_dir_removed(&d, ent);
  /* hostile replies: each run is crashed, says why, and the worker is replaced */
  expect_run(&d, ent, "garbage", "crashed", "malformed reply: not a reply record");
  expect_run(&d, ent, "other_run", "crashed", "a reply for run r-not-this-one, not for its run");
  expect_run(&d, ent, "lying_field", "crashed", "malformed reply: field 15 claims 255 bytes");
  expect_run(&d, ent, "oversized", "crashed", "a frame announcing more than");
  expect_run(&d, ent, "dies_mid_reply", "crashed", "exited with status 3 during the run");
  expect_run(&d, ent, "bad_state", "crashed", "a ctx.state that is not a JSON object");
  expect_run(&d, ent, "nul_in_text", "crashed", "NUL byte");
  expect_run(&d, ent, "bad_status", "crashed", "no status ok, failed or timeout");
  expect_run(&d, ent, "bad_count", "crashed", "tool_calls is not a count");
  expect_run(&d, ent, "event_garbage", "crashed", "an event frame that is not JSON");
  /* a second reply after the first: the first is recorded, the worker replaced */
  expect_run(&d, ent, "twice", "ok", NULL);
  /* when the run began, as the worker says: a time (test_queued_start) */
  expect_run(&d, ent, "bad_started", "crashed", "started is not a time");
  /* the state the hostile runs sent was never saved */
  state = db_text(&d, "SELECT state FROM automations WHERE name = ?", "t");
  CHECK_STR(state, "{\"n\":1}");
  free(state);
  /* and the scheduler goes on: a good worker's run is recorded as before */
  expect_run(&d, ent, "ok", "ok", NULL);

  /* Affinity: a run goes to the idle worker its automation's last run went
   * to (which has its chunk compiled), not to the first idle one: here two
   * newer workers come first in the list. */
  struct run *r1 = run_with(&d, ent, "ok");
  char *pid1 = db_text(&d, "SELECT worker_pid FROM runs WHERE id = ?", r1->id);
  struct worker *w2, *w3;
  CHECK_INT(daemon__spawn_worker(&d, &w2), 0);
  CHECK_INT(daemon__spawn_worker(&d, &w3), 0);
  struct run *r2 = run_on_pool(&d, ent);
  char *pid2 = db_text(&d, "SELECT worker_pid FROM runs WHERE id = ?", r2->id);
  CHECK(pid1 && pid2);
  CHECK_STR(pid2, pid1);
  free(pid1);
  free(pid2);
  test_reply_then_exit(&d);
  test_queued_start(&d);
  test_short_judgement(&d);
  test_dropped_requeued(&d);
  test_deadline_reply_waiting(&d);
  test_unread_job(&d);

  for (struct worker *w = d.workers, *nx; w; w = nx) {
    nx = w->next;
    daemon__close_worker_fd(w);
    kill(w->pid, SIGKILL);
    waitpid(w->pid, NULL, 0);
    sbuf_free(&w->in);
    sbuf_free(&w->out);
    free(w);
  }
  d.workers = NULL;
  for (struct run *r = d.runs, *nx; r; r = nx) {
    nx = r->next;
    daemon__free_run(r);
  }
  daemon__tx_commit(&d);
  for (int i = 0; i < d.nstmts; i++) sqlite3_finalize(d.stmts[i].st);
  for (struct entry *x = d.entries, *nx; x; x = nx) {
    nx = x->next;
    daemon__lock_drop(&d, x); /* its automation's lock (daemon_lock.c) */
    automation_free(x->a);
    free(x->load_error);
    free(x->bad_source);
    free(x->state);
    free(x);
  }
  sbuf_free(&d.job);
  free(d.dirty);
  free(d.unlock);
  free(d.fires);
  store_close(d.st);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (!mkdtemp(ws)) return 1;
  test_records();
  test_trigger_text();
  test_hostile_workers();
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", ws);
  if (system(cmd)) {
  }
  return TEST_END();
}
