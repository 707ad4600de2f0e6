/* cluster.c - the `cluster` config table, connecting, and the schema. */
#define _GNU_SOURCE
#include "cluster.h"

#include <cjson/cJSON.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "secrets.h"
#include "store.h"

/* ================================================================ schema */

/* Each entry takes the schema from version i to i + 1, in one transaction.
 * Entries are never edited once released; a change is a new entry. Who
 * owns which tables: 1 the cluster's members; 2 the scheduler (sched/:
 * schedules, slot claims, runs and their leases, ctx.state, events); 3 the
 * approval queue and the audit chain (policy/ through cluster_*). */
static const char *const migrations[] = {
    /* 0 -> 1: members. A node row is a daemon's heartbeat: `instance`
     * tells a restarted daemon from the one before it under the same name. */
    "CREATE TABLE luagent_workspace ("
    "  id INTEGER PRIMARY KEY CHECK (id = 1), name TEXT NOT NULL,"
    "  created DOUBLE PRECISION NOT NULL);"
    "CREATE TABLE luagent_nodes ("
    "  node TEXT PRIMARY KEY, instance TEXT NOT NULL, host TEXT, pid INTEGER,"
    "  version TEXT, started DOUBLE PRECISION NOT NULL,"
    "  heartbeat DOUBLE PRECISION NOT NULL, stopped DOUBLE PRECISION);",
    /* 1 -> 2: the scheduler (sched/daemon_cluster*.c). Times are the
     * database's clock. luagent_schedules: the shared schedule of an
     * automation; its row lock serializes the claims of that automation, so
     * the modes hold across hosts. luagent_files: the content hash each
     * node runs. luagent_imports: what `cluster migrate` copied, so a second
     * migrate copies nothing twice (even events consumed since). */
    "CREATE TABLE luagent_schedules ("
    "  automation TEXT PRIMARY KEY, next_fire DOUBLE PRECISION, trigger_key TEXT,"
    "  enabled BOOLEAN, updated DOUBLE PRECISION, updated_by TEXT);"
    "CREATE TABLE luagent_files ("
    "  automation TEXT NOT NULL, node TEXT NOT NULL, hash TEXT NOT NULL,"
    "  seen DOUBLE PRECISION NOT NULL, PRIMARY KEY (automation, node));"
    /* One row per due slot of an automation: the primary key is what makes
     * a slot run once across the cluster. */
    "CREATE TABLE luagent_slots ("
    "  automation TEXT NOT NULL, slot DOUBLE PRECISION NOT NULL, node TEXT NOT NULL,"
    "  claimed DOUBLE PRECISION NOT NULL, run_id TEXT, PRIMARY KEY (automation, slot));"
    "CREATE INDEX luagent_slots_by_claimed ON luagent_slots (claimed);"
    /* The run journal of automations. status: queued (waiting for a host,
     * mode queued), running (node holds it until lease_until), ok, failed,
     * timeout, crashed, interrupted, skipped. rerun: the automation said
     * on_lost = "rerun" when the run was claimed. */
    "CREATE TABLE luagent_runs ("
    "  id TEXT PRIMARY KEY, automation TEXT NOT NULL, slot DOUBLE PRECISION,"
    "  trigger TEXT, args TEXT, node TEXT, status TEXT NOT NULL,"
    "  queued DOUBLE PRECISION NOT NULL, started DOUBLE PRECISION,"
    "  finished DOUBLE PRECISION, lease_until DOUBLE PRECISION, result TEXT, error TEXT,"
    "  file_hash TEXT, events TEXT, attempt INTEGER NOT NULL DEFAULT 1, takeover_of TEXT,"
    "  cancel TEXT, tool_calls INTEGER NOT NULL DEFAULT 0,"
    "  rerun BOOLEAN NOT NULL DEFAULT false);"
    "CREATE INDEX luagent_runs_by_automation ON luagent_runs (automation, queued);"
    "CREATE INDEX luagent_runs_by_queued ON luagent_runs (queued);"
    "CREATE INDEX luagent_runs_live ON luagent_runs (status, lease_until)"
    "  WHERE status IN ('queued', 'running');"
    "CREATE TABLE luagent_state ("
    "  automation TEXT PRIMARY KEY, state TEXT NOT NULL, updated DOUBLE PRECISION NOT NULL,"
    "  run_id TEXT, tainted BOOLEAN NOT NULL DEFAULT false, last_run DOUBLE PRECISION,"
    "  last_status TEXT);"
    "CREATE TABLE luagent_events ("
    "  id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, payload TEXT,"
    "  created DOUBLE PRECISION NOT NULL, tainted BOOLEAN NOT NULL DEFAULT false,"
    "  node TEXT);"
    "CREATE TABLE luagent_imports ("
    "  what TEXT NOT NULL, key TEXT NOT NULL, imported DOUBLE PRECISION NOT NULL,"
    "  PRIMARY KEY (what, key));",
    /* 2 -> 3: approvals and the audit chain (cluster_queue.h). An approval
     * row's `source` names the SQLite row it was imported from (unique, so
     * importing twice adds nothing); decision_sig signs an approval with the
     * audit key when audit.sign is on (cluster_queue.h). One audit chain per workspace:
     * luagent_audit_head is the row every append locks; `rows` is the count
     * it vouches for, `sig` its Ed25519 signature when audit.sign is on.
     * node is the appending host (NULL for rows imported from SQLite). */
    "CREATE TABLE luagent_approvals ("
    "  id BIGSERIAL PRIMARY KEY, created DOUBLE PRECISION NOT NULL, node TEXT, run_id TEXT,"
    "  tool TEXT NOT NULL, caller_kind TEXT NOT NULL, caller_name TEXT, impact TEXT,"
    "  reason TEXT, args TEXT NOT NULL, args_hash TEXT NOT NULL,"
    "  status TEXT NOT NULL DEFAULT 'pending', decided DOUBLE PRECISION, decided_by TEXT,"
    "  decision_reason TEXT, new_args TEXT, approved_hash TEXT, decision_sig TEXT,"
    "  source TEXT UNIQUE);"
    "CREATE INDEX luagent_approvals_pending ON luagent_approvals (id)"
    "  WHERE status = 'pending';"
    "CREATE TABLE luagent_audit ("
    "  seq BIGINT PRIMARY KEY, node TEXT, ts DOUBLE PRECISION NOT NULL, run_id TEXT,"
    "  caller_kind TEXT, caller_name TEXT, tool TEXT, args_hash TEXT, decision TEXT NOT NULL,"
    "  decided_by TEXT, approver TEXT, status TEXT, duration_ms DOUBLE PRECISION, detail TEXT,"
    "  prev_hash TEXT NOT NULL, hash TEXT NOT NULL);"
    "CREATE TABLE luagent_audit_head ("
    "  id INTEGER PRIMARY KEY CHECK (id = 1), seq BIGINT NOT NULL, rows BIGINT NOT NULL,"
    "  hash TEXT NOT NULL, sig TEXT, node TEXT, updated DOUBLE PRECISION);"
    "INSERT INTO luagent_audit_head (id, seq, rows, hash) VALUES (1, 0, 0,"
    "  '0000000000000000000000000000000000000000000000000000000000000000');",
};
#define NMIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

