/* audit.c - see audit.h. */
#include "audit.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "audit_impl.h"
#include "json.h"
#include "secrets.h"
#include "util.h"

void audit__row_free(struct row *r) {
  for (int i = 0; i < C_N; i++) free(r->f[i]);
  memset(r, 0, sizeof *r);
}

void audit_num_text(double v, char out[17]) {
  static const char hx[] = "0123456789abcdef";
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  for (int i = 15; i >= 0; i--, bits >>= 4) out[i] = hx[bits & 15];
  out[16] = 0;
}

static char *fmt_num(double v) {
  char buf[17];
  audit_num_text(v, buf);
  return xstrdup(buf);
}

/* Frames one field (n bytes) into p: 'N' for NULL, else 'S' + 8-byte
 * big-endian length + bytes, so no two different rows hash the same
 * stream. Returns the bytes written. */
static size_t frame_field(unsigned char *p, const char *s, size_t n) {
  if (!s) {
    p[0] = 'N';
    return 1;
  }
  p[0] = 'S';
  uint64_t be = (uint64_t)n;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  be = __builtin_bswap64(be);
#endif
  memcpy(p + 1, &be, 8); /* big-endian */
  memcpy(p + 9, s, n);
  return 9 + n;
}

/* The row's hash: keyed BLAKE2b over prev_hash then the columns, framed
 * (then the extra field, when there is one). The stream is built first and
 * hashed in one call (the same digest as feeding the frames one by one, at
 * a fraction of the cost). */
_Static_assert((int)AUDIT_F_SEQ == (int)C_SEQ && (int)AUDIT_F_DETAIL == (int)C_DETAIL &&
                   (int)AUDIT_NFIELDS == (int)C_PREV,
               "audit.h's field order is the chain's column order");

/* n[i]: strlen of f[i] (unused for NULL). Each length is measured once. */
static void frame_hash(const char *prev, const char *const f[AUDIT_NFIELDS],
                       const size_t flen[AUDIT_NFIELDS], const char *extra, char out[65]) {
  unsigned char d[32], stack[2048], *buf = stack;
  size_t plen = prev ? strlen(prev) : 0, xlen = extra ? strlen(extra) : 0;
  size_t need = (prev ? 9 + plen : 1) + (extra ? 9 + xlen : 0);
  for (int i = 0; i < AUDIT_NFIELDS; i++) need += f[i] ? 9 + flen[i] : 1;
  if (need > sizeof stack) buf = xmalloc(need);
  size_t off = frame_field(buf, prev, plen);
  for (int i = 0; i < AUDIT_NFIELDS; i++) off += frame_field(buf + off, f[i], flen[i]);
  if (extra) off += frame_field(buf + off, extra, xlen);
  crypto_generichash(d, sizeof d, buf, off, (const unsigned char *)"luagent-audit-v1", 16);
  if (buf != stack) free(buf);
  util_hex(d, sizeof d, out);
}

void audit_fields_hash(const char *prev, const char *const f[AUDIT_NFIELDS], const char *extra,
                       char out[65]) {
  size_t flen[AUDIT_NFIELDS];
  for (int i = 0; i < AUDIT_NFIELDS; i++) flen[i] = f[i] ? strlen(f[i]) : 0;
  frame_hash(prev, f, flen, extra, out);
}

static void fields_hash(const char *const f[C_N], char out[65]) {
  audit_fields_hash(f[C_PREV], f, NULL, out);
}

void audit__row_hash(const struct row *r, char out[65]) {
  fields_hash((const char *const *)r->f, out);
}

void audit__row_from_stmt(sqlite3_stmt *st, struct row *r) {
  for (int i = 0; i < C_N; i++) {
    int t = sqlite3_column_type(st, i);
    if (t == SQLITE_NULL) {
      r->f[i] = NULL;
    } else if (i == C_SEQ) {
      char buf[32];
      snprintf(buf, sizeof buf, "%lld", (long long)sqlite3_column_int64(st, i));
      r->f[i] = xstrdup(buf);
    } else if ((i == C_TS || i == C_DUR) && (t == SQLITE_FLOAT || t == SQLITE_INTEGER)) {
      r->f[i] = fmt_num(sqlite3_column_double(st, i));
    } else {
      /* Exactly what is stored: a number column holding text ("1796... 
       * approved-by-root" reads as its numeric prefix) or a text holding a
       * zero byte (strlen would stop there) is hashed as something no row
       * was ever written with, so the row fails its hash. */
      const unsigned char *s = sqlite3_column_text(st, i);
      int n = sqlite3_column_bytes(st, i);
      int odd = (i == C_TS || i == C_DUR) || (s && (int)strlen((const char *)s) != n);
      if (odd) {
        struct sbuf b = {0};
        sbuf_puts(&b, "\x01not as written:");
        sbuf_append(&b, s ? (const char *)s : "", s ? strlen((const char *)s) : 0);
        r->f[i] = sbuf_take(&b);
      } else {
        r->f[i] = xstrdup(s ? (const char *)s : "");
      }
    }
  }
}

