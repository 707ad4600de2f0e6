/* automation.c - see automation.h. */
#include "automation.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox.h"
#include "util.h"

#define MAX_SOURCE (1024 * 1024)

static const char *const known_keys[] = {"name",    "description", "run",     "every", "cron",
                                         "tz",      "at",          "on",      "mode",  "max",
                                         "timeout", "catch_up",    "enabled", "on_lost", NULL};

int automation_name_valid(const char *name) {
  if (!name || !islower((unsigned char)name[0])) return 0;
  size_t n = strlen(name);
  if (n > 64) return 0;
  for (size_t i = 0; i < n; i++)
    if (!islower((unsigned char)name[i]) && !isdigit((unsigned char)name[i]) && name[i] != '_' &&
        name[i] != '-')
      return 0;
  return 1;
}

/* The first line of src that assigns `key` as a table field, or 0. */
static int line_of(const char *src, const char *key) {
  size_t kl = strlen(key);
  int line = 1;
  for (const char *p = src; *p; p++) {
    if (*p == '\n') {
      line++;
      continue;
    }
    if (strncmp(p, key, kl) != 0) continue;
    if (p > src && (isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '.')) continue;
    const char *q = p + kl;
    if (*q == '"' || *q == '\'') q++; /* ["key"] = */
    while (*q == ' ' || *q == '\t' || *q == ']') q++;
    if (*q == '=' && q[1] != '=') return line;
  }
  return 0;
}

/* Fills e with "chunk:line: msg" (line of key, if found). */
static int field_err(struct err *e, const char *src, const char *chunk, const char *key,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int field_err(struct err *e, const char *src, const char *chunk, const char *key,
                     const char *fmt, ...) {
  char msg[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int line = key ? line_of(src, key) : 0;
  if (line) return err_set(e, ERR_INVALID, "invalid_automation", "%s:%d: %s", chunk, line, msg);
  return err_set(e, ERR_INVALID, "invalid_automation", "%s: %s", chunk, msg);
}

static int get_string(const cJSON *t, const char *key, const char **out, const char *src,
                      const char *chunk, struct err *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, key);
  *out = NULL;
  if (!v) return 0;
  if (!cJSON_IsString(v)) return field_err(e, src, chunk, key, "'%s' must be a string", key);
  *out = v->valuestring;
  return 0;
}

static int get_bool(const cJSON *t, const char *key, int dflt, int *out, const char *src,
                    const char *chunk, struct err *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, key);
  *out = dflt;
  if (!v) return 0;
  if (!cJSON_IsBool(v)) return field_err(e, src, chunk, key, "'%s' must be true or false", key);
  *out = cJSON_IsTrue(v);
  return 0;
}

/* A duration given as a string ("10s") or a number of seconds. */
static int get_duration(const cJSON *t, const char *key, double *out, const char *src,
                        const char *chunk, struct err *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, key);
  *out = 0;
  if (!v) return 0;
  if (cJSON_IsNumber(v)) {
    if (!(v->valuedouble > 0) || !isfinite(v->valuedouble))
      return field_err(e, src, chunk, key, "'%s' must be a positive number of seconds", key);
    *out = v->valuedouble;
    return 0;
  }
  if (!cJSON_IsString(v))
    return field_err(e, src, chunk, key, "'%s' must be a duration like \"15s\"", key);
  struct err de;
  if (duration_parse(v->valuestring, out, &de))
    return field_err(e, src, chunk, key, "%s: %s", key, de.msg);
  return 0;
}

