/* skills_tools.h - the model's way back when selection missed: two built-in
 * read-only tools, offered in every ReAct loop unless the config says
 * `selection = { recovery = false }`.
 *
 *   skills.find { query, limit? }  the best matching skills for query
 *                 (fused ranking, no confidence cut), each with a one-line
 *                 description and its tools: {"skills": [{name,
 *                 description, tools, confidence}]}
 *   skills.load { name }           the skill's instructions and the names
 *                 of its tools: {"skill", "description", "tools",
 *                 "prompt"}; the ReAct loop then offers those tools from
 *                 the next model call on (progressive disclosure).
 *
 * Both go through tool_call like every call (rules, hooks, audit), and a
 * loaded skill's tools are ordinary tools: each call to them passes the
 * whole pipeline. A loop with a tool list (ctx->tool_scope: delegate's
 * opts.tools, ask --tools) offers exactly that list, so these two only
 * when it names them ("skills.*"); even then neither widens it: find lists
 * and load accepts only skills with a tool inside the list, load names
 * only those tools, and the loop adds nothing outside it either. A skill
 * cannot be named "skills", so no workspace tool can pose as these two.
 */
#ifndef LUAGENT_SKILLS_TOOLS_H
#define LUAGENT_SKILLS_TOOLS_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "call.h"
#include "err.h"
#include "skills.h"

#define SKILLS_FIND "skills.find"
#define SKILLS_LOAD "skills.load"
#define SKILLS_RESERVED "skills" /* the skill name the two tools live under */

/* Registers both tools in rt->tools unless they are there already. */
int skills_tools_register(struct runtime *rt, struct err *e);

/* True when pattern (a name, or a glob such as "notes.*") matches name. */
bool skills_tool_matches(const char *pattern, const char *name);
/* True when a loop with this tool list (NULL: no list) may use tool name. */
bool skills_in_scope(const cJSON *scope, const char *name);
/* True when skill k may be found and loaded in a loop with this tool list:
 * always without a list, else when one of its tools is in it. */
bool skills_skill_in_scope(const cJSON *scope, const struct skill *k);

#endif
