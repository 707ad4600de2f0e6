/* tokenize.c - see tokenize.h. */
#include "tokenize.h"

#include <stdint.h>
#include <string.h>

/* A general English stopword list (function words only, nothing chosen
 * from the benchmark data), minus "up" and "down", which carry meaning for
 * an operator ("is the site up?"). Sorted for bsearch. */
static const char *const stopwords[] = {
    "a",      "about",  "above",    "after",      "again",      "against", "all",     "am",
    "an",     "and",    "any",      "are",        "as",         "at",      "be",      "because",
    "been",   "before", "being",    "below",      "between",    "both",    "but",     "by",
    "can",    "could",  "did",      "do",         "does",       "doing",   "during",  "each",
    "few",    "for",    "from",     "further",    "had",        "has",     "have",    "having",
    "he",     "her",    "here",     "hers",       "herself",    "him",     "himself", "his",
    "how",    "i",      "if",       "in",         "into",       "is",      "it",      "its",
    "itself", "just",   "me",       "more",       "most",       "my",      "myself",  "no",
    "nor",    "not",    "now",      "of",         "off",        "on",      "once",    "only",
    "or",     "other",  "our",      "ours",       "ourselves",  "out",     "over",    "own",
    "same",   "she",    "should",   "so",         "some",       "such",    "than",    "that",
    "the",    "their",  "theirs",   "them",       "themselves", "then",    "there",   "these",
    "they",   "this",   "those",    "through",    "to",         "too",     "under",   "until",
    "very",   "was",    "we",       "were",       "what",       "when",    "where",   "which",
    "while",  "who",    "whom",     "why",        "will",       "with",    "would",   "you",
    "your",   "yours",  "yourself", "yourselves",
};

static int cmp_word(const char *w, size_t n, const char *s) {
  int c = strncmp(w, s, n);
  if (c) return c;
  return s[n] ? -1 : 0;
}

int tok_is_stopword(const char *w, size_t n) {
  size_t lo = 0, hi = sizeof stopwords / sizeof stopwords[0];
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = cmp_word(w, n, stopwords[mid]);
    if (!c) return 1;
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return 0;
}

static int ends(const char *w, size_t n, const char *suf) {
  size_t m = strlen(suf);
  return n >= m && !memcmp(w + n - m, suf, m);
}

static int is_vowel(char c) {
  return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u';
}

static int has_vowel(const char *w, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (is_vowel(w[i]) || (i > 0 && w[i] == 'y')) return 1;
  return 0;
}

/* A light English suffix stemmer: plurals, -ing, -ed, -ly, -ation/-ion,
 * a final -e. Aims at making inflections of one word meet, not at
 * linguistic stems. */
size_t tok_stem(const char *w, size_t n, char *out) {
  memcpy(out, w, n);
  out[n] = 0;
  if (n <= 3 || (unsigned char)w[0] >= 0x80) return n;
  for (size_t i = 0; i < n; i++)
    if (w[i] >= '0' && w[i] <= '9') return n;
  if (ends(out, n, "ies") && n > 4) {
    n -= 3;
    out[n++] = 'y';
  } else if (ends(out, n, "sses")) {
    n -= 2;
  } else if (ends(out, n, "s") && !ends(out, n, "ss") && !ends(out, n, "us") &&
             !ends(out, n, "is")) {
    n -= 1;
  }
  if (n > 5 && ends(out, n, "ing") && has_vowel(out, n - 3)) {
    n -= 3;
  } else if (n > 4 && ends(out, n, "ed") && has_vowel(out, n - 2)) {
    n -= 2;
  } else if (n > 5 && ends(out, n, "ly")) {
    n -= 2;
  } else if (n > 6 && ends(out, n, "ation")) {
    n -= 5;
    out[n++] = 'a';
    out[n++] = 't';
  } else if (n > 5 && ends(out, n, "ion") && (out[n - 4] == 't' || out[n - 4] == 's')) {
    n -= 3;
  } else if (n > 5 && ends(out, n, "er") && !is_vowel(out[n - 3])) {
    n -= 2;
  }
  /* Undouble a final consonant left by -ing/-ed ("running" -> "run"). */
  if (n > 3 && out[n - 1] == out[n - 2] && !is_vowel(out[n - 1]) && out[n - 1] != 'l' &&
      out[n - 1] != 's' && out[n - 1] != 'z')
    n--;
  if (n > 3 && out[n - 1] == 'e') n--;
  if (n > 3 && out[n - 1] == 'y') out[n - 1] = 'i';
  out[n] = 0;
  return n;
}

/* Decodes one UTF-8 code point at s (n bytes left); returns its length
 * (1 for an invalid byte, which is then treated as a separator). */
