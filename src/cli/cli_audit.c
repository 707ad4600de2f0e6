/* cli_audit.c - `luagent audit tail [-n N] [--json]`, `luagent audit head [--json]` and
 * `luagent audit verify [--expect HEAD] [--strict] [--json]`. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"
#include "cli.h"
#include "cluster_queue.h"
#include "config.h"
#include "json.h"
#include "store.h"

static int usage(void) { return cli_usage_fail("audit", NULL); }

static int print_head(struct store *st, struct cluster_policy *cp, int json) {
  struct err e = {0};
  struct audit_head h;
  if (cp ? cluster_audit_head(cp, &h, &e) : audit_head_read(st, &h, &e))
    return cli_fail(1, "%s", e.msg);
  char line[200];
  audit_head_format(&h, line, sizeof line);
  if (!json) {
    puts(line);
    return 0;
  }
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "seq", (double)h.seq);
  cJSON_AddNumberToObject(j, "rows", (double)h.rows);
  cJSON_AddStringToObject(j, "hash", h.hash);
  if (h.sig[0])
    cJSON_AddStringToObject(j, "sig", h.sig);
  else
    cJSON_AddNullToObject(j, "sig");
  cJSON_AddStringToObject(j, "head", line); /* what --expect takes */
  char *txt = json_print(j, 0);
  puts(txt);
  free(txt);
  cJSON_Delete(j);
  return 0;
}

