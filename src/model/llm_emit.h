/* llm_emit.h - the request bodies, written once for two outputs.
 *
 * A wire module (llm_openai.c, llm_anthropic.c) writes each body as one
 * walk of calls on a struct emit: begin an object or array, a member's
 * string, number, true, null, a constant, a copy of a cJSON value. The
 * emitter either builds a cJSON tree (EMIT_TREE: the body of a request
 * without a body cache, json_print'ed at the end) or prints the text
 * straight into an sbuf (EMIT_PRINT: the cached path, no tree), and both
 * give the same bytes: the print emitter writes what json_print writes
 * for the tree the other one builds (compact form, members in emit order,
 * json_put_string's strings, json_print's numbers). So every wire rule
 * (roles, blocks, cache breakpoints, tools) is written in one place, and
 * tests/unit/model/test_llm_body.c compares the two outputs byte for byte.
 *
 * The functions are static inline with a branch on the kind: the print
 * path is the hot one (every model call of a run), and its common case,
 * a key and a short constant into an sbuf with room, is a few moves. A
 * member's key is a struct emit_key made by EK("name") from a string
 * literal, holding both the bare name (for the tree) and the printed
 * `,"name":` (the ',' dropped before a container's first member); EK_ITEM
 * stands for no key (an array item, or the body itself). Keys and
 * constants given as literals must print as themselves (plain ASCII
 * without '"' or '\\'), which is what every caller uses. */
#ifndef LUAGENT_LLM_EMIT_H
#define LUAGENT_LLM_EMIT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "llm.h"
#include "util.h"

enum emit_kind { EMIT_TREE, EMIT_PRINT };

/* The deepest nesting of open containers a body walk uses is 6 (body,
 * messages, message, tool_calls or content, call or block, function or
 * cache_control); the tree emitter keeps that stack. */
#define EMIT_DEPTH 8

struct emit {
  enum emit_kind kind;
  /* EMIT_PRINT */
  struct sbuf *out;
  bool comma; /* a value came before in the open container: the next needs a ',' */
  unsigned long stamp; /* the request's stamp (llm.h), for the body cache */
  /* where emit_moving_mark wrote the moving breakpoint in out: [mark_at,
   * mark_end) (mark_at SIZE_MAX: not written) */
  size_t mark_at, mark_end;
  struct llm_body_cache *cache; /* a body's: told the body's size at the end */
  /* EMIT_TREE */
  int depth;
  cJSON *stack[EMIT_DEPTH]; /* the open containers, innermost last */
  cJSON *root;              /* the first value emitted at depth 0 */
};

struct emit_key {
  const char *name; /* NULL: an array item or the root */
  const char *text; /* ",\"name\":" (EK_ITEM: ",") */
  size_t len;
};
#define EK(name) ((struct emit_key){name, ",\"" name "\":", sizeof(",\"" name "\":") - 1})
#define EK_ITEM ((struct emit_key){NULL, ",", 1})

/* A print emitter appending to out; a value comes after a ',' when comma. */
static inline void emit_print_init(struct emit *e, struct sbuf *out, bool comma) {
  e->kind = EMIT_PRINT;
  e->mark_at = e->mark_end = SIZE_MAX;
  e->out = out;
  e->comma = comma;
  e->stamp = 0;
  e->cache = NULL;
  e->depth = 0;
  e->root = NULL;
}

static inline void emit_tree_init(struct emit *e) {
  e->kind = EMIT_TREE;
  e->mark_at = e->mark_end = SIZE_MAX;
  e->out = NULL;
  e->comma = false;
  e->stamp = 0;
  e->cache = NULL;
  e->depth = 0;
  e->root = NULL;
}

/* llm_body.c: the room a body on cache c will likely need (the last
 * one's size and some), and the size of the body just built. */
size_t llm__body_cache_room(const struct llm_body_cache *c);
void llm__body_cache_built(struct llm_body_cache *c, size_t len);

/* The emitter of a request body: printing into out (empty) when the
 * request has a body cache, else building a tree. The request's stamp
 * goes with it to the cache (llm__emit_piece, llm__emit_messages), and
 * out gets the room the cache says the body needs (one allocation, not
 * a doubling per size class as the body grows). */
