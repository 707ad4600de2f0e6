/* tokenize.h - the word tokenizer shared by keyword selection and the
 * built-in embedding.
 *
 * Text is split into words: runs of ASCII letters and digits (lowercased,
 * camelCase split: "getHealthWorkforce" -> get, health, workforce; letters
 * and digits split: "mp3Player" -> mp, 3, player; `_` and `-` separate) and
 * runs of other non-ASCII letters; each CJK character is a word of its own,
 * since those scripts do not separate words with spaces. English stopwords
 * are dropped. Each word comes out both as written (lowercase) and with a
 * light suffix stemmer applied ("notes"/"noting" -> "not", "checks" ->
 * "check"), so inflections meet. No allocation: the callback gets words in
 * a caller-sized stack buffer.
 */
#ifndef LUAGENT_TOKENIZE_H
#define LUAGENT_TOKENIZE_H

#include <stddef.h>

#define TOK_MAX 48 /* longer words are cut to this many bytes */

/* word: lowercase as written; stem: stemmed form. Both NUL-terminated and
 * valid only during the call. Returns nonzero to stop early. */
typedef int (*tok_fn)(void *ud, const char *word, size_t wlen, const char *stem, size_t slen);

/* Calls fn for every non-stopword word of text[0..len). Returns the number
 * of words passed. */
size_t tok_words(const char *text, size_t len, tok_fn fn, void *ud);

/* Stems w (lowercase, wlen bytes) into out (at least wlen+1 bytes);
 * returns the stem length. */
size_t tok_stem(const char *w, size_t wlen, char *out);

/* True for an English stopword (lowercase). */
int tok_is_stopword(const char *w, size_t len);

#endif
