/* journal.h - the run journal: an event sink that stores every event of a
 * run in SQLite (tables runs and events, see store.c), so `luagent runs
 * list` and `luagent runs show ID` can replay any run.
 *
 * A "run_start" event creates the runs row (kind, name, parent from its
 * data), every event becomes an events row (seq per run; the streamed
 * pieces that wait together share one, journal_pieces), and "run_end"
 * sets the status, result, error and tool call count. The sink is
 * thread-safe. Rows are written by the store writer's thread (writer.h)
 * with its own connection, so the emitting thread (the ReAct loop) only
 * copies the event into a queue. The events of a model call's streaming
 * phase (deltas, tool call starts, usage, retries) wait for the next other
 * event (turn_complete at the latest) or half a second; every other event
 * is committed within 5 ms, with whatever else arrived by then, in one
 * short transaction (no write lock is held while tools run or the model
 * streams). run_start returns once the run's row is committed (the run is
 * on record before its first model call), and so does run_end, with every
 * event of the run. A process killed with kill -9 loses at most the
 * events of its last 5 ms (streamed pieces: half a second).
 */
#ifndef LUAGENT_JOURNAL_H
#define LUAGENT_JOURNAL_H

#include <cjson/cJSON.h>

#include "err.h"
#include "events.h"

struct journal;

/* Opens the journal on <workspace>/.luagent/state.db (its own connection
 * for reads; writes go through the workspace's writer, writer_get). Errors
 * name the file. */
int journal_open(const char *workspace, struct journal **out, struct err *e);
/* Commits what is pending (waits for it) and closes. NULL is a no-op. */
void journal_close(struct journal *j);
/* Fills s so that events go to the journal (s->next untouched): emit_event
 * (an event's text is stored as its emitter printed it, or as json_print
 * prints its tree) and emit, the same for a caller holding a tree. An
 * event's run id is at most JOURNAL_RUN_ID_MAX bytes (call_ctx's ids are);
 * an event with a longer one is refused with a message on stderr, never
 * stored under its first bytes, which may be another run's id. */
#define JOURNAL_RUN_ID_MAX 39
void journal_sink(struct journal *j, struct event_sink *s);
/* Commits pending events now: they are on disk (or their failure was
 * reported) when this returns. */
void journal_flush(struct journal *j);
/* An events row back as the events it holds: consecutive streamed pieces
 * of a run (text_delta, tool_args_delta of one index) that waited together
 * are one row, whose data is the object the whole stream gives and whose
 * pieces column lists the pieces' lengths within its string ("4,4,1").
 * Calls each(ud, text, len) with each piece's data text as the event
 * carried it, in order; with pieces NULL, or not matching data, once with
 * data. Returns how many calls it made. */
int journal_pieces(const char *data, const char *pieces,
                   void (*each)(void *ud, const char *text, size_t len), void *ud);

#endif
