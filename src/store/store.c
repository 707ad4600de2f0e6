/* store.c - see store.h. */
#include "store.h"

#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "util.h"

/* Statements prepared once per connection (store_cached): the hot paths
 * (an audit append, a journal commit, BEGIN and COMMIT themselves) would
 * otherwise spend most of their instructions in SQLite's parser. Keyed by
 * the SQL's address (callers pass string literals), its text compared as a
 * guard. Full: the statement is prepared uncached, as before. */
#define STMT_CACHE 32

struct cached_stmt {
  const char *sql;
  sqlite3_stmt *st;
};

/* One SQLite connection of a store, with its statements. It belongs to at
 * most one thread at a time (bound); a thread keeps it until it ends, then
 * it waits, statements and all, for the next thread. */
struct conn {
  sqlite3 *db;
  struct cached_stmt cache[STMT_CACHE];
  int ncache;
  sqlite3_stmt *begin, *commit, *rollback;
  int bound;         /* a live thread has it (s->mu) */
  struct conn *next; /* every connection of the store */
};

/* A store from store_open is one connection, used by one thread at a time
 * (its owner serialises, and may step a statement on whichever thread
 * holds its lock: the run journal does). A store from store_open_shared is
 * used by many threads at once (one runtime's: the ReAct loop's parallel
 * read-only tools, the pipeline's audit rows, the skills' embedding cache):
 * each thread that uses it gets a connection of its own (SQLite's rule for
 * NOMUTEX connections, and the only way a statement, a transaction,
 * sqlite3_changes or sqlite3_errmsg mean what the caller thinks: a mutex
 * per call would let two threads step one cached statement, or one
 * thread's write land in another's transaction). Connections are kept,
 * with their prepared statements, and reused by later threads: a tool
 * thread pays no open and no schema parse after the first. */
struct store {
  char path[4096];
  int shared;         /* store_open_shared: a connection per thread */
  pthread_mutex_t mu; /* conns, bound, refs */
  struct conn *conns;
  int nconn;
  /* The owner's reference and one per thread binding: the struct lives
   * until store_close and the last thread that used it let go. */
  int refs;
  atomic_int closed;
};

/* The connections a thread has, one per store it used. last: the one used
 * most recently, looked up without a loop. The key's destructor hands them
 * back when the thread ends. */
struct binding {
  struct store *s;
  struct conn *c;
};
struct bindings {
  struct binding *b;
  int n, cap;
};
static _Thread_local struct bindings *tl;
static _Thread_local struct binding tl_last;
static pthread_key_t tl_key;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;

/* Drops a reference (s->mu held; unlocks it). The last one frees s. */
static void store_unref_unlock(struct store *s) {
  int last = --s->refs == 0;
  pthread_mutex_unlock(&s->mu);
  if (last) {
    pthread_mutex_destroy(&s->mu);
    free(s);
  }
}

/* A thread ends: its connections go back to their stores, ready for the
 * next thread (a store closed meanwhile already closed them). */
static void tl_release(void *p) {
  struct bindings *bs = p;
  for (int i = 0; i < bs->n; i++) {
    struct store *s = bs->b[i].s;
    pthread_mutex_lock(&s->mu);
    if (!atomic_load(&s->closed)) {
      struct conn *c = bs->b[i].c;
      /* A thread that ended mid-transaction must not leave the write lock
       * held by a connection nobody steps. */
      if (!sqlite3_get_autocommit(c->db)) sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
      c->bound = 0;
    }
    store_unref_unlock(s);
  }
  free(bs->b);
  free(bs);
  if (tl == bs) tl = NULL;
  tl_last = (struct binding){0};
}

static void tl_key_make(void) { pthread_key_create(&tl_key, tl_release); }

/* Forgets this thread's binding to s (store_close on this thread, or s
 * closed by another). Returns 1 when there was one. */
static int tl_forget(struct store *s) {
  if (tl_last.s == s) tl_last = (struct binding){0};
  for (int i = 0; tl && i < tl->n; i++)
    if (tl->b[i].s == s) {
      tl->b[i] = tl->b[--tl->n];
      return 1;
    }
  return 0;
}

/* What the operating system said under SQLite's words ("unable to open
 * database file", "disk I/O error"): " (Read-only file system)", or "". */
static const char *os_said(sqlite3 *db, char *buf, size_t n) {
  int se = db ? sqlite3_system_errno(db) : 0;
  if (se > 0)
    snprintf(buf, n, " (%s)", strerror(se));
  else
    buf[0] = 0;
  return buf;
}