/* pg_advisory_lock key for migrations ("luagent" as a number): any other
 * user of the database is unlikely to hold it. */
#define SCHEMA_LOCK "7815616578233460"

int cluster_schema_version(void) { return NMIGRATIONS; }

int cluster_schema_read(struct pg *p, int *version, struct err *e) {
  PGresult *r;
  *version = 0;
  if (pg_query(p, "SELECT to_regclass('luagent_schema') IS NOT NULL", 0, NULL, &r, e))
    return ERR_IO;
  int exists = !strcmp(pg_text(r, 0, 0), "t");
  PQclear(r);
  if (!exists) return 0;
  if (pg_query(p, "SELECT max(version) FROM luagent_schema", 0, NULL, &r, e)) return ERR_IO;
  *version = (int)pg_number(r, 0, 0, 0);
  PQclear(r);
  return 0;
}

static int migrate(struct pg *p, struct err *e) {
  int v, rc = 0;
  if (pg_exec(p, "SELECT pg_advisory_lock(" SCHEMA_LOCK ")", e)) return ERR_IO;
  /* Read under the lock: another host may have just migrated. */
  if (cluster_schema_read(p, &v, e)) goto out;
  if (v > NMIGRATIONS) {
    rc = err_set(e, ERR_INVALID, "cluster",
                 "cluster database %s: schema version %d is newer than this luagent "
                 "understands (%d); upgrade luagent on this host",
                 pg_where(p), v, NMIGRATIONS);
    goto out;
  }
  for (; v < NMIGRATIONS; v++) {
    char ver[16];
    snprintf(ver, sizeof ver, "%d", v + 1);
    const char *params[] = {ver};
    if (pg_begin(p, e) ||
        pg_exec(p, "CREATE TABLE IF NOT EXISTS luagent_schema (version INTEGER NOT NULL,"
                   " applied DOUBLE PRECISION NOT NULL)", e) ||
        pg_exec(p, migrations[v], e) ||
        pg_query(p,
                 "INSERT INTO luagent_schema VALUES ($1::int,"
                 " extract(epoch from clock_timestamp()))",
                 1, params, NULL, e) ||
        pg_commit(p, e)) {
      pg_rollback(p);
      err_prefix(e, "cluster schema %d -> %d", v, v + 1);
      goto out;
    }
  }
out:
  if (e && e->rc && !rc) rc = e->rc;
  {
    struct err ignore = {0};
    pg_exec(p, "SELECT pg_advisory_unlock(" SCHEMA_LOCK ")", &ignore);
  }
  return rc;
}

