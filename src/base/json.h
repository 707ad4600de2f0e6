/* json.h - strict JSON text in and out of cJSON trees.
 *
 * Every JSON text that reaches luagent from outside (a model's tool-call
 * arguments, a provider's response, json.decode, a stored row, an operator's
 * --args) is parsed here, and every JSON text luagent writes (wire, journal,
 * audit, CLI output, json.encode) is printed here, so all of them agree on
 * what JSON is.
 *
 * Conventions shared with the rest of the host:
 *  - cJSON strings are C strings, so U+0000 is stored as the two bytes
 *    0xC0 0x80 ("modified UTF-8"). json_parse turns \u0000 into those bytes
 *    and json_print writes them back as \u0000. Every other string byte
 *    sequence the parser produces is valid UTF-8.
 *  - A number node whose valuestring is set (an integer outside +-2^53, or
 *    one the Lua bridge made from an int64) carries its exact decimal text
 *    there; valuedouble holds the nearest double. cJSON_Delete and
 *    cJSON_Duplicate already free and copy valuestring for any type.
 */
#ifndef LUAGENT_JSON_H
#define LUAGENT_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "err.h"

/* json_parse flags */
#define JSON_NO_DUPLICATES 1u /* a key repeated in one object is an error */
#define JSON_REPLACE_INVALID 2u /* json_parse_lossy only: see there */

/* json_print flags */
#define JSON_PRETTY 1u    /* indented, in the layout cJSON_Print uses */
#define JSON_CANONICAL 2u /* object keys sorted by byte order; compact unless JSON_PRETTY */

/* Arrays and objects nested deeper than this are refused by json_parse. */
#define JSON_PARSE_MAX_DEPTH 512

/* Parses exactly one RFC 8259 JSON text from the n bytes at s (s need not
 * be NUL-terminated) into a new cJSON tree, *out, which the caller frees
 * with cJSON_Delete. Returns 0, or on error leaves *out NULL and fills e
 * (which may be NULL) with rc ERR_INVALID, code "invalid_json" and the
 * message "invalid JSON at byte N: what", N being the 0-based offset of the
 * offending byte; ERR_NOMEM and code "out_of_memory" when cJSON cannot
 * allocate. A NULL s or out is an error, never a crash.
 *
 * Refused, as RFC 8259 refuses them: anything after the value but
 * whitespace (space, tab, LF, CR only), a byte order mark, leading zeros,
 * "2.", ".5", "+1", a missing exponent digit, raw control characters
 * (< 0x20) in strings, unknown escapes, \u without four hex digits, and
 * invalid UTF-8 anywhere (overlong forms, surrogates, code points above
 * U+10FFFF, truncated sequences, stray continuation bytes). Beyond the RFC:
 * a \u escape naming a lone UTF-16 surrogate is refused (the text could not
 * be stored as UTF-8), as is a number too large for a double (1e400);
 * nesting deeper than JSON_PARSE_MAX_DEPTH is refused with an error, never a
 * stack overflow.
 *
 * Numbers: an integer written without fraction or exponent whose magnitude
 * is 2^53 or more keeps its text in valuestring. Duplicate keys: with
 * JSON_NO_DUPLICATES the first repeated key is an error naming it and its
 * offset ("duplicate key \"path\""); without it the object keeps one member
 * per key, with the value given LAST, at the place of the first.
 *
 * There is no size limit here: callers bound their input. */
int json_parse(const char *s, size_t n, unsigned flags, cJSON **out, struct err *e);

/* json_parse over the NUL-terminated text s: returns the new tree (caller
 * frees) or NULL with e filled (e may be NULL). A NULL s returns NULL with
 * the error "no input". */
cJSON *json_parse_str(const char *s, unsigned flags, struct err *e);
/* json_parse, with the tree it builds bounded to about max_bytes of memory
 * (each value costs a cJSON node plus its string or key; 0 = no bound).
 * Past it: ERR_LIMIT, code "limit_memory", and nothing is returned. For
 * text from a sandbox, so the host never builds a tree many times the
 * script's memory cap. */
