/* mhd_dyn.h - libmicrohttpd, loaded on first use instead of at start.
 *
 * Only the console and `mcp serve --http` serve HTTP, and libmicrohttpd
 * brings GnuTLS and nine more shared libraries with it: the binary does
 * not link it. mhd_dyn.c defines the MHD_* functions luagent calls under
 * their own names; the first call loads the library (dlopen, once per
 * process, thread-safe) and every call forwards to the real function.
 * Callers include <microhttpd.h> as before; an MHD_* function not defined
 * there fails the link: add it to mhd_dyn.c's table.
 *
 * Without the library (not installed, or LUAGENT_LIBMICROHTTPD names a
 * file that will not load) the forwarders fail as MHD does (NULL, MHD_NO)
 * and one line on stderr says why; a server about to start calls
 * mhd_dyn_load first for an error it can report.
 */
#ifndef LUAGENT_MHD_DYN_H
#define LUAGENT_MHD_DYN_H

#include "err.h"

/* Loads libmicrohttpd if no call has yet. 0, or ERR_FAIL with a message
 * that names the library, why it did not load and what to install. */
int mhd_dyn_load(struct err *e);

#endif