/* --- the signing key ---------------------------------------------------- */

/* <the database's folder>/name, or given when not NULL. */
static void beside_db(struct store *s, const char *given, const char *name, char *out, size_t n) {
  if (given) {
    snprintf(out, n, "%s", given);
    return;
  }
  const char *p = store_path(s);
  const char *slash = strrchr(p, '/');
  if (slash)
    snprintf(out, n, "%.*s/%s", (int)(slash - p), p, name);
  else
    snprintf(out, n, "%s", name);
}

static void default_key_path(struct store *s, const struct audit_opts *o, char *out, size_t n) {
  beside_db(s, o ? o->key_path : NULL, "audit.key", out, n);
}

void audit__anchor_path(struct store *s, const struct audit_opts *o, char *out, size_t n) {
  beside_db(s, o ? o->anchor_path : NULL, "audit.anchor", out, n);
}

/* Loads (or creates) the Ed25519 key pair from its 32-byte seed. */

/* The pinned public key (audit.public_key), when there is one. */
int audit__pinned_key(const struct audit_opts *o, unsigned char pk[crypto_sign_PUBLICKEYBYTES],
               struct err *e) {
  size_t got = 0;
  if (!o || !o->public_key) return 1;
  if (strlen(o->public_key) != 2 * crypto_sign_PUBLICKEYBYTES ||
      sodium_hex2bin(pk, crypto_sign_PUBLICKEYBYTES, o->public_key, strlen(o->public_key), NULL,
                     &got, NULL) ||
      got != crypto_sign_PUBLICKEYBYTES)
    return err_set(e, ERR_INVALID, "config",
                   "luagent.lua: audit.public_key must be %d hex digits (see `luagent audit key`)",
                   2 * crypto_sign_PUBLICKEYBYTES);
  return 0;
}

/* Loads (create != 0: makes on first use) the signing key. A chain that
 * already carries a signed head never gets a new key: a deleted audit.key
 * must not let the next process re-sign whatever the table now holds. A
 * key that is not the pinned one is refused. */
int audit__load_signer(struct store *s, const struct audit_opts *o, int create,
                unsigned char pk[crypto_sign_PUBLICKEYBYTES],
                unsigned char sk[crypto_sign_SECRETKEYBYTES], struct err *e) {
  char path[4200];
  unsigned char seed[crypto_sign_SEEDBYTES], pin[crypto_sign_PUBLICKEYBYTES];
  default_key_path(s, o, path, sizeof path);
  int pinned = audit__pinned_key(o, pin, e);
  if (pinned < 0) return pinned;
  if (create && access(path, F_OK) != 0) {
    struct audit_head h;
    int have = 0;
    struct err he = {0};
    if (pinned == 0 || (!audit__head_read(s, &h, &have, &he) && have && h.sig[0]))
      return err_set(e, ERR_INVALID, "audit",
                     "the audit signing key %s is missing, but %s: restore the key (luagent "
                     "never makes a new one for a signed chain)",
                     ".luagent/audit.key",
                     pinned == 0 ? "luagent.lua pins audit.public_key" : "the chain's head is signed");
  }
  int rc = secrets_keyfile(path, seed, sizeof seed, create, e);
  if (rc) return rc;
  crypto_sign_seed_keypair(pk, sk, seed);
  sodium_memzero(seed, sizeof seed);
  if (pinned == 0 && sodium_memcmp(pk, pin, sizeof pin)) {
    sodium_memzero(sk, crypto_sign_SECRETKEYBYTES);
    return err_set(e, ERR_INVALID, "audit",
                   ".luagent/audit.key is not the key luagent.lua pins (audit.public_key)");
  }
  return 0;
}

int audit_public_key(struct store *s, const struct audit_opts *o, char out[65], struct err *e) {
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  int rc = audit__load_signer(s, o, 0, pk, sk, e);
  sodium_memzero(sk, sizeof sk);
  if (!rc) util_hex(pk, sizeof pk, out);
  return rc;
}

/* What a head signature signs. v2 (with the row count) since the head
 * carries one; a head written before that (rows NULL) was signed as v1. */
static void head_message(long long seq, long long rows, const char *hash, char *out, size_t n) {
  if (rows < 0)
    snprintf(out, n, "luagent-audit-head:%lld:%s", seq, hash);
  else
    snprintf(out, n, "luagent-audit-head:v2:%lld:%lld:%s", seq, rows, hash);
}

