/* sandbox_impl.h - shared between the sandbox module's files
 * (sandbox.c, sandbox_lib.c, sandbox_co.c, sandbox_watchdog.c, sandbox_reuse.c,
 * sandbox_pattern.c, sandbox_json.c). Not for other modules: they use
 * sandbox.h. */
#ifndef LUAGENT_SANDBOX_IMPL_H
#define LUAGENT_SANDBOX_IMPL_H

#include <lauxlib.h>
#include <lua.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "util.h"

/* Charges n units of work (pattern-matcher steps, bytes moved) against the
 * running sandbox's instruction budget. Raises the limit error and does not
 * return when the budget or the deadline is exhausted. [-0, +0, e] */
void sandbox__charge(lua_State *L, uint64_t n);

/* Checks every limit (budget, deadline, stop flag, depth) without raising:
 * returns 1 when the run is killed (the kill is recorded, so the caller
 * frees what it holds and then calls sandbox__raise_killed). [-0, +0, -] */
int sandbox__poll(lua_State *L);

/* Raises the run's kill error at the current position. [-0, +1, v] */
int sandbox__raise_killed(lua_State *L);

/* Bytes the running sandbox may still allocate under its memory cap. */
size_t sandbox__mem_room(lua_State *L);

/* Kills the run with the memory-limit error; what names the work that
 * would have crossed the cap (e.g. "converting to JSON"). Does not raise. */
void sandbox__kill_memory(lua_State *L, const char *what);

/* Lua <-> JSON (sandbox_json.c). */

/* Pushes v as a Lua value: null as json.null, an empty array marked with
 * json.array, strings with 0xC0 0x80 turned back into a zero byte, number
 * nodes whose valuestring holds an integer that fits int64 as integers.
 * A cJSON_Raw node holds JSON text (valid: the caller checked it) that is
 * decoded straight into Lua (sandbox__push_json_text); when it is an
 * object, the Raw node's children are members set over the decoded ones.
 * Returns -1 when nested deeper than the JSON depth limit or out of Lua
 * stack. Lua memory errors raise. [-0, +1, m] */
int sandbox__push_json(lua_State *L, const cJSON *v, int depth);

/* Pushes the value of the JSON text s (n bytes) as sandbox__push_json
 * would push json_parse's tree of it, without the tree: the same values,
 * tables, metatables and numbers, the same depth limit (depth is that of
 * the text's value), read by json_scan. Returns 0, -1 as sandbox__push_json
 * does, or -2 (nothing pushed) when s is not JSON (callers check it first,
 * json_kind). Lua memory errors raise. [-0, +1, m] */
int sandbox__push_json_text(lua_State *L, const char *s, size_t n, int depth);

/* sandbox__push_json for a value the caller gives away: v is freed
 * whether the push succeeds, fails (-1: nested too deeply; partial values
 * may be left on the stack, so raise next)
 * or raises a Lua memory error (then at the next host call or in
 * sandbox_free), so a raise never leaks it. [-0, +1, m] */
int sandbox__push_json_take(lua_State *L, cJSON *v);

/* Converts the Lua value at idx to a new cJSON value (the caller frees).
 * A zero byte in a string or key becomes 0xC0 0x80, an integer outside
 * +-2^53 keeps its exact text in valuestring, a string that is not UTF-8
 * is refused. The conversion is bounded by the sandbox's remaining memory
 * (nodes and bytes) and polls the deadline and the stop flag. Returns NULL
 * with a message naming the path in err (always a terminated string);
 * when the run was killed meanwhile (sandbox__poll is then 1) the caller
 * must report the kill. Never raises. functions: as {"$function": LINE}
 * when mark_functions, else an error. [-0, +0, -] */
cJSON *sandbox__to_json(lua_State *L, int idx, int mark_functions, char *err, size_t errn);

/* The same against a budget shared by several conversions (the arguments
 * of one host call): *room is the host bytes left and is decreased. depth:
 * the containers the value will sit inside when it is pushed back (0 for
 * a value of its own), so that what converts can always be pushed again. */
cJSON *sandbox__to_json_budget(lua_State *L, int idx, int depth, int mark_functions, size_t *room,
                               char *err,
                               size_t errn);

/* Where a host call's argument tree lives (l_hostfn): the nodes and
 * their strings are carved from a buffer on the caller's stack, then from
 * malloc'd chunks, and all of it goes at once with sandbox__arena_free, so
 * converting the arguments of the usual call costs no allocation at all.
 * A tree made here is an ordinary cJSON tree to read and to copy
 * (cJSON_Duplicate), but it must never be freed, changed or linked into
 * another tree: sb_hostfn's args is borrowed for the call, read-only. */
struct sb_arena_chunk;
struct sb_arena {
  char *p;                       /* next free byte */
  size_t left;                   /* bytes free at p */
  size_t next_size;              /* the next chunk's size */
  struct sb_arena_chunk *chunks; /* malloc'd, newest first */
  _Alignas(16) char first[1024]; /* the buffer used first */
};
void sandbox__arena_init(struct sb_arena *a);
void sandbox__arena_free(struct sb_arena *a);

/* sandbox__to_json_budget (without function markers) building the tree in
 * the arena a: the same checks, the same charges against *room, the same
 * errors, the same tree; nothing to free but the arena. [-0, +0, -] */
cJSON *sandbox__to_json_arena(lua_State *L, int idx, struct sb_arena *a, size_t *room, char *err,
                              size_t errn);

/* Pushes the json library table. [-0, +1, m] */
void sandbox__open_json(lua_State *L);

/* Replaces find, match, gmatch and gsub in the table at index idx with the
 * bounded pattern matcher, which charges every step. [-0, +0, -] */
void sandbox__open_pattern(lua_State *L, int idx);