static int conn_setup(struct store *s, sqlite3 **db, struct err *e) {
  int rc = sqlite3_open_v2(s->path, db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    char os[160];
    err_set(e, ERR_IO, "store", "%s: open: %s%s", s->path,
            *db ? sqlite3_errmsg(*db) : "out of memory", os_said(*db, os, sizeof os));
    sqlite3_close_v2(*db);
    *db = NULL;
    return ERR_IO;
  }
  sqlite3_busy_timeout(*db, 5000);
  sqlite3_extended_result_codes(*db, 1);
  /* journal_mode is the first statement that reads the file, so it is where
   * "file is not a database" surfaces. SQLite answers it with SQLITE_BUSY
   * without calling the busy handler while another process holds the
   * file's exclusive lock (it is setting WAL mode on a new file, or
   * checkpointing as its last connection closes): retried here for as
   * long as the busy timeout, so processes starting together all open. */
  char *msg = NULL;
  int rc2;
  for (double waited = 0;; waited += 0.002) {
    rc2 = sqlite3_exec(*db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                            "PRAGMA foreign_keys=ON;", NULL, NULL, &msg);
    if ((rc2 & 0xff) != SQLITE_BUSY || waited >= 5.0) break;
    sqlite3_free(msg);
    msg = NULL;
    util_sleep(0.002);
  }
  if (rc2 != SQLITE_OK) {
    char os[160];
    err_set(e, ERR_IO, "store", "%s: %s%s", s->path, msg ? msg : sqlite3_errmsg(*db),
            os_said(*db, os, sizeof os));
    sqlite3_free(msg);
    sqlite3_close_v2(*db);
    *db = NULL;
    return ERR_IO;
  }
  return 0;
}

/* This thread's connection to s: the one it has, else one another thread
 * handed back, else a new one. NULL with e filled when none can be opened
 * (e may be NULL). */
