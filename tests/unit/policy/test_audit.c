/* test_audit.c - the audit hash chain: append, verify, tamper detection
 * (edit, delete, reorder, truncate, whole-table rewrite with signing), tail. */
#include <signal.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit.h"
#include "secrets.h"
#include "store.h"
#include "test.h"
#include "util.h"

static char dir[256];

static struct store *fresh(const char *name) {
  char path[400];
  struct store *s = NULL;
  struct err e = {0};
  snprintf(path, sizeof path, "%s/%s.db", dir, name);
  CHECK_INT(store_open_path(path, &s, &e), 0);
  return s;
}

static void add(struct store *s, const struct audit_opts *o, const char *tool, const char *dec) {
  struct audit_entry a = {.run_id = "r-1",
                          .caller_kind = "automation",
                          .caller_name = "t",
                          .tool = tool,
                          .args_hash = "abc",
                          .decision = dec,
                          .decided_by = "rule 1",
                          .approver = "none",
                          .status = NULL,
                          .duration_ms = -1,
                          .detail = "why"};
  struct err e = {0};
  long long seq = 0;
  CHECK_INT(audit_append(s, o, &a, &seq, &e), 0);
  CHECK(seq > 0);
}

static void exec_sql(struct store *s, const char *sql) {
  struct err e = {0};
  CHECK_INT(store_exec(s, sql, &e), 0);
}

static void test_intact_and_edit(void) {
  struct store *s = fresh("edit");
  struct audit_report r;
  struct err e = {0};
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.rows, 0);
  CHECK_STR(r.problem, "");
  for (int i = 0; i < 5; i++) add(s, NULL, "fs.read", i % 2 ? "allow" : "deny");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.rows, 5);
  CHECK_STR(r.problem, "");
  /* An edit of one field of row 3 is named. */
  exec_sql(s, "UPDATE audit SET decision = 'allow' WHERE seq = 3");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 3);
  CHECK_CONTAINS(r.problem, "row 3");
  CHECK_CONTAINS(r.problem, "edited");
  store_close(s);

  /* Recomputing nothing but setting a NULL to '' also changes the hash. */
  s = fresh("nulls");
  add(s, NULL, "x", "allow");
  exec_sql(s, "UPDATE audit SET status = '' WHERE seq = 1");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 1);
  store_close(s);
}

static void test_delete_reorder_truncate(void) {
  struct store *s = fresh("del");
  struct audit_report r;
  struct err e = {0};
  for (int i = 0; i < 5; i++) add(s, NULL, "echo", "allow");
  exec_sql(s, "DELETE FROM audit WHERE seq = 2");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 2);
  CHECK_CONTAINS(r.problem, "row 2 is missing");
  store_close(s);

  /* Deleting and renumbering to hide the gap breaks the prev_hash link. */
  s = fresh("renumber");
  for (int i = 0; i < 4; i++) add(s, NULL, "echo", "allow");
  exec_sql(s, "DELETE FROM audit WHERE seq = 2; UPDATE audit SET seq = seq - 1 WHERE seq > 2");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 2);
  store_close(s);

  /* Swapping two rows' contents (keeping seq) is caught at the first one. */
  s = fresh("reorder");
  add(s, NULL, "a", "allow");
  add(s, NULL, "b", "deny");
  add(s, NULL, "c", "allow");
  exec_sql(s,
           "UPDATE audit SET seq = 100 WHERE seq = 2;"
           "UPDATE audit SET seq = 2 WHERE seq = 3;"
           "UPDATE audit SET seq = 3 WHERE seq = 100;");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 2);
  store_close(s);

  /* Cutting the last row off is caught by the head. */
  s = fresh("trunc");
  for (int i = 0; i < 3; i++) add(s, NULL, "echo", "allow");
  exec_sql(s, "DELETE FROM audit WHERE seq = 3");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 3);
  CHECK_CONTAINS(r.problem, "deleted at the end");
  store_close(s);
}

