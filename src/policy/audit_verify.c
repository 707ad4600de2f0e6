/* audit_verify.c - audit verify: the chain walk, the head and the
 * anchors it must still contain (see audit.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "audit.h"
#include "audit_impl.h"
#include "json.h"
#include "secrets.h"
#include "util.h"

/* --- verify ------------------------------------------------------------- */

void audit_report_problem(struct audit_report *r, long long seq, const char *fmt, ...) {
  if (r->problem[0]) return; /* keep the first */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->problem, sizeof r->problem, fmt, ap);
  va_end(ap);
  r->bad_seq = seq;
}

/* One head the chain must still contain: an anchor file line (line > 0,
 * off its byte offset) or the pinned head (line 0). Kept small (a busy
 * daemon writes a line per run, so a file may hold millions): the hash is
 * binary, and a line's signature is read again only when the line fails. */
enum { A_UNSEEN, A_MATCH, A_CHANGED, A_GAP };
struct anchor {
  long long seq;
  long line;
  off_t off;
  unsigned char hash[32];
  unsigned char state;
};

struct anchors {
  struct anchor *v;
  size_t n, cap;
  char garbled[480];      /* the first bad line, reported after the chain checks */
  char first_changed[65]; /* the chain's hash at the lowest A_CHANGED anchor */
};

static void anchors_add(struct anchors *a, const struct audit_head *h, long line, off_t off) {
  if (a->n == a->cap) {
    a->cap = a->cap ? 2 * a->cap : 64;
    a->v = xrealloc(a->v, a->cap * sizeof *a->v);
  }
  struct anchor *x = &a->v[a->n++];
  memset(x, 0, sizeof *x);
  x->seq = h->seq;
  x->line = line;
  x->off = off;
  sodium_hex2bin(x->hash, sizeof x->hash, h->hash, 64, NULL, NULL, NULL); /* parsed: 64 hex */
}

static int anchor_cmp(const void *pa, const void *pb) {
  const struct anchor *a = pa, *b = pb;
  if (a->seq != b->seq) return a->seq < b->seq ? -1 : 1;
  return a->line < b->line ? -1 : a->line > b->line;
}

int audit_anchor_file_read(const char *path, int need_ts,
                           void (*fn)(void *ud, const struct audit_head *h, long line, off_t off),
                           void *ud, int *exists, char *garbled, size_t n, struct err *e) {
  *exists = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    return err_set(e, ERR_IO, "audit", "anchor file %s: %s", path, strerror(errno));
  }
  struct stat sb;
  FILE *f = NULL;
  if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) || !(f = fdopen(fd, "r"))) {
    close(fd);
    return err_set(e, ERR_IO, "audit", "anchor file %s: not a regular file", path);
  }
  *exists = 1;
  char *buf = NULL;
  size_t cap = 0;
  ssize_t len;
  long line = 0;
  off_t off = 0;
  while ((len = getline(&buf, &cap, f)) >= 0) {
    line++;
    off_t here = off;
    off += len;
    struct audit_head h;
    struct err pe = {0};
    if (len == 0 || buf[len - 1] != '\n') {
      snprintf(garbled, n, "the anchor file %.200s, line %ld, is incomplete (no newline at its end)",
               path, line);
      break;
    }
    buf[--len] = 0;
    if ((size_t)len != strlen(buf)) {
      snprintf(garbled, n, "the anchor file %.200s, line %ld: a NUL byte", path, line);
      break;
    }
    if (audit__head_parse(buf, need_ts, &h, &pe)) {
      snprintf(garbled, n, "the anchor file %.200s, line %ld: %.160s", path, line, pe.msg);
      break;
    }
    fn(ud, &h, line, here);
  }
  int rc = ferror(f) ? err_set(e, ERR_IO, "audit", "anchor file %s: read error", path) : 0;
  free(buf);
  fclose(f);
  return rc;
}

static void anchor_line(void *ud, const struct audit_head *h, long line, off_t off) {
  anchors_add(ud, h, line, off);
}

/* Reads every line of the anchor file into a (audit_anchor_file_read). */
static int anchors_load(const char *path, struct anchors *a, int *exists, struct err *e) {
  return audit_anchor_file_read(path, 1, anchor_line, a, exists, a->garbled, sizeof a->garbled, e);
}

