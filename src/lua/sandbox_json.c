/* sandbox_json.c - JSON <-> Lua for the sandbox, and the `json` library.
 *
 * JSON null is json.null (a light userdata, the same value everywhere).
 * Arrays and objects are unambiguous: a table whose keys are exactly
 * 1..n is an array, one with string keys an object; an empty table is an
 * object unless marked with json.array() (decoded empty arrays come back
 * marked, so they round-trip). Mixed keys, NaN and cycles are errors that
 * name the path. Depth is limited.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sandbox_impl.h"
#include "json.h"
#include "util.h"

#define JSON_MAX_DEPTH 100

static const char K_ARRAYMT = 0; /* marker metatable for empty arrays */
static const char K_BOXMT = 0;   /* metatable freeing malloc'd text */


/* A cJSON node's host cost for the conversion budget: the struct plus
 * allocator overhead; strings and keys add their bytes. */
#define NODE_COST (sizeof(cJSON) + 16)
/* The conversion polls the deadline and the stop flag every this many nodes. */
#define POLL_NODES 256

/* Decodes 0xC0 0x80 back into a zero byte and pushes the result (the JSON
 * side's U+0000, see common convention): the len bytes at s, NUL-terminated.
 * [-0, +1, m] */
static void push_decoded_len(lua_State *L, const char *s, size_t len) {
  const char *p = memchr(s, 0xC0, len);
  if (!p) {
    lua_pushlstring(L, s, len);
    return;
  }
  luaL_Buffer b;
  char *out = luaL_buffinitsize(L, &b, len);
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    if ((unsigned char)s[i] == 0xC0 && (unsigned char)s[i + 1] == 0x80) {
      out[n++] = 0;
      i++;
    } else {
      out[n++] = s[i];
    }
  }
  luaL_pushresultsize(&b, n);
}

static void push_decoded(lua_State *L, const char *s) { push_decoded_len(L, s, strlen(s)); }

/* Pushes a number node: an exact integer text in valuestring (a big
 * integer from the JSON parser) becomes a Lua integer when it fits. */
static void push_num(lua_State *L, double d, const char *digits) {
  if (digits) {
    const char *t = digits;
    char *end = NULL;
    errno = 0;
    long long i = strtoll(t, &end, 10);
    if (end != t && *end == 0 && errno == 0) {
      lua_pushinteger(L, (lua_Integer)i);
      return;
    }
  }
  /* integral and below 2^53 (the cast is exact there): floor's test
   * without the call (every number of every result); NaN fails fabs's */
  if (fabs(d) < 9007199254740992.0 && d == (double)(long long)d) lua_pushinteger(L, (lua_Integer)d);
  else lua_pushnumber(L, d);
}
static void push_number(lua_State *L, const cJSON *v) { push_num(L, v->valuedouble, v->valuestring); }

/* Pushes v when it is a scalar (null, a boolean, a number, a string) and
 * returns 1; 0 (nothing pushed) for anything else. [-0, +(0|1), m] */
static int push_scalar(lua_State *L, const cJSON *v, int ty) {
  if (ty == cJSON_NULL) {
    lua_pushlightuserdata(L, NULL);
  } else if (ty & (cJSON_True | cJSON_False)) {
    lua_pushboolean(L, ty == cJSON_True);
  } else if (ty == cJSON_Number) {
    push_number(L, v);
  } else if (ty == cJSON_String) {
    push_decoded(L, v->valuestring ? v->valuestring : "");
  } else {
    return 0;
  }
  return 1;
}

int sandbox__push_json(lua_State *L, const cJSON *v, int depth) {
  if (depth > JSON_MAX_DEPTH || !lua_checkstack(L, 4)) return -1;
  int ty = v ? v->type & 0xFF : cJSON_NULL; /* the tests of cJSON_IsNull, IsBool, ... inline */
  if (push_scalar(L, v, ty)) {
    /* pushed */
  } else if (ty == cJSON_Array) {
    int n = cJSON_GetArraySize(v);
    lua_createtable(L, n, 0);
    int i = 1;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
      if (sandbox__push_json(L, c, depth + 1)) return -1;
      lua_rawseti(L, -2, i);
    }
    if (n == 0) {
      lua_rawgetp(L, LUA_REGISTRYINDEX, &K_ARRAYMT);
      lua_setmetatable(L, -2);
    }
  } else if (ty == cJSON_Object) {
    int n = 0; /* sized once: no rehash as the members go in */
    for (const cJSON *c = v->child; c; c = c->next) n++;
    /* what the members' own calls refused before (scalars included) */
    if (n && depth + 1 > JSON_MAX_DEPTH) return -1;
    lua_createtable(L, 0, n);
    for (const cJSON *c = v->child; c; c = c->next) {
      push_decoded(L, c->string ? c->string : "");
      /* a scalar member in place (the stack has room: checked above for
       * the table, its key and one value); a container goes down a level */
      if (!push_scalar(L, c, c->type & 0xFF) && sandbox__push_json(L, c, depth + 1)) return -1;
      lua_rawset(L, -3);
    }
  } else if (ty == cJSON_Raw) {
    int rc = sandbox__push_json_text(L, v->valuestring, v->valuestring ? strlen(v->valuestring) : 0, depth);
    if (rc) return rc == -2 ? -1 : rc;
    if (v->child && lua_type(L, -1) == LUA_TTABLE) { /* members set over the decoded ones */
      if (depth + 1 > JSON_MAX_DEPTH) return -1;
      for (const cJSON *c = v->child; c; c = c->next) {
        push_decoded(L, c->string ? c->string : "");
        if (!push_scalar(L, c, c->type & 0xFF) && sandbox__push_json(L, c, depth + 1)) return -1;
        lua_rawset(L, -3);
      }
    }
  } else {
    lua_pushnil(L);
  }
  return 0;
}

