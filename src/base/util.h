/* util.h - small helpers: growable strings, files, clocks, text escaping. */
#ifndef LUAGENT_UTIL_H
#define LUAGENT_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* A growable NUL-terminated byte buffer. Zero-initialise, then append;
 * sbuf_free releases it. Allocation failure aborts (these buffers are small
 * host-side strings; Lua-side memory is capped elsewhere). */
struct sbuf {
  char *s;
  size_t len, cap;
};
void sbuf_append(struct sbuf *b, const char *s, size_t n);
void sbuf_puts(struct sbuf *b, const char *s);
void sbuf_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbuf_free(struct sbuf *b);
/* Makes room for extra more bytes and a NUL past len (content unchanged),
 * for a writer that fills b->s itself and then sets len. */
void sbuf_reserve(struct sbuf *b, size_t extra);
/* Returns the string and hands ownership to the caller (free()). */
char *sbuf_take(struct sbuf *b);

/* Reads a whole file (at most max bytes) into a malloc'd NUL-terminated
 * buffer; *len gets its size. Errors name the path. */
int util_read_file(const char *path, size_t max, char **out, size_t *len, struct err *e);
/* Writes data to path atomically (temp file + fsync + rename). */
int util_write_file_atomic(const char *path, const char *data, size_t len, struct err *e);
/* mkdir -p with mode. */
int util_mkdirs(const char *path, int mode, struct err *e);

double util_now(void);        /* wall clock, seconds since the epoch */
double util_monotonic(void);  /* monotonic seconds, for deadlines */
void util_sleep(double seconds);

/* Appends s to b with control characters escaped (\n, \t, \xNN) and cut at
 * max bytes with a marker, so untrusted text cannot forge lines or flood. */
void util_escape_text(struct sbuf *b, const char *s, size_t len, size_t max);
/* The length of the valid UTF-8 sequence at p (at most n bytes, n >= 1), or
 * 0 with *why (may be NULL) saying what is wrong with it. Follows RFC
 * 3629's table: overlong forms, surrogates and code points above U+10FFFF
 * are invalid. The one UTF-8 check of the host (JSON, the Lua bridge, the
 * terminal). */
size_t util_utf8_len(const unsigned char *p, size_t n, const char **why);

/* The character at s[0..len) (len >= 1) for a terminal: returns the bytes
 * it spans (1-4) and writes its visible form ("\x1b", "\u009b", "\u202e")
 * to out when it may not reach a terminal raw: C0 controls and DEL, the
 * host's U+0000 (C0 80), C1 controls, bidi controls, and bytes that are not
 * UTF-8 (one at a time). out is "" when the bytes are fine as they are.
 * The caller handles \n and \t itself. */
size_t util_term_escape(const char *s, size_t len, char out[16]);
/* The same, but keeps newlines and tabs (multi-line program output);
 * still escapes ESC, CR and the other controls that rewrite a terminal. */
void util_escape_output(struct sbuf *b, const char *s, size_t len, size_t max);

/* Duplicates; abort on OOM. */
char *xstrdup(const char *s);
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t m);
void *xrealloc(void *p, size_t n);

/* The candidate closest to word by edit distance (case-insensitive), for
 * "did you mean" hints; NULL when none is close enough (at most 2 edits,
 * and fewer than half of word's length). Returns one of candidates. */
const char *util_nearest(const char *word, const char *const *candidates, size_t n);

/* Finds luagent's own data file `name` (a prompt such as
 * "system_prompt.md") and writes its path to out: $LUAGENT_SOURCE_DIR/lua/,
 * then <the executable's folder>/../share/luagent/ (where `make install`
 * puts them, whatever PREFIX and DESTDIR were), then the source tree the
 * binary was built from. 0, or ERR_NOTFOUND when none has it. */
int util_data_path(const char *name, char *out, size_t n);

/* Lowercase hex of n bytes into out (2n+1 bytes). */
void util_hex(const unsigned char *in, size_t n, char *out);
/* snprintf(dst, n, "%s", s) without printf (a call per run on the
 * scheduler's and the workers' paths, per streamed piece in the journal):
 * s cut to n - 1 bytes; n 0 writes nothing. Returns the length copied. */
size_t util_copy(char *dst, size_t n, const char *s);
/* u's decimal digits (1 to 20) written so they end just before end;
 * returns where they start. printf's "%llu" without printf. */
char *util_dec_before(char *end, unsigned long long u);
/* A run id, snprintf(out, 40, "r%lx-%s", t, hex) without printf: hex is
 * cut to what fits (21 characters with the largest t, 16 hex digits). */
void util_run_id_text(char out[40], unsigned long t, const char *hex);

#endif
