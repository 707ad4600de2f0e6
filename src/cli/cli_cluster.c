/* cli_cluster.c - `luagent cluster status [--json]` and `luagent cluster
 * migrate [--force] [--json]`, and connecting for the other commands (see
 * cli_cluster.h). */
#include "cli_cluster.h"
#include "cluster_runs_read.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cluster.h"
#include "cluster_migrate.h"
#include "cluster_queue.h"
#include "config.h"
#include "daemon.h"
#include "store.h"
#include "util.h"

#define NOW "extract(epoch from clock_timestamp())"

/* Opens the cluster for a `cluster` subcommand, or says why not (exit
 * code: 2 for configuration, 1 for the database). */
static int open_or_fail(const char *ws, struct pg **pg, char *node, size_t n) {
  struct err e = {0};
  int rc = cluster_connect(ws, pg, node, n, &e);
  if (rc == 1) return 0;
  if (rc == 0)
    return cli_fail(2,
                    "cluster: luagent.lua has no cluster table (see README, Running several "
                    "hosts)");
  return cli_fail(rc == ERR_IO ? 1 : 2, "%s", e.msg);
}

static const char *age_text(double s, char *buf, size_t n) {
  if (s < 0) s = 0;
  if (s < 120)
    snprintf(buf, n, "%.1fs ago", s);
  else if (s < 7200)
    snprintf(buf, n, "%.0fm ago", s / 60);
  else
    snprintf(buf, n, "%.0fh ago", s / 3600);
  return buf;
}

