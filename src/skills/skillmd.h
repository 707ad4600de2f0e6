/* skillmd.h - SKILL.md files in the Agent Skills format.
 *
 * A SKILL.md starts with YAML front matter between two `---` lines and
 * continues with a Markdown body. The front matter is parsed with libyaml
 * (never by hand) into JSON, so every key survives, including unknown ones
 * and nested `metadata`. The fields luagent uses are pulled out:
 *   name, description           required (a missing one is a problem)
 *   tags, keywords, examples    optional; a YAML list or one string
 *                               (comma-separated for tags/keywords)
 *   always                      optional boolean (luagent extension)
 * Problems are reported through a callback with the file line (1-based),
 * and parsing carries on whenever it can: when the YAML itself does not
 * parse, the most common cause in the wild (an unquoted value containing
 * ": ") is retried with that value quoted, so the skill still loads while
 * the problem is reported with libyaml's own line and message.
 */
#ifndef LUAGENT_SKILLMD_H
#define LUAGENT_SKILLMD_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "err.h"

struct skillmd {
  char *name;        /* NULL if missing */
  char *description; /* NULL if missing */
  char **tags;       /* NULL-terminated lists (never NULL themselves) */
  char **keywords;
  char **examples;
  bool always;
  char *body;    /* Markdown after the front matter ("" if none) */
  int name_line; /* 1-based file lines of the keys (0 = absent) */
  int description_line;
  int body_line; /* first line of the body */
  cJSON *front;  /* the whole front matter as JSON (an object) */
};

/* Called once per problem. line is 1-based (0 when the whole file is
 * concerned); fatal is true when the file could not be used at all. */
typedef void (*skillmd_report)(void *ud, int line, bool fatal, const char *msg);

/* Parses a SKILL.md text (len bytes, need not be NUL-terminated). On
 * success *out is a new struct skillmd (free with skillmd_free) and 0 is
 * returned; non-fatal problems went to report (may be NULL). When the file
 * cannot be used (no front matter, YAML that does not parse even after the
 * lenient retry, front matter that is not a mapping), returns ERR_INVALID
 * with e->msg naming "file:line: ..." and also reports it. file is only
 * used in messages. */
int skillmd_parse(const char *text, size_t len, const char *file, skillmd_report report, void *ud,
                  struct skillmd **out, struct err *e);
void skillmd_free(struct skillmd *m); /* NULL is a no-op */

/* A NULL-terminated string list helper: number of entries. */
size_t skillmd_list_len(char *const *list);

#endif