/* ---- JSON text straight into Lua (sandbox__push_json_text) ------------- */

/* The decoder's state: the containers open in the text, as json_scan's
 * events open and close them. A value at depth > JSON_MAX_DEPTH fails, as
 * sandbox__push_json fails for it in json_parse's tree. */
#define JDEC_DEEP 1 /* jdec_event: a value past the depth limit, or no stack */
/* Items of a container wait on the stack until it ends (or this many are
 * there), so its table is made at its size: growing it member by member
 * rehashed it at 1, 2, 4, ... members (most of the decoder's time). */
#define JDEC_CHUNK 8

/* The decoder's state: the containers open in the text, as json_scan's
 * events open and close them. A value at depth > JSON_MAX_DEPTH fails, as
 * sandbox__push_json fails for it in json_parse's tree. */
struct jdec {
  lua_State *L;
  int base; /* depth of the text's value */
  int open; /* containers open */
  struct jlevel {
    int obj;       /* an object: its pending items are key, value pairs */
    int tab;       /* stack index of its table, 0 until made */
    int at;        /* stack index of its first pending item */
    lua_Integer n; /* items set into the table so far */
  } lv[JSON_MAX_DEPTH + 2];
};

/* Sets the pending items of lv into its table, made first when there is
 * none yet (sized for them); leaves [.., table]. */
static void jdec_flush(struct jdec *d, struct jlevel *lv) {
  lua_State *L = d->L;
  int items = lua_gettop(L) - lv->at + 1;
  if (!lv->tab) {
    if (lv->obj) lua_createtable(L, 0, items / 2);
    else lua_createtable(L, items, 0);
    lua_insert(L, lv->at);
    lv->tab = lv->at++;
  }
  if (lv->obj) { /* in document order: a repeated key keeps its last value */
    for (int i = lv->at; i < lv->at + items; i += 2) {
      lua_pushvalue(L, i);
      lua_pushvalue(L, i + 1);
      lua_rawset(L, lv->tab);
    }
    lua_settop(L, lv->tab);
  } else { /* popped from the top, each to its index */
    for (int k = items; k >= 1; k--) lua_rawseti(L, lv->tab, lv->n + k);
  }
  lv->n += lv->obj ? items / 2 : items;
}

/* The value on top is complete: an item of the innermost open container. */
static void jdec_done(struct jdec *d) {
  if (!d->open) return;
  struct jlevel *lv = &d->lv[d->open - 1];
  if (lua_gettop(d->L) - lv->at + 1 >= 2 * JDEC_CHUNK) jdec_flush(d, lv);
}

static int jdec_event(void *ud, const struct json_event *ev) {
  struct jdec *d = ud;
  lua_State *L = d->L;
  if (ev->kind == JSON_EV_END) {
    struct jlevel *lv = &d->lv[--d->open];
    jdec_flush(d, lv);
    if (!lv->obj && lv->n == 0) { /* an empty array stays one */
      lua_rawgetp(L, LUA_REGISTRYINDEX, &K_ARRAYMT);
      lua_setmetatable(L, -2);
    }
    jdec_done(d);
    return 0;
  }
  if (ev->kind == JSON_EV_KEY) {
    push_decoded_len(L, ev->s, ev->n);
    return 0;
  }
  if (d->base + d->open > JSON_MAX_DEPTH) return JDEC_DEEP;
  switch (ev->kind) {
    case JSON_EV_OBJECT:
    case JSON_EV_ARRAY:
      /* room for its pending items and a level below (LUA_MINSTACK is
       * what the stack always has: the first levels cost nothing) */
      if (!lua_checkstack(L, 2 * JDEC_CHUNK + 4)) return JDEC_DEEP;
      d->lv[d->open++] = (struct jlevel){ev->kind == JSON_EV_OBJECT, 0, lua_gettop(L) + 1, 0};
      return 0;
    case JSON_EV_NULL: lua_pushlightuserdata(L, NULL); break;
    case JSON_EV_TRUE: lua_pushboolean(L, 1); break;
    case JSON_EV_FALSE: lua_pushboolean(L, 0); break;
    case JSON_EV_NUMBER: push_num(L, ev->d, ev->digits); break;
    default: push_decoded_len(L, ev->s, ev->n); break; /* a string */
  }
  jdec_done(d);
  return 0;
}

