/* test_origin.c - origins, http_allow patterns, and the secret-origin check
 * (secrets_check_origin over a luagent.lua). The https -> http downgrade is
 * tested here: the e2e tests have no TLS server. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "origin.h"
#include "secrets.h"
#include "test.h"

static char *fmt(const struct origin *o) {
  static char buf[300];
  return origin_format(o, buf, sizeof buf);
}

static void test_parse(void) {
  static const struct {
    const char *in, *out; /* out NULL: refused, and the message has `why` */
    const char *why;
  } cases[] = {
      {"https://api.github.com", "https://api.github.com", NULL},
      {"https://api.github.com/", "https://api.github.com", NULL},
      {"HTTPS://API.GitHub.com:443", "https://api.github.com", NULL},
      {"http://127.0.0.1:8081", "http://127.0.0.1:8081", NULL},
      {"http://127.0.0.1:80", "http://127.0.0.1", NULL},
      {"https://h:80", "https://h:80", NULL},
      {"http://[::1]:8080", "http://[::1]:8080", NULL},
      {"https://[2001:DB8::1]", "https://[2001:db8::1]", NULL},
      {"api.github.com", NULL, "write scheme://host[:port]"},
      {"ftp://x.com", NULL, "scheme must be http or https"},
      {"https://", NULL, "invalid host"},
      {"https://api.github.com/user", NULL, "has a path"},
      {"https://x.com?q=1", NULL, "has a path, query"},
      {"https://x.com#f", NULL, "has a path, query or fragment"},
      {"https://user:pw@x.com", NULL, "has user info"},
      {"https://*.x.com", NULL, "no wildcards"},
      {"https://x.com:0", NULL, "invalid port"},
      {"https://x.com:65536", NULL, "invalid port"},
      {"https://x.com:+80", NULL, "invalid port"},
      {"https://x.com:", NULL, "invalid port"},
      {"http://::1", NULL, "not in [brackets]"},
      {"http://[::1", NULL, "closing ']'"},
      {"http://[::1]x", NULL, "text after the IPv6"},
      {"http://[zz::1]", NULL, "invalid host"},
      {"http://x y.com", NULL, "invalid host"},
      {"", NULL, "must not be empty"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct origin o;
    struct err e = {0};
    int rc = origin_parse(cases[i].in, &o, &e);
    if (cases[i].out) {
      CHECK_INT(rc, 0);
      if (!rc) CHECK_STR(fmt(&o), cases[i].out);
    } else {
      CHECK_INT(rc, ERR_INVALID);
      CHECK_CONTAINS(e.msg, cases[i].why);
      if (cases[i].in[0]) CHECK_CONTAINS(e.msg, cases[i].in);
    }
  }
}

