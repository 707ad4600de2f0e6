/* cluster_audit.c - the audit chain in PostgreSQL: appends, the anchor
 * file, head, tail and the importer (see cluster_queue.h; verify is in
 * cluster_audit_verify.c). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cluster_queue_impl.h"
#include "json.h"
#include "util.h"

/* Rows per INSERT statement (16 parameters each; PostgreSQL takes 65535). */
#define INSERT_ROWS 1000

void cluster__row_hash(const char *prev, const char *const cols[AUDIT_NFIELDS], const char *node,
                       char out[65]) {
  const char *f[AUDIT_NFIELDS];
  char ts[17], dur[17];
  memcpy(f, cols, sizeof f);
  /* The numbers as the local chain hashes them (their IEEE bits): the
   * text is what PostgreSQL printed, which reads back to the same double. */
  if (cols[AUDIT_F_TS]) {
    audit_num_text(strtod(cols[AUDIT_F_TS], NULL), ts);
    f[AUDIT_F_TS] = ts;
  }
  if (cols[AUDIT_F_DUR]) {
    audit_num_text(strtod(cols[AUDIT_F_DUR], NULL), dur);
    f[AUDIT_F_DUR] = dur;
  }
  audit_fields_hash(prev, f, node, out);
}

/* Text PostgreSQL stores as given: valid UTF-8 without NUL (a C string
 * has none). Anything else is replaced byte by byte with '?' before it is
 * hashed, so the row on record is the row that hashes. NULL when s is fine
 * as it is (no copy), else a new string. */
static char *pg_clean(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s), i = 0;
  char *out = NULL;
  while (i < n) {
    size_t l = util_utf8_len((const unsigned char *)s + i, n - i, NULL);
    if (l) {
      i += l;
      continue;
    }
    if (!out) out = xstrdup(s);
    out[i++] = '?';
  }
  return out;
}

/* ================================================================ append */

/* A row's text parameters, in CHAIN_COLS order. */
struct prow {
  char seq[24], ts[40], dur[40], prev[65], hash[65];
  char *clean[AUDIT_NFIELDS]; /* replaced texts (owned) */
  const char *v[K_N];
};

static void prow_free(struct prow *r) {
  for (int i = 0; i < AUDIT_NFIELDS; i++) free(r->clean[i]);
}

/* Fills r for entry a at seq after prev; r->hash gets its hash. */
static void prow_fill(struct prow *r, long long seq, const char *prev, const char *node,
                      const struct audit_entry *a) {
  memset(r, 0, sizeof *r);
  const char *text[AUDIT_NFIELDS] = {0};
  text[AUDIT_F_RUN] = a->run_id;
  text[AUDIT_F_CKIND] = a->caller_kind;
  text[AUDIT_F_CNAME] = a->caller_name;
  text[AUDIT_F_TOOL] = a->tool;
  text[AUDIT_F_AHASH] = a->args_hash;
  text[AUDIT_F_DEC] = a->decision;
  text[AUDIT_F_DBY] = a->decided_by;
  text[AUDIT_F_APPR] = a->approver;
  text[AUDIT_F_STATUS] = a->status;
  text[AUDIT_F_DETAIL] = a->detail;
  snprintf(r->seq, sizeof r->seq, "%lld", seq);
  /* %.17g: PostgreSQL reads it back to exactly this double. */
  snprintf(r->ts, sizeof r->ts, "%.17g", a->ts > 0 ? a->ts : util_now());
  r->v[AUDIT_F_SEQ] = r->seq;
  r->v[AUDIT_F_TS] = r->ts;
  for (int i = AUDIT_F_RUN; i <= AUDIT_F_DETAIL; i++) {
    if (i == AUDIT_F_DUR) continue;
    r->clean[i] = pg_clean(text[i]);
    r->v[i] = r->clean[i] ? r->clean[i] : text[i];
  }
  if (a->duration_ms >= 0) {
    snprintf(r->dur, sizeof r->dur, "%.17g", a->duration_ms);
    r->v[AUDIT_F_DUR] = r->dur;
  }
  snprintf(r->prev, sizeof r->prev, "%s", prev); /* the caller's buffer moves on */
  r->v[K_PREV] = r->prev;
  r->v[K_NODE] = node;
  cluster__row_hash(prev, r->v, node, r->hash);
  r->v[K_HASH] = r->hash;
}

