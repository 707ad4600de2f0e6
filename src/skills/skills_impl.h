/* skills_impl.h - what skills.c (loading) and skill_tool.c (running a
 * skill.lua tool) share. Not for other modules. */
#ifndef LUAGENT_SKILLS_IMPL_H
#define LUAGENT_SKILLS_IMPL_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "call.h"
#include "err.h"
#include "tool.h"

/* skill.lua's text and the skill's idle sandboxes, shared by its tools
 * (reference counted; loading and freeing happen on one thread). */
struct skill_source;
/* A source holding a copy of text (len bytes plus its NUL), one ref. */
struct skill_source *skills__source_new(const char *text, size_t len);
/* One more ref; returns src. */
struct skill_source *skills__source_ref(struct skill_source *src);
/* Drops a ref; the last frees the text and the idle sandboxes (NULL is a
 * no-op). No call of the skill's tools may be running then. */
void skills__source_unref(struct skill_source *src);

/* A tool's handler data (toolreg ud): owns its strings and one ref. */
struct lua_tool {
  char *skill, *tool, *chunk;
  struct skill_source *src;
};

void skills__lua_tool_free(void *ud);
/* The tool handler of every skill.lua tool (tool.h's handler contract). */
int skills__lua_tool_handler(struct call_ctx *ctx, const struct tool *t, const cJSON *args,
                             cJSON **result, struct err *e);

#endif
