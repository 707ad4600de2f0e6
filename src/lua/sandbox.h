/* sandbox.h - the sandboxed Lua VM. The only module that includes lua.h.
 *
 * A sandbox is one fresh lua_State with an allow-listed standard library,
 * a capped allocator, an instruction budget, a wall-clock deadline and a
 * stack-depth limit. Creating one is cheap, so every run gets its own.
 * The host reaches into it only through JSON values (cJSON): arguments go
 * in as JSON, results come out as JSON, and host functions registered with
 * sandbox_add_function receive their Lua arguments as a JSON array. That
 * keeps the Lua boundary in this module alone.
 */
#ifndef LUAGENT_SANDBOX_H
#define LUAGENT_SANDBOX_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct sb_limits {
  size_t memory_bytes;    /* cap on all Lua allocations (default 64 MiB) */
  uint64_t instructions;  /* VM instruction budget (default 100 million) */
  double deadline_s;      /* wall-clock seconds from sandbox_new (default 30) */
  double deadline_at;     /* optional absolute util_monotonic() deadline; the
                             earlier of the two wins (0 = unused). Nested runs
                             pass their parent's so they never outlive it. */
  int max_depth;          /* Lua call depth (default 1000) */
  size_t output_bytes;    /* total print/log bytes per run, each line's framing
                           * (newline, "[level] ") included (default 1 MiB) */
};
void sb_limits_default(struct sb_limits *l);

struct sandbox;

/* Output sink for print() and log.*: stream is "print" or a log level
 * ("debug", "info", "warn", "error"). text is already escaped and bounded. */
struct sb_output {
  void (*write)(void *ud, const char *stream, const char *text, size_t len);
  void *ud;
};

/* A host function callable from Lua as lib.name(...). args is a JSON array
 * of the Lua arguments, borrowed for the call and read-only: it lives in
 * memory the sandbox frees when fn returns (not in cJSON's allocator), so
 * read it or copy it (cJSON_Duplicate), but never free, change or link any
 * part of it into another tree, nor keep a pointer to it. On success set *ret to a new JSON value
 * (ownership passes to the sandbox) or leave it NULL for nil, and return 0.
 * On failure fill e and return <0: the script gets a structured error
 * { code = e->code, message = e->msg } raised at its call site. */
typedef int (*sb_hostfn)(void *ud, struct sandbox *sb, const cJSON *args, cJSON **ret,
                         struct err *e);

/* From inside a host function: its result is v, borrowed (pushed into
 * Lua as *ret would be, never freed), in place of *ret (leave it NULL).
 * v must stay valid and unchanged until the host function's caller has
 * pushed it, after fn returns: a part of fn's args (they live until then)
 * or a value that outlives the sandbox. */
void sandbox_ret_lent(struct sandbox *sb, const cJSON *v);

/* Creates a sandbox. lim may be NULL for the defaults. */
int sandbox_new(const struct sb_limits *lim, struct sandbox **out, struct err *e);
void sandbox_free(struct sandbox *sb); /* NULL is a no-op */

/* Registers lib.name (lib NULL: a global) before any code runs. The lib
 * table is read-only to scripts. Returns 0 or <0 on a bad name. */
int sandbox_add_function(struct sandbox *sb, const char *lib, const char *name, sb_hostfn fn,
                         void *ud);
/* Removes the shared global name (a library too): no chunk run from now on
 * sees it. What already holds it keeps it (the test runner's harness takes
 * its host library `__test`, then no test code can reach it). */
void sandbox_remove_global(struct sandbox *sb, const char *name);
/* Sets a read-only global holding a JSON value (e.g. a constant table). */
int sandbox_set_global(struct sandbox *sb, const char *name, const cJSON *value, struct err *e);
void sandbox_set_output(struct sandbox *sb, const struct sb_output *out);

/* Loads and runs a Lua text file (never bytecode) in its own _ENV. The
 * chunk's first return value is kept as the sandbox's "module" and, if ret
 * is not NULL, converted to JSON into *ret (caller frees; functions inside
 * are converted as {"$function": LINE}). chunkname is what errors show
 * (pass a workspace-relative path: host paths never reach messages). */
int sandbox_run_file(struct sandbox *sb, const char *path, const char *chunkname, cJSON **ret,
                     struct err *e);
/* The same for a string. */
int sandbox_run_string(struct sandbox *sb, const char *code, size_t len, const char *chunkname,
                       cJSON **ret, struct err *e);

/* From now on the chunk a run loads is kept compiled, for sandbox_rerun
 * (off by default: a sandbox run once needs no copy). */
void sandbox_keep_chunk(struct sandbox *sb);

/* Runs the last chunk that sandbox_run_string / sandbox_run_file loaded
 * (after sandbox_keep_chunk) once more, without compiling it again, in a fresh _ENV; its result
 * becomes the module. With sandbox_recycle this lets a host reuse one
 * sandbox for many calls of the same code (skill tools): every value the
 * chunk makes (its tables, closures and upvalues) is made anew. */
int sandbox_rerun(struct sandbox *sb, struct err *e);

/* sandbox_run_string for a host that runs many chunks, each many times,
 * in one recycled sandbox (the daemon's workers): the compiled form of
 * each chunk is kept under its chunkname with the exact text it came
 * from; the same name with the same text runs that compiled function
 * again, in a fresh _ENV as sandbox_rerun does, and any other text is
 * compiled anew and replaces it. The kept functions are the host's: no
 * script can reach them, and sandbox_recycle does not count them against
 * a call's memory cap. At most SB_CACHE_BYTES are kept (then the cache
 * starts over). */
#define SB_CACHE_BYTES ((size_t)4 << 20)
int sandbox_run_cached(struct sandbox *sb, const char *code, size_t len, const char *chunkname,
                       cJSON **ret, struct err *e);

