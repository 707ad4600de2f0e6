/* session.c - see session.h. */
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "util.h"

int session_check_name(const char *name, struct err *e) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0 || n > SESSION_MAX_NAME)
    return err_set(e, ERR_INVALID, "invalid_args", "session name must be 1 to %d characters",
                   SESSION_MAX_NAME);
  if (name[0] == '.' || name[0] == '-')
    return err_set(e, ERR_INVALID, "invalid_args",
                   "session name '%.64s' must not start with '.' or '-'", name);
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '-')) {
      struct sbuf b = {0};
      util_escape_text(&b, name, n, 80);
      int rc = err_set(e, ERR_INVALID, "invalid_args",
                       "session name '%s': only letters, digits, '_', '.' and '-' are allowed",
                       b.s ? b.s : "");
      sbuf_free(&b);
      return rc;
    }
  }
  return 0;
}

void session_new_name(char out[SESSION_MAX_NAME + 1]) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, SESSION_MAX_NAME + 1, "chat-%Y%m%d-%H%M%S", &tm);
}

int session_hold(const char *workspace, const char *name, int *fd, struct err *e) {
  *fd = -1;
  if (session_check_name(name, e)) return ERR_INVALID;
  char dir[4200], path[4400];
  snprintf(dir, sizeof dir, "%s/.luagent/sessions", workspace);
  if (util_mkdirs(dir, 0700, e)) return ERR_IO;
  snprintf(path, sizeof path, "%s/%s.lock", dir, name);
  for (int tries = 0; tries < 10; tries++) {
    /* O_NONBLOCK: a FIFO put there must not hang us; and only a plain
     * file of one link is ours to write our pid into (a hard link to
     * another of the user's files would be overwritten). */
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (f < 0)
      return err_set(e, ERR_IO, "store", "session %s: %s: %s", name, path, strerror(errno));
    struct stat fs;
    if (fstat(f, &fs) || !S_ISREG(fs.st_mode) || fs.st_nlink != 1) {
      close(f);
      return err_set(e, ERR_INVALID, "store",
                     "session %s: %s is not a plain lock file (a link or a special file?); "
                     "remove it",
                     name, path);
    }
    if (flock(f, LOCK_EX | LOCK_NB)) {
      int err = errno;
      char pid[32] = "";
      ssize_t n = read(f, pid, sizeof pid - 1);
      pid[n > 0 ? n : 0] = 0;
      pid[strcspn(pid, "\n")] = 0;
      close(f);
      if (err != EWOULDBLOCK)
        return err_set(e, ERR_IO, "store", "session %s: lock %s: %s", name, path, strerror(err));
      return err_set(e, ERR_DENIED, "session_busy",
                     "session %s is open in another chat%s%s%s; one chat per session at a time "
                     "(end that one, or pick another --session)",
                     name, *pid ? " (pid " : "", pid, *pid ? ")" : "");
    }
    /* The name must still be this file: a lock taken on one that was
     * replaced meanwhile holds nothing. */
    struct stat a, b;
    if (fstat(f, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
      char pid[32];
      int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
      if (ftruncate(f, 0) == 0) (void)!pwrite(f, pid, (size_t)n, 0);
      *fd = f;
      return 0;
    }
    close(f);
  }
  return err_set(e, ERR_IO, "store", "session %s: %s keeps changing", name, path);
}

void session_release(int fd) {
  if (fd >= 0) close(fd); /* and with it the lock */
}

int session_load(struct store *s, const char *name, cJSON **messages, int *exists, struct err *e) {
  *messages = cJSON_CreateArray();
  *exists = 0;
  sqlite3_stmt *st = NULL;
  if (store_prepare(s, "SELECT 1 FROM sessions WHERE name = ?1", &st, e)) return ERR_IO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  *exists = sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
  if (store_prepare(s, "SELECT seq, content FROM messages WHERE session = ?1 ORDER BY seq", &st, e))
    return ERR_IO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  int rc = 0, r;
  while ((r = sqlite3_step(st)) == SQLITE_ROW) {
    const char *text = (const char *)sqlite3_column_text(st, 1);
    cJSON *m = json_parse_str(text, 0, NULL);
    if (!cJSON_IsObject(m) || !cJSON_IsString(cJSON_GetObjectItem(m, "role"))) {
      cJSON_Delete(m);
      rc = err_set(e, ERR_INVALID, "store", "session '%s': message %d is not a stored message",
                   name, sqlite3_column_int(st, 0));
      break;
    }
    cJSON_AddItemToArray(*messages, m);
  }
  if (!rc && r != SQLITE_DONE) rc = store_error(s, e, "session: load");
  sqlite3_finalize(st);
  return rc;
}

int session_save(struct store *s, const char *name, const cJSON *messages, struct err *e) {
  if (store_begin(s, e)) return ERR_IO;
  sqlite3_stmt *st = NULL;
  double now = util_now();
  int rc = store_prepare(s,
                         "INSERT INTO sessions (name, created, updated) VALUES (?1, ?2, ?2) "
                         "ON CONFLICT(name) DO UPDATE SET updated = ?2",
                         &st, e);
  if (!rc) {
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 2, now);
    if (sqlite3_step(st) != SQLITE_DONE) rc = store_error(s, e, "session: save");
    sqlite3_finalize(st);
  }
  if (!rc && !(rc = store_prepare(s, "DELETE FROM messages WHERE session = ?1", &st, e))) {
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) rc = store_error(s, e, "session: save");
    sqlite3_finalize(st);
  }
  if (!rc && !(rc = store_prepare(s,
                                  "INSERT INTO messages (session, seq, role, content, ts) "
                                  "VALUES (?1, ?2, ?3, ?4, ?5)",
                                  &st, e))) {
    int seq = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, messages) {
      char *text = json_print(m, 0);
      const char *role = cJSON_GetStringValue(cJSON_GetObjectItem(m, "role"));
      sqlite3_reset(st);
      sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
      sqlite3_bind_int(st, 2, ++seq);
      sqlite3_bind_text(st, 3, role ? role : "", -1, SQLITE_STATIC);
      sqlite3_bind_text(st, 4, text ? text : "{}", -1, SQLITE_TRANSIENT);
      sqlite3_bind_double(st, 5, now);
      free(text);
      if (sqlite3_step(st) != SQLITE_DONE) {
        rc = store_error(s, e, "session: save message");
        break;
      }
    }
    sqlite3_finalize(st);
  }
  if (rc) {
    store_rollback(s);
    return rc;
  }
  return store_commit(s, e);
}

