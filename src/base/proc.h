/* proc.h - what /proc says of a process: enough to tell whether the
 * process a row names (a run's worker_pid and proc_start, an approval's
 * waiter) is still that process, or what is left of it.
 *
 * Alive means the pid has an entry in /proc and, where its start time
 * was recorded, that entry's start time (field 22 of /proc/PID/stat,
 * clock ticks since boot) is the recorded one: a pid alone may have been
 * reused by another process since, the pair names one process for as
 * long as the machine runs. Whether it is a luagent process is asked of
 * /proc/PID/exe (proc_exe_is), where a caller needs that too.
 *
 * Everything here fails closed: an entry that cannot be read or parsed
 * (the process is gone, hidden from us by hidepid, another user's exe
 * link, no /proc) reads as no such process. "Alive" is the answer that
 * leaves a row to its owner to finish, so it needs proof: a row left to
 * an owner that is gone stays "running" forever, while a run wrongly
 * taken for gone is marked interrupted, and an owner that is in fact
 * alive overwrites that with its own last write; an approval whose
 * waiter is taken for gone expires, which grants nothing. Linux only. */
#ifndef LUAGENT_PROC_H
#define LUAGENT_PROC_H

/* What /proc/PID/stat says of a process. */
struct proc_stat {
  char state;     /* field 3: 'R', 'S', 'D', ...; 'Z' a zombie, 'X' dead */
  int ppid;       /* field 4: its parent (1, or a subreaper, once orphaned) */
  long long start; /* field 22: its start time, clock ticks since boot */
};

/* 0 and *ps filled from /proc/PID/stat; ERR_NOTFOUND when pid <= 0,
 * when there is no such entry, or when it cannot be read or parsed. The
 * process name (field 2) may hold spaces and ')': fields are counted from
 * its last ')'. */
int proc_stat_read(long long pid, struct proc_stat *ps);

/* 1 when /proc/PID/exe links to the path exe, as readlink gives it; exe
 * NULL: to this process's own binary (/proc/self/exe). 0 when it links
 * elsewhere and whenever a link cannot be read (no such process, one of
 * another user's, no /proc). */
int proc_exe_is(long long pid, const char *exe);

/* 1 when the process recorded as (pid, start) is alive, in the sense
 * above: pid has a /proc entry (a zombie's counts) whose start time is
 * start; start <= 0 (none was recorded): any process of that pid. 0
 * otherwise, pid <= 0 and an unreadable entry included. */
int proc_alive(long long pid, long long start);

#endif
