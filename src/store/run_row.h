/* run_row.h - a row of the runs table as `runs list --json` shows a run:
 * the one builder behind the CLI's `runs list` and the console's
 * /api/runs, so that a run reads the same in both. */
#ifndef LUAGENT_RUN_ROW_H
#define LUAGENT_RUN_ROW_H

#include <sqlite3.h>

struct cJSON;

/* The columns run_row_json reads, in its order, for `SELECT RUN_ROW_COLS
 * FROM runs ...`. A run that never finished has no final count: its
 * tool_calls is what its journal holds. */
#define RUN_ROW_COLS                                                                       \
  "id, kind, name, status, started, finished, "                                            \
  "CASE WHEN status IN ('running', 'interrupted') THEN (SELECT count(*) FROM events ev "   \
  "WHERE ev.run_id = runs.id AND ev.type = 'tool_result') ELSE tool_calls END, "           \
  "coalesce(parent, ''), coalesce(error, ''), coalesce(result, '')"

/* run_row_json's flags. */
enum {
  RUN_ROW_FINISHED_NULL = 1, /* "finished": null while a run is not over (else absent) */
};

/* The object of a row whose columns are RUN_ROW_COLS' (each as it is
 * selected there, or any column of the same meaning), with an optional
 * eleventh, the session's name ('' for none): id, kind, name, status,
 * started, finished (when over; see flags), tool_calls, parent (when
 * any), error (when any), result, session (when any). Caller frees. */
struct cJSON *run_row_json(sqlite3_stmt *st, int flags);

#endif