/* json_parse_str for text from a provider: invalid UTF-8 inside a string
 * is kept as U+FFFD (one per bad byte) instead of refusing the whole text,
 * and *replaced (may be NULL) is increased by how many were replaced, so
 * the caller can record the fact. Everything else is as strict as ever. */
cJSON *json_parse_lossy(const char *s, unsigned flags, size_t *replaced, struct err *e);
int json_parse_bounded(const char *s, size_t n, unsigned flags, size_t max_bytes, cJSON **out,
                       struct err *e);

/* One value, or the start or end of one, as json_scan reads it. */
enum {
  JSON_EV_NULL,
  JSON_EV_TRUE,
  JSON_EV_FALSE,
  JSON_EV_NUMBER, /* d; s, n: its text; digits: see json_event */
  JSON_EV_STRING, /* s, n */
  JSON_EV_KEY,    /* s, n: an object member's key; its value follows */
  JSON_EV_OBJECT, /* an object begins: KEY value pairs follow, then END */
  JSON_EV_ARRAY,  /* an array begins: its values follow, then END */
  JSON_EV_END     /* the innermost open object or array ends */
};
struct json_event {
  int kind;
  /* A string or key as json_parse would store it, U+0000 as C0 80: the n
   * bytes at s (not NUL-terminated; in the text itself when it holds no
   * escape). Valid during the call only. */
  const char *s;
  size_t n;
  double d;           /* a number's value */
  const char *digits; /* a number's exact text where json_parse keeps it (an
                       * integer of 2^53 or more in magnitude), else NULL */
};
/* Returns 0 to go on; anything else stops json_scan, which returns it. */
typedef int (*json_sink)(void *ud, const struct json_event *ev);
struct sbuf;

/* Reads the JSON text at s (n bytes) as json_parse(s, n, 0, ...) does, the
 * same grammar and the same errors (in e, which may be NULL), handing each
 * value to sink in document order instead of building a tree (sink NULL:
 * only checks it). An object's members come as json_parse read them,
 * duplicates included: a reader that keeps the last value of a key gets
 * json_parse's tree. Returns 0, json_parse's error, or what sink returned.
 * scratch (may be NULL: one is made and freed here) holds the string being
 * decoded; it is the only memory this call uses, so a sink may leave by a
 * longjmp when scratch belongs to the caller (who frees it). */
int json_scan(const char *s, size_t n, json_sink sink, void *ud, struct sbuf *scratch,
              struct err *e);
/* Checks the JSON text at s as json_scan does and returns the kind of its
 * value (JSON_EV_OBJECT, JSON_EV_STRING, ...), or json_parse's error (a
 * negative code, e filled). */
int json_kind(const char *s, size_t n, struct err *e);

/* Prints v as JSON text into a new malloc'd string (caller frees; never
 * NULL, a NULL v prints "null"). Strings escape '"', '\\' and control
 * characters; the bytes C0 80 are written as \u0000 and any other invalid
 * UTF-8 byte as U+FFFD, so the text is always valid UTF-8. Numbers: the
 * valuestring text when it is set and is a valid JSON number, integers
 * below 2^53 in magnitude as plain digits (-0 as 0), others in the
 * shortest of %.15g/%.16g/%.17g that reads back as the same double; NaN and
 * infinities as null. Raw and invalid nodes print as null. */
char *json_print(const cJSON *v, unsigned flags);
/* Appends s (NULL: "") to b as json_print writes a string, quotes
 * included: for printers that splice JSON text without building a tree. */
struct sbuf;
/* 1 for a byte a JSON string literal holds as it is (printable ASCII,
 * 0x20-0x7F, but '"' and '\\'), 0 for any other (a NUL, the end of a C
 * string, included): what json_put_string copies unescaped, and where a
 * reader of a string's contents may skip ahead without looking further. */
extern const unsigned char json_str_plain[256];

void json_put_string(struct sbuf *b, const char *s);
/* Appends v to b as json_print(v, 0) writes it (no text of its own to
 * copy and free): for the same printers. */