static void test_signed_head(void) {
  char key[400];
  snprintf(key, sizeof key, "%s/audit-test.key", dir);
  struct audit_opts o = {.sign = 1, .key_path = key};
  struct store *s = fresh("signed");
  struct audit_report r;
  struct err e = {0};
  for (int i = 0; i < 3; i++) add(s, &o, "echo", "allow");
  struct stat sb;
  CHECK_INT(stat(key, &sb), 0);
  CHECK_INT(sb.st_mode & 0777, 0600);
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_STR(r.problem, "");
  CHECK_INT(r.signed_head, 1);
  CHECK_INT(r.rows, 3);

  /* An attacker without the key rewrites the table: drops the last row and
   * rebuilds the head consistently, but cannot sign it. */
  exec_sql(
      s,
      "DELETE FROM audit WHERE seq = 3;"
      "UPDATE audit_head SET seq = 2, rows = 2, hash = (SELECT hash FROM audit WHERE seq = 2);");
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_CONTAINS(r.problem, "signature is invalid");
  /* Without signing configured, the same rewrite would pass: the signature is
   * what catches it. A present signature is still checked. */
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_CONTAINS(r.problem, "signature");
  /* Removing the signature is caught when signing is on. */
  exec_sql(s, "UPDATE audit_head SET sig = NULL");
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_CONTAINS(r.problem, "not signed");
  store_close(s);
}

static void test_tail(void) {
  struct store *s = fresh("tail");
  struct err e = {0};
  for (int i = 0; i < 4; i++) add(s, NULL, i == 3 ? "last.tool" : "echo", "allow");
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  CHECK_INT(audit_tail(s, 2, 0, f, &e), 0);
  fclose(f);
  CHECK_CONTAINS(buf, "3 ");
  CHECK_CONTAINS(buf, "tool=last.tool");
  CHECK(strstr(buf, "\n1 ") == NULL && strncmp(buf, "1 ", 2) != 0);
  free(buf);
  f = open_memstream(&buf, &len);
  CHECK_INT(audit_tail(s, 10, 1, f, &e), 0);
  fclose(f);
  cJSON *j = cJSON_Parse(buf);
  CHECK(cJSON_IsArray(j));
  CHECK_INT(cJSON_GetArraySize(j), 4);
  CHECK_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 3), "tool")->valuestring, "last.tool");
  cJSON_Delete(j);
  free(buf);
  store_close(s);
}

static void test_two_connections(void) {
  /* Two connections (as two processes would) append alternately; the chain
   * stays one chain. */
  struct store *a = fresh("multi"), *b = fresh("multi");
  struct audit_report r;
  struct err e = {0};
  for (int i = 0; i < 6; i++) add(i % 2 ? a : b, NULL, "echo", "allow");
  CHECK_INT(audit_verify(a, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.rows, 6);
  CHECK_STR(r.problem, "");
  store_close(a);
  store_close(b);
}

static void test_batch(void) {
  struct store *s = fresh("batch");
  struct audit_report r;
  struct err e = {0};
  add(s, NULL, "first", "allow");
  struct audit_entry rows[3] = {
      {.tool = "a", .decision = "allow", .duration_ms = 1.5, .ts = 1000.25},
      {.tool = "b", .decision = "exec", .status = "ok", .duration_ms = -1},
      {.tool = "c", .decision = "deny", .detail = "no", .duration_ms = -1},
  };
  long long seq = 0;
  CHECK_INT(audit_append_batch(s, NULL, rows, 3, &seq, &e), 0);
  CHECK_INT(seq, 4);
  CHECK_INT(audit_append_batch(s, NULL, rows, 0, &seq, &e), 0);
  struct audit_entry bad = {.tool = "x"};
  CHECK_INT(audit_append_batch(s, NULL, &bad, 1, &seq, &e), ERR_INVALID);
  add(s, NULL, "last", "allow");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.rows, 5);
  CHECK_STR(r.problem, "");
  /* The given timestamp is kept (and hashed). */
  sqlite3_stmt *q;
  CHECK_INT(store_prepare(s, "SELECT ts FROM audit WHERE seq = 2", &q, &e), 0);
  CHECK_INT(sqlite3_step(q), SQLITE_ROW);
  CHECK(sqlite3_column_double(q, 0) == 1000.25);
  sqlite3_finalize(q);
  exec_sql(s, "UPDATE audit SET ts = 1000.5 WHERE seq = 2");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 2);
  store_close(s);
}

/* --- the anchor file ------------------------------------------------------ */

static long count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long n = 0;
  int c;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

