/* cli_check.h - problem records shared by `luagent check`, `skills check`
 * and `automations check` (cli-internal).
 *
 * A problem is a JSON object {what, file, line, message, level}: what is
 * "config", "hooks", "skill" or "automation"; line 0 means the whole file;
 * level is "error" (something does not load or is invalid) or "warning"
 * (it loads but cannot work as written, e.g. a schedule that never fires).
 */
#ifndef LUAGENT_CLI_CHECK_H
#define LUAGENT_CLI_CHECK_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "automation.h"
#include "cli.h"

/* Appends a problem made from msg ("file:line: text" is split; otherwise
 * dflt_file, which may be NULL, is the file) to the array problems. */
void cli_problem_add(cJSON *problems, const char *what, const char *msg, const char *dflt_file,
                     const char *level);
/* Prints one problem as "file:line: [warning: ]message". */
void cli_problem_print(const cJSON *p);
/* How many problems of the given level the array holds. */
size_t cli_problems_count(const cJSON *problems, const char *level);

/* The skills a daemon runs in a kept last good version while
 * skills/<folder> does not load here (cli_skills.c): a JSON array of
 * {"file", "message"} (caller frees; [] when none). */
struct skillset;
cJSON *cli_skills_kept(const char *workspace, const struct skillset *ss);

/* The *.lua file names in ws/automations, sorted (caller frees each and
 * the array); NULL with *n = 0 when there are none. */
char **cli_automation_files(const char *ws, size_t *n);
/* Loads ws/automations/FNAME (checking the name as the daemon does). */
int cli_automation_load(const char *ws, const char *fname, struct automation **a, struct err *e);
/* Appends every automation problem to problems; *loaded gets the number of
 * files that load. Returns the number appended. */
size_t cli_automations_problems(const char *ws, cJSON *problems, size_t *loaded);

/* `automations check [--json]`: exit 1 when a file does not load. */
int cli_automations_check(const struct cli_opts *o, int json);
/* `automations next NAME [-n N] [--json]`. */
int cli_automations_next(const struct cli_opts *o, const char *name, int count, int json);

#endif
