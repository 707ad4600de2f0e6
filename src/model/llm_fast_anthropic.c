/* llm_fast_anthropic.c - the Anthropic messages events read without a
 * cJSON tree (llm.h, llm__fast_anthropic): text and input_json deltas,
 * block starts and stops, message start, delta and stop, and pings, with
 * the checking reader of llm_fast_impl.h and the promise of llm_fast.c:
 * what the full parse yields, or nothing. */
#include "llm_fast_impl.h"

KEYS(k_usage_an, K("input_tokens"), K("output_tokens"), K("cache_read_input_tokens"),
     K("cache_creation_input_tokens"), K("prompt_tokens_details"));

/* ---- flat objects as trees ---------------------------------------------- */

/* The checked object at p as a tree, when it is flat: plain keys, none
 * twice, and values that are strings, true, false, null, {} or [] or
 * integers of at most 15 digits (not -0). Those are the nodes json_parse
 * makes of the same text (the same decoding of strings, the same double
 * for such an integer); NULL for anything else, which the caller parses. */
static cJSON *flat_tree(const struct rd *r, const unsigned char *p, struct sbuf *sc) {
  cJSON *o = cJSON_CreateObject();
  const unsigned char *keys[16];
  size_t klen[16];
  int n = 0;
  p = ws(p + 1);
  if (*p == '}') return o;
  for (;;) {
    if (*p != '"' || n == 16) goto no;
    const unsigned char *k = p + 1, *q = k;
    while (json_str_plain[*q]) q++;
    if (*q != '"') goto no;
    size_t kl = (size_t)(q - k);
    for (int i = 0; i < n; i++)
      if (klen[i] == kl && !memcmp(keys[i], k, kl)) goto no;
    keys[n] = k, klen[n++] = kl;
    p = ws(ws(q + 1) + 1); /* past ':' (checked text) */
    cJSON *v = NULL;
    bool integer;
    long long iv;
    const unsigned char *e;
    if (*p == '"') {
      struct str st;
      size_t at = sc->len;
      if (!rd_str(r, &p, true, &st, sc)) goto no;
      v = cJSON_CreateString(sc->s + st.off);
      sc->len = at;
    } else if (is_lit(r, p, "true", 4)) {
      v = cJSON_CreateTrue(), p += 4;
    } else if (is_lit(r, p, "false", 5)) {
      v = cJSON_CreateFalse(), p += 5;
    } else if (is_lit(r, p, "null", 4)) {
      v = cJSON_CreateNull(), p += 4;
    } else if (*p == '{' && *(e = ws(p + 1)) == '}') {
      v = cJSON_CreateObject(), p = e + 1;
    } else if (*p == '[' && *(e = ws(p + 1)) == ']') {
      v = cJSON_CreateArray(), p = e + 1;
    } else if ((e = chk_number(p, &integer, &iv)) && integer && !(*p == '-' && !iv)) {
      v = cJSON_CreateNumber((double)iv), p = e;
    } else {
      goto no;
    }
    char key[64];
    if (!v || kl >= sizeof key) {
      cJSON_Delete(v);
      goto no;
    }
    memcpy(key, k, kl);
    key[kl] = 0;
    cJSON_AddItemToObject(o, key, v);
    p = ws(p);
    if (*p == '}') return o;
    p = ws(p + 1); /* ',' */
  }
no:
  cJSON_Delete(o);
  return NULL;
}

/* ---- Anthropic messages events ------------------------------------------ */

KEYS(k_an_top, K("type"), K("index"), K("delta"), K("content_block"), K("message"), K("usage"));
KEYS(k_an_delta, K("type"), K("text"), K("partial_json"), K("stop_reason"), K("stop_details"));
KEYS(k_an_msg, K("usage"));
enum { T_TYPE, T_INDEX, T_DELTA, T_BLOCK, T_MESSAGE, T_USAGE };
enum { D_TYPE, D_TEXT, D_JSON, D_STOP, D_DETAILS };

enum an_type { AN_OTHER, AN_PING, AN_DELTA, AN_START, AN_STOP, AN_MDELTA, AN_MSTART, AN_MSTOP };

struct an_event {
  enum an_type type;
  int index;
  bool text_delta, json_delta;
  struct str piece, stop;
  bool details; /* stop_details given and not null */
  struct slice block;
  struct usage usage, msg_usage; /* usage: the top one; msg_usage: message.usage */
};