static void anchor_opts(struct audit_opts *o, char *path, size_t n, const char *name, long every) {
  snprintf(path, n, "%s/%s.anchor", dir, name);
  unlink(path);
  memset(o, 0, sizeof *o);
  o->anchor_path = path;
  o->anchor_every = every;
}

static void test_anchor_every(void) {
  char ap[400];
  struct audit_opts o;
  anchor_opts(&o, ap, sizeof ap, "every", 3);
  struct store *s = fresh("every");
  struct audit_report r;
  struct err e = {0};
  /* An empty chain anchors nothing. */
  CHECK_INT(audit_anchor(s, &o, 1, &e), 0);
  CHECK_INT(count_lines(ap), -1);
  for (int i = 0; i < 7; i++) add(s, &o, "echo", "allow");
  CHECK_INT(count_lines(ap), 2); /* at seq 3 and 6 */
  struct stat sb;
  CHECK_INT(stat(ap, &sb), 0);
  CHECK_INT(sb.st_mode & 0777, 0600);
  /* A batch across 9 and 12 writes one line, for its own last row. */
  struct audit_entry rows[5];
  for (int i = 0; i < 5; i++)
    rows[i] = (struct audit_entry){.tool = "b", .decision = "allow", .duration_ms = -1};
  CHECK_INT(audit_append_batch(s, &o, rows, 5, NULL, &e), 0);
  CHECK_INT(count_lines(ap), 3);
  add(s, &o, "echo", "allow"); /* 13: not anchored yet */
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_STR(r.problem, "");
  CHECK_STR(r.warning, "");
  CHECK_INT(r.anchors, 3);
  CHECK_INT(r.anchored, 12);
  /* audit_anchor writes the head once; a second call finds it there (and
   * a durable one only syncs it). */
  CHECK_INT(audit_anchor(s, &o, 0, &e), 0);
  CHECK_INT(audit_anchor(s, &o, 0, &e), 0);
  CHECK_INT(audit_anchor(s, &o, 1, &e), 0);
  CHECK_INT(count_lines(ap), 4);
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_INT(r.anchored, 13);
  char *txt = NULL;
  size_t len = 0;
  CHECK_INT(util_read_file(ap, 1 << 20, &txt, &len, &e), 0);
  struct audit_head h;
  CHECK_INT(audit_head_read(s, &h, &e), 0);
  char want[200];
  audit_head_format(&h, want, sizeof want);
  CHECK_CONTAINS(txt, want);
  CHECK_CONTAINS(want, "seq=13 rows=13 hash=");
  free(txt);
  /* anchor_every < 0: appends never anchor. */
  o.anchor_every = -1;
  for (int i = 0; i < 6; i++) add(s, &o, "echo", "allow");
  CHECK_INT(count_lines(ap), 4);
  CHECK_INT(audit_anchor(NULL, &o, 1, &e), ERR_INVALID);
  store_close(s);
}

/* A short write of an anchor line (a full disk; here a file size limit,
 * which cuts a write the same way) leaves no fragment: the file is as it
 * was, the next line goes in whole, and the chain verifies. A fragment
 * used to stay, and every later verify called the untouched chain broken
 * (red team 9's F2). */
