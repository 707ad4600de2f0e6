/* llm_fast.c - the stream events read without a cJSON tree (llm.h,
 * llm__fast_openai here, llm__fast_anthropic in llm_fast_anthropic.c; the
 * checking reader both use is llm_fast_impl.h).
 *
 * Nearly every event of a streamed answer is a small object carrying one
 * text or argument piece, a usage count or a block boundary. Building a
 * tree for each (a node and a malloc per member) costs more than the rest
 * of the event's way to the operator. Here each event is read in one pass
 * over its bytes that checks it as strictly as json_parse checks it and,
 * in the same walk, picks out the members the wire reads: a member nobody
 * reads is skipped by an iterative checker (no call per byte, no
 * allocation), a string is scanned with a table, and a string the wire
 * reads is used in place unless it has an escape or must end in a NUL
 * (then it is decoded into one scratch buffer per event).
 *
 * Whatever is unusual goes back to the full parse, which then does exactly
 * what it always did: text that is not strict JSON, invalid UTF-8 (the
 * full parse keeps and counts it), a lone surrogate, a number the parser
 * might refuse or round (an exponent, more than 15 digits), an escaped key
 * (it could decode to a member the wire reads), a member the wire reads
 * given twice or in another case (cJSON looks keys up ignoring case), a
 * member of an unexpected type, nesting past 64, errors, refusals and the
 * event types not read here. So the fast path either yields what the full
 * parse yields or yields nothing. Usage counts are read in place, as
 * llm__usage_json reads them; an Anthropic content block, kept as a tree,
 * is built from the checked text when it is flat (flat_tree), else parsed
 * alone by json_parse, the same parser on the same bytes. Consecutive
 * events mostly share their first bytes: a per-stream memo of that prefix
 * lets the reader resume after it (llm_fast_impl.h, "the prefix memo");
 * for OpenAI the prefix reaches into the first choice, up to its delta's
 * value, when only its index came before (the chunk's id, object,
 * created, model, then `"choices":[{"index":0,"delta":`). The text is
 * read up to the length the SSE layer gives, not to the first NUL: an
 * event with a NUL inside goes to the full parse. */
#include "llm_fast_impl.h"

void llm__fast_memo_free(struct llm__fast_memo *m) {
  if (!m) return;
  free(m->bytes);
  free(m);
}

KEYS(k_usage_oa, K("prompt_tokens"), K("completion_tokens"), K("cache_read_input_tokens"),
     K("cache_creation_input_tokens"), K("prompt_tokens_details"));

/* ---- OpenAI chat completion chunks -------------------------------------- */

enum { MAX_FAST_CALLS = 8 };

struct fast_call {
  int index;
  struct str id, name, args;
};

struct openai_chunk {
  struct usage usage;
  bool chosen;        /* a choice of index 0 (or without a numeric index) came */
  struct str text, fin;
  struct fast_call calls[MAX_FAST_CALLS];
  int ncalls;
};

KEYS(k_oa_top, K("error"), K("usage"), K("choices"));
KEYS(k_oa_choice, K("index"), K("delta"), K("finish_reason"));
KEYS(k_oa_delta, K("content"), K("refusal"), K("tool_calls"));
KEYS(k_oa_call, K("index"), K("id"), K("function"));
KEYS(k_oa_fn, K("name"), K("arguments"));

static bool oa_function(const struct rd *r, struct obj_it *up, struct fast_call *c,
                        struct sbuf *sc) {
  struct obj_it it;
  if (*up->p == 'n') return rd_str(r, &up->p, false, &c->name, sc); /* null */
  if (!obj_start(up->p, up->depth, &it)) return false;
  int k;
  while ((k = obj_next(r, &it, &k_oa_fn)) >= 0) {
    if (!rd_str(r, &it.p, k == 0, k == 0 ? &c->name : &c->args, sc)) return false;
  }
  up->p = it.p;
  return k == OBJ_END;
}