void json_put_value(struct sbuf *b, const cJSON *v);
/* Appends d to b as json_print writes a number node holding d (no
 * valuestring): for the same printers. */
void json_put_number(struct sbuf *b, double d);

/* Appends to b what json_print(v, 0) gives for the tree v that
 * json_parse(s, n, flags, &v, NULL) builds, without building it (flags:
 * 0 or JSON_NO_DUPLICATES). Returns 0, or -1 with b unchanged where
 * json_parse refuses the text. For printers that echo a JSON text they
 * hold in compact form (the Anthropic wire's tool_use input). */
int json_reprint(struct sbuf *b, const char *s, size_t n, unsigned flags);

/* json_print(v, JSON_CANONICAL): sorted keys, no spaces. Keys compare by
 * the bytes of their UTF-8 text, U+0000 (stored as C0 80) lowest. Caller
 * frees. Assumes no object holds a key twice (json_parse guarantees it). */
char *json_canonical(const cJSON *v);

/* BLAKE2b-256 of json_canonical(v) as 64 lowercase hex digits and a NUL;
 * it binds approvals and audit rows to the exact arguments. */
void json_hash_hex(const cJSON *v, char out[65]);

/* A deep copy of v's tree (v and what it holds, not its siblings) in one
 * block the caller provides: buf, cap bytes, aligned for a pointer.
 * Returns the bytes used, or 0 when it does not fit (or v is NULL); no
 * allocation. Its root (json_flat_root) is json_identical to v: it prints,
 * hashes and compares the same. It is read-only: never cJSON_Delete it or
 * a part of it, never add to it; freeing buf frees it. For a tree that
 * must outlive the one it copies, to be read later on another thread (the
 * audit writer prints and hashes a call's arguments from one). */
size_t json_flat_copy(const cJSON *v, void *buf, size_t cap);
/* The root of the flat copy in buf. */
const cJSON *json_flat_root(const void *buf);
/* Moves a flat copy of n bytes (what json_flat_copy returned) from from to
 * to (aligned for a pointer, n bytes, not overlapping from) and returns
 * its root there; from may be reused at once. */
const cJSON *json_flat_move(void *to, const void *from, size_t n);

/* Deep equality: 1 when a and b are the same JSON value, else 0. Numbers
 * compare exactly (1 == 1.0; integer texts in valuestring compare digit by
 * digit, with each other and with integral doubles; other numbers compare
 * as doubles, NaN unequal to itself). Object member order does not matter;
 * objects are assumed to hold each key once. Two NULLs are equal. */
int json_equal(const cJSON *a, const cJSON *b);

/* Identity, stricter than json_equal: 1 when a and b are the same tree as
 * json_print sees it (the same types, keys, strings, number texts and
 * double bits, children in the same order), so they print the same bytes;
 * else 0. Two NULLs are identical. For caches of printed text. */
int json_identical(const cJSON *a, const cJSON *b);

/* Appends code point cp as UTF-8 the way json_parse decodes a \u escape:
 * U+0000 as the two bytes C0 80 (the host's convention, so strings stay
 * NUL-terminated). For other readers of JSON text that must agree with
 * json_parse byte for byte. */
struct sbuf;
void json_put_codepoint(struct sbuf *b, unsigned cp);

/* Reads the escape at s[0] (a backslash; n bytes available) as json_parse
 * does: *cp gets the code point it stands for (a surrogate pair read as one)
 * and *used its length in bytes. JSON_ESC_OK, or why not; on a lone
 * surrogate *cp is that surrogate (for the message). For every reader of
 * JSON text that must agree with json_parse. */
enum {
  JSON_ESC_OK,
  JSON_ESC_SHORT,     /* the text ends after the backslash */
  JSON_ESC_UNKNOWN,   /* not one of " \\ / b f n r t u */
  JSON_ESC_HEX,       /* \\u without four hex digits */
  JSON_ESC_LONE_LOW,  /* a low surrogate without a high one */
  JSON_ESC_LONE_HIGH, /* a high surrogate not followed by a low one */
};
int json_unescape(const unsigned char *s, size_t n, unsigned *cp, size_t *used);

#endif
