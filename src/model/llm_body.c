/* llm_body.c - what is kept of the request bodies sent (llm.h, struct
 * llm_body_cache), so each model call serialises only what is new: the
 * wire messages of the history seen before (per run or chat session), and
 * the printed system prompt, tools and prompt cache key (per process).
 *
 * The rule that keeps the bytes identical to a full rebuild: a cached
 * piece is used only when what it was made from is the same JSON, node for
 * node and byte for byte, as what the request holds now; anything else (a
 * message trimmed, replaced or removed by compaction, a nested field
 * edited in place, members reordered, a tool added by skills.load, another
 * system prompt) rebuilds that piece from the request. The wire formats'
 * printed JSON is context-free (a value prints the same inside or outside
 * its parent), so pieces printed alone splice into the same text the whole
 * body prints as.
 *
 * "The same" is checked against a record of the source, not a copy of its
 * tree: one flat byte string per source (record_put) that writes down, for
 * every node in order, its type, its key, its string and its number's
 * bits, and where its children end; record_same walks the live tree and
 * the record together and stops at the first difference. That is exactly
 * json_identical against a copy (type, key, string, number's bits, order,
 * count), without a node and a malloc per member to keep it, in one loop
 * (a tree deeper than its stack counts as changed: a rebuild, never a
 * wrong reuse). The check is linear in what the request holds: every call
 * looks at every message it reuses, as nothing else can tell an in-place
 * edit of an old message, but at one strcmp per string, where the body
 * itself copies them all and what is new is printed once.
 *
 * A stamp (llm.h) spares that walk: a caller that owns the conversation
 * vouches that nothing it sent changed since its last request with the
 * same stamp. The cache then checks only what the stamp cannot say by
 * itself, node identity: the same messages array, the same node last in
 * the cached history (found by following the list, which is also how the
 * first new message is found), the same tools array; and it keeps its
 * own copy of each piece's text for that stamp (the process's copy may be
 * replaced by another thread meanwhile). The records are still written
 * for every new message, so a request with another stamp or none checks
 * in full against them, as before.
 *
 * Merging (Anthropic: a run of messages of one class is one wire message)
 * leaves the last wire message open: it may still grow, and it carries
 * the moving cache mark, so it is printed every time. It is printed into
 * the history's text as a tentative tail past its length, the mark cut
 * out (the emitter notes where it wrote it) and put back only in the
 * body, with its messages' records past the history's; at the next
 * request, where it is usually final (the tool results, then the next
 * assistant turn), the history's lengths grow over the tail when its
 * messages are the first new ones, unchanged (records, or the stamp's
 * word for the same nodes), and the message after them has another
 * class, so the wire message closed where it stood: the same bytes a walk
 * would print, without the walk. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "llm.h"
#include "llm_emit.h"
#include "util.h"

struct piece {
  bool set;
  unsigned long used; /* when last used, for replacing the oldest */
  int variant;
  char *skey;       /* the string part of the key */
  struct sbuf jrec; /* the record of the JSON part of the key (empty: NULL) */
  char *text;       /* what was made from them */
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
  struct sbuf rec;  /* the records of the neutral messages [0, n), in order */
  size_t n;
  struct sbuf text; /* their wire messages, printed, ','-joined */
  int last_class;   /* the class of the last message of [0, n) that had one */
  /* for a stamp's word: the stamp of the last request, its messages
   * array, and the node of message n-1 in it (NULL when n is 0) */
  unsigned long stamp;
  const cJSON *arr, *last;
  /* merging: the last request's open wire message, a tentative tail
   * past the final history: its text without the moving mark, printed
   * into text past its length (with the ',' before it when the history
   * has text), and the records of its neutral messages past rec's; their
   * count (tn, 0: none kept), class, first and last nodes. The tail joins
   * the history as it is (the lengths grow over it, no copy) when the
   * next request holds those messages unchanged right after the history
   * and the next message after them starts another wire message (so it
   * did not grow); anything appended to text or rec first overwrites it. */
  size_t tn, ttext, trec; /* the tail's count and its bytes in text and rec */
  int tclass;
  const cJSON *tfirst, *tlast;
};

/* A piece as the last request with a stamp used it, kept for the next
 * request with that stamp. */
struct vouched_piece {
  unsigned long stamp; /* 0: none kept */
  int variant;
  const cJSON *jkey; /* the node it was made from (identity only) */
  char *skey;
  char *text;
  size_t len;
};