int sandbox__push_json_text(lua_State *L, const char *s, size_t n, int depth) {
  struct jdec d;
  d.L = L, d.base = depth, d.open = 0;
  int top = lua_gettop(L);
  /* the sandbox's scratch: a memory error raised in an event leaks nothing */
  int rc = json_scan(s, n, jdec_event, &d, &sb_of(L)->jscan, NULL);
  if (!rc) return 0;
  lua_settop(L, top);
  if (rc != JDEC_DEEP) return -2;
  /* Too deep, or so it seemed: a member json_parse would have dropped for
   * a later one with the same key is not in its tree, so the tree may be
   * shallow enough. Rare: decide it the old way. */
  cJSON *v = NULL;
  if (json_parse(s, n, 0, &v, NULL)) return -2;
  struct sandbox *sb = sb_of(L);
  if (sb->pending) cJSON_Delete(sb->pending);
  sb->pending = v; /* freed by the next host call or sandbox_free if a push raises */
  rc = sandbox__push_json(L, v, depth);
  sb->pending = NULL;
  cJSON_Delete(v);
  if (rc) lua_settop(L, top);
  return rc ? -1 : 0;
}

struct conv {
  lua_State *L;
  struct sb_arena *arena; /* NULL: nodes from cJSON's allocator */
  int mark_functions;
  char *err;
  size_t errn;
  size_t room;   /* host bytes the conversion may still take */
  unsigned poll; /* nodes until the next deadline/stop poll */
  char path[256];
};

static cJSON *conv_value(struct conv *c, int idx, int depth);

static cJSON *conv_fail(struct conv *c, const char *what) {
  snprintf(c->err, c->errn, "%s%s%s", c->path[0] ? c->path : "", c->path[0] ? ": " : "", what);
  return NULL;
}

/* A cJSON constructor's result: NULL means the host is out of memory. */
static cJSON *conv_made(struct conv *c, cJSON *v) {
  return v ? v : conv_fail(c, "out of memory");
}

/* ---- the arena (sandbox_impl.h) ---------------------------------------- */

struct sb_arena_chunk {
  struct sb_arena_chunk *next;
  size_t size;
  _Alignas(16) char mem[];
};

#define ARENA_CHUNK_MIN 4096
#define ARENA_CHUNK_MAX (256 * 1024)

void sandbox__arena_init(struct sb_arena *a) {
  a->p = a->first;
  a->left = sizeof a->first;
  a->next_size = ARENA_CHUNK_MIN;
  a->chunks = NULL;
}

void sandbox__arena_free(struct sb_arena *a) {
  while (a->chunks) {
    struct sb_arena_chunk *ch = a->chunks;
    a->chunks = ch->next;
    cJSON_free(ch);
  }
  sandbox__arena_init(a);
}

/* n bytes, 8-aligned, or NULL when no chunk can be had. */
static void *arena_take(struct sb_arena *a, size_t n) {
  if (n > SIZE_MAX / 2) return NULL; /* no such conversion fits a sandbox */
  n = (n + 7) & ~(size_t)7;
  if (n > a->left) {
    size_t size = n > a->next_size ? n : a->next_size;
    /* cJSON's allocator, as for any tree: its hooks apply (the tests make it fail) */
    struct sb_arena_chunk *ch = cJSON_malloc(sizeof *ch + size);
    if (!ch) return NULL;
    ch->next = a->chunks;
    ch->size = size;
    a->chunks = ch;
    a->p = ch->mem;
    a->left = size;
    if (a->next_size < ARENA_CHUNK_MAX) a->next_size *= 2;
  }
  void *r = a->p;
  a->p += n;
  a->left -= n;
  return r;
}

/* A zeroed node of type t, as cJSON_Create* would make it (NULL when
 * out of memory; arena_node says so in the message). */
static cJSON *arena_node_q(struct sb_arena *a, int t) {
  cJSON *v = arena_take(a, sizeof *v);
  if (!v) return NULL;
  memset(v, 0, sizeof *v);
  v->type = t;
  return v;
}
static cJSON *arena_node(struct conv *c, int t) {
  cJSON *v = arena_node_q(c->arena, t);
  return v ? v : conv_fail(c, "out of memory");
}

