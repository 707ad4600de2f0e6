/* audit_impl.h - what audit.c and audit_verify.c share; no one else
 * includes it. The functions below lost their `static` when audit.c was
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

/* audit.c */
void audit__row_free(struct row *r);
void audit__row_hash(const struct row *r, char out[65]);
void audit__row_from_stmt(sqlite3_stmt *st, struct row *r);
void audit__anchor_path(struct store *s, const struct audit_opts *o, char *out, size_t n);
int audit__pinned_key(const struct audit_opts *o, unsigned char pk[crypto_sign_PUBLICKEYBYTES],
               struct err *e);
int audit__load_signer(struct store *s, const struct audit_opts *o, int create,
                unsigned char pk[crypto_sign_PUBLICKEYBYTES],
                unsigned char sk[crypto_sign_SECRETKEYBYTES], struct err *e);
int audit__head_sig_ok(const unsigned char pk[crypto_sign_PUBLICKEYBYTES], long long seq, long long rows,
                const char *hash, const char *sighex);
int audit__head_parse(const char *text, int need_ts, struct audit_head *h, struct err *e);
int audit__head_read(struct store *s, struct audit_head *h, int *have, struct err *e);
int audit__checkpoint_for(struct store *s, long long first, struct checkpoint *c, struct err *e);

#endif
