/* cli_common.c - helpers shared by the CLI commands. */
#include <stdarg.h>
#include <stdio.h>

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "json.h"
#include "llm.h"
#include "util.h"

int cli_vfail(int code, const char *fmt, va_list ap) {
  fputs("luagent: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  return code;
}

int cli_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cli_vfail(code, fmt, ap);
  va_end(ap);
  return code;
}

cJSON *cli_split_patterns(const char *csv) {
  cJSON *arr = cJSON_CreateArray();
  char *copy = xstrdup(csv), *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
    cJSON_AddItemToArray(arr, cJSON_CreateString(t));
  free(copy);
  return arr;
}

int cli_has_provider(struct llm_client *llm, const char *name) {
  for (size_t i = 0; i < llm_client_count(llm); i++)
    if (!strcmp(llm_client_provider(llm, i)->name, name)) return 1;
  return 0;
}

void cli_print_json(const cJSON *j) {
  char *s = json_print(j, 0);
  if (s) puts(s);
  free(s);
}

char *cli_safe(const char *s, size_t max) {
  struct sbuf b = {0};
  util_escape_text(&b, s ? s : "", s ? strlen(s) : 0, max);
  if (!b.s) sbuf_puts(&b, "");
  return sbuf_take(&b);
}
