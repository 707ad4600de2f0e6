/* audit.c - see audit.h. */
#include "audit.h"

#include <cjson/cJSON.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json.h"
#include "secrets.h"
#include "util.h"

#define ZERO_HASH "0000000000000000000000000000000000000000000000000000000000000000"

/* The columns that are hashed, in this order (prev_hash goes first). */
#define AUDIT_COLS                                                                     \
  "seq, ts, run_id, caller_kind, caller_name, tool, args_hash, decision, decided_by, " \
  "approver, status, duration_ms, detail, prev_hash, hash"

enum {
  C_SEQ,
  C_TS,
  C_RUN,
  C_CKIND,
  C_CNAME,
  C_TOOL,
  C_AHASH,
  C_DEC,
  C_DBY,
  C_APPR,
  C_STATUS,
  C_DUR,
  C_DETAIL,
  C_PREV,
  C_HASH,
  C_N
};

/* A row as text fields: NULL means SQL NULL. REAL columns are hashed as
 * the hex of their IEEE-754 bits: exact (a REAL read back gives the same
 * text) and far cheaper than printf's %.17g on the hot path. */
struct row {
  char *f[C_N];
};

static void row_free(struct row *r) {
  for (int i = 0; i < C_N; i++) free(r->f[i]);
  memset(r, 0, sizeof *r);
}

static void num_text(double v, char out[17]) {
  static const char hx[] = "0123456789abcdef";
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  for (int i = 15; i >= 0; i--, bits >>= 4) out[i] = hx[bits & 15];
  out[16] = 0;
}

static char *fmt_num(double v) {
  char buf[17];
  num_text(v, buf);
  return xstrdup(buf);
}

/* Frames one field into p: 'N' for NULL, else 'S' + 8-byte big-endian
 * length + bytes, so no two different rows hash the same stream. Returns
 * the bytes written (p NULL: only counts). */
