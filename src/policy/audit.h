/* audit.h - the tamper-evident audit chain (table `audit` in the store).
 *
 * Every row carries prev_hash (the previous row's hash, 64 zeros for the
 * first) and hash = BLAKE2b-256(prev_hash || the row's fields, each framed
 * with its type and length). Editing, deleting or reordering any row breaks
 * the chain at that row. A head record (table audit_head) remembers the last
 * seq, the row count and the last hash, so rows cut off the end are caught
 * too; with signing on, the head is signed with an Ed25519 key kept in
 * <workspace>/.luagent/audit.key (0600), so someone who can rewrite the
 * whole table but cannot read the key is caught as well.
 *
 * None of that catches someone who deletes the last rows and rewrites the
 * head to match (unsigned), or puts back an older signed head: a chain
 * inside one database cannot vouch for its own end. So heads are also
 * written to an anchor outside the database: an append-only text file
 * beside it (<workspace>/.luagent/audit.anchor), one line per head,
 *
 *   seq=57 rows=57 hash=<64 hex> ts=2026-12-01T08:55:02Z [sig=<128 hex>]
 *
 * (sig: the head's signature, when signing is on). A line is written every
 * AUDIT_ANCHOR_EVERY rows from inside the append, and by audit_anchor(),
 * which callers run when a unit of work ends (process exit, the end of a
 * daemon run). Rows written since the last line are not covered.
 * audit_verify checks that every anchored (seq, hash) is still in the
 * chain, and so is a head the operator pinned elsewhere (the line
 * `luagent audit head` prints, given back as --expect). The file is meant
 * to be shipped off the machine as it grows (tail -f to a remote log) or
 * made append-only (chattr +a): whoever can rewrite the database, the
 * anchor file and every shipped copy is not caught.
 */
#ifndef LUAGENT_AUDIT_H
#define LUAGENT_AUDIT_H

#include <stdio.h>
#include <sys/types.h>

#include "err.h"
#include "store.h"

/* One row to append. Any string may be NULL (stored as NULL);
 * duration_ms < 0 is stored as NULL. decision is required. */
struct audit_entry {
  const char *run_id;
  const char *caller_kind;
  const char *caller_name;
  const char *tool;
  const char *args_hash;
  const char *decision;   /* "allow", "deny", "escalate", "approved", "exec", ... */
  const char *decided_by; /* "rule 3", "hook", "impact", "taint", "approver" */
  const char *approver;   /* "terminal", "queue:ID", "none" */
  const char *status;     /* for executions: "ok" or an error code */
  double duration_ms;
  const char *detail; /* a reason or short note; secrets already redacted */
  double ts;          /* when it happened (util_now); 0 = at append */
};

/* Rows between anchors written from inside audit_append_batch: a batch
 * that takes the chain across a multiple of AUDIT_ANCHOR_EVERY appends its
 * new head to the anchor file, with one write() and no fsync (a few
 * microseconds: the line is in the page cache, and in front of any `tail -f`
 * that ships the file, at once). Across a multiple of
 * AUDIT_ANCHOR_SYNC_EVERY, and in a durable audit_anchor(), the database's
 * log is fsync'd before the line and the anchor file after it, so such an
 * anchor survives a power cut and never outlives the rows it names. (An
 * unsynced line may be lost in a power cut, or survive it while SQLite,
 * at synchronous=NORMAL, loses its last commits: verify then reports those
 * rows missing, which they are.) Each fsync costs about 0.3-2 ms
 * on an ordinary disk: at every 256 rows that would add 1.5-2.5 us to a
 * 6.5 us tools.call (measured with bench_pipeline); at every 4096 it is
 * lost in the noise, and so is the unsynced write every 256 rows. */
#define AUDIT_ANCHOR_EVERY 256
#define AUDIT_ANCHOR_SYNC_EVERY 4096

/* Options. key_path NULL = audit.key beside the database; anchor_path
 * NULL = audit.anchor beside the database. anchor_every: 0 means
 * AUDIT_ANCHOR_EVERY, < 0 means appends never anchor (only audit_anchor
 * does). */
struct audit_opts {
  int sign;
  /* audit.public_key in luagent.lua (64 hex digits), or NULL: the key the
   * head must be signed with. Pinned there, a deleted or replaced
   * audit.key cannot re-sign a rewritten chain unnoticed. */
  const char *public_key;
  const char *key_path;
  const char *anchor_path;
  long anchor_every;
};

