/* skillmd.c - see skillmd.h. */
#include "skillmd.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "json.h"
#include "util.h"

#define MAX_DEPTH 64     /* nesting of YAML collections we convert */
#define MAX_NODES 100000 /* nodes converted per file (alias bombs) */
#define MAX_RETRIES 8    /* lines re-quoted by the lenient retry */
#define MAX_FRONT (64u << 10) /* bytes of front matter (real ones are a few hundred) */
#define MAX_KEYS 1000    /* pairs in one mapping */

struct ctx {
  const char *file;
  skillmd_report report;
  void *ud;
  int line0;   /* file line of the first front matter line, minus 1 */
  long budget; /* nodes left to convert */
  long bytes;  /* string bytes left to convert: an alias of a big scalar is
                  one node in libyaml but a new copy here, so 80,000 aliases
                  of a 30 KB string would be 2.4 GB */
};

static void reportf(struct ctx *c, int line, bool fatal, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reportf(struct ctx *c, int line, bool fatal, const char *fmt, ...) {
  if (!c->report) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  c->report(c->ud, line, fatal, buf);
}

size_t skillmd_list_len(char *const *list) {
  size_t n = 0;
  while (list && list[n]) n++;
  return n;
}

static void list_free(char **l) {
  for (size_t i = 0; l && l[i]; i++) free(l[i]);
  free(l);
}

void skillmd_free(struct skillmd *m) {
  if (!m) return;
  free(m->name);
  free(m->description);
  list_free(m->tags);
  list_free(m->keywords);
  list_free(m->examples);
  free(m->body);
  cJSON_Delete(m->front);
  free(m);
}

/* ---- YAML nodes to JSON ------------------------------------------------ */

static cJSON *plain_scalar(const char *s, size_t n) {
  static const char *const trues[] = {"true", "True", "TRUE"};
  static const char *const falses[] = {"false", "False", "FALSE"};
  for (int i = 0; i < 3; i++) {
    if (strlen(trues[i]) == n && !memcmp(s, trues[i], n)) return cJSON_CreateTrue();
    if (strlen(falses[i]) == n && !memcmp(s, falses[i], n)) return cJSON_CreateFalse();
  }
  if (n == 0 || (n == 1 && s[0] == '~') || (n == 4 && !memcmp(s, "null", 4)))
    return cJSON_CreateNull();
  /* Numbers: digits with an optional sign, fraction and exponent only, so
   * that "1.0.0" or "0x1F" stay strings. */
  size_t i = 0;
  if (i < n && (s[i] == '-' || s[i] == '+')) i++;
  size_t d = i;
  while (i < n && isdigit((unsigned char)s[i])) i++;
  int ok = i > d;
  if (ok && i < n && s[i] == '.') {
    i++;
    while (i < n && isdigit((unsigned char)s[i])) i++;
  }
  if (ok && i < n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < n && (s[i] == '-' || s[i] == '+')) i++;
    size_t e0 = i;
    while (i < n && isdigit((unsigned char)s[i])) i++;
    if (i == e0) ok = 0;
  }
  if (ok && i == n && n < 64) {
    char buf[64];
    memcpy(buf, s, n);
    buf[n] = 0;
    return cJSON_CreateNumber(strtod(buf, NULL));
  }
  char *t = xmalloc(n + 1);
  memcpy(t, s, n);
  t[n] = 0;
  cJSON *j = cJSON_CreateString(t);
  free(t);
  return j;
}

