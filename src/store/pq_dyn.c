/* pq_dyn.c - libpq's functions, forwarded to libpq loaded on first use
 * (pq_dyn.h). */
#include "pq_dyn.h"

#ifdef LUAGENT_HAVE_LIBPQ
#include <libpq-fe.h>
#include <stdio.h>

#include "dynlib.h"

#ifndef LUAGENT_PQ_SONAME
#define LUAGENT_PQ_SONAME "libpq.so.5"
#endif

static const char *pq_dyn_why(void);
#define WHY ((char *)pq_dyn_why()) /* libpq's messages are char *; this one is not to be written */

/* X(return type, name, (parameters), (arguments), value when libpq is
 * missing); V(...) for functions returning nothing, which never load it
 * (what they free can only exist if it is loaded). libpq has no variadic
 * functions. Only functions of libpq 10 and later: a newer one listed here
 * would make an older libpq fail to load as a whole. */
#define PQ_PARAMS_EXEC \
  const char *const *values, const int *lengths, const int *formats, int result_format
#define PQ_FNS(X, V)                                                                               \
  X(PGconn *, PQconnectdb, (const char *info), (info), NULL)                                       \
  X(PGconn *, PQconnectdbParams, (const char *const *keys, const char *const *vals, int expand),   \
    (keys, vals, expand), NULL)                                                                    \
  X(PGconn *, PQconnectStart, (const char *info), (info), NULL)                                    \
  X(PGconn *, PQconnectStartParams, (const char *const *keys, const char *const *vals, int expand),\
    (keys, vals, expand), NULL)                                                                    \
  X(PostgresPollingStatusType, PQconnectPoll, (PGconn * c), (c), PGRES_POLLING_FAILED)             \
  V(PQfinish, (PGconn * c), (c))                                                                   \
  V(PQreset, (PGconn * c), (c))                                                                    \
  X(ConnStatusType, PQstatus, (const PGconn *c), (c), CONNECTION_BAD)                              \
  X(PGTransactionStatusType, PQtransactionStatus, (const PGconn *c), (c), PQTRANS_UNKNOWN)         \
  X(const char *, PQparameterStatus, (const PGconn *c, const char *name), (c, name), NULL)         \
  X(int, PQserverVersion, (const PGconn *c), (c), 0)                                               \
  X(char *, PQerrorMessage, (const PGconn *c), (c), WHY)                                           \
  X(int, PQsocket, (const PGconn *c), (c), -1)                                                     \
  X(int, PQbackendPID, (const PGconn *c), (c), 0)                                                  \
  X(char *, PQdb, (const PGconn *c), (c), NULL)                                                    \
  X(char *, PQuser, (const PGconn *c), (c), NULL)                                                  \
  X(char *, PQhost, (const PGconn *c), (c), NULL)                                                  \
  X(char *, PQport, (const PGconn *c), (c), NULL)                                                  \
  X(int, PQsslInUse, (PGconn * c), (c), 0)                                                         \
  X(int, PQclientEncoding, (const PGconn *c), (c), -1)                                             \
  X(int, PQsetClientEncoding, (PGconn * c, const char *enc), (c, enc), -1)                         \
  X(PQnoticeProcessor, PQsetNoticeProcessor, (PGconn * c, PQnoticeProcessor fn, void *arg),        \
    (c, fn, arg), NULL)                                                                            \
  X(PQnoticeReceiver, PQsetNoticeReceiver, (PGconn * c, PQnoticeReceiver fn, void *arg),           \
    (c, fn, arg), NULL)                                                                            \
  X(PGresult *, PQexec, (PGconn * c, const char *query), (c, query), NULL)                         \
  X(PGresult *, PQexecParams,                                                                      \
    (PGconn * c, const char *query, int n, const Oid *types, PQ_PARAMS_EXEC),                      \
    (c, query, n, types, values, lengths, formats, result_format), NULL)                           \
  X(PGresult *, PQprepare, (PGconn * c, const char *name, const char *query, int n, const Oid *types),\
    (c, name, query, n, types), NULL)                                                              \
  X(PGresult *, PQexecPrepared, (PGconn * c, const char *name, int n, PQ_PARAMS_EXEC),             \
    (c, name, n, values, lengths, formats, result_format), NULL)                                   \
  X(int, PQsendQuery, (PGconn * c, const char *query), (c, query), 0)                              \
  X(int, PQsendQueryParams,                                                                        \
    (PGconn * c, const char *query, int n, const Oid *types, PQ_PARAMS_EXEC),                      \
    (c, query, n, types, values, lengths, formats, result_format), 0)                              \
  X(int, PQsendPrepare, (PGconn * c, const char *name, const char *query, int n, const Oid *types),\
    (c, name, query, n, types), 0)                                                                 \
  X(int, PQsendQueryPrepared, (PGconn * c, const char *name, int n, PQ_PARAMS_EXEC),               \
    (c, name, n, values, lengths, formats, result_format), 0)                                      \
  X(int, PQsetSingleRowMode, (PGconn * c), (c), 0)                                                 \
  X(PGresult *, PQgetResult, (PGconn * c), (c), NULL)                                              \
  X(int, PQisBusy, (PGconn * c), (c), 0)                                                           \
  X(int, PQconsumeInput, (PGconn * c), (c), 0)                                                     \
  X(PGnotify *, PQnotifies, (PGconn * c), (c), NULL)                                               \
  X(int, PQputCopyData, (PGconn * c, const char *buf, int n), (c, buf, n), -1)                     \
  X(int, PQputCopyEnd, (PGconn * c, const char *msg), (c, msg), -1)                                \
  X(int, PQgetCopyData, (PGconn * c, char **buf, int async), (c, buf, async), -2)                  \
  X(int, PQsetnonblocking, (PGconn * c, int on), (c, on), -1)                                      \
  X(int, PQflush, (PGconn * c), (c), -1)                                                           \
  X(PGPing, PQping, (const char *info), (info), PQPING_NO_ATTEMPT)                                 \
  X(PGPing, PQpingParams, (const char *const *keys, const char *const *vals, int expand),          \
    (keys, vals, expand), PQPING_NO_ATTEMPT)                                                       \
  X(ExecStatusType, PQresultStatus, (const PGresult *r), (r), PGRES_FATAL_ERROR)                   \
  X(char *, PQresStatus, (ExecStatusType s), (s), WHY)                                             \
  X(char *, PQresultErrorMessage, (const PGresult *r), (r), WHY)                                   \
  X(char *, PQresultErrorField, (const PGresult *r, int field), (r, field), NULL)                  \
  X(int, PQntuples, (const PGresult *r), (r), 0)                                                   \
  X(int, PQnfields, (const PGresult *r), (r), 0)                                                   \
  X(int, PQnparams, (const PGresult *r), (r), 0)                                                   \
  X(char *, PQfname, (const PGresult *r, int col), (r, col), NULL)                                 \
  X(int, PQfnumber, (const PGresult *r, const char *name), (r, name), -1)                          \
  X(Oid, PQftype, (const PGresult *r, int col), (r, col), 0)                                       \
  X(char *, PQcmdStatus, (PGresult * r), (r), NULL)                                                \
  X(char *, PQcmdTuples, (PGresult * r), (r), NULL)                                                \
  X(Oid, PQoidValue, (const PGresult *r), (r), 0)                                                  \
  X(char *, PQgetvalue, (const PGresult *r, int row, int col), (r, row, col), NULL)                \
  X(int, PQgetlength, (const PGresult *r, int row, int col), (r, row, col), 0)                     \
  X(int, PQgetisnull, (const PGresult *r, int row, int col), (r, row, col), 1)                     \
  V(PQclear, (PGresult * r), (r))                                                                  \
  V(PQfreemem, (void *p), (p))                                                                     \
  X(PQconninfoOption *, PQconninfoParse, (const char *info, char **errmsg), (info, errmsg), NULL)  \
  V(PQconninfoFree, (PQconninfoOption * o), (o))                                                   \
  X(char *, PQescapeLiteral, (PGconn * c, const char *s, size_t n), (c, s, n), NULL)               \
  X(char *, PQescapeIdentifier, (PGconn * c, const char *s, size_t n), (c, s, n), NULL)            \
  X(size_t, PQescapeStringConn, (PGconn * c, char *to, const char *from, size_t n, int *error),    \
    (c, to, from, n, error), (error ? (*error = 1, (size_t)0) : (size_t)0))                        \
  X(unsigned char *, PQescapeByteaConn,                                                            \
    (PGconn * c, const unsigned char *from, size_t n, size_t *to_length), (c, from, n, to_length), \
    NULL)                                                                                          \
  X(unsigned char *, PQunescapeBytea, (const unsigned char *s, size_t *n), (s, n), NULL)           \
  X(PGcancel *, PQgetCancel, (PGconn * c), (c), NULL)                                              \
  V(PQfreeCancel, (PGcancel * c), (c))                                                             \
  X(int, PQcancel, (PGcancel * c, char *buf, int n), (c, buf, n), 0)                               \
  X(int, PQisthreadsafe, (void), (), 0)                                                            \
  X(int, PQlibVersion, (void), (), 0)

