/* rules.c - see rules.h. */
#define _GNU_SOURCE /* memmem */
#include "rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "call.h"
#include "json.h"
#include "util.h"

/* ===================== a bounded Lua pattern matcher ======================
 *
 * Implements the Lua 5.4 pattern language (character classes, sets,
 * quantifiers * + - ?, anchors, captures and back references, %b, %f) with
 * two bounds the stock matcher lacks: a step budget, checked on every
 * recursive step and every repetition, and a recursion limit. Rules only
 * need "is it found", so captures are tracked just far enough for back
 * references to work.
 */

#define PM_MAXCAPS 32
#define PM_MAXDEPTH 200
#define CAP_OPEN (-1)
#define CAP_POS (-2)

struct pm {
  const char *src, *src_end, *pat_end;
  long steps, max_steps;
  int depth, level, failed; /* failed: ERR_LIMIT or ERR_INVALID */
  struct {
    const char *init;
    long len;
  } cap[PM_MAXCAPS];
  struct err *e;
};

static int pm_fail(struct pm *m, int rc, const char *msg) {
  if (!m->failed) {
    m->failed = rc;
    err_set(m->e, rc, rc == ERR_LIMIT ? "limit_pattern" : "invalid_pattern", "%s", msg);
  }
  return 0;
}

static int pm_step(struct pm *m) {
  if (m->failed) return 0;
  if (++m->steps > m->max_steps) {
    pm_fail(m, ERR_LIMIT, "pattern needs too many steps (over the match budget)");
    return 0;
  }
  return 1;
}

static int class_match(int c, int cl) {
  int r;
  switch (cl | 0x20) { /* lower case */
    case 'a':
      r = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      break;
    case 'c':
      r = c < 32 || c == 127;
      break;
    case 'd':
      r = c >= '0' && c <= '9';
      break;
    case 'g':
      r = c > 32 && c < 127;
      break;
    case 'l':
      r = c >= 'a' && c <= 'z';
      break;
    case 'p':
      r = (c > 32 && c < 48) || (c > 57 && c < 65) || (c > 90 && c < 97) || (c > 122 && c < 127);
      break;
    case 's':
      r = c == ' ' || (c >= '\t' && c <= '\r');
      break;
    case 'u':
      r = c >= 'A' && c <= 'Z';
      break;
    case 'w':
      r = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
      break;
    case 'x':
      r = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      break;
    default:
      return cl == c;
  }
  if (cl >= 'A' && cl <= 'Z') r = !r;
  return r;
}

/* The end of the single-character class starting at p. */
static const char *class_end(struct pm *m, const char *p) {
  char c = *p++;
  if (c == '%') {
    if (p >= m->pat_end) return pm_fail(m, ERR_INVALID, "malformed pattern (ends with '%')"), NULL;
    return p + 1;
  }
  if (c == '[') {
    if (p < m->pat_end && *p == '^') p++;
    do { /* the first character may be ']' */
      if (p >= m->pat_end) return pm_fail(m, ERR_INVALID, "malformed pattern (missing ']')"), NULL;
      c = *p++;
      if (c == '%') {
        if (p >= m->pat_end)
          return pm_fail(m, ERR_INVALID, "malformed pattern (ends with '%')"), NULL;
        p++;
      }
    } while (p >= m->pat_end || *p != ']');
    return p + 1;
  }
  return p;
}

/* p at '[', ec at the closing ']'. */
static int set_match(int c, const char *p, const char *ec) {
  int sig = 1;
  p++;
  if (*p == '^') {
    sig = 0;
    p++;
  }
  while (p < ec) {
    if (*p == '%') {
      p++;
      if (class_match(c, (unsigned char)*p)) return sig;
      p++;
    } else if (p[1] == '-' && p + 2 < ec) {
      if ((unsigned char)p[0] <= c && c <= (unsigned char)p[2]) return sig;
      p += 3;
    } else {
      if ((unsigned char)*p == c) return sig;
      p++;
    }
  }
  return !sig;
}

