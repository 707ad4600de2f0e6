/* test_cron.c - cron expressions, time zones across DST, durations, timestamps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cron.h"
#include "test.h"

static time_t iso(const char *s) {
  double t = 0;
  struct err e;
  if (timestamp_parse(s, &t, &e)) {
    fprintf(stderr, "bad test timestamp %s: %s\n", s, e.msg);
    abort();
  }
  return (time_t)t;
}

/* Next fire after `after` (ISO), as an ISO UTC string in a static buffer. */
static const char *nxt(const char *expr, const char *tz, const char *after) {
  static char buf[8][32];
  static int k;
  char *out = buf[k++ % 8];
  struct cron c;
  struct err e;
  if (cron_parse(expr, tz, &c, &e)) {
    snprintf(out, 32, "parse error");
    return out;
  }
  time_t n;
  if (cron_next(&c, iso(after), &n, &e)) {
    snprintf(out, 32, "never");
    return out;
  }
  timestamp_format_utc((double)n, out, 32);
  return out;
}

/* Fires in [from, to), as a comma-separated list. */
static const char *fires(const char *expr, const char *tz, const char *from, const char *to) {
  static char buf[2048];
  buf[0] = 0;
  struct cron c;
  struct err e;
  if (cron_parse(expr, tz, &c, &e)) return "parse error";
  time_t t = iso(from) - 1, end = iso(to);
  while (!cron_next(&c, t, &t, &e) && t < end) {
    char one[32];
    timestamp_format_utc((double)t, one, sizeof one);
    if (buf[0]) strcat(buf, ",");
    strcat(buf, one);
  }
  return buf;
}

static void test_basic(void) {
  CHECK_STR(nxt("* * * * *", "UTC", "2026-01-01T00:00:00Z"), "2026-01-01T00:01:00Z");
  CHECK_STR(nxt("* * * * *", "UTC", "2026-01-01T00:00:30Z"), "2026-01-01T00:01:00Z");
  CHECK_STR(nxt("*/15 * * * *", "UTC", "2026-01-01T00:07:00Z"), "2026-01-01T00:15:00Z");
  CHECK_STR(nxt("10-50/20 * * * *", "UTC", "2026-01-01T00:31:00Z"), "2026-01-01T00:50:00Z");
  CHECK_STR(nxt("5/20 * * * *", "UTC", "2026-01-01T00:26:00Z"), "2026-01-01T00:45:00Z");
  CHECK_STR(nxt("0 7 * * 1-5", "UTC", "2026-01-02T08:00:00Z"),
            "2026-01-05T07:00:00Z"); /* Fri -> Mon */
  CHECK_STR(nxt("0 9 * jan-mar mon,wed", "UTC", "2026-03-31T10:00:00Z"), "2027-01-04T09:00:00Z");
  CHECK_STR(nxt("0 0 * * 7", "UTC", "2026-01-01T00:00:00Z"),
            "2026-01-04T00:00:00Z"); /* 7 = Sunday */
  CHECK_STR(nxt("0 0 * * sun", "UTC", "2026-01-01T00:00:00Z"), "2026-01-04T00:00:00Z");
  CHECK_STR(nxt("0 0 29 2 *", "UTC", "2026-01-01T00:00:00Z"), "2028-02-29T00:00:00Z");
  CHECK_STR(nxt("0 0 31 2 *", "UTC", "2026-01-01T00:00:00Z"), "never");
  CHECK_STR(nxt("@hourly", "UTC", "2026-01-01T00:00:00Z"), "2026-01-01T01:00:00Z");
  CHECK_STR(nxt("@monthly", "UTC", "2026-01-15T00:00:00Z"), "2026-02-01T00:00:00Z");
  CHECK_STR(nxt("@weekly", "UTC", "2026-01-01T00:00:00Z"), "2026-01-04T00:00:00Z");
  CHECK_STR(nxt("59 23 31 12 *", "UTC", "2026-06-01T00:00:00Z"), "2026-12-31T23:59:00Z");
}

