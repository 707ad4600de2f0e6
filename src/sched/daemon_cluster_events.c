/* daemon_cluster_events.c - the cluster's event queue (luagent_events):
 * a host takes the events its own `on` automations match, each with the
 * runs it starts in one transaction, and leaves the rest to the hosts that
 * have listeners for them (see daemon__cl_events).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "automation.h"
#include "cluster.h"
#include "daemon_cluster_impl.h"
#include "daemon_impl.h"
#include "json.h"
#include "util.h"

/* ---------------------------------------------------------------- events */

/* The array literal of this host's listeners' name filters. */
static void event_filters(struct daemon *d, struct sbuf *b) {
  sbuf_puts(b, "{");
  int n = 0;
  DAEMON_EACH_LISTENER(ent, d, NULL) {
    struct sbuf re = {0};
    automation_event_regex(ent->a->event, &re);
    sbuf_puts(b, n++ ? ",\"" : "\"");
    for (const char *p = re.s; *p; p++) {
      if (*p == '"' || *p == '\\') sbuf_append(b, "\\", 1);
      sbuf_append(b, p, 1);
    }
    sbuf_puts(b, "\"");
    sbuf_free(&re);
  }
  sbuf_puts(b, "}");
}

void daemon__cl_events(struct daemon *d) {
  struct pg *pg = daemon__cl_pg(d);
  int nlisten = 0;
  DAEMON_EACH_LISTENER(ent, d, NULL) nlisten++;
  /* A host with no `on` automation leaves the queue to those that have. */
  if (!nlisten || d->stopping) return;
  /* Events are taken a few at a time, each with the runs it starts in one
   * transaction; as many as the runs they can start fit in one. Only the
   * events one of this host's listeners matches are taken (and deleted):
   * another host may have automations this one lacks (a rename, a file
   * not copied yet), and an event it has no listener for is left to them.
   * The regex filter is a superset (automation_event_regex); fnmatch
   * decides, and the cursor moves past what it refused. */
  char lim[16], cur[32] = "0";
  snprintf(lim, sizeof lim, "%d",
           nlisten >= MAX_WON ? 1 : (MAX_WON / nlisten < 16 ? MAX_WON / nlisten : 16));
  struct sbuf filters = {0};
  event_filters(d, &filters);
  const char *lp[] = {lim, filters.s, cur};
  for (int round = 0; round < 100; round++) {
    struct err e = {0};
    struct claims c = {.n = 0};
    struct sbuf taken = {0};
    PGresult *r = NULL;
    int ntaken = 0;
    if (pg_begin(pg, &e) ||
        pg_query(pg,
                 "SELECT id, name, payload, tainted FROM luagent_events WHERE id > $3::bigint"
                 " AND name ~ ANY($2::text[]) ORDER BY id LIMIT $1::int FOR UPDATE SKIP LOCKED",
                 3, lp, &r, &e))
      goto fail;
    if (!PQntuples(r)) {
      PQclear(r);
      pg_rollback(pg);
      break;
    }
    sbuf_puts(&taken, "{");
    for (int row = 0; row < PQntuples(r); row++) {
      const char *name = pg_text(r, row, 1);
      const char *payload = PQgetisnull(r, row, 2) ? NULL : pg_text(r, row, 2);
      int matched = 0;
      snprintf(cur, sizeof cur, "%s", pg_text(r, row, 0));
      DAEMON_EACH_LISTENER(ent, d, name) {
        matched++;
        cJSON *t = daemon__event_trigger(ent, name, payload, pg_number(r, row, 0, 0),
                                         !strcmp(pg_text(r, row, 3), "t"));
        daemon__say(d, "%s: event %s", ent->name, name);
        if (daemon__cl_claim_in_tx(d, ent, t, NULL, 0, 0, NULL, 0, 1, NULL, &c, &e)) goto fail;
      }
      if (matched) sbuf_printf(&taken, "%s%s", ntaken++ ? "," : "", cur);
    }
    sbuf_puts(&taken, "}");
    PQclear(r);
    r = NULL;
    if (!ntaken) { /* the filter's superset only: nothing of ours here */
      pg_rollback(pg);
      sbuf_free(&taken);
      continue;
    }
    const char *tp[] = {taken.s};
    if (pg_query(pg, "DELETE FROM luagent_events WHERE id = ANY($1::bigint[])", 1, tp, NULL, &e))
      goto fail;
    sbuf_free(&taken);
    if (daemon__cl_commit_or_fail(d, &c, &e)) break;
    daemon__cl_keepalive(d);
    continue;
  fail:
    sbuf_free(&taken);
    PQclear(r);
    pg_rollback(pg);
    daemon__cl_drop_won(&c);
    daemon__cl_failed(d, &e);
    break;
  }
  sbuf_free(&filters);
}
