/* test_audit_rows.c - the bytes of the audit chain stay what they were:
 * the row hash against digests computed outside luagent (Python's hashlib
 * over the documented framing), every row of batches that go through both
 * INSERT shapes (one row, eight rows) read back exactly as written and
 * hashed as an independent framing here says, and util_hex against
 * libsodium's. */
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit.h"
#include "store.h"
#include "test.h"
#include "util.h"

static char dir[256];

/* Digests from Python: blake2b(frames, digest_size=32,
 * key=b"luagent-audit-v1"), frames = 'N' or 'S' + >Q length + bytes, for
 * prev = 64 zeros then the fields below (then "x" for the second). */
static void test_known_digests(void) {
  char ts[17], dur[17], out[65];
  audit_num_text(1000.25, ts);
  audit_num_text(1.5, dur);
  CHECK_STR(ts, "408f420000000000");
  CHECK_STR(dur, "3ff8000000000000");
  const char *ahash = "abababababababababababababababababababababababababababababababab";
  const char *f[AUDIT_NFIELDS] = {"1",    ts,   "r-1",   "script",  NULL, "echo", ahash,
                                  "allow", "default", NULL, "ok", dur, NULL};
  const char *zero = "0000000000000000000000000000000000000000000000000000000000000000";
  audit_fields_hash(zero, f, NULL, out);
  CHECK_STR(out, "859c0341ac722cd2d1ac7bae90362722e252a6060ab52daba685baf6a51b8157");
  audit_fields_hash(zero, f, "x", out);
  CHECK_STR(out, "08d6f3ea86705af971bd571ec8e22bfc360bddcf0718c90f2eba553059d3df82");
}

/* The framing written out byte by byte, as the chain's format says. */
static void ref_frame(struct sbuf *b, const unsigned char *s, int null, size_t n) {
  if (null) {
    sbuf_append(b, "N", 1);
    return;
  }
  char hdr[9];
  hdr[0] = 'S';
  for (int i = 0; i < 8; i++) hdr[1 + i] = (char)(((uint64_t)n >> (56 - 8 * i)) & 0xff);
  sbuf_append(b, hdr, 9);
  sbuf_append(b, (const char *)s, n);
}

static void num_hex(double v, char out[17]) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  snprintf(out, 17, "%016llx", (unsigned long long)bits);
}

static const char *opt(const char *s) { return s ? s : "(null)"; }

/* Appends batches of 1, 7, 8, 9, 17, 31, 32, 33, 63 and 100 rows (one- and
 * eight-row INSERTs and their mixes, each statement reused with the last
 * batch's bindings in place, NULL and not), then reads every row back: the
 * columns hold what the entries said, seq runs 1..N, each prev_hash is the
 * previous row's hash, and each hash is the reference framing's keyed
 * BLAKE2b. */