/* Vixie: both day fields restricted -> either matches; one starred -> both. */
static void test_dom_dow(void) {
  /* the 13th or any Friday: Jan 2 2026 is a Friday */
  CHECK_STR(fires("0 0 13 * 5", "UTC", "2026-01-01T00:00:00Z", "2026-01-20T00:00:00Z"),
            "2026-01-02T00:00:00Z,2026-01-09T00:00:00Z,2026-01-13T00:00:00Z,2026-01-16T00:00:00Z");
  /* dom restricted, dow '*': only the 13th */
  CHECK_STR(fires("0 0 13 * *", "UTC", "2026-01-01T00:00:00Z", "2026-03-01T00:00:00Z"),
            "2026-01-13T00:00:00Z,2026-02-13T00:00:00Z");
  /* dom '*\/2' counts as starred in Vixie: odd days AND Fridays */
  CHECK_STR(fires("0 0 */2 * 5", "UTC", "2026-01-01T00:00:00Z", "2026-01-31T00:00:00Z"),
            "2026-01-09T00:00:00Z,2026-01-23T00:00:00Z");
}

static void test_tz(void) {
  /* Paris is UTC+1 in winter, +2 in summer */
  CHECK_STR(nxt("0 7 * * 1-5", "Europe/Paris", "2026-01-02T08:00:00Z"), "2026-01-05T06:00:00Z");
  CHECK_STR(nxt("0 7 * * 1-5", "Europe/Paris", "2026-06-01T00:00:00Z"), "2026-06-01T05:00:00Z");
  CHECK_STR(nxt("0 7 * * *", "America/New_York", "2026-01-02T00:00:00Z"), "2026-01-02T12:00:00Z");
  CHECK_STR(nxt("0 7 * * *", "Asia/Kolkata", "2026-01-02T00:00:00Z"), "2026-01-02T01:30:00Z");
  /* the day boundary follows the zone, not UTC */
  CHECK_STR(nxt("30 23 * * 5", "America/New_York", "2026-01-01T00:00:00Z"), "2026-01-03T04:30:00Z");
}

static void test_dst_paris(void) {
  /* Spring forward: Sun 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z); 02:xx does not exist. */
  /* a fixed 02:30 job runs once at the change, then normally */
  CHECK_STR(fires("30 2 * * *", "Europe/Paris", "2026-03-28T00:00:00Z", "2026-03-31T00:00:00Z"),
            "2026-03-28T01:30:00Z,2026-03-29T01:00:00Z,2026-03-30T00:30:00Z");
  /* a wildcard job follows the wall clock: nothing at 02:xx */
  CHECK_STR(fires("*/30 * * * *", "Europe/Paris", "2026-03-29T00:15:00Z", "2026-03-29T02:00:00Z"),
            "2026-03-29T00:30:00Z,2026-03-29T01:00:00Z,2026-03-29T01:30:00Z");
  /* 03:00 local happens once, at the change */
  CHECK_STR(fires("0 3 * * *", "Europe/Paris", "2026-03-28T12:00:00Z", "2026-03-30T12:00:00Z"),
            "2026-03-29T01:00:00Z,2026-03-30T01:00:00Z");
  /* a fixed job at 01:30 (before the gap) is unaffected */
  CHECK_STR(nxt("30 1 * * *", "Europe/Paris", "2026-03-28T12:00:00Z"), "2026-03-29T00:30:00Z");

  /* Fall back: Sun 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z); 02:xx happens twice. */
  /* a fixed 02:30 job runs only at the first occurrence */
  CHECK_STR(fires("30 2 * * *", "Europe/Paris", "2026-10-24T12:00:00Z", "2026-10-27T00:00:00Z"),
            "2026-10-25T00:30:00Z,2026-10-26T01:30:00Z");
  /* an hourly (wildcard hour) job runs in both occurrences of 02:00 */
  CHECK_STR(fires("0 * * * *", "Europe/Paris", "2026-10-24T23:30:00Z", "2026-10-25T02:30:00Z"),
            "2026-10-25T00:00:00Z,2026-10-25T01:00:00Z,2026-10-25T02:00:00Z");
  /* daily midnight: the 25-hour day does not shift it */
  CHECK_STR(fires("0 0 * * *", "Europe/Paris", "2026-10-24T00:00:00Z", "2026-10-27T00:00:00Z"),
            "2026-10-24T22:00:00Z,2026-10-25T23:00:00Z,2026-10-26T23:00:00Z");
}