static int single_match(struct pm *m, const char *s, const char *p, const char *ep) {
  if (s >= m->src_end) return 0;
  int c = (unsigned char)*s;
  switch (*p) {
    case '.':
      return 1;
    case '%':
      return class_match(c, (unsigned char)p[1]);
    case '[':
      return set_match(c, p, ep - 1);
    default:
      return (unsigned char)*p == c;
  }
}

static const char *do_match(struct pm *m, const char *s, const char *p);

static const char *max_expand(struct pm *m, const char *s, const char *p, const char *ep) {
  long i = 0;
  while (single_match(m, s + i, p, ep)) {
    if (!pm_step(m)) return NULL;
    i++;
  }
  while (i >= 0) {
    const char *r = do_match(m, s + i, ep + 1);
    if (r || m->failed) return r;
    i--;
  }
  return NULL;
}

static const char *min_expand(struct pm *m, const char *s, const char *p, const char *ep) {
  for (;;) {
    const char *r = do_match(m, s, ep + 1);
    if (r || m->failed) return r;
    if (single_match(m, s, p, ep) && pm_step(m))
      s++;
    else
      return NULL;
  }
}

static const char *do_match(struct pm *m, const char *s, const char *p) {
  if (!pm_step(m)) return NULL;
  if (++m->depth > PM_MAXDEPTH) {
    m->depth--;
    pm_fail(m, ERR_LIMIT, "pattern is too complex (recursion limit)");
    return NULL;
  }
  const char *r = NULL;
  for (;;) {
    if (m->failed) {
      r = NULL;
      break;
    }
    if (p >= m->pat_end) {
      r = s;
      break;
    }
    if (*p == '(') {
      if (m->level >= PM_MAXCAPS) {
        pm_fail(m, ERR_INVALID, "pattern has too many captures");
        break;
      }
      int l = m->level++;
      m->cap[l].init = s;
      m->cap[l].len = p + 1 < m->pat_end && p[1] == ')' ? CAP_POS : CAP_OPEN;
      r = do_match(m, s, m->cap[l].len == CAP_POS ? p + 2 : p + 1);
      if (!r) m->level--;
      break;
    }
    if (*p == ')') {
      int l = m->level - 1;
      while (l >= 0 && m->cap[l].len != CAP_OPEN) l--;
      if (l < 0) {
        pm_fail(m, ERR_INVALID, "invalid pattern capture (unbalanced ')')");
        break;
      }
      m->cap[l].len = (long)(s - m->cap[l].init);
      r = do_match(m, s, p + 1);
      if (!r) m->cap[l].len = CAP_OPEN;
      break;
    }
    if (*p == '$' && p + 1 == m->pat_end) {
      r = s == m->src_end ? s : NULL;
      break;
    }
    if (*p == '%' && p + 1 < m->pat_end && p[1] == 'b') {
      if (p + 3 >= m->pat_end) {
        pm_fail(m, ERR_INVALID, "malformed pattern (missing arguments to '%b')");
        break;
      }
      if (s >= m->src_end || *s != p[2]) {
        r = NULL;
        break;
      }
      int depth = 1;
      const char *q = s;
      while (++q < m->src_end) {
        if (!pm_step(m)) break;
        if (*q == p[3]) {
          if (--depth == 0) break;
        } else if (*q == p[2]) {
          depth++;
        }
      }
      if (m->failed || q >= m->src_end) {
        r = NULL;
        break;
      }
      s = q + 1;
      p += 4;
      continue;
    }
    if (*p == '%' && p + 1 < m->pat_end && p[1] == 'f') {
      p += 2;
      if (p >= m->pat_end || *p != '[') {
        pm_fail(m, ERR_INVALID, "missing '[' after '%f' in pattern");
        break;
      }
      const char *ep = class_end(m, p);
      if (!ep) break;
      int prev = s == m->src ? 0 : (unsigned char)s[-1];
      int cur = s < m->src_end ? (unsigned char)*s : 0;
      if (!set_match(prev, p, ep - 1) && set_match(cur, p, ep - 1)) {
        p = ep;
        continue;
      }
      r = NULL;
      break;
    }
    if (*p == '%' && p + 1 < m->pat_end && p[1] >= '0' && p[1] <= '9') {
      int l = p[1] - '1';
      if (l < 0 || l >= m->level || m->cap[l].len == CAP_OPEN) {
        pm_fail(m, ERR_INVALID, "invalid capture index in pattern");
        break;
      }
      long len = m->cap[l].len;
      if (len >= 0 && m->src_end - s >= len && memcmp(m->cap[l].init, s, (size_t)len) == 0) {
        s += len;
        p += 2;
        continue;
      }
      r = NULL;
      break;
    }
    /* A single-character class, maybe with a quantifier. */
    const char *ep = class_end(m, p);
    if (!ep) break;
    int ok = single_match(m, s, p, ep);
    char q = ep < m->pat_end ? *ep : 0;
    if (q == '?') {
      if (ok && (r = do_match(m, s + 1, ep + 1))) break;
      if (m->failed) break;
      p = ep + 1;
      continue;
    }
    if (q == '+') {
      r = ok ? max_expand(m, s + 1, p, ep) : NULL;
      break;
    }
    if (q == '*') {
      r = max_expand(m, s, p, ep);
      break;
    }
    if (q == '-') {
      r = min_expand(m, s, p, ep);
      break;
    }
    if (!ok) {
      r = NULL;
      break;
    }
    s++;
    p = ep;
  }
  m->depth--;
  return m->failed ? NULL : r;
}