static void test_rows_read_back(void) {
  char path[400];
  struct store *s = NULL;
  struct err e = {0};
  snprintf(path, sizeof path, "%s/rows.db", dir);
  CHECK_INT(store_open_path(path, &s, &e), 0);
  if (!s) return;
  static const size_t sizes[] = {1, 7, 8, 9, 17, 31, 32, 33, 63, 100};
  enum { TOTAL = 301 };
  struct audit_entry all[TOTAL];
  char names[TOTAL][32], details[TOTAL][64];
  size_t k = 0;
  for (size_t b = 0; b < sizeof sizes / sizeof *sizes; b++) {
    size_t first = k;
    for (size_t i = 0; i < sizes[b]; i++, k++) {
      snprintf(names[k], sizeof names[k], "tool.%zu", k);
      snprintf(details[k], sizeof details[k], "row %zu \"quoted\" \xc3\xa9", k);
      all[k] = (struct audit_entry){.run_id = k % 3 ? "r-x" : NULL,
                                    .caller_kind = "script",
                                    .caller_name = k % 2 ? "bench" : NULL,
                                    .tool = names[k],
                                    .args_hash = "ab12",
                                    .decision = k % 5 ? "allow" : "deny",
                                    .decided_by = "default",
                                    .approver = k % 4 ? NULL : "operator",
                                    .status = k % 2 ? "ok" : NULL,
                                    .duration_ms = k % 3 ? 0.125 * (double)k : -1,
                                    .detail = k % 2 ? NULL : details[k],
                                    .ts = 1700000000.5 + (double)k};
    }
    long long seq = 0;
    CHECK_INT(audit_append_batch(s, NULL, all + first, sizes[b], &seq, &e), 0);
    CHECK_INT(seq, (long long)k);
  }
  sqlite3_stmt *q = NULL;
  CHECK_INT(store_prepare(s,
                          "SELECT seq, ts, run_id, caller_kind, caller_name, tool, args_hash, "
                          "decision, decided_by, approver, status, duration_ms, detail, "
                          "prev_hash, hash FROM audit ORDER BY seq",
                          &q, &e),
            0);
  char prev[65] = "0000000000000000000000000000000000000000000000000000000000000000";
  size_t n = 0;
  while (q && sqlite3_step(q) == SQLITE_ROW && n < TOTAL) {
    const struct audit_entry *a = &all[n];
    CHECK_INT(sqlite3_column_int64(q, 0), (long long)n + 1);
    CHECK(sqlite3_column_double(q, 1) == a->ts);
    const char *want[] = {a->run_id,   a->caller_kind, a->caller_name, a->tool,
                          a->args_hash, a->decision,   a->decided_by, a->approver,
                          a->status};
    for (int c = 0; c < 9; c++) {
      const char *got = (const char *)sqlite3_column_text(q, 2 + c);
      CHECK_STR(opt(got), opt(want[c]));
    }
    if (a->duration_ms >= 0)
      CHECK(sqlite3_column_double(q, 11) == a->duration_ms);
    else
      CHECK_INT(sqlite3_column_type(q, 11), SQLITE_NULL);
    CHECK_STR(opt((const char *)sqlite3_column_text(q, 12)), opt(a->detail));
    CHECK_STR((const char *)sqlite3_column_text(q, 13), prev);

    /* The reference hash. */
    struct sbuf b = {0};
    char seqt[32], tst[17], durt[17];
    snprintf(seqt, sizeof seqt, "%zu", n + 1);
    num_hex(a->ts, tst);
    num_hex(a->duration_ms, durt);
    const char *f[13] = {seqt,          tst,       a->run_id,     a->caller_kind, a->caller_name,
                         a->tool,       a->args_hash, a->decision, a->decided_by,  a->approver,
                         a->status,     a->duration_ms >= 0 ? durt : NULL, a->detail};
    ref_frame(&b, (const unsigned char *)prev, 0, 64);
    for (int c = 0; c < 13; c++)
      ref_frame(&b, (const unsigned char *)f[c], !f[c], f[c] ? strlen(f[c]) : 0);
    unsigned char d[32];
    crypto_generichash(d, sizeof d, (const unsigned char *)b.s, b.len,
                       (const unsigned char *)"luagent-audit-v1", 16);
    sbuf_free(&b);
    char hex[65];
    sodium_bin2hex(hex, sizeof hex, d, sizeof d);
    CHECK_STR((const char *)sqlite3_column_text(q, 14), hex);
    memcpy(prev, hex, sizeof prev);
    n++;
  }
  CHECK_INT(n, TOTAL);
  sqlite3_finalize(q);
  struct audit_report r;
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.rows, TOTAL);
  CHECK_STR(r.problem, "");
  store_close(s);
}

static void test_hex(void) {
  unsigned char all[256];
  for (int i = 0; i < 256; i++) all[i] = (unsigned char)i;
  char mine[513], theirs[513];
  memset(mine, 'Z', sizeof mine);
  util_hex(all, sizeof all, mine);
  sodium_bin2hex(theirs, sizeof theirs, all, sizeof all);
  CHECK_STR(mine, theirs);
  util_hex(all, 0, mine);
  CHECK_STR(mine, "");
}

int main(void) {
  if (sodium_init() < 0) return 1;
  snprintf(dir, sizeof dir, "/tmp/luagent-test-audit-rows-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_known_digests();
  test_rows_read_back();
  test_hex();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "cleanup failed\n");
  return TEST_END();
}