static void test_dst_new_york(void) {
  /* Spring forward: Sun 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z). */
  CHECK_STR(fires("30 2 * * *", "America/New_York", "2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z"),
            "2026-03-07T07:30:00Z,2026-03-08T07:00:00Z,2026-03-09T06:30:00Z");
  CHECK_STR(fires("15 * * * *", "America/New_York", "2026-03-08T05:00:00Z", "2026-03-08T08:00:00Z"),
            "2026-03-08T05:15:00Z,2026-03-08T06:15:00Z,2026-03-08T07:15:00Z");
  /* Fall back: Sun 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z); 01:xx twice. */
  CHECK_STR(fires("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", "2026-11-03T00:00:00Z"),
            "2026-11-01T05:30:00Z,2026-11-02T06:30:00Z");
  CHECK_STR(fires("30 * * * *", "America/New_York", "2026-11-01T04:00:00Z", "2026-11-01T08:00:00Z"),
            "2026-11-01T04:30:00Z,2026-11-01T05:30:00Z,2026-11-01T06:30:00Z,2026-11-01T07:30:00Z");
  /* weekday 7am across the change keeps 7am local */
  CHECK_STR(
      fires("0 7 * * 1-5", "America/New_York", "2026-10-29T00:00:00Z", "2026-11-04T00:00:00Z"),
      "2026-10-29T11:00:00Z,2026-10-30T11:00:00Z,2026-11-02T12:00:00Z,2026-11-03T12:00:00Z");
}

static void test_process_tz_untouched(void) {
  setenv("TZ", "Asia/Tokyo", 1);
  tzset();
  CHECK_STR(nxt("0 12 * * *", "Europe/Paris", "2026-01-01T00:00:00Z"), "2026-01-01T11:00:00Z");
  CHECK_STR(getenv("TZ"), "Asia/Tokyo");
  /* "" = process local time (Tokyo, UTC+9, no DST) */
  CHECK_STR(nxt("0 12 * * *", "", "2026-01-01T00:00:00Z"), "2026-01-01T03:00:00Z");
  unsetenv("TZ");
  tzset();
}

