/* cluster_audit_verify.c - `luagent audit verify` on the cluster chain:
 * the walk, the head and this host's anchors (see cluster_queue.h). The
 * checks and their messages follow policy/audit_verify.c's, so a broken
 * chain reads the same whichever database holds it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster_queue_impl.h"
#include "util.h"

#define FETCH_ROWS "2000"

/* A head the chain must still hold: a line of the anchor file (line > 0)
 * or the pinned head (line 0). */
enum { A_UNSEEN, A_MATCH, A_CHANGED, A_GAP };
struct anchor {
  long long seq;
  long line;
  char hash[65];
  int state;
};
struct anchors {
  struct anchor *v;
  size_t n, cap;
  char garbled[480];
};

static void anchors_add(struct anchors *a, const struct audit_head *h, long line) {
  if (a->n == a->cap) {
    a->cap = a->cap ? 2 * a->cap : 64;
    a->v = xrealloc(a->v, a->cap * sizeof *a->v);
  }
  struct anchor *x = &a->v[a->n++];
  memset(x, 0, sizeof *x);
  x->seq = h->seq;
  x->line = line;
  snprintf(x->hash, sizeof x->hash, "%s", h->hash);
}

static int anchor_cmp(const void *pa, const void *pb) {
  const struct anchor *a = pa, *b = pb;
  if (a->seq != b->seq) return a->seq < b->seq ? -1 : 1;
  return a->line < b->line ? -1 : a->line > b->line;
}

static void anchor_line(void *ud, const struct audit_head *h, long line, off_t off) {
  (void)off;
  anchors_add(ud, h, line);
}

/* Reads every line of this host's anchor file (audit_anchor_file_read). */
static int anchors_load(const char *path, struct anchors *a, int *exists, struct err *e) {
  return audit_anchor_file_read(path, 0, anchor_line, a, exists, a->garbled, sizeof a->garbled, e);
}

static void anchor_src(const struct anchor *a, char *out, size_t n) {
  if (a->line == 0)
    snprintf(out, n, "the expected head");
  else
    snprintf(out, n, "the anchor file (line %ld)", a->line);
}

/* One fetched row: its seq, link and hash checked against the walk so far
 * (prev: the hash before it; *expect_seq: the seq it must have). */
static void check_row(const PGresult *res, int i, char prev[65], long long *expect_seq,
                      struct anchors *an, size_t *k, struct audit_report *r) {
  const char *cols[AUDIT_NFIELDS];
  for (int c = 0; c < AUDIT_NFIELDS; c++)
    cols[c] = PQgetisnull(res, i, c) ? NULL : PQgetvalue(res, i, c);
  long long seq = strtoll(PQgetvalue(res, i, AUDIT_F_SEQ), NULL, 10);
  const char *link = PQgetvalue(res, i, K_PREV), *hash = PQgetvalue(res, i, K_HASH);
  const char *node = PQgetisnull(res, i, K_NODE) ? NULL : PQgetvalue(res, i, K_NODE);
  r->rows++;
  if (seq != *expect_seq) {
    if (seq > *expect_seq)
      audit_report_problem(r, *expect_seq, "row %lld is missing (deleted): the next row is %lld",
                           *expect_seq, seq);
    else
      audit_report_problem(r, seq, "row %lld is out of order", seq);
  } else if (strcmp(link, prev)) {
    audit_report_problem(
        r, seq,
        "row %lld: prev_hash does not match row %lld's hash (this row or the one before it "
        "was edited, deleted or reordered)",
        seq, seq - 1);
  } else {
    char h[65];
    cluster__row_hash(prev, cols, node, h);
    if (strcmp(h, hash))
      audit_report_problem(r, seq, "row %lld: contents do not match its hash (the row was edited)",
                           seq);
  }
  for (; *k < an->n && an->v[*k].seq <= seq; (*k)++) {
    struct anchor *x = &an->v[*k];
    x->state = x->seq < seq ? A_GAP : !strcmp(x->hash, hash) ? A_MATCH : A_CHANGED;
  }
  snprintf(prev, 65, "%s", hash);
  *expect_seq = seq + 1;
}

static void anchors_judge(struct anchors *a, long long last_seq, struct audit_report *r) {
  long long good = 0;
  char src[160];
  for (size_t i = 0; i < a->n; i++) {
    struct anchor *x = &a->v[i];
    if (x->seq == 0 && !strcmp(x->hash, ZERO_HASH)) x->state = A_MATCH; /* empty chain */
    if (x->state == A_MATCH) {
      good = x->seq;
      continue;
    }
    if (x->state == A_UNSEEN) {
      struct anchor *top = &a->v[a->n - 1];
      anchor_src(top, src, sizeof src);
      audit_report_problem(
          r, last_seq + 1,
          "row %lld is missing: %s records seq %lld with hash %.16s..., the chain ends at "
          "seq %lld (rows were cut off the end)",
          last_seq + 1, src, top->seq, top->hash, last_seq);
    } else if (x->state == A_GAP) {
      anchor_src(x, src, sizeof src);
      audit_report_problem(r, x->seq, "row %lld is missing: %s records it with hash %.16s...",
                           x->seq, src, x->hash);
    } else {
      anchor_src(x, src, sizeof src);
      audit_report_problem(
          r, x->seq,
          "row %lld does not match %s: it records hash %.16s... (one of rows %lld..%lld was "
          "changed: the chain was rewritten after row %lld)",
          x->seq, src, x->hash, good + 1, x->seq, good);
    }
    break;
  }
  r->anchored = good;
}

