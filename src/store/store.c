/* store.c - see store.h. */
#include "store.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

struct store {
  sqlite3 *db;
  char path[4096];
  struct cached_stmt cache[STMT_CACHE];
  int ncache;
  sqlite3_stmt *begin, *commit, *rollback;
};

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
};
#define NMIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

int store_schema_version(void) { return NMIGRATIONS; }

int store_error(struct store *s, struct err *e, const char *what) {
  return err_set(e, ERR_IO, "store", "%s: %s: %s", s ? s->path : "state.db", what,
                 s && s->db ? sqlite3_errmsg(s->db) : "no connection");
}

int store_exec(struct store *s, const char *sql, struct err *e) {
  char *msg = NULL;
  if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    err_set(e, ERR_IO, "store", "%s: %s", s->path, msg ? msg : sqlite3_errmsg(s->db));
    sqlite3_free(msg);
    return ERR_IO;
  }
  return 0;
}

int store_prepare(struct store *s, const char *sql, sqlite3_stmt **st, struct err *e) {
  if (sqlite3_prepare_v2(s->db, sql, -1, st, NULL) != SQLITE_OK) return store_error(s, e, "prepare");
  return 0;
}

int store_cached(struct store *s, const char *sql, sqlite3_stmt **st, struct err *e) {
  *st = NULL;
  /* The same literal first (the usual case: no string compared), then
   * the same text. */
  int hit = -1;
  for (int i = 0; i < s->ncache && hit < 0; i++)
    if (s->cache[i].sql == sql) hit = i;
  for (int i = 0; i < s->ncache && hit < 0; i++)
    if (!strcmp(s->cache[i].sql, sql)) hit = i;
  if (hit >= 0) {
    *st = s->cache[hit].st;
    sqlite3_reset(*st); /* in case the last user left it mid-way */
    sqlite3_clear_bindings(*st);
    return 0;
  }
  if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL) != SQLITE_OK)
    return store_error(s, e, "prepare");
  if (s->ncache < STMT_CACHE) s->cache[s->ncache++] = (struct cached_stmt){sql, *st};
  return 0;
}

void store_release(struct store *s, sqlite3_stmt *st) {
  if (!st) return;
  for (int i = 0; i < s->ncache; i++)
    if (s->cache[i].st == st) {
      sqlite3_reset(st); /* ends its read; the plan stays */
      sqlite3_clear_bindings(st); /* no pointer into the caller's buffers */
      return;
    }
  sqlite3_finalize(st); /* prepared when the cache was full */
}

/* Steps a transaction-control statement prepared once (*slot). */
static int step_once(struct store *s, sqlite3_stmt **slot, const char *sql, struct err *e) {
  if (!*slot &&
      sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, slot, NULL) != SQLITE_OK) {
    if (e) store_error(s, e, sql);
    return ERR_IO;
  }
  int rc = sqlite3_step(*slot);
  sqlite3_reset(*slot);
  if (rc == SQLITE_DONE) return 0;
  if (e) err_set(e, ERR_IO, "store", "%s: %s", s->path, sqlite3_errmsg(s->db));
  return ERR_IO;
}

int store_begin(struct store *s, struct err *e) {
  return step_once(s, &s->begin, "BEGIN IMMEDIATE", e);
}
int store_commit(struct store *s, struct err *e) { return step_once(s, &s->commit, "COMMIT", e); }
void store_rollback(struct store *s) {
  /* Not after an automatic rollback (a full disk, an interrupt): there
   * is no transaction left and ROLLBACK would only fail. */
  if (!sqlite3_get_autocommit(s->db)) step_once(s, &s->rollback, "ROLLBACK", NULL);
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
 * one as they are read instead). */
static void sqlite_setup(void) { sqlite3_config(SQLITE_CONFIG_PAGECACHE, NULL, 0, 0); }