/* A head: the chain's last seq, its row count and the last row's hash; sig
 * is the hex Ed25519 signature ("" when unsigned). An empty chain's head is
 * seq 0, rows 0, 64 zeros. */
struct audit_head {
  long long seq, rows;
  char hash[65];
  char sig[129];
};

/* Appends one row atomically (BEGIN IMMEDIATE: safe across processes).
 * opts may be NULL (no signing). On success *seq_out (may be NULL) gets the
 * new row's seq. */
int audit_append(struct store *s, const struct audit_opts *opts, const struct audit_entry *a,
                 long long *seq_out, struct err *e);
/* Appends n rows, in order, in one transaction (one write instead of n).
 * *seq_out (may be NULL) gets the last row's seq. */
int audit_append_batch(struct store *s, const struct audit_opts *opts,
                       const struct audit_entry *rows, size_t n, long long *seq_out, struct err *e);

/* Writes the current head to the anchor file unless the file's last line
 * already records it: one line, one write(). durable != 0: the database's
 * log is fsync'd before the line and the anchor file after it (also when
 * the line was already there), so the anchor and the rows it names are on
 * disk when this returns; that costs two fsyncs (0.5-2 ms). Call it when a
 * unit of work ends: durable at process exit (sec_free), not durable at the
 * end of each daemon run (sec_flush), where the fsyncs would cost more than
 * the run. An empty chain writes nothing. opts may be NULL. Errors name the
 * anchor file. */
int audit_anchor(struct store *s, const struct audit_opts *opts, int durable, struct err *e);

/* Reads the head record into *h (an empty chain: seq 0, rows 0, zeros). */
int audit_head_read(struct store *s, struct audit_head *h, struct err *e);
/* Formats h as the one line `luagent audit head` prints and --expect takes:
 * "seq=57 rows=57 hash=<64 hex>" (no newline, no signature) into out (n >=
 * 128 always fits). */
void audit_head_format(const struct audit_head *h, char *out, size_t n);
/* Parses that line (an anchor file line too: ts= and sig= are accepted).
 * seq= and hash= are required, rows= is optional (then rows = seq). Errors
 * name the field that is wrong. */
int audit_head_parse(const char *text, struct audit_head *h, struct err *e);

/* Result of a verification. */
struct audit_report {
  long long rows;     /* rows checked */
  long long bad_seq;  /* first bad row (0 when intact or not row-specific) */
  int signed_head;    /* 1 when a valid head signature was checked */
  long long anchors;  /* anchor file lines checked */
  long long anchored; /* the highest seq an anchor (or --expect) confirms, 0 = none */
  long long compacted; /* rows 1..compacted were pruned under a checkpoint */
  char problem[512];  /* what is wrong, "" when intact */
  char warning[512];  /* what could not be checked (no anchor file), "" when none */
};

/* Reads an anchor file line by line: fn(ud, head, line number, byte
 * offset of the line) for each line that parses (need_ts: a line must
 * carry its time). *exists = 0 when there is no file. A line that does not
 * parse, holds a NUL or lacks its newline stops the reading, and garbled
 * (n bytes) says which line and why. Returns <0 (e filled) only when the
 * file exists but cannot be read. For every verifier of a chain. */
int audit_anchor_file_read(const char *path, int need_ts,
                           void (*fn)(void *ud, const struct audit_head *h, long line, off_t off),
                           void *ud, int *exists, char *garbled, size_t n, struct err *e);

/* Records what is wrong with the chain in r (problem, and bad_seq = seq,
 * 0 when not row-specific), unless a problem is already there: a report
 * names the first. For every verifier of a chain (the store's, the
 * cluster's). */
