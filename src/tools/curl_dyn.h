/* curl_dyn.h - libcurl, loaded on first use instead of at start.
 *
 * The binary does not link libcurl (~30 shared libraries with what it
 * pulls in: most of a `luagent version` went on relocating them).
 * curl_dyn.c defines the libcurl functions luagent calls under their own
 * names; the first call of any of them loads libcurl (dlopen, once per
 * process, thread-safe), runs curl_global_init (a call of it before that
 * only notes its flags: it never loads the library), and every call forwards to
 * the real function. Callers include <curl/curl.h> and call libcurl as
 * before. A libcurl function not defined there fails the link: add it to
 * curl_dyn.c's table.
 *
 * Without libcurl (not installed, or LUAGENT_LIBCURL names a file that
 * will not load) every forwarder fails the way libcurl reports a failure
 * (NULL handles, CURLE_FAILED_INIT), curl_easy_strerror says why, and one
 * line on stderr names the library and the package to install.
 */
#ifndef LUAGENT_CURL_DYN_H
#define LUAGENT_CURL_DYN_H

#include "err.h"

/* Loads libcurl if no call has yet. 0, or ERR_FAIL with a message that
 * names the library, why it did not load and what to install. */
int curl_dyn_load(struct err *e);

#endif