static size_t frame_field(unsigned char *p, const char *s) {
  if (!s) {
    if (p) p[0] = 'N';
    return 1;
  }
  size_t n = strlen(s);
  if (p) {
    p[0] = 'S';
    for (int i = 0; i < 8; i++) p[1 + i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
    memcpy(p + 9, s, n);
  }
  return 9 + n;
}

/* The row's hash: keyed BLAKE2b over prev_hash then the columns, framed.
 * The stream is built first and hashed in one call (the same digest as
 * feeding the frames one by one, at a fraction of the cost). */
static void fields_hash(const char *const f[C_N], char out[65]) {
  unsigned char d[32], stack[2048], *buf = stack;
  size_t need = frame_field(NULL, f[C_PREV]);
  for (int i = C_SEQ; i <= C_DETAIL; i++) need += frame_field(NULL, f[i]);
  if (need > sizeof stack) buf = xmalloc(need);
  size_t off = frame_field(buf, f[C_PREV]);
  for (int i = C_SEQ; i <= C_DETAIL; i++) off += frame_field(buf + off, f[i]);
  crypto_generichash(d, sizeof d, buf, off, (const unsigned char *)"luagent-audit-v1", 16);
  if (buf != stack) free(buf);
  util_hex(d, sizeof d, out);
}

static void row_hash(const struct row *r, char out[65]) {
  fields_hash((const char *const *)r->f, out);
}

static void row_from_stmt(sqlite3_stmt *st, struct row *r) {
  for (int i = 0; i < C_N; i++) {
    int t = sqlite3_column_type(st, i);
    if (t == SQLITE_NULL) {
      r->f[i] = NULL;
    } else if (i == C_SEQ) {
      char buf[32];
      snprintf(buf, sizeof buf, "%lld", (long long)sqlite3_column_int64(st, i));
      r->f[i] = xstrdup(buf);
    } else if (i == C_TS || i == C_DUR) {
      r->f[i] = fmt_num(sqlite3_column_double(st, i));
    } else {
      const unsigned char *s = sqlite3_column_text(st, i);
      r->f[i] = xstrdup(s ? (const char *)s : "");
    }
  }
}

/* --- the signing key ---------------------------------------------------- */

static void default_key_path(struct store *s, const struct audit_opts *o, char *out, size_t n) {
  if (o && o->key_path) {
    snprintf(out, n, "%s", o->key_path);
    return;
  }
  const char *p = store_path(s);
  const char *slash = strrchr(p, '/');
  if (slash)
    snprintf(out, n, "%.*s/audit.key", (int)(slash - p), p);
  else
    snprintf(out, n, "audit.key");
}

/* Loads (or creates) the Ed25519 key pair from its 32-byte seed. */
static int load_signer(struct store *s, const struct audit_opts *o, int create,
                       unsigned char pk[crypto_sign_PUBLICKEYBYTES],
                       unsigned char sk[crypto_sign_SECRETKEYBYTES], struct err *e) {
  char path[4200];
  unsigned char seed[crypto_sign_SEEDBYTES];
  default_key_path(s, o, path, sizeof path);
  int rc = secrets_keyfile(path, seed, sizeof seed, create, e);
  if (rc) return rc;
  crypto_sign_seed_keypair(pk, sk, seed);
  sodium_memzero(seed, sizeof seed);
  return 0;
}

static void head_message(long long seq, const char *hash, char *out, size_t n) {
  snprintf(out, n, "luagent-audit-head:%lld:%s", seq, hash);
}

/* --- append ------------------------------------------------------------- */

int audit_append(struct store *s, const struct audit_opts *opts, const struct audit_entry *a,
                 long long *seq_out, struct err *e) {
  return audit_append_batch(s, opts, a, a ? 1 : 0, seq_out, e);
}

/* Inserts one row after (last, prev); fills hash with the new row's hash.
 * Fields point into the entry; only the numbers are formatted here. */
static int insert_row(struct store *s, sqlite3_stmt *ins, long long seq, const char *prev,
                      const struct audit_entry *a, char hash[65], struct err *e) {
  const char *f[C_N] = {0};
  char seqbuf[32], tsbuf[40], durbuf[40];
  snprintf(seqbuf, sizeof seqbuf, "%lld", seq); /* as row_from_stmt */
  double ts = a->ts > 0 ? a->ts : util_now();
  num_text(ts, tsbuf); /* as fmt_num, so verify reads the same */
  f[C_SEQ] = seqbuf;
  f[C_TS] = tsbuf;
  f[C_RUN] = a->run_id;
  f[C_CKIND] = a->caller_kind;
  f[C_CNAME] = a->caller_name;
  f[C_TOOL] = a->tool;
  f[C_AHASH] = a->args_hash;
  f[C_DEC] = a->decision;
  f[C_DBY] = a->decided_by;
  f[C_APPR] = a->approver;
  f[C_STATUS] = a->status;
  f[C_DETAIL] = a->detail;
  if (a->duration_ms >= 0) {
    num_text(a->duration_ms, durbuf);
    f[C_DUR] = durbuf;
  }
  f[C_PREV] = prev;
  fields_hash(f, hash);

  sqlite3_reset(ins);
  sqlite3_clear_bindings(ins);
  sqlite3_bind_int64(ins, 1, seq);
  sqlite3_bind_double(ins, 2, ts);
  for (int i = C_RUN; i <= C_DETAIL; i++) {
    if (i == C_DUR) {
      if (a->duration_ms >= 0) sqlite3_bind_double(ins, i + 1, a->duration_ms);
    } else if (f[i]) {
      sqlite3_bind_text(ins, i + 1, f[i], -1, SQLITE_STATIC); /* live until the step */
    }
  }
  sqlite3_bind_text(ins, C_PREV + 1, prev, -1, SQLITE_STATIC);
  sqlite3_bind_text(ins, C_HASH + 1, hash, -1, SQLITE_STATIC);
  int rc = sqlite3_step(ins) == SQLITE_DONE ? 0 : store_error(s, e, "audit: append");
  sqlite3_clear_bindings(ins); /* drop the pointers to this row's buffers */
  return rc;
}

int audit_append_batch(struct store *s, const struct audit_opts *opts,
                       const struct audit_entry *rows, size_t n, long long *seq_out,
                       struct err *e) {
  sqlite3_stmt *st = NULL, *ins = NULL;
  int rc = 0;
  char hash[65] = ZERO_HASH;
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  int sign = opts && opts->sign;

  if (sodium_init() < 0) return err_set(e, ERR_FAIL, "audit", "libsodium failed to initialise");
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (!rows[i].decision) return err_set(e, ERR_INVALID, "audit", "audit row without a decision");
  if (sign && (rc = load_signer(s, opts, 1, pk, sk, e))) return rc;
  if ((rc = store_begin(s, e))) goto out_nolock;

  /* The chain's tip: the last row's seq and hash. */
  long long last = 0;
  char prev[65] = ZERO_HASH;
  if ((rc = store_prepare(s, "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1", &st, e)))
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
  sqlite3_finalize(st);
  st = NULL;

  if ((rc = store_prepare(s,
                          "INSERT INTO audit (" AUDIT_COLS ") VALUES "
                          "(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15)",
                          &ins, e)))
    goto fail;
  for (size_t i = 0; i < n; i++) {
    if ((rc = insert_row(s, ins, ++last, prev, &rows[i], hash, e))) goto fail;
    memcpy(prev, hash, sizeof prev);
  }
  sqlite3_finalize(ins);
  ins = NULL;

  /* The head: last seq and hash, signed when asked. */
  char sighex[2 * crypto_sign_BYTES + 1] = "";
  if (sign) {
    char msg[128];
    unsigned char sig[crypto_sign_BYTES];
    head_message(last, hash, msg, sizeof msg);
    crypto_sign_detached(sig, NULL, (const unsigned char *)msg, strlen(msg), sk);
    util_hex(sig, sizeof sig, sighex);
  }
  if ((rc = store_prepare(s,
                          "INSERT OR REPLACE INTO audit_head (id, seq, hash, sig) "
                          "VALUES (1, ?1, ?2, ?3)",
                          &st, e)))
    goto fail;
  sqlite3_bind_int64(st, 1, last);
  sqlite3_bind_text(st, 2, hash, -1, SQLITE_STATIC);
  if (sign)
    sqlite3_bind_text(st, 3, sighex, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(st, 3);
  if (sqlite3_step(st) != SQLITE_DONE) {
    rc = store_error(s, e, "audit: update head");
    goto fail;
  }
  sqlite3_finalize(st);
  st = NULL;
  if ((rc = store_commit(s, e))) goto fail;
  if (seq_out) *seq_out = last;
  goto out_nolock;
fail:
  if (st) sqlite3_finalize(st);
  if (ins) sqlite3_finalize(ins);
  store_rollback(s);
out_nolock:
  sodium_memzero(sk, sizeof sk);
  return rc;
}

/* --- verify ------------------------------------------------------------- */

static void problem(struct audit_report *r, long long seq, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void problem(struct audit_report *r, long long seq, const char *fmt, ...) {
  if (r->problem[0]) return; /* keep the first */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->problem, sizeof r->problem, fmt, ap);
  va_end(ap);
  r->bad_seq = seq;
}

int audit_verify(struct store *s, const struct audit_opts *opts, struct audit_report *r,
                 struct err *e) {
  sqlite3_stmt *st = NULL;
  memset(r, 0, sizeof *r);
  if (sodium_init() < 0) return err_set(e, ERR_FAIL, "audit", "libsodium failed to initialise");
  /* One read transaction, so appends by other processes don't interleave. */
  if (store_exec(s, "BEGIN", e)) return ERR_IO;
  if (store_prepare(s, "SELECT " AUDIT_COLS " FROM audit ORDER BY seq", &st, e)) {
    store_rollback(s);
    return ERR_IO;
  }
  char prev[65] = ZERO_HASH;
  long long expect = 1, last_seq = 0;
  int step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    struct row row = {0};
    char h[65];
    row_from_stmt(st, &row);
    long long seq = sqlite3_column_int64(st, C_SEQ);
    r->rows++;
    if (seq != expect) {
      if (seq > expect)
        problem(r, expect, "row %lld is missing (deleted): the next row is %lld", expect, seq);
      else
        problem(r, seq, "row %lld is out of order", seq);
    } else if (!row.f[C_PREV] || strcmp(row.f[C_PREV], prev) != 0) {
      problem(
          r, seq,
          "row %lld: prev_hash does not match row %lld's hash (this row or the one before it was "
          "edited, deleted or reordered)",
          seq, seq - 1);
    } else {
      row_hash(&row, h);
      if (!row.f[C_HASH] || strcmp(row.f[C_HASH], h) != 0)
        problem(r, seq, "row %lld: contents do not match its hash (the row was edited)", seq);
    }
    snprintf(prev, sizeof prev, "%s", row.f[C_HASH] ? row.f[C_HASH] : "");
    last_seq = seq;
    expect = seq + 1;
    row_free(&row);
  }
  sqlite3_finalize(st);
  st = NULL;
  if (step != SQLITE_DONE) {
    store_rollback(s);
    return store_error(s, e, "audit: read");
  }

  /* The head must name the last row; its signature must hold when present
   * or when signing is configured. */
  int have_head = 0;
  long long head_seq = 0;
  char head_hash[65] = "", head_sig[2 * crypto_sign_BYTES + 1] = "";
  if (store_prepare(s, "SELECT seq, hash, sig FROM audit_head WHERE id = 1", &st, e)) {
    store_rollback(s);
    return ERR_IO;
  }
  if (sqlite3_step(st) == SQLITE_ROW) {
    have_head = 1;
    head_seq = sqlite3_column_int64(st, 0);
    const unsigned char *hh = sqlite3_column_text(st, 1), *sg = sqlite3_column_text(st, 2);
    snprintf(head_hash, sizeof head_hash, "%s", hh ? (const char *)hh : "");
    snprintf(head_sig, sizeof head_sig, "%s", sg ? (const char *)sg : "");
  }
  sqlite3_finalize(st);
  store_rollback(s); /* ends the read transaction */

  if (!have_head) {
    if (r->rows > 0) problem(r, last_seq, "the audit head record is missing");
  } else if (head_seq != last_seq) {
    problem(r, head_seq > last_seq ? last_seq + 1 : head_seq + 1,
            "the head says the chain ends at row %lld but the last row is %lld (rows %s)", head_seq,
            last_seq, head_seq > last_seq ? "deleted at the end" : "added behind its back");
  } else if (strcmp(head_hash, prev) != 0) {
    problem(r, last_seq, "row %lld: hash differs from the head record", last_seq);
  }

  int want_sig = opts && opts->sign;
  if (have_head && (want_sig || head_sig[0])) {
    unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
    struct err ke = {0};
    if (load_signer(s, opts, 0, pk, sk, &ke)) {
      problem(r, 0, "cannot check the head signature: %s", ke.msg);
    } else if (!head_sig[0]) {
      problem(r, head_seq, "the audit head is not signed but signing is on");
    } else {
      unsigned char sig[crypto_sign_BYTES];
      size_t bin = 0;
      char msg[128];
      head_message(head_seq, head_hash, msg, sizeof msg);
      if (sodium_hex2bin(sig, sizeof sig, head_sig, strlen(head_sig), NULL, &bin, NULL) ||
          bin != sizeof sig ||
          crypto_sign_verify_detached(sig, (const unsigned char *)msg, strlen(msg), pk))
        problem(r, head_seq, "the audit head signature is invalid (the chain was rewritten)");
      else
        r->signed_head = 1;
    }
    sodium_memzero(sk, sizeof sk);
  } else if (want_sig && !have_head && r->rows == 0) {
    /* An empty chain with signing on: nothing to check. */
  }
  return 0;
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
    char *txt = json_print(arr, JSON_PRETTY);
    fprintf(out, "%s\n", txt);
    free(txt);
    cJSON_Delete(arr);
  }
  return 0;
}