int cli_audit(const struct cli_opts *o, int argc, char **argv) {
  if (argc < 2) return usage();
  const char *sub = argv[1];
  const char *expect_text = NULL;
  int json = o->json, n = 20, strict = 0, local = 0;
  long long keep = -1;
  if (strcmp(sub, "tail") && strcmp(sub, "verify") && strcmp(sub, "head") &&
      strcmp(sub, "compact") && strcmp(sub, "key"))
    return cli_unknown_sub("audit", sub);
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (!strcmp(argv[i], "--local")) {
      local = 1; /* cluster mode: this host's own SQLite chain instead */
    } else if (!strcmp(sub, "tail") && (!strcmp(argv[i], "-n") || !strcmp(argv[i], "--lines")) &&
               i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v <= 0 || v > 1000000)
        return cli_fail(2, "audit tail: -n needs a positive number, got '%s'", argv[i]);
      n = (int)v;
    } else if (!strcmp(sub, "verify") && !strcmp(argv[i], "--expect") && i + 1 < argc) {
      expect_text = argv[++i];
    } else if (!strcmp(sub, "verify") && !strcmp(argv[i], "--strict")) {
      strict = 1;
    } else if (!strcmp(sub, "compact") && !strcmp(argv[i], "--keep") && i + 1 < argc) {
      char *end;
      keep = strtoll(argv[++i], &end, 10);
      if (*end || keep < 1)
        return cli_fail(2, "audit compact: --keep needs a number of rows >= 1, got '%s'", argv[i]);
    } else {
      return usage();
    }
  }
  struct err e = {0};
  /* A garbled pinned head is the operator's typo: say so before anything. */
  struct audit_head expect;
  if (expect_text && audit_head_parse(expect_text, &expect, &e))
    return cli_fail(2, "audit verify: --expect: %s", e.msg);

  struct config *cfg = NULL;
  if (config_load(o->workspace, &cfg, &e)) return cli_fail(2, "%s", e.msg);
  struct audit_opts ao = {.sign = config_bool(cfg, "audit.sign", 0),
                          .public_key = config_string(cfg, "audit.public_key", NULL)};
  struct store *st = NULL;
  struct cluster_policy *cp = NULL;
  int rc = 0;
  /* With `cluster`, the chain is the one in PostgreSQL that every host
   * appends to (--local: the SQLite chain this host kept before). */
  if (!local && cluster_policy_for(o->workspace, cfg, &cp, &e)) {
    rc = cli_fail(2, "%s", e.msg);
    goto out;
  }
  if (store_open(o->workspace, &st, &e)) {
    rc = cli_fail(1, "%s", e.msg);
    goto out;
  }
  if (!strcmp(sub, "tail")) {
    if (cp ? cluster_audit_tail(cp, n, json, stdout, &e) : audit_tail(st, n, json, stdout, &e))
      rc = cli_fail(1, "%s", e.msg);
    goto out;
  }
  if (!strcmp(sub, "head")) {
    rc = print_head(st, cp, json);
    goto out;
  }
  if (!strcmp(sub, "key")) {
    char hex[65];
    if (audit_public_key(st, &ao, hex, &e)) {
      rc = cli_fail(1, "%s", e.msg);
      goto out;
    }
    printf("%s\n", hex);
    fprintf(stderr, "pin it: audit = { sign = true, public_key = \"%s\" } in luagent.lua\n", hex);
    goto out;
  }
  if (!strcmp(sub, "compact")) {
    if (keep < 1) {
      rc = usage();
      goto out;
    }
    if (cp) {
      rc = cli_fail(1, "audit compact: the cluster chain (%s) cannot be compacted yet",
                    cluster_policy_where(cp));
      goto out;
    }
    struct audit_head h;
    long long pruned = 0;
    if (audit_head_read(st, &h, &e) ||
        audit_compact(st, &ao, h.seq - keep + 1, &pruned, &e)) {
      rc = cli_fail(1, "%s", e.msg);
      goto out;
    }
    printf("pruned %lld audit row(s) under a checkpoint; the chain still verifies\n", pruned);
    goto out;
  }
  struct audit_report r;
  if (cp ? cluster_audit_verify(cp, &ao, expect_text ? &expect : NULL, &r, &e)
         : audit_verify(st, &ao, expect_text ? &expect : NULL, &r, &e)) {
    rc = cli_fail(1, "%s", e.msg);
    goto out;
  }
  /* --strict: what could not be checked counts as a failure. */
  int fail_warning = strict && r.warning[0] && !r.problem[0];
  if (json) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddBoolToObject(j, "intact", r.problem[0] == 0);
    cJSON_AddNumberToObject(j, "rows", (double)r.rows);
    cJSON_AddBoolToObject(j, "signed", r.signed_head);
    cJSON_AddNumberToObject(j, "anchors", (double)r.anchors);
    cJSON_AddNumberToObject(j, "anchored_seq", (double)r.anchored);
    cJSON_AddNumberToObject(j, "compacted", (double)r.compacted);
    if (r.problem[0]) {
      cJSON_AddNumberToObject(j, "bad_row", (double)r.bad_seq);
      cJSON_AddStringToObject(j, "problem", r.problem);
    }
    if (r.warning[0]) cJSON_AddStringToObject(j, "warning", r.warning);
    char *txt = json_print(j, 0);
    puts(txt);
    free(txt);
    cJSON_Delete(j);
  } else if (!r.problem[0]) {
    printf("%s intact: %lld rows%s", cp ? "cluster audit chain" : "audit chain", r.rows,
           r.signed_head ? ", head signature valid" : "");
    if (r.compacted > 0) printf(" (rows 1..%lld compacted under a checkpoint)", r.compacted);
    if (r.anchored > 0)
      printf(", anchored up to row %lld (%lld anchor line%s%s)", r.anchored, r.anchors,
             r.anchors == 1 ? "" : "s", expect_text ? ", expected head present" : "");
    else if (expect_text)
      printf(", expected head present");
    printf("\n");
  }
  if (r.warning[0] && !r.problem[0]) fprintf(stderr, "luagent: warning: %s\n", r.warning);
  if (r.problem[0]) {
    if (r.bad_seq > 0)
      rc = cli_fail(1, "%s broken at row %lld: %s", cp ? "cluster audit chain" : "audit chain",
                    r.bad_seq, r.problem);
    else
      rc = cli_fail(1, "%s broken: %s", cp ? "cluster audit chain" : "audit chain", r.problem);
  } else if (fail_warning) {
    rc = cli_fail(1, "audit verify --strict: %s", r.warning);
  }
out:
  cluster_policy_free(cp);
  store_close(st);
  config_free(cfg);
  return rc;
}
