/* cli_secrets.c - `luagent secrets set NAME | list | rm NAME`.
 *
 * A value is read from stdin (never from argv, where `ps` and shell history
 * would see it); on a terminal the echo is turned off while it is typed.
 * Where a secret may be sent is declared in luagent.lua, not here
 * (`secrets = { NAME = { origins = { ... } } }`); `list` shows it beside
 * each name, so one command answers "which secret can go where".
 */
#include <cjson/cJSON.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "json.h"
#include "secrets.h"
#include "store.h"
#include "util.h"

#define SECRET_MAX (64 * 1024)

static int usage(void) { return cli_usage_fail("secrets", NULL); }

/* Reads the value: all of stdin, minus one trailing newline. */
static int read_value(char **out, size_t *len) {
  int tty = isatty(STDIN_FILENO);
  struct termios old, noecho;
  if (tty) {
    fprintf(stderr, "value (not echoed): ");
    fflush(stderr);
    if (tcgetattr(STDIN_FILENO, &old) == 0) {
      noecho = old;
      noecho.c_lflag &= ~(tcflag_t)ECHO;
      tcsetattr(STDIN_FILENO, TCSAFLUSH, &noecho);
    } else {
      tty = 0;
    }
  }
  char *buf = sodium_malloc(SECRET_MAX + 1);
  if (!buf) return -1;
  size_t n = 0;
  int c;
  while (n < SECRET_MAX && (c = getchar()) != EOF) {
    buf[n++] = (char)c;
    if (tty && c == '\n') break;
  }
  int toolong = n == SECRET_MAX && getchar() != EOF;
  if (tty) {
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
    fprintf(stderr, "\n");
  }
  if (toolong) {
    sodium_free(buf);
    return -2;
  }
  if (n && buf[n - 1] == '\n') n--;
  if (n && buf[n - 1] == '\r') n--;
  buf[n] = 0;
  *out = buf;
  *len = n;
  return 0;
}