/* 1 when sighex is a valid signature of the head by pk. */
int audit__head_sig_ok(const unsigned char pk[crypto_sign_PUBLICKEYBYTES], long long seq,
                long long rows, const char *hash, const char *sighex) {
  unsigned char sig[crypto_sign_BYTES];
  size_t bin = 0;
  char msg[160];
  head_message(seq, rows, hash, msg, sizeof msg);
  return !sodium_hex2bin(sig, sizeof sig, sighex, strlen(sighex), NULL, &bin, NULL) &&
         bin == sizeof sig &&
         !crypto_sign_verify_detached(sig, (const unsigned char *)msg, strlen(msg), pk);
}

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

static int is_hex(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) return 0;
  return 1;
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
static int anchor_write(struct store *s, const struct audit_opts *o, const struct audit_head *h,
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
    ssize_t w = write(fd, line, n); /* one write: a line is never split */
    if (w != (ssize_t)n)
      rc = err_set(e, ERR_IO, "audit", "anchor file %s: %s", path,
                   w < 0 ? strerror(errno) : "short write (disk full?)");
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
  return anchor_write(s, opts, there ? NULL : &h, durable, e);
}

/* --- append ------------------------------------------------------------- */

int audit_append(struct store *s, const struct audit_opts *opts, const struct audit_entry *a,
                 long long *seq_out, struct err *e) {
  return audit_append_batch(s, opts, a, a ? 1 : 0, seq_out, e);
}

/* A row ready to insert: its fields as hashed (pointing into the entry or
 * into the buffers here) and its hash. */
struct ready {
  const char *f[C_N];
  size_t n[C_N];
  char seqbuf[24], tsbuf[17], durbuf[17];
  long long seq;
  double ts;
  char hash[65];
};

/* Fills r for entry a as row seq after prev (which must outlive r). */
static void ready_row(struct ready *r, long long seq, const char *prev,
                      const struct audit_entry *a) {
  memset(r->f, 0, sizeof r->f);
  /* seq as row_from_stmt's "%lld" reads it back (seq >= 1) */
  char tmp[24];
  int k = 0;
  for (unsigned long long v = (unsigned long long)seq; k == 0 || v; v /= 10)
    tmp[k++] = (char)('0' + v % 10);
  for (int i = 0; i < k; i++) r->seqbuf[i] = tmp[k - 1 - i];
  r->seqbuf[k] = 0;
  r->seq = seq;
  r->ts = a->ts > 0 ? a->ts : util_now();
  audit_num_text(r->ts, r->tsbuf); /* as fmt_num, so verify reads the same */
  r->f[C_SEQ] = r->seqbuf;
  r->f[C_TS] = r->tsbuf;
  r->f[C_RUN] = a->run_id;
  r->f[C_CKIND] = a->caller_kind;
  r->f[C_CNAME] = a->caller_name;
  r->f[C_TOOL] = a->tool;
  r->f[C_AHASH] = a->args_hash;
  r->f[C_DEC] = a->decision;
  r->f[C_DBY] = a->decided_by;
  r->f[C_APPR] = a->approver;
  r->f[C_STATUS] = a->status;
  r->f[C_DETAIL] = a->detail;
  if (a->duration_ms >= 0) {
    audit_num_text(a->duration_ms, r->durbuf);
    r->f[C_DUR] = r->durbuf;
  }
  for (int i = 0; i < AUDIT_NFIELDS; i++) r->n[i] = r->f[i] ? strlen(r->f[i]) : 0;
  r->f[C_PREV] = prev;
  frame_hash(prev, r->f, r->n, NULL, r->hash);
}

/* Binds r as the row whose first parameter is base + 1. NULL fields stay
 * unbound: the statement's bindings were cleared before. */
static void bind_row(sqlite3_stmt *ins, int base, const struct ready *r,
                     const struct audit_entry *a) {
  sqlite3_bind_int64(ins, base + 1, r->seq);
  sqlite3_bind_double(ins, base + 2, r->ts);
  for (int i = C_RUN; i <= C_DETAIL; i++) {
    if (i == C_DUR) {
      if (a->duration_ms >= 0) sqlite3_bind_double(ins, base + i + 1, a->duration_ms);
    } else if (r->f[i]) {
      sqlite3_bind_text(ins, base + i + 1, r->f[i], (int)r->n[i], SQLITE_STATIC);
    }
  }
  sqlite3_bind_text(ins, base + C_PREV + 1, r->f[C_PREV], -1, SQLITE_STATIC);
  sqlite3_bind_text(ins, base + C_HASH + 1, r->hash, 64, SQLITE_STATIC);
}

