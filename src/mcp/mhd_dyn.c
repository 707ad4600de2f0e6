/* mhd_dyn.c - libmicrohttpd's functions, forwarded to the library loaded
 * on first use (mhd_dyn.h). */
#include "mhd_dyn.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <microhttpd.h>

#include "dynlib.h"

#ifndef LUAGENT_MHD_SONAME
#define LUAGENT_MHD_SONAME "libmicrohttpd.so.12"
#endif

/* X(return type, name, (parameters), (arguments), value when missing);
 * V(...) for functions returning nothing. The variadic ones are below. */
#define MHD_FNS(X, V)                                                                            \
  X(enum MHD_Result, MHD_add_response_header,                                                     \
    (struct MHD_Response * r, const char *header, const char *content), (r, header, content),     \
    MHD_NO)                                                                                       \
  X(struct MHD_Response *, MHD_create_response_from_buffer,                                       \
    (size_t size, void *buffer, enum MHD_ResponseMemoryMode mode), (size, buffer, mode), NULL)    \
  X(struct MHD_Response *, MHD_create_response_from_callback,                                     \
    (uint64_t size, size_t block, MHD_ContentReaderCallback crc, void *cls,                       \
     MHD_ContentReaderFreeCallback crfc),                                                         \
    (size, block, crc, cls, crfc), NULL)                                                          \
  V(MHD_destroy_response, (struct MHD_Response * r), (r))                                         \
  X(const char *, MHD_lookup_connection_value,                                                    \
    (struct MHD_Connection * c, enum MHD_ValueKind kind, const char *key), (c, kind, key), NULL)  \
  X(enum MHD_Result, MHD_queue_response,                                                          \
    (struct MHD_Connection * c, unsigned int status, struct MHD_Response *r), (c, status, r),     \
    MHD_NO)                                                                                       \
  X(struct MHD_Daemon *, MHD_start_daemon_va,                                                     \
    (unsigned int flags, uint16_t port, MHD_AcceptPolicyCallback apc, void *apc_cls,              \
     MHD_AccessHandlerCallback dh, void *dh_cls, va_list ap),                                     \
    (flags, port, apc, apc_cls, dh, dh_cls, ap), NULL)                                            \
  V(MHD_stop_daemon, (struct MHD_Daemon * d), (d))

#define PTR_X(ret, name, params, args, fail) static ret(*p_##name) params;
#define PTR_V(name, params, args) static void(*p_##name) params;
MHD_FNS(PTR_X, PTR_V)
static const union MHD_ConnectionInfo *(*p_MHD_get_connection_info)(struct MHD_Connection *,
                                                                     enum MHD_ConnectionInfoType,
                                                                     ...);
static enum MHD_Result (*p_MHD_set_connection_option)(struct MHD_Connection *,
                                                      enum MHD_CONNECTION_OPTION, ...);

#define SYM_X(ret, name, params, args, fail) {#name, (void **)&p_##name},
#define SYM_V(name, params, args) {#name, (void **)&p_##name},
static const struct dynlib_sym syms[] = {
    MHD_FNS(SYM_X, SYM_V){"MHD_get_connection_info", (void **)&p_MHD_get_connection_info},
    {"MHD_set_connection_option", (void **)&p_MHD_set_connection_option},
};

static struct dynlib lib = {.what = "libmicrohttpd",
                            .soname = LUAGENT_MHD_SONAME,
                            .env = "LUAGENT_LIBMICROHTTPD",
                            .package = "the libmicrohttpd12 package",
                            .syms = syms,
                            .nsyms = sizeof syms / sizeof syms[0],
                            .lock = PTHREAD_MUTEX_INITIALIZER};

int mhd_dyn_load(struct err *e) { return dynlib_load(&lib, e); }

#define DEF_X(ret, name, params, args, fail) DYNLIB_FORWARD(lib, 1, ret, name, params, args, fail)
#define DEF_V(name, params, args) DYNLIB_FORWARD_VOID(lib, name, params, args)
MHD_FNS(DEF_X, DEF_V)

/* The option list goes on as a va_list: MHD_start_daemon_va is the same
 * function taking one. */
struct MHD_Daemon *(MHD_start_daemon)(unsigned int flags, uint16_t port,
                                      MHD_AcceptPolicyCallback apc, void *apc_cls,
                                      MHD_AccessHandlerCallback dh, void *dh_cls, ...) {
  if (!dynlib_ready(&lib, 1)) return NULL;
  va_list ap;
  va_start(ap, dh_cls);
  struct MHD_Daemon *d = p_MHD_start_daemon_va(flags, port, apc, apc_cls, dh, dh_cls, ap);
  va_end(ap);
  return d;
}

/* No info type luagent asks for takes an argument. */
const union MHD_ConnectionInfo *(MHD_get_connection_info)(struct MHD_Connection *c,
                                                          enum MHD_ConnectionInfoType type, ...) {
  if (!dynlib_ready(&lib, 1)) return NULL;
  return p_MHD_get_connection_info(c, type);
}

/* MHD_CONNECTION_OPTION_TIMEOUT, the one option, takes an unsigned int. */
enum MHD_Result(MHD_set_connection_option)(struct MHD_Connection *c,
                                           enum MHD_CONNECTION_OPTION option, ...) {
  if (!dynlib_ready(&lib, 1)) return MHD_NO;
  va_list ap;
  va_start(ap, option);
  enum MHD_Result r = p_MHD_set_connection_option(c, option, va_arg(ap, unsigned int));
  va_end(ap);
  return r;
}