struct llm_body_cache {
  struct wire_cache w[LLM__WIRES];
  struct vouched_piece vp[LLM__WIRES][PIECES];
  long hits, rebuilds; /* for tests: history reused / rebuilt from the start */
  long vouched;        /* for tests: reuses on a stamp's word */
  long kept;           /* for tests: kept open wire messages reused */
  size_t last_len;     /* the size of the last body built on it */
};

static atomic_ulong stamp_clock;

unsigned long llm_body_stamp(void) {
  unsigned long s;
  while (!(s = atomic_fetch_add(&stamp_clock, 1) + 1)) {
  } /* 0 says nothing: skipped when the counter wraps */
  return s;
}

struct llm_body_cache *llm_body_cache_new(void) {
  return xcalloc(1, sizeof(struct llm_body_cache));
}

/* ---- records ------------------------------------------------------------ */

/* A node's record: 'N', its type, a byte saying which of its key and
 * string it has (1 key, 2 string), a zero byte, each of those as its length (4 bytes)
 * and its bytes with their NUL (a C string holds none), its number's bits
 * (numbers only), its children's records, 'E'. */
enum { REC_NODE = 'N', REC_END = 'E', REC_KEY = 1, REC_VAL = 2 };

static unsigned char *rec_str(unsigned char *w, const char *s, size_t n) {
  uint32_t n32 = (uint32_t)n;
  memcpy(w, &n32, 4);
  memcpy(w + 4, s, n + 1);
  return w + 4 + n + 1;
}

/* Appends the record of v (not NULL) to r, in one pass: each node's own
 * fields with room made for them (one strlen per string), then its
 * children's records, then its end. */
static void record_put(struct sbuf *r, const cJSON *v) {
  size_t kl = v->string ? strlen(v->string) : 0, sl = v->valuestring ? strlen(v->valuestring) : 0;
  size_t need = 4 + (v->string ? 4 + kl + 1 : 0) + (v->valuestring ? 4 + sl + 1 : 0) + 8 + 1;
  if (r->len + need + 1 > r->cap) sbuf_reserve(r, need);
  unsigned char *w = (unsigned char *)r->s + r->len;
  w[0] = REC_NODE;
  w[1] = (unsigned char)(v->type & 0xFF);
  w[2] = (unsigned char)((v->string ? REC_KEY : 0) | (v->valuestring ? REC_VAL : 0));
  w[3] = 0;
  w += 4;
  if (v->string) w = rec_str(w, v->string, kl);
  if (v->valuestring) w = rec_str(w, v->valuestring, sl);
  if ((v->type & 0xFF) == cJSON_Number) {
    memcpy(w, &v->valuedouble, 8);
    w += 8;
  }
  r->len = (size_t)(w - (unsigned char *)r->s);
  for (const cJSON *c = v->child; c; c = c->next) record_put(r, c);
  if (r->len + 2 > r->cap) sbuf_reserve(r, 1);
  r->s[r->len++] = REC_END;
  r->s[r->len] = 0;
}

/* Whether the string recorded at r is s; past it then. r points into the
 * record at a string record_put wrote (the flags matched), so its length
 * and NUL are there, and a C string holds no NUL to fool the compare. */
static inline const unsigned char *same_str(const unsigned char *r, const char *s) {
  uint32_t n;
  memcpy(&n, r, 4);
  if (r[4] != (unsigned char)s[0] || strcmp((const char *)r + 4, s)) return NULL;
  return r + 4 + n + 1;
}

/* Whether the record at *rp (up to end) is v's, node for node and byte
 * for byte, as json_identical compares; *rp moves past it when it is. One
 * loop over the tree (a stack of the nodes whose children are being
 * compared): deeper than the stack is "not the same", which only costs a
 * rebuild. */
static bool record_same(const cJSON *v, const unsigned char **rp, const unsigned char *end) {
  enum { DEPTH = 128 };
  const cJSON *up[DEPTH];
  int d = 0;
  const unsigned char *r = *rp;
  for (;;) {
    /* v's own fields */
    if (end - r < 4 || r[0] != REC_NODE || r[1] != (v->type & 0xFF) ||
        r[2] != ((v->string ? REC_KEY : 0) | (v->valuestring ? REC_VAL : 0)))
      return false;
    r += 4;
    if (v->string && !(r = same_str(r, v->string))) return false;
    if (v->valuestring && !(r = same_str(r, v->valuestring))) return false;
    if ((v->type & 0xFF) == cJSON_Number) {
      uint64_t a, b; /* the bits, as json_identical compares them */
      if (end - r < 8) return false;
      memcpy(&a, r, 8), memcpy(&b, &v->valuedouble, 8);
      if (a != b) return false;
      r += 8;
    }
    if (v->child) { /* down */
      if (d == DEPTH) return false;
      up[d++] = v;
      v = v->child;
      continue;
    }
    /* v is done: its end, then its next sibling, or its parent's end */
    for (;;) {
      if (r >= end || *r != REC_END) return false;
      r++;
      if (!d) { /* the node asked about, not its siblings */
        *rp = r;
        return true;
      }
      if (v->next) {
        v = v->next;
        break;
      }
      v = up[--d];
    }
  }
}

