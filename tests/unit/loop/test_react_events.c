/* test_react_events.c - the loop's frequent events, printed once as text
 * (react_events.c), against the trees the loop used to build for them (the
 * old code of react.c, kept here verbatim): the text a text sink gets, and
 * the row the run journal stores, are json_print of the old tree byte for
 * byte, and a tree sink gets a tree identical to the old one, for hostile
 * content (every control character, quotes and backslashes, the host's
 * C0 80 for U+0000, invalid UTF-8 of every kind, a 1 MiB delta, tool
 * arguments that are nested JSON, NULL fields, numbers past 2^53 and
 * fractions). Every sink of a chain mixing both kinds sees every event, in
 * order, with the same content. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "call.h"
#include "events.h"
#include "journal.h"
#include "json.h"
#include "react_events.h"
#include "store.h"
#include "test.h"
#include "util.h"

/* ---- the old trees (react.c before branch events) ------------------------ */

static cJSON *old_text(const char *t) {
  cJSON *d = cJSON_CreateObject();
  cJSON_AddItemToObjectCS(d, "text", cJSON_CreateStringReference(t));
  return d;
}
static cJSON *old_tool_start(int index, const char *id, const char *name) {
  cJSON *d = cJSON_CreateObject();
  cJSON_AddNumberToObject(d, "index", index);
  cJSON_AddStringToObject(d, "id", id);
  cJSON_AddStringToObject(d, "name", name);
  return d;
}
static cJSON *old_tool_args(int index, const char *t) {
  cJSON *d = cJSON_CreateObject();
  cJSON_AddItemToObjectCS(d, "index", cJSON_CreateNumber(index));
  cJSON_AddItemToObjectCS(d, "delta", cJSON_CreateStringReference(t));
  return d;
}
static cJSON *old_tool_result(const char *id, const char *name, bool is_error, const char *code,
                              const char *content, double ms, bool threaded) {
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "id", id);
  cJSON_AddStringToObject(d, "name", name);
  cJSON_AddBoolToObject(d, "ok", !is_error);
  if (is_error) cJSON_AddStringToObject(d, "code", code);
  cJSON_AddStringToObject(d, "content", content);
  cJSON_AddNumberToObject(d, "ms", (double)(long)(ms * 1000) / 1000);
  if (threaded) cJSON_AddTrueToObject(d, "parallel");
  return d;
}
static cJSON *old_usage(const char *provider, long in, long out, long cr, long cw, int attempts) {
  cJSON *d = cJSON_CreateObject();
  cJSON_AddStringToObject(d, "provider", provider);
  cJSON_AddNumberToObject(d, "input_tokens", in);
  cJSON_AddNumberToObject(d, "output_tokens", out);
  cJSON_AddNumberToObject(d, "cache_read_input_tokens", cr);
  cJSON_AddNumberToObject(d, "cache_creation_input_tokens", cw);
  cJSON_AddNumberToObject(d, "attempts", attempts);
  return d;
}
static cJSON *old_turn(int iterations, size_t ncalls, const char *stop_reason) {
  cJSON *d = cJSON_CreateObject();
  cJSON_AddNumberToObject(d, "iteration", iterations);
  cJSON_AddNumberToObject(d, "tool_calls", (double)ncalls);
  cJSON_AddStringToObject(d, "stop_reason", stop_reason);
  return d;
}

/* ---- sinks that record what they get ------------------------------------ */

#define MAXEV 4096
struct got {
  int n;
  char *type[MAXEV];
  char *text[MAXEV];  /* json_print of the tree, or the text as given */
  cJSON *tree[MAXEV]; /* tree sinks only */
};

static void got_free(struct got *g) {
  for (int i = 0; i < g->n; i++) {
    free(g->type[i]);
    free(g->text[i]);
    cJSON_Delete(g->tree[i]);
  }
  g->n = 0;
}

/* An old-style sink: emit only, gets the tree. */
static void tree_emit(void *ud, const char *run_id, const char *type, const cJSON *data) {
  struct got *g = ud;
  (void)run_id;
  if (g->n == MAXEV) return;
  g->type[g->n] = xstrdup(type);
  g->text[g->n] = data ? json_print(data, 0) : NULL;
  g->tree[g->n] = data ? cJSON_Duplicate(data, 1) : NULL;
  g->n++;
}