/* A syntax pass, so bad patterns fail at config load rather than at the
 * first call they happen to reach. */
/* As in string.find: a pattern with none of these is a plain substring. */
static int no_specials(const char *pat, size_t plen) {
  for (size_t i = 0; i < plen; i++)
    if (strchr("^$*+?.([%-", pat[i]) && pat[i]) return 0;
  return 1;
}

static int pattern_check(const char *pat, size_t plen, struct err *e) {
  if (no_specials(pat, plen)) return 0;
  struct pm m = {.pat_end = pat + plen, .e = e};
  const char *p = pat;
  int open = 0, closed = 0;
  if (p < m.pat_end && *p == '^') p++;
  while (p < m.pat_end) {
    if (*p == '(') {
      if (p + 1 < m.pat_end && p[1] == ')') {
        closed++;
        p += 2;
      } else {
        open++;
        p++;
      }
      if (open + closed > PM_MAXCAPS)
        return err_set(e, ERR_INVALID, "invalid_pattern", "too many captures");
      continue;
    }
    if (*p == ')') {
      if (open == 0) return err_set(e, ERR_INVALID, "invalid_pattern", "unbalanced ')'");
      open--;
      closed++;
      p++;
      continue;
    }
    if (*p == '%' && p + 1 < m.pat_end && p[1] == 'b') {
      if (p + 3 >= m.pat_end)
        return err_set(e, ERR_INVALID, "invalid_pattern", "missing arguments to '%%b'");
      p += 4;
      continue;
    }
    if (*p == '%' && p + 1 < m.pat_end && p[1] == 'f') {
      p += 2;
      if (p >= m.pat_end || *p != '[')
        return err_set(e, ERR_INVALID, "invalid_pattern", "missing '[' after '%%f'");
    } else if (*p == '%' && p + 1 < m.pat_end && p[1] >= '0' && p[1] <= '9') {
      if (p[1] == '0' || p[1] - '0' > closed)
        return err_set(e, ERR_INVALID, "invalid_pattern",
                       "back reference %%%c names no closed capture", p[1]);
      p += 2;
      continue;
    }
    const char *ep = class_end(&m, p);
    if (!ep) return m.failed;
    p = ep;
    if (p < m.pat_end && (*p == '?' || *p == '*' || *p == '+' || *p == '-')) p++;
  }
  if (open) return err_set(e, ERR_INVALID, "invalid_pattern", "unfinished capture");
  return 0;
}

