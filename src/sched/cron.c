/* cron.c - see cron.h. */
#include "cron.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- parsing */

struct field_def {
  const char *name;
  int lo, hi;
  const char *const *names; /* names[i] stands for lo + i, or NULL */
};

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun", "jul",
                                          "aug", "sep", "oct", "nov", "dec", NULL};
static const char *const dow_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL};

static const struct field_def fields[5] = {
    {"minute", 0, 59, NULL},          {"hour", 0, 23, NULL},
    {"day-of-month", 1, 31, NULL},    {"month", 1, 12, month_names},
    {"day-of-week", 0, 7, dow_names}, /* 7 is Sunday too */
};

/* Reads a number or a name at *p; advances *p. */
static int parse_value(const struct field_def *f, const char **p, int *v) {
  const char *s = *p;
  if (isdigit((unsigned char)*s)) {
    long n = 0;
    while (isdigit((unsigned char)*s)) {
      n = n * 10 + (*s - '0');
      if (n > 1000) return -1;
      s++;
    }
    *v = (int)n;
    *p = s;
    return 0;
  }
  if (f->names && isalpha((unsigned char)s[0]) && isalpha((unsigned char)s[1]) &&
      isalpha((unsigned char)s[2]) && !isalpha((unsigned char)s[3])) {
    for (int i = 0; f->names[i]; i++)
      if (!strncasecmp(s, f->names[i], 3)) {
        *v = (f == &fields[3] ? 1 : 0) + i;
        *p = s + 3;
        return 0;
      }
  }
  return -1;
}

/* Parses one field (text of length len) into a bit mask. */
static int parse_field(int idx, const char *text, size_t len, uint64_t *mask, uint8_t *star,
                       const char *expr, struct err *e) {
  const struct field_def *f = &fields[idx];
  char buf[128];
  if (len >= sizeof buf)
    return err_set(e, ERR_INVALID, "invalid_cron", "cron '%s': %s field too long", expr, f->name);
  memcpy(buf, text, len);
  buf[len] = 0;
  *mask = 0;
  *star = buf[0] == '*';
  char *save = NULL;
  for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    const char *p = item;
    int lo, hi, step = 1, range = 0;
    if (*p == '*') {
      lo = f->lo;
      hi = f->hi == 7 ? 6 : f->hi;
      p++;
      range = 1;
    } else {
      if (parse_value(f, &p, &lo)) goto bad;
      hi = lo;
      if (*p == '-') {
        p++;
        if (parse_value(f, &p, &hi)) goto bad;
        range = 1;
      }
    }
    if (*p == '/') {
      p++;
      if (!isdigit((unsigned char)*p)) goto bad;
      step = 0;
      while (isdigit((unsigned char)*p)) {
        step = step * 10 + (*p - '0');
        if (step > 1000) goto bad;
        p++;
      }
      if (step == 0) goto bad;
      if (!range) hi = f->hi == 7 ? 6 : f->hi; /* "5/20" = 5-max/20 */
    }
    if (*p) goto bad;
    if (lo < f->lo || lo > f->hi || hi < f->lo || hi > f->hi)
      return err_set(e, ERR_INVALID, "invalid_cron",
                     "cron '%s': %s field: '%s' is out of range %d-%d", expr, f->name, item, f->lo,
                     f->hi);
    if (lo > hi)
      return err_set(e, ERR_INVALID, "invalid_cron",
                     "cron '%s': %s field: range '%s' runs backwards", expr, f->name, item);
    for (int v = lo; v <= hi; v += step) *mask |= (uint64_t)1 << (idx == 4 && v == 7 ? 0 : v);
    continue;
  bad:
    return err_set(e, ERR_INVALID, "invalid_cron",
                   "cron '%s': %s field: cannot read '%s' (expected a number %d-%d%s, "
                   "a range a-b, a step */n or a-b/n, or a list)",
                   expr, f->name, item, f->lo, f->hi,
                   f->names ? (idx == 3 ? " or jan-dec" : " or sun-sat") : "");
  }
  if (!*mask)
    return err_set(e, ERR_INVALID, "invalid_cron", "cron '%s': %s field is empty", expr, f->name);
  return 0;
}

