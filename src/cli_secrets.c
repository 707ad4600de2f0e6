/* cli_secrets.c - `luagent secrets set NAME | list | rm NAME`.
 *
 * A value is read from stdin (never from argv, where `ps` and shell history
 * would see it); on a terminal the echo is turned off while it is typed.
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

static int usage(void) {
  return cli_fail(2,
                  "usage: luagent secrets set NAME   (the value is read from stdin)\n"
                  "       luagent secrets list [--json]\n"
                  "       luagent secrets rm NAME");
}

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
                    unsigned char key[SECRETS_KEY_BYTES], int need_key) {
  struct err e = {0};
  struct config *cfg = NULL;
  if (config_load(o->workspace, &cfg, &e)) return cli_fail(2, "%s", e.msg);
  const char *env = config_string(cfg, "secrets_key_env", NULL);
  int rc = 0;
  if (need_key && secrets_load_key(o->workspace, env, create_key, key, &e)) {
    rc = cli_fail(1, "%s", e.msg);
  } else if (store_open(o->workspace, st, &e)) {
    rc = cli_fail(1, "%s", e.msg);
  }
  config_free(cfg);
  return rc;
}

int cli_secrets(const struct cli_opts *o, int argc, char **argv) {
  if (argc < 2) return usage();
  if (sodium_init() < 0) return cli_fail(1, "libsodium failed to initialise");
  const char *sub = argv[1];
  struct store *st = NULL;
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
    if ((rc = open_all(o, 1, &st, key, 1))) {
      sodium_free(val);
      return rc;
    }
    if (secrets_put(st, key, argv[2], val, len, &e))
      rc = cli_fail(1, "%s", e.msg);
    else
      fprintf(stderr, "secret '%s' stored (%zu bytes)\n", argv[2], len);
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
    if ((rc = open_all(o, 0, &st, key, 0))) return rc;
    char **names = NULL;
    if (secrets_names(st, &names, &e)) {
      rc = cli_fail(1, "%s", e.msg);
    } else if (json) {
      cJSON *arr = cJSON_CreateArray();
      for (char **p = names; *p; p++) cJSON_AddItemToArray(arr, cJSON_CreateString(*p));
      char *txt = json_print(arr, JSON_PRETTY);
      puts(txt);
      free(txt);
      cJSON_Delete(arr);
    } else {
      for (char **p = names; *p; p++) puts(*p);
    }
    secrets_free_names(names);
  } else if (!strcmp(sub, "rm") || !strcmp(sub, "remove")) {
    if (argc != 3) return usage();
    if ((rc = open_all(o, 0, &st, key, 0))) return rc;
    if (secrets_remove(st, argv[2], &e))
      rc = cli_fail(1, "%s", e.msg);
    else
      fprintf(stderr, "secret '%s' removed\n", argv[2]);
  } else {
    return usage();
  }
  sodium_memzero(key, sizeof key);
  store_close(st);
  return rc;
}