static void test_anchor_short_write(void) {
  char ap[400];
  struct audit_opts o;
  anchor_opts(&o, ap, sizeof ap, "short", -1);
  struct store *s = fresh("short");
  struct err e = {0};
  struct audit_report r;
  add(s, &o, "echo", "allow");
  CHECK_INT(audit_anchor(s, &o, 0, &e), 0);
  add(s, &o, "echo", "allow"); /* not anchored yet */
  struct stat before;
  CHECK_INT(stat(ap, &before), 0);
  struct rlimit old, lim;
  CHECK_INT(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = (rlim_t)before.st_size + 20; /* room for part of a line */
  signal(SIGXFSZ, SIG_IGN);
  CHECK_INT(setrlimit(RLIMIT_FSIZE, &lim), 0);
  int rc = audit_anchor(s, &o, 0, &e);
  CHECK_INT(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, SIG_DFL);
  CHECK_INT(rc, ERR_IO);
  CHECK_CONTAINS(e.msg, "short write");
  struct stat after;
  CHECK_INT(stat(ap, &after), 0);
  CHECK_INT((int)after.st_size, (int)before.st_size);
  CHECK_INT(audit_anchor(s, &o, 0, &e), 0);
  CHECK_INT(count_lines(ap), 2);
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_STR(r.problem, "");
  CHECK_INT(r.anchored, 2);
  store_close(s);
}

static void test_anchor_truncation(void) {
  char ap[400];
  struct audit_opts o;
  anchor_opts(&o, ap, sizeof ap, "cut", -1);
  struct store *s = fresh("cut");
  struct audit_report r;
  struct err e = {0};
  for (int i = 0; i < 5; i++) add(s, &o, "echo", "allow");
  CHECK_INT(audit_anchor(s, &o, 1, &e), 0);
  struct audit_head h5;
  CHECK_INT(audit_head_read(s, &h5, &e), 0);
  for (int i = 0; i < 5; i++) add(s, &o, "echo", "allow");
  CHECK_INT(audit_anchor(s, &o, 1, &e), 0);
  struct audit_head h10;
  CHECK_INT(audit_head_read(s, &h10, &e), 0);
  CHECK_INT(h10.seq, 10);
  CHECK_INT(h10.rows, 10);

  /* The last three rows go, the head is rebuilt to match: the chain alone
   * is consistent, the anchor is not. */
  exec_sql(
      s,
      "DELETE FROM audit WHERE seq > 7;"
      "UPDATE audit_head SET seq = 7, rows = 7, hash = (SELECT hash FROM audit WHERE seq = 7)");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0); /* the default anchor file: none */
  CHECK_STR(r.problem, "");
  CHECK_CONTAINS(r.warning, "no anchor file");
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 8);
  CHECK_CONTAINS(r.problem, "row 8 is missing: the anchor file (line 2) records seq 10 with hash ");
  CHECK_CONTAINS(r.problem, "the chain ends at seq 7");
  /* A pinned head catches it on its own; one still present passes. */
  struct audit_opts none = {.anchor_path = "/nonexistent/dir/audit.anchor"};
  CHECK_INT(audit_verify(s, &none, &h10, &r, &e), 0);
  CHECK_INT(r.bad_seq, 8);
  CHECK_CONTAINS(r.problem, "row 8 is missing: the expected head records seq 10");
  CHECK_CONTAINS(r.warning, "beyond the expected head");
  CHECK_INT(audit_verify(s, &none, &h5, &r, &e), 0);
  CHECK_STR(r.problem, "");
  CHECK_INT(r.anchored, 5);

  /* Writing on after the cut: row 10 exists again but is not the one the
   * anchor saw. */
  for (int i = 0; i < 3; i++) add(s, &o, "other", "deny");
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 10);
  CHECK_CONTAINS(r.problem, "row 10 does not match the anchor file (line 2)");
  CHECK_CONTAINS(r.problem, "rewritten after row 5");
  CHECK_INT(audit_verify(s, &none, &h10, &r, &e), 0);
  CHECK_CONTAINS(r.problem, "row 10 does not match the expected head");

  /* Every row deleted, head too. */
  exec_sql(s, "DELETE FROM audit; DELETE FROM audit_head");
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_INT(r.bad_seq, 1);
  CHECK_CONTAINS(r.problem, "row 1 is missing");
  store_close(s);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

