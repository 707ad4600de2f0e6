/* audit_impl.h - what the parts of the audit module share: audit.c (the
 * chain), audit_key.c, audit_anchor.c, audit_compact.c, audit_tail.c and
 * audit_verify.c; no one else includes it (audit.h is the module's
 * contract). The functions below lost their `static` when audit.c was
 * split, unchanged otherwise. */
#ifndef LUAGENT_AUDIT_IMPL_H
#define LUAGENT_AUDIT_IMPL_H

#include <sodium.h>
#include <sqlite3.h>

#include "audit.h"

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

#define CHECKPOINT_FMT "checkpoint from=%lld to=%lld prev=%64s last=%64s digest=%64s"

struct checkpoint {
  long long from, to;
  char prev[65], last[65], digest[65];
  long long seq; /* the checkpoint row itself */
  char hash[65]; /* and its hash, which the anchor file must witness */
};

/* Whether p[0..n) is lowercase hex, as every hash and signature in the
 * chain, the head and the anchor file is written. */
static inline int is_hex(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) return 0;
  return 1;
}

/* audit.c: a row as it is hashed, and the head record */
void audit__row_free(struct row *r);
void audit__row_hash(const struct row *r, char out[65]);
void audit__row_from_stmt(sqlite3_stmt *st, struct row *r);
int audit__head_read(struct store *s, struct audit_head *h, int *have, struct err *e);

/* audit_key.c: where the files live, the key, head signatures */
void audit__anchor_path(struct store *s, const struct audit_opts *o, char *out, size_t n);
int audit__pinned_key(const struct audit_opts *o, unsigned char pk[crypto_sign_PUBLICKEYBYTES],
               struct err *e);
int audit__load_signer(struct store *s, const struct audit_opts *o, int create,
                unsigned char pk[crypto_sign_PUBLICKEYBYTES],
                unsigned char sk[crypto_sign_SECRETKEYBYTES], struct err *e);
/* The text a head's signature signs (out: 160 bytes fit). */
void audit__head_message(long long seq, long long rows, const char *hash, char *out, size_t n);
int audit__head_sig_ok(const unsigned char pk[crypto_sign_PUBLICKEYBYTES], long long seq, long long rows,
                const char *hash, const char *sighex);

/* audit_anchor.c: the head as text, the anchor file */
int audit__head_parse(const char *text, int need_ts, struct audit_head *h, struct err *e);
/* Appends h's line to the anchor file (h NULL: only the sync); durable:
 * the database's log is fsync'd first and the file after. */
int audit__anchor_write(struct store *s, const struct audit_opts *o, const struct audit_head *h,
                        int durable, struct err *e);

/* audit_compact.c */
int audit__checkpoint_for(struct store *s, long long first, struct checkpoint *c, struct err *e);

#endif