int cluster_audit_verify(struct cluster_policy *cp, const struct audit_opts *o,
                         const struct audit_head *expect, struct audit_report *r, struct err *e) {
  struct anchors an = {0};
  PGresult *res = NULL;
  int rc = 0, have_head = 0, exists = 0;
  struct audit_head head = {0};
  memset(r, 0, sizeof *r);
  char apath[PATH_MAX + 64];
  cluster__anchor_path(cp, apath, sizeof apath);
  /* The anchors first: a line is written after its rows commit, so the
   * snapshot read below holds every row a line read now names. */
  if ((rc = anchors_load(apath, &an, &exists, e))) goto out;
  r->anchors = (long long)an.n;
  if (expect) anchors_add(&an, expect, 0);
  if (an.n) qsort(an.v, an.n, sizeof *an.v, anchor_cmp);

  pthread_mutex_lock(&cp->audit_mu);
  struct pg *p = NULL;
  if ((rc = cluster__conn(cp, &cp->audit_pg, e))) goto unlock;
  p = cp->audit_pg;
  /* One snapshot for the head and every row, whatever other hosts append
   * meanwhile; floats printed so they read back exactly. */
  if ((rc = pg_exec(p, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", e))) goto unlock;
  if ((rc = pg_exec(p, "SET LOCAL extra_float_digits = 3", e)) ||
      (rc = pg_query(p, "SELECT seq, rows, hash, sig FROM luagent_audit_head WHERE id = 1", 0, NULL,
                     &res, e)))
    goto fail;
  if (PQntuples(res) == 1) {
    have_head = 1;
    head.seq = (long long)pg_number(res, 0, 0, 0);
    head.rows = (long long)pg_number(res, 0, 1, 0);
    snprintf(head.hash, sizeof head.hash, "%s", pg_text(res, 0, 2));
    snprintf(head.sig, sizeof head.sig, "%s", pg_text(res, 0, 3));
  }
  PQclear(res);
  res = NULL;
  if ((rc = pg_exec(p,
                    "DECLARE luagent_verify NO SCROLL CURSOR FOR SELECT " CHAIN_COLS
                    " FROM luagent_audit ORDER BY seq",
                    e)))
    goto fail;
  char prev[65] = ZERO_HASH;
  long long expect_seq = 1;
  size_t k = 0;
  for (;;) {
    if ((rc = pg_query(p, "FETCH " FETCH_ROWS " FROM luagent_verify", 0, NULL, &res, e))) goto fail;
    int nt = PQntuples(res);
    for (int i = 0; i < nt; i++) check_row(res, i, prev, &expect_seq, &an, &k, r);
    PQclear(res);
    res = NULL;
    if (nt == 0) break;
  }
  pg_rollback(p); /* ends the read-only transaction and the cursor */
  pthread_mutex_unlock(&cp->audit_mu);
  long long last_seq = expect_seq - 1;

  if (!have_head) {
    audit_report_problem(r, last_seq, "the audit head record (luagent_audit_head) is missing");
  } else if (head.seq != last_seq) {
    audit_report_problem(
        r, head.seq > last_seq ? last_seq + 1 : head.seq + 1,
        "the head says the chain ends at row %lld but the last row is %lld (rows %s)", head.seq,
        last_seq, head.seq > last_seq ? "deleted at the end" : "added behind its back");
  } else if (strcmp(head.hash, prev)) {
    audit_report_problem(r, last_seq, "row %lld: hash differs from the head record", last_seq);
  } else if (head.rows != r->rows) {
    audit_report_problem(r, last_seq, "the head says the chain has %lld rows but it has %lld",
                         head.rows, r->rows);
  }
  int want_sig = o && o->sign;
  if (have_head && head.seq > 0 && (want_sig || head.sig[0])) {
    struct store *st = NULL;
    struct err ke = {0};
    int ok = -1;
    if (!head.sig[0])
      ok = 0;
    else if (!cluster__store(cp, &st, &ke))
      ok = audit_head_sig_check(st, o, &head, &ke);
    if (!head.sig[0])
      audit_report_problem(r, head.seq, "the audit head is not signed but signing is on");
    else if (ok < 0)
      audit_report_problem(r, 0, "cannot check the head signature: %s", ke.msg);
    else if (!ok)
      audit_report_problem(
          r, head.seq,
          "the audit head signature is invalid (the chain was rewritten, or this host's "
          "audit.key is not the one the other hosts sign with)");
    else
      r->signed_head = 1;
  }
  if (an.garbled[0]) audit_report_problem(r, 0, "%s", an.garbled);
  anchors_judge(&an, last_seq, r);
  if (!exists && r->rows > 0)
    snprintf(r->warning, sizeof r->warning,
             "no anchor file on this host (%.300s): rows cut off the end of the cluster chain, "
             "with the head rewritten to match, cannot be detected here%s",
             apath, expect ? " beyond the expected head" : "");
  goto out;
fail:
  PQclear(res);
  if (p) pg_rollback(p);
unlock:
  pthread_mutex_unlock(&cp->audit_mu);
out:
  free(an.v);
  return rc;
}