/* A text sink (as the journal is). */
static void text_event(void *ud, struct event *ev) {
  struct got *g = ud;
  if (g->n == MAXEV) return;
  size_t len = 0;
  const char *j = event_json(ev, &len);
  g->type[g->n] = xstrdup(ev->type);
  g->text[g->n] = j ? xstrdup(j) : NULL;
  if (j) CHECK_INT(strlen(j), len);
  g->tree[g->n] = NULL;
  g->n++;
}

/* A new-style sink that asks for the tree. */
static void tree_event(void *ud, struct event *ev) {
  struct got *g = ud;
  if (g->n == MAXEV) return;
  const cJSON *d = event_data(ev);
  g->type[g->n] = xstrdup(ev->type);
  g->text[g->n] = d ? json_print(d, 0) : NULL;
  g->tree[g->n] = d ? cJSON_Duplicate(d, 1) : NULL;
  g->n++;
}

/* What each event should have been: the old tree and its type. */
struct expect {
  int n;
  char *type[MAXEV];
  cJSON *tree[MAXEV];
};
static void expect(struct expect *x, const char *type, cJSON *tree) {
  /* the old trees borrow the strings they reference: keep a copy whose
   * strings are its own, as json_print and json_identical see the same */
  x->type[x->n] = xstrdup(type);
  x->tree[x->n] = cJSON_Duplicate(tree, 1);
  cJSON_Delete(tree);
  x->n++;
}

static void check_got(const struct got *g, const struct expect *x, int want_tree, const char *who) {
  CHECK_INT(g->n, x->n);
  int bad = 0;
  for (int i = 0; i < g->n && i < x->n; i++) {
    char *want = json_print(x->tree[i], 0);
    if (strcmp(g->type[i], x->type[i]) || !g->text[i] || strcmp(g->text[i], want) ||
        (want_tree && !json_identical(g->tree[i], x->tree[i]))) {
      if (bad++ < 3)
        fprintf(stderr, "%s: event %d (%s) differs:\n  got  %.300s\n  want %.300s\n", who, i,
                x->type[i], g->text[i] ? g->text[i] : "(null)", want);
    }
    free(want);
  }
  CHECK_INT(bad, 0);
}

/* ---- hostile content ---------------------------------------------------- */

static const char *const HOSTILE[] = {
    "",
    "plain",
    "quote \" backslash \\ slash / del \x7f",
    "\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18"
    "\x19\x1a\x1b\x1c\x1d\x1e\x1f",
    "\x1b[2K\r<- ok",
    "nul \xc0\x80 here, \xc0\x80\xc0\x80 twice, trailing \xc0",
    "lone continuation \x80 and \xbf, byte \xff \xfe",
    "truncated \xe2\x82 and \xf0\x9f\x98 end \xe2",
    "overlong \xc0\xaf \xe0\x80\xaf \xc1\xbf",
    "surrogate \xed\xa0\x80 \xed\xbf\xbf",
    "past U+10FFFF \xf4\x90\x80\x80 \xf5\x80\x80\x80",
    "valid \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xef\xbf\xbd \xe2\x80\xa8\xe2\x80\xa9",
    "{\"a\":[{\"b\":{\"c\":\"\\u0000\",\"d\":[1,2.5e10,-0,true,null]}}],\"e\":\"\\\"}\"}",
    "{\"path\":\"/tmp/x\",\"nested\":{\"deep\":[[[[[[[[{\"k\":\"v\\n\"}]]]]]]]]}}",
    "\\u0000 \\ud800 written out, not decoded",
};
#define NHOSTILE (sizeof HOSTILE / sizeof HOSTILE[0])

static char *huge(void) {
  size_t n = 1 << 20;
  char *s = xmalloc(n + 1);
  const char pat[] = "ab\"\\\n\x01\xc3\xa9\xff\xe2\x82";
  for (size_t i = 0; i < n; i++) s[i] = pat[i % (sizeof pat - 1)];
  s[n] = 0;
  return s;
}

/* Emits every kind of event with every hostile string through ctx, and
 * records the old tree of each in x. */