static bool oa_calls(const struct rd *r, struct obj_it *up, struct openai_chunk *ch,
                     struct sbuf *sc) {
  const unsigned char *p = up->p;
  if (*p == 'n') return rd_str(r, &up->p, false, &(struct str){0}, sc);
  if (*p != '[' || up->depth >= FAST_MAX_DEPTH) return false;
  p = ws(p + 1);
  if (*p == ']') {
    up->p = p + 1;
    return true;
  }
  for (;;) {
    struct obj_it it;
    if (ch->ncalls >= MAX_FAST_CALLS || !obj_start(p, up->depth + 1, &it)) return false;
    struct fast_call *c = &ch->calls[ch->ncalls++];
    memset(c, 0, sizeof *c);
    int k;
    while ((k = obj_next(r, &it, &k_oa_call)) >= 0) {
      bool ok = k == 0   ? rd_int(&it.p, &c->index)
                : k == 1 ? rd_str(r, &it.p, true, &c->id, sc)
                         : oa_function(r, &it, c, sc);
      if (!ok) return false;
    }
    if (k != OBJ_END) return false;
    p = ws(it.p);
    if (*p == ']') break;
    if (*p != ',') return false;
    p = ws(p + 1);
  }
  up->p = p + 1;
  return true;
}

static bool oa_delta(const struct rd *r, struct obj_it *up, struct openai_chunk *ch,
                     struct sbuf *sc) {
  struct obj_it it;
  if (*up->p == 'n') return rd_str(r, &up->p, false, &(struct str){0}, sc);
  if (!obj_start(up->p, up->depth, &it)) return false;
  int k;
  while ((k = obj_next(r, &it, &k_oa_delta)) >= 0) {
    struct str refusal;
    bool ok = k == 0   ? rd_str(r, &it.p, false, &ch->text, sc)
              : k == 1 ? rd_str(r, &it.p, false, &refusal, sc) && !refusal.len /* a refusal: full */
                       : oa_calls(r, &it, ch, sc);
    if (!ok) return false;
  }
  up->p = it.p;
  return k == OBJ_END;
}

/* The members of one element of choices from its wanted member k on (its
 * value at it->p; index: what its index member said so far), read into
 * ch when it is the first of index 0 (as first_choice picks), else only
 * checked. mk, when not NULL, is set where the delta's value starts if
 * nothing the reader keeps came before it in this element (only its
 * index): the prefix memo may resume there (data: the event's start). */
static bool oa_choice_members(const struct rd *r, struct obj_it *it, int k, int index,
                              struct openai_chunk *ch, struct sbuf *sc,
                              const unsigned char *data, struct mark *mk) {
  for (; k >= 0; k = obj_next(r, it, &k_oa_choice)) {
    bool ok;
    if (k == 0) {
      unsigned char c = *it->p;
      ok = c == '-' || (c >= '0' && c <= '9') ? rd_int(&it->p, &index)
                                               : (it->p = skip_value(r, it->p, it->depth)) != NULL;
    } else if (k == 1) {
      if (mk && !(it->seen & 1u << 2)) { /* no finish_reason yet */
        mk->inner = true;
        mk->len = (size_t)(it->p - data);
        mk->iseen = it->seen;
        mk->index = index;
      }
      ok = oa_delta(r, it, ch, sc);
    } else {
      ok = rd_str(r, &it->p, true, &ch->fin, sc);
    }
    if (!ok) return false;
  }
  if (k != OBJ_END) return false;
  if (index == 0) {
    ch->chosen = true;
  } else { /* another choice's: forgotten */
    memset(&ch->text, 0, sizeof ch->text);
    memset(&ch->fin, 0, sizeof ch->fin);
    ch->ncalls = 0;
  }
  return true;
}

/* One element of choices at *pp (depth: the containers around it), moved
 * past it; mk as for oa_choice_members. */
static bool oa_choice(const struct rd *r, const unsigned char **pp, int depth,
                      struct openai_chunk *ch, struct sbuf *sc, const unsigned char *data,
                      struct mark *mk) {
  if (ch->chosen) return (*pp = skip_value(r, *pp, depth)) != NULL;
  struct obj_it it;
  if (!obj_start(*pp, depth, &it)) return false;
  if (!oa_choice_members(r, &it, obj_next(r, &it, &k_oa_choice), 0, ch, sc, data, mk))
    return false;
  *pp = it.p;
  return true;
}

/* The rest of the choices array after an element (p just past it): the
 * other elements and the ']', *end set past it. */
static bool oa_choices_rest(const struct rd *r, const unsigned char *p, const unsigned char **end,
                            int depth, struct openai_chunk *ch, struct sbuf *sc) {
  for (;;) {
    p = ws(p);
    if (*p == ']') {
      *end = p + 1;
      return true;
    }
    if (*p != ',') return false;
    p = ws(p + 1);
    if (!oa_choice(r, &p, depth, ch, sc, NULL, NULL)) return false;
  }
}

