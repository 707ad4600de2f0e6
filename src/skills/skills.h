/* skills.h - skill folders: loading, validation, and selection for a prompt.
 *
 * A workspace's skills live in <workspace>/skills/<folder>/ with either or
 * both of:
 *   skill.lua  returns { name, description, keywords, examples, tags,
 *              prompt, always, tools = { <tool> = { description, params,
 *              impact, open_world, run } } } (see DESIGN.md). The file is
 *              run in a sandbox; each tool is registered in the runtime's
 *              tool registry as "<skill>.<tool>" with a handler that runs
 *              `run(args, call)` in a fresh sandbox as caller kind "skill".
 *   SKILL.md   the Agent Skills format (skillmd.h): front matter name,
 *              description, tags, examples (keywords, always: luagent
 *              extensions) and a Markdown body that is added to the prompt.
 * Loading validates everything and collects each problem with file and
 * line instead of failing: a broken skill is skipped (or loaded without the
 * broken part), the others load. Then the skills are indexed for selection
 * (select.h) with the `selection` and `embeddings` config tables; vectors
 * from an embedding endpoint are cached in the store (the builtin
 * embedding is cheaper to recompute than to look up, so it is not).
 */
#ifndef LUAGENT_SKILLS_H
#define LUAGENT_SKILLS_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"
#include "select.h"

struct runtime;
struct embedder;
struct store;

struct skill {
  char *name;
  char *description;
  char **keywords; /* NULL-terminated lists, never NULL */
  char **tags;
  char **examples;
  char **tools;             /* full tool names registered ("notes.add") */
  char **tool_descriptions; /* parallel to tools */
  char *prompt;             /* skill.lua `prompt` and/or the SKILL.md body; "" if none */
  bool always;              /* always selected */
  char *source;             /* workspace-relative defining file ("skills/notes/skill.lua") */
  char *md_source;          /* the SKILL.md, when there is one (else NULL) */
  int line;                 /* line of `name` in source (0 if unknown) */
  size_t line_order;        /* load position (internal) */
};

struct skill_problem {
  char *file; /* workspace-relative path */
  int line;   /* 1-based, 0 = the whole file */
  char *msg;
  bool fatal; /* the skill (or the tool named in msg) was not loaded */
};

struct skillset;

/* Loads <rt->workspace>/skills/<folder>/ for every folder (sorted by name),
 * registers Lua tools in rt->tools and builds the selection index. Problems
 * with skill files never fail the call: they are collected (see
 * skillset_problem). Fails only on a bad `selection`/`embeddings` config or
 * an unreadable skills folder (a missing one is an empty set). The caller
 * owns *out (skillset_free) and may store it in rt->skills. An embedding
 * endpoint that fails leaves the set keyword-only with skillset_warning()
 * saying why. */
int skills_load(struct runtime *rt, struct skillset **out, struct err *e);

/* skills_load from another folder laid out like skills/ (the daemon's
 * checked copy); messages and sources still say skills/<folder>/... */
int skills_load_from(struct runtime *rt, const char *dir, struct skillset **out, struct err *e);

/* Loads the workspace's skills into rt->skills unless already loaded (so
 * their tools are registered and skills_select can run on rt->skills);
 * runtime_free frees them. Same errors as skills_load. Commands that let
 * scripts or the model call skill tools (run, ask, chat, daemon) call this
 * once after runtime_open. */
int skills_ensure(struct runtime *rt, struct err *e);

/* The loader under skills_load, usable without a runtime: loads skills_dir
 * (paths in messages start with display_prefix, e.g. "skills"), with rt
 * NULL a skill.lua is reported as a problem and skipped. p may be NULL
 * (defaults), emb NULL (keyword only), st NULL (no embedding cache). emb and
 * st are borrowed and must outlive the set. */
int skillset_load_dir(const char *skills_dir, const char *display_prefix, struct runtime *rt,
                      const struct sel_params *p, struct embedder *emb, struct store *st,
                      struct skillset **out, struct err *e);
void skillset_free(
    struct skillset *s); /* NULL is a no-op; also frees an embedder skills_load made */

size_t skillset_count(const struct skillset *s);
const struct skill *skillset_at(const struct skillset *s, size_t i); /* in name order */
const struct skill *skillset_find(const struct skillset *s, const char *name);
size_t skillset_nproblems(const struct skillset *s);
const struct skill_problem *skillset_problem(const struct skillset *s, size_t i);
/* Advice that is not a problem (a skill without examples): `skills check`
 * prints it but does not fail on it. Same shape as a problem. */
size_t skillset_nhints(const struct skillset *s);
const struct skill_problem *skillset_hint(const struct skillset *s, size_t i);
/* Why selection is keyword-only (the embedding endpoint failed), or NULL. */
const char *skillset_warning(struct skillset *s);
/* The selection index (documents in skillset_at order) and its parameters. */
struct selector *skillset_selector(struct skillset *s);
const struct sel_params *skillset_params(const struct skillset *s);

/* One selected skill with the scores that chose it. */
struct skill_pick {
  const struct skill *skill;
  struct sel_hit hit;
};

/* The skills to put into the prompt for message: every `always` skill, then
 * up to max_skills ranked skills whose confidence reaches min_confidence
 * (so an unrelated message may select none). out must hold at least max
 * entries; *n gets the count, best first after the always ones. If
 * embedding the message fails, selection is keyword-only and *degraded is
 * set with warn saying why (not an error). Returns 0; thread-safe. */
int skills_select(struct skillset *s, const char *message, struct skill_pick *out, size_t max,
                  size_t *n, int *degraded, struct err *warn);

/* The full ranking for --explain/--batch (no confidence cut-off). */
int skills_rank(struct skillset *s, const char *message, enum sel_mode mode, struct skill_pick *out,
                size_t max, size_t *n, int *degraded, struct err *warn);

/* Helpers for composing a model prompt from skills_select's picks. */
struct sbuf;
struct tool;
/* Appends, for each pick, "## Skill: <name>\n<description>\n\n<prompt>\n\n"
 * (the prompt part only when it is not empty) to b. */
void skills_prompt(const struct skill_pick *picks, size_t n, struct sbuf *b);
/* True when t should be offered to the model with these picks: host tools
 * (no owning skill) always, a skill's tools only when the skill is picked. */
bool skills_offers_tool(const struct skill_pick *picks, size_t n, const struct tool *t);

/* True if name is a valid skill or tool name: [a-z][a-z0-9_-]*, at most 64. */
bool skills_valid_name(const char *name);

#endif
