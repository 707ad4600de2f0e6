/* mcp_proc.h - a supervised child process speaking newline-delimited
 * messages on its stdin/stdout (the MCP stdio transport).
 *
 * The child runs in its own process group with a minimal environment
 * (PATH, HOME, USER, LOGNAME, SHELL, TERM, LANG, TMPDIR and what the
 * config adds), so luagent's own secrets in its environment never reach a
 * server. It dies with luagent (PR_SET_PDEATHSIG) and mcp_proc_stop kills
 * its whole group. Its stderr is copied to a log file, bounded, and the
 * last bytes of it are kept for error messages.
 *
 * Not thread safe: the owner (mcp_client.c) serialises use under a lock.
 */
#ifndef LUAGENT_MCP_PROC_H
#define LUAGENT_MCP_PROC_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <sys/types.h>

#include "err.h"
#include "util.h"

#define MCP_PROC_TAIL 2048 /* bytes of stderr kept for messages */

struct mcp_proc {
  pid_t pid;           /* 0 when not running */
  int to_child;        /* its stdin */
  int from_child;      /* its stdout */
  int err_child;       /* its stderr */
  struct sbuf in;      /* bytes read from stdout, not yet a whole line */
  size_t in_off;       /* start of the unread part of in */
  int discarding;      /* skipping the rest of an over-long line */
  char tail[MCP_PROC_TAIL + 1]; /* last stderr bytes, NUL-terminated */
  size_t tail_len;
  char log_path[4200]; /* stderr log ("" : none) */
  size_t log_max;      /* bytes before the log is rotated to .1 */
  int exit_status;     /* wait status once reaped, -1 before */
};

/* Makes p a stopped process (no descriptors), so mcp_proc_stop on it is
 * a no-op; mcp_proc_start does the same first. */
void mcp_proc_init(struct mcp_proc *p);

/* Starts argv[0] (found on PATH) with argv, the environment described
 * above plus env (a JSON object of strings, may be NULL) and working
 * folder cwd (NULL: the current one). p is zeroed and filled. log_path may
 * be NULL. Returns 0, or ERR_IO with a message naming the command. */
int mcp_proc_start(struct mcp_proc *p, char *const argv[], const cJSON *env, const char *cwd,
                   const char *log_path, size_t log_max, struct err *e);

/* From now on, children start with the normal CPU policy (SCHED_OTHER)
 * when this process runs under SCHED_BATCH: a daemon worker lowers its
 * own policy for the scheduler's sake, not for the servers its runs
 * start. Call it in such a process only; elsewhere a policy the user set
 * is inherited as usual. */
void mcp_proc_children_normal_policy(void);

/* Writes len bytes and a newline, waiting at most until the monotonic time
 * deadline. Returns 0, ERR_IO (the child closed its stdin) or ERR_LIMIT
 * (the deadline passed). */
int mcp_proc_write_line(struct mcp_proc *p, const char *s, size_t len, double deadline,
                        struct err *e);

/* Reads the next line (without its newline) into a new string *line of
 * *len bytes (caller frees). Waits at most until deadline; every 50 ms it
 * looks at *stop (may be NULL). A line over max bytes is an error (code
 * "mcp_message_too_big"), and so is the end of the child's stdout (code
 * "mcp_exited"; the child is reaped and its status kept). Returns 0,
 * ERR_LIMIT (code "timeout"), ERR_STOPPED, ERR_IO or ERR_INVALID. */
int mcp_proc_read_line(struct mcp_proc *p, char **line, size_t *len, size_t max, double deadline,
                       volatile int *stop, struct err *e);

/* 1 while the child runs (reaps it when it has exited). */
int mcp_proc_alive(struct mcp_proc *p);

/* "exit status 3", "killed by signal 9", "running". */
void mcp_proc_describe(const struct mcp_proc *p, char *out, size_t n);

/* Closes its stdin, waits up to grace seconds, then SIGTERMs and at last
 * SIGKILLs its process group; reaps it and frees the buffers. A stopped or
 * zeroed p is a no-op. */
void mcp_proc_stop(struct mcp_proc *p, double grace);

#endif
