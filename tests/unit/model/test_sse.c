/* test_sse.c - the incremental SSE parser: framing rules, every split
 * point, limits, and a replay of the fuzz corpus (tests/fuzz/corpus_sse)
 * checking that feeding in pieces gives the same events as feeding whole. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "sse.h"
#include "test.h"
#include "util.h"

struct log {
  struct sbuf s;
  int stop_after; /* stop (return 7) after this many events; 0 = never */
  int n;
};

static int on_event(void *ud, const struct sse_event *ev) {
  struct log *l = ud;
  sbuf_printf(&l->s, "[%s|%s|", ev->event, ev->id);
  sbuf_append(&l->s, ev->data, ev->data_len);
  sbuf_puts(&l->s, "]");
  l->n++;
  if (l->stop_after && l->n >= l->stop_after) return 7;
  return 0;
}

/* Parses text fed in pieces of `step` bytes (0 = whole); returns the log. */
static char *parse(const char *text, size_t len, size_t step, int *rc_out, int *pending) {
  struct log l = {0};
  struct sse_parser *p = sse_new(on_event, &l, 0);
  struct err e = {0};
  int rc = 0;
  if (!step) step = len ? len : 1;
  for (size_t i = 0; i < len && !rc; i += step)
    rc = sse_feed(p, text + i, i + step > len ? len - i : step, &e);
  int pend = sse_finish(p);
  if (rc_out) *rc_out = rc;
  if (pending) *pending = pend;
  sse_free(p);
  if (!l.s.s) sbuf_puts(&l.s, "");
  return sbuf_take(&l.s);
}

static void check_all_splits(const char *text, const char *expect) {
  size_t len = strlen(text);
  for (size_t step = 0; step <= len; step++) {
    char *got = parse(text, len, step, NULL, NULL);
    if (strcmp(got, expect)) fprintf(stderr, "split step %zu:\n", step);
    CHECK_STR(got, expect);
    free(got);
  }
}

/* Two pieces split at every position. */
static void check_two_piece_splits(const char *text, const char *expect) {
  size_t len = strlen(text);
  for (size_t cut = 0; cut <= len; cut++) {
    struct log l = {0};
    struct sse_parser *p = sse_new(on_event, &l, 0);
    struct err e = {0};
    sse_feed(p, text, cut, &e);
    sse_feed(p, text + cut, len - cut, &e);
    sse_finish(p);
    sse_free(p);
    if (!l.s.s) sbuf_puts(&l.s, "");
    if (strcmp(l.s.s, expect)) fprintf(stderr, "cut at %zu:\n", cut);
    CHECK_STR(l.s.s, expect);
    sbuf_free(&l.s);
  }
}

static void test_framing(void) {
  check_all_splits("data: hello\n\n", "[message||hello]");
  check_all_splits("data: a\r\n\r\ndata: b\r\r", "[message||a][message||b]");
  check_two_piece_splits("data: a\r\n\r\ndata: b\r\n\r\n", "[message||a][message||b]");
  check_all_splits(": a comment\ndata: x\n: another\n\n", "[message||x]");
  check_all_splits("data: line1\ndata: line2\ndata\n\n", "[message||line1\nline2\n]");
  check_all_splits("event: content_block_delta\nid: 42\ndata: {\"a\":1}\n\n",
                   "[content_block_delta|42|{\"a\":1}]");
  /* the event type resets after each dispatch, the id does not */
  check_all_splits("event: ping\nid: 1\ndata: {}\n\ndata: next\n\n", "[ping|1|{}][message|1|next]");
  /* no space after the colon; only one space is dropped */
  check_all_splits("data:tight\n\ndata:  two\n\n", "[message||tight][message|| two]");
  /* an event without data is not dispatched */
  check_all_splits("event: nothing\n\n\n\ndata: [DONE]\n\n", "[message||[DONE]]");
  /* unknown fields and retry are ignored */
  check_all_splits("retry: 100\nfoo: bar\ndata: y\n\n", "[message||y]");
  /* a UTF-8 BOM at the start is skipped, also when split */
  check_all_splits(
      "\xEF\xBB\xBF"
      "data: bom\n\n",
      "[message||bom]");
  /* not a BOM: the bytes are kept */
  check_all_splits(
      "\xEF"
      "data: x\n\n",
      "");
  /* an empty data value still dispatches */
  check_all_splits("data:\n\n", "[message||]");
}

