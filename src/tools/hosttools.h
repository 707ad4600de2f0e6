/* hosttools.h - the tools written in C: echo, time.now, fs.read/write/
 * list/delete (confined to <workspace>/data, regular files only) and
 * http.request (origins on the http_allow list only; a secret only to the
 * origins luagent.lua declares for it, redirects included). */
#ifndef LUAGENT_HOSTTOOLS_H
#define LUAGENT_HOSTTOOLS_H

#include "err.h"

struct runtime;

/* Registers every host tool in rt->tools. */
int hosttools_register(struct runtime *rt, struct err *e);

#endif
