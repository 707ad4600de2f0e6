/* audit_anchor.c - the head as a line of text, and the anchor file that
 * keeps those lines outside the database (see audit.h for why the chain
 * needs a witness it cannot rewrite). audit.c writes a line from inside an
 * append (audit__anchor_write); audit_verify.c reads them back. */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "audit.h"
#include "audit_impl.h"
#include "util.h"

/* --- the anchor file ----------------------------------------------------
 *
 * One line per head, written with one write() on an O_APPEND descriptor
 * (so lines from concurrent processes never interleave), fsync'd when
 * durable (see audit.h).
 * Lines may arrive out of seq order when processes race; verify does not
 * care, every line must simply still be in the chain.
 */

void audit_head_format(const struct audit_head *h, char *out, size_t n) {
  snprintf(out, n, "seq=%lld rows=%lld hash=%s", h->seq, h->rows, h->hash);
}

static int parse_count(const char *v, size_t n, long long *out) {
  if (n == 0 || n > 18) return -1;
  long long x = 0;
  for (size_t i = 0; i < n; i++) {
    if (v[i] < '0' || v[i] > '9') return -1;
    x = x * 10 + (v[i] - '0');
  }
  *out = x;
  return 0;
}

/* Parses "seq=N rows=N hash=H [ts=T] [sig=S]" (fields in any order, each
 * once, separated by single or repeated spaces). need_ts: the anchor file's
 * lines carry a timestamp; a pinned head need not. */
int audit__head_parse(const char *text, int need_ts, struct audit_head *h, struct err *e) {
  memset(h, 0, sizeof *h);
  h->rows = -1;
  int have_seq = 0, have_hash = 0, have_ts = 0;
  const char *p = text;
  while (*p) {
    if (*p == ' ') {
      p++;
      continue;
    }
    const char *end = strchr(p, ' ');
    if (!end) end = p + strlen(p);
    const char *eq = memchr(p, '=', (size_t)(end - p));
    if (!eq)
      return err_set(e, ERR_INVALID, "audit", "'%.*s' is not a field (expected name=value)",
                     (int)(end - p > 40 ? 40 : end - p), p);
    size_t kn = (size_t)(eq - p), vn = (size_t)(end - eq - 1);
    const char *v = eq + 1;
    if (kn == 3 && !strncmp(p, "seq", 3)) {
      if (have_seq++ || parse_count(v, vn, &h->seq))
        return err_set(e, ERR_INVALID, "audit", "seq must be given once, as a number");
    } else if (kn == 4 && !strncmp(p, "rows", 4)) {
      if (h->rows >= 0 || parse_count(v, vn, &h->rows))
        return err_set(e, ERR_INVALID, "audit", "rows must be given once, as a number");
    } else if (kn == 4 && !strncmp(p, "hash", 4)) {
      if (have_hash++ || vn != 64 || !is_hex(v, vn))
        return err_set(e, ERR_INVALID, "audit",
                       "hash must be given once, as 64 lowercase hex digits");
      memcpy(h->hash, v, 64);
      h->hash[64] = 0;
    } else if (kn == 2 && !strncmp(p, "ts", 2)) {
      if (have_ts++ || vn == 0 || vn > 40)
        return err_set(e, ERR_INVALID, "audit", "ts must be given once");
    } else if (kn == 3 && !strncmp(p, "sig", 3)) {
      if (h->sig[0] || vn != 2 * crypto_sign_BYTES || !is_hex(v, vn))
        return err_set(e, ERR_INVALID, "audit",
                       "sig must be given once, as %d lowercase hex digits", 2 * crypto_sign_BYTES);
      memcpy(h->sig, v, vn);
      h->sig[vn] = 0;
    } else {
      return err_set(e, ERR_INVALID, "audit",
                     "unknown field '%.*s' (expected seq, rows, hash, ts, sig)",
                     (int)(kn > 40 ? 40 : kn), p);
    }
    p = end;
  }
  if (!have_seq || !have_hash)
    return err_set(e, ERR_INVALID, "audit",
                   "seq= and hash= are required (as `luagent audit head` prints)");
  if (need_ts && (!have_ts || h->rows < 0))
    return err_set(e, ERR_INVALID, "audit", "rows= and ts= are required in an anchor line");
  if (h->rows < 0) h->rows = h->seq;
  return 0;
}

int audit_head_parse(const char *text, struct audit_head *h, struct err *e) {
  int rc = audit__head_parse(text ? text : "", 0, h, e);
  if (rc) err_prefix(e, "head '%.80s'", text ? text : "");
  return rc;
}

