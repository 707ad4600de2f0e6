/* daemon.c - see daemon.h.
 *
 * Shape: one single-threaded scheduler process sleeps in poll() until the
 * next due time, a signal (self-pipe), an inotify change (automations/,
 * skills/, luagent.lua, and .luagent/wake, which `luagent emit` touches), or
 * a worker's reply. Runs go to worker processes over a socketpair with
 * length-prefixed JSON frames: the job carries the automation's validated
 * source text, so a broken edit on disk never reaches a worker. Workers are
 * exec'd (never just forked), so no SQLite or Lua state crosses a fork, and
 * they die with the scheduler (PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE
#include "daemon.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>

#include "automation.h"
#include "call.h"
#include "config.h"
#include "events.h"
#include "json.h"
#include "sandbox.h"
#include "security.h"
#include "skills.h"
#include "store.h"
#include "util.h"

#include "daemon_impl.h"


/* ================================================================ framing */

int daemon__write_all(int fd, const char *p, size_t n) {
  double give_up = util_monotonic() + 10;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (util_monotonic() > give_up) return -1;
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        poll(&pf, 1, 100);
        continue;
      }
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int daemon__send_frame(int fd, const char *json) {
  size_t n = strlen(json);
  struct sbuf b = {0};
  unsigned char h[4] = {(unsigned char)n, (unsigned char)(n >> 8), (unsigned char)(n >> 16),
                        (unsigned char)(n >> 24)};
  sbuf_append(&b, (const char *)h, 4);
  sbuf_append(&b, json, n);
  int rc = daemon__write_all(fd, b.s, b.len);
  sbuf_free(&b);
  return rc;
}

/* ================================================================= store */

int daemon_store_open(const char *workspace, struct store **out, struct err *e) {
  return store_open(workspace, out, e);
}

void daemon__lock_path(const char *ws, char *out, size_t n) {
  snprintf(out, n, "%s/.luagent/daemon.lock", ws);
}

int daemon_running(const char *workspace, int *pid) {
  char p[4200];
  daemon__lock_path(workspace, p, sizeof p);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  int running = 0;
  if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
    running = 1;
    if (pid) {
      char buf[32] = {0};
      ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
      *pid = r > 0 ? atoi(buf) : 0;
    }
  }
  close(fd);
  return running;
}

void daemon_wake(const char *workspace) {
  char p[4200];
  snprintf(p, sizeof p, "%s/.luagent/wake", workspace);
  int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) close(fd); /* IN_CLOSE_WRITE wakes the daemon */
}

static int event_name_valid(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n > 127) return 0;
  for (size_t i = 0; i < n; i++)
    if (!(s[i] == '.' || s[i] == '_' || s[i] == '-' || s[i] == ':' || s[i] == '/' ||
          (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
          (s[i] >= '0' && s[i] <= '9')))
      return 0;
  return 1;
}

int daemon__cluster_event_check(const char *name, const char *payload, struct err *e) {
  if (!event_name_valid(name))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "event name '%s' is invalid (1-127 characters of letters, digits, . _ - : /)",
                   name ? name : "");
  if (payload && strlen(payload) > MAX_PAYLOAD)
    return err_set(e, ERR_INVALID, "invalid_args", "event payload is larger than %d bytes",
                   MAX_PAYLOAD);
  return 0;
}

int daemon__queue_event(struct store *st, const char *name, const char *payload, int tainted,
                        long long *id, struct err *e) {
  if (!event_name_valid(name))
    return err_set(e, ERR_INVALID, "invalid_args",
                   "event name '%s' is invalid (1-127 characters of letters, digits, . _ - : /)",
                   name ? name : "");
  if (payload && strlen(payload) > MAX_PAYLOAD)
    return err_set(e, ERR_INVALID, "invalid_args", "event payload is larger than %d bytes",
                   MAX_PAYLOAD);
  sqlite3_stmt *s;
  if (store_prepare(st, "INSERT INTO event_queue(name, payload, created, tainted) VALUES (?,?,?,?)",
                    &s, e))
    return ERR_IO;
  sqlite3_bind_int(s, 4, tainted ? 1 : 0);
  sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
  if (payload)
    sqlite3_bind_text(s, 2, payload, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(s, 2);
  sqlite3_bind_double(s, 3, util_now());
  int rc = sqlite3_step(s);
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) return store_error(st, e, "queue event");
  if (id) *id = sqlite3_last_insert_rowid(store_db(st));
  return 0;
}

