/* sandbox_impl.h - shared between the sandbox module's files
 * (sandbox.c, sandbox_lib.c, sandbox_pattern.c, sandbox_json.c). Not for
 * other modules: they use sandbox.h. */
#ifndef LUAGENT_SANDBOX_IMPL_H
#define LUAGENT_SANDBOX_IMPL_H

#include <lauxlib.h>
#include <lua.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

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
 * Returns -1 when nested deeper than the JSON depth limit or out of Lua
 * stack. Lua memory errors raise. [-0, +1, m] */
int sandbox__push_json(lua_State *L, const cJSON *v, int depth);

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
 * of one host call): *room is the host bytes left and is decreased. */
cJSON *sandbox__to_json_budget(lua_State *L, int idx, int mark_functions, size_t *room, char *err,
                               size_t errn);

/* Pushes the json library table. [-0, +1, m] */
void sandbox__open_json(lua_State *L);

/* Replaces find, match, gmatch and gsub in the table at index idx with the
 * bounded pattern matcher, which charges every step. [-0, +0, -] */
void sandbox__open_pattern(lua_State *L, int idx);

#endif