static struct conn *conn_get(struct store *s, struct err *e) {
  if (!s->shared) return s->conns; /* the one connection, opened with s */
  if (tl_last.s == s) return tl_last.c;
  for (int i = 0; tl && i < tl->n; i++)
    if (tl->b[i].s == s) {
      tl_last = tl->b[i];
      return tl_last.c;
    }
  pthread_once(&tl_once, tl_key_make);
  if (!tl) {
    tl = xcalloc(1, sizeof *tl);
    pthread_setspecific(tl_key, tl);
  }
  /* Let go of stores closed since this thread used them. */
  for (int i = 0; i < tl->n;)
    if (atomic_load(&tl->b[i].s->closed)) {
      struct store *old = tl->b[i].s;
      tl->b[i] = tl->b[--tl->n];
      if (tl_last.s == old) tl_last = (struct binding){0};
      pthread_mutex_lock(&old->mu);
      store_unref_unlock(old);
    } else {
      i++;
    }
  pthread_mutex_lock(&s->mu);
  struct conn *c = s->conns;
  while (c && c->bound) c = c->next;
  if (c) c->bound = 1;
  pthread_mutex_unlock(&s->mu);
  if (!c) {
    /* Opened outside the lock: other threads go on meanwhile. The schema
     * is the first connection's to migrate; this one only reads it. */
    sqlite3 *db = NULL;
    struct err oe = {0};
    if (conn_setup(s, &db, &oe)) {
      if (e) *e = oe;
      return NULL;
    }
    c = xcalloc(1, sizeof *c);
    c->db = db;
    c->bound = 1;
    pthread_mutex_lock(&s->mu);
    c->next = s->conns;
    s->conns = c;
    s->nconn++;
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_lock(&s->mu);
  s->refs++;
  pthread_mutex_unlock(&s->mu);
  if (tl->n == tl->cap) {
    tl->cap = tl->cap ? tl->cap * 2 : 4;
    tl->b = xrealloc(tl->b, (size_t)tl->cap * sizeof *tl->b);
  }
  tl->b[tl->n++] = (struct binding){s, c};
  tl_last = (struct binding){s, c};
  return c;
}

/* The connection for a call that cannot report an error (store_db and
 * the like): NULL only when the process is out of file descriptors or
 * memory, and SQLite's calls then fail on the NULL handle. */
static sqlite3 *db_of(struct store *s) {
  struct conn *c = conn_get(s, NULL);
  return c ? c->db : NULL;
}

/* Forward-only migrations: migrations[i] takes the schema from version i to
 * i+1. Never edit a shipped entry; append a new one. */
static const char *const migrations[] = {
    /* 0 -> 1: every table of the first release */
    "CREATE TABLE runs ("
    "  id TEXT PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL DEFAULT '',"
    "  trigger TEXT, status TEXT NOT NULL, started REAL NOT NULL, finished REAL,"
    "  result TEXT, error TEXT, tool_calls INTEGER NOT NULL DEFAULT 0,"
    "  parent TEXT, session TEXT, worker_pid INTEGER);"
    "CREATE INDEX runs_by_name ON runs(name, started);"
    "CREATE INDEX runs_by_status ON runs(status);"
    "CREATE TABLE events ("
    "  run_id TEXT NOT NULL, seq INTEGER NOT NULL, ts REAL NOT NULL, type TEXT NOT NULL,"
    "  data TEXT, PRIMARY KEY (run_id, seq));"
    "CREATE TABLE automations ("
    "  name TEXT PRIMARY KEY, state TEXT NOT NULL DEFAULT '{}', next_fire REAL,"
    "  enabled INTEGER, last_run REAL, last_status TEXT);"
    "CREATE TABLE memory ("
    "  ns TEXT NOT NULL DEFAULT '', key TEXT NOT NULL, value TEXT NOT NULL,"
    "  updated REAL NOT NULL, PRIMARY KEY (ns, key));"
    "CREATE VIRTUAL TABLE memory_fts USING fts5(ns UNINDEXED, key, value,"
    "  content='memory', content_rowid='rowid');"
    "CREATE TRIGGER memory_ai AFTER INSERT ON memory BEGIN"
    "  INSERT INTO memory_fts(rowid, ns, key, value) VALUES (new.rowid, new.ns, new.key, new.value); END;"
    "CREATE TRIGGER memory_ad AFTER DELETE ON memory BEGIN"
    "  INSERT INTO memory_fts(memory_fts, rowid, ns, key, value)"
    "  VALUES ('delete', old.rowid, old.ns, old.key, old.value); END;"
    "CREATE TRIGGER memory_au AFTER UPDATE ON memory BEGIN"
    "  INSERT INTO memory_fts(memory_fts, rowid, ns, key, value)"
    "  VALUES ('delete', old.rowid, old.ns, old.key, old.value);"
    "  INSERT INTO memory_fts(rowid, ns, key, value) VALUES (new.rowid, new.ns, new.key, new.value); END;"
    "CREATE TABLE approvals ("
    "  id INTEGER PRIMARY KEY, created REAL NOT NULL, run_id TEXT, tool TEXT NOT NULL,"
    "  caller_kind TEXT NOT NULL, caller_name TEXT, impact TEXT, reason TEXT,"
    "  args TEXT NOT NULL, args_hash TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'pending',"
    "  decided REAL, decided_by TEXT, decision_reason TEXT, new_args TEXT);"
    "CREATE TABLE audit ("
    "  seq INTEGER PRIMARY KEY, ts REAL NOT NULL, run_id TEXT, caller_kind TEXT,"
    "  caller_name TEXT, tool TEXT, args_hash TEXT, decision TEXT NOT NULL,"
    "  decided_by TEXT, approver TEXT, status TEXT, duration_ms REAL, detail TEXT,"
    "  prev_hash TEXT NOT NULL, hash TEXT NOT NULL);"
    "CREATE TABLE secrets ("
    "  name TEXT PRIMARY KEY, nonce BLOB NOT NULL, ciphertext BLOB NOT NULL, updated REAL NOT NULL);"
    "CREATE TABLE embed_cache ("
    "  model TEXT NOT NULL, content_hash TEXT NOT NULL, dim INTEGER NOT NULL,"
    "  vec BLOB NOT NULL, PRIMARY KEY (model, content_hash));"
    "CREATE TABLE sessions ("
    "  name TEXT PRIMARY KEY, created REAL NOT NULL, updated REAL NOT NULL);"
    "CREATE TABLE messages ("
    "  session TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,"
    "  ts REAL NOT NULL, PRIMARY KEY (session, seq));",
    /* 1 -> 2 (memory): memory gets an explicit INTEGER PRIMARY KEY, because
     * the FTS index refers to rows by rowid and VACUUM may renumber implicit
     * rowids; a kind column, so a value stored as JSON (a Lua table) comes
     * back as a table while text stays text; and the index gets the porter
     * stemmer ("deploys" finds "deploy") and folds all diacritics. Ids keep
     * the old rowids; the index is rebuilt from the table. */
    "CREATE TABLE memory_v2 ("
    "  id INTEGER PRIMARY KEY, ns TEXT NOT NULL DEFAULT '', key TEXT NOT NULL,"
    "  value TEXT NOT NULL, kind TEXT NOT NULL DEFAULT 'text' CHECK (kind IN ('text', 'json')),"
    "  updated REAL NOT NULL, UNIQUE (ns, key));"
    "INSERT INTO memory_v2(id, ns, key, value, updated)"
    "  SELECT rowid, ns, key, value, updated FROM memory;"
    "DROP TRIGGER memory_ai; DROP TRIGGER memory_ad; DROP TRIGGER memory_au;"
    "DROP TABLE memory_fts;"
    "DROP TABLE memory;"
    "ALTER TABLE memory_v2 RENAME TO memory;"
    "CREATE VIRTUAL TABLE memory_fts USING fts5(ns UNINDEXED, key, value,"
    "  content='memory', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2');"
    "CREATE TRIGGER memory_ai AFTER INSERT ON memory BEGIN"
    "  INSERT INTO memory_fts(rowid, ns, key, value) VALUES (new.id, new.ns, new.key, new.value); END;"
    "CREATE TRIGGER memory_ad AFTER DELETE ON memory BEGIN"
    "  INSERT INTO memory_fts(memory_fts, rowid, ns, key, value)"
    "  VALUES ('delete', old.id, old.ns, old.key, old.value); END;"
    "CREATE TRIGGER memory_au AFTER UPDATE ON memory BEGIN"
    "  INSERT INTO memory_fts(memory_fts, rowid, ns, key, value)"
    "  VALUES ('delete', old.id, old.ns, old.key, old.value);"
    "  INSERT INTO memory_fts(rowid, ns, key, value) VALUES (new.id, new.ns, new.key, new.value); END;"
    "INSERT INTO memory_fts(memory_fts) VALUES ('rebuild');",
    /* 2 -> 3 (security): the audit chain's head, so rows cut off the end are
     * caught (sig: the optional Ed25519 signature of seq:hash), and the hash
     * an approval was given for. */
    "CREATE TABLE audit_head ("
    "  id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL, hash TEXT NOT NULL,"
    "  sig TEXT);"
    /* The hash of the arguments the approver actually approved (canonical
     * JSON); the waiting run only proceeds when it equals its own. */
    "ALTER TABLE approvals ADD COLUMN approved_hash TEXT;",
    /* 3 -> 4: the scheduler (daemon.c): which trigger a persisted next_fire
     * belongs to, the last load error of an automation file, and the queue
     * of events for `on` automations. */
    "ALTER TABLE automations ADD COLUMN trigger_key TEXT;"
    "ALTER TABLE automations ADD COLUMN load_error TEXT;"
    "CREATE TABLE event_queue ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, payload TEXT,"
    "  created REAL NOT NULL);",
    /* 4 -> 5: the start time (clock ticks since boot, /proc/PID/stat) of
     * the process that runs a run, next to its worker_pid: together they
     * tell a live owner from a reused pid, so a run whose process is gone
     * (kill -9) is marked interrupted instead of "running" forever. */
    "ALTER TABLE runs ADD COLUMN proc_start INTEGER;",
    /* 5 -> 6 (audit): the head states how many rows it vouches for, and
     * signs that count with seq and hash (NULL: a head written before,
     * signed without it). */
    "ALTER TABLE audit_head ADD COLUMN rows INTEGER;",
    /* 6 -> 7: a chat session whose model has read outside content stays
     * tainted when it is resumed (the history still holds that content). */
    "ALTER TABLE sessions ADD COLUMN tainted INTEGER NOT NULL DEFAULT 0;",
    /* 7 -> 8: a memory written by a tainted run is outside content to
     * whoever reads it later (memory.get/search, the context's relevant
     * memories): reading it taints the reader's run. */
    "ALTER TABLE memory ADD COLUMN tainted INTEGER NOT NULL DEFAULT 0;",
    /* 8 -> 9: taint carried between automation runs: an event emitted by a
     * tainted run starts its `on` automation tainted, and ctx.state saved by
     * a tainted run starts the automation's next run tainted. */
    "ALTER TABLE event_queue ADD COLUMN tainted INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE automations ADD COLUMN state_tainted INTEGER NOT NULL DEFAULT 0;",
    /* 9 -> 10 (security): the skill generations the daemon made under
     * .luagent/daemon-skills/<gen> (daemon_skills.c): only these are ever
     * used as the last good version or deleted. hash: the generation's
     * content when it was made (NULL while it is being made); kept: JSON
     * {folder: message} of the folders that run a kept last good version. */
    "CREATE TABLE daemon_skill_gens ("
    "  gen INTEGER PRIMARY KEY, hash TEXT, kept TEXT, created REAL NOT NULL);",
    /* 10 -> 11: the process waiting on an approval request (pid and start
     * time, as runs have): a request whose waiter is gone (kill -9, a
     * daemon's worker stopped) is expired instead of offered for good. */
    "ALTER TABLE approvals ADD COLUMN waiter_pid INTEGER;"
    "ALTER TABLE approvals ADD COLUMN waiter_start INTEGER;",
    /* 11 -> 12: runs_by_status holds only the statuses that are looked up
     * by status (`running`, by the orphan sweeps; `queued`): a finished run
     * leaves it, and an ok, failed or skipped row never enters it. Every
     * finished run used to be one more entry in the middle of a large
     * index, a B-tree write at each run's end (and its page splits); the
     * lookups `status = 'running'` still search this index, and the
     * others (prune: `status NOT IN (...)`, `!= 'running'` by name) never
     * used it. */
    "DROP INDEX IF EXISTS runs_by_status;"
    "CREATE INDEX runs_by_status ON runs(status) WHERE status = 'running' OR status = 'queued';",
    /* 12 -> 13: events.pieces: the streamed pieces (text_delta,
     * tool_args_delta) that wait together in the journal's queue are one
     * row, most of a run's rows and its writer's work before; pieces keeps
     * their lengths, so `runs show --json` replays them as they came
     * (journal.h). NULL: the row is one event. */
    "ALTER TABLE events ADD COLUMN pieces TEXT;",
};
#define NMIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

int store_schema_version(void) { return NMIGRATIONS; }

int store_error(struct store *s, struct err *e, const char *what) {
  sqlite3 *db = s ? db_of(s) : NULL;
  char os[160];
  return err_set(e, ERR_IO, "store", "%s: %s: %s%s", s ? s->path : "state.db", what,
                 db ? sqlite3_errmsg(db) : "no connection", os_said(db, os, sizeof os));
}

int store_exec(struct store *s, const char *sql, struct err *e) {
  struct conn *c = conn_get(s, e);
  if (!c) return ERR_IO;
  char *msg = NULL;
  if (sqlite3_exec(c->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    err_set(e, ERR_IO, "store", "%s: %s", s->path, msg ? msg : sqlite3_errmsg(c->db));
    sqlite3_free(msg);
    return ERR_IO;
  }
  return 0;
}

int store_prepare(struct store *s, const char *sql, sqlite3_stmt **st, struct err *e) {
  *st = NULL;
  struct conn *c = conn_get(s, e);
  if (!c) return ERR_IO;
  if (sqlite3_prepare_v2(c->db, sql, -1, st, NULL) != SQLITE_OK) return store_error(s, e, "prepare");
  return 0;
}

/* The cached statement for sql (see store_cached); clear: drop its
 * bindings. */
static int cached(struct store *s, const char *sql, int clear, sqlite3_stmt **st, struct err *e) {
  *st = NULL;
  struct conn *c = conn_get(s, e);
  if (!c) return ERR_IO;
  /* The same literal first (the usual case: no string compared), then
   * the same text. */
  int hit = -1;
  for (int i = 0; i < c->ncache && hit < 0; i++)
    if (c->cache[i].sql == sql) hit = i;
  for (int i = 0; i < c->ncache && hit < 0; i++)
    if (!strcmp(c->cache[i].sql, sql)) hit = i;
  if (hit >= 0) {
    *st = c->cache[hit].st;
    sqlite3_reset(*st); /* in case the last user left it mid-way */
    if (clear) sqlite3_clear_bindings(*st);
    return 0;
  }
  if (sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK)
    return store_error(s, e, "prepare");
  if (c->ncache < STMT_CACHE) c->cache[c->ncache++] = (struct cached_stmt){sql, *st};
  return 0;
}

int store_cached(struct store *s, const char *sql, sqlite3_stmt **st, struct err *e) {
  return cached(s, sql, 1, st, e);
}

int store_cached_bound(struct store *s, const char *sql, sqlite3_stmt **st, struct err *e) {
  return cached(s, sql, 0, st, e);
}

static void release(struct store *s, sqlite3_stmt *st, int clear) {
  if (!st) return;
  /* A cached statement is this thread's connection's (store_cached). */
  struct conn *c = conn_get(s, NULL);
  for (int i = 0; c && i < c->ncache; i++)
    if (c->cache[i].st == st) {
      sqlite3_reset(st); /* ends its read; the plan stays */
      if (clear) sqlite3_clear_bindings(st); /* no pointer into the caller's buffers */
      return;
    }
  sqlite3_finalize(st); /* prepared when the cache was full */
}

void store_release(struct store *s, sqlite3_stmt *st) { release(s, st, 1); }
void store_release_bound(struct store *s, sqlite3_stmt *st) { release(s, st, 0); }

/* Steps a transaction-control statement prepared once per connection. */
static int step_once(struct store *s, int which, const char *sql, struct err *e) {
  struct conn *c = conn_get(s, e);
  if (!c) return ERR_IO;
  sqlite3_stmt **slot = which == 0 ? &c->begin : which == 1 ? &c->commit : &c->rollback;
  if (!*slot &&
      sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, slot, NULL) != SQLITE_OK) {
    if (e) store_error(s, e, sql);
    return ERR_IO;
  }
  int rc = sqlite3_step(*slot);
  sqlite3_reset(*slot);
  if (rc == SQLITE_DONE) return 0;
  if (e) err_set(e, ERR_IO, "store", "%s: %s", s->path, sqlite3_errmsg(c->db));
  return ERR_IO;
}

int store_begin(struct store *s, struct err *e) { return step_once(s, 0, "BEGIN IMMEDIATE", e); }
int store_commit(struct store *s, struct err *e) { return step_once(s, 1, "COMMIT", e); }
void store_rollback(struct store *s) {
  /* Not after an automatic rollback (a full disk, an interrupt): there
   * is no transaction left and ROLLBACK would only fail. */
  sqlite3 *db = db_of(s);
  if (db && !sqlite3_get_autocommit(db)) step_once(s, 2, "ROLLBACK", NULL);
}

static int user_version(struct store *s, int *v, struct err *e) {
  sqlite3_stmt *st;
  if (store_prepare(s, "PRAGMA user_version", &st, e)) return ERR_IO;
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    sqlite3_finalize(st);
    return store_error(s, e, "read schema version");
  }
  *v = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return 0;
}