/* Readies a sandbox for another, unrelated call: collects everything the
 * earlier calls left, reseeds math.random, and sets fresh limits from lim
 * (NULL: defaults): the instruction count starts at 0, the deadline from
 * now, the print/log allowance anew, no stop flag (set it again). The
 * memory cap counts what the state holds, as in a new sandbox. What an
 * earlier call could have left for a later one is unreachable by design:
 * the shared globals and libraries are read-only, each chunk run gets its
 * own _ENV, scripts cannot reach the registry, set __gc, __mode or
 * __close, or load bytecode; so reuse is as clean as a new sandbox.
 * Refused (<0) for a sandbox that hit a limit or is mid-call: free it. */
int sandbox_recycle(struct sandbox *sb, const struct sb_limits *lim, struct err *e);

/* Calls module[path[0]][path[1]]...(args...) where args is a JSON array
 * (may be NULL). *ret gets the first return value as JSON (NULL for nil).
 * If args_after is not NULL it receives the argument list converted back
 * to JSON after the call, so a callee's edits to a table argument (ctx.state)
 * can be read back. Errors carry file:line and the limit hit, if any. */
int sandbox_call(struct sandbox *sb, const char *const *path, const cJSON *args, cJSON **ret,
                 cJSON **args_after, struct err *e);

/* sandbox_call reading back only one field of the first argument: *picked
 * gets args[0][field] as JSON after the call (NULL when the first
 * argument is no table or the field is nil), so a host that needs one
 * table of what it passed (the daemon's ctx.state) does not convert the
 * rest back. */
int sandbox_call_pick(struct sandbox *sb, const char *const *path, const cJSON *args,
                      const char *field, cJSON **ret, cJSON **picked, struct err *e);

/* sandbox_call for a host that calls back into the script while one of
 * the sandbox's host functions is running (the test runner asks the
 * test's model.fn for a turn while the test waits in delegate()). The call
 * runs on the thread that host function was called on, on top of its
 * frame, which is left exactly as it was; the sandbox's limits apply. With
 * no host function running it runs on the main thread. Not thread-safe:
 * the host serialises callbacks into one sandbox. */
int sandbox_callback(struct sandbox *sb, const char *const *path, const cJSON *args, cJSON **ret,
                     struct err *e);

/* Told of every host function call of the sandbox: hook(ud, 1, 0) on the
 * calling thread just before the function runs (its answer is the token),
 * hook(ud, 0, token) just after it returned and before the script's stack
 * is touched again, so the hook may block there. For a host that lets
 * other threads run callbacks (sandbox_callback) while a host function
 * waits for them: the test runner keeps the callbacks into one sandbox
 * strictly nested. NULL: none (the default). */
typedef int (*sb_host_hook)(void *ud, int enter, int token);
void sandbox_set_host_hook(struct sandbox *sb, sb_host_hook hook, void *ud);

/* For a host that drives one sandbox through several separate calls (the
 * test runner: one call per test): a fresh instruction budget and a new
 * absolute deadline (util_monotonic()) from now on. A killed sandbox stays
 * killed. */
void sandbox_rearm(struct sandbox *sb, double deadline_at);
/* The clock os.time() and os.date() read when no time is given (unix
 * seconds); NULL: the real one. luagent test's fake.clock. */
void sandbox_set_clock(struct sandbox *sb, double (*fn)(void *ud), void *ud);
/* "chunk:line" of the script line that called the host function running
 * now (out gets "" and 0 comes back when none is running): where a host
 * callback's failure points. Allocates nothing. */
int sandbox_where(struct sandbox *sb, char *out, size_t n);
/* True once a limit killed the sandbox: every later call fails at once. */
int sandbox_killed(const struct sandbox *sb);

/* True if the module has a function at path. */
int sandbox_has_function(struct sandbox *sb, const char *const *path);

/* Resource accounting, for benchmarks and run records. */
size_t sandbox_memory_used(const struct sandbox *sb);
uint64_t sandbox_instructions_used(const struct sandbox *sb);
/* What is left of the sandbox's memory cap and instruction budget: a
 * nested sandbox (a skill tool called from this one) gets at most that, so
 * a run's budget is one budget however deep its calls go. */
void sandbox_room(const struct sandbox *sb, size_t *memory, uint64_t *instructions);
/* Charges instructions a nested sandbox spent to this one (thread-safe);
 * the limit is then seen at this sandbox's next check. */
void sandbox_spend(struct sandbox *sb, uint64_t instructions);

/* Makes the sandbox stop at its next hook check, with an error whose code
 * is "stopped", once *flag becomes non-zero: the operator's stop flag of
 * the run it serves (may be NULL). The flag may be set from another thread
 * or a signal handler. */
void sandbox_watch_stop(struct sandbox *sb, volatile int *flag);

/* Process-wide watchdog for single CLI runs: if the process is still inside
 * a run at deadline + grace (a C call that no hook can interrupt), it prints
 * message to stderr and exits with exit_code. watchdog_disarm cancels. */
void watchdog_arm(double deadline_at, double grace_s, int exit_code, const char *message);
void watchdog_disarm(void);
/* From now on every Lua call of every sandbox in this process is watched
 * too: stuck in one C call past its sandbox's deadline plus 2 s, the
 * process prints which chunk and exits with exit_code. Commands that run
 * user Lua (run, ask, chat, skills, tools) enable it; the daemon, which
 * supervises its workers, does not. */
void watchdog_enable(int exit_code);
/* Holds the armed watchdog (on != 0) while the process waits for a human
 * (an approval prompt on the terminal): that wait is not a stuck C call.
 * Releasing re-arms it at its old time, or a little after now if that has
 * passed, so the run can still end through its own deadline check. */
void watchdog_hold(int on);


#endif
