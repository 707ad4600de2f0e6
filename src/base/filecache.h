/* filecache.h - small text files read once and kept while they stay the
 * same, for files read on every run (the system prompt file): a kept copy
 * is used only while the file's identity and state (device, inode, size,
 * modification and change times, to the nanosecond) are what they were
 * when it was read, so an edit, a replacement (rename over it) or a
 * removal is seen on the next read. A file modified in the last two
 * seconds before it was read is not trusted to its times (a filesystem's
 * clock ticks coarser than a write can follow another of the same size):
 * it is read again every time until it has been still for that long.
 * Process-wide, thread-safe, bounded (a few files, each at most 1 MiB
 * kept; larger ones are read every time). */
#ifndef LUAGENT_FILECACHE_H
#define LUAGENT_FILECACHE_H

#include <stddef.h>

#include "err.h"

/* util_read_file, through the cache: *out gets a copy of the whole file
 * (NUL-terminated, caller frees), *len its length (len may be NULL).
 * Errors as util_read_file: ERR_NOTFOUND for a missing file, ERR_LIMIT
 * past max bytes, ERR_IO; e may be NULL. */
int filecache_read(const char *path, size_t max, char **out, size_t *len, struct err *e);

/* For tests: reads that found the file unchanged and took the kept copy. */
long filecache_hits(void);

#endif