static int migrate(struct store *s, struct err *e) {
  int v;
  if (user_version(s, &v, e)) return ERR_IO;
  if (v > NMIGRATIONS)
    return err_set(e, ERR_INVALID, "store",
                   "%s: schema version %d is newer than this luagent understands (%d); "
                   "upgrade luagent or use another workspace",
                   s->path, v, NMIGRATIONS);
  if (v == NMIGRATIONS) return 0;
  if (store_begin(s, e)) return ERR_IO;
  /* Re-read inside the write lock: another process may have migrated. */
  if (user_version(s, &v, e)) goto fail;
  for (; v < NMIGRATIONS; v++) {
    if (store_exec(s, migrations[v], e)) {
      err_prefix(e, "migration %d -> %d", v, v + 1);
      goto fail;
    }
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", v + 1);
    if (store_exec(s, sql, e)) goto fail;
  }
  return store_commit(s, e);
fail:
  store_rollback(s);
  return ERR_IO;
}

/* Once per process, before SQLite initialises: no bulk page-cache block
 * per connection (by default each takes one for 20 pages at its first
 * read, ~87 KiB, and touches all of it; the pages are allocated one by
 * one as they are read instead). No memory statistics either: with them
 * every allocation and free SQLite makes takes a global mutex to count
 * bytes that nothing here reads (sqlite3_memory_used, a soft heap limit). */