int session_link_run(struct store *s, const char *name, const char *run_id, struct err *e) {
  sqlite3_stmt *st = NULL;
  if (store_prepare(s, "UPDATE runs SET session = ?1 WHERE id = ?2", &st, e)) return ERR_IO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, run_id, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : store_error(s, e, "session: link run");
  sqlite3_finalize(st);
  return rc;
}

int session_list(struct store *s, cJSON **out, struct err *e) {
  sqlite3_stmt *st = NULL;
  if (store_prepare(s,
                    "SELECT s.name, s.created, s.updated,"
                    " (SELECT count(*) FROM messages m WHERE m.session = s.name),"
                    " (SELECT count(*) FROM runs r WHERE r.session = s.name),"
                    " (SELECT content FROM messages m WHERE m.session = s.name AND m.role = 'user'"
                    "  AND json_extract(m.content, '$.content') NOT LIKE '[luagent]%'"
                    "  ORDER BY seq DESC LIMIT 1)"
                    " FROM sessions s ORDER BY s.updated DESC, s.name",
                    &st, e))
    return ERR_IO;
  cJSON *arr = cJSON_CreateArray();
  int r;
  while ((r = sqlite3_step(st)) == SQLITE_ROW) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", (const char *)sqlite3_column_text(st, 0));
    cJSON_AddNumberToObject(o, "created", sqlite3_column_double(st, 1));
    cJSON_AddNumberToObject(o, "updated", sqlite3_column_double(st, 2));
    cJSON_AddNumberToObject(o, "messages", sqlite3_column_int(st, 3));
    cJSON_AddNumberToObject(o, "runs", sqlite3_column_int(st, 4));
    const char *last = (const char *)sqlite3_column_text(st, 5);
    cJSON *lm = json_parse_str(last, 0, NULL);
    const char *lt = cJSON_GetStringValue(cJSON_GetObjectItem(lm, "content"));
    cJSON_AddStringToObject(o, "last_user", lt ? lt : "");
    cJSON_Delete(lm);
    cJSON_AddItemToArray(arr, o);
  }
  sqlite3_finalize(st);
  if (r != SQLITE_DONE) {
    cJSON_Delete(arr);
    return store_error(s, e, "sessions: list");
  }
  *out = arr;
  return 0;
}

int session_delete(struct store *s, const char *name, struct err *e) {
  if (store_begin(s, e)) return ERR_IO;
  sqlite3_stmt *st = NULL;
  int rc = store_prepare(s, "DELETE FROM sessions WHERE name = ?1", &st, e);
  int changed = 0;
  if (!rc) {
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) rc = store_error(s, e, "sessions: delete");
    changed = sqlite3_changes(store_db(s));
    sqlite3_finalize(st);
  }
  if (!rc && !(rc = store_prepare(s, "DELETE FROM messages WHERE session = ?1", &st, e))) {
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) rc = store_error(s, e, "sessions: delete");
    sqlite3_finalize(st);
  }
  if (rc) {
    store_rollback(s);
    return rc;
  }
  if ((rc = store_commit(s, e))) return rc;
  if (!changed)
    return err_set(e, ERR_NOTFOUND, "not_found",
                   "no session named '%s' (see `luagent sessions list`)", name);
  return 0;
}

int session_tainted(struct store *s, const char *name) {
  sqlite3_stmt *st = NULL;
  struct err e = {0};
  int t = 0;
  if (store_prepare(s, "SELECT tainted FROM sessions WHERE name = ?", &st, &e)) return 0;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) t = sqlite3_column_int(st, 0) != 0;
  sqlite3_finalize(st);
  return t;
}

int session_set_tainted(struct store *s, const char *name, struct err *e) {
  sqlite3_stmt *st = NULL;
  if (store_prepare(s, "UPDATE sessions SET tainted = 1 WHERE name = ?", &st, e)) return ERR_IO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : store_error(s, e, "session: mark tainted");
  sqlite3_finalize(st);
  return rc;
}
