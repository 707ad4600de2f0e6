/* test_select_examples.c - examples as documents of their own and their
 * bounds (select_examples.c, select.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"
#include "select.h"
#include "test.h"

static const char *const topics[] = {
    "weather forecast for a city",
    "translate text between languages",
    "book a table at a restaurant",
    "track a parcel delivery",
    "convert currencies at today's rate",
    "find recipes for dinner",
    "search academic papers",
    "check the stock price of a company",
    "plan a road trip route",
    "generate a QR code",
    "summarise a YouTube video",
    "find flights between two airports",
};
#define NTOPICS (sizeof topics / sizeof topics[0])

static const char *const requests[NTOPICS] = {
    "what is the weather forecast for Paris tomorrow",
    "please translate this text into other languages",
    "book me a table at an italian restaurant",
    "where is my parcel delivery right now",
    "convert 200 euros into currencies like yen",
    "give me recipes for a quick dinner",
    "search for academic papers on sleep",
    "check the stock price of Apple",
    "plan a road trip route through Spain",
    "generate a QR code for my website",
    "summarise this YouTube video for me",
    "find flights between Lisbon and Oslo airports",
};

/* The topics as tool0..tool11, then extra (may be NULL) at index NTOPICS. */
static struct selector *topic_set(struct embedder *m, const struct sel_params *p,
                                  const struct sel_doc *extra) {
  struct selector *s = selector_new(p);
  char name[32];
  for (size_t i = 0; i < NTOPICS; i++) {
    snprintf(name, sizeof name, "tool%zu", i);
    struct sel_doc d = {.name = name, .description = topics[i]};
    selector_add(s, &d);
  }
  if (extra) CHECK_INT(selector_add(s, extra), NTOPICS);
  struct err e;
  CHECK_INT(selector_build(s, m, NULL, NULL, &e), 0);
  return s;
}

static size_t top(struct selector *s, const char *q, enum sel_mode mode, struct sel_hit *h) {
  size_t n = 0;
  int deg;
  struct err e;
  selector_rank(s, q, mode, h, 8, &n, &deg, &e);
  return n ? h[0].doc : (size_t)-1;
}

/* Two skills alike but for one example: a request that restates the
 * example ranks its skill first, on the keyword side with the examples
 * field off (so only the example's own document can do it), fused, and in
 * the selection; without per-example scoring the two tie. */
static void test_example_lifts(struct embedder *m) {
  static const char *const ex[] = {"which flats can I rent in Lisbon this spring", NULL};
  struct sel_doc a = {.name = "homes-a", .description = "Listings of homes"};
  struct sel_doc b = {.name = "homes-b", .description = "Listings of homes", .examples = ex};
  const char *q = "are there flats I can rent in Lisbon";
  struct sel_params p;
  sel_params_default(&p);
  CHECK(p.f_examples == 0 && p.w_examples > 0);
  for (int emb = 0; emb < 2; emb++) {
    struct selector *s = selector_new(&p);
    selector_add(s, &a);
    selector_add(s, &b);
    struct err e;
    CHECK_INT(selector_build(s, emb ? m : NULL, NULL, NULL, &e), 0);
    struct sel_hit h[8];
    CHECK_INT(top(s, q, SEL_BM25, h), 1);
    CHECK(h[0].bm25 > 0);
    size_t n;
    int deg;
    selector_rank(s, q, SEL_FUSED, h, 8, &n, &deg, &e);
    CHECK(n >= 1 && h[0].doc == 1);
    CHECK(n == 1 || h[0].confidence > h[1].confidence);
    selector_free(s);
  }
  /* w_examples = 0: the example has no document of its own, and on the
   * keyword side (examples field 0) the two skills score the same */
  p.w_examples = 0;
  struct selector *s = selector_new(&p);
  selector_add(s, &a);
  selector_add(s, &b);
  struct err e;
  CHECK_INT(selector_build(s, NULL, NULL, NULL, &e), 0);
  struct sel_hit h[8];
  size_t n;
  int deg;
  selector_rank(s, q, SEL_BM25, h, 8, &n, &deg, &e);
  CHECK_INT(n, 0); /* no word of the request is in either document */
  selector_free(s);
  /* in a collection, the example pulls its skill above the topic skills */
  s = topic_set(m, NULL, &b);
  selector_select(s, q, h, 8, &n, &deg, &e);
  CHECK(n >= 1 && h[0].doc == NTOPICS);
  selector_free(s);
}

/* A skill with 50 examples: only the first 8 count, its best one (never a
 * sum) is what it gets, and it does not take the topics' requests. */