static bool an_type_of(const struct rd *r, const unsigned char **pp, enum an_type *t) {
  static const struct {
    struct key name;
    enum an_type t;
  } types[] = {{K("content_block_delta"), AN_DELTA}, {K("content_block_start"), AN_START},
               {K("content_block_stop"), AN_STOP},   {K("message_delta"), AN_MDELTA},
               {K("message_start"), AN_MSTART},      {K("message_stop"), AN_MSTOP},
               {K("ping"), AN_PING}};
  const unsigned char *p = *pp, *q;
  bool esc = false;
  if (*p != '"' || !(q = chk_string(r, p, &esc))) return false;
  *pp = q;
  *t = AN_OTHER;
  if (esc) return true;
  size_t n = (size_t)(q - p) - 2;
  for (size_t i = 0; i < sizeof types / sizeof *types; i++)
    if (types[i].name.n == n && !memcmp(p + 1, types[i].name.s, n)) *t = types[i].t;
  return true;
}

/* The members of the delta object of a content_block_delta or a
 * message_delta from its wanted member k on (its value at it->p). mk, when
 * not NULL, is set where the text or partial_json value starts if only the
 * delta's type came before it: the prefix memo may resume there, with the
 * type's two flags (data: the event's start). */
static bool an_delta_members(const struct rd *r, struct obj_it *it, int k, struct an_event *ev,
                             struct sbuf *sc, const unsigned char *data, struct mark *mk) {
  struct str tx = {0}, js = {0};
  for (; k >= 0; k = obj_next(r, it, &k_an_delta)) {
    bool ok = true;
    switch (k) {
      case D_TYPE: { /* one scan, two names */
        bool esc = false;
        const unsigned char *p = it->p, *q;
        if (*p != '"' || !(q = chk_string(r, p, &esc))) return false;
        it->p = q;
        size_t n = (size_t)(q - p) - 2;
        ev->text_delta = !esc && n == 10 && !memcmp(p + 1, "text_delta", 10);
        ev->json_delta = !esc && n == 16 && !memcmp(p + 1, "input_json_delta", 16);
        break;
      }
      case D_TEXT:
      case D_JSON:
        if (mk && !(it->seen & ~(1u << D_TYPE | 1u << k))) {
          mk->inner = true;
          mk->len = (size_t)(it->p - data);
          mk->iseen = it->seen;
          mk->ikey = k;
          mk->aux = (int)ev->text_delta | (int)ev->json_delta << 1;
        }
        ok = rd_str(r, &it->p, false, k == D_TEXT ? &tx : &js, sc);
        break;
      case D_STOP: ok = rd_str(r, &it->p, true, &ev->stop, sc); break;
      default:
        ev->details = *it->p != 'n';
        ok = (it->p = skip_value(r, it->p, it->depth)) != NULL;
    }
    if (!ok) return false;
  }
  ev->piece = ev->text_delta ? tx : js;
  return k == OBJ_END;
}

/* The delta object at up->p; mk as for an_delta_members. */
static bool an_delta(const struct rd *r, struct obj_it *up, struct an_event *ev,
                     struct sbuf *sc, const unsigned char *data, struct mark *mk) {
  struct obj_it it;
  if (!obj_start(up->p, up->depth, &it)) return false;
  bool ok = an_delta_members(r, &it, obj_next(r, &it, &k_an_delta), ev, sc, data, mk);
  up->p = it.p;
  return ok;
}

static bool an_message(const struct rd *r, struct obj_it *up, struct an_event *ev) {
  struct obj_it it;
  if (!obj_start(up->p, up->depth, &it)) return false;
  int k;
  while ((k = obj_next(r, &it, &k_an_msg)) >= 0)
    if (!rd_usage(r, &it, &k_usage_an, &ev->msg_usage)) return false;
  up->p = it.p;
  return k == OBJ_END;
}

static bool anthropic_read(const struct rd *r, const unsigned char *data,
                           const struct llm__fast_memo *m, struct mark *mk, struct an_event *ev,
                           struct sbuf *sc) {
  struct obj_it it;
  int k;
  if (m && m->inner) { /* in the delta, at its text or partial_json value */
    ev->type = (enum an_type)m->type;
    ev->index = m->index;
    ev->text_delta = m->aux & 1;
    ev->json_delta = m->aux >> 1 & 1;
    struct obj_it dt = {data + m->len, false, m->iseen, 2}; /* the delta's members */
    if (!an_delta_members(r, &dt, m->ikey, ev, sc, data, NULL)) return false;
    it = (struct obj_it){dt.p, false, m->seen, 1};
    k = obj_next(r, &it, &k_an_top);
  } else if (m) {
    it = (struct obj_it){data + m->len, false, m->seen, 1};
    k = m->key;
    ev->type = (enum an_type)m->type;
    ev->index = m->index;
  } else {
    if (!obj_start(ws(data), 0, &it)) return false;
    k = obj_next(r, &it, &k_an_top);
  }
  for (; k >= 0; k = obj_next(r, &it, &k_an_top)) {
    bool ok = true;
    switch (k) {
      case T_TYPE: ok = an_type_of(r, &it.p, &ev->type); break;
      case T_INDEX: ok = rd_int(&it.p, &ev->index); break;
      case T_DELTA: {
        bool marked = !m && !(it.seen & ~(1u << T_TYPE | 1u << T_INDEX | 1u << T_DELTA));
        if (marked)
          *mk = (struct mark){true, (size_t)(it.p - data), it.seen, T_DELTA, ev->type, ev->index,
                              false, 0, 0, 0};
        if (*it.p == '{') {
          ok = an_delta(r, &it, ev, sc, data, marked ? mk : NULL);
        } else { /* not an object: left to the full parse */
          ok = (it.p = skip_value(r, it.p, it.depth)) != NULL;
          ev->details = true;
        }
        break;
      }
      case T_BLOCK: ok = rd_slice(r, &it, &ev->block); break;
      case T_MESSAGE: ok = *it.p == '{' && an_message(r, &it, ev); break;
      default: ok = rd_usage(r, &it, &k_usage_an, &ev->usage);
    }
    if (!ok) return false;
  }
  return k == OBJ_END && (it.seen & 1u << T_TYPE) && at_end(r, it.p);
}