/* Copies the len bytes at s (a Lua string holding nuls zero bytes) as the
 * host's C string: each zero byte becomes 0xC0 0x80. out has room for
 * len + nuls + 1 bytes. */
static void text_copy(char *out, const char *s, size_t len, size_t nuls) {
  if (!nuls) {
    memcpy(out, s, len);
    out[len] = 0;
    return;
  }
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i]) out[n++] = s[i];
    else out[n++] = (char)0xC0, out[n++] = (char)0x80;
  }
  out[n] = 0;
}

static char *arena_text_q(struct sb_arena *a, const char *s, size_t len, size_t nuls) {
  char *out = arena_take(a, len + nuls + 1);
  if (out) text_copy(out, s, len, nuls);
  return out;
}
static char *arena_text(struct conv *c, const char *s, size_t len, size_t nuls) {
  char *out = arena_text_q(c->arena, s, len, nuls);
  if (!out) conv_fail(c, "out of memory");
  return out;
}

/* Appends item to the array or object parent, as cJSON_AddItemToArray
 * links it (the first child's prev is the last child). */
static void arena_link(cJSON *parent, cJSON *item) {
  cJSON *first = parent->child;
  item->next = NULL;
  if (!first) {
    parent->child = item;
    item->prev = item;
    return;
  }
  first->prev->next = item;
  item->prev = first->prev;
  first->prev = item;
}

/* ---- node makers: the arena's, or cJSON's ------------------------------- */

static cJSON *mk_array(struct conv *c) {
  return c->arena ? arena_node(c, cJSON_Array) : conv_made(c, cJSON_CreateArray());
}
static cJSON *mk_object(struct conv *c) {
  return c->arena ? arena_node(c, cJSON_Object) : conv_made(c, cJSON_CreateObject());
}
static cJSON *mk_null(struct conv *c) {
  return c->arena ? arena_node(c, cJSON_NULL) : conv_made(c, cJSON_CreateNull());
}
static cJSON *mk_bool(struct conv *c, int b) {
  return c->arena ? arena_node(c, b ? cJSON_True : cJSON_False) : conv_made(c, cJSON_CreateBool(b));
}
/* A number node's fields as cJSON_CreateNumber sets them. */
static void set_number(cJSON *v, double d) {
  v->valuedouble = d;
  v->valueint = d >= INT_MAX ? INT_MAX : d <= (double)INT_MIN ? INT_MIN : (int)d;
}
static cJSON *mk_number(struct conv *c, double d) {
  if (!c->arena) return conv_made(c, cJSON_CreateNumber(d));
  cJSON *v = arena_node(c, cJSON_Number);
  if (v) set_number(v, d);
  return v;
}
/* Frees a value made by conv_value when a conversion fails: the arena's
 * go with the arena. */
static void conv_drop(struct conv *c, cJSON *v) {
  if (!c->arena) cJSON_Delete(v);
}

/* Charges bytes of host memory for one node; fails (killing the run with
 * the memory limit) past the sandbox's remaining cap, and polls the
 * deadline and the stop flag every POLL_NODES nodes. */
static int conv_charge(struct conv *c, size_t bytes) {
  if (bytes > c->room) {
    sandbox__kill_memory(c->L, "converting a value to JSON");
    conv_fail(c, "memory limit exceeded");
    return -1;
  }
  c->room -= bytes;
  if (--c->poll == 0) {
    c->poll = POLL_NODES;
    if (sandbox__poll(c->L)) {
      conv_fail(c, "run stopped");
      return -1;
    }
  }
  return 0;
}

/* Checks that s is UTF-8 (a zero byte counts as U+0000). Returns the
 * offset of the first bad byte or -1, and the number of zero bytes. */
static long utf8_bad(const unsigned char *s, size_t n, size_t *nuls) {
  *nuls = 0;
  for (size_t i = 0; i < n;) {
    if (s[i] - 1u < 0x7Fu) { /* ASCII but the zero byte: the usual case */
      i++;
      continue;
    }
    if (!s[i]) ++*nuls;
    size_t len = util_utf8_len(s + i, n - i, NULL);
    if (!len) return (long)i;
    i += len;
  }
  return -1;
}

/* Checks that the Lua string at idx is UTF-8 and returns Lua's bytes
 * (valid while the value is on the stack), *len and *nuls (its zero
 * bytes); NULL with err filled when it is not UTF-8. */
static const char *conv_text_raw(struct conv *c, int idx, const char *what, size_t *len,
                                 size_t *nuls) {
  const char *s = lua_tolstring(c->L, idx, len);
  long bad = utf8_bad((const unsigned char *)s, *len, nuls);
  if (bad >= 0) {
    char msg[96];
    snprintf(msg, sizeof msg, "%s is not valid UTF-8 at byte %ld", what, bad + 1);
    conv_fail(c, msg);
    return NULL;
  }
  return s;
}