static void test_examples_capped(struct embedder *m) {
  static char buf[50][96];
  const char *ex[51];
  static const char *const generic[] = {"can you help me with this", "please do it for me",
                                        "I need some help today",    "what do you think",
                                        "show me how it works",      "tell me more about that",
                                        "could you take care of it", "find it for me please"};
  for (int i = 0; i < 8; i++) ex[i] = generic[i];
  for (int i = 8; i < 50; i++) { /* past the cap: restatements of the topics' requests */
    snprintf(buf[i], sizeof buf[i], "%s", requests[i % NTOPICS]);
    ex[i] = buf[i];
  }
  ex[50] = NULL;
  struct sel_doc hostile = {
      .name = "everything", .description = "A helpful assistant", .examples = ex};
  for (int emb = 0; emb < 2; emb++) {
    struct selector *s = topic_set(emb ? m : NULL, NULL, &hostile);
    struct sel_hit h[8];
    for (size_t i = 0; i < NTOPICS; i++) {
      size_t t = top(s, requests[i], SEL_FUSED, h);
      if (t != i) fprintf(stderr, "request %zu (%s) -> %zu\n", i, requests[i], t);
      CHECK_INT(t, i);
    }
    /* a request restating the 20th example word for word does not reach
     * the hostile skill through it (only the first 8 are indexed) */
    CHECK(top(s, ex[19], SEL_BM25, h) != NTOPICS);
    selector_free(s);
  }
  /* the best example, not the sum: eight copies of a matching example
   * score what one does */
  static const char *const one[] = {"which flats can I rent in Lisbon", NULL};
  static const char *const eight[] = {"which flats can I rent in Lisbon",
                                      "which flats can I rent in Lisbon",
                                      "which flats can I rent in Lisbon",
                                      "which flats can I rent in Lisbon",
                                      "which flats can I rent in Lisbon",
                                      "which flats can I rent in Lisbon",
                                      "which flats can I rent in Lisbon",
                                      "which flats can I rent in Lisbon",
                                      NULL};
  struct sel_doc d1 = {.name = "homes-a", .description = "Listings of homes", .examples = one};
  struct sel_doc d8 = {.name = "homes-b", .description = "Listings of homes", .examples = eight};
  struct selector *s = selector_new(NULL);
  selector_add(s, &d1);
  selector_add(s, &d8);
  struct err e;
  CHECK_INT(selector_build(s, NULL, NULL, NULL, &e), 0);
  struct sel_hit h[8];
  size_t n;
  int deg;
  selector_rank(s, "flats to rent in Lisbon", SEL_BM25, h, 8, &n, &deg, &e);
  CHECK_INT(n, 2);
  /* the examples' IDF differs a little with the copies; the sum would be
   * eight times as much */
  CHECK(h[0].bm25 < 1.5f * h[1].bm25);
  selector_free(s);
}

/* A hostile skill: 100,000 examples of 100 KB each (one buffer, shared).
 * Only the first 8, cut to 512 bytes, are indexed: a word past byte 512 or
 * in the 9th example is not found, one before it is, and the others'
 * requests still go to them. */
static void test_examples_bounded(struct embedder *m) {
  enum { NEX = 100000, LEN = 100 * 1024 };
  char *big = malloc(LEN + 1), *ninth = malloc(LEN + 1);
  CHECK(big && ninth);
  if (!big || !ninth) return;
  for (size_t i = 0; i < LEN; i++) big[i] = ninth[i] = "lorem ipsum "[i % 12];
  big[LEN] = ninth[LEN] = 0;
  memcpy(big + 100, " zebrafinch ", 12); /* within the first 512 bytes */
  memcpy(big + 600, " quokkaland ", 12); /* past them */
  memcpy(ninth + 100, " narwhalish ", 12);
  const char **ex = malloc(sizeof *ex * (NEX + 1));
  CHECK(ex != NULL);
  if (!ex) return;
  for (size_t i = 0; i < NEX; i++) ex[i] = i == 8 ? ninth : big;
  ex[NEX] = NULL;
  struct sel_doc hostile = {.name = "hoarder", .description = "Keeps everything", .examples = ex};
  struct sel_params p;
  sel_params_default(&p);
  p.f_examples = 1; /* the examples field too: it reads the same bounded copies */
  for (int emb = 0; emb < 2; emb++) {
    struct selector *s = topic_set(emb ? m : NULL, &p, &hostile);
    struct sel_hit h[8];
    CHECK_INT(top(s, "zebrafinch", SEL_BM25, h), NTOPICS);
    CHECK(top(s, "quokkaland", SEL_BM25, h) == (size_t)-1);
    CHECK(top(s, "narwhalish", SEL_BM25, h) == (size_t)-1);
    for (size_t i = 0; i < NTOPICS; i++) CHECK_INT(top(s, requests[i], SEL_FUSED, h), i);
    selector_free(s);
  }
  free(ex);
  free(big);
  free(ninth);
}

int main(void) {
  struct embed_opts o = {.kind = EMBED_BUILTIN};
  struct embedder *m;
  struct err e;
  CHECK_INT(embedder_new(&o, &m, &e), 0);
  test_example_lifts(m);
  test_examples_capped(m);
  test_examples_bounded(m);
  embedder_free(m);
  return TEST_END();
}