static cJSON *node_json(struct ctx *c, yaml_document_t *doc, yaml_node_t *n, int depth) {
  if (!n) return cJSON_CreateNull();
  if (depth > MAX_DEPTH || --c->budget < 0) return NULL;
  switch (n->type) {
    case YAML_SCALAR_NODE: {
      const char *s = (const char *)n->data.scalar.value;
      size_t len = n->data.scalar.length;
      if ((c->bytes -= (long)len) < 0) return NULL;
      if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) return plain_scalar(s, len);
      char *t = xmalloc(len + 1);
      memcpy(t, s, len);
      t[len] = 0;
      cJSON *j = cJSON_CreateString(t);
      free(t);
      return j;
    }
    case YAML_SEQUENCE_NODE: {
      cJSON *a = cJSON_CreateArray();
      for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
           it++) {
        cJSON *v = node_json(c, doc, yaml_document_get_node(doc, *it), depth + 1);
        if (!v) {
          cJSON_Delete(a);
          return NULL;
        }
        cJSON_AddItemToArray(a, v);
      }
      return a;
    }
    case YAML_MAPPING_NODE: {
      cJSON *o = cJSON_CreateObject();
      for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        char keybuf[256];
        if (k && k->type == YAML_SCALAR_NODE) {
          size_t kl =
              k->data.scalar.length < sizeof keybuf - 1 ? k->data.scalar.length : sizeof keybuf - 1;
          memcpy(keybuf, k->data.scalar.value, kl);
          keybuf[kl] = 0;
        } else {
          snprintf(keybuf, sizeof keybuf, "(complex key)");
        }
        cJSON *v = node_json(c, doc, yaml_document_get_node(doc, p->value), depth + 1);
        if (!v) {
          cJSON_Delete(o);
          return NULL;
        }
        /* Duplicate keys: the last one wins, like most YAML loaders. */
        if (cJSON_GetObjectItemCaseSensitive(o, keybuf))
          cJSON_ReplaceItemInObjectCaseSensitive(o, keybuf, v);
        else
          cJSON_AddItemToObject(o, keybuf, v);
      }
      return o;
    }
    default:
      return cJSON_CreateNull();
  }
}

/* The 1-based file line of top-level key `key`, or 0. */
static int key_line(struct ctx *c, yaml_document_t *doc, const char *key) {
  yaml_node_t *root = yaml_document_get_root_node(doc);
  if (!root || root->type != YAML_MAPPING_NODE) return 0;
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
       p++) {
    yaml_node_t *k = yaml_document_get_node(doc, p->key);
    if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == strlen(key) &&
        !memcmp(k->data.scalar.value, key, k->data.scalar.length))
      return c->line0 + (int)k->start_mark.line + 1;
  }
  return 0;
}

/* ---- lenient retry ----------------------------------------------------- */

/* If line `ln` (0-based) of yaml is a top-level `key: value` whose plain
 * value contains ": ", returns a new text with the value double-quoted;
 * otherwise NULL. */
static char *requote_line(const char *yaml, size_t len, size_t ln) {
  const char *p = yaml, *end = yaml + len;
  for (size_t i = 0; i < ln && p < end; i++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) return NULL;
    p = nl + 1;
  }
  const char *eol = memchr(p, '\n', (size_t)(end - p));
  if (!eol) eol = end;
  const char *vend = eol;
  if (vend > p && vend[-1] == '\r') vend--;
  const char *q = p;
  if (!(isalpha((unsigned char)*q) || *q == '_')) return NULL;
  while (q < vend && (isalnum((unsigned char)*q) || *q == '_' || *q == '-')) q++;
  if (q + 1 >= vend || q[0] != ':' || (q[1] != ' ' && q[1] != '\t')) return NULL;
  const char *v = q + 1;
  while (v < vend && (*v == ' ' || *v == '\t')) v++;
  if (v >= vend || strchr("\"'|>[{&*!#", *v)) return NULL;
  struct sbuf b = {0};
  sbuf_append(&b, yaml, (size_t)(v - yaml));
  sbuf_puts(&b, "\"");
  for (const char *s = v; s < vend; s++) {
    if (*s == '"' || *s == '\\') sbuf_puts(&b, "\\");
    sbuf_append(&b, s, 1);
  }
  sbuf_puts(&b, "\"");
  sbuf_append(&b, vend, (size_t)(end - vend));
  return sbuf_take(&b);
}

/* ---- field extraction -------------------------------------------------- */

