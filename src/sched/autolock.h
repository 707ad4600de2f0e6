/* autolock.h - one automation's runs, one process at a time.
 *
 * A run reads its automation's ctx.state when it starts and saves it when
 * it ends; a daemon and `luagent automations run` are separate processes,
 * each with its own copy. So that no two of them start from the same
 * state (one's update lost to the other's save), whoever runs automation
 * NAME holds the lock .luagent/locks/NAME.lock from before it reads the
 * state until its save is committed. Inside one daemon the automation's
 * mode decides what overlaps (`parallel` runs share the daemon's hold).
 *
 * The lock is an open file description lock (fcntl F_OFD_SETLK) on byte 0
 * of that file: the kernel drops it when its holder ends, kill -9
 * included, and it names no pid that could be reused. Byte 1 is the queue:
 * a process waiting for the lock (`automations run`) holds a shared lock
 * on it, and a daemon taking the lock with yield set is refused while
 * anyone waits, so a daemon running the automation back to back still
 * lets a waiting manual run in between two of its runs. A manual run that
 * holds the lock also writes its pid and start time into the file (its
 * first bytes), which is how others tell who it is; the daemon writes
 * nothing (it is named by .luagent/daemon.lock).
 *
 * Descriptors are opened O_CLOEXEC: a worker exec'd by the daemon holds
 * none of them. Linux only (open file description locks). */
#ifndef LUAGENT_AUTOLOCK_H
#define LUAGENT_AUTOLOCK_H

#include "err.h"

/* Opens (creating .luagent/locks/ and the file as needed) the lock file
 * of automation name in workspace ws. Returns the descriptor (>= 0; the
 * caller closes it, through autolock_release once it took the lock), or
 * ERR_IO with e set. name must be a valid automation name. */
int autolock_open(const char *ws, const char *name, struct err *e);

/* autolock_open in two steps, for a caller that opens several locks at
 * once (the daemon, once per pass over the runs it starts): the
 * directory .luagent/locks of ws (created as needed, never through a
 * link; an O_PATH descriptor the caller closes, or ERR_IO with e set,
 * naming the lock of automation name), then the lock file of name in it
 * (as autolock_open, errno kept when it fails: ENOENT when the directory
 * was removed since it was opened). */
int autolock_dir(const char *ws, const char *name, struct err *e);
int autolock_open_at(int dir, const char *name, struct err *e);

/* Takes the lock on fd without waiting: 1 when taken, 0 when another open
 * of the file holds it, or (yield != 0) when another process waits for
 * it, <0 (ERR_IO, errno set) when fcntl fails otherwise. */
int autolock_try(int fd, int yield);

/* Joins the queue of fd's lock (see above): 1 when queued, 0 when that
 * cannot be done at this instant (a daemon is taking the lock: try
 * again), <0 on an error. */
int autolock_want(int fd);

/* 1 when another process waits for the lock fd holds (autolock_want),
 * else 0: a holder about to run the automation again lets it go first. */
int autolock_wanted(int fd);

/* Writes this process's pid and start time into fd's file, naming it to
 * the others (autolock_holder) while it holds the lock. Only a holder
 * writes there, so none overwrites another's. */
void autolock_stamp(int fd);

/* The process that stamped fd's file, when it is still alive (the same
 * pid and start time): its pid; 0 when there is none (the holder is a
 * daemon, or nobody holds the lock, or its holder ended). */
int autolock_holder(int fd);

/* Releases what this descriptor holds (the lock, its place in the queue;
 * clear: also the stamp autolock_stamp wrote) and closes it. fd < 0:
 * nothing. */
void autolock_release(int fd, int clear);

#endif