/* Whether the record rec (empty: NULL) is the whole of v's. */
static bool record_is(const struct sbuf *rec, const cJSON *v) {
  if (!v || !rec->len) return !v && !rec->len;
  const unsigned char *r = (const unsigned char *)rec->s;
  return record_same(v, &r, r + rec->len) && r == (const unsigned char *)rec->s + rec->len;
}

/* ---- the cache ----------------------------------------------------------- */

static void piece_clear(struct piece *p) {
  free(p->skey);
  sbuf_free(&p->jrec);
  free(p->text);
  memset(p, 0, sizeof *p);
}

static void history_clear(struct wire_cache *w) {
  w->rec.len = 0;
  w->n = 0;
  w->text.len = 0;
  if (w->text.s) w->text.s[0] = 0;
  w->last_class = 0;
  w->last = NULL;
  w->tn = 0;
}

static void vouched_clear(struct vouched_piece *v) {
  free(v->skey);
  free(v->text);
  memset(v, 0, sizeof *v);
}

void llm_body_cache_free(struct llm_body_cache *c) {
  if (!c) return;
  for (int k = 0; k < LLM__WIRES; k++) {
    history_clear(&c->w[k]);
    sbuf_free(&c->w[k].text);
    sbuf_free(&c->w[k].rec);
    for (int i = 0; i < PIECES; i++) vouched_clear(&c->vp[k][i]);
  }
  free(c);
}

void llm__body_cache_stats(const struct llm_body_cache *c, long *hits, long *rebuilds) {
  *hits = c ? c->hits : 0;
  *rebuilds = c ? c->rebuilds : 0;
}

long llm__body_cache_vouched(const struct llm_body_cache *c) { return c ? c->vouched : 0; }

long llm__body_cache_kept(const struct llm_body_cache *c) { return c ? c->kept : 0; }

/* A turn's body is the last one and what was appended since: its size
 * and a quarter more, at least 4 KiB. */
size_t llm__body_cache_room(const struct llm_body_cache *c) {
  size_t n = c ? c->last_len + c->last_len / 4 + 1024 : 0;
  return n < 4096 ? 4096 : n;
}

void llm__body_cache_built(struct llm_body_cache *c, size_t len) {
  if (c) c->last_len = len;
}

static bool str_same(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return !strcmp(a, b);
}

/* Appends to out the text make(ud) gives (malloc'd), kept for the process
 * in slot (0..3) of the wire's set under the key (variant, skey, jkey;
 * skey and jkey may be NULL): when a kept text's key equals this one, it
 * is appended and make is not called. Without a cache (c NULL) nothing is
 * kept. With a stamp, c keeps its own copy for the next request with that
 * stamp, which takes it when its key is the same but for jkey's content
 * (the same node: the stamp vouches for the rest). Thread-safe. */
static void body_piece(struct llm_body_cache *c, int wire, int slot, int variant,
                       const char *skey, const cJSON *jkey, char *(*make)(void *ud), void *ud,
                       struct sbuf *out, unsigned long stamp) {
  if (!c || wire < 0 || wire >= LLM__WIRES || slot < 0 || slot >= PIECES) {
    char *t = make(ud);
    sbuf_puts(out, t);
    free(t);
    return;
  }
  struct vouched_piece *v = &c->vp[wire][slot];
  if (stamp && v->stamp == stamp && v->variant == variant && v->jkey == jkey &&
      str_same(v->skey, skey)) {
    sbuf_append(out, v->text, v->len);
    c->vouched++;
    return;
  }
  pthread_once(&pieces_once, pieces_init);
  pthread_mutex_lock(&pieces_mu);
  struct piece *set = pieces[wire][slot], *hit = NULL, *old = &set[0];
  for (int i = 0; i < WAYS && !hit; i++) {
    struct piece *p = &set[i];
    if (p->set && p->variant == variant && str_same(p->skey, skey) && record_is(&p->jrec, jkey))
      hit = p;
    if (!p->set || (old->set && p->used < old->used)) old = p;
  }
  if (!hit) { /* made under the lock: pure work on the caller's data */
    hit = old;
    piece_clear(hit);
    hit->set = true;
    hit->variant = variant;
    hit->skey = skey ? xstrdup(skey) : NULL;
    if (jkey) record_put(&hit->jrec, jkey);
    hit->text = make(ud);
  }
  hit->used = ++pieces_clock;
  size_t at = out->len;
  sbuf_puts(out, hit->text);
  pthread_mutex_unlock(&pieces_mu);
  if (stamp) { /* the copy for the stamp: the text just appended */
    vouched_clear(v);
    v->stamp = stamp;
    v->variant = variant;
    v->jkey = jkey;
    v->skey = skey ? xstrdup(skey) : NULL;
    v->len = out->len - at;
    v->text = xmalloc(v->len + 1);
    memcpy(v->text, out->s ? out->s + at : "", v->len);
    v->text[v->len] = 0;
  }
}

