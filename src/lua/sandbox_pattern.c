/* sandbox_pattern.c - a bounded Lua 5.4 pattern matcher for the sandbox.
 *
 * Stock Lua runs string.find/match/gmatch/gsub in C that no instruction hook
 * can interrupt, so a hostile pattern such as ("a*"):rep(40) .. "b" against
 * a long subject can keep the host busy for years. This file re-implements
 * the four functions with the semantics of the Lua 5.4 manual (section
 * 6.4.1), written from the manual, with two differences that only show on
 * hostile input:
 *
 *  - every step of the matcher (one pattern item tried, one character
 *    consumed by a quantifier, one character scanned by %b, bytes compared
 *    or copied) is counted, and the count is charged against the sandbox's
 *    budget through sandbox__charge() every PM_CHARGE_EVERY steps and at the
 *    end of each call; sandbox__charge raises when the budget or the
 *    deadline is exhausted;
 *  - recursion is capped at PM_MAXDEPTH nested sub-matches ("pattern too
 *    complex"), the same limit stock Lua applies, so the C stack stays
 *    bounded.
 *
 * Results, including error messages, are those of Debian's Lua 5.4.4; the
 * unit test (tests/unit/test_pattern.c) compares both on a large corpus and
 * on random patterns. Besides the manual's classes, %z (the zero byte,
 * deprecated but still accepted by 5.4) is kept. Character classes use the C locale (ASCII) on
 * purpose, so the sandbox behaves the same whatever the host's locale.
 *
 * No global mutable state: all state lives in a struct pm_state on the C
 * stack (or in a gmatch iterator's userdata), so sandboxes can run in
 * several threads at once.
 */
#define _GNU_SOURCE /* memmem */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sandbox_impl.h"

#define PM_MAXCAPTURES 32    /* LUA_MAXCAPTURES */
#define PM_MAXDEPTH 200      /* nested sub-matches before "pattern too complex" */
#define PM_CHARGE_EVERY 1024 /* steps accumulated before calling sandbox__charge */
#define PM_BYTES_PER_STEP 8  /* bytes compared/copied/scanned that count as one step */

enum { PM_CAP_UNFINISHED = -1, PM_CAP_POSITION = -2 };

struct pm_capture {
  const char *init;
  ptrdiff_t len; /* length, or PM_CAP_UNFINISHED / PM_CAP_POSITION */
};

struct pm_state {
  lua_State *L;
  const char *src, *src_end; /* subject */
  const char *pat_end;       /* end of pattern */
  int depth;                 /* sub-matches still allowed */
  int level;                 /* captures open or closed so far */
  uint64_t steps;            /* steps not yet charged */
  struct pm_capture cap[PM_MAXCAPTURES];
};

/* ---------------------------------------------------------------- charge */

static void pm_flush(struct pm_state *ms) {
  uint64_t n = ms->steps;
  if (n) {
    ms->steps = 0;
    sandbox__charge(ms->L, n);
  }
}

static inline void pm_step(struct pm_state *ms, uint64_t n) {
  ms->steps += n;
  if (ms->steps >= PM_CHARGE_EVERY) pm_flush(ms);
}

static inline void pm_bytes(struct pm_state *ms, size_t n) {
  pm_step(ms, 1 + n / PM_BYTES_PER_STEP);
}

/* ------------------------------------------------------- character classes
 * ASCII (C locale) versions of the <ctype.h> predicates. */