/* Checks the Lua string at idx and returns it as a C string for cJSON: a
 * zero byte becomes 0xC0 0x80. *owned is set when the result was malloc'd
 * (free it); otherwise it is Lua's, valid while the value is on the stack.
 * *bytes: its size with the NUL. NULL (with err filled) for invalid UTF-8
 * or no memory. */
static const char *conv_text(struct conv *c, int idx, const char *what, size_t *bytes, char **owned) {
  size_t len, nuls;
  *owned = NULL;
  const char *s = conv_text_raw(c, idx, what, &len, &nuls);
  if (!s) return NULL;
  *bytes = len + nuls + 1;
  if (!nuls) return s;
  char *out = malloc(len + nuls + 1);
  if (!out) {
    conv_fail(c, "out of memory");
    return NULL;
  }
  text_copy(out, s, len, nuls);
  *owned = out;
  return out;
}

/* Appends a path element, returns the old length to restore. Control bytes
 * in keys are shown escaped (a zero byte as \0). */
static size_t path_push_key(struct conv *c, const char *k, size_t klen) {
  size_t n = strlen(c->path), at = n;
  if (n && at + 1 < sizeof c->path) c->path[at++] = '.';
  for (size_t i = 0; i < klen && at + 5 < sizeof c->path; i++) {
    unsigned char ch = (unsigned char)k[i];
    if (ch < 0x20) at += (size_t)snprintf(c->path + at, sizeof c->path - at, "\\%u", ch);
    else c->path[at++] = (char)ch;
  }
  c->path[at] = 0;
  return n;
}
static size_t path_push_index(struct conv *c, lua_Integer i) {
  size_t n = strlen(c->path);
  snprintf(c->path + n, sizeof c->path - n, "[%lld]", (long long)i);
  return n;
}

static int cmp_keys(const void *a, const void *b) {
  return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

/* Second line of defence: the object must not hold two equal keys (the
 * zero-byte encoding is one-to-one, so this never fires by construction). */
static int has_duplicate_key(const cJSON *obj, int n) {
  if (n < 2) return 0;
  if (n <= 16) {
    for (const cJSON *a = obj->child; a; a = a->next)
      for (const cJSON *b = a->next; b; b = b->next)
        if (!strcmp(a->string, b->string)) return 1;
    return 0;
  }
  cJSON **items = malloc(sizeof *items * (size_t)n);
  if (!items) return 1; /* treated as a failure either way */
  int i = 0;
  for (cJSON *a = obj->child; a && i < n; a = a->next) items[i++] = a;
  qsort(items, (size_t)i, sizeof *items, cmp_keys);
  int dup = 0;
  for (int k = 1; k < i && !dup; k++) dup = !strcmp(items[k - 1]->string, items[k]->string);
  free(items);
  return dup;
}

/* In the arena, the members of an object are converted during its shape
 * scan as long as that has no effect the scan-then-convert order would
 * not have had: the key is a string, the value a string, number, boolean
 * or json.null, both UTF-8, no NaN or infinity, no integer beyond 2^53,
 * and both charges fit without a poll of the deadline. The first member
 * that is anything else (a table, an error) is where the second pass
 * starts, after the scan, exactly as it would have (the same order, the
 * same charges, the same messages and kills). Returns 1 when the member
 * at [.., k, v] (k a string) was converted into *obj (made here when
 * NULL); 0 when not, with nothing charged or reported. */
static int early_member(struct conv *c, cJSON **obj) {
  lua_State *L = c->L;
  size_t klen, knuls, vlen = 0, vnuls = 0;
  const char *k = lua_tolstring(L, -2, &klen), *vs = NULL;
  if (utf8_bad((const unsigned char *)k, klen, &knuls) >= 0) return 0;
  size_t kbytes = klen + knuls + 1, vbytes = NODE_COST;
  double d = 0;
  int type;
  switch (lua_type(L, -1)) {
    case LUA_TSTRING:
      vs = lua_tolstring(L, -1, &vlen);
      if (utf8_bad((const unsigned char *)vs, vlen, &vnuls) >= 0) return 0;
      vbytes += vlen + vnuls + 1;
      type = cJSON_String;
      break;
    case LUA_TNUMBER:
      if (lua_isinteger(L, -1)) {
        lua_Integer i = lua_tointeger(L, -1);
        if (i < -(1LL << 53) || i > (1LL << 53)) return 0;
        d = (double)i;
      } else {
        d = lua_tonumber(L, -1);
        if (isnan(d) || isinf(d)) return 0;
      }
      type = cJSON_Number;
      break;
    case LUA_TBOOLEAN:
      type = lua_toboolean(L, -1) ? cJSON_True : cJSON_False;
      break;
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, -1)) return 0;
      type = cJSON_NULL;
      break;
    default:
      return 0;
  }
  /* conv_charge(kbytes) then conv_charge(vbytes), neither failing nor polling */
  if (kbytes > c->room || vbytes > c->room - kbytes || c->poll <= 2) return 0;
  if (!*obj && !(*obj = arena_node_q(c->arena, cJSON_Object))) return 0;
  cJSON *v = arena_node_q(c->arena, type);
  if (!v || !(v->string = arena_text_q(c->arena, k, klen, knuls))) return 0;
  if (type == cJSON_Number) set_number(v, d);
  if (vs && !(v->valuestring = arena_text_q(c->arena, vs, vlen, vnuls))) return 0;
  c->room -= kbytes + vbytes;
  c->poll -= 2;
  arena_link(*obj, v);
  return 1;
}

