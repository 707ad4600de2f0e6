/* automation.h - one automation file: automations/<name>.lua.
 *
 * The file returns a table { name, description, run = function(ctx) end }
 * plus at most one trigger (every, cron [+ tz], at, on) and the options
 * mode, max, timeout, catch_up, enabled, on_lost. Loading evaluates the file in a
 * sandbox with no tools (top-level code only builds the table), checks every
 * field and reports problems with file:line. The source text is kept, so the
 * daemon can run exactly the version that validated even after a broken
 * edit lands on disk.
 */
#ifndef LUAGENT_AUTOMATION_H
#define LUAGENT_AUTOMATION_H

#include <stddef.h>

struct sbuf;

#include "cron.h"
#include "err.h"

enum trig_kind { TRIG_MANUAL, TRIG_EVERY, TRIG_CRON, TRIG_AT, TRIG_EVENT };
enum run_mode { MODE_SINGLE, MODE_QUEUED, MODE_PARALLEL, MODE_RESTART };

struct automation {
  char name[65];
  char *description; /* "" when absent */
  char chunk[256];   /* workspace-relative file name, for messages */
  char *source;      /* the validated text */
  size_t source_len;
  enum trig_kind trig;
  double every_s;         /* TRIG_EVERY */
  struct cron cron;       /* TRIG_CRON */
  double at;              /* TRIG_AT: epoch seconds */
  char event[128];        /* TRIG_EVENT */
  char trigger_text[192]; /* e.g. "every 15s", "cron 0 7 * * 1-5 (Europe/Paris)" */
  enum run_mode mode;
  int max;          /* queued: waiting runs; parallel: concurrent runs */
  double timeout_s; /* 0: the workspace's deadline */
  int catch_up;
  int enabled; /* the file's default; the store may override */
  /* on_lost = "rerun": in a cluster, a run whose host died or lost the
   * database is run again by another host (at most CLUSTER_MAX_ATTEMPTS
   * attempts of one slot); 0 ("interrupt", the default): it is recorded as
   * interrupted and not run again. */
  int rerun_lost;
};

/* Loads and validates source (len bytes) shown as chunkname
 * ("automations/x.lua"). expect_name, if not NULL, is the name the file name
 * implies; a different `name` field is an error. *out is freed with
 * automation_free. Errors carry "chunkname:line: ...". */
int automation_load_source(const char *source, size_t len, const char *chunkname,
                           const char *expect_name, struct automation **out, struct err *e);
/* Reads path, then as above. */
int automation_load_file(const char *path, const char *chunkname, const char *expect_name,
                         struct automation **out, struct err *e);
void automation_free(struct automation *a); /* NULL is a no-op */

/* A stable key of the trigger ("every:15", "cron:0 7 * * *@Europe/Paris"):
 * when it changes, a persisted next-fire time no longer applies. */
void automation_trigger_key(const struct automation *a, char *out, size_t n);

/* A PostgreSQL regular expression (`name ~ re`) that matches at least every
 * event name fnmatch(pattern, name, 0) matches: exact for literals, `*` and
 * `\x`; wider (".*") where a byte-wise glob and a character-wise regex could
 * disagree (`?`, brackets). A prefilter only: callers still run fnmatch. */
void automation_event_regex(const char *pattern, struct sbuf *out);

/* The next fire time strictly after `after` for time triggers; 0 when there
 * is none (manual, event, an `at` already past, a cron that never fires). */
double automation_next_after(const struct automation *a, double after);

/* 1 when a time trigger can never fire after `now`: a cron whose days do
 * not exist ("0 9 31 2 *") or an `at` in the past; why gets the reason
 * ("cron 0 9 31 2 * never fires: ..."). 0 otherwise (and for triggers that
 * are not times). Used for load-time warnings. */
int automation_never_fires(const struct automation *a, double now, char *why, size_t n);

/* The zone a's fire times are shown in: the cron's tz, else NULL (local). */
const char *automation_zone(const struct automation *a);

const char *automation_mode_name(enum run_mode m);
const char *automation_trig_name(enum trig_kind k);

/* True when name is a valid automation name: [a-z][a-z0-9_-]{0,63}. */
int automation_name_valid(const char *name);

#endif