static void emit_all(struct call_ctx *ctx, struct expect *x, const char *big) {
  struct sbuf b = {0};
  const char *strs[NHOSTILE + 1];
  for (size_t i = 0; i < NHOSTILE; i++) strs[i] = HOSTILE[i];
  strs[NHOSTILE] = big;
  for (size_t i = 0; i <= NHOSTILE; i++) {
    const char *s = strs[i];
    const char *t = HOSTILE[(i + 3) % NHOSTILE];
    int idx = (int)i * 7 - 3;
    react_ev_text(ctx, &b, s);
    expect(x, "text_delta", old_text(s));
    react_ev_tool_start(ctx, &b, idx, s, t);
    expect(x, "tool_call_start", old_tool_start(idx, s, t));
    react_ev_tool_args(ctx, &b, idx, s);
    expect(x, "tool_args_delta", old_tool_args(idx, s));
    double ms = (double)i * 123.4567891 + 0.0005;
    struct react_ev_result f = {.id = t,
                                .name = s,
                                .ok = i % 2,
                                .code = "invalid_args",
                                .content = s,
                                .ms = (double)(long)(ms * 1000) / 1000,
                                .parallel = i % 3 == 0};
    react_ev_tool_result(ctx, &b, &f);
    expect(x, "tool_result", old_tool_result(t, s, !(i % 2), "invalid_args", s, ms, i % 3 == 0));
    long in = i == 0 ? LONG_MAX : (long)i * 1000003, out = i == 1 ? LONG_MIN : -(long)i;
    long cr = i == 2 ? (1L << 53) + 1 : 0, cw = (1L << 53) - (long)i;
    struct react_ev_usage u = {.provider = s,
                               .input_tokens = (double)in,
                               .output_tokens = (double)out,
                               .cache_read = (double)cr,
                               .cache_write = (double)cw,
                               .attempts = (int)i};
    react_ev_usage(ctx, &b, &u);
    expect(x, "usage", old_usage(s, in, out, cr, cw, (int)i));
    react_ev_turn(ctx, &b, (int)i + 1, (double)(i * 2), t);
    expect(x, "turn_complete", old_turn((int)i + 1, i * 2, t));
  }
  /* NULL strings: the old cJSON_AddStringToObject left the member out */
  react_ev_tool_start(ctx, &b, 0, NULL, NULL);
  expect(x, "tool_call_start", old_tool_start(0, NULL, NULL));
  struct react_ev_result f = {.ok = false, .code = "x", .content = NULL, .ms = 0.25};
  react_ev_tool_result(ctx, &b, &f);
  expect(x, "tool_result", old_tool_result(NULL, NULL, true, "x", NULL, 0.25, false));
  struct react_ev_usage u = {.provider = NULL};
  react_ev_usage(ctx, &b, &u);
  expect(x, "usage", old_usage(NULL, 0, 0, 0, 0, 0));
  sbuf_free(&b);
}

static void free_expect(struct expect *x) {
  for (int i = 0; i < x->n; i++) {
    free(x->type[i]);
    cJSON_Delete(x->tree[i]);
  }
  x->n = 0;
}

/* A chain of an old tree sink, a text sink and a new tree sink: each sees
 * every event in order, as the old tree printed / identical to it. */
static void test_sinks_see_the_old_events(void) {
  static struct got g1, g2, g3;
  static struct expect x;
  struct event_sink s3 = {.emit_event = tree_event, .ud = &g3};
  struct event_sink s2 = {.emit_event = text_event, .ud = &g2, .next = &s3};
  struct event_sink s1 = {.emit = tree_emit, .ud = &g1, .next = &s2};
  struct call_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  snprintf(ctx.run_id, sizeof ctx.run_id, "r-events");
  ctx.events = &s1;
  char *big = huge();
  emit_all(&ctx, &x, big);
  check_got(&g1, &x, 1, "emit sink");
  check_got(&g2, &x, 0, "text sink");
  check_got(&g3, &x, 1, "event_data sink");
  /* the attack has teeth: the old trees' texts hold what json_print makes
   * of the hostile bytes (escapes, U+FFFD), not the bytes themselves */
  char *t = json_print(x.tree[3 * 6], 0); /* text_delta of HOSTILE[3] */
  CHECK_CONTAINS(t, "\\u0001\\u0002");
  free(t);
  got_free(&g1), got_free(&g2), got_free(&g3), free_expect(&x);
  /* no sink: nothing is built, nothing is sent, nothing crashes */
  ctx.events = NULL;
  struct expect none = {0};
  emit_all(&ctx, &none, big);
  free_expect(&none);
  free(big);
}

/* The journal stores each event's text: its rows are the old trees
 * printed, byte for byte, in order. */