/* Appends "(...),(...)" for rows[0..k) to sql with parameters from $first
 * on, and their values to params. */
static void values_sql(struct sbuf *sql, const struct prow *rows, size_t k, int first,
                       const char **params) {
  for (size_t i = 0; i < k; i++) {
    sbuf_puts(sql, i ? ",(" : "(");
    for (int c = 0; c < K_N; c++) {
      int pn = first + (int)(i * K_N) + c;
      const char *cast = c == AUDIT_F_SEQ                        ? "::bigint"
                         : (c == AUDIT_F_TS || c == AUDIT_F_DUR) ? "::float8"
                                                                 : "";
      sbuf_printf(sql, "%s$%d%s", c ? "," : "", pn, cast);
      params[i * K_N + c] = rows[i].v[c];
    }
    sbuf_puts(sql, ")");
  }
}

/* INSERTs rows[0..n) (already filled). */
static int insert_rows(struct pg *p, struct prow *rows, size_t n, struct err *e) {
  for (size_t at = 0; at < n; at += INSERT_ROWS) {
    size_t k = n - at < INSERT_ROWS ? n - at : INSERT_ROWS;
    struct sbuf sql = {0};
    const char **params = xcalloc(k * K_N, sizeof *params);
    sbuf_puts(&sql, "INSERT INTO luagent_audit (" CHAIN_COLS ") VALUES ");
    values_sql(&sql, rows + at, k, 1, params);
    int rc = pg_query(p, sql.s, (int)(k * K_N), params, NULL, e);
    sbuf_free(&sql);
    free(params);
    if (rc) return rc;
  }
  return 0;
}

/* One line for h in this host's anchor file (audit.anchor's format). */
static int anchor_write(struct cluster_policy *cp, const struct audit_head *h, int durable,
                        struct err *e) {
  char path[PATH_MAX + 64], head[200], line[512], when[40];
  cluster__anchor_path(cp, path, sizeof path);
  time_t t = (time_t)util_now();
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  audit_head_format(h, head, sizeof head);
  snprintf(line, sizeof line, "%s ts=%s%s%s\n", head, when, h->sig[0] ? " sig=" : "", h->sig);
  /* .luagent/ may not exist yet: in cluster mode nothing else need have
   * opened the local store. */
  char dir[PATH_MAX + 16];
  snprintf(dir, sizeof dir, "%s/.luagent", cp->ws);
  if (mkdir(dir, 0700) && errno != EEXIST)
    return err_set(e, ERR_IO, "audit", "anchor file %s: %s", path, strerror(errno));
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0)
    return err_set(e, ERR_IO, "audit", "anchor file %s: %s", path,
                   errno == ENXIO ? "not a regular file (a FIFO)" : strerror(errno));
  struct stat sb;
  int rc = 0;
  size_t n = strlen(line);
  if (fstat(fd, &sb) || !S_ISREG(sb.st_mode))
    rc = err_set(e, ERR_IO, "audit", "anchor file %s: not a regular file", path);
  else if (write(fd, line, n) != (ssize_t)n) /* one write: lines never interleave */
    rc = err_set(e, ERR_IO, "audit", "anchor file %s: %s", path, strerror(errno));
  else if (durable && fsync(fd))
    rc = err_set(e, ERR_IO, "audit", "anchor file %s: fsync: %s", path, strerror(errno));
  close(fd);
  return rc;
}

/* Once per process: the last line of this host's anchor file (what the
 * host vouched for before this process), so that a fresh process also
 * notices a chain cut or rewritten below it. Unreadable or garbled: none
 * (verify names that). */
static void vouched_read(struct cluster_policy *cp) {
  if (cp->vouched_read) return;
  cp->vouched_read = 1;
  char path[PATH_MAX + 64], buf[4096];
  cluster__anchor_path(cp, path, sizeof path);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return;
  struct stat sb;
  ssize_t n = 0;
  if (!fstat(fd, &sb) && S_ISREG(sb.st_mode)) {
    off_t at = sb.st_size > (off_t)sizeof buf - 1 ? sb.st_size - (off_t)sizeof buf + 1 : 0;
    n = pread(fd, buf, sizeof buf - 1, at);
  }
  close(fd);
  if (n <= 0) return;
  buf[n] = 0;
  /* The last complete line. */
  while (n > 0 && buf[n - 1] == '\n') buf[--n] = 0;
  char *line = strrchr(buf, '\n');
  line = line ? line + 1 : buf;
  struct audit_head h;
  if ((size_t)n == strlen(buf) && !audit_head_parse(line, &h, NULL)) cp->vouched = h;
}