/* The database's workspace: claimed by the first to open it, else it must
 * be ours (cluster.h). */
static int check_workspace(struct pg *p, const char *ws, struct err *e) {
  const char *params[] = {*ws ? ws : "default"};
  PGresult *r;
  if (pg_query(p,
               "INSERT INTO luagent_workspace VALUES (1, $1, extract(epoch from clock_timestamp()))"
               " ON CONFLICT (id) DO NOTHING",
               1, params, NULL, e) ||
      pg_query(p, "SELECT name FROM luagent_workspace WHERE id = 1", 0, NULL, &r, e))
    return ERR_IO;
  int rc = 0;
  if (strcmp(pg_text(r, 0, 0), params[0]))
    rc = err_set(e, ERR_INVALID, "cluster_workspace",
                 "cluster database %s serves workspace '%s', and this one is '%s' "
                 "(cluster.workspace, else luagent.lua's name): give each workspace its own "
                 "database or schema",
                 pg_where(p), pg_text(r, 0, 0), params[0]);
  PQclear(r);
  return rc;
}

int cluster_open(const struct cluster_opts *o, struct pg **out, struct err *e) {
  struct pg *p;
  err_clear(e);
  if (pg_connect(o->url, o->node, &p, e)) return ERR_IO;
  int rc = migrate(p, e);
  if (!rc) rc = check_workspace(p, o->workspace, e);
  if (rc) {
    pg_close(p);
    return rc;
  }
  *out = p;
  return 0;
}

int cluster_now(struct pg *p, double *now, struct err *e) {
  PGresult *r;
  if (pg_query(p, "SELECT extract(epoch from clock_timestamp())", 0, NULL, &r, e)) return ERR_IO;
  *now = pg_number(r, 0, 0, 0);
  PQclear(r);
  return 0;
}

/* ================================================================ config */

