/* session.h - chat sessions: a named conversation kept in the state
 * database (tables sessions and messages of schema v1), so `luagent chat
 * --session NAME` resumes it and `luagent sessions list` shows them.
 *
 * A session's history is the wire-neutral message array of llm.h; each
 * message is one row of `messages` (seq from 1, role, content = the
 * message's JSON text). Saving replaces the rows in one transaction, so a
 * history rewritten by compaction is stored as it is now.
 */
#ifndef LUAGENT_SESSION_H
#define LUAGENT_SESSION_H

#include <cjson/cJSON.h>

#include "err.h"
#include "store.h"

#define SESSION_MAX_NAME 64

/* A name is 1..64 of [A-Za-z0-9_.-], not starting with '.' or '-'. */
int session_check_name(const char *name, struct err *e);
/* A fresh name: chat-YYYYMMDD-HHMMSS (UTC). out holds 64 bytes. */
void session_new_name(char out[SESSION_MAX_NAME + 1]);

/* A session is open in one chat at a time: two chats saving one history
 * would each replace it with their own and lose the other's turns.
 * session_hold takes .luagent/sessions/NAME.lock (an flock, released
 * however the process ends) and returns its descriptor in *fd; a session
 * held by another process is ERR_DENIED (code "session_busy") naming that
 * process. session_release(-1) is a no-op. */
int session_hold(const char *workspace, const char *name, int *fd, struct err *e);
void session_release(int fd);

/* Loads the history of name into *messages (a new array; empty when the
 * session does not exist yet). *exists tells which. Rows that are not a
 * JSON message fail with an error naming the session and row. */
int session_load(struct store *s, const char *name, cJSON **messages, int *exists, struct err *e);
/* Creates or updates the session and replaces its messages. */
int session_save(struct store *s, const char *name, const cJSON *messages, struct err *e);
/* Links a run (journal) to the session (runs.session). */
int session_link_run(struct store *s, const char *name, const char *run_id, struct err *e);
/* Taint follows a conversation, not a turn: once any turn read outside
 * content, the history the model gets back holds it. session_tainted is
 * 1 when the session was marked (0 for a new or clean one). */
int session_tainted(struct store *s, const char *name);
int session_set_tainted(struct store *s, const char *name, struct err *e);
/* [{name, created, updated, messages, runs, last_user}] newest first. */
int session_list(struct store *s, cJSON **out, struct err *e);
/* Deletes a session and its messages; ERR_NOTFOUND when absent. The
 * caller holds it (session_hold), so no chat that has it open saves it
 * back. */
int session_delete(struct store *s, const char *name, struct err *e);

#endif