static int status(const char *ws, int json) {
  struct pg *pg = NULL;
  char node[64];
  int code = open_or_fail(ws, &pg, node, sizeof node);
  if (code) return code;
  struct err e = {0};
  struct config *cfg = NULL;
  double lease = CLUSTER_LEASE_DEFAULT;
  if (!config_load(ws, &cfg, &e)) {
    lease = config_number(cfg, "cluster.lease_s", CLUSTER_LEASE_DEFAULT);
    config_free(cfg);
  }
  int version = 0;
  PGresult *nodes = NULL, *leases = NULL, *lag = NULL, *latest = NULL, *queue = NULL;
  char ls[32];
  snprintf(ls, sizeof ls, "%.3f", lease * 2);
  const char *p[] = {ls};
  if (cluster_schema_read(pg, &version, &e) ||
      pg_query(pg,
               "SELECT n.node, n.host, n.pid, n.version, " NOW " - n.heartbeat,"
               " n.stopped IS NOT NULL, (SELECT count(*) FROM luagent_runs r WHERE r.node ="
               " n.node AND r.status = 'running'), " NOW " - n.heartbeat <= $1::float8"
               " AND n.stopped IS NULL FROM luagent_nodes n ORDER BY n.node",
               1, p, &nodes, &e) ||
      pg_query(pg,
               "SELECT id, automation, node, lease_until - " NOW ", attempt FROM luagent_runs"
               " WHERE status = 'running' ORDER BY automation, id",
               0, NULL, &leases, &e) ||
      /* how late the slots claimed in the last 10 minutes started */
      pg_query(pg,
               "SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY r.started - s.slot),"
               " percentile_cont(0.99) WITHIN GROUP (ORDER BY r.started - s.slot),"
               " max(r.started - s.slot) FROM luagent_slots s JOIN luagent_runs r ON r.id ="
               " s.run_id WHERE s.claimed > " NOW " - 600 AND r.started IS NOT NULL",
               0, NULL, &lag, &e) ||
      pg_query(pg,
               "SELECT DISTINCT ON (s.automation) s.automation, s.slot, s.node, r.started -"
               " s.slot, r.status FROM luagent_slots s LEFT JOIN luagent_runs r ON r.id ="
               " s.run_id ORDER BY s.automation, s.slot DESC",
               0, NULL, &latest, &e) ||
      pg_query(pg,
               "SELECT (SELECT count(*) FROM luagent_events), (SELECT count(*) FROM"
               " luagent_runs WHERE status = 'queued')",
               0, NULL, &queue, &e)) {
    code = cli_fail(1, "cluster status: %s", e.msg);
    goto out;
  }
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "database", pg_where(pg));
    cJSON_AddNumberToObject(o, "schema", version);
    cJSON_AddNumberToObject(o, "schema_binary", cluster_schema_version());
    cJSON_AddStringToObject(o, "this_node", node);
    cJSON *na = cJSON_AddArrayToObject(o, "nodes");
    for (int i = 0; i < PQntuples(nodes); i++) {
      cJSON *x = cJSON_CreateObject();
      cJSON_AddStringToObject(x, "node", pg_text(nodes, i, 0));
      cJSON_AddStringToObject(x, "host", pg_text(nodes, i, 1));
      cJSON_AddNumberToObject(x, "pid", pg_number(nodes, i, 2, 0));
      cJSON_AddStringToObject(x, "version", pg_text(nodes, i, 3));
      cJSON_AddNumberToObject(x, "heartbeat_age_s", pg_number(nodes, i, 4, 0));
      cJSON_AddStringToObject(x, "state",
                              !strcmp(pg_text(nodes, i, 5), "t")   ? "stopped"
                              : !strcmp(pg_text(nodes, i, 7), "t") ? "alive"
                                                                   : "dead");
      cJSON_AddNumberToObject(x, "runs", pg_number(nodes, i, 6, 0));
      cJSON_AddItemToArray(na, x);
    }
    cJSON *la = cJSON_AddArrayToObject(o, "leases");
    for (int i = 0; i < PQntuples(leases); i++) {
      cJSON *x = cJSON_CreateObject();
      cJSON_AddStringToObject(x, "run_id", pg_text(leases, i, 0));
      cJSON_AddStringToObject(x, "automation", pg_text(leases, i, 1));
      cJSON_AddStringToObject(x, "node", pg_text(leases, i, 2));
      cJSON_AddNumberToObject(x, "expires_in_s", pg_number(leases, i, 3, 0));
      cJSON_AddNumberToObject(x, "attempt", pg_number(leases, i, 4, 1));
      cJSON_AddItemToArray(la, x);
    }
    cJSON *lg = cJSON_AddObjectToObject(o, "lag");
    cJSON_AddNumberToObject(lg, "slots_10min", pg_number(lag, 0, 0, 0));
    cJSON_AddNumberToObject(lg, "p50_s", pg_number(lag, 0, 1, 0));
    cJSON_AddNumberToObject(lg, "p99_s", pg_number(lag, 0, 2, 0));
    cJSON_AddNumberToObject(lg, "max_s", pg_number(lag, 0, 3, 0));
    cJSON *lat = cJSON_AddArrayToObject(lg, "latest");
    for (int i = 0; i < PQntuples(latest); i++) {
      cJSON *x = cJSON_CreateObject();
      cJSON_AddStringToObject(x, "automation", pg_text(latest, i, 0));
      cJSON_AddNumberToObject(x, "slot", pg_number(latest, i, 1, 0));
      cJSON_AddStringToObject(x, "node", pg_text(latest, i, 2));
      if (*pg_text(latest, i, 3))
        cJSON_AddNumberToObject(x, "late_s", pg_number(latest, i, 3, 0));
      else
        cJSON_AddNullToObject(x, "late_s");
      cJSON_AddStringToObject(x, "status", pg_text(latest, i, 4));
      cJSON_AddItemToArray(lat, x);
    }
    cJSON_AddNumberToObject(o, "events_waiting", pg_number(queue, 0, 0, 0));
    cJSON_AddNumberToObject(o, "runs_queued", pg_number(queue, 0, 1, 0));
    cli_print_json(o);
    cJSON_Delete(o);
    goto out;
  }
  printf("cluster database %s: schema %d (this luagent writes %d)%s\n", pg_where(pg), version,
         cluster_schema_version(),
         version > cluster_schema_version() ? ": NEWER, upgrade luagent on this host" : "");
  printf("\n%-20s %-20s %8s %-12s %-8s %s\n", "NODE", "HOST", "PID", "HEARTBEAT", "STATE", "RUNS");
  for (int i = 0; i < PQntuples(nodes); i++) {
    char age[32];
    const char *st = !strcmp(pg_text(nodes, i, 5), "t")   ? "stopped"
                     : !strcmp(pg_text(nodes, i, 7), "t") ? "alive"
                                                          : "dead";
    /* every host's text (its hostname is any bytes sethostname took) */
    char *nd = cli_safe(pg_text(nodes, i, 0), 80), *ho = cli_safe(pg_text(nodes, i, 1), 80);
    printf("%-20s %-20.20s %8s %-12s %-8s %s%s\n", nd, ho, pg_text(nodes, i, 2),
           age_text(pg_number(nodes, i, 4, 0), age, sizeof age), st, pg_text(nodes, i, 6),
           strcmp(pg_text(nodes, i, 0), node) ? "" : "  (this host)");
    free(nd);
    free(ho);
  }
  if (!PQntuples(nodes)) printf("(no daemon has joined yet)\n");
  printf("\nleases: %d run(s) running\n", PQntuples(leases));
  for (int i = 0; i < PQntuples(leases); i++) {
    char *id = cli_safe(pg_text(leases, i, 0), 60), *au = cli_safe(pg_text(leases, i, 1), 80),
         *nd = cli_safe(pg_text(leases, i, 2), 80);
    printf("  %-28s %-24s on %-16s expires in %.1fs%s\n", id, au, nd, pg_number(leases, i, 3, 0),
           pg_number(leases, i, 3, 0) < 0 ? " (expired: another host will sweep it)" : "");
    free(id);
    free(au);
    free(nd);
  }
  printf("\nlag: %s slot(s) claimed in the last 10 minutes", pg_text(lag, 0, 0));
  if (pg_number(lag, 0, 0, 0) > 0)
    printf(", started late by p50 %.3fs, p99 %.3fs, max %.3fs", pg_number(lag, 0, 1, 0),
           pg_number(lag, 0, 2, 0), pg_number(lag, 0, 3, 0));
  printf("\n");
  for (int i = 0; i < PQntuples(latest); i++) {
    char when[32];
    time_t t = (time_t)pg_number(latest, i, 1, 0);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
    char late[32] = "not started";
    if (*pg_text(latest, i, 3))
      snprintf(late, sizeof late, "%.3fs late", pg_number(latest, i, 3, 0));
    char *au = cli_safe(pg_text(latest, i, 0), 80), *nd = cli_safe(pg_text(latest, i, 2), 80),
         *st = cli_safe(pg_text(latest, i, 4), 40);
    printf("  %-24s latest slot %s on %s, %s (%s)\n", au, when, nd, late, st);
    free(au);
    free(nd);
    free(st);
  }
  printf("\nqueue: %s event(s) waiting, %s run(s) queued\n", pg_text(queue, 0, 0),
         pg_text(queue, 0, 1));