static int head_from(const PGresult *r, int row, struct audit_head *h) {
  memset(h, 0, sizeof *h);
  h->seq = (long long)pg_number(r, row, 0, 0);
  h->rows = (long long)pg_number(r, row, 1, 0);
  snprintf(h->hash, sizeof h->hash, "%s", pg_text(r, row, 2));
  snprintf(h->sig, sizeof h->sig, "%s", pg_text(r, row, 3));
  return 0;
}

/* After a commit that took the head to nh (n rows): what this process
 * wrote, and every AUDIT_ANCHOR_EVERY rows a line in the anchor file (as
 * the local chain does). */
static void appended(struct cluster_policy *cp, const struct audit_opts *o,
                     const struct audit_head *nh, size_t n) {
  cp->written = *nh;
  long long first = nh->seq - (long long)n;
  long every = o && o->anchor_every ? o->anchor_every : AUDIT_ANCHOR_EVERY;
  if (every > 0 && first / every != nh->seq / every) {
    struct err ae = {0};
    if (anchor_write(cp, nh, 0, &ae))
      fprintf(stderr, "luagent: audit: the head (seq %lld) was not anchored: %s\n", nh->seq,
              ae.msg);
    else
      cp->anchored_seq = nh->seq, cp->anchored_synced = 0;
  }
}

/* The common case, one round trip: the head is still the one this process
 * wrote last. One statement locks the head row only if it still says so
 * (and the chain's last row is still the one it names), inserts the rows
 * and moves the head; *won = 0 when the head had moved on (another host
 * appended, or someone changed the table) and nothing was written: the
 * caller then takes the locking path, which reads the head anew and names
 * any damage. */
static int append_fast(struct cluster_policy *cp, struct pg *p, const struct audit_opts *o,
                       struct store *st, const struct audit_entry *rows, size_t n, int *won,
                       struct audit_head *nh, struct err *e) {
  const struct audit_head *h = &cp->written;
  struct prow *pr = xcalloc(n, sizeof *pr);
  char prev[65], hseq[24], hrows[24], nseq[24], nrows[24];
  int rc = 0;
  PGresult *r = NULL;
  *won = 0;
  snprintf(prev, sizeof prev, "%s", h->hash);
  for (size_t i = 0; i < n; i++) {
    prow_fill(&pr[i], h->seq + 1 + (long long)i, prev, cp->o.node, &rows[i]);
    memcpy(prev, pr[i].hash, sizeof prev);
  }
  *nh = (struct audit_head){.seq = h->seq + (long long)n, .rows = h->rows + (long long)n};
  memcpy(nh->hash, prev, sizeof nh->hash);
  if (o && o->sign && (rc = audit_head_sign(st, o, nh, e))) goto out;
  snprintf(hseq, sizeof hseq, "%lld", h->seq);
  snprintf(hrows, sizeof hrows, "%lld", h->rows);
  snprintf(nseq, sizeof nseq, "%lld", nh->seq);
  snprintf(nrows, sizeof nrows, "%lld", nh->rows);
  const char **params = xcalloc(8 + n * K_N, sizeof *params);
  const char *fixed[] = {
      hseq, h->hash, hrows, nseq, nrows, nh->hash, o && o->sign ? nh->sig : NULL, cp->o.node};
  memcpy(params, fixed, sizeof fixed);
  struct sbuf sql = {0};
  sbuf_puts(&sql,
            "WITH h AS (SELECT id FROM luagent_audit_head WHERE id = 1 AND seq = $1::bigint"
            " AND hash = $2 AND rows = $3::bigint FOR UPDATE),"
            " tip AS (SELECT 1 FROM h WHERE EXISTS (SELECT 1 FROM luagent_audit"
            " WHERE seq = $1::bigint AND hash = $2) AND NOT EXISTS (SELECT 1 FROM luagent_audit"
            " WHERE seq > $1::bigint)),"
            " ins AS (INSERT INTO luagent_audit (" CHAIN_COLS ") SELECT * FROM (VALUES ");
  values_sql(&sql, pr, n, 9, params + 8);
  sbuf_puts(&sql,
            ") v WHERE EXISTS (SELECT 1 FROM tip) RETURNING 1)"
            " UPDATE luagent_audit_head SET seq = $4::bigint, rows = $5::bigint, hash = $6,"
            " sig = $7, node = $8, updated = extract(epoch from clock_timestamp())"
            " WHERE id = 1 AND EXISTS (SELECT 1 FROM tip) RETURNING (SELECT count(*) FROM ins)");
  rc = pg_query(p, sql.s, (int)(8 + n * K_N), params, &r, e);
  sbuf_free(&sql);
  free(params);
  if (!rc) *won = PQntuples(r) == 1 && (size_t)pg_number(r, 0, 0, 0) == n;
  PQclear(r);
out:
  for (size_t i = 0; i < n; i++) prow_free(&pr[i]);
  free(pr);
  return rc;
}