/* Rows go in INSERT statements of up to INSERT_ROWS rows each: most of a
 * one-row INSERT's cost is the statement (its start, cursor and halt),
 * not the row. */
#define INSERT_ROWS 8
#define ROW_PARAMS "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
static const char *const insert_sql[2] = {
    "INSERT INTO audit (" AUDIT_COLS ") VALUES " ROW_PARAMS,
    "INSERT INTO audit (" AUDIT_COLS ") VALUES " ROW_PARAMS "," ROW_PARAMS "," ROW_PARAMS
    "," ROW_PARAMS "," ROW_PARAMS "," ROW_PARAMS "," ROW_PARAMS "," ROW_PARAMS};
_Static_assert(C_N == 15, "ROW_PARAMS has one parameter per column");

/* Inserts rows[0..n) as seq *last + 1, ... after prev (65 bytes, updated
 * to the last row's hash, as *last to its seq). */
static int insert_rows(struct store *s, const struct audit_entry *rows, size_t n,
                       long long *last, char prev[65], struct err *e) {
  struct ready r[INSERT_ROWS];
  size_t i = 0;
  while (i < n) {
    size_t k = n - i >= INSERT_ROWS ? INSERT_ROWS : 1;
    sqlite3_stmt *ins = NULL;
    int rc = store_cached(s, insert_sql[k == INSERT_ROWS], &ins, e);
    if (rc) return rc;
    for (size_t j = 0; j < k; j++) {
      ready_row(&r[j], *last + 1 + (long long)j, j ? r[j - 1].hash : prev, &rows[i + j]);
      bind_row(ins, (int)j * C_N, &r[j], &rows[i + j]);
    }
    rc = sqlite3_step(ins) == SQLITE_DONE ? 0 : store_error(s, e, "audit: append");
    store_release(s, ins); /* drops the pointers to these rows' buffers */
    if (rc) return rc;
    *last += (long long)k;
    memcpy(prev, r[k - 1].hash, 65);
    i += k;
  }
  return 0;
}

/* The head this process signed last: when the head still is that one, its
 * signature need not be checked again (the common case, one verify saved
 * per append); a head another process wrote is checked. */
static pthread_mutex_t signed_mu = PTHREAD_MUTEX_INITIALIZER;
static long long signed_seq = -1;
static char signed_hash[65];

/* Before appending: the chain's tip must be what the head says, and with
 * signing on the head's signature must hold (and exist, once the key is
 * pinned). Otherwise the table was changed outside luagent, and appending
 * (then signing a new head) would vouch for whatever it holds now: refuse,
 * so every call is denied until an operator looks (`audit verify`). */
static int tip_check(struct store *s, const struct audit_opts *opts,
                     const unsigned char *pk, long long last, const char *tip, struct err *e) {
  struct audit_head h;
  int have = 0;
  int rc = audit__head_read(s, &h, &have, e);
  if (rc || !have) return rc;
  if (h.seq != last || strcmp(h.hash, tip))
    return err_set(e, ERR_INVALID, "audit",
                   "the audit head (row %lld) does not match the chain's last row (%lld): the "
                   "chain was changed outside luagent; run `luagent audit verify`",
                   h.seq, last);
  if (!pk || last == 0) return 0;
  if (!h.sig[0])
    return opts && opts->public_key
               ? err_set(e, ERR_INVALID, "audit",
                         "the audit head (row %lld) is not signed although luagent.lua pins the "
                         "signing key; run `luagent audit verify`",
                         h.seq)
               : 0; /* signing was just turned on */
  pthread_mutex_lock(&signed_mu);
  int ours = signed_seq == h.seq && !strcmp(signed_hash, h.hash);
  pthread_mutex_unlock(&signed_mu);
  if (!ours && !audit__head_sig_ok(pk, h.seq, h.rows, h.hash, h.sig))
    return err_set(e, ERR_INVALID, "audit",
                   "the audit head's signature (row %lld) is invalid: the chain was changed "
                   "outside luagent; run `luagent audit verify`",
                   h.seq);
  return 0;
}