static void test_from_parts_and_equal(void) {
  struct origin a, b;
  struct err e = {0};
  CHECK_INT(origin_from_parts("https", "API.github.com", 0, &a, &e), 0);
  CHECK_STR(fmt(&a), "https://api.github.com");
  CHECK_INT(a.port, 443);
  CHECK_INT(origin_parse("https://api.github.com", &b, &e), 0);
  CHECK(origin_equal(&a, &b));
  /* Downgrade: same host, http. Another origin, even on port 443. */
  CHECK_INT(origin_from_parts("http", "api.github.com", 0, &a, &e), 0);
  CHECK(!origin_equal(&a, &b));
  CHECK_INT(origin_from_parts("http", "api.github.com", 443, &a, &e), 0);
  CHECK(!origin_equal(&a, &b));
  CHECK_STR(fmt(&a), "http://api.github.com:443");
  /* Another port, another host. */
  CHECK_INT(origin_from_parts("https", "api.github.com", 8443, &a, &e), 0);
  CHECK(!origin_equal(&a, &b));
  CHECK_INT(origin_from_parts("https", "api.github.com.evil.com", 0, &a, &e), 0);
  CHECK(!origin_equal(&a, &b));
  /* IPv6 with or without brackets (curl gives them with). */
  CHECK_INT(origin_from_parts("http", "::1", 8080, &a, &e), 0);
  CHECK_STR(fmt(&a), "http://[::1]:8080");
  CHECK_INT(origin_from_parts("http", "[::1]", 8080, &b, &e), 0);
  CHECK(origin_equal(&a, &b));
  CHECK_INT(origin_from_parts("ftp", "x", 21, &a, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "scheme 'ftp' is not allowed");
  CHECK_INT(origin_from_parts("http", "", 0, &a, &e), ERR_INVALID);
  CHECK_INT(origin_from_parts(NULL, "x", 0, &a, &e), ERR_INVALID);
  CHECK_INT(origin_from_parts("http", NULL, 0, &a, &e), ERR_INVALID);
  CHECK_INT(origin_parse(NULL, &a, &e), ERR_INVALID);
  CHECK_INT(origin_parse("http://x", &a, NULL), 0);
  CHECK_INT(origin_parse("x", &a, NULL), ERR_INVALID);
  struct origin_pattern p;
  CHECK_INT(origin_pattern_parse(NULL, &p, &e), ERR_INVALID);
  CHECK_INT(origin_pattern_parse("x", &p, NULL), 0);
  CHECK_INT(config_http_allowed(NULL, &b), 0);
  CHECK(config_secret(NULL, "X") == NULL);
  CHECK_INT(origin_from_parts("http", "a b", 0, &a, &e), ERR_INVALID);
}

/* Does pattern p allow the URL origin u? */
static int allows(const char *p, const char *u) {
  struct origin_pattern pat;
  struct origin o;
  struct err e = {0};
  if (origin_pattern_parse(p, &pat, &e)) {
    fprintf(stderr, "pattern '%s' refused: %s\n", p, e.msg);
    return -1;
  }
  if (origin_parse(u, &o, &e)) {
    fprintf(stderr, "origin '%s' refused: %s\n", u, e.msg);
    return -1;
  }
  return origin_pattern_match(&pat, &o);
}

static void test_patterns(void) {
  /* A bare host keeps its old meaning: http or https, any port. */
  CHECK_INT(allows("127.0.0.1", "http://127.0.0.1:8081"), 1);
  CHECK_INT(allows("127.0.0.1", "https://127.0.0.1"), 1);
  CHECK_INT(allows("127.0.0.1", "http://127.0.0.2"), 0);
  CHECK_INT(allows("*.example.com", "https://api.example.com"), 1);
  CHECK_INT(allows("*.example.com", "https://example.com"), 0);
  CHECK_INT(allows("*.EXAMPLE.com", "https://a.b.example.com:444"), 1);
  CHECK_INT(allows("*", "http://anything:1"), 1);
  CHECK_INT(allows("h?st[0-9]", "http://host7"), 1);
  CHECK_INT(allows("h?st[0-9]", "http://hostx"), 0);
  CHECK_INT(allows("[ab]*.example.com", "http://b1.example.com"), 1);
  CHECK_INT(allows("[ab]*.example.com:8080", "http://a.example.com:8080"), 1);
  CHECK_INT(allows("[ab]*.example.com:8080", "http://c.example.com:8080"), 0);
  /* host:port: either scheme, that port. */
  CHECK_INT(allows("127.0.0.1:8080", "http://127.0.0.1:8080"), 1);
  CHECK_INT(allows("127.0.0.1:8080", "https://127.0.0.1:8080"), 1);
  CHECK_INT(allows("127.0.0.1:8080", "http://127.0.0.1:8081"), 0);
  /* scheme://host: that scheme, default port. */
  CHECK_INT(allows("https://api.example.com", "https://api.example.com"), 1);
  CHECK_INT(allows("https://api.example.com", "http://api.example.com"), 0);
  CHECK_INT(allows("https://api.example.com", "https://api.example.com:8443"), 0);
  CHECK_INT(allows("https://api.example.com/", "https://api.example.com"), 1);
  CHECK_INT(allows("https://*.example.com", "https://x.example.com"), 1);
  CHECK_INT(allows("https://*", "https://x.org"), 1);
  CHECK_INT(allows("https://*", "http://x.org"), 0);
  /* scheme://host:port and :* */
  CHECK_INT(allows("http://127.0.0.1:8080", "http://127.0.0.1:8080"), 1);
  CHECK_INT(allows("http://127.0.0.1:8080", "https://127.0.0.1:8080"), 0);
  CHECK_INT(allows("http://127.0.0.1:*", "http://127.0.0.1:9"), 1);
  CHECK_INT(allows("http://127.0.0.1:*", "https://127.0.0.1:9"), 0);
  CHECK_INT(allows("*:8080", "https://x.org:8080"), 1);
  /* IPv6. */
  CHECK_INT(allows("::1", "http://[::1]:9000"), 1);
  CHECK_INT(allows("[::1]:9000", "http://[::1]:9000"), 1);
  CHECK_INT(allows("[::1]:9000", "http://[::1]:9001"), 0);
  CHECK_INT(allows("http://[::1]", "http://[::1]"), 1);
  CHECK_INT(allows("http://[::1]", "http://[::1]:81"), 0);

  static const struct {
    const char *in, *why;
  } bad[] = {
      {"ftp://x.com", "scheme must be http or https"},
      {"x.com/path", "has a path"},
      {"https://x.com/api", "has a path"},
      {"https://u@x.com", "has user info"},
      {"x.com:0", "invalid port"},
      {"x.com:http", "invalid port"},
      {"x .com", "invalid host pattern"},
      {"http://::1", "not in [brackets]"},
      {"[::1", "closing ']'"},
      {"[g::1]", "invalid IPv6"},
      {"", "must not be empty"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct origin_pattern p;
    struct err e = {0};
    CHECK_INT(origin_pattern_parse(bad[i].in, &p, &e), ERR_INVALID);
    CHECK_CONTAINS(e.msg, bad[i].why);
  }
}

/* Writes text to a temporary luagent.lua and loads it. */
static int load(const char *text, struct config **c, struct err *e) {
  char path[] = "/tmp/test_origin_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  ssize_t w = write(fd, text, strlen(text));
  close(fd);
  int rc = w == (ssize_t)strlen(text) ? config_load_file(path, c, e) : -1;
  unlink(path);
  return rc;
}

static void test_secret_check(void) {
  struct config *c = NULL;
  struct err e = {0};
  CHECK_INT(
      load("return {\n"
           "  http_allow = { \"api.github.com\", \"127.0.0.1\" },\n"
           "  secrets = {\n"
           "    GITHUB_TOKEN = { origins = { \"https://api.github.com\" } },\n"
           "    LOCAL = { origins = { \"http://127.0.0.1:8080\", \"https://127.0.0.1:8443\" } },\n"
           "  },\n"
           "}\n",
           &c, &e),
      0);
  if (!c) {
    fprintf(stderr, "config: %s\n", e.msg);
    test_failures_++;
    return;
  }
  struct origin o;
  CHECK_INT(origin_parse("https://api.github.com", &o, &e), 0);
  CHECK_INT(secrets_check_origin(c, "http.request", "GITHUB_TOKEN", &o, &e), 0);
  /* https -> http downgrade of the same host. */
  CHECK_INT(origin_from_parts("http", "api.github.com", 0, &o, &e), 0);
  CHECK_INT(config_http_allowed(c, &o), 1); /* reachable, but not with the secret */
  CHECK_INT(secrets_check_origin(c, "http.request", "GITHUB_TOKEN", &o, &e), ERR_DENIED);
  CHECK_STR(e.code, "secret_not_allowed");
  CHECK_STR(e.msg,
            "http.request: secret GITHUB_TOKEN may not be sent to http://api.github.com "
            "(allowed: https://api.github.com)");
  /* An allowed host on another port. */
  CHECK_INT(origin_from_parts("http", "127.0.0.1", 8081, &o, &e), 0);
  CHECK_INT(secrets_check_origin(c, "http.request", "LOCAL", &o, &e), ERR_DENIED);
  CHECK_STR(e.msg,
            "http.request: secret LOCAL may not be sent to http://127.0.0.1:8081 "
            "(allowed: http://127.0.0.1:8080, https://127.0.0.1:8443)");
  CHECK_INT(origin_from_parts("https", "127.0.0.1", 8443, &o, &e), 0);
  CHECK_INT(secrets_check_origin(c, "http.request", "LOCAL", &o, &e), 0);
  /* A secret declared for another origin is not usable here either. */
  CHECK_INT(secrets_check_origin(c, "http.request", "GITHUB_TOKEN", &o, &e), ERR_DENIED);
  /* Not declared at all. */
  CHECK_INT(secrets_check_origin(c, "http.request", "OTHER", &o, &e), ERR_DENIED);
  CHECK_CONTAINS(e.msg, "http.request: secret OTHER has no origins declared");
  CHECK_CONTAINS(e.msg, "secrets = { OTHER = { origins = {");
  CHECK(config_secret(c, "LOCAL") && config_secret(c, "LOCAL")->n_origins == 2);
  CHECK(config_secret(c, "local") == NULL);
  CHECK(config_secret(c, NULL) == NULL);
  config_free(c);

  /* No config at all: nothing declared, nothing allowed. */
  CHECK_INT(config_load_file(NULL, &c, &e), 0);
  CHECK_INT(secrets_check_origin(c, "http.request", "X", &o, &e), ERR_DENIED);
  CHECK_INT(config_http_allowed(c, &o), 0);
  config_free(c);
  CHECK_INT(secrets_check_origin(NULL, "http.request", "X", &o, &e), ERR_DENIED);
}

static void test_config_errors(void) {
  static const struct {
    const char *text, *msg;
  } cases[] = {
      {"return {\n  secrets = {\n    API = { origin = { \"https://x\" } },\n  },\n}\n",
       "luagent.lua:3: secrets.API.origin: unknown key (known: origins)"},
      {"return {\n  secrets = {\n    API = {\n      origins = {\n        \"https://ok\",\n"
       "        \"https://x/path\",\n      },\n    },\n  },\n}\n",
       "luagent.lua:6: secrets.API.origins: origin 'https://x/path' has a path"},
      {"return { secrets = { API = { origins = { 5 } } } }",
       "luagent.lua:1: secrets.API.origins: entries must be strings, got number"},
      {"return { secrets = { API = { origins = \"https://x\" } } }",
       "luagent.lua:1: secrets.API.origins: expected a non-empty list"},
      {"return { secrets = { API = { } } }", "secrets.API.origins: expected a non-empty list"},
      {"return { secrets = { API = true } }", "secrets.API: expected a table"},
      {"return { secrets = { [\"9x\"] = { origins = { \"https://x\" } } } }",
       "secrets.9x: invalid secret name"},
      {"return { secrets = { \"https://x\" } }", "luagent.lua:1: key 'secrets': expected object"},
      {"return {\n  http_allow = {\n    \"ok.com\",\n    \"ftp://x\",\n  },\n}\n",
       "luagent.lua:4: http_allow entry 'ftp://x': the scheme must be http or https"},
      {"return { http_allow = { true } }", "key 'http_allow': entries must be strings"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct config *c = NULL;
    struct err e = {0};
    CHECK_INT(load(cases[i].text, &c, &e), ERR_INVALID);
    CHECK_CONTAINS(e.msg, cases[i].msg);
    config_free(c);
  }
}

int main(void) {
  test_parse();
  test_from_parts_and_equal();
  test_patterns();
  test_secret_check();
  test_config_errors();
  return TEST_END();
}