static char *field_string(struct ctx *c, const cJSON *front, const char *key, int line) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(front, key);
  if (!v || cJSON_IsNull(v)) return NULL;
  if (cJSON_IsString(v)) return xstrdup(v->valuestring);
  if (cJSON_IsNumber(v) || cJSON_IsBool(v)) {
    char *t = json_print(v, 0);
    char *r = xstrdup(t);
    free(t);
    return r;
  }
  reportf(c, line, false, "'%s' must be a string, not a %s", key,
          cJSON_IsArray(v) ? "list" : "mapping");
  return NULL;
}

/* A list of strings from a YAML list, or from one string split on commas
 * (split=1) or kept whole (split=0). */
static char **field_list(struct ctx *c, const cJSON *front, const char *key, int line, int split) {
  size_t n = 0, cap = 4;
  char **l = xcalloc(cap + 1, sizeof *l);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(front, key);
  if (!v || cJSON_IsNull(v)) return l;
  if (cJSON_IsString(v)) {
    const char *s = v->valuestring;
    while (*s) {
      const char *e = split ? strchr(s, ',') : NULL;
      if (!e) e = s + strlen(s);
      while (s < e && isspace((unsigned char)*s)) s++;
      const char *t = e;
      while (t > s && isspace((unsigned char)t[-1])) t--;
      if (t > s) {
        if (n == cap) l = xrealloc(l, ((cap *= 2) + 1) * sizeof *l);
        l[n] = xmalloc((size_t)(t - s) + 1);
        memcpy(l[n], s, (size_t)(t - s));
        l[n++][t - s] = 0;
      }
      s = *e ? e + 1 : e;
    }
  } else if (cJSON_IsArray(v)) {
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, v) {
      if (cJSON_IsString(it) || cJSON_IsNumber(it)) {
        if (n == cap) l = xrealloc(l, ((cap *= 2) + 1) * sizeof *l);
        if (cJSON_IsString(it)) {
          l[n++] = xstrdup(it->valuestring);
        } else {
          char *t = json_print(it, 0);
          l[n++] = xstrdup(t);
          free(t);
        }
      } else {
        reportf(c, line, false, "'%s[%d]' must be a string", key, i);
      }
      i++;
    }
  } else {
    reportf(c, line, false, "'%s' must be a list of strings or a string", key);
  }
  l[n] = NULL;
  return l;
}

/* ---- front matter ------------------------------------------------------ */

/* Length of the line at p (without its line break) and the offset of the
 * next line. */
static size_t line_len(const char *p, const char *end, const char **next) {
  const char *nl = memchr(p, '\n', (size_t)(end - p));
  const char *e = nl ? nl : end;
  *next = nl ? nl + 1 : end;
  if (e > p && e[-1] == '\r') e--;
  return (size_t)(e - p);
}

static int is_fence(const char *p, size_t n, const char *fence) {
  if (n < 3 || memcmp(p, fence, 3)) return 0;
  for (size_t i = 3; i < n; i++)
    if (p[i] != ' ' && p[i] != '\t') return 0;
  return 1;
}

static char *body_text(const char *p, const char *end) {
  /* Normalise CRLF to LF and drop leading blank lines. */
  struct sbuf b = {0};
  sbuf_append(&b, "", 0);
  int start = 1;
  while (p < end) {
    const char *next;
    size_t n = line_len(p, end, &next);
    if (!(start && n == 0)) {
      start = 0;
      sbuf_append(&b, p, n);
      if (next > p + n) sbuf_append(&b, "\n", 1);
    }
    p = next;
  }
  return sbuf_take(&b);
}

/* Walks the YAML as a stream of events and stops at the first collection
 * nested deeper than MAX_DEPTH, the first mapping with more than MAX_KEYS
 * pairs, or past MAX_NODES nodes. libyaml's loader builds the whole
 * document first, and its scanner slows down with the nesting it has open
 * (80 KB of nested flow sequences took seconds), so the bounds are checked
 * here, where work stops as soon as one is crossed. Returns 0 when within
 * bounds (or when the YAML is malformed: parse_yaml reports that), else -1
 * with msg and *line set. */