static char dir[64];
static void test_journal_rows(void) {
  struct journal *j = NULL;
  struct err e = {0};
  CHECK_INT(journal_open(dir, &j, &e), 0);
  if (!j) return;
  static struct got g;
  static struct expect x;
  struct event_sink after = {.emit = tree_emit, .ud = &g};
  struct event_sink js = {0};
  journal_sink(j, &js);
  js.next = &after; /* a tree sink after the journal still gets every event */
  struct call_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  snprintf(ctx.run_id, sizeof ctx.run_id, "r-journal");
  ctx.events = &js;
  cJSON *start = cJSON_CreateObject();
  cJSON_AddStringToObject(start, "kind", "ask");
  events_emit(ctx.events, ctx.run_id, "run_start", start);
  expect(&x, "run_start", start);
  char *big = huge();
  emit_all(&ctx, &x, big);
  free(big);
  cJSON *end = cJSON_CreateObject();
  cJSON_AddStringToObject(end, "status", "done");
  cJSON_AddStringToObject(end, "answer", "a\xff\x01");
  cJSON_AddNumberToObject(end, "tool_calls", 3);
  events_emit(ctx.events, ctx.run_id, "run_end", end);
  expect(&x, "run_end", end);
  journal_flush(j);
  check_got(&g, &x, 1, "tree sink after the journal");
  struct store *st = NULL;
  CHECK_INT(store_open(dir, &st, &e), 0);
  sqlite3_stmt *q = NULL;
  if (st && !store_prepare(st, "SELECT seq, type, data FROM events WHERE run_id = ? ORDER BY seq",
                           &q, &e)) {
    sqlite3_bind_text(q, 1, ctx.run_id, -1, SQLITE_STATIC);
    int i = 0, bad = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
      if (i < x.n) {
        char *want = json_print(x.tree[i], 0);
        const char *d = (const char *)sqlite3_column_text(q, 2);
        int n = sqlite3_column_bytes(q, 2);
        if (sqlite3_column_int64(q, 0) != i + 1 ||
            strcmp((const char *)sqlite3_column_text(q, 1), x.type[i]) || !d ||
            (size_t)n != strlen(want) || memcmp(d, want, (size_t)n))
          if (bad++ < 3) fprintf(stderr, "row %d (%s) differs: %.200s\n", i + 1, x.type[i], d);
        free(want);
      }
      i++;
    }
    CHECK_INT(i, x.n);
    CHECK_INT(bad, 0);
    sqlite3_finalize(q);
    /* run_end still reaches the runs row through its tree */
    CHECK_INT(store_prepare(st, "SELECT status, tool_calls FROM runs WHERE id = ?", &q, &e), 0);
    if (q) {
      sqlite3_bind_text(q, 1, ctx.run_id, -1, SQLITE_STATIC);
      CHECK_INT(sqlite3_step(q), SQLITE_ROW);
      CHECK_STR((const char *)sqlite3_column_text(q, 0), "done");
      CHECK_INT(sqlite3_column_int64(q, 1), 3);
      sqlite3_finalize(q);
    }
  }
  store_close(st);
  journal_close(j);
  got_free(&g), free_expect(&x);
}

/* json_put_number is put_number: every kind of double against json_print;
 * and an event member written by evtext_num (its own path for integers)
 * is that number under its key. */
static void test_numbers(void) {
  const double v[] = {0, -0.0, 1, -1, 0.5, 0.001, 123.456, 1e-7, 1e21, 9007199254740991.0,
                      9007199254740992.0, 9007199254740993.0, -9007199254740992.0, 1e300,
                      -1e-300, 0.1 + 0.2, (double)LONG_MAX, (double)LONG_MIN, NAN, INFINITY,
                      -INFINITY, 5e-324, 7, 42, 1e15, -1e15, 1e15 - 1, -1e15 + 1,
                      999999999999999.5, 2147483648.0, -2147483649.0, 1e9, 12345678901234.0};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    cJSON *n = cJSON_CreateNumber(v[i]);
    char *want = json_print(n, 0);
    struct sbuf b = {0};
    json_put_number(&b, v[i]);
    sbuf_append(&b, "", 0);
    CHECK_STR(b.s, want);
    sbuf_free(&b);
    char member[80];
    snprintf(member, sizeof member, "{\"n\":%s}", want);
    evtext_open(&b);
    evtext_num(&b, "n", v[i]);
    evtext_close(&b);
    CHECK_STR(b.s, member);
    sbuf_free(&b);
    free(want);
    cJSON_Delete(n);
  }
}