static void sqlite_setup(void) {
  /* Either fails (SQLITE_MISUSE) only once SQLite is initialised, which
   * nothing in luagent does before its first store is opened; SQLite's
   * defaults would then stay, and work: only what these save is lost. */
  (void)sqlite3_config(SQLITE_CONFIG_PAGECACHE, NULL, 0, 0);
  (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

static int open_path(const char *path, int shared, struct store **out, struct err *e) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, sqlite_setup);
  *out = NULL;
  struct store *s = xcalloc(1, sizeof *s);
  snprintf(s->path, sizeof s->path, "%s", path);
  pthread_mutex_init(&s->mu, NULL);
  s->refs = 1;
  s->shared = shared;
  /* The first connection (shared: this thread's) migrates the schema, so
   * an unreadable file or a newer schema is refused here. */
  int ok;
  if (shared) {
    ok = conn_get(s, e) != NULL;
  } else {
    sqlite3 *db = NULL;
    if ((ok = !conn_setup(s, &db, e))) {
      s->conns = xcalloc(1, sizeof *s->conns);
      s->conns->db = db;
      s->nconn = 1;
    }
  }
  if (!ok || migrate(s, e)) {
    store_close(s);
    return ERR_IO;
  }
  *out = s;
  return 0;
}

int store_open_path(const char *path, struct store **out, struct err *e) {
  return open_path(path, 0, out, e);
}