static void test_anchor_garbled(void) {
  char ap[400];
  struct audit_opts o;
  anchor_opts(&o, ap, sizeof ap, "garbled", -1);
  struct store *s = fresh("garbled");
  struct audit_report r;
  struct err e = {0};
  for (int i = 0; i < 3; i++) add(s, &o, "echo", "allow");
  struct audit_head h;
  CHECK_INT(audit_head_read(s, &h, &e), 0);
  char good[300], text[1200];
  audit_head_format(&h, good, sizeof good);
  static const struct {
    const char *fmt; /* %s: a good head */
    const char *want;
  } cases[] = {
      {"%s ts=2026-01-01T00:00:00Z\nnonsense\n", "line 2: 'nonsense' is not a field"},
      {"%s ts=2026-01-01T00:00:00Z\n\n", "line 2: seq= and hash= are required"},
      {"%s\n", "line 1: rows= and ts= are required in an anchor line"},
      {"%s ts=x color=red\n", "line 1: unknown field 'color'"},
      {"%s ts=x seq=4\n", "line 1: seq must be given once"},
      {"seq=-1 rows=1 hash=00 ts=x\n", "line 1: seq must be given once, as a number"},
      {"%s ts=x\n%s ts=x", "line 2, is incomplete (no newline at its end)"},
      {"%s ts=x sig=abc\n", "line 1: sig must be given once, as 128 lowercase hex digits"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(text, sizeof text, cases[i].fmt, good, good);
    write_text(ap, text);
    CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
    CHECK_INT(r.bad_seq, 0);
    CHECK_CONTAINS(r.problem, cases[i].want);
    CHECK_CONTAINS(r.problem, ap);
  }
  /* An empty file warns like a missing one. */
  write_text(ap, "");
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_STR(r.problem, "");
  CHECK_CONTAINS(r.warning, "is empty");
  /* A FIFO in its place neither hangs the writer nor the reader. */
  unlink(ap);
  CHECK_INT(mkfifo(ap, 0600), 0);
  CHECK_INT(audit_anchor(s, &o, 1, &e), ERR_IO);
  CHECK_CONTAINS(e.msg, "not a regular file");
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), ERR_IO);
  CHECK_CONTAINS(e.msg, "not a regular file");
  unlink(ap);
  /* The good line alone passes. */
  snprintf(text, sizeof text, "%s ts=2026-01-01T00:00:00Z\n", good);
  write_text(ap, text);
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_STR(r.problem, "");
  CHECK_INT(r.anchored, 3);
  store_close(s);
}