int audit_append_batch(struct store *s, const struct audit_opts *opts,
                       const struct audit_entry *rows, size_t n, long long *seq_out,
                       struct err *e) {
  sqlite3_stmt *st = NULL;
  int rc = 0;
  char hash[65] = ZERO_HASH;
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  int sign = opts && opts->sign;

  if (sodium_init() < 0) return err_set(e, ERR_FAIL, "audit", "libsodium failed to initialise");
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (!rows[i].decision) return err_set(e, ERR_INVALID, "audit", "audit row without a decision");
  if (sign && (rc = audit__load_signer(s, opts, 1, pk, sk, e))) return rc;
  if ((rc = store_begin(s, e))) goto out_nolock;

  /* The chain's tip: the last row's seq and hash. */
  long long last = 0;
  char prev[65] = ZERO_HASH;
  /* Statements cached by the store: parsing them was most of the cost of a
   * one-row append. */
  if ((rc = store_cached(s, "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1", &st, e)))
    goto fail;
  int step = sqlite3_step(st);
  if (step == SQLITE_ROW) {
    last = sqlite3_column_int64(st, 0);
    const unsigned char *h = sqlite3_column_text(st, 1);
    snprintf(prev, sizeof prev, "%s", h ? (const char *)h : "");
  } else if (step != SQLITE_DONE) {
    rc = store_error(s, e, "audit: read chain tip");
    goto fail;
  }
  store_release(s, st);
  st = NULL;
  if ((rc = tip_check(s, opts, sign ? pk : NULL, last, prev, e))) goto fail;

  if ((rc = insert_rows(s, rows, n, &last, prev, e))) goto fail;
  memcpy(hash, prev, sizeof hash);

  /* The head: last seq, row count and hash, signed when asked. Rows are
   * numbered 1, 2, ... without gaps (verify checks that), so the count is
   * the last seq; it is stored and signed on its own so a head states how
   * many rows it vouches for. */
  struct audit_head head = {.seq = last, .rows = last};
  memcpy(head.hash, hash, sizeof head.hash);
  if (sign) {
    char msg[160];
    unsigned char sig[crypto_sign_BYTES];
    head_message(last, last, hash, msg, sizeof msg);
    crypto_sign_detached(sig, NULL, (const unsigned char *)msg, strlen(msg), sk);
    util_hex(sig, sizeof sig, head.sig);
  }
  if ((rc = store_cached(s,
                          "INSERT OR REPLACE INTO audit_head (id, seq, rows, hash, sig) "
                          "VALUES (1, ?1, ?2, ?3, ?4)",
                          &st, e)))
    goto fail;
  sqlite3_bind_int64(st, 1, last);
  sqlite3_bind_int64(st, 2, last);
  sqlite3_bind_text(st, 3, hash, -1, SQLITE_STATIC);
  if (sign)
    sqlite3_bind_text(st, 4, head.sig, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(st, 4);
  if (sqlite3_step(st) != SQLITE_DONE) {
    rc = store_error(s, e, "audit: update head");
    goto fail;
  }
  store_release(s, st);
  st = NULL;
  if ((rc = store_commit(s, e))) goto fail;
  if (seq_out) *seq_out = last;
  if (sign) {
    pthread_mutex_lock(&signed_mu);
    signed_seq = last;
    memcpy(signed_hash, hash, sizeof signed_hash);
    pthread_mutex_unlock(&signed_mu);
  }

  /* Every n-th row, the new head goes to the anchor file too: when this
   * batch took the chain across a multiple of n (stateless, so every
   * process anchors at the same rows). After the commit: an anchor must
   * never name a row that was rolled back. The rows are on record either
   * way, so a failure here is reported but does not fail the append (the
   * caller would write the rows again). */
  long every = opts && opts->anchor_every ? opts->anchor_every : AUDIT_ANCHOR_EVERY;
  long long first = last - (long long)n;
  if (every > 0 && first / every != last / every) {
    struct err ae = {0};
    int durable = first / AUDIT_ANCHOR_SYNC_EVERY != last / AUDIT_ANCHOR_SYNC_EVERY;
    if (anchor_write(s, opts, &head, durable, &ae))
      fprintf(stderr, "luagent: audit: the head (seq %lld) was not anchored: %s\n", last, ae.msg);
  }
  goto out_nolock;
fail:
  store_release(s, st);
  store_rollback(s);
out_nolock:
  sodium_memzero(sk, sizeof sk);
  return rc;
}

/* --- head --------------------------------------------------------------- */

/* *have = 0 and the empty head when there is no head record. */
int audit__head_read(struct store *s, struct audit_head *h, int *have, struct err *e) {
  sqlite3_stmt *st = NULL;
  memset(h, 0, sizeof *h);
  snprintf(h->hash, sizeof h->hash, "%s", ZERO_HASH);
  *have = 0;
  if (store_cached(s, "SELECT seq, rows, hash, sig FROM audit_head WHERE id = 1", &st, e))
    return ERR_IO;
  int step = sqlite3_step(st);
  if (step == SQLITE_ROW) {
    *have = 1;
    h->seq = sqlite3_column_int64(st, 0);
    /* NULL: a head written before heads had a count (signed as v1). */
    h->rows = sqlite3_column_type(st, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 1);
    const unsigned char *hh = sqlite3_column_text(st, 2), *sg = sqlite3_column_text(st, 3);
    snprintf(h->hash, sizeof h->hash, "%s", hh ? (const char *)hh : "");
    snprintf(h->sig, sizeof h->sig, "%s", sg ? (const char *)sg : "");
  }
  store_release(s, st);
  if (step != SQLITE_ROW && step != SQLITE_DONE) return store_error(s, e, "audit: read head");
  return 0;
}

int audit_head_read(struct store *s, struct audit_head *h, struct err *e) {
  int have;
  int rc = audit__head_read(s, h, &have, e);
  if (!rc && h->rows < 0) h->rows = h->seq;
  return rc;
}

/* --- compaction ---------------------------------------------------------
 *
 * Old rows can be pruned without breaking verification: a checkpoint row is
 * appended to the chain first (so it is hashed, chained, signed through the
 * head and anchored like any row), and its detail commits to what goes:
 *   checkpoint from=F to=K prev=<hash before row F> last=<hash of row K>
 *   digest=<BLAKE2b-256 of the hashes of rows F..K, in order>
 * Then rows F..K are deleted. verify starts the walk at row K+1, whose
 * prev_hash must be `last`; a chain whose first row is not 1 without such a
 * checkpoint has lost its beginning. */
static int checkpoint_parse(const char *detail, struct checkpoint *c) {
  if (!detail) return -1;
  memset(c, 0, sizeof *c);
  if (sscanf(detail, CHECKPOINT_FMT, &c->from, &c->to, c->prev, c->last, c->digest) != 5)
    return -1;
  return c->from >= 1 && c->to >= c->from && is_hex(c->prev, 64) && is_hex(c->last, 64) &&
                 is_hex(c->digest, 64)
             ? 0
             : -1;
}

/* The checkpoint that covers rows below `first` (the lowest seq left):
 * the latest checkpoint row with to == first - 1. 0 when found. */
int audit__checkpoint_for(struct store *s, long long first, struct checkpoint *c, struct err *e) {
  sqlite3_stmt *st = NULL;
  if (store_prepare(s,
                    "SELECT detail, seq, hash FROM audit WHERE decision = 'checkpoint' "
                    "ORDER BY seq DESC",
                    &st, e))
    return ERR_IO;
  int found = -1;
  while (found && sqlite3_step(st) == SQLITE_ROW) {
    struct checkpoint x;
    if (!checkpoint_parse((const char *)sqlite3_column_text(st, 0), &x) && x.to == first - 1) {
      x.seq = sqlite3_column_int64(st, 1);
      const unsigned char *h = sqlite3_column_text(st, 2);
      snprintf(x.hash, sizeof x.hash, "%s", h ? (const char *)h : "");
      *c = x;
      found = 0;
    }
  }
  sqlite3_finalize(st);
  return found;
}

int audit_compact(struct store *s, const struct audit_opts *opts, long long keep_from,
                  long long *pruned, struct err *e) {
  *pruned = 0;
  sqlite3_stmt *st = NULL;
  long long first = 0, last = 0;
  if (store_prepare(s, "SELECT min(seq), max(seq) FROM audit", &st, e)) return ERR_IO;
  if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
    first = sqlite3_column_int64(st, 0);
    last = sqlite3_column_int64(st, 1);
  }
  sqlite3_finalize(st);
  st = NULL;
  long long to = keep_from - 1;
  if (to > last) to = last;
  if (!first || to < first) return 0; /* nothing to prune */

  /* What the checkpoint commits to, read before it is appended. */
  char prev[65] = ZERO_HASH, lasthash[65] = "", dig[65];
  crypto_generichash_state hs;
  crypto_generichash_init(&hs, NULL, 0, 32);
  if (store_prepare(s, "SELECT seq, prev_hash, hash FROM audit WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq",
                    &st, e))
    return ERR_IO;
  sqlite3_bind_int64(st, 1, first);
  sqlite3_bind_int64(st, 2, to);
  long long want = first;
  int step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    const char *ph = (const char *)sqlite3_column_text(st, 1), *h = (const char *)sqlite3_column_text(st, 2);
    if (sqlite3_column_int64(st, 0) != want++ || !h || strlen(h) != 64) {
      sqlite3_finalize(st);
      return err_set(e, ERR_INVALID, "audit",
                     "audit compact: the chain has a gap or a damaged row before row %lld; run "
                     "`luagent audit verify` and keep the database as evidence",
                     to + 1);
    }
    if (want - 1 == first) snprintf(prev, sizeof prev, "%s", ph ? ph : "");
    crypto_generichash_update(&hs, (const unsigned char *)h, 64);
    snprintf(lasthash, sizeof lasthash, "%s", h);
  }
  sqlite3_finalize(st);
  if (step != SQLITE_DONE) return store_error(s, e, "audit: read rows to compact");
  unsigned char d[32];
  crypto_generichash_final(&hs, d, sizeof d);
  util_hex(d, sizeof d, dig);

  /* Refuse to compact a chain that does not verify: pruning would destroy
   * the evidence. */
  struct audit_report r;
  if (audit_verify(s, opts, NULL, &r, e)) return ERR_IO;
  if (r.problem[0])
    return err_set(e, ERR_INVALID, "audit", "audit compact: the chain does not verify (%s)",
                   r.problem);

  char detail[400];
  snprintf(detail, sizeof detail, "checkpoint from=%lld to=%lld prev=%s last=%s digest=%s", first,
           to, prev, lasthash, dig);
  struct audit_entry cp = {.decision = "checkpoint", .decided_by = "audit compact",
                           .detail = detail};
  long long cpseq;
  int rc = audit_append(s, opts, &cp, &cpseq, e);
  if (rc) return rc;
  /* The anchor file witnesses the checkpoint row (durably) before anything
   * is pruned: verify accepts a checkpoint only with that line, so one
   * written into state.db by anyone else hides nothing. */
  if ((rc = audit_anchor(s, opts, 1, e))) return rc;
  if ((rc = store_begin(s, e))) return rc;
  if (store_prepare(s, "DELETE FROM audit WHERE seq BETWEEN ?1 AND ?2", &st, e)) {
    store_rollback(s);
    return ERR_IO;
  }
  sqlite3_bind_int64(st, 1, first);
  sqlite3_bind_int64(st, 2, to);
  step = sqlite3_step(st);
  sqlite3_finalize(st);
  if (step != SQLITE_DONE) {
    rc = store_error(s, e, "audit: prune rows");
    store_rollback(s);
    return rc;
  }
  *pruned = sqlite3_changes(store_db(s));
  if ((rc = store_commit(s, e))) return rc;
  return audit_anchor(s, opts, 1, e); /* the checkpoint is on record outside */
}

