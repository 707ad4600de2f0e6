/* run_row.c - see run_row.h. */
#include "run_row.h"

#include <cjson/cJSON.h>

static const char *col(sqlite3_stmt *st, int i) {
  const unsigned char *s = sqlite3_column_text(st, i);
  return s ? (const char *)s : "";
}

cJSON *run_row_json(sqlite3_stmt *st, int flags) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", col(st, 0));
  cJSON_AddStringToObject(o, "kind", col(st, 1));
  cJSON_AddStringToObject(o, "name", col(st, 2));
  cJSON_AddStringToObject(o, "status", col(st, 3));
  cJSON_AddNumberToObject(o, "started", sqlite3_column_double(st, 4));
  if (sqlite3_column_type(st, 5) != SQLITE_NULL)
    cJSON_AddNumberToObject(o, "finished", sqlite3_column_double(st, 5));
  else if (flags & RUN_ROW_FINISHED_NULL)
    cJSON_AddNullToObject(o, "finished");
  cJSON_AddNumberToObject(o, "tool_calls", sqlite3_column_int(st, 6));
  if (*col(st, 7)) cJSON_AddStringToObject(o, "parent", col(st, 7));
  if (*col(st, 8)) cJSON_AddStringToObject(o, "error", col(st, 8));
  cJSON_AddStringToObject(o, "result", col(st, 9));
  if (sqlite3_column_count(st) > 10 && *col(st, 10))
    cJSON_AddStringToObject(o, "session", col(st, 10));
  return o;
}