static int validate(struct automation *a, const cJSON *t, const char *src, const char *expect,
                    struct err *e) {
  const char *chunk = a->chunk;
  if (!cJSON_IsObject(t))
    return field_err(e, src, chunk, NULL,
                     "an automation file must return a table { name = ..., run = function(ctx) "
                     "... end, every = \"15s\" }");
  for (const cJSON *c = t->child; c; c = c->next) {
    int ok = 0;
    for (int i = 0; known_keys[i]; i++)
      if (c->string && !strcmp(c->string, known_keys[i])) ok = 1;
    if (!ok)
      return field_err(e, src, chunk, c->string ? c->string : NULL,
                       "unknown key '%s' (known: name, description, run, every, cron, tz, at, "
                       "on, mode, max, timeout, catch_up, enabled, on_lost)",
                       c->string ? c->string : "?");
  }
  const char *s;
  if (get_string(t, "name", &s, src, chunk, e)) return ERR_INVALID;
  if (s) {
    if (!automation_name_valid(s))
      return field_err(e, src, chunk, "name",
                       "name '%s' is invalid (expected [a-z][a-z0-9_-]*, at most 64 characters)",
                       s);
    if (expect && strcmp(s, expect))
      return field_err(e, src, chunk, "name",
                       "name '%s' does not match the file name (expected '%s')", s, expect);
    snprintf(a->name, sizeof a->name, "%s", s);
  } else if (expect) {
    snprintf(a->name, sizeof a->name, "%s", expect);
  } else {
    return field_err(e, src, chunk, NULL, "missing 'name'");
  }
  if (get_string(t, "description", &s, src, chunk, e)) return ERR_INVALID;
  a->description = xstrdup(s ? s : "");
  const cJSON *run = cJSON_GetObjectItemCaseSensitive(t, "run");
  if (!run) return field_err(e, src, chunk, NULL, "missing 'run' (a function(ctx) ... end)");
  if (!cJSON_IsObject(run) || !cJSON_GetObjectItemCaseSensitive(run, "$function"))
    return field_err(e, src, chunk, "run", "'run' must be a function(ctx)");

  /* the trigger: at most one */
  const char *trig_keys[] = {"every", "cron", "at", "on"};
  const char *seen = NULL;
  for (int i = 0; i < 4; i++)
    if (cJSON_GetObjectItemCaseSensitive(t, trig_keys[i])) {
      if (seen)
        return field_err(e, src, chunk, trig_keys[i],
                         "'%s' and '%s' are both set; an automation has one trigger", seen,
                         trig_keys[i]);
      seen = trig_keys[i];
    }
  const char *tz;
  if (get_string(t, "tz", &tz, src, chunk, e)) return ERR_INVALID;
  if (tz && (!seen || strcmp(seen, "cron")))
    return field_err(e, src, chunk, "tz", "'tz' only applies to a 'cron' trigger");
  a->trig = TRIG_MANUAL;
  snprintf(a->trigger_text, sizeof a->trigger_text, "manual");
  if (seen && !strcmp(seen, "every")) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, "every");
    if (get_duration(t, "every", &a->every_s, src, chunk, e)) return ERR_INVALID;
    if (a->every_s < 1) return field_err(e, src, chunk, "every", "'every' must be at least 1s");
    a->trig = TRIG_EVERY;
    if (cJSON_IsString(v))
      snprintf(a->trigger_text, sizeof a->trigger_text, "every %s", v->valuestring);
    else
      snprintf(a->trigger_text, sizeof a->trigger_text, "every %gs", a->every_s);
  } else if (seen && !strcmp(seen, "cron")) {
    if (get_string(t, "cron", &s, src, chunk, e)) return ERR_INVALID;
    struct err ce;
    if (cron_parse(s, tz, &a->cron, &ce))
      return field_err(e, src, chunk, tz && strstr(ce.msg, "time zone") ? "tz" : "cron", "%s",
                       ce.msg);
    a->trig = TRIG_CRON;
    snprintf(a->trigger_text, sizeof a->trigger_text, "cron %s%s%s%s", s, tz ? " (" : "",
             tz ? tz : "", tz ? ")" : "");
  } else if (seen && !strcmp(seen, "at")) {
    if (get_string(t, "at", &s, src, chunk, e)) return ERR_INVALID;
    struct err te;
    if (timestamp_parse(s, &a->at, &te)) return field_err(e, src, chunk, "at", "%s", te.msg);
    a->trig = TRIG_AT;
    snprintf(a->trigger_text, sizeof a->trigger_text, "at %s", s);
  } else if (seen && !strcmp(seen, "on")) {
    if (get_string(t, "on", &s, src, chunk, e)) return ERR_INVALID;
    if (!*s || strlen(s) >= sizeof a->event)
      return field_err(e, src, chunk, "on", "'on' must name an event (1-127 characters)");
    snprintf(a->event, sizeof a->event, "%s", s);
    a->trig = TRIG_EVENT;
    snprintf(a->trigger_text, sizeof a->trigger_text, "on %s", s);
  }

  if (get_string(t, "mode", &s, src, chunk, e)) return ERR_INVALID;
  a->mode = MODE_SINGLE;
  if (s) {
    if (!strcmp(s, "single"))
      a->mode = MODE_SINGLE;
    else if (!strcmp(s, "queued"))
      a->mode = MODE_QUEUED;
    else if (!strcmp(s, "parallel"))
      a->mode = MODE_PARALLEL;
    else if (!strcmp(s, "restart"))
      a->mode = MODE_RESTART;
    else
      return field_err(e, src, chunk, "mode",
                       "mode '%s' is unknown (expected single, queued, parallel or restart)", s);
  }
  a->max = 5;
  const cJSON *mx = cJSON_GetObjectItemCaseSensitive(t, "max");
  if (mx) {
    if (!cJSON_IsNumber(mx) || mx->valuedouble < 1 || mx->valuedouble > 1000 ||
        mx->valuedouble != floor(mx->valuedouble))
      return field_err(e, src, chunk, "max", "'max' must be a whole number from 1 to 1000");
    if (a->mode != MODE_QUEUED && a->mode != MODE_PARALLEL)
      return field_err(e, src, chunk, "max",
                       "'max' only applies to mode \"queued\" or \"parallel\"");
    a->max = (int)mx->valuedouble;
  }
  if (get_duration(t, "timeout", &a->timeout_s, src, chunk, e)) return ERR_INVALID;
  if (get_bool(t, "catch_up", 0, &a->catch_up, src, chunk, e)) return ERR_INVALID;
  if (get_bool(t, "enabled", 1, &a->enabled, src, chunk, e)) return ERR_INVALID;
  /* What another host does with a run whose host died or lost the cluster
   * database (its lease expired): "interrupt" records it and goes on,
   * "rerun" runs it again from the start on the host that noticed. Only
   * a cluster acts on it; one daemon marks such runs interrupted. */
  if (get_string(t, "on_lost", &s, src, chunk, e)) return ERR_INVALID;
  a->rerun_lost = 0;
  if (s) {
    if (!strcmp(s, "rerun"))
      a->rerun_lost = 1;
    else if (strcmp(s, "interrupt"))
      return field_err(e, src, chunk, "on_lost",
                       "on_lost '%s' is unknown (expected \"interrupt\" or \"rerun\")", s);
  }
  return 0;
}

