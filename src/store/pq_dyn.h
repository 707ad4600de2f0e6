/* pq_dyn.h - libpq, loaded on first use instead of at start.
 *
 * libpq brings 24 shared libraries (OpenSSL, Kerberos, LDAP...): linked
 * into the binary it would cost every command, `luagent version` included,
 * what loading libcurl did (bench/README.md, "Start-up"). pq_dyn.c defines
 * the libpq functions under their own names, as tools/curl_dyn.c does for
 * libcurl: the first call of any of them loads libpq (dlopen, once per
 * process, thread-safe) and every call forwards to the real function.
 * Callers include <libpq-fe.h> and call libpq as usual; the build must not
 * link libpq itself (CMakeLists.txt gives the store layer libpq's include
 * directories only). A libpq function not defined in pq_dyn.c fails the
 * link, or, if libpq is linked after all, binds to it at start: add it to
 * pq_dyn.c's table. Built only where libpq's headers are installed
 * (LUAGENT_HAVE_LIBPQ).
 *
 * Without libpq (not installed, or LUAGENT_LIBPQ names a file that will not
 * load) the forwarders fail as libpq does for a missing connection (NULL,
 * CONNECTION_BAD, PGRES_FATAL_ERROR) and PQerrorMessage and
 * PQresultErrorMessage say why; a caller about to connect may call
 * pq_dyn_load first for an error of its own.
 */
#ifndef LUAGENT_PQ_DYN_H
#define LUAGENT_PQ_DYN_H

#include "err.h"

/* Loads libpq if no call has yet. 0, or ERR_FAIL with a message that
 * names the library, why it did not load and what to install. */
int pq_dyn_load(struct err *e);

#endif
