/* steer.h - the operator's input during `luagent chat`: one reader thread
 * owns stdin and feeds a mutex-protected queue of lines.
 *
 * Between turns the chat takes the next line as the next message
 * (steer_next_line). While a turn runs, the ReAct loop drains the queue
 * before each model call through the react_opts.steer hook (steer_drain):
 * each queued line is a steer that joins the context as a user message
 * after the latest tool results, without restarting the turn.
 *
 * The reader never reads ahead of a line: it polls the descriptor and
 * reads one byte at a time (stdin's FILE buffer must be off: setvbuf
 * _IONBF), so an approval prompt that reads stdin itself sees exactly what
 * the operator types after it. While a prompt owns the terminal
 * (steer_terminal(st, 1) ... (st, 0), installed as the approver's terminal
 * hook) the reader pauses and leaves the input to the prompt.
 */
#ifndef LUAGENT_STEER_H
#define LUAGENT_STEER_H

#include "err.h"

struct steer;
struct sbuf;

/* Starts the reader thread on fd (SIGINT blocked in it, so the signal
 * reaches the main thread). */
int steer_start(int fd, struct steer **out, struct err *e);
/* Stops and joins the reader (within ~100 ms), frees st. NULL is a no-op. */
void steer_free(struct steer *st);

/* Waits for the next line: 1 with *line (caller frees), 0 at end of input
 * with nothing queued, -1 when *stop became non-zero while waiting. */
int steer_next_line(struct steer *st, volatile int *stop, char **line);

/* react_opts.steer: moves every queued line into out (joined with
 * newlines) and returns how many there were. ud is the struct steer. */
int steer_drain(void *ud, struct sbuf *out);

/* Approver terminal hook: owning = 1 waits until the reader is between
 * lines and pauses it; 0 resumes it. ud is the struct steer. */
void steer_terminal(void *ud, int owning);

#endif