static inline void emit_body_init(struct emit *e, struct sbuf *out,
                                  const struct llm_request *req) {
  if (req->body_cache) {
    emit_print_init(e, out, false);
    e->stamp = req->stamp;
    e->cache = req->body_cache;
    if (!out->s) {
      out->cap = llm__body_cache_room(req->body_cache);
      out->s = xmalloc(out->cap);
      out->s[0] = 0;
      out->len = 0;
    }
  } else {
    emit_tree_init(e);
  }
}

/* The member of o that cJSON_GetObjectItem(o, k) gives: the first whose
 * key equals k, letters in either case. cJSON folds each byte with
 * tolower, which in the "C" locale the host runs in (it never calls
 * setlocale, nor lets a script) folds A-Z only, as this does inline,
 * without a call per byte: the body walks look up every field of every
 * message they print. */
static inline int emit__fold(unsigned char c) { return (unsigned)(c - 'A') < 26u ? c + 32 : c; }
static inline const cJSON *emit_get(const cJSON *o, const char *k) {
  if (!o || !k) return NULL;
  /* c | 0x20 is the same for two bytes that fold alike: a first byte that
   * differs so rules the member out at once (most do); a key of the same
   * case is found by strcmp's wide compare, another by the folding one */
  unsigned char k0 = (unsigned char)(k[0] | 0x20);
  for (const cJSON *c = o->child; c; c = c->next) {
    const unsigned char *a = (const unsigned char *)c->string, *b = (const unsigned char *)k;
    if (!a || (unsigned char)(a[0] | 0x20) != k0) continue;
    if (!strcmp((const char *)a, k)) return c; /* the usual hit: the same case */
    for (;; a++, b++) {
      if (*a != *b && emit__fold(*a) != emit__fold(*b)) break;
      if (!*a) return c;
    }
  }
  return NULL;
}

/* ---- internals ---------------------------------------------------------- */

/* sbuf_append, with the common case (room left) inline. */
static inline void emit__put(struct sbuf *b, const char *s, size_t n) {
  if (b->len + n < b->cap) {
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
  } else {
    sbuf_append(b, s, n);
  }
}

static inline void emit__ch(struct sbuf *b, char c) {
  if (b->len + 1 < b->cap) {
    b->s[b->len++] = c;
    b->s[b->len] = 0;
  } else {
    sbuf_append(b, &c, 1);
  }
}

/* Prints k (its ',' only after a value). */
static inline void emit__key(struct emit *e, struct emit_key k) {
  emit__put(e->out, k.text + !e->comma, k.len - !e->comma);
  e->comma = true;
}

/* Adds v under k to the open container (a tree emitter), or makes it the
 * root. A value emitted with no open container after the root is freed:
 * a walk emits one root. */
static inline void emit__add(struct emit *e, struct emit_key k, cJSON *v) {
  if (!e->depth) {
    if (!e->root) e->root = v;
    else cJSON_Delete(v);
    return;
  }
  cJSON *top = e->stack[(e->depth < EMIT_DEPTH ? e->depth : EMIT_DEPTH) - 1];
  if (k.name) cJSON_AddItemToObject(top, k.name, v);
  else cJSON_AddItemToArray(top, v);
}

static inline void emit__push(struct emit *e, struct emit_key k, cJSON *v) {
  emit__add(e, k, v);
  if (e->depth < EMIT_DEPTH) e->stack[e->depth] = v;
  e->depth++; /* past EMIT_DEPTH: a walk bug; its members go to the deepest kept */
}

static inline void emit__pop(struct emit *e) {
  if (e->depth) e->depth--;
}

/* ---- values ------------------------------------------------------------- */

static inline void emit__open(struct emit *e, struct emit_key k, bool array) {
  if (e->kind == EMIT_TREE) {
    emit__push(e, k, array ? cJSON_CreateArray() : cJSON_CreateObject());
    return;
  }
  emit__key(e, k);
  emit__ch(e->out, array ? '[' : '{');
  e->comma = false;
}
static inline void emit__close(struct emit *e, char closer) {
  if (e->kind == EMIT_TREE) {
    emit__pop(e);
    return;
  }
  emit__ch(e->out, closer);
  e->comma = true;
}

/* An object or array under k, open until its end: members and items
 * emitted in between go into it. */
static inline void emit_begin_obj(struct emit *e, struct emit_key k) { emit__open(e, k, false); }
static inline void emit_end_obj(struct emit *e) { emit__close(e, '}'); }
static inline void emit_begin_arr(struct emit *e, struct emit_key k) { emit__open(e, k, true); }
static inline void emit_end_arr(struct emit *e) { emit__close(e, ']'); }