/* --- what sandbox.c, sandbox_lib.c and sandbox_co.c share (split from
 * sandbox.c; the names lost their `static`, unchanged otherwise). */

#include <signal.h>

#include "sandbox.h"

#define HOOK_PERIOD 1000
/* Coroutines get a shorter hook period: lua_newthread starts a thread with
 * a fresh count, so up to one period per thread is never seen by the hook.
 * Creating a coroutine is charged that period up front (co_new). */
#define CO_HOOK_PERIOD 100
/* Nesting bound for coroutine.resume / wrap / close. Stock 5.4 stops resume
 * at 200 C levels, but 5.4.4's lua_resetthread (coroutine.close) counts no
 * C level at all, so close -> __close -> close recursion overflows the C
 * stack (SIGSEGV). The sandbox counts all three itself. */
#define CO_MAX_NEST 100

struct sandbox {
  lua_State *L;
  size_t mem_used, mem_limit;
  uint64_t instr_used, instr_limit;
  unsigned hook_period;
  unsigned co_period;             /* hook period of coroutines */
  int co_depth;                   /* nesting of resume/wrap/close now */
  double deadline;                /* util_monotonic() */
  char wd_name[128];              /* the last chunk run, for the watchdog's message */
  int max_depth;
  volatile sig_atomic_t interrupted;
  volatile int *stop_flag; /* the run's stop flag (sandbox_watch_stop) */
  int killed;                     /* a limit was hit: every instruction raises */
  char kill_code[32];
  char kill_msg[256];
  char kill_where[256];           /* "file:line" where the limit was first hit */
  struct sb_output out;
  size_t out_used, out_limit;
  int out_truncated;
  int module_ref;
  int keep_chunk;                 /* sandbox_keep_chunk was called */
  int chunk_ref;                  /* the last chunk loaded, compiled (sandbox_rerun) */
  size_t clean_mem;               /* memory after the last full collection (recycle) */
  int cache_ref;                  /* sandbox_run_cached: chunkname -> {source, function} */
  size_t cache_mem;               /* what those compiled chunks hold (not the script's) */
  cJSON *pending; /* a host result being pushed (freed if the push raises) */
  struct sbuf jscan; /* sandbox__push_json_text's scratch: kept, so a raise leaks nothing */
  const cJSON *lent; /* the running host function's borrowed result (sandbox_ret_lent) */
  lua_State *host_L; /* the thread of the host function running now, if any */
  sb_host_hook host_hook; /* sandbox_set_host_hook */
  void *host_hook_ud;
  double (*clock_fn)(void *ud); /* os.time()/os.date()'s clock (NULL: the real one) */
  void *clock_ud;
  int clock_wrapped; /* os.time/os.date read clock_fn (sandbox_set_clock) */
};

struct hostfn {
  sb_hostfn fn;
  void *ud;
  char name[96];
};

static inline struct sandbox *sb_of(lua_State *L) {
  return *(struct sandbox **)lua_getextraspace(L);
}

/* sandbox.c */
/* lua_Alloc counting s->mem_used against s->mem_limit (ud is the sandbox). */
void *sandbox__alloc(void *ud, void *ptr, size_t osize, size_t nsize);
int sandbox__kill_raise(lua_State *L);
int sandbox__limits_check(lua_State *L, struct sandbox *s);
void sandbox__count_hook(lua_State *L, lua_Debug *ar);
int sandbox__is_readonly(lua_State *L, int idx);
void sandbox__push_globals(lua_State *L); /* [-0, +1, -] the shared globals (real) */
void sandbox__apply_limits(struct sandbox *s, const struct sb_limits *lim);
/* Runs the chunk on top of the stack in a fresh _ENV; its first result
 * becomes the module (converted into *ret when ret is set). */
/* Compiles a text chunk (never bytecode; a "#!" line skipped) and pushes
 * it; on error the stack is emptied and e says where. */
int sandbox__load(struct sandbox *s, const char *code, size_t len, const char *chunkname,
                  struct err *e);
int sandbox__run_loaded(struct sandbox *s, const char *chunkname, cJSON **ret, struct err *e);
void sandbox__push_env(lua_State *L);
/* sandbox_lib.c */
extern const char SANDBOX__GUARD_KEY;
int sandbox__guard_newindex(lua_State *L);
int sandbox__l_setmetatable(lua_State *L);
int sandbox__l_getmetatable(lua_State *L);
int sandbox__l_rawset(lua_State *L);
int sandbox__l_tostring(lua_State *L);
int sandbox__l_print(lua_State *L);
int sandbox__l_log(lua_State *L);
int sandbox__l_collectgarbage(lua_State *L);
int sandbox__l_load(lua_State *L);
int sandbox__l_forbidden(lua_State *L);
int sandbox__l_pcall(lua_State *L);
int sandbox__l_xpcall(lua_State *L);
int sandbox__l_str_rep(lua_State *L);
int sandbox__l_math_randomseed(lua_State *L);
void sandbox__random_seeds(lua_Integer seed[2]);
int sandbox__l_str_format(lua_State *L);
int sandbox__l_tab_move(lua_State *L);
int sandbox__l_tab_sort(lua_State *L);
int sandbox__l_tab_concat(lua_State *L);
void sandbox__wrap_field(lua_State *L, const char *lib, const char *name, lua_CFunction f,
                int own_errors);
/* sandbox_co.c */
int sandbox__l_co_create(lua_State *L);
int sandbox__l_co_resume(lua_State *L);
int sandbox__l_co_wrap(lua_State *L);
int sandbox__l_co_close(lua_State *L);
/* sandbox_watchdog.c */
int sandbox__wd_enter(double deadline_at, const char *who);
void sandbox__wd_leave(int slot);

#endif