static int s_append(void *ud, const struct audit_opts *o, const struct audit_entry *rows, size_t n,
                    long long *seq_out, struct err *e) {
  struct cluster_policy *cp = ud;
  struct prow *pr = NULL;
  PGresult *r = NULL;
  size_t filled = 0;
  int rc = 0, sign = o && o->sign;
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (!rows[i].decision) return err_set(e, ERR_INVALID, "audit", "audit row without a decision");
  pthread_mutex_lock(&cp->audit_mu);
  struct store *st = NULL;
  if (sign && (rc = cluster__store(cp, &st, e))) goto out;
  if ((rc = cluster__conn(cp, &cp->audit_pg, e))) goto out;
  struct pg *p = cp->audit_pg;
  if (cp->written.seq > 0 && n <= INSERT_ROWS) {
    int won = 0;
    struct audit_head nh;
    if ((rc = append_fast(cp, p, o, st, rows, n, &won, &nh, e))) goto out;
    if (won) {
      if (seq_out) *seq_out = nh.seq;
      appended(cp, o, &nh, n);
      goto out;
    }
  }
  if ((rc = pg_begin(p, e))) goto out;
  /* The lock every host's append waits on. Then, in a statement of its
   * own (a snapshot taken after the lock), the chain's tip. */
  if ((rc = pg_query(p,
                     "SELECT seq, rows, hash, sig FROM luagent_audit_head WHERE id = 1 FOR UPDATE",
                     0, NULL, &r, e)))
    goto fail;
  if (PQntuples(r) != 1) {
    rc = err_set(e, ERR_INVALID, "audit",
                 "%s: the audit head row is missing (luagent_audit_head): the chain was changed "
                 "outside luagent; run `luagent audit verify`",
                 cp->where);
    goto fail;
  }
  struct audit_head head;
  head_from(r, 0, &head);
  PQclear(r);
  r = NULL;
  /* With it, the last row this host vouched for (this process's last
   * append, else the anchor file's last line): it must still be there as
   * written. */
  vouched_read(cp);
  const struct audit_head *vh = cp->written.seq >= cp->vouched.seq ? &cp->written : &cp->vouched;
  char mine[24];
  snprintf(mine, sizeof mine, "%lld", vh->seq);
  const char *mp[] = {mine};
  if ((rc = pg_query(p,
                     "SELECT seq, hash, (SELECT hash FROM luagent_audit WHERE seq = $1::bigint)"
                     " FROM luagent_audit ORDER BY seq DESC LIMIT 1",
                     1, mp, &r, e)))
    goto fail;
  long long last = PQntuples(r) ? (long long)pg_number(r, 0, 0, 0) : 0;
  char prev[65];
  snprintf(prev, sizeof prev, "%s", PQntuples(r) ? pg_text(r, 0, 1) : ZERO_HASH);
  int mine_ok = !vh->seq || (PQntuples(r) && !strcmp(pg_text(r, 0, 2), vh->hash));
  int mine_gone = !PQntuples(r) || PQgetisnull(r, 0, 2);
  PQclear(r);
  r = NULL;
  /* Appending after a head that does not name the last row would vouch for
   * whatever the table holds now: refuse (every audited call is denied
   * until an operator looks). */
  if (head.seq != last || strcmp(head.hash, prev)) {
    rc = err_set(e, ERR_INVALID, "audit",
                 "%s: the audit head (row %lld) does not match the chain's last row (%lld): the "
                 "chain was changed outside luagent; run `luagent audit verify`",
                 cp->where, head.seq, last);
    goto fail;
  }
  /* A chain cut back (or rewritten) below what this process appended,
   * with a head put back to match (an older head keeps its valid
   * signature), would take the next rows on top and the anchor at exit
   * would vouch for it: refuse, and the head this process wrote still
   * goes to the anchor file, so verify names the damage. */
  if (!mine_ok) {
    rc = err_set(e, ERR_INVALID, "audit",
                 "%s: row %lld, which this host %s, is %s: the chain was changed outside "
                 "luagent; run `luagent audit verify`",
                 cp->where, vh->seq, vh == &cp->written ? "appended" : "anchored",
                 mine_gone ? "gone" : "not as written");
    goto fail;
  }
  /* An unsigned head is taken as "signing just began" unless the key is
   * pinned or this host has seen a signed head (then it is a head whose
   * signature was stripped, to have a rewritten chain signed anew). */
  int seen_signed = cp->written.sig[0] || cp->vouched.sig[0];
  if (sign && last > 0 && (head.sig[0] || o->public_key || seen_signed)) {
    struct err se = {0};
    int ok = head.sig[0] ? audit_head_sig_check(st, o, &head, &se) : 0;
    if (ok != 1) {
      if (ok < 0)
        rc = err_set(e, ERR_INVALID, "audit",
                     "%s: the audit head (row %lld) is signed, and this host cannot check it "
                     "(%s): every host signs with the same .luagent/audit.key; copy it from "
                     "another host",
                     cp->where, head.seq, se.msg);
      else
        rc = err_set(e, ERR_INVALID, "audit",
                     "%s: the audit head (row %lld) is %s: run `luagent audit verify`", cp->where,
                     head.seq,
                     !head.sig[0] ? "not signed although this host has seen it signed (or "
                                    "luagent.lua pins audit.public_key)"
                                  : "signed with another key (every host needs the same "
                                    ".luagent/audit.key)");
      goto fail;
    }
  }
  pr = xcalloc(n, sizeof *pr);
  for (; filled < n; filled++) {
    prow_fill(&pr[filled], ++last, prev, cp->o.node, &rows[filled]);
    memcpy(prev, pr[filled].hash, sizeof prev);
  }
  if ((rc = insert_rows(p, pr, n, e))) goto fail;
  struct audit_head nh = {.seq = last, .rows = head.rows + (long long)n};
  memcpy(nh.hash, prev, sizeof nh.hash);
  if (sign && (rc = audit_head_sign(st, o, &nh, e))) goto fail;
  char seqs[24], rowss[24];
  snprintf(seqs, sizeof seqs, "%lld", nh.seq);
  snprintf(rowss, sizeof rowss, "%lld", nh.rows);
  const char *hp[] = {seqs, rowss, nh.hash, sign ? nh.sig : NULL, cp->o.node};
  if ((rc = pg_query(p,
                     "UPDATE luagent_audit_head SET seq = $1::bigint, rows = $2::bigint,"
                     " hash = $3, sig = $4, node = $5,"
                     " updated = extract(epoch from clock_timestamp()) WHERE id = 1",
                     5, hp, NULL, e)))
    goto fail;
  if ((rc = pg_commit(p, e))) goto fail;
  if (seq_out) *seq_out = last;
  appended(cp, o, &nh, n);
  goto out;
fail:
  PQclear(r);
  pg_rollback(p);
out:
  for (size_t i = 0; i < filled; i++) prow_free(&pr[i]);
  free(pr);
  pthread_mutex_unlock(&cp->audit_mu);
  return rc;
}