/* The depths of the top object's members, of choices' elements and of
 * their members: where the inner memo resumes, they are these. */
enum { D_TOP = 1, D_CHOICE = 2, D_CHOICE_MEMBERS = 3 };

/* Reads one chunk into ch; resumes after m's prefix when m is not NULL,
 * else sets mk where it could have (at the choices' value, or deeper at
 * the first choice's delta value). False: use the full parse. */
static bool openai_read(const struct rd *r, const unsigned char *data,
                        const struct llm__fast_memo *m, struct mark *mk, struct openai_chunk *ch,
                        struct sbuf *sc) {
  struct obj_it it;
  int k;
  if (m && m->inner) { /* in the first choice, at its delta's value */
    struct obj_it ci = {data + m->len, false, m->iseen, D_CHOICE_MEMBERS};
    if (!oa_choice_members(r, &ci, 1, m->index, ch, sc, data, NULL)) return false;
    it = (struct obj_it){NULL, false, m->seen, D_TOP};
    if (!oa_choices_rest(r, ci.p, &it.p, D_CHOICE, ch, sc)) return false;
    k = obj_next(r, &it, &k_oa_top);
  } else if (m) {
    it = (struct obj_it){data + m->len, false, m->seen, D_TOP};
    k = m->key;
  } else {
    if (!obj_start(ws(data), 0, &it)) return false;
    k = obj_next(r, &it, &k_oa_top);
  }
  for (; k >= 0; k = obj_next(r, &it, &k_oa_top)) {
    if (k == 0) { /* error: only null is not one */
      if (!is_lit(r, it.p, "null", 4)) return false;
      it.p += 4;
    } else if (k == 1) {
      if (!rd_usage(r, &it, &k_usage_oa, &ch->usage)) return false;
    } else if (*it.p == 'n') {
      if (!is_lit(r, it.p, "null", 4)) return false;
      it.p += 4;
    } else {
      bool marked = !m && it.seen == 1u << 2; /* nothing read before the choices */
      if (marked) *mk = (struct mark){true, (size_t)(it.p - data), it.seen, 2, 0, 0, false, 0, 0, 0};
      const unsigned char *p = it.p;
      if (*p != '[') return false;
      p = ws(p + 1);
      if (*p == ']') {
        it.p = p + 1;
        continue;
      }
      if (!oa_choice(r, &p, it.depth + 1, ch, sc, data, marked ? mk : NULL) ||
          !oa_choices_rest(r, p, &it.p, it.depth + 1, ch, sc))
        return false;
    }
  }
  return k == OBJ_END && at_end(r, it.p);
}

int llm__fast_openai(struct llm__stream *s, const char *data, size_t len,
                     void (*finish)(struct llm__stream *s, const char *reason)) {
  if (!llm__fast_ok(s)) return 0;
  struct sbuf *sc = llm__fast_scratch(s); /* the stream's, emptied */
  struct openai_chunk ch; /* the calls are cleared as they are used */
  ch.usage.set = ch.chosen = false;
  memset(&ch.text, 0, sizeof ch.text);
  memset(&ch.fin, 0, sizeof ch.fin);
  ch.ncalls = 0;
  struct rd r = {(const unsigned char *)data + len};
  const struct llm__fast_memo *m = memo_for(s, 1, data, len);
  struct mark mk = {0};
  int ok = openai_read(&r, (const unsigned char *)data, m, &mk, &ch, sc);
  if (mk.set) memo_keep(s, 1, data, &mk);
  if (ok) { /* in the order openai_event reports them */
    report_usage(s, &ch.usage);
    if (ch.chosen) {
      if (ch.text.set) llm__text(s, str_ptr(&ch.text, sc), ch.text.len);
      for (int i = 0; i < ch.ncalls; i++) {
        struct fast_call *c = &ch.calls[i];
        const char *id = str_ptr(&c->id, sc), *name = str_ptr(&c->name, sc);
        if (id || name) llm__tool_start(s, c->index, id, name);
        if (c->args.set && c->args.len)
          llm__tool_args(s, c->index, str_ptr(&c->args, sc), c->args.len);
      }
      finish(s, str_ptr(&ch.fin, sc));
    }
    llm__fast_count(s);
  }
  return ok;
}
