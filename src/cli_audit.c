/* cli_audit.c - `luagent audit tail [-n N] [--json]` and `luagent audit verify`. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"
#include "cli.h"
#include "config.h"
#include "json.h"
#include "store.h"

static int usage(void) {
  return cli_fail(2,
                  "usage: luagent audit tail [-n N] [--json]\n"
                  "       luagent audit verify [--json]");
}

int cli_audit(const struct cli_opts *o, int argc, char **argv) {
  if (argc < 2) return usage();
  const char *sub = argv[1];
  int json = o->json, n = 20;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (!strcmp(sub, "tail") && (!strcmp(argv[i], "-n") || !strcmp(argv[i], "--lines")) &&
               i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v <= 0 || v > 1000000)
        return cli_fail(2, "audit tail: -n needs a positive number, got '%s'", argv[i]);
      n = (int)v;
    } else {
      return usage();
    }
  }
  if (strcmp(sub, "tail") && strcmp(sub, "verify")) return usage();

  struct err e = {0};
  struct config *cfg = NULL;
  if (config_load(o->workspace, &cfg, &e)) return cli_fail(2, "%s", e.msg);
  struct audit_opts ao = {.sign = config_bool(cfg, "audit.sign", 0)};
  struct store *st = NULL;
  int rc = 0;
  if (store_open(o->workspace, &st, &e)) {
    rc = cli_fail(1, "%s", e.msg);
    goto out;
  }
  if (!strcmp(sub, "tail")) {
    if (audit_tail(st, n, json, stdout, &e)) rc = cli_fail(1, "%s", e.msg);
    goto out;
  }
  struct audit_report r;
  if (audit_verify(st, &ao, &r, &e)) {
    rc = cli_fail(1, "%s", e.msg);
    goto out;
  }
  if (json) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddBoolToObject(j, "intact", r.problem[0] == 0);
    cJSON_AddNumberToObject(j, "rows", (double)r.rows);
    cJSON_AddBoolToObject(j, "signed", r.signed_head);
    if (r.problem[0]) {
      cJSON_AddNumberToObject(j, "bad_row", (double)r.bad_seq);
      cJSON_AddStringToObject(j, "problem", r.problem);
    }
    char *txt = json_print(j, JSON_PRETTY);
    puts(txt);
    free(txt);
    cJSON_Delete(j);
  } else if (!r.problem[0]) {
    printf("audit chain intact: %lld rows%s\n", r.rows,
           r.signed_head ? ", head signature valid" : "");
  }
  if (r.problem[0]) {
    if (r.bad_seq > 0)
      rc = cli_fail(1, "audit chain broken at row %lld: %s", r.bad_seq, r.problem);
    else
      rc = cli_fail(1, "audit chain broken: %s", r.problem);
  }
out:
  store_close(st);
  config_free(cfg);
  return rc;
}