static cJSON *conv_table(struct conv *c, int idx, int depth) {
  lua_State *L = c->L;
  if (depth > JSON_MAX_DEPTH) return conv_fail(c, "nested too deeply (or a cycle)");
  if (!lua_checkstack(L, 6)) return conv_fail(c, "nested too deeply");
  if (conv_charge(c, NODE_COST)) return NULL;
  /* Shape scan: count entries; note whether keys are 1..n or strings. */
  lua_Integer n = 0, maxi = 0;
  int strkeys = 0, otherkeys = 0;
  int top = lua_gettop(L), early = c->arena != NULL, resume = 0;
  cJSON *obj = NULL; /* the members converted early (early_member) */
  size_t room0 = c->room;
  unsigned poll0 = c->poll;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    n++;
    if (lua_type(L, -2) == LUA_TNUMBER && lua_isinteger(L, -2)) {
      lua_Integer k = lua_tointeger(L, -2);
      if (k >= 1 && k > maxi) maxi = k;
      if (k < 1) otherkeys++;
    } else if (lua_type(L, -2) == LUA_TSTRING) {
      strkeys++;
    } else {
      otherkeys++;
    }
    if (early && !(lua_type(L, -2) == LUA_TSTRING && early_member(c, &obj))) {
      early = 0; /* keep this key below the scan: [.., K, k, v] */
      lua_pushvalue(L, -2);
      lua_insert(L, -3);
      resume = 1;
    }
    lua_pop(L, 1);
  }
  if ((resume || obj) && (otherkeys || strkeys != n)) {
    /* not an object: undo what the early members did (their nodes stay in
     * the arena, unused) and go on as the scan alone would have */
    lua_settop(L, top);
    c->room = room0;
    c->poll = poll0;
    resume = 0;
    obj = NULL;
  }
  int is_array = 0;
  if (n == 0) {
    /* Without a metatable nothing is pushed: compare only when there is one
     * (popping by lua_istable here used to remove the table itself when it
     * was empty and nested, breaking the caller's lua_next). */
    if (lua_getmetatable(L, idx)) {
      lua_rawgetp(L, LUA_REGISTRYINDEX, &K_ARRAYMT);
      is_array = lua_rawequal(L, -1, -2);
      lua_pop(L, 2);
    }
    return is_array ? mk_array(c) : mk_object(c);
  }
  if (otherkeys) return conv_fail(c, "table keys must be strings or 1..n integers");
  if (strkeys && strkeys != n) return conv_fail(c, "table mixes array items and named keys");
  if (!strkeys) {
    if (maxi != n) return conv_fail(c, "array has holes (nil items)");
    cJSON *arr = mk_array(c);
    if (!arr) return NULL;
    for (lua_Integer i = 1; i <= n; i++) {
      lua_rawgeti(L, idx, i);
      size_t old = path_push_index(c, i - 1);
      cJSON *v = conv_value(c, lua_gettop(L), depth + 1);
      lua_pop(L, 1);
      if (!v) {
        conv_drop(c, arr);
        return NULL;
      }
      c->path[old] = 0;
      if (c->arena) arena_link(arr, v);
      else cJSON_AddItemToArray(arr, v);
    }
    return arr;
  }
  if (obj && !resume) goto members_done; /* every member was converted early */
  if (!obj && !(obj = mk_object(c))) {
    lua_settop(L, top);
    return NULL;
  }
  int have;
  if (resume) { /* [.., K]: go on from K, as lua_next had just returned it */
    lua_pushvalue(L, -1);
    lua_rawget(L, idx);
    have = 1;
  } else {
    lua_pushnil(L);
    have = lua_next(L, idx);
  }
  for (; have; have = lua_next(L, idx)) { /* [.., k, v] */
    size_t klen, kbytes;
    const char *kraw = lua_tolstring(L, -2, &klen); /* keys are strings here: no conversion */
    size_t old = path_push_key(c, kraw, klen);
    char *kown = NULL;
    const char *k;
    size_t knuls = 0;
    if (c->arena) { /* Lua's bytes now (on the stack until the pop below), copied last */
      k = conv_text_raw(c, lua_gettop(L) - 1, "key", &klen, &knuls);
      kbytes = klen + knuls + 1;
    } else {
      k = conv_text(c, lua_gettop(L) - 1, "key", &kbytes, &kown);
    }
    cJSON *v = k && !conv_charge(c, kbytes) ? conv_value(c, lua_gettop(L), depth + 1) : NULL;
    if (v && c->arena) {
      if ((v->string = arena_text(c, k, klen, knuls))) arena_link(obj, v);
      else v = NULL;
    } else if (v && !cJSON_AddItemToObject(obj, k, v)) {
      cJSON_Delete(v);
      v = conv_fail(c, "out of memory");
    }
    free(kown);
    if (!v) {
      lua_pop(L, 2);
      conv_drop(c, obj);
      return NULL;
    }
    c->path[old] = 0;
    lua_pop(L, 1);
  }