static void test_finish_and_stop(void) {
  int rc, pending;
  char *got = parse("data: done\n\ndata: cut in the mid", 33, 5, &rc, &pending);
  CHECK_STR(got, "[message||done]");
  CHECK_INT(pending, 1);
  free(got);
  got = parse("data: done\n\n", 12, 0, &rc, &pending);
  CHECK_INT(pending, 0);
  free(got);
  got = parse("data: done\n\ndata: more\n", 23, 0, &rc, &pending);
  CHECK_INT(pending, 1); /* event not closed by an empty line */
  free(got);

  struct log l = {.stop_after = 1};
  struct sse_parser *p = sse_new(on_event, &l, 0);
  struct err e = {0};
  const char *two = "data: 1\n\ndata: 2\n\n";
  CHECK_INT(sse_feed(p, two, strlen(two), &e), 7);
  CHECK_STR(l.s.s, "[message||1]");
  CHECK_INT(sse_count(p), 1);
  sse_free(p);
  sbuf_free(&l.s);
  sse_free(NULL);
}

static void test_limits(void) {
  struct log l = {0};
  struct sse_parser *p = sse_new(on_event, &l, 16);
  struct err e = {0};
  const char *long_line = "data: 0123456789012345678901234567890\n\n";
  CHECK_INT(sse_feed(p, long_line, strlen(long_line), &e), ERR_LIMIT);
  CHECK_CONTAINS(e.msg, "over 16 bytes");
  sse_free(p);
  /* many short data lines that add up past the cap */
  p = sse_new(on_event, &l, 16);
  err_clear(&e);
  const char *many = "data: 12345\ndata: 12345\ndata: 12345\n\n";
  CHECK_INT(sse_feed(p, many, strlen(many), &e), ERR_LIMIT);
  CHECK_STR(e.code, "sse_too_large");
  sse_free(p);
  /* the cap counts a '\n' per data line (the text joins them with one
   * between lines): 6 + 9 + 1 fits 16, 6 + 10 + 1 does not */
  p = sse_new(on_event, &l, 16);
  err_clear(&e);
  const char *fits = "data: 12345\ndata: 123456789\n\n";
  CHECK_INT(sse_feed(p, fits, strlen(fits), &e), 0);
  CHECK_STR(l.s.s, "[message||12345\n123456789]");
  sse_free(p);
  p = sse_new(on_event, &l, 16);
  const char *over = "data: 12345\ndata: 1234567890\n\n";
  CHECK_INT(sse_feed(p, over, strlen(over), &e), ERR_LIMIT);
  sse_free(p);
  /* split a long line across many feeds: still caught */
  p = sse_new(on_event, &l, 16);
  int rc = 0;
  for (int i = 0; i < 40 && !rc; i++) rc = sse_feed(p, "x", 1, &e);
  CHECK_INT(rc, ERR_LIMIT);
  sse_free(p);
  sbuf_free(&l.s);
}

/* Replays every corpus file: whole, byte by byte, and in odd pieces must
 * give identical events. */
static void test_corpus(void) {
  const char *src = getenv("LUAGENT_SOURCE_DIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus_sse", src ? src : LUAGENT_SOURCE_DIR);
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  if (!d) return;
  int files = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    char *buf;
    size_t len;
    struct err e = {0};
    if (util_read_file(path, 1 << 20, &buf, &len, &e)) continue;
    files++;
    char *whole = parse(buf, len, 0, NULL, NULL);
    size_t steps[] = {1, 2, 3, 7, 64};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
      char *split = parse(buf, len, steps[k], NULL, NULL);
      if (strcmp(whole, split))
        fprintf(stderr, "corpus %s step %zu differs\n", de->d_name, steps[k]);
      CHECK_STR(split, whole);
      free(split);
    }
    free(whole);
    free(buf);
  }
  closedir(d);
  CHECK(files >= 5);
}

/* What a reconnecting client reads back: the last id (also from an event
 * with no data, a priming event) and the retry field (digits only). */
static void test_resume_fields(void) {
  struct log l = {0};
  struct sse_parser *p = sse_new(on_event, &l, 0);
  struct err e = {0};
  CHECK_STR(sse_last_id(p), "");
  CHECK(sse_retry_ms(p) == -1);
  const char *a = "id: p1\nretry: 250\ndata:\n\n";
  CHECK(sse_feed(p, a, strlen(a), &e) == 0);
  CHECK_STR(sse_last_id(p), "p1");
  CHECK(sse_retry_ms(p) == 250);
  const char *b = "retry: 12x\nretry:\nid: e2\ndata: x\n\n";
  CHECK(sse_feed(p, b, strlen(b), &e) == 0);
  CHECK(sse_retry_ms(p) == 250); /* not all digits, or empty: ignored */
  CHECK_STR(sse_last_id(p), "e2");
  const char *c = "id: bad\0id\ndata: y\n\n";
  CHECK(sse_feed(p, c, 20, &e) == 0);
  CHECK_STR(sse_last_id(p), "e2"); /* an id with NUL is ignored */
  sse_free(p);
  sbuf_free(&l.s);
  CHECK_STR(sse_last_id(NULL), "");
}

int main(void) {
  test_resume_fields();
  test_framing();
  test_finish_and_stop();
  test_limits();
  test_corpus();
  return TEST_END();
}