static void test_head_parse(void) {
  struct audit_head h;
  struct err e = {0};
  const char *z = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  char t[400];
  snprintf(t, sizeof t, "seq=57 rows=57 hash=%s", z);
  CHECK_INT(audit_head_parse(t, &h, &e), 0);
  CHECK_INT(h.seq, 57);
  CHECK_INT(h.rows, 57);
  CHECK_STR(h.hash, z);
  snprintf(t, sizeof t, "  hash=%s   seq=3 ", z);
  CHECK_INT(audit_head_parse(t, &h, &e), 0);
  CHECK_INT(h.rows, 3); /* rows defaults to seq */
  char back[200];
  audit_head_format(&h, back, sizeof back);
  snprintf(t, sizeof t, "seq=3 rows=3 hash=%s", z);
  CHECK_STR(back, t);
  static const struct {
    const char *text;
    const char *want;
  } bad[] = {
      {"", "seq= and hash= are required"},
      {"seq=1", "seq= and hash= are required"},
      {"seq=1 hash=abc", "hash must be given once, as 64 lowercase hex digits"},
      {"seq=1 hash=0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
       "64 lowercase hex"},
      {"seq=x hash=0", "seq must be given once, as a number"},
      {"seq=1 rows= hash=0", "rows must be given once"},
      {"seq=1 bogus=2", "unknown field 'bogus'"},
      {"57", "'57' is not a field"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK_INT(audit_head_parse(bad[i].text, &h, &e), ERR_INVALID);
    CHECK_CONTAINS(e.msg, bad[i].want);
  }
  CHECK_INT(audit_head_parse(NULL, &h, &e), ERR_INVALID);
}

static void test_anchor_signed(void) {
  char ap[400], key[400];
  struct audit_opts o;
  anchor_opts(&o, ap, sizeof ap, "asigned", -1);
  snprintf(key, sizeof key, "%s/asigned.key", dir);
  o.sign = 1;
  o.key_path = key;
  struct store *s = fresh("asigned");
  struct audit_report r;
  struct err e = {0};
  for (int i = 0; i < 3; i++) add(s, &o, "echo", "allow");
  CHECK_INT(audit_anchor(s, &o, 1, &e), 0);
  /* The older signed head, saved by the attacker. */
  sqlite3_stmt *q;
  char old_hash[65] = "", old_sig[129] = "";
  CHECK_INT(store_prepare(s, "SELECT hash, sig FROM audit_head", &q, &e), 0);
  CHECK_INT(sqlite3_step(q), SQLITE_ROW);
  snprintf(old_hash, sizeof old_hash, "%s", (const char *)sqlite3_column_text(q, 0));
  snprintf(old_sig, sizeof old_sig, "%s", (const char *)sqlite3_column_text(q, 1));
  sqlite3_finalize(q);
  for (int i = 0; i < 3; i++) add(s, &o, "fs.delete", "deny");
  CHECK_INT(audit_anchor(s, &o, 1, &e), 0);
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_STR(r.problem, "");
  CHECK_INT(r.signed_head, 1);
  /* Put the old head back and drop the newer rows: the signature holds,
   * the anchor does not. */
  char sql[600];
  snprintf(sql, sizeof sql,
           "DELETE FROM audit WHERE seq > 3;"
           "UPDATE audit_head SET seq = 3, rows = 3, hash = '%s', sig = '%s'",
           old_hash, old_sig);
  exec_sql(s, sql);
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_INT(r.signed_head, 1);
  CHECK_INT(r.bad_seq, 4);
  CHECK_CONTAINS(r.problem,
                 "row 4 is missing: the anchor file (line 2, signed with the audit key) records "
                 "seq 6");
  /* An anchor line edited by hand (its signature no longer holds) is told
   * apart from a changed chain. */
  char *txt = NULL;
  size_t len = 0;
  CHECK_INT(util_read_file(ap, 1 << 20, &txt, &len, &e), 0);
  char *sg = strrchr(txt, '='); /* the last line's sig= */
  CHECK(sg != NULL);
  if (sg) sg[1] = sg[1] == '0' ? '1' : '0';
  write_text(ap, txt);
  free(txt);
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_CONTAINS(r.problem, "(line 2, whose signature is invalid: the line was edited");
  store_close(s);
}

/* A head written before heads carried a count (rows NULL, signed over
 * seq:hash) still verifies after the migration. */
static void test_v1_head(void) {
  char key[400], ap[400];
  struct audit_opts o;
  anchor_opts(&o, ap, sizeof ap, "v1", -1);
  snprintf(key, sizeof key, "%s/v1.key", dir);
  o.sign = 1;
  o.key_path = key;
  struct store *s = fresh("v1");
  struct audit_report r;
  struct err e = {0};
  for (int i = 0; i < 2; i++) add(s, &o, "echo", "allow");
  unsigned char seed[crypto_sign_SEEDBYTES], pk[crypto_sign_PUBLICKEYBYTES],
      sk[crypto_sign_SECRETKEYBYTES], sig[crypto_sign_BYTES];
  CHECK_INT(secrets_keyfile(key, seed, sizeof seed, 0, &e), 0);
  crypto_sign_seed_keypair(pk, sk, seed);
  struct audit_head h;
  CHECK_INT(audit_head_read(s, &h, &e), 0);
  char msg[200], sighex[2 * crypto_sign_BYTES + 1], sql[600];
  snprintf(msg, sizeof msg, "luagent-audit-head:%lld:%s", h.seq, h.hash);
  crypto_sign_detached(sig, NULL, (const unsigned char *)msg, strlen(msg), sk);
  util_hex(sig, sizeof sig, sighex);
  snprintf(sql, sizeof sql, "UPDATE audit_head SET rows = NULL, sig = '%s'", sighex);
  exec_sql(s, sql);
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_STR(r.problem, "");
  CHECK_INT(r.signed_head, 1);
  CHECK_INT(audit_head_read(s, &h, &e), 0);
  CHECK_INT(h.rows, 2);
  /* The v1 signature does not pass for a v2 head (rows set). */
  exec_sql(s, "UPDATE audit_head SET rows = 2");
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_CONTAINS(r.problem, "signature is invalid");
  /* A count that disagrees with the chain is named. */
  exec_sql(s, "UPDATE audit_head SET rows = 9");
  CHECK_INT(audit_verify(s, NULL, NULL, &r, &e), 0);
  CHECK_CONTAINS(r.problem, "the head says the chain has 9 rows but it has 2");
  /* The next append writes a v2 head again. */
  add(s, &o, "echo", "allow");
  CHECK_INT(audit_verify(s, &o, NULL, &r, &e), 0);
  CHECK_STR(r.problem, "");
  store_close(s);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/luagent-test-audit-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_intact_and_edit();
  test_delete_reorder_truncate();
  test_signed_head();
  test_tail();
  test_two_connections();
  test_batch();
  test_anchor_every();
  test_anchor_short_write();
  test_anchor_truncation();
  test_anchor_garbled();
  test_head_parse();
  test_anchor_signed();
  test_v1_head();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "cleanup failed\n");
  return TEST_END();
}
