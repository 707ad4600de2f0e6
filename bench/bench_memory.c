/* bench_memory.c - persistent memory: write, read, search and context
 * assembly latency over a store of N entries (default 10000) in a temp
 * file. Prints figures; never asserts. Usage: bench_memory [N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memory.h"
#include "runtime.h"
#include "store.h"
#include "util.h"

/* A Zipf-distributed vocabulary of VOCAB synthetic words ("w0" is the
 * most common), like natural text: a few words everywhere, most rare. */
#define VOCAB 5000
static double cdf[VOCAB];

static void zipf_init(void) {
  double sum = 0;
  for (int i = 0; i < VOCAB; i++) cdf[i] = (sum += 1.0 / (i + 1));
  for (int i = 0; i < VOCAB; i++) cdf[i] /= sum;
}

static int zipf_word(void) {
  double u = (double)rand() / ((double)RAND_MAX + 1);
  int lo = 0, hi = VOCAB - 1;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (cdf[mid] < u)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 10000;
  if (n < 1) n = 1;
  char dir[] = "/tmp/luagent-bench-memory.XXXXXX";
  if (!mkdtemp(dir)) return 1;
  struct err e = {0};
  struct runtime *rt = NULL;
  if (runtime_open(dir, &rt, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  struct store *s;
  if (runtime_store(rt, &s, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  srand(42);
  zipf_init();
  char key[64], val[512];
  double t0 = util_monotonic();
  for (long i = 0; i < n; i++) {
    snprintf(key, sizeof key, "note-%ld", i);
    int len = snprintf(val, sizeof val, "entry %ld:", i);
    for (int w = 0; w < 20; w++)
      len += snprintf(val + len, sizeof val - (size_t)len, " w%d", zipf_word());
    if (memory_put(s, "", key, val, (size_t)len, MEMORY_TEXT, 65536, NULL, &e)) {
      fprintf(stderr, "%s\n", e.msg);
      return 1;
    }
  }
  double put_us = (util_monotonic() - t0) / (double)n * 1e6;

  long reads = n < 10000 ? n : 10000;
  t0 = util_monotonic();
  for (long i = 0; i < reads; i++) {
    struct memory_item it;
    snprintf(key, sizeof key, "note-%ld", (long)(rand() % n));
    memory_get(s, "", key, &it, &e);
    memory_item_clear(&it);
  }
  double get_us = (util_monotonic() - t0) / (double)reads * 1e6;

  /* A common word, mid-frequency words, rare words, a question. */
  static const char *const queries[] = {"w1", "w20 w45", "w900 w1500 w3000",
                                        "what did we say about w7 and w300?"};
  int nq = 200;
  t0 = util_monotonic();
  for (int i = 0; i < nq; i++) {
    struct memory_item *items;
    size_t k;
    memory_search(s, "", queries[i % 4], 10, &items, &k, &e);
    memory_items_free(items, k);
  }
  double search_us = (util_monotonic() - t0) / nq * 1e6;

  printf(
      "memory over %ld entries of 20 Zipf-distributed words from %d (WAL, synchronous=NORMAL, one "
      "write per transaction):\n",
      n, VOCAB);
  for (int qi = 0; qi < 4; qi++) {
    double q0 = util_monotonic();
    size_t k = 0;
    for (int i = 0; i < 20; i++) {
      struct memory_item *items;
      memory_search(s, "", queries[qi], 10, &items, &k, &e);
      memory_items_free(items, k);
    }
    printf("  search %-40s %8.1f us (%zu hits)\n", queries[qi], (util_monotonic() - q0) / 20 * 1e6,
           k);
  }

  t0 = util_monotonic();
  for (int i = 0; i < nq; i++) {
    struct sbuf b = {0};
    memory_relevant(rt, queries[i % 4], 5, 2000, &b, &e);
    sbuf_free(&b);
  }
  double rel_us = (util_monotonic() - t0) / nq * 1e6;

  printf("  memory_put      %8.1f us/op\n", put_us);
  printf("  memory_get      %8.1f us/op\n", get_us);
  printf("  memory_search   %8.1f us/query (top 10; mix of common and rare words)\n", search_us);
  printf("  memory_relevant %8.1f us/message (top 5, 2000 bytes)\n", rel_us);
  runtime_free(rt);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
  return 0;
}
