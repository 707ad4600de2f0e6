/* embed.h - text embeddings for skill selection.
 *
 * Two providers behind one interface:
 *   builtin  an offline embedding that needs no model: hashed word unigrams
 *            (stemmed), word bigrams and character 3/4-grams of each word,
 *            signed feature hashing into a fixed-size vector, L2-normalised.
 *            Deterministic, fast, and inflections share most n-grams.
 *   openai   any OpenAI-compatible POST {base_url}/embeddings endpoint
 *            (OpenAI, Ollama, llama.cpp server, vLLM) through libcurl.
 * Vectors are always L2-normalised, so a dot product is the cosine.
 *
 * embedder_embed_cached() keeps vectors in the store's embed_cache table,
 * keyed by the model id and the BLAKE2b hash of the text, so a restart
 * embeds only texts that changed.
 */
#ifndef LUAGENT_EMBED_H
#define LUAGENT_EMBED_H

#include <stddef.h>

#include "err.h"

struct store;
struct config;

enum embed_kind { EMBED_BUILTIN, EMBED_OPENAI };

struct embed_opts {
  enum embed_kind kind;
  const char *base_url;    /* openai: e.g. "http://127.0.0.1:11434/v1" */
  const char *model;       /* openai: model name */
  const char *api_key_env; /* openai: env var holding the key (may be NULL) */
  double timeout_s;        /* openai: per request (default 30) */
  int dim;                 /* builtin: vector size (default EMBED_BUILTIN_DIM) */
};

#define EMBED_BUILTIN_DIM 2048 /* fewer collisions pay off up to ~4096 (bench_select) */
#define EMBED_BATCH 64         /* texts per HTTP request */

struct embedder;

/* Creates a provider. Strings in o are copied. Errors: unknown kind,
 * missing base_url/model for openai. */
int embedder_new(const struct embed_opts *o, struct embedder **out, struct err *e);
/* Reads the `embeddings` table of the config (NULL: builtin defaults):
 * kind "builtin"|"openai", base_url, model, api_key_env, timeout_s, dim. */
int embedder_from_config(const struct config *cfg, struct embedder **out, struct err *e);
void embedder_free(struct embedder *m); /* NULL is a no-op */

/* The cache key of the model, e.g. "builtin-v1/512" or
 * "openai:http://host/v1:nomic-embed-text". Borrowed. */
const char *embedder_model(const struct embedder *m);
enum embed_kind embedder_kind(const struct embedder *m);

/* Embeds n texts. *vecs gets n * *dim floats (malloc'd; caller frees).
 * Errors name the endpoint and the cause (connection, HTTP status, bad
 * JSON, a vector of the wrong size). */
int embedder_embed(struct embedder *m, const char *const *texts, size_t n, float **vecs, int *dim,
                   struct err *e);
/* The same through st's embed_cache table (st may be NULL: no cache).
 * *hits (may be NULL) gets how many came from the cache. */
int embedder_embed_cached(struct embedder *m, struct store *st, const char *const *texts, size_t n,
                          float **vecs, int *dim, size_t *hits, struct err *e);

/* The builtin embedding of text[0..len) into out[dim] (L2-normalised; all
 * zero for a text without words). No allocation. */
void embed_builtin(const char *text, size_t len, float *out, int dim);

/* BLAKE2b-256 hex of text, the cache key's content part. */
void embed_content_hash(const char *text, char out[65]);

#endif