/* A string (NULL prints as "", as json_put_string does; the tree gets ""). */
static inline void emit_str(struct emit *e, struct emit_key k, const char *s) {
  if (e->kind == EMIT_TREE) {
    emit__add(e, k, cJSON_CreateString(s ? s : ""));
    return;
  }
  emit__key(e, k);
  json_put_string(e->out, s);
}

/* An integer (json_print writes an int's digits as %d does). */
static inline void emit_int(struct emit *e, struct emit_key k, int v) {
  if (e->kind == EMIT_TREE) {
    emit__add(e, k, cJSON_CreateNumber(v));
    return;
  }
  emit__key(e, k);
  char tmp[12], *q = tmp + sizeof tmp;
  unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
  do *--q = (char)('0' + u % 10);
  while (u /= 10);
  if (v < 0) *--q = '-';
  emit__put(e->out, q, (size_t)(tmp + sizeof tmp - q));
}

/* true, or null */
static inline void emit__word(struct emit *e, struct emit_key k, bool is_true) {
  if (e->kind == EMIT_TREE) {
    emit__add(e, k, is_true ? cJSON_CreateTrue() : cJSON_CreateNull());
    return;
  }
  emit__key(e, k);
  emit__put(e->out, is_true ? "true" : "null", 4);
}
static inline void emit_true(struct emit *e, struct emit_key k) { emit__word(e, k, true); }
static inline void emit_null(struct emit *e, struct emit_key k) { emit__word(e, k, false); }

/* A member whose key and value are constants: text is its printed form
 * with the leading ',' (made from literals by the macros below); the tree
 * gets the value the shape and src say. */
enum emit_shape { EMIT_C_STR, EMIT_C_EMPTY, EMIT_C_TYPE };
static inline void emit__const(struct emit *e, const char *name, const char *text, size_t len,
                               enum emit_shape shape, const char *src) {
  if (e->kind == EMIT_TREE) {
    cJSON *v = shape == EMIT_C_STR ? cJSON_CreateString(src) : cJSON_CreateObject();
    if (shape == EMIT_C_TYPE) cJSON_AddStringToObject(v, "type", src);
    emit__add(e, (struct emit_key){name, NULL, 0}, v);
    return;
  }
  emit__put(e->out, text + !e->comma, len - !e->comma);
  e->comma = true;
}
/* "name":"value" */
#define EMIT_CSTR(e, name, value) \
  emit__const(e, name, ",\"" name "\":\"" value "\"", \
              sizeof(",\"" name "\":\"" value "\"") - 1, EMIT_C_STR, value)
/* "name":{} */
#define EMIT_CEMPTY(e, name) \
  emit__const(e, name, ",\"" name "\":{}", sizeof(",\"" name "\":{}") - 1, EMIT_C_EMPTY, NULL)
/* "name":{"type":"type"} */
#define EMIT_CTYPE(e, name, type) \
  emit__const(e, name, ",\"" name "\":{\"type\":\"" type "\"}", \
              sizeof(",\"" name "\":{\"type\":\"" type "\"}") - 1, EMIT_C_TYPE, type)

/* The moving cache breakpoint (the conversation's, which moves to the
 * last message every turn): "cache_control":{"type":"ephemeral"} in the
 * open object, its place in out noted, so the body cache can keep the
 * wire message it is in without it (the text less those bytes is the
 * text printed without the mark: nothing else depends on it). */
static inline void emit_moving_mark(struct emit *e) {
  size_t at = e->kind == EMIT_PRINT ? e->out->len : 0;
  EMIT_CTYPE(e, "cache_control", "ephemeral");
  if (e->kind == EMIT_PRINT) e->mark_at = at, e->mark_end = e->out->len;
}

/* A copy of v, printed as json_print prints it; NULL (a copy that failed)
 * emits nothing, key included, as a tree leaves out a NULL member. */
static inline void emit_copy(struct emit *e, struct emit_key k, const cJSON *v) {
  if (!v) return;
  if (e->kind == EMIT_TREE) {
    emit__add(e, k, cJSON_Duplicate(v, 1));
    return;
  }
  emit__key(e, k);
  json_put_value(e->out, v);
}