int daemon_emit(const char *workspace, const char *name, const char *payload, long long *id,
                struct err *e) {
  if (payload) {
    struct err pe = {0};
    cJSON *j = json_parse_str(payload, JSON_NO_DUPLICATES, &pe);
    if (!j)
      return err_set(e, ERR_INVALID, "invalid_args", "event payload is not valid JSON: %s", pe.msg);
    cJSON_Delete(j);
  }
  /* With a cluster the event goes to its queue, for whichever daemon. */
  struct config *cfg = NULL;
  if (config_load(workspace, &cfg, e)) return ERR_INVALID;
  int crc = 0;
  if (config_get(cfg, "cluster")) {
    crc = daemon__cluster_event_check(name, payload, e);
    if (!crc) crc = daemon__cl_emit(workspace, cfg, name, payload, 0, id, e);
  }
  config_free(cfg);
  if (crc) return crc < 0 ? crc : 0;
  struct store *st;
  if (store_open(workspace, &st, e)) return ERR_IO;
  int rc = daemon__queue_event(st, name, payload, 0, id, e); /* the operator's */
  store_close(st);
  if (!rc) daemon_wake(workspace);
  return rc;
}


void daemon__say(struct daemon *d, const char *fmt, ...) {
  if (d->o.quiet) return;
  char ts[16];
  daemon__clock_hms(ts, sizeof ts);
  struct sbuf b = {0};
  sbuf_printf(&b, "%s ", ts);
  va_list ap;
  va_start(ap, fmt);
  char msg[2048];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* the text carries names and messages from files (a skill's error()):
   * one line, no terminal controls, so it cannot forge daemon lines */
  util_escape_text(&b, msg, strlen(msg), sizeof msg * 2);
  sbuf_puts(&b, "\n");
  if (daemon__write_all(1, b.s, b.len)) {
  }
  sbuf_free(&b);
}

void daemon__complain(const char *fmt, ...) {
  char ts[16], msg[2048];
  daemon__clock_hms(ts, sizeof ts);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  struct sbuf b = {0};
  util_escape_text(&b, msg, strlen(msg), sizeof msg * 2); /* as daemon__say */
  fprintf(stderr, "%s luagent daemon: %s\n", ts, b.s ? b.s : "");
  fflush(stderr);
  sbuf_free(&b);
}

/* ---------------------------------------------------------- db helpers */

/* SQLite rolled the open transaction back by itself: a statement in it
 * failed with a full disk, an I/O error, or RAISE(ROLLBACK) in a trigger
 * (review 21: d->in_tx stayed set, the rows written after went in one by
 * one, and the COMMIT then failed on no transaction, taking those rows
 * for lost). What it held is gone; the jobs that waited for it are taken
 * back at the next commit point (daemon__tx_commit), not here: a run may
 * be halfway through being handed out. */
static void tx_lost(struct daemon *d, const char *why) {
  d->in_tx = 0;
  d->tx_checked = 0;
  d->tx_lost = 1; /* which: every one since the last commit point (daemon__unsend) */
  util_copy(d->journal_why, sizeof d->journal_why, why);
  /* what the entries' caches hold of their rows was rolled back */
  for (struct entry *x = d->entries; x; x = x->next) daemon__state_forget(x);
}

static void tx_gone(struct daemon *d) {
  daemon__complain("state.db: the open transaction was rolled back");
  tx_lost(d, "a statement failed and SQLite rolled its transaction back (the message above)");
}

void daemon__tx(struct daemon *d) {
  if (d->in_tx) {
    if (!sqlite3_get_autocommit(store_db(d->st))) return; /* still open */
    tx_gone(d);
  }
  struct err e;
  if (store_begin(d->st, &e) == 0) {
    d->in_tx = 1;
    d->tx_gen++;
    d->tx_since = util_monotonic();
  } else {
    daemon__complain("%s", e.msg);
  }
}

void daemon__tx_due(struct daemon *d) {
  if (d->in_tx && util_monotonic() - d->tx_since >= DAEMON_TX_MAX_S) daemon__tx_commit(d);
}

void daemon__defer_schedule(struct daemon *d, struct entry *ent) {
  if (d->oneshot || !ent->a || d->cl) return; /* a cluster's advances in its claims */
  daemon__tx(d);
  if (!d->in_tx) {
    daemon__save_schedule(d, ent);
    return;
  }
  if (ent->sched_dirty) return;
  ent->sched_dirty = 1;
  if (d->ndirty == d->cap_dirty)
    d->dirty = xrealloc(d->dirty, (d->cap_dirty = d->cap_dirty ? 2 * d->cap_dirty : 64) *
                                      sizeof *d->dirty);
  d->dirty[d->ndirty++] = ent;
}

void daemon__flush(struct daemon *d) {
  for (size_t i = 0; i < d->ndirty; i++)
    if (d->dirty[i]->sched_dirty) {
      d->dirty[i]->sched_dirty = 0;
      daemon__save_schedule(d, d->dirty[i]);
    }
  d->ndirty = 0;
}

int daemon__tx_commit(struct daemon *d) {
  int gone = d->in_tx && sqlite3_get_autocommit(store_db(d->st));
  unsigned long long before = d->committed_gen; /* the last commit point's */
  if (gone) tx_gone(d);
  if (!d->in_tx && !d->tx_lost) return 0;
  int failed = 0;
  if (d->in_tx) {
    daemon__flush(d);
    struct err e;
    if ((failed = store_commit(d->st, &e) != 0)) {
      daemon__complain("%s", e.msg);
      store_rollback(d->st);
      tx_lost(d, e.msg);
    } else {
      d->committed_gen = d->tx_gen;
      d->in_tx = 0;
      d->tx_checked = 0;
    }
  }
  /* The rows of the runs waiting to be sent are gone with it: they go
   * back (before the locks below, which their runs held). */
  if (d->tx_lost) daemon__unsend(d, before); /* every transaction since, but one committed now */
  d->tx_lost = 0;
  daemon__lock_committed(d); /* the saves are in: their automations may go to others */
  return failed || gone ? -1 : 0;
}

/* A prepared statement for a literal sql, cached for the daemon's life
 * (preparing costs more than running these). Release with daemon__done(). */
sqlite3_stmt *daemon__prep(struct daemon *d, const char *sql) {
  for (int i = 0; i < d->nstmts; i++)
    if (d->stmts[i].sql == sql) return d->stmts[i].st;
  sqlite3_stmt *s = NULL;
  struct err e;
  if (store_prepare(d->st, sql, &s, &e)) {
    daemon__complain("%s", e.msg);
    return NULL;
  }
  if (d->nstmts < (int)(sizeof d->stmts / sizeof d->stmts[0])) {
    d->stmts[d->nstmts].sql = sql;
    d->stmts[d->nstmts++].st = s;
  }
  return s;
}

/* Resets a statement from daemon__prep() (finalizes one that did not fit the cache). */
void daemon__done(struct daemon *d, sqlite3_stmt *s) {
  if (!s) return;
  for (int i = 0; i < d->nstmts; i++)
    if (d->stmts[i].st == s) {
      sqlite3_reset(s);
      sqlite3_clear_bindings(s);
      return;
    }
  sqlite3_finalize(s);
}

int daemon__step_done(struct daemon *d, sqlite3_stmt *s, const char *what) {
  if (!s) return -1;
  int rc = sqlite3_step(s), bad = rc != SQLITE_DONE && rc != SQLITE_ROW;
  if (bad) daemon__complain("state.db: %s: %s", what, sqlite3_errmsg(store_db(d->st)));
  daemon__done(d, s);
  return bad ? -1 : 0;
}

int daemon__step_row(struct daemon *d, sqlite3_stmt *s, int ri, long long *rowid,
                     const char *lookup, const char *key, const char *what) {
  if (!s) return -1;
  sqlite3 *db = store_db(d->st);
  int rc = SQLITE_DONE;
  for (int pass = 0; pass < 2; pass++) {
    sqlite3_bind_int64(s, ri, *rowid);
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE || sqlite3_changes(db) > 0 || pass) break;
    /* no row under that rowid (not known yet, or renumbered): by key */
    sqlite3_stmt *q = daemon__prep(d, lookup);
    if (!q) break;
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    long long found = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int64(q, 0) : 0;
    daemon__done(d, q);
    if (!found) break; /* no such row: sqlite3_changes() says 0 */
    *rowid = found;
  }
  int bad = rc != SQLITE_DONE && rc != SQLITE_ROW;
  if (bad) daemon__complain("state.db: %s: %s", what, sqlite3_errmsg(db));
  daemon__done(d, s);
  return bad ? -1 : 0;
}