int rules_pattern_find(const char *pat, size_t plen, const char *s, size_t slen, long max_steps,
                       struct err *e) {
  if (no_specials(pat, plen)) {
    if (plen == 0) return 1;
    return slen >= plen && memmem(s, slen, pat, plen) != NULL;
  }
  int rc = pattern_check(pat, plen, e);
  if (rc) return rc;
  struct pm m = {
      .src = s, .src_end = s + slen, .pat_end = pat + plen, .max_steps = max_steps, .e = e};
  const char *p = pat;
  int anchor = plen > 0 && *p == '^';
  if (anchor) p++;
  const char *s1 = s;
  do {
    m.level = 0;
    m.depth = 0;
    if (do_match(&m, s1, p)) return 1;
    if (m.failed) return m.failed;
  } while (s1++ < m.src_end && !anchor);
  return 0;
}

/* ============================== glob ===================================== */

int rules_glob(const char *pat, const char *s) {
  const char *star = NULL, *back = NULL;
  while (*s) {
    if (*pat == '*') {
      star = ++pat;
      back = s;
    } else if (*pat == '?' || *pat == *s) {
      pat++;
      s++;
    } else if (star) {
      pat = star;
      s = ++back;
    } else {
      return 0;
    }
  }
  while (*pat == '*') pat++;
  return *pat == 0;
}

/* ============================== rules ==================================== */

#define RULE_STEPS 100000

struct rule_arg {
  char *path;    /* dotted path into the arguments */
  char *pattern; /* Lua pattern */
};

struct rule {
  char *tool, *caller, *name, *reason;
  struct rule_arg *args;
  size_t nargs;
  enum rule_action action;
};

struct ruleset {
  struct rule *v;
  size_t n;
};

void rules_free(struct ruleset *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n; i++) {
    struct rule *x = &r->v[i];
    free(x->tool);
    free(x->caller);
    free(x->name);
    free(x->reason);
    for (size_t k = 0; k < x->nargs; k++) {
      free(x->args[k].path);
      free(x->args[k].pattern);
    }
    free(x->args);
  }
  free(r->v);
  free(r);
}

size_t rules_count(const struct ruleset *r) {
  return r ? r->n : 0;
}

static int rule_string(const cJSON *o, const char *key, char **out, const char *file, int idx,
                       struct err *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v) return 0;
  if (!cJSON_IsString(v))
    return err_set(e, ERR_INVALID, "config", "%s: rules[%d].%s must be a string", file, idx, key);
  *out = xstrdup(v->valuestring);
  return 0;
}