/* v itself (the emitter takes it: the tree holds it, the printer frees
 * it); NULL emits nothing, as emit_copy. */
static inline void emit_take(struct emit *e, struct emit_key k, cJSON *v) {
  if (!v) return;
  if (e->kind == EMIT_TREE) {
    emit__add(e, k, v);
    return;
  }
  emit_copy(e, k, v);
  cJSON_Delete(v);
}

/* A copy of the object v (with at least one member) left open: members
 * emitted next go after v's own, then emit_end_obj closes it. */
static inline void emit_copy_open(struct emit *e, struct emit_key k, const cJSON *v) {
  if (e->kind == EMIT_TREE) {
    emit__push(e, k, cJSON_Duplicate(v, 1));
    return;
  }
  emit__key(e, k);
  json_put_value(e->out, v);
  e->out->s[--e->out->len] = 0; /* "{...}" without its '}' */
  e->comma = true;
}

/* The object the JSON text holds (parsed as json_parse_str(text,
 * JSON_NO_DUPLICATES) parses it), or {} where it holds none (NULL, not
 * JSON, a key repeated, not an object). The print emitter writes what the
 * tree of it prints, from the text (json_reprint), without the tree. */
static inline void emit_object_text(struct emit *e, struct emit_key k, const char *text) {
  if (e->kind == EMIT_TREE) {
    cJSON *v = json_parse_str(text, JSON_NO_DUPLICATES, NULL);
    if (cJSON_IsObject(v)) {
      emit__add(e, k, v);
    } else {
      cJSON_Delete(v);
      emit__add(e, k, cJSON_CreateObject());
    }
    return;
  }
  emit__key(e, k);
  size_t at = e->out->len;
  if (text && !json_reprint(e->out, text, strlen(text), JSON_NO_DUPLICATES) &&
      e->out->s[at] == '{') /* only an object's text starts so */
    return;
  e->out->len = at;
  if (e->out->s) e->out->s[at] = 0;
  emit__put(e->out, "{}", 2);
}

/* What the walk built: the body text (caller frees). A tree emitter
 * prints its root and frees it; a print emitter over an sbuf of its own
 * hands the text over. */
static inline char *emit_finish(struct emit *e) {
  if (e->kind == EMIT_PRINT) {
    if (e->cache) llm__body_cache_built(e->cache, e->out->len);
    return sbuf_take(e->out);
  }
  char *s = json_print(e->root, 0);
  cJSON_Delete(e->root);
  e->root = NULL;
  return s;
}

/* ---- the body cache, through the emitter (llm_body.c) -------------------- */

/* Emits one value under key k: called with the emitter, the key and the
 * caller's ud, it emits exactly one value under that key. */
typedef void (*llm__emit_fn)(struct emit *e, struct emit_key k, void *ud);

/* The value walk(e, k, ud) emits, under key k. A tree emitter walks it in
 * place. A print emitter with a cache c appends the text kept for the
 * process in slot (0..3) of the wire's set under the key (variant, skey,
 * jkey; skey and jkey may be NULL: what the value is made from), walking
 * it (alone, into a text of its own) only when no kept text has that key;
 * without a cache it walks it every time. Thread-safe. */
void llm__emit_piece(struct emit *e, struct emit_key k, struct llm_body_cache *c, int wire,
                     int slot, int variant, const char *skey, const cJSON *jkey, llm__emit_fn walk,
                     void *ud);

/* How a wire format turns neutral messages into wire messages. */
struct llm__msg_wire {
  /* emits the wire messages of the neutral messages from first up to end
   * (not included; NULL: to the last) as array items, the last of them
   * with the moving cache breakpoint when mark; with merge, first starts
   * a wire message and end ends one */
  void (*walk)(struct emit *e, const cJSON *first, const cJSON *end, bool mark);
  /* 0: the message adds nothing; else its class. With merge, consecutive
   * messages of one class are one wire message (Anthropic's roles). */
  int (*cls)(const cJSON *m);
  bool merge;
  bool mark; /* the last wire message carries the breakpoint */
};

/* Emits the wire messages of messages as items of the open array: a tree
 * emitter walks them all; a print emitter with a cache c takes the final
 * ones from c's cache for the wire where the history before them is
 * unchanged and walks the rest. */
void llm__emit_messages(struct emit *e, struct llm_body_cache *c, int wire,
                        const cJSON *messages, const struct llm__msg_wire *mw);

#endif
