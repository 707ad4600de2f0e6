/* audit_tail.c - `luagent audit tail`: the last rows of the chain, as
 * text or JSON (see audit.h). Only reads. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "audit.h"
#include "audit_impl.h"
#include "json.h"
#include "util.h"

/* --- tail --------------------------------------------------------------- */

int audit_tail(struct store *s, int n, int json, FILE *out, struct err *e) {
  sqlite3_stmt *st = NULL;
  if (n <= 0) n = 20;
  if (store_prepare(s,
                    "SELECT " AUDIT_COLS " FROM (SELECT * FROM audit ORDER BY seq DESC LIMIT ?1) "
                    "ORDER BY seq",
                    &st, e))
    return ERR_IO;
  sqlite3_bind_int(st, 1, n);
  static const char *const names[C_N] = {"seq",         "ts",        "run_id",    "caller_kind",
                                         "caller_name", "tool",      "args_hash", "decision",
                                         "decided_by",  "approver",  "status",    "duration_ms",
                                         "detail",      "prev_hash", "hash"};
  cJSON *arr = json ? cJSON_CreateArray() : NULL;
  int step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    if (json) {
      cJSON *o = cJSON_CreateObject();
      for (int i = 0; i < C_N; i++) {
        int t = sqlite3_column_type(st, i);
        if (t == SQLITE_NULL)
          cJSON_AddNullToObject(o, names[i]);
        else if (t == SQLITE_INTEGER || t == SQLITE_FLOAT)
          cJSON_AddNumberToObject(o, names[i], sqlite3_column_double(st, i));
        else
          cJSON_AddStringToObject(o, names[i], (const char *)sqlite3_column_text(st, i));
      }
      cJSON_AddItemToArray(arr, o);
      continue;
    }
    struct sbuf b = {0};
    sbuf_printf(&b, "%lld ", (long long)sqlite3_column_int64(st, C_SEQ));
    time_t t = (time_t)sqlite3_column_double(st, C_TS);
    struct tm tm;
    char when[32];
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    sbuf_printf(&b, "%s", when);
    static const int shown[] = {C_CKIND, C_CNAME, C_TOOL, C_DEC, C_DBY, C_APPR, C_STATUS};
    static const char *const label[] = {"caller", "name",     "tool",  "decision",
                                        "by",     "approver", "status"};
    for (size_t k = 0; k < sizeof shown / sizeof shown[0]; k++) {
      const unsigned char *v = sqlite3_column_text(st, shown[k]);
      if (!v || !*v) continue;
      sbuf_printf(&b, " %s=", label[k]);
      util_escape_text(&b, (const char *)v, strlen((const char *)v), 200);
    }
    if (sqlite3_column_type(st, C_DUR) != SQLITE_NULL)
      sbuf_printf(&b, " ms=%.3f", sqlite3_column_double(st, C_DUR));
    const unsigned char *ah = sqlite3_column_text(st, C_AHASH);
    if (ah && *ah) sbuf_printf(&b, " args=%.12s", (const char *)ah);
    const unsigned char *d = sqlite3_column_text(st, C_DETAIL);
    if (d && *d) {
      sbuf_puts(&b, " detail=\"");
      util_escape_text(&b, (const char *)d, strlen((const char *)d), 400);
      sbuf_puts(&b, "\"");
    }
    fprintf(out, "%s\n", b.s);
    sbuf_free(&b);
  }
  sqlite3_finalize(st);
  if (step != SQLITE_DONE) {
    cJSON_Delete(arr);
    return store_error(s, e, "audit: read");
  }
  if (json) {
    char *txt = json_print(arr, 0); /* the CLI's --json rule: one compact line */
    fprintf(out, "%s\n", txt);
    free(txt);
    cJSON_Delete(arr);
  }
  return 0;
}