static void test_errors(void) {
  struct cron c;
  struct err e;
  CHECK_INT(cron_parse("* * * *", NULL, &c, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "expected 5 fields");
  CHECK_INT(cron_parse("0 25 * * *", NULL, &c, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "hour field: '25' is out of range 0-23");
  CHECK_INT(cron_parse("0 0 0 * *", NULL, &c, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "day-of-month");
  CHECK_INT(cron_parse("*/0 * * * *", NULL, &c, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "minute field: cannot read '*/0'");
  CHECK_INT(cron_parse("0 0 * foo *", NULL, &c, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "month field");
  CHECK_INT(cron_parse("30-10 * * * *", NULL, &c, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "backwards");
  CHECK_INT(cron_parse("0 0 * * 1,,2", NULL, &c, &e), 0); /* empty list items are skipped */
  CHECK_INT(cron_parse("@often", NULL, &c, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "unknown macro");
  CHECK_INT(cron_parse("0 7 * * *", "Mars/Olympus", &c, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "unknown time zone 'Mars/Olympus'");
  CHECK_INT(cron_parse("0 7 * * *", "../../etc/passwd", &c, &e), ERR_INVALID);
  CHECK_INT(cron_parse(NULL, NULL, &c, &e), ERR_INVALID);
}

static void test_duration(void) {
  double s;
  struct err e;
  CHECK_INT(duration_parse("15s", &s, &e), 0);
  CHECK(s == 15);
  CHECK_INT(duration_parse("5m", &s, &e), 0);
  CHECK(s == 300);
  CHECK_INT(duration_parse("2h", &s, &e), 0);
  CHECK(s == 7200);
  CHECK_INT(duration_parse("1d", &s, &e), 0);
  CHECK(s == 86400);
  CHECK_INT(duration_parse("1h30m", &s, &e), 0);
  CHECK(s == 5400);
  CHECK_INT(duration_parse("500ms", &s, &e), 0);
  CHECK(s == 0.5);
  CHECK_INT(duration_parse("1.5s", &s, &e), 0);
  CHECK(s == 1.5);
  const char *bad[] = {"", "15", "5x", "-1s", "0s", "s", "1e9999s", "1 s", NULL};
  for (int i = 0; bad[i]; i++) {
    CHECK_INT(duration_parse(bad[i], &s, &e), ERR_INVALID);
    CHECK_CONTAINS(e.msg, "bad duration");
  }
  CHECK_INT(duration_parse(NULL, &s, &e), ERR_INVALID);
}

static void test_timestamp(void) {
  double t;
  struct err e;
  CHECK_INT(timestamp_parse("2026-03-29T01:00:00Z", &t, &e), 0);
  CHECK(t == 1774746000.0);
  CHECK_INT(timestamp_parse("2026-03-29T03:00:00+02:00", &t, &e), 0);
  CHECK(t == 1774746000.0);
  CHECK_INT(timestamp_parse("2026-03-28T20:00-0500", &t, &e), 0);
  CHECK(t == 1774746000.0);
  CHECK_INT(timestamp_parse("2026-03-29 01:00:00.25Z", &t, &e), 0);
  CHECK(t == 1774746000.25);
  CHECK_INT(timestamp_parse("2026-03-29T01:00:00", &t, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "has no zone");
  CHECK_INT(timestamp_parse("2026-02-30T00:00:00Z", &t, &e), ERR_INVALID);
  CHECK_INT(timestamp_parse("2026-13-01T00:00:00Z", &t, &e), ERR_INVALID);
  CHECK_INT(timestamp_parse("tomorrow", &t, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "bad timestamp 'tomorrow'");
  char buf[32];
  timestamp_format_utc(1774746000.7, buf, sizeof buf);
  CHECK_STR(buf, "2026-03-29T01:00:00Z");
}

/* Randomised cross-check against a brute-force minute-by-minute search
 * that matches the wall clock in the zone. That reference is exact for UTC,
 * for zones without DST, and for any zone when the minute or hour field is
 * starred (those follow the wall clock across DST changes). */
static unsigned rng = 12345;
static unsigned rnd(unsigned n) {
  rng = rng * 1103515245u + 12345u;
  return (rng >> 8) % n;
}

static void rand_field(char *out, size_t n, int lo, int hi, int star_pct) {
  unsigned k = rnd(100);
  if (k < (unsigned)star_pct) {
    snprintf(out, n, "*");
  } else if (k < (unsigned)star_pct + 15) {
    snprintf(out, n, "*/%d", 1 + (int)rnd((unsigned)(hi - lo) / 2 + 1));
  } else if (k < (unsigned)star_pct + 30) {
    int a = lo + (int)rnd((unsigned)(hi - lo + 1)), b = a + (int)rnd((unsigned)(hi - a + 1));
    snprintf(out, n, "%d-%d", a, b);
  } else {
    int a = lo + (int)rnd((unsigned)(hi - lo + 1)), b = lo + (int)rnd((unsigned)(hi - lo + 1));
    snprintf(out, n, "%d,%d", a, b);
  }
}

static int wall_match(const struct cron *c, const struct tm *t) {
  int d = (c->dom >> t->tm_mday) & 1, w = (c->dow >> t->tm_wday) & 1;
  int day = (c->dom_star || c->dow_star) ? (d && w) : (d || w);
  return ((c->minute >> t->tm_min) & 1) && ((c->hour >> t->tm_hour) & 1) &&
         ((c->month >> (t->tm_mon + 1)) & 1) && day;
}

static void test_random_vs_brute_force(void) {
  const char *zones[] = {"UTC", "Asia/Kolkata", "America/New_York", "Europe/Paris"};
  int checked = 0, mismatches = 0;
  for (int i = 0; i < 400; i++) {
    char f[5][32], expr[200];
    rand_field(f[0], 32, 0, 59, 30);
    rand_field(f[1], 32, 0, 23, 40);
    rand_field(f[2], 32, 1, 31, 70);
    rand_field(f[3], 32, 1, 12, 75);
    rand_field(f[4], 32, 0, 6, 70);
    snprintf(expr, sizeof expr, "%s %s %s %s %s", f[0], f[1], f[2], f[3], f[4]);
    const char *tz = zones[rnd(4)];
    struct cron c;
    struct err e;
    if (cron_parse(expr, tz, &c, &e)) continue;
    int dst_zone = !strcmp(tz, "America/New_York") || !strcmp(tz, "Europe/Paris");
    if (dst_zone && !c.min_star && !c.hour_star) continue; /* Vixie rules differ there */
    /* start: a random minute of 2026, often near a DST change */
    time_t start = iso("2026-01-01T00:00:00Z") + (time_t)rnd(365 * 1440) * 60 + (time_t)rnd(60);
    if (rnd(3) == 0) start = iso("2026-03-08T05:00:00Z") + (time_t)rnd(60 * 24) * 60;
    if (rnd(4) == 0) start = iso("2026-10-25T00:00:00Z") + (time_t)rnd(60 * 24 * 8) * 60;
    setenv("TZ", tz, 1);
    tzset();
    time_t want = 0;
    for (time_t t = start - start % 60 + 60; t < start + 20 * 86400; t += 60) {
      struct tm lt;
      localtime_r(&t, &lt);
      if (wall_match(&c, &lt)) {
        want = t;
        break;
      }
    }
    unsetenv("TZ");
    tzset();
    time_t got = 0;
    int rc = cron_next(&c, start, &got, &e);
    checked++;
    if (want ? (rc != 0 || got != want) : (rc == 0 && got < start + 20 * 86400)) {
      mismatches++;
      if (mismatches < 5)
        fprintf(stderr, "cron '%s' tz %s after %lld: got %lld want %lld\n", expr, tz,
                (long long)start, (long long)got, (long long)want);
    }
  }
  CHECK(checked > 150);
  CHECK_INT(mismatches, 0);
}

/* Fire times are shown with their zone: the named zone's wall time and
 * offset (both sides of a DST change), and the process's zone untouched. */
static void test_format_zoned(void) {
  char out[64];
  double winter = 1764662400; /* 2025-12-02T08:00:00Z */
  double summer = 1751443200; /* 2025-07-02T08:00:00Z */
  cron_format_zoned(winter, "Europe/Paris", 1, out, sizeof out);
  CHECK_STR(out, "2025-12-02T09:00:00+01:00");
  cron_format_zoned(summer, "Europe/Paris", 1, out, sizeof out);
  CHECK_STR(out, "2025-07-02T10:00:00+02:00");
  cron_format_zoned(winter, "Europe/Paris", 0, out, sizeof out);
  CHECK_STR(out, "2025-12-02 09:00:00 CET");
  cron_format_zoned(summer, "America/New_York", 0, out, sizeof out);
  CHECK_STR(out, "2025-07-02 04:00:00 EDT");
  cron_format_zoned(winter, "Asia/Kolkata", 1, out, sizeof out);
  CHECK_STR(out, "2025-12-02T13:30:00+05:30");
  cron_format_zoned(winter, "UTC", 1, out, sizeof out);
  CHECK_STR(out, "2025-12-02T08:00:00+00:00");
  const char *before = getenv("TZ");
  char saved[64] = "";
  if (before) snprintf(saved, sizeof saved, "%s", before);
  cron_format_zoned(winter, "Asia/Tokyo", 0, out, sizeof out);
  CHECK_STR(out, "2025-12-02 17:00:00 JST");
  CHECK(before ? getenv("TZ") && !strcmp(getenv("TZ"), saved) : getenv("TZ") == NULL);
}

int main(void) {
  test_format_zoned();
  test_basic();
  test_dom_dow();
  test_tz();
  test_dst_paris();
  test_dst_new_york();
  test_process_tz_untouched();
  test_errors();
  test_duration();
  test_timestamp();
  test_random_vs_brute_force();
  return TEST_END();
}