static size_t utf8_cp(const unsigned char *s, size_t n, uint32_t *cp) {
  if (s[0] < 0x80) {
    *cp = s[0];
    return 1;
  }
  size_t len = (s[0] & 0xE0) == 0xC0   ? 2
               : (s[0] & 0xF0) == 0xE0 ? 3
               : (s[0] & 0xF8) == 0xF0 ? 4
                                       : 0;
  if (!len || len > n) {
    *cp = 0xFFFD;
    return 1;
  }
  uint32_t c = s[0] & (0x7F >> len);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) {
      *cp = 0xFFFD;
      return 1;
    }
    c = (c << 6) | (s[i] & 0x3F);
  }
  *cp = c;
  return len;
}

static int is_cjk(uint32_t c) {
  return (c >= 0x3040 && c <= 0x30FF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7AF) ||
         (c >= 0xF900 && c <= 0xFAFF);
}

/* Non-ASCII letters we keep inside words: Latin-1 letters and beyond,
 * excluding general punctuation, symbols and CJK punctuation. */
static int is_word_cp(uint32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  if (c == 0xFFFD || c < 0xC0 || c == 0xD7 || c == 0xF7) return 0;
  if (c >= 0x2000 && c <= 0x2BFF) return 0; /* punctuation, symbols, arrows */
  if (c >= 0x3000 && c <= 0x303F) return 0; /* CJK punctuation */
  if (c >= 0xFF00 && c <= 0xFF65) return 0; /* fullwidth forms */
  if (c >= 0x1F000) return 0;               /* emoji */
  return 1;
}

struct emit {
  tok_fn fn;
  void *ud;
  size_t count;
  int stop;
};

static void emit_word(struct emit *em, const char *w, size_t n) {
  if (em->stop || !n) return;
  if (n > TOK_MAX) n = TOK_MAX;
  char word[TOK_MAX + 1], stem[TOK_MAX + 1];
  memcpy(word, w, n);
  word[n] = 0;
  if (tok_is_stopword(word, n)) return;
  size_t sl = tok_stem(word, n, stem);
  em->count++;
  if (em->fn(em->ud, word, n, stem, sl)) em->stop = 1;
}

size_t tok_words(const char *text, size_t len, tok_fn fn, void *ud) {
  struct emit em = {.fn = fn, .ud = ud};
  const unsigned char *s = (const unsigned char *)text;
  char buf[TOK_MAX + 8];
  size_t bl = 0;
  int prev_lower = 0, prev_upper = 0, prev2_upper = 0, prev_digit = 0, prev_alpha = 0;
  size_t i = 0;
  while (i < len && !em.stop) {
    uint32_t cp;
    size_t cl = utf8_cp(s + i, len - i, &cp);
    if (is_cjk(cp)) {
      emit_word(&em, buf, bl);
      bl = 0;
      emit_word(&em, (const char *)s + i, cl);
      prev_lower = prev_upper = prev2_upper = prev_digit = prev_alpha = 0;
    } else if (is_word_cp(cp)) {
      int upper = cp >= 'A' && cp <= 'Z';
      int lower = (cp >= 'a' && cp <= 'z');
      int digit = cp >= '0' && cp <= '9';
      /* camelCase boundary: aB, or the last capital of ABCd ("HTTPServer");
       * and letters next to digits ("mp3player" -> mp, 3, player), so a
       * name written as one word meets the words of a request. */
      int camel = (upper && prev_lower) || (lower && prev_upper && prev2_upper && bl >= 2);
      int numeric = (digit && prev_alpha) || (!digit && prev_digit);
      if (numeric && bl) {
        emit_word(&em, buf, bl);
        bl = 0;
      } else if (camel && bl) {
        if (upper) {
          emit_word(&em, buf, bl);
          bl = 0;
        } else {
          /* move the last capital to the new word */
          char last = buf[bl - 1];
          emit_word(&em, buf, bl - 1);
          buf[0] = last;
          bl = 1;
        }
      }
      if (bl + cl <= TOK_MAX) {
        for (size_t k = 0; k < cl; k++) {
          char c = (char)s[i + k];
          buf[bl++] = upper ? (char)(c + 32) : c;
        }
      }
      prev_lower = lower;
      prev2_upper = prev_upper;
      prev_upper = upper;
      prev_digit = digit;
      prev_alpha = !digit;
    } else {
      emit_word(&em, buf, bl);
      bl = 0;
      prev_lower = prev_upper = prev2_upper = prev_digit = prev_alpha = 0;
    }
    i += cl;
  }
  emit_word(&em, buf, bl);
  return em.count;
}