int automation_load_source(const char *source, size_t len, const char *chunkname,
                           const char *expect_name, struct automation **out, struct err *e) {
  *out = NULL;
  struct automation *a = xcalloc(1, sizeof *a);
  snprintf(a->chunk, sizeof a->chunk, "%s", chunkname);
  a->source = xmalloc(len + 1);
  memcpy(a->source, source, len);
  a->source[len] = 0;
  a->source_len = len;
  /* The file only builds a table: a small sandbox with no tools. */
  struct sb_limits lim;
  sb_limits_default(&lim);
  lim.memory_bytes = 16u << 20;
  lim.instructions = 10000000;
  lim.deadline_s = 2;
  struct sandbox *sb = NULL;
  cJSON *ret = NULL;
  int rc = sandbox_new(&lim, &sb, e);
  if (!rc) rc = sandbox_run_string(sb, a->source, len, chunkname, &ret, e);
  if (!rc) rc = validate(a, ret, a->source, expect_name, e);
  cJSON_Delete(ret);
  sandbox_free(sb);
  if (rc) {
    automation_free(a);
    return rc;
  }
  *out = a;
  return 0;
}

int automation_load_file(const char *path, const char *chunkname, const char *expect_name,
                         struct automation **out, struct err *e) {
  char *src = NULL;
  size_t len = 0;
  *out = NULL;
  if (util_read_file(path, MAX_SOURCE, &src, &len, e)) {
    /* util names the host path; show the workspace-relative one */
    return err_set(e, e->rc ? e->rc : ERR_IO, "invalid_automation", "%s: cannot read the file",
                   chunkname);
  }
  int rc = automation_load_source(src, len, chunkname, expect_name, out, e);
  free(src);
  return rc;
}