/* The anchor line, newline included. */
static void anchor_line(const struct audit_head *h, char *out, size_t n) {
  char when[40];
  double now = util_now();
  time_t t = (time_t)now;
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  char head[200];
  audit_head_format(h, head, sizeof head);
  snprintf(out, n, "%s ts=%s%s%s\n", head, when, h->sig[0] ? " sig=" : "", h->sig);
}

/* Makes the database's committed transactions durable. In WAL mode with
 * synchronous=NORMAL a commit is not fsync'd (a power cut may undo it);
 * an anchor must not outlive the rows it records, so the log is synced
 * first. fsync through any descriptor flushes the file. No -wal file: the
 * last checkpoint synced everything already. */
static int sync_db(struct store *s, struct err *e) {
  char wal[4200];
  snprintf(wal, sizeof wal, "%s-wal", store_path(s));
  int fd = open(wal, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : err_set(e, ERR_IO, "audit", "%s: %s", wal, strerror(errno));
  int rc = fsync(fd) ? err_set(e, ERR_IO, "audit", "%s: fsync: %s", wal, strerror(errno)) : 0;
  close(fd);
  return rc;
}

/* Appends one line for h to the anchor file (h NULL: none, only the
 * sync). durable: fsync the database's log first and the anchor file
 * after (see audit.h for when). */
int audit__anchor_write(struct store *s, const struct audit_opts *o, const struct audit_head *h,
                        int durable, struct err *e) {
  char path[4200], line[512];
  audit__anchor_path(s, o, path, sizeof path);
  int rc = durable ? sync_db(s, e) : 0;
  if (rc) return rc;
  /* O_NONBLOCK and the type check: a FIFO put there must not hang us. */
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0)
    return err_set(e, ERR_IO, "audit", "anchor file %s: %s", path,
                   errno == ENXIO ? "not a regular file (a FIFO)" : strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
    close(fd);
    return err_set(e, ERR_IO, "audit", "anchor file %s: not a regular file", path);
  }
  if (h) {
    anchor_line(h, line, sizeof line);
    size_t n = strlen(line);
    /* Every writer takes the file's lock: a short write (a full disk, a
     * file size limit) is cut back off before anyone appends after it.
     * A disk-full moment then costs the line it could not write, never a
     * fragment that every later verify would read as tampering. */
    int locked = flock(fd, LOCK_EX) == 0;
    off_t end = lseek(fd, 0, SEEK_END);
    ssize_t w = write(fd, line, n); /* one write: a line is never split */
    if (w != (ssize_t)n) {
      int err = w < 0 ? errno : ENOSPC;
      int cut = w <= 0 || (locked && end >= 0 && ftruncate(fd, end) == 0);
      rc = err_set(e, ERR_IO, "audit", "anchor file %s: %s%s", path,
                   w < 0 ? strerror(err) : "short write (disk full?)",
                   cut ? "" : "; the partial line could not be removed");
    }
    if (locked) flock(fd, LOCK_UN);
  }
  if (!rc && durable && fsync(fd))
    rc = err_set(e, ERR_IO, "audit", "anchor file %s: fsync: %s", path, strerror(errno));
  close(fd);
  return rc;
}

/* The last complete line of the anchor file, parsed; 1 when there is one
 * and it parses, 0 otherwise (missing file, empty, garbled: anchor anew). */
static int anchor_last(const char *path, struct audit_head *h) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 0;
  char buf[1024];
  struct stat sb;
  int ok = 0;
  if (!fstat(fd, &sb) && S_ISREG(sb.st_mode) && sb.st_size > 0) {
    off_t from = sb.st_size > (off_t)sizeof buf - 1 ? sb.st_size - (off_t)sizeof buf + 1 : 0;
    ssize_t n = pread(fd, buf, sizeof buf - 1, from);
    if (n > 0 && buf[n - 1] == '\n') {
      buf[n - 1] = 0;
      char *start = strrchr(buf, '\n');
      start = start ? start + 1 : (from == 0 ? buf : NULL);
      if (start && !audit__head_parse(start, 1, h, NULL)) ok = 1;
    }
  }
  close(fd);
  return ok;
}


int audit_anchor(struct store *s, const struct audit_opts *opts, int durable, struct err *e) {
  struct audit_head h, last;
  int have = 0;
  if (!s) return err_set(e, ERR_INVALID, "audit", "audit_anchor: no store");
  int rc = audit__head_read(s, &h, &have, e);
  if (rc || !have || h.seq == 0) return rc;
  char path[4200];
  audit__anchor_path(s, opts, path, sizeof path);
  int there = anchor_last(path, &last) && last.seq == h.seq && !strcmp(last.hash, h.hash);
  if (there && !durable) return 0;
  /* Already there but maybe written unsynced: sync without a new line. */
  return audit__anchor_write(s, opts, there ? NULL : &h, durable, e);
}