/* The head this process wrote last goes to the anchor file (what this
 * host can vouch for); other hosts anchor their own. */
static int s_anchor(void *ud, const struct audit_opts *o, int durable, struct err *e) {
  struct cluster_policy *cp = ud;
  (void)o;
  int rc = 0;
  pthread_mutex_lock(&cp->audit_mu);
  int fresh = cp->written.seq > 0 && cp->written.seq != cp->anchored_seq;
  if (fresh || (durable && cp->written.seq > 0 && !cp->anchored_synced)) {
    rc = anchor_write(cp, &cp->written, durable, e);
    if (!rc) cp->anchored_seq = cp->written.seq, cp->anchored_synced = durable;
  }
  pthread_mutex_unlock(&cp->audit_mu);
  return rc;
}

static const struct audit_sink_ops sink_ops = {.append_batch = s_append, .anchor = s_anchor};

struct audit_sink cluster_policy_sink(struct cluster_policy *cp) {
  return (struct audit_sink){.ops = &sink_ops, .ud = cp};
}

/* ================================================================ reading */

/* Runs a read on the chain's connection. */
static int chain_query(struct cluster_policy *cp, const char *sql, int n, const char *const *params,
                       PGresult **r, struct err *e) {
  pthread_mutex_lock(&cp->audit_mu);
  int rc = cluster__conn(cp, &cp->audit_pg, e);
  if (!rc) rc = pg_query(cp->audit_pg, sql, n, params, r, e);
  pthread_mutex_unlock(&cp->audit_mu);
  return rc;
}