int cron_tz_valid(const char *tz, struct err *e) {
  if (!tz || !*tz) return 0;
  size_t n = strlen(tz);
  if (n >= sizeof(((struct cron *)0)->tz) || tz[0] == '/' || strstr(tz, "..") || tz[0] == ':')
    goto bad;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)tz[i]) && !strchr("/_+-", tz[i])) goto bad;
  const char *dir = getenv("TZDIR");
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "/usr/share/zoneinfo", tz);
  struct stat st;
  if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) return 0;
bad:
  return err_set(e, ERR_INVALID, "invalid_tz",
                 "unknown time zone '%s' (expected a TZ database name such as "
                 "\"Europe/Paris\" or \"UTC\")",
                 tz);
}

static const struct {
  const char *name, *expr;
} macros[] = {{"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
              {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
              {"@hourly", "0 * * * *"}};

int cron_parse(const char *expr, const char *tz, struct cron *out, struct err *e) {
  memset(out, 0, sizeof *out);
  if (!expr) return err_set(e, ERR_INVALID, "invalid_cron", "cron expression is missing");
  const char *src = expr;
  while (isspace((unsigned char)*src)) src++;
  if (*src == '@') {
    size_t n = strcspn(src, " \t");
    const char *rest = src + n;
    while (isspace((unsigned char)*rest)) rest++;
    int found = 0;
    for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++)
      if (strlen(macros[i].name) == n && !strncasecmp(src, macros[i].name, n) && !*rest) {
        src = macros[i].expr;
        found = 1;
        break;
      }
    if (!found)
      return err_set(e, ERR_INVALID, "invalid_cron",
                     "cron '%s': unknown macro (expected @yearly, @monthly, @weekly, @daily, "
                     "@midnight or @hourly)",
                     expr);
  }
  const char *starts[6];
  size_t lens[6];
  int n = 0;
  for (const char *p = src; *p;) {
    while (isspace((unsigned char)*p)) p++;
    if (!*p) break;
    const char *s = p;
    while (*p && !isspace((unsigned char)*p)) p++;
    if (n < 6) {
      starts[n] = s;
      lens[n] = (size_t)(p - s);
    }
    n++;
  }
  if (n != 5)
    return err_set(e, ERR_INVALID, "invalid_cron",
                   "cron '%s': expected 5 fields (minute hour day-of-month month day-of-week), "
                   "got %d",
                   expr, n);
  uint64_t m[5];
  uint8_t star[5];
  for (int i = 0; i < 5; i++)
    if (parse_field(i, starts[i], lens[i], &m[i], &star[i], expr, e)) return ERR_INVALID;
  out->minute = m[0];
  out->hour = (uint32_t)m[1];
  out->dom = (uint32_t)m[2];
  out->month = (uint16_t)m[3];
  out->dow = (uint8_t)m[4];
  out->min_star = star[0];
  out->hour_star = star[1];
  out->dom_star = star[2];
  out->dow_star = star[3 + 1];
  if (tz && *tz) {
    if (cron_tz_valid(tz, e)) return ERR_INVALID;
    snprintf(out->tz, sizeof out->tz, "%s", tz);
  }
  return 0;
}

/* ------------------------------------------------------------- evaluation */

/* glibc keeps one process-wide zone; switch it under a lock and restore. */
static pthread_mutex_t tz_lock = PTHREAD_MUTEX_INITIALIZER;

struct tz_saved {
  char *old;
  int had;
  int switched;
};

static void tz_enter(const char *tz, struct tz_saved *sv) {
  pthread_mutex_lock(&tz_lock);
  sv->switched = tz && *tz;
  sv->old = NULL;
  sv->had = 0;
  if (!sv->switched) {
    tzset();
    return;
  }
  const char *o = getenv("TZ");
  if (o) {
    sv->had = 1;
    sv->old = strdup(o);
  }
  setenv("TZ", tz, 1);
  tzset();
}

static void tz_leave(struct tz_saved *sv) {
  if (sv->switched) {
    if (sv->had && sv->old)
      setenv("TZ", sv->old, 1);
    else
      unsetenv("TZ");
    tzset();
    free(sv->old);
  }
  pthread_mutex_unlock(&tz_lock);
}

static int day_matches(const struct cron *c, int mday, int wday) {
  int d = (c->dom >> mday) & 1, w = (c->dow >> wday) & 1;
  return (c->dom_star || c->dow_star) ? (d && w) : (d || w);
}

static int wall_equal(const struct tm *a, const struct tm *b) {
  return a->tm_year == b->tm_year && a->tm_mon == b->tm_mon && a->tm_mday == b->tm_mday &&
         a->tm_hour == b->tm_hour && a->tm_min == b->tm_min;
}

/* A fixed-time job whose wall time fell into the gap just before t. */
static int gap_match(const struct cron *c, time_t t, const struct tm *lt) {
  time_t p = t - 60;
  struct tm pt;
  localtime_r(&p, &pt);
  long jump = lt->tm_gmtoff - pt.tm_gmtoff; /* seconds the clock jumped forward */
  if (jump <= 0 || jump > 3 * 3600) return 0;
  /* Skipped wall minutes: pt + 1 min + k, for k in [1, jump/60]. Do the wall
   * arithmetic in UTC so it is zone-free. */
  struct tm w = pt;
  w.tm_isdst = 0;
  time_t base = timegm(&w);
  for (long k = 1; k <= jump / 60; k++) {
    time_t x = base + 60 * k;
    struct tm s;
    gmtime_r(&x, &s);
    if (((c->month >> (s.tm_mon + 1)) & 1) && day_matches(c, s.tm_mday, s.tm_wday) &&
        ((c->hour >> s.tm_hour) & 1) && ((c->minute >> s.tm_min) & 1))
      return 1;
  }
  return 0;
}

/* t's wall time already happened earlier with a larger offset (fall-back). */
static int repeated_wall(time_t t, const struct tm *lt) {
  time_t q = t - 3 * 3600;
  struct tm qt, l2;
  localtime_r(&q, &qt);
  if (qt.tm_gmtoff <= lt->tm_gmtoff) return 0;
  time_t t2 = t - (qt.tm_gmtoff - lt->tm_gmtoff);
  localtime_r(&t2, &l2);
  return l2.tm_gmtoff != lt->tm_gmtoff && wall_equal(&l2, lt);
}

static time_t local_midnight(const struct tm *lt, int add_days, int add_months) {
  struct tm tm = *lt;
  tm.tm_mday = add_months ? 1 : tm.tm_mday + add_days;
  tm.tm_mon += add_months;
  tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
  tm.tm_isdst = -1;
  return mktime(&tm);
}

int cron_next(const struct cron *c, time_t after, time_t *next, struct err *e) {
  int fixed = !c->min_star && !c->hour_star;
  struct tz_saved sv;
  tz_enter(c->tz, &sv);
  time_t t = after - ((after % 60) + 60) % 60 + 60;
  time_t limit = after + (time_t)8 * 366 * 86400;
  int rc = ERR_NOTFOUND;
  while (t <= limit) {
    struct tm lt;
    localtime_r(&t, &lt);
    if (lt.tm_sec != 0) { /* zones with odd historic offsets */
      t += 60 - lt.tm_sec;
      continue;
    }
    if (fixed && gap_match(c, t, &lt)) {
      rc = 0;
      break;
    }
    time_t nt;
    if (!((c->month >> (lt.tm_mon + 1)) & 1)) {
      nt = local_midnight(&lt, 0, 1);
    } else if (!day_matches(c, lt.tm_mday, lt.tm_wday)) {
      nt = local_midnight(&lt, 1, 0);
    } else if (!((c->hour >> lt.tm_hour) & 1)) {
      nt = t + 60 * (60 - lt.tm_min);
    } else if (!((c->minute >> lt.tm_min) & 1) || (fixed && repeated_wall(t, &lt))) {
      nt = t + 60;
    } else {
      rc = 0;
      break;
    }
    /* mktime may land before t inside a gap; never go backwards. */
    t = nt > t ? nt : t + 60 * (60 - lt.tm_min);
  }
  tz_leave(&sv);
  if (rc) return err_set(e, ERR_NOTFOUND, "invalid_cron", "cron expression never fires");
  *next = t;
  return 0;
}

/* -------------------------------------------------- durations, timestamps */

int duration_parse(const char *s, double *seconds, struct err *e) {
  const char *p = s ? s : "";
  double total = 0;
  if (!*p) goto bad;
  while (*p) {
    if (!isdigit((unsigned char)*p) && *p != '.') goto bad;
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno || !isfinite(v) || v < 0) goto bad;
    p = end;
    double unit;
    if (!strncmp(p, "ms", 2)) {
      unit = 0.001;
      p += 2;
    } else if (*p == 's') {
      unit = 1;
      p++;
    } else if (*p == 'm') {
      unit = 60;
      p++;
    } else if (*p == 'h') {
      unit = 3600;
      p++;
    } else if (*p == 'd') {
      unit = 86400;
      p++;
    } else {
      goto bad;
    }
    total += v * unit;
  }
  if (!(total > 0) || total > 100.0 * 366 * 86400) goto bad;
  *seconds = total;
  return 0;
bad:
  return err_set(e, ERR_INVALID, "invalid_duration",
                 "bad duration '%s' (expected a positive number with a unit: \"500ms\", \"15s\", "
                 "\"5m\", \"2h\", \"1d\", or a sum like \"1h30m\")",
                 s ? s : "");
}

