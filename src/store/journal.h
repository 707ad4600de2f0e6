/* journal.h - the run journal: an event sink that stores every event of a
 * run in SQLite (tables runs and events, see store.c), so `luagent runs
 * list` and `luagent runs show ID` can replay any run.
 *
 * A "run_start" event creates the runs row (kind, name, parent from its
 * data), every event becomes an events row (seq per run), and "run_end"
 * sets the status, result, error and tool call count. The sink is
 * thread-safe (a mutex around its own connection). The events of a model
 * call's streaming phase (deltas, tool call starts, usage, retries) are
 * batched in one transaction that commits at the next other event
 * (turn_complete at the latest), so the journal costs little per streamed
 * piece and holds no write lock while tools run.
 */
#ifndef LUAGENT_JOURNAL_H
#define LUAGENT_JOURNAL_H

#include <cjson/cJSON.h>

#include "err.h"
#include "events.h"

struct journal;

/* Opens the journal on <workspace>/.luagent/state.db with its own
 * connection. */
int journal_open(const char *workspace, struct journal **out, struct err *e);
/* Commits what is pending and closes. NULL is a no-op. */
void journal_close(struct journal *j);
/* Fills s so that events go to the journal (s->next untouched). */
void journal_sink(struct journal *j, struct event_sink *s);
/* Commits pending events now. */
void journal_flush(struct journal *j);

#endif