int cluster_audit_head(struct cluster_policy *cp, struct audit_head *h, struct err *e) {
  PGresult *r = NULL;
  memset(h, 0, sizeof *h);
  snprintf(h->hash, sizeof h->hash, ZERO_HASH);
  if (chain_query(cp, "SELECT seq, rows, hash, sig FROM luagent_audit_head WHERE id = 1", 0, NULL,
                  &r, e))
    return ERR_IO;
  if (PQntuples(r)) head_from(r, 0, h);
  PQclear(r);
  return 0;
}

int cluster_audit_tail(struct cluster_policy *cp, int n, int json, FILE *out, struct err *e) {
  PGresult *r = NULL;
  char ns[24];
  snprintf(ns, sizeof ns, "%d", n > 0 ? n : 20);
  const char *params[] = {ns};
  if (chain_query(cp,
                  "SELECT " CHAIN_COLS " FROM (SELECT * FROM luagent_audit ORDER BY seq DESC"
                  " LIMIT $1::int) t ORDER BY seq",
                  1, params, &r, e))
    return ERR_IO;
  static const char *const names[K_N] = {"seq",         "ts",        "run_id",    "caller_kind",
                                         "caller_name", "tool",      "args_hash", "decision",
                                         "decided_by",  "approver",  "status",    "duration_ms",
                                         "detail",      "prev_hash", "hash",      "node"};
  cJSON *arr = json ? cJSON_CreateArray() : NULL;
  for (int i = 0; i < PQntuples(r); i++) {
    if (json) {
      cJSON *o = cJSON_CreateObject();
      for (int c = 0; c < K_N; c++) {
        if (PQgetisnull(r, i, c))
          cJSON_AddNullToObject(o, names[c]);
        else if (c == AUDIT_F_SEQ || c == AUDIT_F_TS || c == AUDIT_F_DUR)
          cJSON_AddNumberToObject(o, names[c], strtod(PQgetvalue(r, i, c), NULL));
        else
          cJSON_AddStringToObject(o, names[c], PQgetvalue(r, i, c));
      }
      cJSON_AddItemToArray(arr, o);
      continue;
    }
    struct sbuf b = {0};
    time_t t = (time_t)strtod(pg_text(r, i, AUDIT_F_TS), NULL);
    struct tm tm;
    char when[32];
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    sbuf_printf(&b, "%s %s", pg_text(r, i, AUDIT_F_SEQ), when);
    static const int shown[] = {K_NODE,      AUDIT_F_CKIND, AUDIT_F_CNAME, AUDIT_F_TOOL,
                                AUDIT_F_DEC, AUDIT_F_DBY,   AUDIT_F_APPR,  AUDIT_F_STATUS};
    static const char *const label[] = {"node",     "caller", "name",     "tool",
                                        "decision", "by",     "approver", "status"};
    for (size_t k = 0; k < sizeof shown / sizeof shown[0]; k++) {
      const char *v = pg_text(r, i, shown[k]);
      if (!*v) continue;
      sbuf_printf(&b, " %s=", label[k]);
      util_escape_text(&b, v, strlen(v), 200);
    }
    if (!PQgetisnull(r, i, AUDIT_F_DUR))
      sbuf_printf(&b, " ms=%.3f", strtod(PQgetvalue(r, i, AUDIT_F_DUR), NULL));
    const char *ah = pg_text(r, i, AUDIT_F_AHASH);
    if (*ah) sbuf_printf(&b, " args=%.12s", ah);
    const char *d = pg_text(r, i, AUDIT_F_DETAIL);
    if (*d) {
      sbuf_puts(&b, " detail=\"");
      util_escape_text(&b, d, strlen(d), 400);
      sbuf_puts(&b, "\"");
    }
    fprintf(out, "%s\n", b.s);
    sbuf_free(&b);
  }
  PQclear(r);
  if (json) {
    char *txt = json_print(arr, 0);
    fprintf(out, "%s\n", txt);
    free(txt);
    cJSON_Delete(arr);
  }
  return 0;
}

