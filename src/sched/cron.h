/* cron.h - time triggers: five-field cron expressions with time zones,
 * `every` durations and `at` timestamps.
 *
 * Cron follows Vixie cron: fields minute hour day-of-month month
 * day-of-week; lists (1,5), ranges (1-5), steps (*\/15, 10-50/20, 5/20),
 * month and weekday names (jan, mon), 0 or 7 for Sunday, and the macros
 * @yearly @annually @monthly @weekly @daily @midnight @hourly. When both
 * day fields are restricted a day matches if EITHER matches; when one of
 * them starts with '*' both must match.
 *
 * Time zones are TZ database names ("Europe/Paris"), evaluated in that zone
 * with the system's zoneinfo. Across daylight-saving changes, again as in
 * Vixie cron: a job with a fixed hour and minute whose time is skipped by a
 * spring-forward gap runs once at the first instant after the gap; in a
 * fall-back overlap it runs only at the first occurrence. Jobs whose minute
 * or hour field starts with '*' follow the wall clock (they run in both
 * occurrences of a repeated hour and not at all in a skipped one).
 */
#ifndef LUAGENT_CRON_H
#define LUAGENT_CRON_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "err.h"

/* A parsed expression; a plain value the caller owns (no free needed). */
struct cron {
  uint64_t minute;                                 /* bit n: minute n (0-59) */
  uint32_t hour;                                   /* bit n: hour n (0-23) */
  uint32_t dom;                                    /* bit n: day n (1-31) */
  uint16_t month;                                  /* bit n: month n (1-12) */
  uint8_t dow;                                     /* bit n: weekday n (0 = Sunday .. 6) */
  uint8_t min_star, hour_star, dom_star, dow_star; /* field began with '*' */
  char tz[64];                                     /* zone name; "" = the process's local time */
};

/* Parses expr in zone tz (NULL or "" for local time). Errors name the field,
 * the bad text and the allowed range; an unknown zone is an error. */
int cron_parse(const char *expr, const char *tz, struct cron *out, struct err *e);

/* The first fire time strictly after `after` (seconds since the epoch).
 * Returns ERR_NOTFOUND if the expression never fires within 8 years
 * (for example "0 0 31 2 *"). */
int cron_next(const struct cron *c, time_t after, time_t *next, struct err *e);

/* Checks that tz names an installed TZ database zone. */
int cron_tz_valid(const char *tz, struct err *e);

/* Parses a duration: one or more <number><unit> with unit ms, s, m, h or d
 * ("15s", "5m", "2h", "1d", "1h30m", "1.5s"). The total must be > 0. */
int duration_parse(const char *s, double *seconds, struct err *e);

/* Parses an ISO-8601 timestamp with an explicit zone: "2026-12-01T07:00:00Z",
 * "2026-12-01T09:00:00+02:00", "2026-12-01 07:00Z" (seconds and fraction
 * optional). */
int timestamp_parse(const char *s, double *epoch, struct err *e);

/* Formats t in zone tz (NULL or "": the process's local time) with the
 * zone shown: iso = 1 gives "2026-12-02T09:00:00+01:00", iso = 0 gives
 * "2026-12-02 09:00:00 CET". out should have 48 bytes. */
void cron_format_zoned(double t, const char *tz, int iso, char *out, size_t n);

/* Formats t as "YYYY-MM-DDTHH:MM:SSZ" into out (at least 21 bytes). */
void timestamp_format_utc(double t, char *out, size_t n);

#endif