members_done:
  if (has_duplicate_key(obj, (int)n)) {
    conv_drop(c, obj);
    return conv_fail(c, "two keys are equal after conversion to JSON");
  }
  return obj;
}

static cJSON *conv_number(struct conv *c, int idx) {
  lua_State *L = c->L;
  if (lua_isinteger(L, idx)) {
    lua_Integer i = lua_tointeger(L, idx);
    cJSON *v = mk_number(c, (double)i);
    if (!v || (i >= -(1LL << 53) && i <= (1LL << 53))) return v;
    /* Beyond 2^53 a double is not exact: keep the decimal text. */
    char text[24];
    int n = snprintf(text, sizeof text, "%lld", (long long)i);
    if (c->arena) {
      v->valuestring = arena_text(c, text, (size_t)n, 0);
      return v->valuestring ? v : NULL;
    }
    v->valuestring = cJSON_malloc((size_t)n + 1);
    if (!v->valuestring) {
      cJSON_Delete(v);
      return conv_fail(c, "out of memory");
    }
    memcpy(v->valuestring, text, (size_t)n + 1);
    return v;
  }
  double d = lua_tonumber(L, idx);
  if (isnan(d) || isinf(d)) return conv_fail(c, "NaN and infinity are not valid JSON");
  return mk_number(c, d);
}

static cJSON *conv_value(struct conv *c, int idx, int depth) {
  lua_State *L = c->L;
  int t = lua_type(L, idx);
  if (t == LUA_TTABLE) return conv_table(c, lua_absindex(L, idx), depth);
  if (t != LUA_TSTRING && conv_charge(c, NODE_COST)) return NULL;
  switch (t) {
    case LUA_TNIL:
      return mk_null(c);
    case LUA_TBOOLEAN:
      return mk_bool(c, lua_toboolean(L, idx));
    case LUA_TNUMBER:
      return conv_number(c, idx);
    case LUA_TSTRING: {
      size_t bytes;
      char *own;
      if (c->arena) {
        /* checked, charged, then copied: the order of the other branch */
        size_t len, nuls;
        const char *raw = conv_text_raw(c, idx, "string", &len, &nuls);
        if (!raw || conv_charge(c, NODE_COST + len + nuls + 1)) return NULL;
        cJSON *v = arena_node(c, cJSON_String);
        if (v && !(v->valuestring = arena_text(c, raw, len, nuls))) v = NULL;
        return v;
      }
      const char *s = conv_text(c, idx, "string", &bytes, &own);
      if (!s) return NULL;
      cJSON *v = conv_charge(c, NODE_COST + bytes) ? NULL : conv_made(c, cJSON_CreateString(s));
      free(own);
      return v;
    }
    case LUA_TLIGHTUSERDATA:
      if (lua_touserdata(L, idx) == NULL) return mk_null(c);
      return conv_fail(c, "userdata cannot be converted to JSON");
    case LUA_TFUNCTION:
      if (c->mark_functions) {
        lua_Debug ar;
        lua_pushvalue(L, idx);
        int line = lua_getinfo(L, ">S", &ar) ? ar.linedefined : 0;
        cJSON *o = conv_made(c, cJSON_CreateObject());
        if (o && !cJSON_AddNumberToObject(o, "$function", line)) {
          cJSON_Delete(o);
          o = conv_fail(c, "out of memory");
        }
        return o;
      }
      return conv_fail(c, "a function cannot be converted to JSON");
    default:
      return conv_fail(c, "value cannot be converted to JSON");
  }
}

cJSON *sandbox__to_json_budget(lua_State *L, int idx, int depth, int mark_functions, size_t *room,
                               char *err, size_t errn) {
  struct conv c = {L, NULL, mark_functions, err, errn, *room, POLL_NODES, {0}};
  if (errn) err[0] = 0;
  cJSON *v = conv_value(&c, lua_absindex(L, idx), depth);
  if (!v && errn && !err[0]) snprintf(err, errn, "cannot be converted to JSON");
  *room = c.room;
  return v;
}