long long store_proc_start(int pid) {
  struct proc_stat ps;
  return proc_stat_read(pid, &ps) ? -1 : ps.start;
}

/* 1 when the process that recorded (pid, start) is still running. */
static int owner_alive(long long pid, long long start) {
  if (pid <= 0) return 1; /* unknown owner: cannot tell, leave it */
  return proc_alive(pid, start);
}

/* 1 while the worker pid may still report its run: it exists, with the
 * start time recorded beside its pid (start 0: a row from before runs
 * recorded it, the pid alone decides), and is no zombie left to a parent
 * that is not luagent (its daemon or `automations run` died and it was
 * handed to init, which on some systems never reaps it). A zombie of a
 * live luagent parent is that parent's to record. */
static int worker_exists(long long pid, long long start) {
  if (pid <= 0) return 1; /* unknown: cannot tell, leave it */
  struct proc_stat ps;
  if (proc_stat_read(pid, &ps)) return 0;
  if (start > 0 && ps.start != start) return 0; /* its pid was reused: it is gone */
  return ps.state != 'Z' || proc_exe_is(ps.ppid, NULL);
}

int store_mark_interrupted(struct store *s, struct err *e) {
  sqlite3_stmt *q = NULL, *u = NULL;
  int n = 0;
  /* ask, chat, delegate, run: owned by the process that recorded itself.
   * An automation run belongs to the daemon or `automations run` that
   * handed it to a worker, which records how it ended (and a daemon
   * sweeps its own at start): taken here only once that worker is gone
   * too, which its owner outlives only for an instant (it is killed with
   * its owner), so a killed `automations run` is not left running. */
  if (store_prepare(s,
                    "SELECT id, worker_pid, coalesce(proc_start, 0), kind = 'automation' "
                    "FROM runs WHERE status = 'running'",
                    &q, e))
    return ERR_IO;
  while (sqlite3_step(q) == SQLITE_ROW) {
    long long pid = sqlite3_column_int64(q, 1);
    int automation = sqlite3_column_int(q, 3);
    long long start = sqlite3_column_int64(q, 2);
    if (automation ? worker_exists(pid, start) : owner_alive(pid, start)) continue;
    if (!u && store_prepare(s,
                            "UPDATE runs SET status = 'interrupted', finished = ?1, error = "
                            "?3 WHERE id = ?2 AND status = 'running'",
                            &u, e))
      break;
    sqlite3_bind_double(u, 1, util_now());
    sqlite3_bind_text(u, 2, (const char *)sqlite3_column_text(q, 0), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(u, 3,
                      automation ? "the worker running it ended before the run finished, "
                                   "and with it the process that ran it"
                                 : "the process running it ended before the run finished",
                      -1, SQLITE_STATIC);
    if (sqlite3_step(u) == SQLITE_DONE) n += sqlite3_changes(store_db(s));
    sqlite3_reset(u);
  }
  sqlite3_finalize(q);
  sqlite3_finalize(u);
  return n;
}

int store_expire_orphan_approvals(struct store *s, struct err *e) {
  sqlite3_stmt *q = NULL, *u = NULL;
  int n = 0;
  if (store_prepare(s,
                    "SELECT id, waiter_pid, coalesce(waiter_start, 0) FROM approvals "
                    "WHERE status = 'pending' AND waiter_pid IS NOT NULL",
                    &q, e))
    return ERR_IO;
  while (sqlite3_step(q) == SQLITE_ROW) {
    if (owner_alive(sqlite3_column_int64(q, 1), sqlite3_column_int64(q, 2))) continue;
    if (!u && store_prepare(s,
                            "UPDATE approvals SET status = 'expired', decided = ?1, "
                            "decided_by = 'nobody', decision_reason = 'the process waiting on "
                            "it ended before a decision' WHERE id = ?2 AND status = 'pending'",
                            &u, e))
      break;
    sqlite3_bind_double(u, 1, util_now());
    sqlite3_bind_int64(u, 2, sqlite3_column_int64(q, 0));
    if (sqlite3_step(u) == SQLITE_DONE) n += sqlite3_changes(store_db(s));
    sqlite3_reset(u);
  }
  sqlite3_finalize(q);
  sqlite3_finalize(u);
  return n;
}

int store_prune_runs(struct store *s, double before, long long *runs, long long *events,
                     struct err *e) {
  *runs = *events = 0;
  /* In batches of 500 runs, one short transaction each, so a big prune
   * never holds the write lock long enough to stall another process. */
  for (;;) {
    if (store_begin(s, e)) return ERR_IO;
    if (store_exec(s,
                   "CREATE TEMP TABLE IF NOT EXISTS prune_ids(id TEXT PRIMARY KEY);"
                   "DELETE FROM prune_ids;",
                   e))
      goto fail;
    sqlite3_stmt *st = NULL;
    if (store_prepare(s,
                      "INSERT INTO prune_ids SELECT id FROM runs WHERE status NOT IN "
                      "('running', 'queued') AND coalesce(finished, started) < ? LIMIT 500",
                      &st, e))
      goto fail;
    sqlite3_bind_double(st, 1, before);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
      store_error(s, e, "prune runs");
      goto fail;
    }
    sqlite3 *db = store_db(s);
    int n = sqlite3_changes(db);
    /* the events, not the rows: a row of joined streamed pieces holds one
     * per length in its pieces list (journal.h) */
    if (store_prepare(s,
                      "SELECT coalesce(sum(CASE WHEN pieces IS NULL THEN 1 ELSE length(pieces) - "
                      "length(replace(pieces, ',', '')) + 1 END), 0) FROM events WHERE run_id IN "
                      "(SELECT id FROM prune_ids)",
                      &st, e))
      goto fail;
    if (sqlite3_step(st) == SQLITE_ROW) *events += sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (store_exec(s, "DELETE FROM events WHERE run_id IN (SELECT id FROM prune_ids)", e)) goto fail;
    if (store_exec(s, "DELETE FROM runs WHERE id IN (SELECT id FROM prune_ids)", e)) goto fail;
    *runs += sqlite3_changes(db);
    if (store_commit(s, e)) goto fail;
    if (n < 500) return 0;
  }
fail:
  store_rollback(s);
  return ERR_IO;
}