void audit_report_problem(struct audit_report *r, long long seq, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prunes the rows before keep_from (all of them up to the last row at
 * most) under a checkpoint row appended first, which commits to their
 * hashes, so the chain still verifies (see audit_compact.c). Refuses a
 * chain that does not verify. *pruned gets the number of rows deleted. */
int audit_compact(struct store *s, const struct audit_opts *opts, long long keep_from,
                  long long *pruned, struct err *e);

/* The signing key's public half in hex (out: 65 bytes), for pinning as
 * audit.public_key in luagent.lua. Fails when there is no key yet. */
int audit_public_key(struct store *s, const struct audit_opts *o, char out[65], struct err *e);

/* Walks the whole chain, checks the head, then checks the anchor file and
 * (when expect is not NULL) a pinned head: each must name a row that is
 * still in the chain with that hash. Returns 0 and r->problem == "" when
 * intact (r->warning may say what could not be checked: an anchor file
 * that does not exist while the chain has rows); 0 with r->problem set and
 * r->bad_seq when tampered (a missing or garbled anchor line is a problem
 * naming the line); <0 only when the check itself could not run (e filled).
 * opts and expect may be NULL. */
int audit_verify(struct store *s, const struct audit_opts *opts, const struct audit_head *expect,
                 struct audit_report *r, struct err *e);

/* Prints the last n rows, oldest first: as text lines, or (json != 0) as a
 * JSON array. */
int audit_tail(struct store *s, int n, int json, FILE *out, struct err *e);

/* --- the row hash, for another store of the same chain -------------------
 *
 * The cluster's chain (PostgreSQL, cluster/) hashes its rows exactly as
 * this one does, so a chain copied there still verifies. A row's fields as
 * they are hashed, in this order: text, NULL for SQL NULL; seq in decimal,
 * ts and duration_ms as audit_num_text writes them. */
enum audit_field {
  AUDIT_F_SEQ, AUDIT_F_TS, AUDIT_F_RUN, AUDIT_F_CKIND, AUDIT_F_CNAME, AUDIT_F_TOOL,
  AUDIT_F_AHASH, AUDIT_F_DEC, AUDIT_F_DBY, AUDIT_F_APPR, AUDIT_F_STATUS, AUDIT_F_DUR,
  AUDIT_F_DETAIL, AUDIT_NFIELDS
};
/* A REAL as it is hashed: the 16 hex digits of its IEEE-754 bits. */
void audit_num_text(double v, char out[17]);
/* The row hash (64 hex digits and a NUL into out) of fields f after the
 * row whose hash is prev. extra: one more field framed after the others
 * (the cluster's node), or NULL for none: with NULL the digest is the
 * local chain's. */
void audit_fields_hash(const char *prev, const char *const f[AUDIT_NFIELDS], const char *extra,
                       char out[65]);

/* For a chain kept elsewhere (the cluster's) that signs its head with the
 * workspace's key (audit.key beside store s, audit.public_key pinned in
 * opts): audit_head_sign fills h->sig (the key is made on first use, as an
 * append makes it); audit_head_sig_check returns 1 when h->sig is a valid
 * signature of h, 0 when it is not, <0 when there is no key to check
 * with (e says why). */
int audit_head_sign(struct store *s, const struct audit_opts *o, struct audit_head *h,
                    struct err *e);
int audit_head_sig_check(struct store *s, const struct audit_opts *o, const struct audit_head *h,
                         struct err *e);
/* The same key over another message (an approval decision in the cluster
 * queue, so that a database writer cannot forge one): sig gets 128 hex
 * digits; the check returns as audit_head_sig_check does. msg must not
 * start with "luagent-audit-head:" (a head's signature never passes for
 * anything else). */
int audit_msg_sign(struct store *s, const struct audit_opts *o, const char *msg, char sig[129],
                   struct err *e);
int audit_msg_sig_check(struct store *s, const struct audit_opts *o, const char *msg,
                        const char *sig, struct err *e);

/* --- where the security pipeline writes its rows -------------------------
 *
 * The pipeline (security.c) writes through an audit_sink: by default the
 * store's chain above (audit_sqlite_sink); runtime.c installs the
 * cluster's when luagent.lua has `cluster` (sec_set_backend). append_batch
 * has audit_append_batch's contract; anchor has audit_anchor's (it may be
 * NULL: nothing to anchor). Errors name the chain's database, so a
 * denial says where the row could not be written. */
struct audit_sink_ops {
  int (*append_batch)(void *ud, const struct audit_opts *o, const struct audit_entry *rows,
                      size_t n, long long *seq_out, struct err *e);
  int (*anchor)(void *ud, const struct audit_opts *o, int durable, struct err *e);
};
struct audit_sink {
  const struct audit_sink_ops *ops;
  void *ud;
};
/* The chain of store s (borrowed: s must outlive the sink). */
struct audit_sink audit_sqlite_sink(struct store *s);

#endif