static int prescan_yaml(struct ctx *c, const char *yaml, size_t ylen, char *msg, size_t msgn,
                        int *line) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return 0;
  yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, ylen);
  yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING);
  long counts[MAX_DEPTH + 2]; /* items seen in each open collection */
  int depth = 0, rc = 0;
  bool mapping[MAX_DEPTH + 2];
  long nodes = 0;
  for (;;) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&parser, &ev)) break; /* parse_yaml names the error */
    yaml_event_type_t t = ev.type;
    int at = c->line0 + (int)ev.start_mark.line + 1;
    yaml_event_delete(&ev);
    if (t == YAML_STREAM_END_EVENT) break;
    bool node = t == YAML_SCALAR_EVENT || t == YAML_ALIAS_EVENT ||
                t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT;
    if (node) {
      if (++nodes > MAX_NODES) {
        snprintf(msg, msgn, "front matter has more than %d values", MAX_NODES);
        *line = at, rc = -1;
        break;
      }
      if (depth > 0 && ++counts[depth] > (mapping[depth] ? 2L * MAX_KEYS : 1000000L)) {
        snprintf(msg, msgn, "a mapping in the front matter has more than %d keys", MAX_KEYS);
        *line = at, rc = -1;
        break;
      }
    }
    if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
      if (++depth > MAX_DEPTH) {
        snprintf(msg, msgn, "front matter is nested deeper than %d levels", MAX_DEPTH);
        *line = at, rc = -1;
        break;
      }
      counts[depth] = 0;
      mapping[depth] = t == YAML_MAPPING_START_EVENT;
    } else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
      if (depth > 0) depth--;
    }
  }
  yaml_parser_delete(&parser);
  return rc;
}

static int parse_yaml(struct ctx *c, const char *yaml, size_t ylen, yaml_document_t *doc, char *msg,
                      size_t msgn, int *line) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) {
    snprintf(msg, msgn, "out of memory");
    *line = 0;
    return -1;
  }
  yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, ylen);
  yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING);
  int ok = yaml_parser_load(&parser, doc);
  if (!ok) {
    *line = c->line0 + (int)parser.problem_mark.line + 1;
    if (parser.context && parser.context_mark.line != parser.problem_mark.line)
      snprintf(msg, msgn, "%s that starts on line %d: %s (column %d)", parser.context,
               c->line0 + (int)parser.context_mark.line + 1,
               parser.problem ? parser.problem : "error", (int)parser.problem_mark.column + 1);
    else if (parser.context)
      snprintf(msg, msgn, "%s: %s (column %d)", parser.context,
               parser.problem ? parser.problem : "error", (int)parser.problem_mark.column + 1);
    else
      snprintf(msg, msgn, "%s (column %d)", parser.problem ? parser.problem : "error",
               (int)parser.problem_mark.column + 1);
  }
  yaml_parser_delete(&parser);
  return ok ? 0 : -1;
}

