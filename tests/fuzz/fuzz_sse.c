/* fuzz_sse.c - libFuzzer target for the SSE parser.
 *
 * Build and run: sh tests/fuzz/run_fuzz_sse.sh [seconds]
 * The first input byte picks a piece size; the rest is the stream. The
 * stream is parsed whole and in pieces, and the two event logs must match
 * (a split anywhere must not change what the parser sees). Crashes, leaks
 * and sanitizer reports are findings; so is a mismatch (abort). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sse.h"
#include "util.h"

static int on_event(void *ud, const struct sse_event *ev) {
  struct sbuf *s = ud;
  sbuf_printf(s, "[%s|%s|%zu|", ev->event, ev->id, ev->data_len);
  sbuf_append(s, ev->data, ev->data_len);
  sbuf_puts(s, "]");
  return 0;
}

static char *run(const uint8_t *d, size_t n, size_t step, int *rc) {
  struct sbuf s = {0};
  sbuf_puts(&s, "");
  struct sse_parser *p = sse_new(on_event, &s, 4096);
  struct err e = {0};
  *rc = 0;
  for (size_t i = 0; i < n && !*rc; i += step)
    *rc = sse_feed(p, (const char *)d + i, i + step > n ? n - i : step, &e);
  sbuf_printf(&s, "{pending=%d}", sse_finish(p));
  sse_free(p);
  return sbuf_take(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t step = (size_t)(data[0] % 17) + 1;
  data++, size--;
  int rc1, rc2;
  char *whole = run(data, size, size ? size : 1, &rc1);
  char *split = run(data, size, step, &rc2);
  /* Over-long input fails in both; the logs up to the failure may differ
   * only by where the failure was noticed, so compare only clean runs. */
  if (!rc1 && !rc2 && strcmp(whole, split)) abort();
  if ((rc1 == 0) != (rc2 == 0)) abort();
  free(whole);
  free(split);
  return 0;
}