int store_open_path(const char *path, struct store **out, struct err *e) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, sqlite_setup);
  *out = NULL;
  struct store *s = xcalloc(1, sizeof *s);
  snprintf(s->path, sizeof s->path, "%s", path);
  int rc = sqlite3_open_v2(path, &s->db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    store_error(s, e, "open");
    store_close(s);
    return ERR_IO;
  }
  sqlite3_busy_timeout(s->db, 5000);
  sqlite3_extended_result_codes(s->db, 1);
  /* journal_mode is the first statement that reads the file, so it is where
   * "file is not a database" surfaces. */
  if (store_exec(s, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;", e) ||
      migrate(s, e)) {
    store_close(s);
    return ERR_IO;
  }
  *out = s;
  return 0;
}

long long store_proc_start(int pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  /* Field 2 is "(comm)" and may hold spaces or ')': count from the last ')'.
   * starttime is field 22, so the 20th field after it. */
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  p++;
  for (int field = 2; field < 22 && p; field++) p = strchr(p + 1, ' ');
  return p ? strtoll(p + 1, NULL, 10) : -1;
}

/* 1 when the process that recorded (pid, start) is still running. */
static int owner_alive(long long pid, long long start) {
  if (pid <= 0) return 1; /* unknown owner: cannot tell, leave it */
  if (kill((pid_t)pid, 0) != 0 && errno != EPERM) return 0;
  long long now = store_proc_start((int)pid);
  return now < 0 ? 0 : (start <= 0 || now == start);
}

int store_mark_interrupted(struct store *s, struct err *e) {
  sqlite3_stmt *q = NULL, *u = NULL;
  int n = 0;
  /* Automation runs belong to the daemon, which supervises its workers and
   * sweeps its own on start (daemon.c); here: ask, chat, delegate, run. */
  if (store_prepare(s,
                    "SELECT id, worker_pid, coalesce(proc_start, 0) FROM runs "
                    "WHERE status = 'running' AND kind <> 'automation'",
                    &q, e))
    return ERR_IO;
  while (sqlite3_step(q) == SQLITE_ROW) {
    if (owner_alive(sqlite3_column_int64(q, 1), sqlite3_column_int64(q, 2))) continue;
    if (!u && store_prepare(s,
                            "UPDATE runs SET status = 'interrupted', finished = ?, error = "
                            "'the process running it ended before the run finished' "
                            "WHERE id = ? AND status = 'running'",
                            &u, e))
      break;
    sqlite3_bind_double(u, 1, util_now());
    sqlite3_bind_text(u, 2, (const char *)sqlite3_column_text(q, 0), -1, SQLITE_TRANSIENT);
    if (sqlite3_step(u) == SQLITE_DONE) n += sqlite3_changes(s->db);
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
    int n = sqlite3_changes(s->db);
    if (store_exec(s, "DELETE FROM events WHERE run_id IN (SELECT id FROM prune_ids)", e)) goto fail;
    *events += sqlite3_changes(s->db);
    if (store_exec(s, "DELETE FROM runs WHERE id IN (SELECT id FROM prune_ids)", e)) goto fail;
    *runs += sqlite3_changes(s->db);
    if (store_commit(s, e)) goto fail;
    if (n < 500) return 0;
  }
fail:
  store_rollback(s);
  return ERR_IO;
}

int store_open(const char *workspace, struct store **out, struct err *e) {
  char dir[4096], path[4200];
  snprintf(dir, sizeof dir, "%s/.luagent", workspace);
  if (util_mkdirs(dir, 0700, e)) return ERR_IO;
  snprintf(path, sizeof path, "%s/state.db", dir);
  return store_open_path(path, out, e);
}

void store_close(struct store *s) {
  if (!s) return;
  for (int i = 0; i < s->ncache; i++) sqlite3_finalize(s->cache[i].st);
  sqlite3_finalize(s->begin);
  sqlite3_finalize(s->commit);
  sqlite3_finalize(s->rollback);
  if (s->db) sqlite3_close_v2(s->db);
  free(s);
}

sqlite3 *store_db(struct store *s) { return s->db; }
const char *store_path(const struct store *s) { return s->path; }
