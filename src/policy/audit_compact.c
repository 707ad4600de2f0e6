/* audit_compact.c - pruning old rows under a checkpoint row, so the chain
 * still verifies after (see audit.h, audit_compact). audit_verify.c reads
 * the checkpoint back through audit__checkpoint_for. */
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "audit.h"
#include "audit_impl.h"
#include "util.h"

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