/* --- tail --------------------------------------------------------------- */

int audit_tail(struct store *s, int n, int json, FILE *out, struct err *e) {
  sqlite3_stmt *st = NULL;
  if (n <= 0) n = 20;
  if (store_prepare(s,
                    "SELECT " AUDIT_COLS " FROM (SELECT * FROM audit ORDER BY seq DESC LIMIT ?1) "
                    "ORDER BY seq",
                    &st, e))
    return ERR_IO;
  sqlite3_bind_int(st, 1, n);
  static const char *const names[C_N] = {"seq",         "ts",        "run_id",    "caller_kind",
                                         "caller_name", "tool",      "args_hash", "decision",
                                         "decided_by",  "approver",  "status",    "duration_ms",
                                         "detail",      "prev_hash", "hash"};
  cJSON *arr = json ? cJSON_CreateArray() : NULL;
  int step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    if (json) {
      cJSON *o = cJSON_CreateObject();
      for (int i = 0; i < C_N; i++) {
        int t = sqlite3_column_type(st, i);
        if (t == SQLITE_NULL)
          cJSON_AddNullToObject(o, names[i]);
        else if (t == SQLITE_INTEGER || t == SQLITE_FLOAT)
          cJSON_AddNumberToObject(o, names[i], sqlite3_column_double(st, i));
        else
          cJSON_AddStringToObject(o, names[i], (const char *)sqlite3_column_text(st, i));
      }
      cJSON_AddItemToArray(arr, o);
      continue;
    }
    struct sbuf b = {0};
    sbuf_printf(&b, "%lld ", (long long)sqlite3_column_int64(st, C_SEQ));
    time_t t = (time_t)sqlite3_column_double(st, C_TS);
    struct tm tm;
    char when[32];
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    sbuf_printf(&b, "%s", when);
    static const int shown[] = {C_CKIND, C_CNAME, C_TOOL, C_DEC, C_DBY, C_APPR, C_STATUS};
    static const char *const label[] = {"caller", "name",     "tool",  "decision",
                                        "by",     "approver", "status"};
    for (size_t k = 0; k < sizeof shown / sizeof shown[0]; k++) {
      const unsigned char *v = sqlite3_column_text(st, shown[k]);
      if (!v || !*v) continue;
      sbuf_printf(&b, " %s=", label[k]);
      util_escape_text(&b, (const char *)v, strlen((const char *)v), 200);
    }
    if (sqlite3_column_type(st, C_DUR) != SQLITE_NULL)
      sbuf_printf(&b, " ms=%.3f", sqlite3_column_double(st, C_DUR));
    const unsigned char *ah = sqlite3_column_text(st, C_AHASH);
    if (ah && *ah) sbuf_printf(&b, " args=%.12s", (const char *)ah);
    const unsigned char *d = sqlite3_column_text(st, C_DETAIL);
    if (d && *d) {
      sbuf_puts(&b, " detail=\"");
      util_escape_text(&b, (const char *)d, strlen((const char *)d), 400);
      sbuf_puts(&b, "\"");
    }
    fprintf(out, "%s\n", b.s);
    sbuf_free(&b);
  }
  sqlite3_finalize(st);
  if (step != SQLITE_DONE) {
    cJSON_Delete(arr);
    return store_error(s, e, "audit: read");
  }
  if (json) {
    char *txt = json_print(arr, 0); /* the CLI's --json rule: one compact line */
    fprintf(out, "%s\n", txt);
    free(txt);
    cJSON_Delete(arr);
  }
  return 0;
}