/* Marks the anchors at seq (a chain row with hash hex h); *k walks the
 * sorted list. Anchors below seq that were never seen are rows missing
 * from the middle (the chain walk names those itself). */
static void anchors_at(struct anchors *a, size_t *k, long long seq, const char *h) {
  unsigned char bin[32];
  size_t got = 0;
  int ok =
      h && !sodium_hex2bin(bin, sizeof bin, h, strlen(h), NULL, &got, NULL) && got == sizeof bin;
  for (; *k < a->n && a->v[*k].seq <= seq; (*k)++) {
    struct anchor *x = &a->v[*k];
    if (x->seq < seq) {
      x->state = A_GAP;
    } else if (ok && !memcmp(bin, x->hash, sizeof bin)) {
      x->state = A_MATCH;
    } else {
      x->state = A_CHANGED;
      if (!a->first_changed[0])
        snprintf(a->first_changed, sizeof a->first_changed, "%s", h ? h : "?");
    }
  }
}

/* Where an anchor came from, for messages; for a file line whose signature
 * can be checked (pk not NULL), says what the signature shows: an invalid
 * one means the line was edited, not the chain. */
static void anchor_src(const struct anchor *a, const char *path, const unsigned char *pk, char *out,
                       size_t n) {
  if (a->line == 0) {
    snprintf(out, n, "the expected head");
    return;
  }
  const char *sig_note = "";
  char buf[600];
  int fd = pk ? open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) : -1;
  if (fd >= 0) {
    ssize_t got = pread(fd, buf, sizeof buf - 1, a->off);
    close(fd);
    struct audit_head h;
    if (got > 0) {
      buf[got] = 0;
      char *nl = strchr(buf, '\n');
      if (nl) *nl = 0;
      if (!audit__head_parse(buf, 1, &h, NULL) && h.sig[0])
        sig_note = audit__head_sig_ok(pk, h.seq, h.rows, h.hash, h.sig)
                       ? ", signed with the audit key"
                       : ", whose signature is invalid: the line was edited, maybe not the chain";
    }
  }
  snprintf(out, n, "the anchor file (line %ld%s)", a->line, sig_note);
}

/* After the walk: the first anchor (lowest seq) the chain does not hold
 * becomes the problem. */
static void anchors_judge(struct anchors *a, const char *path, const unsigned char *pk,
                          long long last_seq, struct audit_report *r) {
  long long good = 0;
  char src[160], hex[65];
  for (size_t i = 0; i < a->n; i++) {
    struct anchor *x = &a->v[i];
    static const unsigned char zero[32];
    if (x->seq == 0 && !memcmp(x->hash, zero, sizeof zero)) x->state = A_MATCH; /* empty chain */
    if (x->state == A_MATCH) {
      good = x->seq;
      continue;
    }
    if (x->state == A_UNSEEN) {
      /* Past the end: name the highest anchored seq, the most rows gone. */
      struct anchor *top = &a->v[a->n - 1];
      anchor_src(top, path, pk, src, sizeof src);
      util_hex(top->hash, sizeof top->hash, hex);
      audit_report_problem(
          r, last_seq + 1,
          "row %lld is missing: %s records seq %lld with hash %.16s..., the chain ends at "
          "seq %lld (rows were cut off the end)",
          last_seq + 1, src, top->seq, hex, last_seq);
    } else if (x->state == A_GAP) {
      anchor_src(x, path, pk, src, sizeof src);
      util_hex(x->hash, sizeof x->hash, hex);
      audit_report_problem(r, x->seq, "row %lld is missing: %s records it with hash %.16s...",
                           x->seq, src, hex);
    } else {
      anchor_src(x, path, pk, src, sizeof src);
      util_hex(x->hash, sizeof x->hash, hex);
      audit_report_problem(
          r, x->seq,
          "row %lld does not match %s: it records hash %.16s..., the chain has %.16s... (one "
          "of rows %lld..%lld was changed: the chain was rewritten after row %lld)",
          x->seq, src, hex, a->first_changed, good + 1, x->seq, good);
    }
    break;
  }
  r->anchored = good;
}