struct piece_walk {
  llm__emit_fn walk;
  void *ud;
};

/* A piece's text: its walk, printed alone (a value prints the same inside
 * or outside its parent). */
static char *piece_make(void *ud) {
  const struct piece_walk *pw = ud;
  struct sbuf t = {0};
  struct emit e;
  emit_print_init(&e, &t, false);
  pw->walk(&e, EK_ITEM, pw->ud);
  return sbuf_take(&t);
}

void llm__emit_piece(struct emit *e, struct emit_key k, struct llm_body_cache *c, int wire,
                     int slot, int variant, const char *skey, const cJSON *jkey, llm__emit_fn walk,
                     void *ud) {
  if (e->kind == EMIT_TREE) {
    walk(e, k, ud);
    return;
  }
  emit__key(e, k);
  struct piece_walk pw = {walk, ud};
  body_piece(c, wire, slot, variant, skey, jkey, piece_make, &pw, e->out, e->stamp);
  e->comma = true;
}

/* Walks [first, end) with a print emitter on out; a ',' before the first
 * wire message when *comma, which then says whether one came. */
static void walk_into(const struct llm__msg_wire *mw, const cJSON *first, const cJSON *end,
                      bool mark, struct sbuf *out, bool *comma) {
  struct emit e;
  emit_print_init(&e, out, *comma);
  mw->walk(&e, first, end, mark);
  *comma = e.comma;
}

/* The last request's open wire message (the tail kept past the history,
 * starting at the first new message m) joins the history when its
 * messages are unchanged (on the stamp's word, vouched, when they are the
 * same nodes; else their records) and the message after them has another
 * class, which closes the wire message where it was: then its text is the
 * one printed then without the mark. Returns the first message not taken
 * (m when none). */
static const cJSON *kept_open(struct llm_body_cache *c, struct wire_cache *w,
                              const struct llm__msg_wire *mw, const cJSON *m, bool vouched) {
  const unsigned char *r = (const unsigned char *)w->rec.s + w->rec.len, *rend = r + w->trec;
  const cJSON *q = m, *last = NULL;
  bool same = vouched && m == w->tfirst;
  for (size_t i = 0; i < w->tn; i++, last = q, q = q->next)
    if (!q || (!same && !record_same(q, &r, rend))) return m;
  if (same ? last != w->tlast : r != rend) return m;
  int cl = q ? mw->cls(q) : 0;
  if (!cl || cl == w->tclass) return m;
  w->text.len += w->ttext;
  w->rec.len += w->trec;
  w->n += w->tn;
  w->last_class = w->tclass;
  w->last = last;
  c->kept++;
  return q;
}

/* Prints the open wire message [open, end) of class cl (mark: with the
 * moving mark) as the tail past w's history and writes its records past
 * w's; then appends the history and the tail, the mark put back, to out
 * (a ',' first when *comma, then set). */
