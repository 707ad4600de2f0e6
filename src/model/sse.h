/* sse.h - an incremental parser for Server-Sent Events (text/event-stream).
 *
 * Bytes arrive in arbitrary pieces (curl write callbacks); the parser keeps
 * the unfinished line and the event being built between calls, so a line
 * or an event may be split anywhere, even between the CR and LF of a CRLF.
 * It follows the WHATWG event-stream rules: lines end in CRLF, LF or CR; a
 * line starting with ':' is a comment; "field: value" drops one space after
 * the colon; several data lines join with '\n'; an empty line dispatches
 * the event (unless it has no data); a leading UTF-8 BOM is skipped. What
 * the data means ("[DONE]", JSON) is the caller's business.
 *
 * Lines and events are capped (max_bytes), so a hostile stream cannot grow
 * memory without bound: feeding past the cap fails with ERR_LIMIT.
 */
#ifndef LUAGENT_SSE_H
#define LUAGENT_SSE_H

#include <stddef.h>

#include "err.h"

struct sse_event {
  const char *event; /* "message" when the stream named none */
  const char *data;  /* NUL-terminated, data_len bytes (may hold NULs) */
  size_t data_len;
  const char *id; /* last event id seen, "" if none */
};

/* Called once per dispatched event; pointers are valid only during the
 * call. Return 0 to go on, non-zero to stop: sse_feed returns that value. */
typedef int (*sse_event_fn)(void *ud, const struct sse_event *ev);

struct sse_parser;

/* max_bytes caps one line and one event's data (0: 8 MiB). */
struct sse_parser *sse_new(sse_event_fn fn, void *ud, size_t max_bytes);
void sse_free(struct sse_parser *p); /* NULL is a no-op */

/* Feeds n bytes. Returns 0, the callback's non-zero value (parsing stops
 * there), or ERR_LIMIT (e filled) when a line or event passes the cap. */
int sse_feed(struct sse_parser *p, const char *buf, size_t n, struct err *e);

/* End of stream: a final line without a terminator is processed; an event
 * not closed by an empty line is discarded, as the standard says. Returns
 * 1 if such an unfinished event was pending (the stream was cut), else 0. */
int sse_finish(struct sse_parser *p);

/* The last event id the stream set ("" if none), and its last retry
 * field in milliseconds (-1 if none): what a client reconnecting with
 * Last-Event-ID needs. */
const char *sse_last_id(const struct sse_parser *p);
long sse_retry_ms(const struct sse_parser *p);

/* Number of events dispatched so far. */
size_t sse_count(const struct sse_parser *p);

#endif
