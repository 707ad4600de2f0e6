/* rules.h - the policy rules of luagent.lua (`rules` key).
 *
 *   rules = {
 *     { tool = "fs.*", caller = "model", args = { path = "^secrets/" },
 *       action = "deny", reason = "the model may not touch secrets/" },
 *     { tool = "fs.write", caller = "automation", name = "nightly*", action = "allow" },
 *   }
 *
 * A rule matches when every field it sets matches: `tool` is a glob on the
 * full tool name (* and ?), `caller` a caller kind (operator, model,
 * automation, skill; "*" or absent: any), `name` a glob on the caller's name,
 * and each `args` entry a Lua pattern that must be found in the argument at
 * that (dotted) path; numbers and booleans are matched as their text, and
 * a missing or non-scalar argument does not match. All matching rules count:
 * deny beats escalate beats allow. Lua patterns run in a bounded C matcher
 * (rules_pattern_find): a pattern that needs too many steps counts as a
 * match failure that denies.
 */
#ifndef LUAGENT_RULES_H
#define LUAGENT_RULES_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "err.h"

enum rule_action { RULE_NONE = -1, RULE_ALLOW = 0, RULE_ESCALATE = 1, RULE_DENY = 2 };

struct ruleset;

/* Parses the `rules` value (a JSON array of objects, NULL: no rules). file
 * (may be NULL) names the config file in messages: "luagent.lua: rules[3]:
 * ...". Every pattern is checked here, so a bad one fails at load. */
int rules_parse(const cJSON *rules, const char *file, struct ruleset **out, struct err *e);
void rules_free(struct ruleset *r);
size_t rules_count(const struct ruleset *r);

struct rule_match {
  enum rule_action action; /* RULE_NONE when no rule matched */
  int rule;                /* 1-based index of the deciding rule */
  const char *reason;      /* its reason (borrowed; may be "") */
  int explicit_allow;      /* an allow rule naming this tool and caller kind matched */
  int matched;             /* how many rules matched */
};

/* Evaluates every rule. Returns 0, or <0 when a pattern ran past its step
 * budget (e filled; the caller must deny). */
int rules_eval(const struct ruleset *r, const char *tool, const char *caller_kind,
               const char *caller_name, const cJSON *args, struct rule_match *m, struct err *e);

/* Shell-style glob: * any run, ? one character. */
int rules_glob(const char *pat, const char *s);

/* Lua 5.4 pattern search (string.find semantics, no init): returns 1 when
 * found, 0 when not, ERR_INVALID for a malformed pattern, ERR_LIMIT when the
 * match took more than max_steps steps. */
int rules_pattern_find(const char *pat, size_t plen, const char *s, size_t slen, long max_steps,
                       struct err *e);

#endif