static void open_tail(struct wire_cache *w, const struct llm__msg_wire *mw, const cJSON *open,
                      int cl, bool mark, struct sbuf *out, bool *comma) {
  size_t text0 = w->text.len, rec0 = w->rec.len, n = 0;
  struct emit e;
  emit_print_init(&e, &w->text, text0 > 0);
  mw->walk(&e, open, NULL, mark);
  /* the mark, cut out of the tail (it is near its end: the block's close
   * and the message's follow) and kept aside for the body */
  char mk[64];
  size_t mklen = 0, mkat = w->text.len;
  if (e.mark_at != SIZE_MAX) {
    mklen = e.mark_end - e.mark_at;
    if (mklen > sizeof mk || e.mark_at < text0 || e.mark_end > w->text.len) {
      w->text.len = text0; /* not a mark this code wrote: nothing kept */
      w->tn = 0;
      if (*comma && text0) sbuf_append(out, ",", 1);
      emit_print_init(&e, out, *comma && !text0);
      sbuf_append(out, w->text.s, text0);
      if (text0) e.comma = true;
      mw->walk(&e, open, NULL, mark);
      *comma = e.comma;
      return;
    }
    mkat = e.mark_at;
    memcpy(mk, w->text.s + mkat, mklen);
    memmove(w->text.s + mkat, w->text.s + e.mark_end, w->text.len - e.mark_end);
    w->text.len -= mklen;
  }
  for (const cJSON *q = open; q; q = q->next, n++) {
    record_put(&w->rec, q);
    w->tlast = q;
  }
  w->tn = n;
  w->ttext = w->text.len - text0;
  w->trec = w->rec.len - rec0;
  w->tclass = cl;
  w->tfirst = open;
  if (w->text.len) {
    if (*comma) sbuf_append(out, ",", 1);
    sbuf_append(out, w->text.s, mkat);
    sbuf_append(out, mk, mklen);
    sbuf_append(out, w->text.s + mkat, w->text.len - mkat);
    *comma = true;
  }
  /* the tail stays past the history's length (no NUL there: that would
   * be its first byte; text and rec are read by length) */
  w->text.len = text0;
  w->rec.len = rec0;
}

/* The messages through the cache c (not NULL) for the wire, printed to
 * out, each after a ',' when *comma (then set); stamp: the request's. */
static void body_messages(struct llm_body_cache *c, int wire, const cJSON *messages,
                          const struct llm__msg_wire *mw, struct sbuf *out, bool *comma,
                          unsigned long stamp) {
  struct wire_cache *w = &c->w[wire];
  /* 1. the history as cached, message for message: on the stamp's word
   * when it is the cached one's and the nodes are the same ones, else
   * against the records */
  const cJSON *m = messages ? messages->child : NULL, *last = NULL;
  size_t i = 0;
  bool ok = false, vouched = false;
  if (stamp && w->stamp == stamp && w->arr == messages) {
    for (; i < w->n && m; i++, m = m->next) last = m;
    ok = vouched = i == w->n && last == w->last;
    if (ok && w->n) c->vouched++;
  }
  if (!ok) {
    m = messages ? messages->child : NULL, last = NULL, i = 0;
    const unsigned char *r = (const unsigned char *)w->rec.s, *rend = r + w->rec.len;
    for (; i < w->n && m; i++, last = m, m = m->next)
      if (!record_same(m, &r, rend)) break;
    ok = i == w->n;
  }
  w->stamp = stamp;
  w->arr = messages;
  w->last = last; /* the node of message n-1 (whatever happens next, reset with the history) */
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
  int open_class = 0; /* the class of the last run */
  if (ok) {
    int prev = w->last_class;
    size_t k = w->n;
    for (const cJSON *q = m; q; q = q->next, k++) {
      int cl = mw->cls(q);
      if (!cl) continue;
      if (cl != prev) open = q, open_at = k;
      prev = cl;
    }
    open_class = prev;
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
    open_class = prev;
  } else if (w->n) {
    c->hits++;
  }
  if (!mw->merge) open = NULL, open_at = (size_t)cJSON_GetArraySize(messages);
  /* 3. the new final messages [w->n, open_at): first the last request's
   * open wire message, kept, when it is final now as it was */
  if (m && m != open && ok && w->tn) m = kept_open(c, w, mw, m, vouched);
  if (m && m != open) {
    bool tc = w->text.len > 0;
    walk_into(mw, m, open, false, &w->text, &tc);
    for (const cJSON *q = m; q && q != open; q = q->next) {
      record_put(&w->rec, q);
      int cl = mw->cls(q);
      if (cl) w->last_class = cl;
      w->last = q;
    }
    w->n = open_at;
  }
  w->tn = 0; /* any tail not taken is gone now (overwritten or left) */
  /* 4. the open wire message, built every time (it may grow, and it
   * carries the moving cache mark), and kept without the mark as the
   * tail, for the next request, where it is likely final */
  if (open) {
    open_tail(w, mw, open, open_class, mw->mark, out, comma);
  } else if (w->text.len) {
    if (*comma) sbuf_append(out, ",", 1);
    sbuf_append(out, w->text.s, w->text.len);
    *comma = true;
  }
}

void llm__emit_messages(struct emit *e, struct llm_body_cache *c, int wire,
                        const cJSON *messages, const struct llm__msg_wire *mw) {
  if (e->kind == EMIT_TREE || !c || wire < 0 || wire >= LLM__WIRES) {
    mw->walk(e, messages ? messages->child : NULL, NULL, mw->mark);
    return;
  }
  body_messages(c, wire, messages, mw, e->out, &e->comma, e->stamp);
}