cJSON *sandbox__to_json_arena(lua_State *L, int idx, struct sb_arena *a, size_t *room, char *err,
                              size_t errn) {
  struct conv c; /* field by field: the 256-byte path needs only its first byte cleared */
  c.L = L, c.arena = a, c.mark_functions = 0, c.err = err, c.errn = errn;
  c.room = *room, c.poll = POLL_NODES, c.path[0] = 0;
  if (errn) err[0] = 0;
  cJSON *v = conv_value(&c, lua_absindex(L, idx), 0);
  if (!v && errn && !err[0]) snprintf(err, errn, "cannot be converted to JSON");
  *room = c.room;
  return v;
}

cJSON *sandbox__to_json(lua_State *L, int idx, int mark_functions, char *err, size_t errn) {
  size_t room = sandbox__mem_room(L);
  return sandbox__to_json_budget(L, idx, 0, mark_functions, &room, err, errn);
}

/* json.encode(v [, {pretty=true}]) -> string. [-1, +1, e] */
static int l_json_encode(lua_State *L) {
  luaL_checkany(L, 1);
  int pretty = 0;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "pretty");
    pretty = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  char cerr[300];
  cJSON *v = sandbox__to_json(L, 1, 0, cerr, sizeof cerr);
  if (!v) return luaL_error(L, "json.encode: %s", cerr);
  /* The text is malloc'd outside Lua; hold it in a box whose __gc frees
   * it, so a memory-limit raise while copying it in cannot leak it. */
  char **box = lua_newuserdatauv(L, sizeof(char *), 0);
  *box = NULL;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &K_BOXMT);
  lua_setmetatable(L, -2);
  *box = json_print(v, pretty ? JSON_PRETTY : 0);
  cJSON_Delete(v);
  if (!*box) return luaL_error(L, "json.encode: out of memory");
  sandbox__charge(L, strlen(*box) / 16);
  lua_pushstring(L, *box);
  cJSON_free(*box);
  *box = NULL;
  return 1;
}

static int box_gc(lua_State *L) {
  char **box = lua_touserdata(L, 1);
  if (box && *box) cJSON_free(*box), *box = NULL;
  return 0;
}

/* json.decode(s) -> value, or raises naming the byte offset. Strict
 * RFC 8259 (json_parse); a repeated key keeps its last value. [-1, +1, e] */
static int l_json_decode(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  /* cJSON allocates outside the Lua cap; bound its input. */
  if (len > ((size_t)16 << 20)) return luaL_error(L, "json.decode: input larger than 16 MiB");
  sandbox__charge(L, len / 16);
  cJSON *v = NULL;
  struct err e = {0};
  /* The tree lives outside the Lua allocator: bound it by what the script
   * has left, and past that it is the script's memory limit. */
  size_t room = sandbox__mem_room(L);
  if (json_parse_bounded(s, len, 0, room ? room : 1, &v, &e)) {
    if (e.rc == ERR_LIMIT) {
      sandbox__kill_memory(L, "json.decode");
      return sandbox__raise_killed(L);
    }
    return luaL_error(L, "json.decode: %s", e.msg);
  }
  /* The tree is handed over: freed even when pushing it hits the memory
   * limit (a raise out of here). */
  if (sandbox__push_json_take(L, v))
    return luaL_error(L, "json.decode: nested deeper than %d levels", JSON_MAX_DEPTH);
  return 1;
}

/* json.array(t) marks t as an array (so an empty one encodes as []). */
static int l_json_array(lua_State *L) {
  if (lua_isnoneornil(L, 1)) lua_newtable(L);
  luaL_checktype(L, 1, LUA_TTABLE);
  if (lua_getmetatable(L, 1)) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &K_ARRAYMT);
    if (!lua_rawequal(L, -1, -2)) return luaL_error(L, "json.array: table already has a metatable");
    lua_pop(L, 2);
  } else {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &K_ARRAYMT);
    lua_setmetatable(L, 1);
  }
  lua_settop(L, 1);
  return 1;
}

void sandbox__open_json(lua_State *L) {
  lua_createtable(L, 0, 2);
  lua_pushcfunction(L, box_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushliteral(L, "box");
  lua_setfield(L, -2, "__metatable");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &K_BOXMT);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "json.array");
  lua_setfield(L, -2, "__metatable");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &K_ARRAYMT);
  static const luaL_Reg f[] = {{"encode", l_json_encode},
                               {"decode", l_json_decode},
                               {"array", l_json_array},
                               {NULL, NULL}};
  luaL_newlib(L, f);
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
}