static int workspace_db(const char *workspace, char *path, size_t n, struct err *e) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/.luagent", workspace);
  if (util_mkdirs(dir, 0700, e)) return ERR_IO;
  snprintf(path, n, "%s/state.db", dir);
  return 0;
}

int store_open(const char *workspace, struct store **out, struct err *e) {
  char path[4200];
  *out = NULL;
  if (workspace_db(workspace, path, sizeof path, e)) return ERR_IO;
  return open_path(path, 0, out, e);
}

int store_open_shared(const char *workspace, struct store **out, struct err *e) {
  char path[4200];
  *out = NULL;
  if (workspace_db(workspace, path, sizeof path, e)) return ERR_IO;
  return open_path(path, 1, out, e);
}

static void conn_close(struct conn *c) {
  for (int i = 0; i < c->ncache; i++) sqlite3_finalize(c->cache[i].st);
  sqlite3_finalize(c->begin);
  sqlite3_finalize(c->commit);
  sqlite3_finalize(c->rollback);
  sqlite3_close_v2(c->db);
  free(c);
}

void store_close(struct store *s) {
  if (!s) return;
  /* Every connection, also those threads still hold (the caller says no
   * thread uses s any more): nothing keeps the file open after this. */
  int mine = tl_forget(s);
  pthread_mutex_lock(&s->mu);
  atomic_store(&s->closed, 1);
  for (struct conn *c = s->conns, *next; c; c = next) {
    next = c->next;
    conn_close(c);
  }
  s->conns = NULL;
  s->nconn = 0;
  if (mine) s->refs--; /* this thread's binding; others let go when they end */
  store_unref_unlock(s);
}

sqlite3 *store_db(struct store *s) { return db_of(s); }
const char *store_path(const struct store *s) { return s->path; }

int store_connections(struct store *s) {
  pthread_mutex_lock(&s->mu);
  int n = s->nconn;
  pthread_mutex_unlock(&s->mu);
  return n;
}

long long store_total_changes(struct store *s) {
  pthread_mutex_lock(&s->mu);
  long long n = 0;
  for (struct conn *c = s->conns; c; c = c->next) n += sqlite3_total_changes64(c->db);
  pthread_mutex_unlock(&s->mu);
  return n;
}