int skillmd_parse(const char *text, size_t len, const char *file, skillmd_report report, void *ud,
                  struct skillmd **out, struct err *e) {
  struct ctx c = {.file = file, .report = report, .ud = ud, .budget = MAX_NODES,
                  .bytes = 4 * (long)MAX_FRONT};
  *out = NULL;
  const char *p = text, *end = text + len;
  if (len >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) p += 3;
  const char *next;
  size_t n = line_len(p, end, &next);
  if (!is_fence(p, n, "---")) {
    reportf(&c, 1, true, "no YAML front matter: the file must start with a '---' line");
    return err_set(e, ERR_INVALID, "invalid_skill",
                   "%s:1: no YAML front matter: the file must start with a '---' line", file);
  }
  const char *ystart = next;
  int lineno = 2;
  const char *q = ystart, *yend = NULL, *bstart = NULL;
  while (q < end) {
    size_t m = line_len(q, end, &next);
    if (is_fence(q, m, "---") || is_fence(q, m, "...")) {
      yend = q;
      bstart = next;
      break;
    }
    q = next;
    lineno++;
  }
  if (!yend) {
    reportf(&c, 1, true, "the front matter is not closed by a '---' line");
    return err_set(e, ERR_INVALID, "invalid_skill",
                   "%s:1: the front matter is not closed by a '---' line", file);
  }
  c.line0 = 1; /* yaml line 0 is file line 2 */

  if ((size_t)(yend - ystart) > MAX_FRONT) {
    reportf(&c, 2, true, "front matter is larger than %u KiB", MAX_FRONT >> 10);
    return err_set(e, ERR_INVALID, "invalid_skill", "%s:2: front matter is larger than %u KiB",
                   file, MAX_FRONT >> 10);
  }
  char *yaml = xmalloc((size_t)(yend - ystart) + 1);
  size_t ylen = (size_t)(yend - ystart);
  memcpy(yaml, ystart, ylen);
  yaml[ylen] = 0;

  yaml_document_t doc;
  char msg[512];
  int line = 0, rc;

  int first_line = 0;
  char first_msg[512] = "";
  for (int attempt = 0;; attempt++) {
    /* Bounds first, on every text the loader will see (a retry too). */
    if (prescan_yaml(&c, yaml, ylen, msg, sizeof msg, &line)) {
      free(yaml);
      reportf(&c, line, true, "%s", msg);
      return err_set(e, ERR_INVALID, "invalid_skill", "%s:%d: %s", file, line, msg);
    }
    rc = parse_yaml(&c, yaml, ylen, &doc, msg, sizeof msg, &line);
    if (rc == 0) break;
    if (!first_line) {
      first_line = line;
      snprintf(first_msg, sizeof first_msg, "%s", msg);
    }
    char *fixed = NULL;
    if (attempt < MAX_RETRIES && strstr(msg, "mapping values are not allowed") && line > c.line0)
      fixed = requote_line(yaml, ylen, (size_t)(line - c.line0 - 1));
    if (!fixed) break;
    free(yaml);
    yaml = fixed;
    ylen = strlen(yaml);
  }
  if (rc) {
    reportf(&c, first_line, true, "front matter is not valid YAML: %s", first_msg);
    free(yaml);
    return err_set(e, ERR_INVALID, "invalid_skill", "%s:%d: front matter is not valid YAML: %s",
                   file, first_line, first_msg);
  }
  if (first_line)
    reportf(&c, first_line, false,
            "front matter is not valid YAML: %s; loaded by reading the value as a quoted "
            "string (quote values that contain ': ')",
            first_msg);

  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (!root || root->type != YAML_MAPPING_NODE) {
    yaml_document_delete(&doc);
    free(yaml);
    reportf(&c, 2, true, "front matter must be a YAML mapping (key: value lines)");
    return err_set(e, ERR_INVALID, "invalid_skill",
                   "%s:2: front matter must be a YAML mapping (key: value lines)", file);
  }
  cJSON *front = node_json(&c, &doc, root, 0);
  if (!front) {
    yaml_document_delete(&doc);
    free(yaml);
    reportf(&c, 2, true, "front matter is too deeply nested or too large");
    return err_set(e, ERR_INVALID, "invalid_skill",
                   "%s:2: front matter is too deeply nested or too large", file);
  }
  struct skillmd *m = xcalloc(1, sizeof *m);
  m->front = front;
  m->name_line = key_line(&c, &doc, "name");
  m->description_line = key_line(&c, &doc, "description");
  m->name = field_string(&c, front, "name", m->name_line);
  m->description = field_string(&c, front, "description", m->description_line);
  m->tags = field_list(&c, front, "tags", key_line(&c, &doc, "tags"), 1);
  m->keywords = field_list(&c, front, "keywords", key_line(&c, &doc, "keywords"), 1);
  m->examples = field_list(&c, front, "examples", key_line(&c, &doc, "examples"), 0);
  const cJSON *al = cJSON_GetObjectItemCaseSensitive(front, "always");
  if (al && !cJSON_IsBool(al) && !cJSON_IsNull(al))
    reportf(&c, key_line(&c, &doc, "always"), false, "'always' must be true or false");
  m->always = cJSON_IsTrue(al);
  m->body_line = lineno + 1;
  m->body = body_text(bstart, end);
  yaml_document_delete(&doc);
  free(yaml);
  *out = m;
  return 0;
}
