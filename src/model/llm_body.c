/* llm_body.c - what is kept of the request bodies sent (llm.h, struct
 * llm_body_cache), so each model call serialises only what is new: the
 * wire messages of the history seen before (per run or chat session), and
 * the printed system prompt, tools and prompt cache key (per process).
 *
 * The rule that keeps the bytes identical to a full rebuild: a cached
 * piece is used only when what it was made from is the same JSON, node for
 * node and byte for byte (json_identical), as what the request holds now;
 * anything else (a message trimmed, replaced or removed by compaction, a
 * tool added by skills.load, another system prompt) rebuilds that piece
 * from the request. The wire formats' printed JSON is context-free (a
 * value prints the same inside or outside its parent), so pieces printed
 * alone splice into the same text the whole body prints as. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "llm.h"
#include "util.h"

struct piece {
  bool set;
  unsigned long used; /* when last used, for replacing the oldest */
  int variant;
  char *skey;   /* the string part of the key */
  cJSON *jkey;  /* a copy of the JSON part of the key (may be NULL) */
  char *text;   /* what was made from them */
};

enum { PIECES = 4, WAYS = 4 };

/* The pieces (system prompt, tools, cache key) are kept for the process,
 * not the run: every run of an `ask`, a chat or a daemon sends the same
 * tools, and printing them is most of a first request's cost. WAYS sets
 * per slot, so runs with different tool lists in parallel (delegate())
 * do not push each other out every call. */
static pthread_mutex_t pieces_mu = PTHREAD_MUTEX_INITIALIZER;
static struct piece pieces[LLM__WIRES][PIECES][WAYS];
static unsigned long pieces_clock;
static pthread_once_t pieces_once = PTHREAD_ONCE_INIT;
/* fork() while another thread holds the lock would leave the child's copy
 * locked for good: it is held across the fork instead (as llm_conn.c). */
static void before_fork(void) { pthread_mutex_lock(&pieces_mu); }
static void after_fork(void) { pthread_mutex_unlock(&pieces_mu); }
static void pieces_init(void) { pthread_atfork(before_fork, after_fork, after_fork); }

struct wire_cache {
  cJSON *snap;      /* copies of the neutral messages [0, n) */
  size_t n;
  struct sbuf text; /* their wire messages, printed, ','-joined */
  int last_class;   /* the class of the last message of [0, n) that had one */
};

struct llm_body_cache {
  struct wire_cache w[LLM__WIRES];
  long hits, rebuilds; /* for tests: history reused / rebuilt from the start */
};

struct llm_body_cache *llm_body_cache_new(void) {
  return xcalloc(1, sizeof(struct llm_body_cache));
}

static void piece_clear(struct piece *p) {
  free(p->skey);
  cJSON_Delete(p->jkey);
  free(p->text);
  memset(p, 0, sizeof *p);
}

static void history_clear(struct wire_cache *w) {
  cJSON_Delete(w->snap);
  w->snap = NULL;
  w->n = 0;
  w->text.len = 0;
  if (w->text.s) w->text.s[0] = 0;
  w->last_class = 0;
}

void llm_body_cache_free(struct llm_body_cache *c) {
  if (!c) return;
  for (int k = 0; k < LLM__WIRES; k++) {
    history_clear(&c->w[k]);
    sbuf_free(&c->w[k].text);
  }
  free(c);
}

void llm__body_cache_stats(const struct llm_body_cache *c, long *hits, long *rebuilds) {
  *hits = c ? c->hits : 0;
  *rebuilds = c ? c->rebuilds : 0;
}

static bool str_same(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return !strcmp(a, b);
}

void llm__body_piece(struct llm_body_cache *c, int wire, int slot, int variant, const char *skey,
                     const cJSON *jkey, llm__piece_fn make, void *ud, struct sbuf *out) {
  if (!c || wire < 0 || wire >= LLM__WIRES || slot < 0 || slot >= PIECES) {
    char *t = make(ud);
    sbuf_puts(out, t);
    free(t);
    return;
  }
  pthread_once(&pieces_once, pieces_init);
  pthread_mutex_lock(&pieces_mu);
  struct piece *set = pieces[wire][slot], *hit = NULL, *old = &set[0];
  for (int i = 0; i < WAYS && !hit; i++) {
    struct piece *p = &set[i];
    if (p->set && p->variant == variant && str_same(p->skey, skey) &&
        json_identical(p->jkey, jkey))
      hit = p;
    if (!p->set || (old->set && p->used < old->used)) old = p;
  }
  if (!hit) { /* made under the lock: pure work on the caller's data */
    hit = old;
    piece_clear(hit);
    hit->set = true;
    hit->variant = variant;
    hit->skey = skey ? xstrdup(skey) : NULL;
    hit->jkey = jkey ? cJSON_Duplicate(jkey, 1) : NULL;
    hit->text = make(ud);
  }
  hit->used = ++pieces_clock;
  sbuf_puts(out, hit->text);
  pthread_mutex_unlock(&pieces_mu);
}