/* --- signing a head kept elsewhere --------------------------------------- */

int audit_head_sign(struct store *s, const struct audit_opts *o, struct audit_head *h,
                    struct err *e) {
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  if (sodium_init() < 0) return err_set(e, ERR_FAIL, "audit", "libsodium failed to initialise");
  int rc = audit__load_signer(s, o, 1, pk, sk, e);
  if (!rc) {
    char msg[160];
    unsigned char sig[crypto_sign_BYTES];
    head_message(h->seq, h->rows, h->hash, msg, sizeof msg);
    crypto_sign_detached(sig, NULL, (const unsigned char *)msg, strlen(msg), sk);
    util_hex(sig, sizeof sig, h->sig);
  }
  sodium_memzero(sk, sizeof sk);
  return rc;
}

int audit_head_sig_check(struct store *s, const struct audit_opts *o, const struct audit_head *h,
                         struct err *e) {
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  if (sodium_init() < 0) return err_set(e, ERR_FAIL, "audit", "libsodium failed to initialise");
  int pinned = audit__pinned_key(o, pk, e);
  if (pinned < 0) return pinned;
  if (pinned != 0) {
    int rc = audit__load_signer(s, o, 0, pk, sk, e);
    sodium_memzero(sk, sizeof sk);
    if (rc) return rc;
  }
  return audit__head_sig_ok(pk, h->seq, h->rows, h->hash, h->sig);
}