void daemon__bind_text_or_null(sqlite3_stmt *s, int i, const char *t) {
  if (t)
    sqlite3_bind_text(s, i, t, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(s, i);
}

static void ensure_row(struct daemon *d, const char *name) {
  daemon__tx(d);
  sqlite3_stmt *s = daemon__prep(d, "INSERT OR IGNORE INTO automations(name) VALUES (?)");
  if (!s) return;
  sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
  daemon__step_done(d, s, "add automation");
}

void daemon__save_schedule(struct daemon *d, struct entry *ent) {
  if (d->oneshot || !ent->a || d->cl) return; /* a cluster's advances in its claims */
  daemon__tx(d);
  sqlite3_stmt *s = daemon__prep(
      d, "UPDATE automations SET next_fire = ?1, trigger_key = ?2 WHERE rowid = ?4 AND name = ?3");
  if (!s) return;
  if (ent->next_fire > 0)
    sqlite3_bind_double(s, 1, ent->next_fire);
  else
    sqlite3_bind_null(s, 1);
  sqlite3_bind_text(s, 2, ent->key, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 3, ent->name, -1, SQLITE_STATIC);
  daemon__step_row(d, s, 4, &ent->rowid, DAEMON_AUTOMATION_ROWID, ent->name, "save schedule");
}

static void save_load_error(struct daemon *d, struct entry *ent) {
  if (d->oneshot) return;
  daemon__tx(d);
  sqlite3_stmt *s = daemon__prep(d, "UPDATE automations SET load_error = ? WHERE name = ?");
  if (!s) return;
  daemon__bind_text_or_null(s, 1, ent->load_error);
  sqlite3_bind_text(s, 2, ent->name, -1, SQLITE_TRANSIENT);
  daemon__step_done(d, s, "save load error");
}

void journal_insert(struct daemon *d, const char *id, const char *name, const cJSON *trigger,
                    const char *status, double started, double finished, const char *error,
                    pid_t pid) {
  char *tj = daemon__trigger_text(trigger);
  daemon__journal_insert_text(d, id, name, tj, status, started, finished, error, pid, 0);
  free(tj);
}

long long daemon__journal_insert_text(struct daemon *d, const char *id, const char *name,
                                      const char *tj, const char *status, double started,
                                      double finished, const char *error, pid_t pid,
                                      long long pid_start) {
  daemon__tx(d);
  sqlite3_stmt *s = daemon__prep(d,
                         "INSERT INTO runs(id, kind, name, trigger, status, started, finished, "
                         "error, worker_pid, proc_start) VALUES (?, 'automation', ?, ?, ?, ?, ?, ?, "
                         "?, ?)");
  if (!s) return 0;
  sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
  if (tj)
    sqlite3_bind_text(s, 3, tj, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(s, 3);
  sqlite3_bind_text(s, 4, status, -1, SQLITE_STATIC);
  sqlite3_bind_double(s, 5, started);
  if (finished > 0)
    sqlite3_bind_double(s, 6, finished);
  else
    sqlite3_bind_null(s, 6);
  daemon__bind_text_or_null(s, 7, error);
  if (pid > 0)
    sqlite3_bind_int64(s, 8, pid);
  else
    sqlite3_bind_null(s, 8);
  if (pid > 0 && pid_start > 0)
    sqlite3_bind_int64(s, 9, pid_start);
  else
    sqlite3_bind_null(s, 9);
  if (daemon__step_done(d, s, "journal insert")) return 0;
  return sqlite3_last_insert_rowid(store_db(d->st));
}

/* ------------------------------------------------- the automations rows */

void daemon__state_forget(struct entry *ent) {
  free(ent->state);
  ent->state = NULL;
  ent->state_known = 0;
}

/* PRAGMA data_version changes when another connection (a manual run, the
 * CLI, a worker's runtime, the console) committed, and never for this
 * one's own commits: while it stays, the rows this scheduler wrote last
 * are what the store holds. */
void daemon__state_check(struct daemon *d) {
  sqlite3_stmt *s = daemon__prep(d, "PRAGMA data_version");
  if (!s) return;
  long long v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
  daemon__done(d, s);
  d->tx_checked = d->in_tx && v != -1;
  if (v == d->data_version && v != -1) return;
  d->data_version = v;
  for (struct entry *x = d->entries; x; x = x->next)
    if (x->state_known) daemon__state_forget(x);
}

void daemon__state_load(struct daemon *d, struct entry *ent) {
  if (ent->state_known) return;
  free(ent->state);
  ent->state = NULL;
  ent->state_tainted = 0;
  ent->last_run = 0;
  ent->last_status[0] = 0;
  sqlite3_stmt *s = daemon__prep(
      d, "SELECT state, last_run, last_status, state_tainted, rowid FROM automations "
         "WHERE name = ?");
  if (!s) return; /* not known: read again next time */
  sqlite3_bind_text(s, 1, ent->name, -1, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    const char *t = (const char *)sqlite3_column_text(s, 0);
    ent->state = t ? xstrdup(t) : NULL;
    ent->state_tainted = sqlite3_column_int(s, 3) != 0; /* ctx.state a tainted run saved */
    ent->rowid = sqlite3_column_int64(s, 4);
    if (sqlite3_column_type(s, 1) != SQLITE_NULL) {
      ent->last_run = sqlite3_column_double(s, 1);
      const char *ls = (const char *)sqlite3_column_text(s, 2);
      snprintf(ent->last_status, sizeof ent->last_status, "%s", ls ? ls : "");
    }
  }
  daemon__done(d, s);
  ent->state_known = rc == SQLITE_ROW || rc == SQLITE_DONE;
}

/* ------------------------------------------------------------- run ids */

void daemon__new_run_id(char out[40]) {
  static unsigned char pool[6 * 256];
  static size_t used = sizeof pool;
  if (used + 6 > sizeof pool) {
    randombytes_buf(pool, sizeof pool);
    used = 0;
  }
  char hex[13];
  util_hex(pool + used, 6, hex);
  sodium_memzero(pool + used, 6); /* each id's bytes are used once */
  used += 6;
  util_run_id_text(out, (unsigned long)util_now(), hex);
}

void journal_skipped(struct daemon *d, struct entry *ent, const cJSON *trigger,
                     const char *why) {
  char id[40];
  daemon__new_run_id(id);
  double now = util_now();
  journal_insert(d, id, ent->name, trigger, "skipped", now, now, why, 0);
  daemon__say(d, "%s: skipped: %s", ent->name, why);
}

/* ------------------------------------------------------------ schedule */

struct entry *daemon__find_entry(struct daemon *d, const char *name) {
  for (struct entry *x = d->entries; x; x = x->next)
    if (!strcmp(x->name, name)) return x;
  return NULL;
}

/* First slot after now on an `every` grid anchored at slot. */
int daemon__cron_missed(const struct automation *a, double nf, double now, double *next) {
  double t = nf;
  int missed = 1;
  *next = 0;
  for (int i = 0; i < 100000; i++) { /* bounded: a cron firing every minute for 69 days */
    double x = automation_next_after(a, t);
    if (x <= 0 || x > now) {
      *next = x;
      break;
    }
    t = x;
    missed++;
  }
  return missed;
}

double daemon__every_after(const struct automation *a, double slot, double now) {
  if (slot > now) return slot;
  double k = floor((now - slot) / a->every_s) + 1;
  return slot + k * a->every_s;
}

static double fresh_next(struct daemon *d, struct entry *ent, double now) {
  const struct automation *a = ent->a;
  (void)d;
  switch (a->trig) {
    case TRIG_EVERY:
      return now; /* a new or re-enabled automation runs at once */
    case TRIG_CRON:
      return automation_next_after(a, now);
    case TRIG_AT:
      return a->at > now ? a->at : (a->catch_up ? now : 0);
    default:
      return 0;
  }
}

cJSON *daemon__make_trigger(const struct entry *ent, const char *kind, double slot) {
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "kind", kind);
  if (!strcmp(kind, "manual"))
    cJSON_AddStringToObject(t, "name", "manual");
  else if (!strcmp(kind, "event"))
    cJSON_AddStringToObject(t, "name", ent->a ? ent->a->event : "");
  else
    cJSON_AddStringToObject(t, "name", ent->a ? ent->a->trigger_text : "");
  if (slot > 0) cJSON_AddNumberToObject(t, "slot", slot);
  return t;
}

struct entry *daemon__event_listener(struct entry *ent, const char *name) {
  for (; ent; ent = ent->next) {
    if (!ent->a || ent->deleted || !ent->enabled || ent->a->trig != TRIG_EVENT) continue;
    if (!name || fnmatch(ent->a->event, name, 0) == 0) return ent;
  }
  return NULL;
}

cJSON *daemon__event_trigger(const struct entry *ent, const char *name, const char *payload,
                             double event_id, int tainted) {
  cJSON *t = daemon__make_trigger(ent, "event", 0);
  cJSON_ReplaceItemInObject(t, "name", cJSON_CreateString(name));
  /* no payload (`luagent emit NAME`): an empty table, so
   * ctx.trigger.payload.x is nil rather than an error */
  cJSON *p = payload ? json_parse_str(payload, 0, NULL) : NULL;
  cJSON_AddItemToObject(t, "payload", p ? p : cJSON_CreateObject());
  cJSON_AddNumberToObject(t, "event_id", event_id);
  if (tainted) cJSON_AddTrueToObject(t, "tainted");
  return t;
}


/* Reads the persisted schedule and decides the next fire; at startup,
 * handles slots missed while the daemon was down (catch_up). */
static void schedule_entry(struct daemon *d, struct entry *ent, int startup) {
  if (d->cl) {
    ensure_row(d, ent->name);
    daemon__cl_schedule(d, ent, startup);
    return;
  }
  double now = util_now();
  const struct automation *a = ent->a;
  char key[256];
  automation_trigger_key(a, key, sizeof key);
  ensure_row(d, ent->name);
  double nf = 0;
  int have_nf = 0, same_key = 0, enabled = a->enabled;
  sqlite3_stmt *s =
      daemon__prep(d, "SELECT next_fire, trigger_key, enabled, rowid FROM automations "
                      "WHERE name = ?");
  if (s) {
    sqlite3_bind_text(s, 1, ent->name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(s) == SQLITE_ROW) {
      have_nf = sqlite3_column_type(s, 0) != SQLITE_NULL;
      nf = sqlite3_column_double(s, 0);
      const char *k = (const char *)sqlite3_column_text(s, 1);
      same_key = k && !strcmp(k, key);
      if (sqlite3_column_type(s, 2) != SQLITE_NULL) enabled = sqlite3_column_int(s, 2);
      ent->rowid = sqlite3_column_int64(s, 3);
    }
    daemon__done(d, s);
  }
  ent->enabled = enabled;
  if (!same_key || (!have_nf && a->trig != TRIG_AT)) {
    ent->next_fire = fresh_next(d, ent, now);
  } else if (!have_nf) {
    ent->next_fire = 0; /* an `at` that already fired */
  } else if (nf <= now && startup && enabled) {
    /* missed while the daemon was down */
    int missed = 0;
    double next = 0;
    if (a->trig == TRIG_EVERY) {
      next = daemon__every_after(a, nf, now);
      missed = (int)fmin(1e9, floor((now - nf) / a->every_s) + 1);
    } else if (a->trig == TRIG_CRON) {
      missed = daemon__cron_missed(a, nf, now, &next);
    } else if (a->trig == TRIG_AT) {
      missed = 1;
      next = 0;
    }
    cJSON *trig = daemon__make_trigger(ent, automation_trig_name(a->trig), nf);
    cJSON_AddNumberToObject(trig, "missed", missed);
    ent->next_fire = next;
    if (a->catch_up) {
      daemon__say(d, "%s: catching up %d missed slot(s) with one run", ent->name, missed);
      daemon__fire(d, ent, trig, NULL);
    } else {
      char why[160];
      snprintf(why, sizeof why, "missed %d slot(s) while the daemon was down (catch_up = false)",
               missed);
      journal_skipped(d, ent, trig, why);
      cJSON_Delete(trig);
    }
  } else {
    ent->next_fire = nf;
    if (nf <= now && a->trig == TRIG_EVERY && !startup) ent->next_fire = now;
  }
  daemon__save_schedule(d, ent);
  if (ent->next_fire > 0 && (d->next_scan == 0 || ent->next_fire < d->next_scan))
    d->next_scan = ent->next_fire;
  daemon__rescan(d);
}

/* Re-reads the enabled flags that `automations enable/disable` write. */
void daemon__refresh_enabled(struct daemon *d) {
  if (d->cl) return; /* the cluster's flags: daemon__cl_refresh_enabled */
  sqlite3_stmt *s = daemon__prep(d, "SELECT name, enabled FROM automations WHERE enabled IS NOT NULL");
  if (!s) return;
  while (sqlite3_step(s) == SQLITE_ROW) {
    struct entry *ent = daemon__find_entry(d, (const char *)sqlite3_column_text(s, 0));
    if (!ent || !ent->a) continue;
    int en = sqlite3_column_int(s, 1);
    if (en == ent->enabled) continue;
    ent->enabled = en;
    daemon__say(d, "%s: %s", ent->name, en ? "enabled" : "disabled");
    if (en) {
      ent->next_fire = fresh_next(d, ent, util_now());
      daemon__save_schedule(d, ent);
      d->next_scan = util_now();
      daemon__rescan(d);
    }
  }
  daemon__done(d, s);
}

/* ------------------------------------------------------------- loading */

void daemon__load_one(struct daemon *d, const char *fname, int startup) {
  char name[128];
  size_t n = strlen(fname);
  if (n < 5 || strcmp(fname + n - 4, ".lua") || n - 4 >= sizeof name) return;
  memcpy(name, fname, n - 4);
  name[n - 4] = 0;
  struct entry *ent = daemon__find_entry(d, name);
  if (!automation_name_valid(name)) {
    if (!ent) {
      daemon__complain(
          "automations/%s: the file name is not a valid automation name "
          "([a-z][a-z0-9_-]*.lua); ignored",
          fname);
      ent = xcalloc(1, sizeof *ent);
      ent->lock_fd = -1;
      snprintf(ent->name, sizeof ent->name, "%.64s", name);
      ent->deleted = 1; /* remembered only so the message is not repeated */
      ent->next = d->entries;
      d->entries = ent;
    }
    return;
  }
  if (!ent) {
    ent = xcalloc(1, sizeof *ent);
    ent->last_s = -1;
    ent->lock_fd = -1;
    snprintf(ent->name, sizeof ent->name, "%.64s", name);
    snprintf(ent->chunk, sizeof ent->chunk, "automations/%s", fname);
    snprintf(ent->path, sizeof ent->path, "%s/automations/%s", d->ws, fname);
    ent->next = d->entries;
    d->entries = ent;
  }
  int was_deleted = ent->deleted;
  ent->deleted = 0;
  char *src = NULL;
  size_t len = 0;
  struct err e;
  if (util_read_file(ent->path, 1024 * 1024, &src, &len, &e)) {
    daemon__complain("%s: cannot read the file", ent->chunk);
    return;
  }
  if (ent->a && !was_deleted && ent->a->source_len == len && !memcmp(ent->a->source, src, len)) {
    free(src);
    if (ent->load_error) { /* reverted to the good version */
      free(ent->load_error);
      ent->load_error = NULL;
      free(ent->bad_source);
      ent->bad_source = NULL;
      save_load_error(d, ent);
    }
    return;
  }
  if (ent->bad_source && !strcmp(ent->bad_source, src)) {
    free(src);
    return; /* the same broken text: already reported */
  }
  struct automation *a = NULL;
  if (automation_load_source(src, len, ent->chunk, name, &a, &e)) {
    free(ent->load_error);
    ent->load_error = xstrdup(e.msg);
    free(ent->bad_source);
    ent->bad_source = src;
    if (!d->oneshot) /* a manual run reports the error itself */
      daemon__complain("%s%s", e.msg, ent->a ? " (keeping the last good version running)" : "");
    save_load_error(d, ent);
    ensure_row(d, ent->name);
    save_load_error(d, ent);
    return;
  }
  free(src);
  free(ent->bad_source);
  ent->bad_source = NULL;
  {
    unsigned char h[crypto_hash_sha256_BYTES];
    char hex[crypto_hash_sha256_BYTES * 2 + 1];
    crypto_hash_sha256(h, (const unsigned char *)a->source, a->source_len);
    sodium_bin2hex(hex, sizeof hex, h, sizeof h);
    snprintf(ent->hash, sizeof ent->hash, "%.16s", hex);
  }
  int had = ent->a != NULL;
  automation_free(ent->a);
  ent->a = a;
  automation_trigger_key(a, ent->key, sizeof ent->key);
  if (ent->load_error) {
    free(ent->load_error);
    ent->load_error = NULL;
  }
  ensure_row(d, ent->name);
  save_load_error(d, ent);
  if (!d->oneshot) {
    daemon__say(d, "%s: %s (%s, mode %s)", ent->name, had ? "reloaded" : "loaded", a->trigger_text,
        automation_mode_name(a->mode));
    char why[300];
    if (automation_never_fires(a, util_now(), why, sizeof why))
      daemon__complain("%s: warning: %s", ent->chunk, why);
    if (d->cl) daemon__cl_file(d, ent, 0);
    schedule_entry(d, ent, startup);
  }
}


void daemon__reload_automations(struct daemon *d, int startup) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/automations", d->ws);
  for (struct entry *x = d->entries; x; x = x->next) x->deleted |= 2; /* mark */
  DIR *dh = opendir(dir);
  if (dh) {
    struct dirent *de;
    /* sorted order makes startup output stable */
    char **names = NULL;
    size_t nn = 0;
    while ((de = readdir(dh))) {
      if (de->d_name[0] == '.') continue;
      names = xrealloc(names, (nn + 1) * sizeof *names);
      names[nn++] = xstrdup(de->d_name);
    }
    closedir(dh);
    for (size_t i = 0; i < nn; i++)
      for (size_t j = i + 1; j < nn; j++)
        if (strcmp(names[i], names[j]) > 0) {
          char *t = names[i];
          names[i] = names[j];
          names[j] = t;
        }
    for (size_t i = 0; i < nn; i++) {
      char base[4096];
      snprintf(base, sizeof base, "%s", names[i]);
      struct entry *ent = NULL;
      size_t n = strlen(base);
      if (n > 4 && !strcmp(base + n - 4, ".lua")) {
        base[n - 4] = 0;
        ent = daemon__find_entry(d, base);
      }
      if (ent) ent->deleted &= ~2;
      daemon__load_one(d, names[i], startup);
      free(names[i]);
    }
    free(names);
  }
  for (struct entry *x = d->entries; x; x = x->next)
    if (x->deleted & 2) {
      x->deleted = 1;
      if (x->a) {
        daemon__say(d, "%s: removed (its file is gone)", x->name);
        if (d->cl) {
          daemon__cl_file(d, x, 1);
          daemon__cl_forget_later(d, x);
        }
        daemon__drop_pending(d, x);
        automation_free(x->a);
        x->a = NULL;
        x->next_fire = 0;
        daemon__rescan(d);
      }
    }
}