static int open_all(const struct cli_opts *o, int create_key, struct store **st,
                    unsigned char key[SECRETS_KEY_BYTES], int need_key, struct config **cfg) {
  struct err e = {0};
  if (config_load(o->workspace, cfg, &e)) return cli_fail(2, "%s", e.msg);
  const char *env = config_string(*cfg, "secrets_key_env", NULL);
  int rc = 0;
  if (need_key && secrets_load_key(o->workspace, env, create_key, key, &e)) {
    rc = cli_fail(1, "%s", e.msg);
  } else if (store_open(o->workspace, st, &e)) {
    rc = cli_fail(1, "%s", e.msg);
  }
  return rc;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Prints every secret that is stored or declared in luagent.lua, sorted,
 * with the origins it may be sent to. */
static void list_secrets(const struct config *cfg, char **stored, int json) {
  size_t ns = 0;
  while (stored[ns]) ns++;
  const char **all = xcalloc(ns + cfg->n_secrets + 1, sizeof *all);
  size_t n = 0;
  for (size_t i = 0; i < ns; i++) all[n++] = stored[i];
  for (size_t i = 0; i < cfg->n_secrets; i++) {
    size_t j = 0;
    while (j < ns && strcmp(stored[j], cfg->secrets[i].name)) j++;
    if (j == ns) all[n++] = cfg->secrets[i].name;
  }
  qsort(all, n, sizeof *all, cmp_str);
  cJSON *arr = cJSON_CreateArray();
  char buf[ORIGIN_HOST_MAX + 32];
  for (size_t i = 0; i < n; i++) {
    int set = 0;
    for (size_t j = 0; j < ns && !set; j++) set = !strcmp(stored[j], all[i]);
    const struct config_secret *cs = config_secret(cfg, all[i]);
    if (json) {
      cJSON *o = cJSON_CreateObject(), *origins = cJSON_CreateArray();
      cJSON_AddStringToObject(o, "name", all[i]);
      cJSON_AddBoolToObject(o, "set", set);
      for (size_t k = 0; cs && k < cs->n_origins; k++)
        cJSON_AddItemToArray(origins, cJSON_CreateString(origin_format(&cs->origins[k], buf, sizeof buf)));
      cJSON_AddItemToObject(o, "origins", origins);
      cJSON_AddItemToArray(arr, o);
      continue;
    }
    printf("%s\t%s", all[i], set ? "" : "(not set) ");
    if (!cs || !cs->n_origins) printf("(no origins declared: http.request sends it nowhere)");
    for (size_t k = 0; cs && k < cs->n_origins; k++)
      printf("%s%s", k ? ", " : "", origin_format(&cs->origins[k], buf, sizeof buf));
    printf("\n");
  }
  if (json) {
    char *txt = json_print(arr, 0); /* the CLI's --json rule: one compact line */
    puts(txt);
    free(txt);
  }
  cJSON_Delete(arr);
  free(all);
}

int cli_secrets(const struct cli_opts *o, int argc, char **argv) {
  if (argc < 2) return usage();
  if (sodium_init() < 0) return cli_fail(1, "libsodium failed to initialise");
  const char *sub = argv[1];
  if (!cli_usage_has("secrets", sub)) return cli_unknown_sub("secrets", sub);
  struct store *st = NULL;
  struct config *cfg = NULL;
  unsigned char key[SECRETS_KEY_BYTES];
  struct err e = {0};
  int rc = 0;
  if (!strcmp(sub, "set")) {
    if (argc == 2) return usage();
    if (argc > 3)
      return cli_fail(2,
                      "secrets set takes only NAME; the value is read from stdin, never "
                      "from the command line");
    if (!secrets_name_valid(argv[2]))
      return cli_fail(2,
                      "invalid secret name '%s': use letters, digits, _ . - (at most 64, "
                      "starting with a letter or _)",
                      argv[2]);
    char *val = NULL;
    size_t len = 0;
    int r = read_value(&val, &len);
    if (r == -2) return cli_fail(1, "secret value is longer than %d bytes", SECRET_MAX);
    if (r) return cli_fail(1, "cannot read the value from stdin");
    if (len == 0) {
      sodium_free(val);
      return cli_fail(1, "empty value on stdin: nothing stored");
    }
    if ((rc = open_all(o, 1, &st, key, 1, &cfg))) {
      sodium_free(val);
      goto out;
    }
    if (secrets_put(st, key, argv[2], val, len, &e))
      rc = cli_fail(1, "%s", e.msg);
    else
      fprintf(stderr, "secret '%s' stored (%zu bytes)\n", argv[2], len);
    if (!rc && !config_secret(cfg, argv[2]))
      fprintf(stderr,
              "luagent: warning: luagent.lua declares no origins for %s, so http.request "
              "sends it nowhere; add secrets = { %s = { origins = { \"https://host\" } } }\n",
              argv[2], argv[2]);
    if (!rc && len < 8)
      fprintf(stderr,
              "luagent: warning: a value this short is scrubbed as [secret] wherever it "
              "appears in tool results once it is used\n");
    sodium_free(val);
  } else if (!strcmp(sub, "list") || !strcmp(sub, "ls")) {
    int json = o->json;
    for (int i = 2; i < argc; i++) {
      if (!strcmp(argv[i], "--json"))
        json = 1;
      else
        return usage();
    }
    if ((rc = open_all(o, 0, &st, key, 0, &cfg))) goto out;
    char **names = NULL;
    if (secrets_names(st, &names, &e))
      rc = cli_fail(1, "%s", e.msg);
    else
      list_secrets(cfg, names, json);
    secrets_free_names(names);
  } else if (!strcmp(sub, "rm") || !strcmp(sub, "remove")) {
    if (argc != 3) return usage();
    if ((rc = open_all(o, 0, &st, key, 0, &cfg))) goto out;
    if (secrets_remove(st, argv[2], &e))
      rc = cli_fail(1, "%s", e.msg);
    else
      fprintf(stderr, "secret '%s' removed\n", argv[2]);
  } else {
    return usage();
  }
out:
  sodium_memzero(key, sizeof key);
  store_close(st);
  config_free(cfg);
  return rc;
}