int llm__fast_anthropic(struct llm__stream *s, const char *data, size_t len,
                        void (*finish)(struct llm__stream *s, const char *reason,
                                       const cJSON *details)) {
  if (!llm__fast_ok(s)) return 0;
  struct sbuf *sc = llm__fast_scratch(s); /* the stream's, emptied */
  struct an_event ev = {0};
  struct rd r = {(const unsigned char *)data + len};
  cJSON *block = NULL;
  int ok = 0;
  const struct llm__fast_memo *m = memo_for(s, 2, data, len);
  struct mark mk = {0};
  bool read = anthropic_read(&r, (const unsigned char *)data, m, &mk, &ev, sc);
  if (mk.set) memo_keep(s, 2, data, &mk);
  if (!read) goto out;
  if (ev.type == AN_MSTART) { /* message.usage; a top one is not read */
    report_usage(s, &ev.msg_usage);
  } else if (ev.type == AN_PING) {
    /* nothing to do */
  } else if (ev.type == AN_MSTOP) {
    llm__done(s);
  } else if (ev.type == AN_STOP) {
    const char *bt = llm__block_type(s, ev.index);
    if (bt && !strcmp(bt, "redacted_thinking")) llm__redacted(s);
    llm__block_stop(s, ev.index);
  } else if (ev.type == AN_MDELTA) {
    if (ev.details) goto out; /* a refusal's details: the full parse */
    finish(s, str_ptr(&ev.stop, sc), NULL);
    report_usage(s, &ev.usage);
  } else if (ev.type == AN_START) {
    /* the block is kept as a tree: built from the checked text when it is
     * flat, else parsed alone, as the full parse would */
    if (!ev.block.p || *ev.block.p != '{') goto out;
    if (!(block = flat_tree(&r, ev.block.p, sc)) && !slice_tree(ev.block, &block)) goto out;
    /* what is read after the block is handed over, copied: the cap on
     * blocks may free it at once */
    const char *bt = cJSON_GetStringValue(cJSON_GetObjectItem(block, "type"));
    bool tool = bt && !strcmp(bt, "tool_use"), text = bt && !strcmp(bt, "text"),
         thinking = bt && !strcmp(bt, "thinking");
    const char *a = !(tool || text || thinking)
                        ? NULL
                        : cJSON_GetStringValue(cJSON_GetObjectItem(
                              block, tool ? "id" : text ? "text" : "thinking"));
    const char *b = tool ? cJSON_GetStringValue(cJSON_GetObjectItem(block, "name")) : NULL;
    char *ca = a ? xstrdup(a) : NULL, *cb = b ? xstrdup(b) : NULL;
    llm__block_start(s, ev.index, block);
    block = NULL;
    if (tool)
      llm__tool_start(s, ev.index, ca, cb);
    else if (text && ca)
      llm__text(s, ca, strlen(ca));
    else if (thinking && ca)
      llm__thinking(s, ca, strlen(ca));
    free(ca);
    free(cb);
  } else if (ev.type == AN_DELTA && ev.text_delta) {
    const char *piece = str_ptr(&ev.piece, sc);
    if (piece) {
      llm__text(s, piece, ev.piece.len);
      llm__block_append(s, ev.index, "text", piece, ev.piece.len);
    }
  } else if (ev.type == AN_DELTA && ev.json_delta) {
    const char *piece = str_ptr(&ev.piece, sc);
    const char *bt = llm__block_type(s, ev.index);
    if (piece && bt && !strcmp(bt, "tool_use"))
      llm__tool_args(s, ev.index, piece, ev.piece.len);
    else if (piece) /* a server tool's input: kept for the block, never run here */
      llm__block_append(s, ev.index, "input", piece, ev.piece.len);
  } else {
    goto out; /* another type or delta: the full parse */
  }
  ok = 1;
  llm__fast_count(s);
out:
  cJSON_Delete(block);
  return ok;
}
