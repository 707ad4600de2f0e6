/* audit.c - the chain itself (see audit.h): how a row is hashed, appending
 * rows and the signed head in one transaction, reading the head, and the
 * store's chain as the pipeline's sink. The rest of the module: the
 * signing key (audit_key.c), the anchor file (audit_anchor.c), compaction
 * (audit_compact.c), `audit tail` (audit_tail.c), verification
 * (audit_verify.c); audit_impl.h is what they share. */
#include "audit.h"

#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "audit_impl.h"
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

/* The hash's state once its key is in: every row's hash starts from a
 * copy (the same digest as crypto_generichash with the key, without
 * setting up the parameter block and the key block for every row). */
static crypto_generichash_state keyed;
static pthread_once_t keyed_once = PTHREAD_ONCE_INIT;
static void keyed_init(void) {
  crypto_generichash_init(&keyed, (const unsigned char *)"luagent-audit-v1", 16, 32);
}

/* n[i]: strlen of f[i] (unused for NULL), plen prev's. Each length is
 * measured once. */
static void frame_hash_n(const char *prev, size_t plen, const char *const f[AUDIT_NFIELDS],
                         const size_t flen[AUDIT_NFIELDS], const char *extra, char out[65]) {
  unsigned char d[32], stack[2048], *buf = stack;
  size_t xlen = extra ? strlen(extra) : 0;
  size_t need = (prev ? 9 + plen : 1) + (extra ? 9 + xlen : 0);
  for (int i = 0; i < AUDIT_NFIELDS; i++) need += f[i] ? 9 + flen[i] : 1;
  if (need > sizeof stack) buf = xmalloc(need);
  size_t off = frame_field(buf, prev, plen);
  for (int i = 0; i < AUDIT_NFIELDS; i++) off += frame_field(buf + off, f[i], flen[i]);
  if (extra) off += frame_field(buf + off, extra, xlen);
  pthread_once(&keyed_once, keyed_init);
  crypto_generichash_state h = keyed;
  crypto_generichash_update(&h, buf, off);
  crypto_generichash_final(&h, d, sizeof d);
  if (buf != stack) free(buf);
  util_hex(d, sizeof d, out);
}

static void frame_hash(const char *prev, const char *const f[AUDIT_NFIELDS],
                       const size_t flen[AUDIT_NFIELDS], const char *extra, char out[65]) {
  frame_hash_n(prev, prev ? strlen(prev) : 0, f, flen, extra, out);
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
  r->n[C_PREV] = strlen(prev);
  frame_hash_n(prev, r->n[C_PREV], r->f, r->n, NULL, r->hash);
}

/* Binds r as the row whose first parameter is base + 1: every parameter,
 * NULL fields as NULL (the statement comes from store_cached_bound, with
 * the last rows' bindings). */
static void bind_row(sqlite3_stmt *ins, int base, const struct ready *r,
                     const struct audit_entry *a) {
  sqlite3_bind_int64(ins, base + 1, r->seq);
  sqlite3_bind_double(ins, base + 2, r->ts);
  for (int i = C_RUN; i <= C_DETAIL; i++) {
    if (i == C_DUR) {
      if (a->duration_ms >= 0) sqlite3_bind_double(ins, base + i + 1, a->duration_ms);
      else sqlite3_bind_null(ins, base + i + 1);
    } else if (r->f[i]) {
      sqlite3_bind_text(ins, base + i + 1, r->f[i], (int)r->n[i], SQLITE_STATIC);
    } else {
      sqlite3_bind_null(ins, base + i + 1);
    }
  }
  sqlite3_bind_text(ins, base + C_PREV + 1, r->f[C_PREV], (int)r->n[C_PREV], SQLITE_STATIC);
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
    int rc = store_cached_bound(s, insert_sql[k == INSERT_ROWS], &ins, e);
    if (rc) return rc;
    for (size_t j = 0; j < k; j++) {
      ready_row(&r[j], *last + 1 + (long long)j, j ? r[j - 1].hash : prev, &rows[i + j]);
      bind_row(ins, (int)j * C_N, &r[j], &rows[i + j]);
    }
    rc = sqlite3_step(ins) == SQLITE_DONE ? 0 : store_error(s, e, "audit: append");
    store_release_bound(s, ins);
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
    audit__head_message(last, last, hash, msg, sizeof msg);
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
    if (audit__anchor_write(s, opts, &head, durable, &ae))
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