out:
  PQclear(nodes);
  PQclear(leases);
  PQclear(lag);
  PQclear(latest);
  PQclear(queue);
  pg_close(pg);
  return code;
}

static int migrate(const char *ws, int force, int json) {
  int pid = 0;
  if (daemon_running(ws, &pid))
    return cli_fail(1,
                    "cluster migrate: a daemon (pid %d) runs on this workspace; stop it first, "
                    "so the state copied is the state it leaves",
                    pid);
  struct pg *pg = NULL;
  char node[64];
  int code = open_or_fail(ws, &pg, node, sizeof node);
  if (code) return code;
  struct store *st = NULL;
  struct err e = {0};
  struct cluster_migrate_counts n;
  long long approvals = 0, audit = 0;
  if (store_open(ws, &st, &e)) {
    pg_close(pg);
    return cli_fail(1, "cluster migrate: %s", e.msg);
  }
  int rc = pg_begin(pg, &e);
  if (!rc) rc = cluster_migrate_store(pg, st, node, force, &n, &e);
  if (!rc) rc = pg_commit(pg, &e);
  if (rc) pg_rollback(pg);
  /* The approvals and the audit chain, each in a transaction of its own
   * (cluster_queue.h): like the copy above, each is idempotent, so a
   * migrate cut short here is finished by running it again. */
  if (!rc) rc = cluster_import_approvals(pg, st, &approvals, &e);
  if (!rc) rc = cluster_import_audit(pg, st, &audit, &e);
  store_close(st);
  pg_close(pg);
  if (rc) return cli_fail(1, "%s", e.msg);
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "schedules", (double)n.schedules);
    cJSON_AddNumberToObject(o, "states", (double)n.states);
    cJSON_AddNumberToObject(o, "events", (double)n.events);
    cJSON_AddNumberToObject(o, "runs", (double)n.runs);
    cJSON_AddNumberToObject(o, "approvals", (double)approvals);
    cJSON_AddNumberToObject(o, "audit", (double)audit);
    cJSON_AddNumberToObject(o, "already_copied", (double)n.already);
    cJSON_AddNumberToObject(o, "same", (double)n.same);
    cJSON_AddNumberToObject(o, "replaced", (double)(force ? n.conflicts : 0));
    cli_print_json(o);
    cJSON_Delete(o);
    return 0;
  }
  printf("copied %lld schedule(s), %lld ctx.state(s), %lld queued event(s), %lld run(s)",
         n.schedules, n.states, n.events, n.runs);
  if (approvals || audit) printf(", %lld approval(s), %lld audit row(s)", approvals, audit);
  printf(" into the cluster\n");
  if (n.already)
    printf("%lld row(s) were copied by an earlier migrate (left as they are)\n", n.already);
  if (n.same) printf("%lld row(s) the cluster already had, equal\n", n.same);
  if (force && n.conflicts)
    printf("%lld row(s) differed and were replaced (--force); first: %s\n", n.conflicts,
           n.first_conflict);
  return 0;
}

int cli_cluster(const struct cli_opts *o, int argc, char **argv) {
  if (argc < 2) return cli_usage_fail("cluster", NULL);
  const char *sub = argv[1];
  if (!cli_usage_has("cluster", sub)) return cli_unknown_sub("cluster", sub);
  int json = o->json, force = 0;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (!strcmp(argv[i], "--force") && !strcmp(sub, "migrate"))
      force = 1;
    else
      return cli_usage_fail("cluster", "cluster %s: unknown option %s", sub, argv[i]);
  }
  if (!strcmp(sub, "status")) return status(o->workspace, json);
  return migrate(o->workspace, force, json);
}