static int other_message(const char *msg, struct err *e) {
  if (!strncmp(msg, "luagent-audit-head:", 19))
    return err_set(e, ERR_INVALID, "audit", "not a message to sign: it reads as a head's");
  return sodium_init() < 0 ? err_set(e, ERR_FAIL, "audit", "libsodium failed to initialise") : 0;
}

int audit_msg_sign(struct store *s, const struct audit_opts *o, const char *msg, char sig[129],
                   struct err *e) {
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  sig[0] = 0;
  int rc = other_message(msg, e);
  if (!rc) rc = audit__load_signer(s, o, 1, pk, sk, e);
  if (!rc) {
    unsigned char bin[crypto_sign_BYTES];
    crypto_sign_detached(bin, NULL, (const unsigned char *)msg, strlen(msg), sk);
    util_hex(bin, sizeof bin, sig);
  }
  sodium_memzero(sk, sizeof sk);
  return rc;
}

int audit_msg_sig_check(struct store *s, const struct audit_opts *o, const char *msg,
                        const char *sig, struct err *e) {
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  if (other_message(msg, e)) return -1;
  int pinned = audit__pinned_key(o, pk, e);
  if (pinned < 0) return pinned;
  if (pinned != 0) {
    int rc = audit__load_signer(s, o, 0, pk, sk, e);
    sodium_memzero(sk, sizeof sk);
    if (rc) return rc < 0 ? rc : -rc;
  }
  unsigned char bin[crypto_sign_BYTES];
  size_t n = 0;
  return sig && !sodium_hex2bin(bin, sizeof bin, sig, strlen(sig), NULL, &n, NULL) &&
         n == sizeof bin &&
         !crypto_sign_verify_detached(bin, (const unsigned char *)msg, strlen(msg), pk);
}

/* --- the store's chain as the pipeline's sink ---------------------------- */

static int sqlite_append(void *ud, const struct audit_opts *o, const struct audit_entry *rows,
                         size_t n, long long *seq_out, struct err *e) {
  return audit_append_batch(ud, o, rows, n, seq_out, e);
}

static int sqlite_anchor(void *ud, const struct audit_opts *o, int durable, struct err *e) {
  return audit_anchor(ud, o, durable, e);
}

static const struct audit_sink_ops sqlite_sink_ops = {.append_batch = sqlite_append,
                                                      .anchor = sqlite_anchor};

struct audit_sink audit_sqlite_sink(struct store *s) {
  return (struct audit_sink){.ops = &sqlite_sink_ops, .ud = s};
}