int audit_verify(struct store *s, const struct audit_opts *opts, const struct audit_head *expect,
                 struct audit_report *r, struct err *e) {
  sqlite3_stmt *st = NULL;
  struct anchors an = {0};
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  int have_key = 0, rc = 0;
  memset(r, 0, sizeof *r);
  if (sodium_init() < 0) return err_set(e, ERR_FAIL, "audit", "libsodium failed to initialise");

  /* With a pinned public key, verify needs no key file at all. */
  struct err ke = {0};
  int pinned = audit__pinned_key(opts, pk, &ke);
  if (pinned < 0) return err_set(e, ERR_INVALID, "config", "%s", ke.msg);
  have_key = pinned == 0 || !audit__load_signer(s, opts, 0, pk, sk, &ke);
  sodium_memzero(sk, sizeof sk);

  /* The anchors first, then the chain: an anchor is written after its
   * rows commit, so every line read now names rows the snapshot below
   * sees, even while other processes append. */
  char apath[4200];
  int anchor_exists = 0;
  audit__anchor_path(s, opts, apath, sizeof apath);
  if ((rc = anchors_load(apath, &an, &anchor_exists, e))) goto out;
  r->anchors = (long long)an.n;
  if (expect) anchors_add(&an, expect, 0, -1);
  if (an.n) qsort(an.v, an.n, sizeof *an.v, anchor_cmp);

  /* One read transaction, so appends by other processes don't interleave. */
  if (store_exec(s, "BEGIN", e)) {
    rc = ERR_IO;
    goto out;
  }
  if (store_prepare(s, "SELECT " AUDIT_COLS " FROM audit ORDER BY seq", &st, e)) {
    store_rollback(s);
    rc = ERR_IO;
    goto out;
  }
  char prev[65] = ZERO_HASH;
  long long expect_seq = 1, last_seq = 0, pruned = 0;
  size_t k = 0;
  int step;
  /* A compacted chain starts after its checkpoint (see audit_compact). */
  {
    sqlite3_stmt *mn = NULL;
    long long first = 1;
    if (!store_prepare(s, "SELECT min(seq) FROM audit", &mn, e)) {
      if (sqlite3_step(mn) == SQLITE_ROW && sqlite3_column_type(mn, 0) != SQLITE_NULL)
        first = sqlite3_column_int64(mn, 0);
      sqlite3_finalize(mn);
    }
    struct checkpoint cp;
    if (first > 1 && !audit__checkpoint_for(s, first, &cp, e)) {
      /* Only a checkpoint luagent anchored as it compacted counts. */
      unsigned char cb[32];
      size_t cbn = 0;
      int witnessed = 0;
      if (!sodium_hex2bin(cb, sizeof cb, cp.hash, strlen(cp.hash), NULL, &cbn, NULL) && cbn == 32)
        for (size_t i = 0; i < an.n && !witnessed; i++)
          witnessed = an.v[i].line > 0 && an.v[i].seq == cp.seq && !memcmp(an.v[i].hash, cb, 32);
      if (!witnessed && anchor_exists)
        audit_report_problem(
            r, 1,
            "rows 1..%lld are missing: the checkpoint at row %lld that claims them is not in "
            "the anchor file (luagent anchors every checkpoint it makes; this one was written "
            "some other way)",
            cp.to, cp.seq);
      expect_seq = first;
      pruned = cp.to;
      snprintf(prev, sizeof prev, "%s", cp.last);
      r->compacted = cp.to;
      /* Anchors of pruned rows: the checkpoint commits to them (its digest);
       * the one at its last row can still be checked exactly. */
      for (; k < an.n && an.v[k].seq <= cp.to; k++) {
        unsigned char bin[32];
        size_t got = 0;
        int same = an.v[k].seq < cp.to ||
                   (!sodium_hex2bin(bin, sizeof bin, cp.last, 64, NULL, &got, NULL) && got == 32 &&
                    !memcmp(bin, an.v[k].hash, 32));
        an.v[k].state = same ? A_MATCH : A_CHANGED;
        if (!same && !an.first_changed[0])
          snprintf(an.first_changed, sizeof an.first_changed, "%s", cp.last);
      }
    }
  }
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    struct row row = {0};
    char h[65];
    audit__row_from_stmt(st, &row);
    long long seq = sqlite3_column_int64(st, C_SEQ);
    r->rows++;
    if (seq != expect_seq) {
      if (seq > expect_seq)
        audit_report_problem(r, expect_seq, "row %lld is missing (deleted): the next row is %lld",
                             expect_seq, seq);
      else
        audit_report_problem(r, seq, "row %lld is out of order", seq);
    } else if (!row.f[C_PREV] || strcmp(row.f[C_PREV], prev) != 0) {
      audit_report_problem(
          r, seq,
          "row %lld: prev_hash does not match row %lld's hash (this row or the one before it was "
          "edited, deleted or reordered)",
          seq, seq - 1);
    } else {
      audit__row_hash(&row, h);
      if (!row.f[C_HASH] || strcmp(row.f[C_HASH], h) != 0)
        audit_report_problem(r, seq,
                             "row %lld: contents do not match its hash (the row was edited)", seq);
    }
    anchors_at(&an, &k, seq, row.f[C_HASH]);
    snprintf(prev, sizeof prev, "%s", row.f[C_HASH] ? row.f[C_HASH] : "");
    last_seq = seq;
    expect_seq = seq + 1;
    audit__row_free(&row);
  }
  sqlite3_finalize(st);
  st = NULL;
  if (step != SQLITE_DONE) {
    store_rollback(s);
    rc = store_error(s, e, "audit: read");
    goto out;
  }

  /* The head must name the last row; its signature must hold when present
   * or when signing is configured. */
  int have_head = 0;
  struct audit_head head;
  rc = audit__head_read(s, &head, &have_head, e);
  store_rollback(s); /* ends the read transaction */
  if (rc) goto out;

  if (!have_head) {
    if (r->rows > 0) audit_report_problem(r, last_seq, "the audit head record is missing");
  } else if (head.seq != last_seq) {
    audit_report_problem(
        r, head.seq > last_seq ? last_seq + 1 : head.seq + 1,
        "the head says the chain ends at row %lld but the last row is %lld (rows %s)", head.seq,
        last_seq, head.seq > last_seq ? "deleted at the end" : "added behind its back");
  } else if (strcmp(head.hash, prev) != 0) {
    audit_report_problem(r, last_seq, "row %lld: hash differs from the head record", last_seq);
  } else if (head.rows >= 0 && head.rows != r->rows + pruned) {
    audit_report_problem(r, last_seq, "the head says the chain has %lld rows but it has %lld",
                         head.rows, r->rows + pruned);
  }

  int want_sig = opts && opts->sign;
  if (have_head && (want_sig || head.sig[0])) {
    if (!have_key)
      audit_report_problem(r, 0, "cannot check the head signature: %s", ke.msg);
    else if (!head.sig[0])
      audit_report_problem(r, head.seq, "the audit head is not signed but signing is on");
    else if (!audit__head_sig_ok(pk, head.seq, head.rows, head.hash, head.sig))
      audit_report_problem(r, head.seq,
                           "the audit head signature is invalid (the chain was rewritten)");
    else
      r->signed_head = 1;
  }

  /* Then what the outside says the chain held. */
  if (an.garbled[0]) audit_report_problem(r, 0, "%s", an.garbled);
  anchors_judge(&an, apath, have_key ? pk : NULL, last_seq, r);
  if (!anchor_exists && r->rows > 0)
    snprintf(
        r->warning, sizeof r->warning,
        "no anchor file (%.300s): rows cut off the end of the chain, with the head rewritten to "
        "match, cannot be detected%s",
        apath, expect ? " beyond the expected head" : "");
  else if (anchor_exists && r->anchors == 0 && r->rows > 0 && !an.garbled[0])
    snprintf(r->warning, sizeof r->warning,
             "the anchor file %.300s is empty: rows cut off the end of the chain, with the head "
             "rewritten to match, cannot be detected%s",
             apath, expect ? " beyond the expected head" : "");
out:
  free(an.v);
  return rc;
}