static int node_valid(const char *s) {
  size_t n = strlen(s);
  if (!n || n > 63) return 0;
  for (size_t i = 0; i < n; i++)
    if (!(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z') &&
        !(s[i] >= '0' && s[i] <= '9') && !strchr("_.-", s[i]))
      return 0;
  return 1;
}

/* The URL of `cluster.postgres`: a string, or { secret = "NAME" } opened
 * from this host's secrets. */
static int load_url(const char *ws, const struct config *cfg, const cJSON *v, char **url,
                    struct err *e) {
  if (cJSON_IsString(v) && *v->valuestring) {
    *url = strdup(v->valuestring);
    return *url ? 0 : err_set(e, ERR_NOMEM, "nomem", "out of memory");
  }
  const cJSON *sec = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "secret") : NULL;
  if (!cJSON_IsString(sec) || cJSON_GetArraySize(v) != 1)
    return err_set(e, ERR_INVALID, "invalid_config",
                   "cluster.postgres must be a connection string (\"postgresql://...\") or "
                   "{ secret = \"NAME\" }");
  unsigned char key[SECRETS_KEY_BYTES];
  struct store *st = NULL;
  size_t len;
  int rc = secrets_load_key(ws, config_string(cfg, "secrets_key_env", NULL), 0, key, e);
  if (!rc) rc = store_open(ws, &st, e);
  if (!rc) rc = secrets_get(st, key, sec->valuestring, url, &len, e);
  sodium_memzero(key, sizeof key);
  store_close(st);
  if (rc) {
    err_prefix(e, "cluster.postgres: secret %s", sec->valuestring);
    if (rc == ERR_NOTFOUND)
      snprintf(e->msg, sizeof e->msg,
               "cluster.postgres: secret %s is not set on this host (luagent secrets set %s)",
               sec->valuestring, sec->valuestring);
    return rc;
  }
  return 0;
}

int cluster_opts_load(const char *ws, const struct config *cfg, struct cluster_opts *o, int *on,
                      struct err *e) {
  static const char *const known[] = {"postgres", "node", "lease_s", "workspace", NULL};
  const cJSON *t = config_get(cfg, "cluster");
  *on = 0;
  if (!t) return 0;
  memset(o, 0, sizeof *o);
  if (config_check_keys(t, "cluster", known, e)) return config_error_at(cfg, "cluster", e);
  const cJSON *pgv = cJSON_GetObjectItemCaseSensitive(t, "postgres");
  if (!pgv)
    return config_error_at(cfg, "cluster",
                           (err_set(e, ERR_INVALID, "invalid_config",
                                    "cluster.postgres is required (the database the hosts share)"),
                            e));
  const cJSON *node = cJSON_GetObjectItemCaseSensitive(t, "node");
  if (node) {
    if (!cJSON_IsString(node) || !node_valid(node->valuestring))
      return config_error_at(cfg, "cluster.node",
                             (err_set(e, ERR_INVALID, "invalid_config",
                                      "cluster.node must be 1-63 of A-Z a-z 0-9 _ . -"),
                              e));
    snprintf(o->node, sizeof o->node, "%s", node->valuestring);
  } else {
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    host[strcspn(host, "\0")] = 0;
    for (char *c = host; *c; c++)
      if (!strchr("_.-", *c) && !(*c >= 'a' && *c <= 'z') && !(*c >= 'A' && *c <= 'Z') &&
          !(*c >= '0' && *c <= '9'))
        *c = '-';
    snprintf(o->node, sizeof o->node, "%.63s", *host ? host : "node");
  }
  const cJSON *wsname = cJSON_GetObjectItemCaseSensitive(t, "workspace");
  if (!wsname) wsname = config_get(cfg, "name");
  if (wsname && (!cJSON_IsString(wsname) || !*wsname->valuestring ||
                 strlen(wsname->valuestring) > 64))
    return config_error_at(cfg, "cluster.workspace",
                           (err_set(e, ERR_INVALID, "invalid_config",
                                    "cluster.workspace (default: name) must be a string of 1 to "
                                    "64 bytes"),
                            e));
  snprintf(o->workspace, sizeof o->workspace, "%s", wsname ? wsname->valuestring : "default");
  o->lease_s = config_number(cfg, "cluster.lease_s", CLUSTER_LEASE_DEFAULT);
  if (!(o->lease_s >= 2 && o->lease_s <= 3600))
    return config_error_at(cfg, "cluster.lease_s",
                           (err_set(e, ERR_INVALID, "invalid_config",
                                    "cluster.lease_s must be a number of seconds from 2 to 3600"),
                            e));
  if (load_url(ws, cfg, pgv, &o->url, e)) return config_error_at(cfg, "cluster.postgres", e);
  *on = 1;
  return 0;
}

void cluster_opts_free(struct cluster_opts *o) {
  if (!o || !o->url) return;
  sodium_memzero(o->url, strlen(o->url));
  free(o->url);
  o->url = NULL;
}