void automation_free(struct automation *a) {
  if (!a) return;
  free(a->description);
  free(a->source);
  free(a);
}

void automation_trigger_key(const struct automation *a, char *out, size_t n) {
  switch (a->trig) {
    case TRIG_EVERY:
      snprintf(out, n, "every:%.3f", a->every_s);
      break;
    case TRIG_AT:
      snprintf(out, n, "at:%.3f", a->at);
      break;
    case TRIG_EVENT:
      snprintf(out, n, "on:%s", a->event);
      break;
    case TRIG_MANUAL:
      snprintf(out, n, "manual");
      break;
    case TRIG_CRON:
      snprintf(out, n, "cron:%llx:%x:%x:%x:%x:%d%d%d%d@%s", (unsigned long long)a->cron.minute,
               a->cron.hour, a->cron.dom, a->cron.month, a->cron.dow, a->cron.min_star,
               a->cron.hour_star, a->cron.dom_star, a->cron.dow_star, a->cron.tz);
      break;
  }
}

double automation_next_after(const struct automation *a, double after) {
  switch (a->trig) {
    case TRIG_EVERY:
      return after + a->every_s;
    case TRIG_AT:
      return a->at > after ? a->at : 0;
    case TRIG_CRON: {
      time_t n;
      if (cron_next(&a->cron, (time_t)floor(after), &n, NULL)) return 0;
      return (double)n;
    }
    default:
      return 0;
  }
}

int automation_never_fires(const struct automation *a, double now, char *why, size_t n) {
  if (a->trig == TRIG_AT && a->at <= now) {
    char when[48];
    timestamp_format_utc(a->at, when, sizeof when);
    snprintf(why, n, "at %s is in the past, so it never fires (again)", when);
    return 1;
  }
  if (a->trig == TRIG_CRON && automation_next_after(a, now) <= 0) {
    snprintf(why, n, "%s never fires (no matching date within 8 years)", a->trigger_text);
    return 1;
  }
  return 0;
}

const char *automation_zone(const struct automation *a) {
  return a->trig == TRIG_CRON && a->cron.tz[0] ? a->cron.tz : NULL;
}

const char *automation_mode_name(enum run_mode m) {
  static const char *const n[] = {"single", "queued", "parallel", "restart"};
  return n[m];
}

const char *automation_trig_name(enum trig_kind k) {
  static const char *const n[] = {"manual", "every", "cron", "at", "event"};
  return n[k];
}

void automation_event_regex(const char *pattern, struct sbuf *out) {
  if (strchr(pattern, '[')) {
    sbuf_puts(out, "^.*$"); /* bracket syntax differs; any name, fnmatch decides */
    return;
  }
  sbuf_puts(out, "^");
  for (const unsigned char *p = (const unsigned char *)pattern; *p; p++) {
    unsigned char c = *p;
    if (c == '*' || c == '?') {
      sbuf_puts(out, ".*");
      continue;
    }
    if (c == '\\') {
      if (!p[1]) {
        sbuf_puts(out, "\\\\");
        break;
      }
      c = *++p;
    }
    /* in a PostgreSQL ARE, a backslash before a non-alphanumeric is that
     * character; before an alphanumeric it would be an escape */
    if (!isalnum(c) && c < 0x80) sbuf_append(out, "\\", 1);
    sbuf_append(out, (const char *)&c, 1);
  }
  sbuf_puts(out, "$");
}