int rules_parse(const cJSON *rules, const char *file, struct ruleset **out, struct err *e) {
  struct ruleset *r = xcalloc(1, sizeof *r);
  *out = NULL;
  if (!file || !*file) file = "luagent.lua";
  if (!rules || cJSON_IsNull(rules)) {
    *out = r;
    return 0;
  }
  /* An empty Lua table converts to {} or []. */
  if (cJSON_IsObject(rules) && !rules->child) {
    *out = r;
    return 0;
  }
  if (!cJSON_IsArray(rules)) {
    rules_free(r);
    return err_set(e, ERR_INVALID, "config", "%s: rules must be a list of tables", file);
  }
  int n = cJSON_GetArraySize(rules);
  r->v = xcalloc((size_t)n, sizeof *r->v);
  int idx = 0;
  for (const cJSON *o = rules->child; o; o = o->next) {
    idx++;
    struct rule *x = &r->v[r->n++];
    x->action = RULE_NONE;
    if (!cJSON_IsObject(o)) {
      err_set(e, ERR_INVALID, "config", "%s: rules[%d] must be a table", file, idx);
      goto fail;
    }
    for (const cJSON *f = o->child; f; f = f->next) {
      static const char *const known[] = {"tool",   "caller", "name", "args",
                                          "action", "reason", NULL};
      int ok = 0;
      for (int k = 0; known[k]; k++) ok |= !strcmp(f->string, known[k]);
      if (!ok) {
        err_set(e, ERR_INVALID, "config",
                "%s: rules[%d]: unknown field '%s' (expected tool, caller, name, args, action, "
                "reason)",
                file, idx, f->string);
        goto fail;
      }
    }
    char *action = NULL;
    if (rule_string(o, "tool", &x->tool, file, idx, e) ||
        rule_string(o, "caller", &x->caller, file, idx, e) ||
        rule_string(o, "name", &x->name, file, idx, e) ||
        rule_string(o, "reason", &x->reason, file, idx, e) ||
        rule_string(o, "action", &action, file, idx, e))
      goto fail;
    if (!action) {
      err_set(e, ERR_INVALID, "config",
              "%s: rules[%d]: missing action (\"allow\", \"escalate\" or \"deny\")", file, idx);
      goto fail;
    }
    if (!strcmp(action, "allow"))
      x->action = RULE_ALLOW;
    else if (!strcmp(action, "escalate"))
      x->action = RULE_ESCALATE;
    else if (!strcmp(action, "deny"))
      x->action = RULE_DENY;
    if (x->action == RULE_NONE) {
      err_set(e, ERR_INVALID, "config",
              "%s: rules[%d]: action '%s' is not \"allow\", \"escalate\" or \"deny\"", file, idx,
              action);
      free(action);
      goto fail;
    }
    free(action);
    if (x->caller && strcmp(x->caller, "*") != 0) {
      enum caller_kind kind;
      if (caller_kind_parse(x->caller, &kind)) {
        err_set(e, ERR_INVALID, "config",
                "%s: rules[%d]: caller '%s' is not one of operator, model, automation, skill, script, mcp, *",
                file, idx, x->caller);
        goto fail;
      }
    }
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "args");
    if (args && !(cJSON_IsObject(args) || (cJSON_IsArray(args) && !args->child))) {
      err_set(e, ERR_INVALID, "config",
              "%s: rules[%d].args must be a table of argument = \"Lua pattern\"", file, idx);
      goto fail;
    }
    if (args && cJSON_IsObject(args)) {
      x->args = xcalloc((size_t)cJSON_GetArraySize(args) + 1, sizeof *x->args);
      for (const cJSON *a = args->child; a; a = a->next) {
        if (!cJSON_IsString(a)) {
          err_set(e, ERR_INVALID, "config", "%s: rules[%d].args.%s must be a Lua pattern string",
                  file, idx, a->string);
          goto fail;
        }
        struct err pe = {0};
        if (pattern_check(a->valuestring, strlen(a->valuestring), &pe)) {
          err_set(e, ERR_INVALID, "config", "%s: rules[%d].args.%s: bad pattern '%s': %s", file,
                  idx, a->string, a->valuestring, pe.msg);
          goto fail;
        }
        x->args[x->nargs].path = xstrdup(a->string);
        x->args[x->nargs].pattern = xstrdup(a->valuestring);
        x->nargs++;
      }
    }
  }
  *out = r;
  return 0;
fail:
  rules_free(r);
  return ERR_INVALID;
}


/* Scalars as Lua's tostring shows them. */
static int scalar_text(const cJSON *v, char *buf, size_t n, const char **out) {
  if (cJSON_IsString(v)) {
    *out = v->valuestring;
    return 1;
  }
  if (cJSON_IsBool(v)) {
    *out = cJSON_IsTrue(v) ? "true" : "false";
    return 1;
  }
  if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    if (d == floor(d) && fabs(d) < 9.2e18)
      snprintf(buf, n, "%lld", (long long)d);
    else
      snprintf(buf, n, "%.14g", d);
    *out = buf;
    return 1;
  }
  return 0;
}

