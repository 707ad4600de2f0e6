/* sandbox_impl.h - shared between the sandbox module's files
 * (sandbox.c, sandbox_lib.c, sandbox_pattern.c, sandbox_json.c). Not for
 * other modules: they use sandbox.h. */
#ifndef LUAGENT_SANDBOX_IMPL_H
#define LUAGENT_SANDBOX_IMPL_H

#include <lauxlib.h>
#include <lua.h>
#include <stdint.h>

/* Charges n units of work (pattern-matcher steps, bytes moved) against the
 * running sandbox's instruction budget. Raises the limit error and does not
 * return when the budget or the deadline is exhausted. [-0, +0, e] */
void sandbox__charge(lua_State *L, uint64_t n);

/* Replaces find, match, gmatch and gsub in the table at index idx with the
 * bounded pattern matcher, which charges every step. [-0, +0, -] */
void sandbox__open_pattern(lua_State *L, int idx);

#endif