/* ================================================================ import */

/* The SQLite chain, row by row, as text: what its rows hash as. */
static int sqlite_rows(struct store *st, long long from, struct prow **out, size_t *n,
                       struct err *e) {
  sqlite3_stmt *q = NULL;
  *out = NULL;
  *n = 0;
  if (store_prepare(st,
                    "SELECT seq, ts, run_id, caller_kind, caller_name, tool, args_hash, decision,"
                    " decided_by, approver, status, duration_ms, detail, prev_hash, hash"
                    " FROM audit WHERE seq >= ?1 ORDER BY seq",
                    &q, e))
    return ERR_IO;
  sqlite3_bind_int64(q, 1, from);
  size_t cap = 0;
  int step;
  while ((step = sqlite3_step(q)) == SQLITE_ROW) {
    if (*n == cap) {
      cap = cap ? 2 * cap : 256;
      *out = xrealloc(*out, cap * sizeof **out);
    }
    struct prow *r = &(*out)[(*n)++];
    memset(r, 0, sizeof *r);
    snprintf(r->seq, sizeof r->seq, "%lld", (long long)sqlite3_column_int64(q, 0));
    snprintf(r->ts, sizeof r->ts, "%.17g", sqlite3_column_double(q, 1));
    r->v[AUDIT_F_SEQ] = r->seq;
    r->v[AUDIT_F_TS] = r->ts;
    if (sqlite3_column_type(q, AUDIT_F_DUR) != SQLITE_NULL) {
      snprintf(r->dur, sizeof r->dur, "%.17g", sqlite3_column_double(q, AUDIT_F_DUR));
      r->v[AUDIT_F_DUR] = r->dur;
    }
    for (int c = AUDIT_F_RUN; c <= AUDIT_F_DETAIL; c++) {
      if (c == AUDIT_F_DUR || sqlite3_column_type(q, c) == SQLITE_NULL) continue;
      r->clean[c] = xstrdup((const char *)sqlite3_column_text(q, c));
      r->v[c] = r->clean[c];
    }
    const char *ph = (const char *)sqlite3_column_text(q, 13);
    const char *h = (const char *)sqlite3_column_text(q, 14);
    snprintf(r->hash, sizeof r->hash, "%s", h ? h : "");
    snprintf(r->prev, sizeof r->prev, "%s", ph ? ph : "");
    r->v[K_PREV] = r->prev;
    r->v[K_HASH] = r->hash;
    r->v[K_NODE] = NULL;
  }
  sqlite3_finalize(q);
  /* The array moved as it grew: point each row at its own buffers again. */
  for (size_t i = 0; i < *n; i++) {
    struct prow *r = &(*out)[i];
    r->v[AUDIT_F_SEQ] = r->seq;
    r->v[AUDIT_F_TS] = r->ts;
    r->v[AUDIT_F_DUR] = r->dur[0] ? r->dur : NULL;
    r->v[K_PREV] = r->prev;
    r->v[K_HASH] = r->hash;
  }
  if (step != SQLITE_DONE) return store_error(st, e, "audit: read the chain to import");
  return 0;
}

