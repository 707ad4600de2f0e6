/* hosttools.h - the tools written in C: echo, time.now, fs.read/write/
 * list/delete (confined to <workspace>/data) and http.request (hosts on
 * the http_allow list only). */
#ifndef LUAGENT_HOSTTOOLS_H
#define LUAGENT_HOSTTOOLS_H

#include "err.h"

struct runtime;

/* Registers every host tool in rt->tools. */
int hosttools_register(struct runtime *rt, struct err *e);
/* 1 if host matches one of the NULL-terminated patterns ("*.example.com"). */
int hosttools_host_allowed(char *const *allow, const char *host);

#endif
