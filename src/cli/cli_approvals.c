/* cli_approvals.c - `luagent approvals list [--json] [--all] | approve ID [--args JSON]
 * | deny ID [--reason TEXT]`: decides requests that a run waits on (approver
 * = "queue"). Every decision is also appended to the audit chain. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "approver.h"
#include "cli.h"
#include "cluster_queue.h"
#include "config.h"
#include "json.h"
#include "secrets.h"
#include "store.h"
#include "tool.h"
#include "util.h"

static int usage(void) { return cli_usage_fail("approvals", NULL); }

static const char *str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : "";
}

static void print_field(const char *label, const char *s) {
  struct sbuf b = {0};
  sbuf_puts(&b, "");
  util_escape_text(&b, s, strlen(s), 4000);
  printf("    %-8s %s\n", label, b.s);
  sbuf_free(&b);
}

static void print_list(const cJSON *arr) {
  if (!cJSON_GetArraySize(arr)) {
    printf("no pending approvals\n");
    return;
  }
  const cJSON *o;
  cJSON_ArrayForEach(o, arr) {
    time_t t = (time_t)cJSON_GetObjectItem(o, "created")->valuedouble;
    struct tm tm;
    char when[32];
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    printf("#%.0f  %s  %s\n", cJSON_GetObjectItem(o, "id")->valuedouble, str(o, "status"), when);
    char who[300];
    snprintf(who, sizeof who, "%s %s", str(o, "caller_kind"), str(o, "caller_name"));
    print_field("tool:", str(o, "tool"));
    print_field("impact:", str(o, "impact"));
    print_field("caller:", who);
    if (*str(o, "node")) print_field("host:", str(o, "node")); /* cluster: who asked */
    print_field("reason:", str(o, "reason"));
    char *args = json_print(cJSON_GetObjectItem(o, "args"), 0);
    print_field("args:", args ? args : "");
    free(args);
    print_field("hash:", str(o, "args_hash"));
    if (strcmp(str(o, "status"), "pending")) {
      print_field("by:", str(o, "decided_by"));
      if (*str(o, "decision_reason")) print_field("why:", str(o, "decision_reason"));
    }
  }
}

int cli_approvals(const struct cli_opts *o, int argc, char **argv) {
  if (argc < 2) return usage();
  const char *sub = argv[1];
  int json = o->json, all = 0;
  long long id = 0;
  const char *reason = NULL, *newargs = NULL;
  int first = 2;
  if (!strcmp(sub, "approve") || !strcmp(sub, "deny")) {
    if (argc < 3) return usage();
    char *end;
    id = strtoll(argv[2], &end, 10);
    if (*end || id <= 0)
      return cli_fail(2, "approvals %s: '%s' is not an approval id", sub, argv[2]);
    first = 3;
  } else if (strcmp(sub, "list") && strcmp(sub, "ls")) {
    return cli_unknown_sub("approvals", sub);
  }
  for (int i = first; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (!strcmp(argv[i], "--all") && first == 2)
      all = 1;
    else if (!strcmp(argv[i], "--reason") && !strcmp(sub, "deny") && i + 1 < argc)
      reason = argv[++i];
    else if (!strcmp(argv[i], "--args") && !strcmp(sub, "approve") && i + 1 < argc)
      newargs = argv[++i];
    else
      return usage();
  }

  struct err e = {0};
  struct config *cfg = NULL;
  struct store *st = NULL;
  struct cluster_policy *cp = NULL;
  cJSON *na = NULL;
  int rc = 0;
  if (config_load(o->workspace, &cfg, &e)) return cli_fail(2, "%s", e.msg);
  /* With `cluster`, the queue (and the chain a decision goes to) is the
   * one every host shares. */
  struct approval_queue q;
  struct audit_sink sink;
  if ((rc = cluster_policy_open(o->workspace, cfg, &st, &cp, &q, &sink, &e))) {
    rc = cli_fail(rc == ERR_INVALID ? 2 : 1, "%s", e.msg);
    goto out;
  }
  if (first == 2) {
    cJSON *arr = NULL;
    if (q.ops->list(q.ud, all, &arr, &e)) {
      rc = cli_fail(1, "%s", e.msg);
      goto out;
    }
    /* Arguments never hold secret values (only { secret = NAME }), but a
     * value resolved in this process would still be scrubbed. */
    secrets_redact_json(arr);
    if (json) {
      char *txt = json_print(arr, 0); /* the CLI's --json rule: one compact line */
      puts(txt);
      free(txt);
    } else {
      print_list(arr);
    }
    cJSON_Delete(arr);
    goto out;
  }
  if (newargs) {
    na = json_parse_str(newargs, JSON_NO_DUPLICATES, &e);
    if (!na) {
      rc = cli_fail(2, "approvals approve: --args: %s", e.msg);
      goto out;
    }
    if (!cJSON_IsObject(na)) {
      rc = cli_fail(2, "approvals approve: --args must be a JSON object");
      goto out;
    }
  }
  const char *user = getenv("USER");
  char by[160];
  snprintf(by, sizeof by, "operator%s%s", user && *user ? ":" : "", user && *user ? user : "");
  int approve = !strcmp(sub, "approve");
  struct approver_decision d = {.id = id,
                                .approve = approve,
                                .reason = reason,
                                .new_args = na,
                                .caller_kind = "operator",
                                .caller_name = user,
                                .by = by,
                                .decided_by = "approvals-cli",
                                .sign = config_bool(cfg, "audit.sign", 0)};
  char warning[800];
  if (approver_decide_audited_in(&q, &sink, &d, warning, sizeof warning, &e)) {
    rc = cli_fail(1, "%s", e.msg);
    goto out;
  }
  if (warning[0]) fprintf(stderr, "luagent: warning: %s\n", warning);
  printf("approval %lld %s\n", id,
         approve ? (na ? "approved (modified arguments)" : "approved") : "denied");
out:
  cJSON_Delete(na);
  cluster_policy_free(cp);
  store_close(st);
  config_free(cfg);
  return rc;
}