/* Appends the printed items of arr to out, ','-joined, after a ',' when
 * out already holds some (need_comma). */
static void put_items(struct sbuf *out, const cJSON *arr, bool *need_comma) {
  for (const cJSON *m = arr ? arr->child : NULL; m; m = m->next) {
    char *t = json_print(m, 0);
    if (*need_comma) sbuf_append(out, ",", 1);
    sbuf_puts(out, t);
    free(t);
    *need_comma = true;
  }
}

void llm__body_messages(struct llm_body_cache *c, int wire, const cJSON *messages,
                        const struct llm__msg_wire *mw, struct sbuf *out) {
  bool comma = false;
  if (!c || wire < 0 || wire >= LLM__WIRES) { /* no cache: the whole list */
    cJSON *all = mw->range(mw->ud, messages ? messages->child : NULL, NULL);
    if (mw->mark) mw->mark(mw->ud, all);
    put_items(out, all, &comma);
    cJSON_Delete(all);
    return;
  }
  struct wire_cache *w = &c->w[wire];
  /* 1. the history as cached, message for message */
  const cJSON *m = messages ? messages->child : NULL;
  const cJSON *s = w->snap ? w->snap->child : NULL;
  size_t i = 0;
  for (; i < w->n && m && s; i++, m = m->next, s = s->next)
    if (!json_identical(m, s)) break;
  bool ok = i == w->n;
  /* with merging, the first new message must start a wire message of its
   * own: had it the class of the last cached one, it would join it */
  if (ok && mw->merge && w->n) {
    const cJSON *f = m;
    while (f && !mw->cls(f)) f = f->next;
    if (f && mw->cls(f) == w->last_class) ok = false;
  }
  /* 2. where the last wire message starts (merging: the last run of one
   * class; without: past the end, every message is a wire message of its
   * own); what comes before it is final and joins the cache */
  const cJSON *open = NULL;
  size_t open_at = 0;
  if (ok) {
    int prev = w->last_class;
    size_t k = w->n;
    for (const cJSON *q = m; q; q = q->next, k++) {
      int cl = mw->cls(q);
      if (!cl) continue;
      if (cl != prev) open = q, open_at = k;
      prev = cl;
    }
    /* nothing left open while a mark is due: the message to mark is
     * cached, printed without it */
    if (mw->merge && !open && w->n) ok = false;
  }
  if (!ok) {
    history_clear(w);
    c->rebuilds++;
    m = messages ? messages->child : NULL;
    int prev = 0;
    size_t k = 0;
    open = NULL;
    for (const cJSON *q = m; q; q = q->next, k++) {
      int cl = mw->cls(q);
      if (!cl) continue;
      if (cl != prev) open = q, open_at = k;
      prev = cl;
    }
  } else if (w->n) {
    c->hits++;
  }
  if (!mw->merge) open = NULL, open_at = (size_t)cJSON_GetArraySize(messages);
  if (!w->snap) w->snap = cJSON_CreateArray();
  /* 3. the new final messages [w->n, open_at) */
  if (m && m != open) {
    cJSON *fin = mw->range(mw->ud, m, open);
    bool tc = w->text.len > 0;
    put_items(&w->text, fin, &tc);
    cJSON_Delete(fin);
    for (const cJSON *q = m; q && q != open; q = q->next) {
      cJSON_AddItemToArray(w->snap, cJSON_Duplicate(q, 1));
      int cl = mw->cls(q);
      if (cl) w->last_class = cl;
    }
    w->n = open_at;
  }
  if (w->text.len) {
    sbuf_append(out, w->text.s, w->text.len);
    comma = true;
  }
  /* 4. the open wire message, built every time (it may grow, and it
   * carries the moving cache mark) */
  if (open) {
    cJSON *last = mw->range(mw->ud, open, NULL);
    if (mw->mark) mw->mark(mw->ud, last);
    put_items(out, last, &comma);
    cJSON_Delete(last);
  }
}