int cluster_import_audit(struct pg *p, struct store *st, long long *n, struct err *e) {
  *n = 0;
  struct audit_report rep;
  struct audit_head sh;
  struct prow *rows = NULL;
  size_t nrows = 0;
  PGresult *r = NULL;
  int rc;
  /* Only an intact chain is worth carrying over. */
  if ((rc = audit_verify(st, NULL, NULL, &rep, e))) goto out;
  if (rep.problem[0]) {
    rc = err_set(e, ERR_INVALID, "audit",
                 "import audit: the SQLite chain does not verify (%s); it was not imported",
                 rep.problem);
    goto out;
  }
  if (rep.compacted > 0) {
    rc = err_set(e, ERR_INVALID, "audit",
                 "import audit: the SQLite chain was compacted (rows 1..%lld pruned); the "
                 "cluster chain starts at row 1, so it was not imported",
                 rep.compacted);
    goto out;
  }
  if ((rc = audit_head_read(st, &sh, e))) goto out;
  if (sh.seq == 0) goto out; /* nothing to import */
  if ((rc = pg_begin(p, e))) goto out;
  /* The SQLite rows are read and hashed inside this transaction: it may
   * idle longer than pg.c lets a session (one operator command). */
  if ((rc = pg_exec(p, "SET LOCAL idle_in_transaction_session_timeout = 0", e))) goto fail;
  if ((rc = pg_query(p,
                     "SELECT seq, rows, hash, sig FROM luagent_audit_head WHERE id = 1 FOR UPDATE",
                     0, NULL, &r, e)))
    goto fail;
  struct audit_head ch;
  if (PQntuples(r) != 1) {
    rc = err_set(e, ERR_INVALID, "audit", "import audit: luagent_audit_head has no row");
    goto fail;
  }
  head_from(r, 0, &ch);
  PQclear(r);
  r = NULL;
  /* What the cluster chain already holds must be these rows: compare the
   * hash at the shorter chain's end (hashes link every row before it). */
  long long upto = ch.seq < sh.seq ? ch.seq : sh.seq;
  if (upto > 0) {
    char us[24];
    snprintf(us, sizeof us, "%lld", upto);
    const char *params[] = {us};
    if ((rc = pg_query(p, "SELECT hash FROM luagent_audit WHERE seq = $1::bigint", 1, params, &r,
                       e)))
      goto fail;
    sqlite3_stmt *q = NULL;
    char mine[65] = "";
    if (!store_prepare(st, "SELECT hash FROM audit WHERE seq = ?1", &q, NULL)) {
      sqlite3_bind_int64(q, 1, upto);
      if (sqlite3_step(q) == SQLITE_ROW)
        snprintf(mine, sizeof mine, "%s", (const char *)sqlite3_column_text(q, 0));
      sqlite3_finalize(q);
    }
    if (PQntuples(r) != 1 || strcmp(pg_text(r, 0, 0), mine)) {
      rc = err_set(e, ERR_INVALID, "audit",
                   "import audit: the cluster database already holds another audit chain (its "
                   "row %lld is not this workspace's); nothing was imported",
                   upto);
      goto fail;
    }
    PQclear(r);
    r = NULL;
    if (ch.seq >= sh.seq) goto done; /* imported before */
  }
  /* The cluster chain is a prefix of this one: add the rest, verbatim. */
  if ((rc = sqlite_rows(st, ch.seq + 1, &rows, &nrows, e))) goto fail;
  for (size_t i = 0; i < nrows; i++) {
    char h[65];
    cluster__row_hash(rows[i].v[K_PREV], rows[i].v, NULL, h);
    if (strcmp(h, rows[i].hash)) {
      /* A row whose numbers do not survive the trip (never seen; checked so
       * a chain that would not verify is never written). */
      rc = err_set(e, ERR_INVALID, "audit",
                   "import audit: row %s would not verify in PostgreSQL; nothing was imported",
                   rows[i].seq);
      goto fail;
    }
  }
  if ((rc = insert_rows(p, rows, nrows, e))) goto fail;
  {
    char seqs[24], rowss[24];
    snprintf(seqs, sizeof seqs, "%lld", sh.seq);
    snprintf(rowss, sizeof rowss, "%lld", sh.rows);
    /* The SQLite head's signature signs (seq, rows, hash): still valid. */
    const char *hp[] = {seqs, rowss, sh.hash, sh.sig[0] ? sh.sig : NULL};
    if ((rc = pg_query(p,
                       "UPDATE luagent_audit_head SET seq = $1::bigint, rows = $2::bigint,"
                       " hash = $3, sig = $4, node = NULL,"
                       " updated = extract(epoch from clock_timestamp()) WHERE id = 1",
                       4, hp, NULL, e)))
      goto fail;
  }
  *n = (long long)nrows;
done:
  if ((rc = pg_commit(p, e))) goto fail;
  goto out;
fail:
  PQclear(r);
  pg_rollback(p);
  *n = 0;
out:
  for (size_t i = 0; i < nrows; i++) prow_free(&rows[i]);
  free(rows);
  if (rc && e && strncmp(e->msg, "import audit", 12)) err_prefix(e, "import audit");
  return rc;
}