static int digits(const char **p, int n, int *out) {
  int v = 0;
  for (int i = 0; i < n; i++) {
    if (!isdigit((unsigned char)(*p)[i])) return -1;
    v = v * 10 + ((*p)[i] - '0');
  }
  *p += n;
  *out = v;
  return 0;
}

int timestamp_parse(const char *s, double *epoch, struct err *e) {
  if (!s) goto bad;
  const char *p = s;
  int Y, M, D, h, m, sec = 0;
  double frac = 0;
  if (digits(&p, 4, &Y) || *p++ != '-' || digits(&p, 2, &M) || *p++ != '-' || digits(&p, 2, &D) ||
      (*p != 'T' && *p != 't' && *p != ' '))
    goto bad;
  p++;
  if (digits(&p, 2, &h) || *p++ != ':' || digits(&p, 2, &m)) goto bad;
  if (*p == ':') {
    p++;
    if (digits(&p, 2, &sec)) goto bad;
    if (*p == '.' || *p == ',') {
      const char *f = ++p;
      double scale = 0.1;
      while (isdigit((unsigned char)*p)) {
        frac += (*p - '0') * scale;
        scale /= 10;
        p++;
      }
      if (p == f) goto bad;
    }
  }
  long off = 0;
  if (*p == 'Z' || *p == 'z') {
    p++;
  } else if (*p == '+' || *p == '-') {
    int sign = *p++ == '-' ? -1 : 1, oh, om = 0;
    if (digits(&p, 2, &oh)) goto bad;
    if (*p == ':') p++;
    if (*p && digits(&p, 2, &om)) goto bad;
    if (oh > 23 || om > 59) goto bad;
    off = sign * (oh * 3600L + om * 60L);
  } else {
    return err_set(e, ERR_INVALID, "invalid_time",
                   "timestamp '%s' has no zone: add 'Z' for UTC or an offset like +02:00", s);
  }
  if (*p) goto bad;
  if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60) goto bad;
  struct tm tm = {
      .tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D, .tm_hour = h, .tm_min = m, .tm_sec = sec};
  time_t t = timegm(&tm);
  struct tm chk;
  gmtime_r(&t, &chk);
  if (chk.tm_mday != D && sec != 60) goto bad; /* Feb 30 and friends */
  *epoch = (double)t - (double)off + frac;
  return 0;