/* Matches pattern against every value at path in cur. Keys match without
 * regard to case: HTTP header names (headers.Authorization) are case-
 * insensitive, and a rule must not be dodged by writing `authorization`.
 * Several keys that differ only in case all count: with all == 0 (deny,
 * escalate) one matching value is enough, with all != 0 (allow) every value
 * found must match. Returns 1 (holds), 0, or <0 with e filled. *seen counts
 * the values reached. */
static int arg_match(const cJSON *cur, const char *path, const char *pattern, int all, int *seen,
                     struct err *e) {
  if (!*path) {
    char buf[64];
    const char *text;
    (*seen)++;
    if (!scalar_text(cur, buf, sizeof buf, &text)) {
      /* A table ({ secret = "NAME" } where a header's text would be) is
       * matched as its canonical JSON, so it cannot dodge a rule by not
       * being a string. */
      char *js = json_print(cur, JSON_CANONICAL);
      int r = rules_pattern_find(pattern, strlen(pattern), js, strlen(js), RULE_STEPS, e);
      free(js);
      return r;
    }
    return rules_pattern_find(pattern, strlen(pattern), text, strlen(text), RULE_STEPS, e);
  }
  char part[256];
  size_t n = strcspn(path, ".");
  if (n >= sizeof part) return 0;
  memcpy(part, path, n);
  part[n] = 0;
  const char *rest = path + n + (path[n] == '.');
  if (cJSON_IsArray(cur)) {
    char *end;
    long i = strtol(part, &end, 10);
    const cJSON *v = (*end || i < 1) ? NULL : cJSON_GetArrayItem(cur, (int)(i - 1));
    return v ? arg_match(v, rest, pattern, all, seen, e) : 0;
  }
  if (!cJSON_IsObject(cur)) return 0;
  int any = 0, every = 1;
  for (const cJSON *c = cur->child; c; c = c->next) {
    if (!c->string || strcasecmp(c->string, part)) continue;
    int before = *seen;
    int r = arg_match(c, rest, pattern, all, seen, e);
    if (r < 0) return r;
    if (r) any = 1;
    else if (*seen > before || all) every = 0;
  }
  return all ? (any && every) : any;
}

int rules_eval(const struct ruleset *r, const char *tool, const char *caller_kind,
               const char *caller_name, const cJSON *args, struct rule_match *m, struct err *e) {
  memset(m, 0, sizeof *m);
  m->action = RULE_NONE;
  m->reason = "";
  if (!r) return 0;
  if (!caller_name) caller_name = "";
  for (size_t i = 0; i < r->n; i++) {
    const struct rule *x = &r->v[i];
    if (x->tool && !rules_glob(x->tool, tool)) continue;
    if (x->caller && strcmp(x->caller, "*") && strcmp(x->caller, caller_kind)) continue;
    if (x->name && !rules_glob(x->name, caller_name)) continue;
    int ok = 1;
    for (size_t k = 0; ok && k < x->nargs; k++) {
      struct err pe = {0};
      int seen = 0;
      int found = args ? arg_match(args, x->args[k].path, x->args[k].pattern,
                                   x->action == RULE_ALLOW, &seen, &pe)
                       : 0;
      if (found < 0)
        return err_set(e, found, "denied", "rules[%zu].args.%s: %s", i + 1, x->args[k].path,
                       pe.msg);
      ok = found && seen > 0;
    }
    if (!ok) continue;
    m->matched++;
    if ((int)x->action > (int)m->action) {
      m->action = x->action;
      m->rule = (int)i + 1;
      m->reason = x->reason ? x->reason : "";
    }
    if (x->action == RULE_ALLOW && x->tool && strcmp(x->tool, "*") && x->caller &&
        strcmp(x->caller, "*"))
      m->explicit_allow = 1;
  }
  return 0;
}
