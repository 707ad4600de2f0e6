/* memory.h - persistent memory: keyed values with full-text search.
 *
 * Memory lives in the workspace's state database (tables `memory` and
 * `memory_fts`, an FTS5 index kept in step by triggers). An entry is
 * (namespace, key) -> value; the namespace "" is the default one, and the
 * config can pick another default (`memory = { namespace = "..." }`).
 * A value is either text (stored as is) or JSON (a table from Lua, an
 * object from the model; stored as its JSON text and decoded on the way
 * out), so a reader gets back the shape that was written.
 *
 * Search is FTS5 ranked by bm25 (the key weighs twice the value). The
 * query is built here from the user's words, each one quoted, so no text
 * can inject FTS5 syntax: an empty or punctuation-only query matches
 * nothing and is not an error.
 *
 * Layers: the memory_* store functions work on one struct store (one
 * connection, one thread); memory_install_api adds the Lua `memory` library
 * to a sandbox; memory_register_tools registers the model's tools
 * `memory.save` and `memory.search`; memory_relevant builds the context
 * block the ReAct loop adds to a prompt.
 */
#ifndef LUAGENT_MEMORY_H
#define LUAGENT_MEMORY_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "err.h"
#include "store.h"

struct runtime;
struct sandbox;
struct call_ctx;
struct config;
struct sbuf;

#define MEMORY_DEFAULT_MAX_VALUE 65536 /* bytes; config memory.max_value_bytes */
#define MEMORY_MAX_KEY 256             /* bytes */
#define MEMORY_MAX_NS 64               /* bytes */
#define MEMORY_MAX_SEARCH 100          /* results per search */
#define MEMORY_MAX_TERMS 32            /* query words used */

enum memory_kind { MEMORY_TEXT = 0, MEMORY_JSON = 1 };

/* One entry. Every string is malloc'd and owned by the item. */
struct memory_item {
  char *ns, *key, *value;
  enum memory_kind kind;
  double updated; /* unix seconds */
  double score;   /* search only: higher is more relevant (-bm25) */
  int tainted;    /* written by a run whose model had read outside content */
};
void memory_item_clear(struct memory_item *it);              /* frees the strings */
void memory_items_free(struct memory_item *items, size_t n); /* clears each, frees the array */
/* The item's value as JSON: a string for text, the decoded value for JSON.
 * Returns a new value the caller frees (a string if stored JSON is broken). */
cJSON *memory_item_value(const struct memory_item *it);

/* Checks a namespace ("" or 1..64 of [A-Za-z0-9_.:-]) and a key (1..256
 * bytes, no control characters). 0 or ERR_INVALID with code invalid_args. */
int memory_check_ns(const char *ns, struct err *e);
int memory_check_key(const char *key, struct err *e);

/* Stores value (len bytes, no NUL inside) under (ns, key), replacing any
 * previous value. Fails with code "too_large" when len > max_bytes. If
 * replaced is not NULL it is set to 1 when a value existed before. */
int memory_put(struct store *s, const char *ns, const char *key, const char *value, size_t len,
               enum memory_kind kind, size_t max_bytes, int *replaced, struct err *e);
/* Looks (ns, key) up. Returns 1 and fills *out (clear it after), 0 when
 * absent, <0 on error. */
int memory_get(struct store *s, const char *ns, const char *key, struct memory_item *out,
               struct err *e);
/* Deletes (ns, key). Returns 1 if it existed, 0 if not, <0 on error. */
int memory_delete(struct store *s, const char *ns, const char *key, struct err *e);
/* Number of entries in ns (NULL: all namespaces). */
int memory_count(struct store *s, const char *ns, size_t *out, struct err *e);
/* Keys of ns in key order, those starting with prefix (NULL or "": all),
 * at most limit. *keys is a malloc'd array of malloc'd strings: free each
 * and the array. */
int memory_list(struct store *s, const char *ns, const char *prefix, size_t limit, char ***keys,
                size_t *n, struct err *e);

/* Full-text search of ns (NULL: every namespace) for text, best first, at
 * most limit (capped at MEMORY_MAX_SEARCH) results. *items (free with
 * memory_items_free) may be NULL with *n = 0: a query with no words finds
 * nothing. */
int memory_search(struct store *s, const char *ns, const char *text, size_t limit,
                  struct memory_item **items, size_t *n, struct err *e);

/* Builds the FTS5 MATCH expression for user text into out (appended):
 * words are runs of ASCII letters and digits and of non-ASCII bytes; each
 * is quoted and they are joined with OR; duplicates and (when other words
 * remain) common English stop words are dropped; at most MEMORY_MAX_TERMS
 * words of at most 64 bytes. Returns the number of words (0: match nothing).
 * Exposed for tests. */
int memory_fts_query(const char *text, struct sbuf *out);

/* Reads `memory = { max_value_bytes = N, namespace = "..." }` from the
 * config, checking its keys (errors name luagent.lua:LINE and the key). */
int memory_config(const struct config *cfg, size_t *max_value_bytes, const char **ns,
                  struct err *e);

/* Registers the tools memory.save (impact low) and memory.search (impact
 * read) in rt->tools, after checking the memory config. */
int memory_register_tools(struct runtime *rt, struct err *e);

/* Installs the Lua library into sb (see docs/readme/memory.md):
 *   memory.set(key, value [, ns])   value: string, number, boolean or table
 *   memory.get(key [, ns])          -> value or nil
 *   memory.delete(key [, ns])       -> true if it existed
 *   memory.search(text [, n [, ns]]) -> { {key=, value=, score=}, ... }
 *                                      (ns "*": every namespace, items get ns=)
 *   memory.list([prefix [, ns]])    -> sorted keys (at most 1000)
 *   memory.count([ns])              -> number of entries
 * ns nil means the configured default namespace. ctx must outlive sb. */
int memory_install_api(struct runtime *rt, struct sandbox *sb, struct call_ctx *ctx, struct err *e);

/* Context assembly for the ReAct loop: appends to out a block listing the
 * memories of the default namespace most relevant to message, at most
 * max_items entries and at most max_chars bytes in all (values are cut
 * with "..." and control characters flattened to spaces; the cut never
 * splits a UTF-8 sequence). Nothing is appended when nothing matches or
 * max_chars cannot hold the header and one entry. The block looks like:
 *
 *   Relevant memories (saved earlier; may be out of date):
 *   - key: value
 *   - key: value
 *
 * Returns the number of entries written (0 or more), or <0 with e filled
 * when the store fails. Uses runtime_store(rt): call it in the thread that
 * owns rt's store connection. */
/* Marks a stored value as written under taint (see memory_item.tainted).
 * memory_put clears the mark: a clean write replaces the value. */
int memory_mark_tainted(struct store *s, const char *ns, const char *key, struct err *e);
/* memory_relevant that also says (*tainted = 1) whether any memory it
 * added was written under taint. */
int memory_relevant_taint(struct runtime *rt, const char *message, size_t max_items,
                          size_t max_chars, struct sbuf *out, int *tainted, struct err *e);
int memory_relevant(struct runtime *rt, const char *message, size_t max_items, size_t max_chars,
                    struct sbuf *out, struct err *e);

#endif