bad:
  return err_set(e, ERR_INVALID, "invalid_time",
                 "bad timestamp '%s' (expected ISO-8601 like \"2026-12-01T07:00:00Z\" or "
                 "\"2026-12-01T09:00:00+02:00\")",
                 s ? s : "(null)");
}

void timestamp_format_utc(double t, char *out, size_t n) {
  time_t x = (time_t)floor(t);
  struct tm tm;
  gmtime_r(&x, &tm);
  strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void cron_format_zoned(double t, const char *tz, int iso, char *out, size_t n) {
  struct tz_saved sv;
  time_t x = (time_t)floor(t);
  struct tm tm;
  char z[16] = "", name[64] = "";
  tz_enter(tz, &sv);
  localtime_r(&x, &tm);
  strftime(z, sizeof z, "%z", &tm);
  strftime(name, sizeof name, "%Z", &tm);
  tz_leave(&sv);
  char when[40];
  strftime(when, sizeof when, iso ? "%Y-%m-%dT%H:%M:%S" : "%Y-%m-%d %H:%M:%S", &tm);
  if (iso) { /* +0100 -> +01:00, as ISO 8601 writes it */
    if (strlen(z) == 5)
      snprintf(out, n, "%s%.3s:%.2s", when, z, z + 3);
    else
      snprintf(out, n, "%sZ", when);
  } else {
    snprintf(out, n, "%s %s", when, name[0] ? name : z);
  }
}