#define PTR_X(ret, name, params, args, fail) static ret(*p_##name) params;
#define PTR_V(name, params, args) static void(*p_##name) params;
PQ_FNS(PTR_X, PTR_V)

#define SYM_X(ret, name, params, args, fail) {#name, (void **)&p_##name},
#define SYM_V(name, params, args) {#name, (void **)&p_##name},
static const struct dynlib_sym syms[] = {PQ_FNS(SYM_X, SYM_V)};

static struct dynlib lib = {.what = "libpq",
                            .soname = LUAGENT_PQ_SONAME,
                            .env = "LUAGENT_LIBPQ",
                            .package = "the libpq5 package",
                            .syms = syms,
                            .nsyms = sizeof syms / sizeof syms[0],
                            .lock = PTHREAD_MUTEX_INITIALIZER};

static const char *pq_dyn_why(void) { return dynlib_error(&lib); }

int pq_dyn_load(struct err *e) { return dynlib_load(&lib, e); }

#define DEF_X(ret, name, params, args, fail) DYNLIB_FORWARD(lib, 0, ret, name, params, args, fail)
#define DEF_V(name, params, args) DYNLIB_FORWARD_VOID(lib, name, params, args)
PQ_FNS(DEF_X, DEF_V)

#else /* no libpq headers where this was built */

int pq_dyn_load(struct err *e) {
  return err_set(e, ERR_FAIL, "library", "libpq: this luagent was built without libpq's headers");
}

#endif