static int pm_isupper(int c) {
  return c >= 'A' && c <= 'Z';
}
static int pm_islower(int c) {
  return c >= 'a' && c <= 'z';
}
static int pm_isalpha(int c) {
  return pm_isupper(c) || pm_islower(c);
}
static int pm_isdigit(int c) {
  return c >= '0' && c <= '9';
}
static int pm_isalnum(int c) {
  return pm_isalpha(c) || pm_isdigit(c);
}
static int pm_isspace(int c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}
static int pm_iscntrl(int c) {
  return c < 32 || c == 127;
}
static int pm_isgraph(int c) {
  return c > 32 && c < 127;
}
static int pm_ispunct(int c) {
  return pm_isgraph(c) && !pm_isalnum(c);
}
static int pm_isxdigit(int c) {
  return pm_isdigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Does byte c belong to class %cl? A letter that names no class, or any
 * other character, stands for itself (so %. is a literal dot). */
static int pm_class(int c, int cl) {
  int res;
  switch (pm_isupper(cl) ? cl + ('a' - 'A') : cl) {
    case 'a':
      res = pm_isalpha(c);
      break;
    case 'c':
      res = pm_iscntrl(c);
      break;
    case 'd':
      res = pm_isdigit(c);
      break;
    case 'g':
      res = pm_isgraph(c);
      break;
    case 'l':
      res = pm_islower(c);
      break;
    case 'p':
      res = pm_ispunct(c);
      break;
    case 's':
      res = pm_isspace(c);
      break;
    case 'u':
      res = pm_isupper(c);
      break;
    case 'w':
      res = pm_isalnum(c);
      break;
    case 'x':
      res = pm_isxdigit(c);
      break;
    case 'z':
      res = (c == 0);
      break; /* deprecated, still in 5.4 */
    default:
      return cl == c;
  }
  return pm_isupper(cl) ? !res : res;
}

/* Does c belong to the set [...] that starts at p ('[') and whose closing
 * ']' is at last? The set was validated by pm_item_end. */
static int pm_set(int c, const char *p, const char *last) {
  int in = 1;
  if (p[1] == '^') {
    in = 0;
    p++;
  }
  while (++p < last) {
    if (*p == '%') {
      p++;
      if (pm_class(c, (unsigned char)*p)) return in;
    } else if (p[1] == '-' && p + 2 < last) {
      if ((unsigned char)p[0] <= c && c <= (unsigned char)p[2]) return in;
      p += 2;
    } else if ((unsigned char)*p == c) {
      return in;
    }
  }
  return !in;
}

/* Returns the end of the single-character item at p (".", "x", "%x" or a
 * set), raising on a malformed one. p < pat_end. */
static const char *pm_item_end(struct pm_state *ms, const char *p) {
  const char *start = p;
  char c = *p++;
  if (c == '%') {
    if (p >= ms->pat_end) luaL_error(ms->L, "malformed pattern (ends with '%%')");
    return p + 1;
  }
  if (c == '[') {
    if (p < ms->pat_end && *p == '^') p++;
    do { /* the first character is never the closing ']' */
      if (p >= ms->pat_end) luaL_error(ms->L, "malformed pattern (missing ']')");
      c = *p++;
      if (c == '%' && p < ms->pat_end) p++; /* an escape such as %] */
    } while (p >= ms->pat_end || *p != ']');
    pm_step(ms, (uint64_t)(p - start) / PM_BYTES_PER_STEP); /* long sets cost */
    return p + 1;
  }
  return p;
}

/* Does the item [p, ep) match the character at s? */
static int pm_single(struct pm_state *ms, const char *s, const char *p, const char *ep) {
  if (s >= ms->src_end) return 0;
  int c = (unsigned char)*s;
  switch (*p) {
    case '.':
      return 1;
    case '%':
      return pm_class(c, (unsigned char)p[1]);
    case '[':
      pm_step(ms, (uint64_t)(ep - p) / PM_BYTES_PER_STEP); /* long sets cost */
      return pm_set(c, p, ep - 1);
    default:
      return (unsigned char)*p == c;
  }
}

/* ------------------------------------------------------------- matching */

static const char *pm_match(struct pm_state *ms, const char *s, const char *p);

/* %bxy at p (pointing at x). */
static const char *pm_balance(struct pm_state *ms, const char *s, const char *p) {
  if (p >= ms->pat_end - 1) luaL_error(ms->L, "malformed pattern (missing arguments to '%%b')");
  if (s >= ms->src_end || *s != p[0]) return NULL;
  char open = p[0], close = p[1];
  int depth = 1;
  while (++s < ms->src_end) {
    pm_step(ms, 1);
    if (*s == close) {
      if (--depth == 0) return s + 1;
    } else if (*s == open) {
      depth++;
    }
  }
  return NULL;
}

/* Back-reference %1-%9 (digit d). */
static const char *pm_backref(struct pm_state *ms, const char *s, int d) {
  int l = d - '1';
  if (l < 0 || l >= ms->level || ms->cap[l].len == PM_CAP_UNFINISHED)
    luaL_error(ms->L, "invalid capture index %%%d", l + 1);
  ptrdiff_t len = ms->cap[l].len;
  if (len == PM_CAP_POSITION) return NULL; /* a position never matches text */
  pm_bytes(ms, (size_t)len);
  if (ms->src_end - s >= len && memcmp(ms->cap[l].init, s, (size_t)len) == 0) return s + len;
  return NULL;
}

/* Greedy: as many repetitions of the item as possible, then back off. */
static const char *pm_max_expand(struct pm_state *ms, const char *s, const char *p,
                                 const char *ep) {
  ptrdiff_t i = 0;
  while (pm_single(ms, s + i, p, ep)) {
    i++;
    pm_step(ms, 1);
  }
  for (; i >= 0; i--) {
    const char *r = pm_match(ms, s + i, ep + 1);
    if (r) return r;
  }
  return NULL;
}

/* Lazy: as few repetitions as possible, adding one at a time. */
static const char *pm_min_expand(struct pm_state *ms, const char *s, const char *p,
                                 const char *ep) {
  for (;;) {
    const char *r = pm_match(ms, s, ep + 1);
    if (r) return r;
    if (!pm_single(ms, s, p, ep)) return NULL;
    s++;
  }
}

static const char *pm_open_capture(struct pm_state *ms, const char *s, const char *p,
                                   ptrdiff_t what) {
  if (ms->level >= PM_MAXCAPTURES) luaL_error(ms->L, "too many captures");
  ms->cap[ms->level].init = s;
  ms->cap[ms->level].len = what;
  ms->level++;
  const char *r = pm_match(ms, s, p);
  if (!r) ms->level--; /* undo */
  return r;
}

static const char *pm_close_capture(struct pm_state *ms, const char *s, const char *p) {
  int l = ms->level - 1;
  while (l >= 0 && ms->cap[l].len != PM_CAP_UNFINISHED) l--;
  pm_step(ms, (uint64_t)(ms->level - l));
  if (l < 0) luaL_error(ms->L, "invalid pattern capture");
  ms->cap[l].len = s - ms->cap[l].init;
  const char *r = pm_match(ms, s, p);
  if (!r) ms->cap[l].len = PM_CAP_UNFINISHED; /* undo */
  return r;
}

/* Matches the pattern from p against the subject from s. Returns the end of
 * the match or NULL. Straight-line items loop here; quantifiers and
 * captures recurse, at most PM_MAXDEPTH deep. */
static const char *pm_match(struct pm_state *ms, const char *s, const char *p) {
  if (ms->depth-- == 0) luaL_error(ms->L, "pattern too complex");
  for (;;) {
    pm_step(ms, 1);
    if (p == ms->pat_end) break; /* whole pattern matched */
    switch (*p) {
      case '(':
        if (p + 1 < ms->pat_end && p[1] == ')')
          s = pm_open_capture(ms, s, p + 2, PM_CAP_POSITION);
        else
          s = pm_open_capture(ms, s, p + 1, PM_CAP_UNFINISHED);
        goto done;
      case ')':
        s = pm_close_capture(ms, s, p + 1);
        goto done;
      case '$':
        if (p + 1 == ms->pat_end) { /* anchor only as the last character */
          if (s != ms->src_end) s = NULL;
          goto done;
        }
        break;
      case '%':
        if (p + 1 < ms->pat_end) {
          int n = (unsigned char)p[1];
          if (n == 'b') {
            s = pm_balance(ms, s, p + 2);
            if (!s) goto done;
            p += 4;
            continue;
          }
          if (n == 'f') {
            p += 2;
            if (p >= ms->pat_end || *p != '[')
              luaL_error(ms->L, "missing '[' after '%%f' in pattern");
            const char *ep = pm_item_end(ms, p);
            int prev = (s == ms->src) ? 0 : (unsigned char)s[-1];
            int cur = (s < ms->src_end) ? (unsigned char)*s : 0;
            pm_step(ms, (uint64_t)(ep - p) / (PM_BYTES_PER_STEP / 2));
            if (!pm_set(prev, p, ep - 1) && pm_set(cur, p, ep - 1)) {
              p = ep;
              continue;
            }
            s = NULL;
            goto done;
          }
          if (pm_isdigit(n)) {
            s = pm_backref(ms, s, n);
            if (!s) goto done;
            p += 2;
            continue;
          }
        }
        break;
      default:
        break;
    }
    /* a single-character item, maybe followed by a quantifier */
    const char *ep = pm_item_end(ms, p);
    int q = (ep < ms->pat_end) ? *ep : 0;
    if (!pm_single(ms, s, p, ep)) {
      if (q == '*' || q == '?' || q == '-') { /* zero repetitions are fine */
        p = ep + 1;
        continue;
      }
      s = NULL;
      goto done;
    }
    switch (q) {
      case '?': {
        const char *r = pm_match(ms, s + 1, ep + 1);
        if (r) {
          s = r;
          goto done;
        }
        p = ep + 1;
        continue;
      }
      case '+':
        s = pm_max_expand(ms, s + 1, p, ep);
        goto done;
      case '*':
        s = pm_max_expand(ms, s, p, ep);
        goto done;
      case '-':
        s = pm_min_expand(ms, s, p, ep);
        goto done;
      default:
        s++;
        p = ep;
        continue;
    }
  }
done:
  ms->depth++;
  return s;
}

static void pm_init(struct pm_state *ms, lua_State *L, const char *s, size_t ls, const char *p,
                    size_t lp) {
  ms->L = L;
  ms->src = s;
  ms->src_end = s + ls;
  ms->pat_end = p + lp;
  ms->steps = 0;
  ms->level = 0;
  ms->depth = PM_MAXDEPTH;
}

/* Before each attempt at a new subject position. */
static void pm_reset(struct pm_state *ms) {
  ms->level = 0;
  ms->depth = PM_MAXDEPTH;
}

/* ------------------------------------------------------------- captures */

/* Finds capture i for the match [s, e): sets *cs and returns its length,
 * or PM_CAP_POSITION (with *cs at the position). When there are no
 * captures, index 0 is the whole match. Raises on a bad index. */
static ptrdiff_t pm_get_capture(struct pm_state *ms, int i, const char *s, const char *e,
                                const char **cs) {
  if (i >= ms->level) {
    if (i != 0) luaL_error(ms->L, "invalid capture index %%%d", i + 1);
    *cs = s;
    return e - s;
  }
  ptrdiff_t l = ms->cap[i].len;
  if (l == PM_CAP_UNFINISHED) luaL_error(ms->L, "unfinished capture");
  *cs = ms->cap[i].init;
  return l;
}

/* Pushes capture i (see pm_get_capture). [-0, +1, e] */
static void pm_push_capture(struct pm_state *ms, int i, const char *s, const char *e) {
  const char *cs;
  ptrdiff_t l = pm_get_capture(ms, i, s, e, &cs);
  if (l == PM_CAP_POSITION)
    lua_pushinteger(ms->L, (lua_Integer)(cs - ms->src) + 1);
  else
    lua_pushlstring(ms->L, cs, (size_t)l);
}

/* Pushes all captures (or the whole match if none and s != NULL); returns
 * how many. [-0, +n, e] */
static int pm_push_captures(struct pm_state *ms, const char *s, const char *e) {
  int n = (ms->level == 0 && s) ? 1 : ms->level;
  luaL_checkstack(ms->L, n, "too many captures");
  for (int i = 0; i < n; i++) pm_push_capture(ms, i, s, e);
  return n;
}

/* ------------------------------------------------------- the functions */

/* Turns a possibly negative 1-based start position into 1..len+1 or more
 * (string.find's rules: 0 and too-negative values mean 1). */
static size_t pm_posrelat(lua_Integer pos, size_t len) {
  if (pos > 0) return (size_t)pos;
  if (pos == 0) return 1;
  if (pos < -(lua_Integer)len) return 1;
  return len + (size_t)pos + 1;
}

/* Does the pattern need the matcher? (Charged: it scans the pattern.) */
static int pm_has_specials(lua_State *L, const char *p, size_t lp) {
  if (lp >= 64) sandbox__charge(L, lp / PM_BYTES_PER_STEP);
  for (size_t i = 0; i < lp; i++) {
    switch (p[i]) {
      case '^':
      case '$':
      case '*':
      case '+':
      case '?':
      case '.':
      case '(':
      case '[':
      case '%':
      case '-':
        return 1;
      default:
        break;
    }
  }
  return 0;
}

/* Plain substring search. memchr for the first byte then memcmp is the
 * fastest on ordinary text, but quadratic on inputs like ("a"):rep(1e6)
 * and ("a"):rep(1e5) .. "b"; once the comparing costs more than the bytes
 * skipped, the rest goes to glibc's memmem, which is linear. Everything is
 * charged by the bytes scanned and compared. */
static const char *pm_plain_find(lua_State *L, const char *h, size_t lh, const char *n, size_t ln) {
  if (ln == 0) return h;
  if (ln > lh) return NULL;
  const char *end = h + (lh - ln) + 1; /* candidates start before end */
  const char *cur = h, *found = NULL;
  uint64_t work = 0, pending = 0; /* bytes scanned or compared; not yet charged */
  for (;;) {
    const char *c = memchr(cur, (unsigned char)n[0], (size_t)(end - cur));
    uint64_t w = (uint64_t)((c ? c : end) - cur) + 1 + (c ? ln : 0);
    work += w;
    pending += w;
    if (!c) break;
    if (memcmp(c + 1, n + 1, ln - 1) == 0) {
      found = c;
      break;
    }
    cur = c + 1;
    if (work > 4 * (uint64_t)(cur - h) + 4096) { /* comparing dominates: go linear */
      pending += (uint64_t)(end - cur) + ln;
      found = memmem(cur, (size_t)(end - cur) + ln - 1, n, ln);
      break;
    }
    if (pending >= PM_CHARGE_EVERY * PM_BYTES_PER_STEP) {
      sandbox__charge(L, pending / PM_BYTES_PER_STEP);
      pending %= PM_BYTES_PER_STEP;
    }
  }
  sandbox__charge(L, 1 + pending / PM_BYTES_PER_STEP);
  return found;
}

/* string.find (find = 1) and string.match (find = 0). */
static int pm_find_aux(lua_State *L, int find) {
  size_t ls, lp;
  const char *s = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  size_t init = pm_posrelat(luaL_optinteger(L, 3, 1), ls);
  if (init > ls + 1) { /* the start is past the end: no match possible */
    luaL_pushfail(L);
    return 1;
  }
  if (find && (lua_toboolean(L, 4) || !pm_has_specials(L, p, lp))) {
    const char *f = pm_plain_find(L, s + init - 1, ls - (init - 1), p, lp);
    if (f) {
      lua_pushinteger(L, (lua_Integer)(f - s) + 1);
      lua_pushinteger(L, (lua_Integer)(f - s) + (lua_Integer)lp);
      return 2;
    }
  } else {
    struct pm_state ms;
    int anchor = (lp > 0 && *p == '^');
    if (anchor) {
      p++;
      lp--;
    }
    pm_init(&ms, L, s, ls, p, lp);
    const char *s1 = s + init - 1;
    do {
      pm_reset(&ms);
      const char *e = pm_match(&ms, s1, p);
      if (e) {
        pm_flush(&ms);
        if (find) {
          lua_pushinteger(L, (lua_Integer)(s1 - s) + 1);
          lua_pushinteger(L, (lua_Integer)(e - s));
          return pm_push_captures(&ms, NULL, NULL) + 2;
        }
        return pm_push_captures(&ms, s1, e);
      }
    } while (s1++ < ms.src_end && !anchor);
    pm_flush(&ms);
  }
  luaL_pushfail(L);
  return 1;
}

/* string.find(s, pattern [, init [, plain]]) [-0, +(1|2+n), e] */
static int l_pattern_find(lua_State *L) {
  return pm_find_aux(L, 1);
}

/* string.match(s, pattern [, init]) [-0, +(1|n), e] */
static int l_pattern_match(lua_State *L) {
  return pm_find_aux(L, 0);
}

/* gmatch iterator state, kept in a userdata upvalue. Offsets, not pointers:
 * the subject and pattern are the closure's other upvalues. */
struct pm_gmatch {
  size_t pos;       /* where the next search starts */
  size_t lastmatch; /* end of the last match, or SIZE_MAX */
};

/* The iterator returned by gmatch. [-0, +n, e] */
static int l_pattern_gmatch_next(lua_State *L) {
  size_t ls, lp;
  const char *s = lua_tolstring(L, lua_upvalueindex(1), &ls);
  const char *p = lua_tolstring(L, lua_upvalueindex(2), &lp);
  struct pm_gmatch *gm = lua_touserdata(L, lua_upvalueindex(3));
  struct pm_state ms;
  pm_init(&ms, L, s, ls, p, lp);
  for (size_t pos = gm->pos; pos <= ls; pos++) { /* gm->pos may be ls + 1: done */
    pm_reset(&ms);
    const char *e = pm_match(&ms, s + pos, p);
    if (e && (size_t)(e - s) != gm->lastmatch) {
      gm->pos = gm->lastmatch = (size_t)(e - s);
      pm_flush(&ms);
      return pm_push_captures(&ms, s + pos, e);
    }
  }
  pm_flush(&ms);
  return 0;
}

/* string.gmatch(s, pattern [, init]) [-0, +1, e]. As in Lua 5.4, a '^' at
 * the start is an ordinary character here, and an empty match right where
 * the previous match ended is skipped. */
static int l_pattern_gmatch(lua_State *L) {
  size_t ls, lp;
  luaL_checklstring(L, 1, &ls);
  luaL_checklstring(L, 2, &lp);
  size_t pos = pm_posrelat(luaL_optinteger(L, 3, 1), ls) - 1;
  if (pos > ls) pos = ls + 1; /* past the end: no match at all */
  lua_settop(L, 2);
  struct pm_gmatch *gm = lua_newuserdatauv(L, sizeof *gm, 0);
  gm->pos = pos;
  gm->lastmatch = SIZE_MAX;
  lua_pushcclosure(L, l_pattern_gmatch_next, 3);
  return 1;
}

/* Appends the replacement string (argument 3) for the match [s, e). */
static void pm_add_string(struct pm_state *ms, luaL_Buffer *b, const char *s, const char *e) {
  lua_State *L = ms->L;
  size_t l;
  const char *r = lua_tolstring(L, 3, &l);
  const char *end = r + l;
  for (;;) {
    const char *q = memchr(r, '%', (size_t)(end - r));
    if (!q) break;
    luaL_addlstring(b, r, (size_t)(q - r));
    pm_bytes(ms, (size_t)(q - r));
    q++; /* skip the '%' */
    int c = (q < end) ? (unsigned char)*q : 0;
    if (c == '%') {
      luaL_addchar(b, '%');
    } else if (pm_isdigit(c)) {
      const char *cs = s; /* %0 is the whole match */
      ptrdiff_t cl = (c == '0') ? e - s : pm_get_capture(ms, c - '1', s, e, &cs);
      if (cl == PM_CAP_POSITION) {
        lua_pushinteger(L, (lua_Integer)(cs - ms->src) + 1);
        luaL_addvalue(b); /* added as its decimal text */
      } else {
        luaL_addlstring(b, cs, (size_t)cl);
        pm_bytes(ms, (size_t)cl);
      }
    } else {
      luaL_error(L, "invalid use of '%c' in replacement string", '%');
    }
    r = q + 1;
  }
  luaL_addlstring(b, r, (size_t)(end - r));
  pm_bytes(ms, (size_t)(end - r));
}

/* Appends the replacement for the match [s, e); returns whether the text
 * changed (false or nil from a table or function keeps the original). */
static int pm_add_value(struct pm_state *ms, luaL_Buffer *b, const char *s, const char *e, int tr) {
  lua_State *L = ms->L;
  if (tr == LUA_TFUNCTION) {
    lua_pushvalue(L, 3);
    int n = pm_push_captures(ms, s, e);
    pm_flush(ms); /* charge before running the script's function */
    lua_call(L, n, 1);
  } else if (tr == LUA_TTABLE) {
    pm_push_capture(ms, 0, s, e);
    lua_gettable(L, 3);
  } else {
    pm_add_string(ms, b, s, e);
    return 1;
  }
  if (!lua_toboolean(L, -1)) {
    lua_pop(L, 1);
    luaL_addlstring(b, s, (size_t)(e - s));
    pm_bytes(ms, (size_t)(e - s));
    return 0;
  }
  if (!lua_isstring(L, -1))
    return luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
  size_t l;
  lua_tolstring(L, -1, &l);
  pm_bytes(ms, l);
  luaL_addvalue(b);
  return 1;
}

/* string.gsub(s, pattern, repl [, n]) [-0, +2, e] */
static int l_pattern_gsub(lua_State *L) {
  size_t ls, lp;
  const char *src = luaL_checklstring(L, 1, &ls);
  const char *p = luaL_checklstring(L, 2, &lp);
  int tr = lua_type(L, 3);
  lua_Integer max_n = luaL_optinteger(L, 4, (lua_Integer)ls + 1);
  luaL_argexpected(
      L, tr == LUA_TNUMBER || tr == LUA_TSTRING || tr == LUA_TFUNCTION || tr == LUA_TTABLE, 3,
      "string/function/table");
  int anchor = (lp > 0 && *p == '^');
  if (anchor) {
    p++;
    lp--;
  }
  struct pm_state ms;
  pm_init(&ms, L, src, ls, p, lp);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  const char *lastmatch = NULL;
  lua_Integer n = 0;
  int changed = 0;
  while (n < max_n) {
    pm_reset(&ms);
    const char *e = pm_match(&ms, src, p);
    if (e && e != lastmatch) {
      n++;
      changed |= pm_add_value(&ms, &b, src, e, tr);
      src = lastmatch = e;
    } else if (src < ms.src_end) {
      luaL_addchar(&b, *src++);
    } else {
      break;
    }
    if (anchor) break;
  }
  if (!changed) {
    lua_pushvalue(L, 1); /* the subject, unchanged */
  } else {
    luaL_addlstring(&b, src, (size_t)(ms.src_end - src));
    pm_bytes(&ms, (size_t)(ms.src_end - src));
    luaL_pushresult(&b);
  }
  pm_flush(&ms);
  lua_pushinteger(L, n);
  return 2;
}

static const luaL_Reg pm_funcs[] = {
    {"find", l_pattern_find},
    {"match", l_pattern_match},
    {"gmatch", l_pattern_gmatch},
    {"gsub", l_pattern_gsub},
    {NULL, NULL},
};

/* Replaces find, match, gmatch and gsub in the table at idx (raw sets, so a
 * protective metatable on the table does not interfere). [-0, +0, -] */
void sandbox__open_pattern(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  for (const luaL_Reg *r = pm_funcs; r->name; r++) {
    lua_pushstring(L, r->name);
    lua_pushcfunction(L, r->func);
    lua_rawset(L, idx);
  }
}
