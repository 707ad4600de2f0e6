/* test_console.c - the console's address parsing and the loopback rule
 * (what decides whether a start needs --allow-remote), and a start that
 * must be refused before anything is bound or written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "console.h"
#include "test.h"

static void test_addr(void) {
  static const struct {
    const char *in, *host;
    int port;
    const char *why; /* refused: part of the message */
  } cases[] = {
      {NULL, "127.0.0.1", 8765, NULL},
      {"", "127.0.0.1", 8765, NULL},
      {"9000", "127.0.0.1", 9000, NULL},
      {"localhost:9001", "localhost", 9001, NULL},
      {"127.0.0.2:80", "127.0.0.2", 80, NULL},
      {"[::1]:8765", "::1", 8765, NULL},
      {"[::1]", "::1", 8765, NULL},
      {"0.0.0.0:1", "0.0.0.0", 1, NULL},
      {"127.0.0.1:0", NULL, 0, "1-65535"},
      {"127.0.0.1:65536", NULL, 0, "1-65535"},
      {"127.0.0.1:80x", NULL, 0, "1-65535"},
      {"127.0.0.1:", NULL, 0, "1-65535"},
      {":8765", NULL, 0, "no host"},
      {"::1:8765", NULL, 0, "[ADDR]:PORT"},
      {"[::1:8765", NULL, 0, "[IPV6]:PORT"},
      {"[::1]x", NULL, 0, "[IPV6]:PORT"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char host[256] = "";
    int port = 0;
    struct err e = {0};
    int rc = console_parse_addr(cases[i].in, host, sizeof host, &port, &e);
    if (cases[i].host) {
      CHECK_INT(rc, 0);
      CHECK_STR(host, cases[i].host);
      CHECK_INT(port, cases[i].port);
    } else {
      CHECK_INT(rc, ERR_INVALID);
      CHECK_CONTAINS(e.msg, cases[i].why);
    }
  }
}

static void test_loopback(void) {
  CHECK(console_is_loopback("127.0.0.1"));
  CHECK(console_is_loopback("127.255.0.9"));
  CHECK(console_is_loopback("localhost"));
  CHECK(console_is_loopback("::1"));
  CHECK(!console_is_loopback("0.0.0.0"));
  CHECK(!console_is_loopback("::"));
  CHECK(!console_is_loopback("10.0.0.1"));
  CHECK(!console_is_loopback("128.0.0.1"));
  CHECK(!console_is_loopback("localhost.evil.com"));
  CHECK(!console_is_loopback("127.0.0.1.nip.io"));
  CHECK(!console_is_loopback("::ffff:10.0.0.1"));
}

/* A non-loopback address without allow_remote is refused before the
 * token is made or a socket bound. */
static void test_refused_start(void) {
  char dir[] = "/tmp/luagent-console-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  struct console_opts o = {.workspace = dir, .addr = "0.0.0.0:18999", .quiet = 1};
  struct console *c = (struct console *)1;
  struct err e = {0};
  CHECK_INT(console_start(&o, &c, &e), ERR_INVALID);
  CHECK(c == NULL);
  CHECK_CONTAINS(e.msg, "--allow-remote");
  char tok[300];
  snprintf(tok, sizeof tok, "%s/.luagent/console.token", dir);
  struct stat st;
  CHECK(stat(tok, &st) != 0);
  console_stop(NULL); /* a no-op */
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_INT(system(cmd), 0);
}

int main(void) {
  test_addr();
  test_loopback();
  test_refused_start();
  return TEST_END();
}