/* The printer json_print used for every non-integral number before the
 * fast path for thousandths (json.c put_milli): shortest of %.15g, %.16g,
 * %.17g that reads back. */
static void ref_number(double d, char *buf, size_t n) {
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(buf, n, "%.*g", prec, d);
    if (strtod(buf, NULL) == d) break;
  }
}

static int same_number(double d) {
  char want[64];
  ref_number(d, want, sizeof want);
  struct sbuf b = {0};
  json_put_number(&b, d);
  sbuf_append(&b, "", 0);
  int ok = !strcmp(b.s, want);
  if (!ok) fprintf(stderr, "number %.17g: got %s, want %s\n", d, b.s, want);
  sbuf_free(&b);
  return ok;
}

/* Durations in thousandths (every tool_result's ms) print as they did:
 * every k/1000 for |k| <= 300,000, 200,000 random k up to 5e11 and
 * around it, k/1000 computed otherwise, and fractions that are not
 * thousandths (which take the old path). */
static void test_thousandths(void) {
  int bad = 0;
  for (long k = -300000; k <= 300000 && bad < 5; k++)
    if (k % 1000 && !same_number((double)k / 1000)) bad++;
  unsigned long long x = 88172645463325252ULL;
  for (int i = 0; i < 200000 && bad < 5; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    long long k = (long long)(x % 1000000000000000ULL) - 500000000000000LL; /* |k| < 5e14 */
    double d = (double)k / 1000;
    if (d != floor(d) && !same_number(d)) bad++;
    double m = (double)(long)(((double)(x >> 11) / 9007199254740992.0 * 1e5) * 1000) / 1000;
    if (m != floor(m) && !same_number(m)) bad++;
    double r = (double)(x >> 11) / 9007199254740992.0 * 2e12 - 1e12;
    if (r != floor(r) && !same_number(r)) bad++;
  }
  const double edge[] = {999999999999.999, -999999999999.999, 1e12 - 0.001, 1e12 + 0.5,
                         0.001,            -0.001,            0.1 + 0.2,    1.0 / 3,
                         2.675,            1e-4,              123456.789e3 + 0.125};
  for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
    if (edge[i] != floor(edge[i]) && !same_number(edge[i])) bad++;
  CHECK_INT(bad, 0);
}

/* Two text sinks share one print of a tree event; a text event without a
 * builder reads back as its text; NULL data stays NULL for both kinds. */
static const char *seen_json[4];
static int nseen;
static void ptr_event(void *ud, struct event *ev) {
  (void)ud;
  if (nseen < 4) seen_json[nseen++] = event_json(ev, NULL);
}
static void test_forms_made_once(void) {
  static struct got g;
  struct event_sink t = {.emit = tree_emit, .ud = &g};
  struct event_sink b = {.emit_event = ptr_event, .next = &t};
  struct event_sink a = {.emit_event = ptr_event, .next = &b};
  cJSON *d = cJSON_Parse("{\"k\":[1,{\"x\":\"\\u0001\"}]}");
  nseen = 0;
  events_emit(&a, "r", "custom", d);
  CHECK_INT(nseen, 2);
  CHECK(seen_json[0] && seen_json[0] == seen_json[1]); /* printed once, shared */
  CHECK_INT(g.n, 1);
  CHECK(g.n == 1 && json_identical(g.tree[0], d));
  cJSON_Delete(d);
  const char *txt = "{\"a\":\"\\u0007\",\"b\":[true,null,2.5]}";
  nseen = 0;
  events_emit_text(&a, "r", "custom", txt, strlen(txt), NULL, NULL);
  CHECK_INT(nseen, 2);
  CHECK(seen_json[0] == txt && seen_json[1] == txt); /* the emitter's text itself */
  CHECK_INT(g.n, 2);
  CHECK_STR(g.n == 2 ? g.text[1] : NULL, txt);
  nseen = 0;
  events_emit(&a, "r", "empty", NULL);
  CHECK_INT(nseen, 2);
  CHECK(!seen_json[0] && !seen_json[1]);
  CHECK_INT(g.n, 3);
  CHECK(g.n == 3 && !g.text[2] && !g.tree[2]);
  events_emit(NULL, "r", "nobody", NULL); /* no chain: nothing */
  got_free(&g);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/luagent-react-events-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_numbers();
  test_thousandths();
  test_forms_made_once();
  test_sinks_see_the_old_events();
  test_journal_rows();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) {
  }
  return TEST_END();
}
