/* test_llm.c - providers against the mock model server (tests/mock_llm.py):
 * both wire formats streamed and not, tool-call assembly, usage, retries
 * (429 with Retry-After, 500, dropped stream, reset), no retry after output,
 * fallback to the next provider, timeouts; the proxy environment (a proxy
 * from it used, NO_PROXY bypassing it); plus wire names and config
 * errors. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llm.h"
#include "mock_server.h"
#include "test.h"
#include "util.h"


static int requests_logged(void) {
  char logf[512], *s;
  size_t n;
  struct err e = {0};
  snprintf(logf, sizeof logf, "%s/requests.jsonl", tmpdir);
  if (util_read_file(logf, 1 << 24, &s, &n, &e)) return 0;
  int lines = 0;
  for (size_t i = 0; i < n; i++) lines += s[i] == '\n';
  free(s);
  return lines;
}

static struct llm_client *client(const char *kind, int stream, int retries, const char *extra) {
  char js[2048];
  snprintf(js, sizeof js,
           "[{\"name\":\"m\",\"kind\":\"%s\",\"base_url\":\"http://127.0.0.1:%d/v1\","
           "\"model\":\"mock-1\",\"stream\":%s,\"max_retries\":%d,\"backoff_s\":0.01,"
           "\"timeout_s\":2}%s]",
           kind, mock_port, stream ? "true" : "false", retries, extra ? extra : "");
  cJSON *j = cJSON_Parse(js);
  struct llm_client *c = NULL;
  struct err e = {0};
  int rc = llm_client_from_json(j, "test", &c, &e);
  if (rc) fprintf(stderr, "client: %s\n", e.msg);
  cJSON_Delete(j);
  return c;
}

struct seen {
  struct sbuf text, tools, args;
  int retries;
};
static void on_text(void *ud, const char *s, size_t n) {
  sbuf_append(&((struct seen *)ud)->text, s, n);
}
static void on_tool_start(void *ud, int i, const char *id, const char *name) {
  sbuf_printf(&((struct seen *)ud)->tools, "%d:%s:%s;", i, id, name);
}
static void on_tool_args(void *ud, int i, const char *s, size_t n) {
  sbuf_append(&((struct seen *)ud)->args, s, n);
}
static void on_retry(void *ud, const char *p, int a, double d, const char *why) {
  ((struct seen *)ud)->retries++;
}

static int call(struct llm_client *c, struct seen *sn, struct llm_response *r, struct err *e) {
  cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"hi\"}]");
  cJSON *tools = cJSON_Parse(
      "[{\"name\":\"fs.read\",\"description\":\"read\",\"parameters\":{\"type\":\"object\"}},"
      "{\"name\":\"echo\",\"description\":\"echo\",\"parameters\":{\"type\":\"object\"}}]");
  struct llm_request req = {.system = "sys", .messages = msgs, .tools = tools};
  struct llm_callbacks cb = {on_text, on_tool_start, on_tool_args, on_retry, sn};
  memset(sn, 0, sizeof *sn);
  int rc = llm_complete(c, &req, &cb, r, e);
  cJSON_Delete(msgs);
  cJSON_Delete(tools);
  return rc;
}

static void free_seen(struct seen *s) {
  sbuf_free(&s->text);
  sbuf_free(&s->tools);
  sbuf_free(&s->args);
}

static void test_tool_turn(const char *kind, int stream) {
  mock_start(
      "{\"steps\":[{\"text\":\"Let me look.\",\"chunk\":3,\"usage\":{\"input\":21,\"output\":9},"
      "\"tool_calls\":[{\"id\":\"t1\",\"name\":\"fs.read\",\"arguments\":{\"path\":\"a.txt\"}},"
      "{\"id\":\"t2\",\"name\":\"echo\",\"arguments\":{\"x\":[1,2]}}]}]}");
  struct llm_client *c = client(kind, stream, 0, NULL);
  struct seen sn;
  struct llm_response r;
  struct err e = {0};
  CHECK_INT(call(c, &sn, &r, &e), 0);
  CHECK_STR(r.text, "Let me look.");
  CHECK_STR(sn.text.s, "Let me look.");
  CHECK_INT(r.ncalls, 2);
  if (r.ncalls == 2) {
    CHECK_STR(r.calls[0].name, "fs.read");
    CHECK_STR(r.calls[0].id, "t1");
    cJSON *a = cJSON_Parse(r.calls[0].arguments);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(a, "path")), "a.txt");
    cJSON_Delete(a);
    CHECK_STR(r.calls[1].name, "echo");
    cJSON *b = cJSON_Parse(r.calls[1].arguments);
    CHECK_INT(cJSON_GetArraySize(cJSON_GetObjectItem(b, "x")), 2);
    cJSON_Delete(b);
  }
  CHECK_CONTAINS(sn.tools.s, "0:t1:fs.read;1:t2:echo;");
  CHECK_INT(r.input_tokens, 21);
  CHECK_INT(r.output_tokens, 9);
  CHECK_INT(r.attempts, 1);
  CHECK_STR(r.stop_reason, !strcmp(kind, "anthropic") ? "tool_use" : "tool_calls");
  llm_response_free(&r);
  free_seen(&sn);
  llm_client_free(c);
}

static void test_retries(const char *kind) {
  /* 429 (Retry-After 0), 500, reset, drop before output: all retried */
  mock_start(
      "{\"steps\":[{\"fault\":\"429\",\"retry_after\":0},{\"fault\":\"500\"},"
      "{\"fault\":\"reset\"},{\"text\":\"\",\"fault\":\"drop\",\"tool_calls\":[]},"
      "{\"text\":\"finally\"}]}");
  struct llm_client *c = client(kind, 1, 5, NULL);
  struct seen sn;
  struct llm_response r;
  struct err e = {0};
  int rc = call(c, &sn, &r, &e);
  if (rc) fprintf(stderr, "%s\n", e.msg);
  CHECK_INT(rc, 0);
  CHECK_STR(r.text, "finally");
  CHECK_INT(r.attempts, 5);
  CHECK_INT(sn.retries, 4);
  llm_response_free(&r);
  free_seen(&sn);
  llm_client_free(c);

  /* a stream that drops after text reached the callback: no retry */
  mock_start(
      "{\"steps\":[{\"text\":\"abcdefghijklmnopqrstuvwxyz\",\"chunk\":2,\"fault\":"
      "\"drop\"},{\"text\":\"second\"}]}");
  c = client(kind, 1, 5, NULL);
  err_clear(&e);
  rc = call(c, &sn, &r, &e);
  CHECK(rc < 0);
  CHECK_STR(e.code, "provider_error");
  CHECK_CONTAINS(e.msg, "not retried");
  CHECK(r.output_started);
  CHECK(strlen(r.text) > 0 && strlen(r.text) < 26);
  CHECK_INT(requests_logged(), 1);
  llm_response_free(&r);
  free_seen(&sn);
  llm_client_free(c);

  /* retries exhausted */
  mock_start("{\"steps\":[{\"fault\":\"500\",\"repeat\":true}]}");
  c = client(kind, 1, 2, NULL);
  err_clear(&e);
  rc = call(c, &sn, &r, &e);
  CHECK(rc < 0);
  CHECK_CONTAINS(e.msg, "HTTP 500");
  CHECK_CONTAINS(e.msg, "mock 500");
  CHECK_INT(r.attempts, 3);
  llm_response_free(&r);
  free_seen(&sn);
  llm_client_free(c);
}

static void test_fallback_and_timeout(void) {
  /* 401 is not retried: the second provider (same mock, other format) answers */
  mock_start("{\"steps\":[{\"fault\":\"401\"},{\"text\":\"from the second\"}]}");
  char extra[512];
  snprintf(extra, sizeof extra,
           ",{\"name\":\"backup\",\"kind\":\"anthropic\",\"base_url\":\"http://127.0.0.1:%d/v1\","
           "\"model\":\"m2\",\"max_retries\":0}",
           mock_port);
  struct llm_client *c = client("openai", 1, 3, extra);
  struct seen sn;
  struct llm_response r;
  struct err e = {0};
  CHECK_INT(call(c, &sn, &r, &e), 0);
  CHECK_STR(r.text, "from the second");
  CHECK_STR(r.provider, "backup");
  CHECK_INT(r.attempts, 2);
  llm_response_free(&r);
  free_seen(&sn);
  llm_client_free(c);

  /* a hang past the timeout, then an answer */
  mock_start("{\"steps\":[{\"fault\":\"hang\",\"hang_s\":4},{\"text\":\"awake\"}]}");
  c = client("anthropic", 1, 1, NULL);
  double t0 = util_monotonic();
  err_clear(&e);
  int rc = call(c, &sn, &r, &e);
  if (rc) fprintf(stderr, "%s\n", e.msg);
  CHECK_INT(rc, 0);
  CHECK_STR(r.text, "awake");
  CHECK(util_monotonic() - t0 < 3.9);
  llm_response_free(&r);
  free_seen(&sn);
  llm_client_free(c);
}

/* Issue 18: the neutral finish (refusal, length, pause), the refusal text,
 * cached tokens, kept content blocks, the first choice only, and a stream
 * broken inside a tool call retried. */
static void test_outcomes(const char *kind, int stream) {
  bool anth = !strcmp(kind, "anthropic");
  struct llm_client *c;
  struct seen sn;
  struct llm_response r;
  struct err e = {0};
  mock_start(
      "{\"steps\":[{\"text\":\"\",\"refusal\":\"Sorry, no.\"},"
      "{\"text\":\"half\",\"finish_reason\":\"length\",\"stop_reason\":\"max_tokens\","
      "\"usage\":{\"input\":4,\"output\":2,\"cache_read\":30,\"cache_write\":6}},"
      "{\"text\":\"zero\",\"extra_choices\":[\"one\"],\"stop_reason\":\"pause_turn\","
      "\"blocks\":[{\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"sig==\"},"
      "{\"type\":\"server_tool_use\",\"id\":\"srv1\",\"name\":\"web_search\","
      "\"input\":{\"query\":\"q\"}}]}]}");
  c = client(kind, stream, 0, NULL);
  CHECK_INT(call(c, &sn, &r, &e), 0);
  CHECK_INT(r.finish, LLM_FINISH_REFUSAL);
  CHECK_STR(r.refusal ? r.refusal : "(null)", "Sorry, no.");
  CHECK_STR(r.text, "");
  llm_response_free(&r);
  free_seen(&sn);
  CHECK_INT(call(c, &sn, &r, &e), 0);
  CHECK_INT(r.finish, LLM_FINISH_LENGTH);
  CHECK_STR(r.text, "half");
  CHECK(r.refusal == NULL);
  CHECK_INT(r.cache_read_tokens, 30);
  CHECK_INT(r.cache_write_tokens, anth ? 6 : 0);
  llm_response_free(&r);
  free_seen(&sn);
  CHECK_INT(call(c, &sn, &r, &e), 0);
  CHECK_STR(r.text, anth ? "zero" : "zero"); /* never "one": another choice */
  CHECK_INT(r.ncalls, 0);                    /* a server tool is no local call */
  if (anth) {
    CHECK_INT(r.finish, LLM_FINISH_PAUSE);
    CHECK_STR(r.thinking ? r.thinking : "(null)", "hmm");
    CHECK_INT(cJSON_GetArraySize(r.blocks), 3);
    const cJSON *b0 = cJSON_GetArrayItem(r.blocks, 0), *b1 = cJSON_GetArrayItem(r.blocks, 1);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(b0, "signature")), "sig==");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(b1, "input"), "query")),
              "q");
  } else {
    CHECK(r.blocks == NULL);
  }
  llm_response_free(&r);
  free_seen(&sn);
  llm_client_free(c);

  if (!stream) return;
  /* broken while a tool call is written: nothing shown, so retried */
  mock_start(
      "{\"steps\":[{\"tool_calls\":[{\"id\":\"t1\",\"name\":\"echo\",\"arguments\":"
      "{\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}],\"chunk\":3,\"fault\":\"drop\"},"
      "{\"tool_calls\":[{\"id\":\"t1\",\"name\":\"echo\",\"arguments\":{\"x\":1}}]}]}");
  c = client(kind, 1, 2, NULL);
  CHECK_INT(call(c, &sn, &r, &e), 0);
  CHECK_INT(r.attempts, 2);
  CHECK_INT(r.ncalls, 1);
  if (r.ncalls == 1) CHECK_STR(r.calls[0].arguments, "{\"x\": 1}");
  CHECK(!r.output_started);
  llm_response_free(&r);
  free_seen(&sn);
  llm_client_free(c);
}

/* llm_full_name reads the mapping off as it goes (llm.c wire_is): for
 * names of every length around the cut (55) and the limit (64), with
 * dots, odd bytes and UTF-8, it finds a name by its own wire name and
 * nothing else by another's (a prefix, one byte longer, one byte changed
 * anywhere, another name's). */
static void test_full_name_matches(void) {
  static const char alphabet[] = "ab.Z9_- /\xc3\xa9";
  unsigned long long x = 88172645463325252ull;
  int misses = 0;
  for (int i = 0; i < 3000 && misses < 5; i++) {
    char name[120], other[120], wn[65], wo[70];
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t len = x % 90;
    for (size_t k = 0; k < len; k++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      name[k] = alphabet[x % (sizeof alphabet - 1)];
    }
    name[len] = 0;
    llm_wire_name(name, wn);
    cJSON *one = cJSON_CreateArray();
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "name", name);
    cJSON_AddItemToArray(one, t);
    if (llm_full_name(one, wn) == NULL)
      misses++, fprintf(stderr, "not found: '%s' as '%s'\n", name, wn);
    size_t wl = strlen(wn);
    for (size_t cut = 0; cut < wl; cut += 1 + wl / 8) {
      snprintf(wo, sizeof wo, "%.*s", (int)cut, wn);
      if (llm_full_name(one, wo)) misses++, fprintf(stderr, "'%s' found as '%s'\n", name, wo);
    }
    snprintf(wo, sizeof wo, "%sx", wn);
    if (llm_full_name(one, wo)) misses++, fprintf(stderr, "'%s' found as '%s'\n", name, wo);
    for (size_t at = 0; at < wl; at += 1 + wl / 6) {
      snprintf(wo, sizeof wo, "%s", wn);
      wo[at] = wo[at] == 'q' ? 'r' : 'q';
      if (llm_full_name(one, wo)) misses++, fprintf(stderr, "'%s' found as '%s'\n", name, wo);
    }
    snprintf(other, sizeof other, "%s", name);
    if (len) other[len / 2] = other[len / 2] == 'a' ? '.' : 'a';
    char wx[65];
    llm_wire_name(other, wx);
    if ((llm_full_name(one, wx) != NULL) != !strcmp(wx, wn))
      misses++, fprintf(stderr, "'%s' vs '%s'\n", name, other);
    cJSON_Delete(one);
  }
  CHECK_INT(misses, 0);
}

static void test_names_and_config(void) {
  char w[65];
  llm_wire_name("tracks.nearest", w);
  CHECK_STR(w, "tracks__nearest");
  llm_wire_name("a b/c", w);
  CHECK_STR(w, "a_b_c");
  char longname[200];
  memset(longname, 'x', 150);
  strcpy(longname + 150, ".tool");
  llm_wire_name(longname, w);
  CHECK_INT(strlen(w), 64);
  cJSON *tools = cJSON_Parse("[{\"name\":\"tracks.nearest\"},{\"name\":\"echo\"}]");
  CHECK_STR(llm_full_name(tools, "tracks__nearest"), "tracks.nearest");
  CHECK(llm_full_name(tools, "nope") == NULL);
  cJSON_Delete(tools);
  /* llm_full_name reads the mapping off as it goes: for names of every
   * length around the cut (55) and the limit (64), with dots, odd bytes
   * and UTF-8, it finds a name by its own wire name and nothing else by
   * another's (a prefix, one byte longer, one byte changed anywhere) */
  test_full_name_matches();

  struct {
    const char *json, *want;
  } bad[] = {
      {"[{\"kind\":\"gpt\",\"model\":\"x\"}]", "providers[1].kind: expected \"openai\""},
      {"[{\"kind\":\"openai\"}]", "providers[1]: missing model"},
      {"[{\"kind\":\"openai\",\"model\":\"m\",\"api_key\":\"sk\"}]", "do not belong"},
      {"[{\"kind\":\"openai\",\"model\":\"m\",\"colour\":1}]", "unknown key 'colour'"},
      {"[{\"kind\":\"openai\",\"model\":\"m\",\"api_key_env\":\"LUAGENT_TEST_UNSET_VAR\"}]",
       "LUAGENT_TEST_UNSET_VAR, which is not set"},
      {"[{\"kind\":\"openai\",\"model\":\"m\",\"base_url\":\"ftp://x\"}]", "http:// or https://"},
      {"{}", "must be a list"},
      {"[]", "LUAGENT_PROVIDER"},
      {"[{\"kind\":\"openai\",\"model\":\"m\",\"thinking_budget\":2048}]",
       "thinking_budget: extended thinking is an Anthropic setting"},
      {"[{\"kind\":\"anthropic\",\"model\":\"m\",\"thinking_budget\":8000}]",
       "must be below max_tokens (4096)"},
      {"[{\"kind\":\"anthropic\",\"model\":\"m\",\"thinking_budget\":100}]", ">= 1024"},
      {"[{\"kind\":\"openai\",\"model\":\"m\",\"max_tokens_field\":\"n\"}]",
       "\"max_completion_tokens\" or \"max_tokens\""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cJSON *j = cJSON_Parse(bad[i].json);
    struct llm_client *c = NULL;
    struct err e = {0};
    CHECK(llm_client_from_json(j, "luagent.lua:3", &c, &e) < 0);
    CHECK_CONTAINS(e.msg, bad[i].want);
    CHECK(c == NULL);
    cJSON_Delete(j);
  }
  struct err e = {0};
  struct llm_client *c = NULL;
  CHECK_INT(llm_client_from_json(NULL, "x", &c, &e), ERR_NOTFOUND);
  CHECK_STR(e.code, "no_provider");
  /* env quick start */
  setenv("LUAGENT_PROVIDER", "anthropic", 1);
  setenv("LUAGENT_MODEL", "claude-x", 1);
  setenv("LUAGENT_API_KEY", "k", 1);
  CHECK_INT(llm_client_from_json(NULL, "x", &c, &e), 0);
  CHECK_INT(llm_client_count(c), 1);
  CHECK_STR(llm_client_provider(c, 0)->base_url, "https://api.anthropic.com/v1");
  llm_client_free(c);
  unsetenv("LUAGENT_MODEL");
  CHECK(llm_client_from_json(NULL, "x", &c, &e) < 0);
  CHECK_CONTAINS(e.msg, "LUAGENT_MODEL");
  unsetenv("LUAGENT_PROVIDER");
  unsetenv("LUAGENT_API_KEY");
}

/* The proxy environment (libcurl-env(3)), read once per client and set as
 * CURLOPT_PROXY / CURLOPT_NOPROXY: the same choice libcurl made itself
 * when it looked the variables up on every transfer. The provider is on
 * 127.0.0.1:1, where nothing listens; the mock stands in as the proxy
 * ("%P" in a value: its port), so a call that goes through the proxy gets
 * the mock's answer (for http, the mock logs the absolute URI the proxy
 * was asked for; for https, it refuses the CONNECT) and one that does not
 * fails to connect. The cases run one after the other on the same parked
 * curl handle, so a case going straight after one through the proxy also
 * checks that a handle keeps no earlier call's proxy. Passes on main too:
 * it pins what libcurl does. */
static const char *const PROXY_VARS[] = {"http_proxy", "HTTP_PROXY", "https_proxy",
                                         "HTTPS_PROXY", "all_proxy",  "ALL_PROXY",
                                         "no_proxy",   "NO_PROXY",   NULL};

static void proxy_env_set(const char *const *kv) {
  for (const char *const *v = PROXY_VARS; *v; v++) unsetenv(*v);
  for (; kv && kv[0]; kv += 2) {
    char val[256];
    const char *pp = strstr(kv[1], "%P");
    if (pp)
      snprintf(val, sizeof val, "%.*s%d%s", (int)(pp - kv[1]), kv[1], mock_port, pp + 2);
    else
      snprintf(val, sizeof val, "%s", kv[1]);
    setenv(kv[0], val, 1);
  }
}

struct proxy_case {
  const char *what;
  const char *scheme; /* the provider's */
  int via_proxy;      /* 1: through the mock, 0: straight to 127.0.0.1:1 */
  const char *env[10];
};

static void test_proxy_env(void) {
  mock_start("{\"steps\":[{\"text\":\"via the proxy\",\"repeat\":true}]}");
  static const struct proxy_case cases[] = {
      {"no proxy variable", "http", 0, {NULL}},
      {"http_proxy", "http", 1, {"http_proxy", "http://127.0.0.1:%P", NULL}},
      {"HTTP_PROXY is never read (CGI)", "http", 0, {"HTTP_PROXY", "http://127.0.0.1:%P", NULL}},
      {"all_proxy", "http", 1, {"all_proxy", "http://127.0.0.1:%P", NULL}},
      {"ALL_PROXY", "http", 1, {"ALL_PROXY", "http://127.0.0.1:%P", NULL}},
      {"http_proxy before all_proxy", "http", 0,
       {"http_proxy", "http://127.0.0.1:1", "all_proxy", "http://127.0.0.1:%P", NULL}},
      {"an empty http_proxy is unset: all_proxy", "http", 1,
       {"http_proxy", "", "all_proxy", "http://127.0.0.1:%P", NULL}},
      {"https_proxy is not for http", "http", 0, {"https_proxy", "http://127.0.0.1:%P", NULL}},
      {"no_proxy bypasses it", "http", 0,
       {"http_proxy", "http://127.0.0.1:%P", "no_proxy", "127.0.0.1", NULL}},
      {"NO_PROXY bypasses it", "http", 0,
       {"http_proxy", "http://127.0.0.1:%P", "NO_PROXY", "localhost,127.0.0.1", NULL}},
      {"NO_PROXY=* bypasses all_proxy", "http", 0,
       {"ALL_PROXY", "http://127.0.0.1:%P", "NO_PROXY", "*", NULL}},
      {"an empty no_proxy is unset: NO_PROXY", "http", 0,
       {"http_proxy", "http://127.0.0.1:%P", "no_proxy", "", "NO_PROXY", "127.0.0.1", NULL}},
      {"no_proxy naming another host", "http", 1,
       {"http_proxy", "http://127.0.0.1:%P", "no_proxy", "example.com", NULL}},
      {"no_proxy before NO_PROXY", "http", 1,
       {"http_proxy", "http://127.0.0.1:%P", "no_proxy", "example.com", "NO_PROXY", "127.0.0.1",
        NULL}},
      {"https_proxy before HTTPS_PROXY", "https", 0,
       {"https_proxy", "http://127.0.0.1:1", "HTTPS_PROXY", "http://127.0.0.1:%P", NULL}},
      {"https_proxy", "https", 1, {"https_proxy", "http://127.0.0.1:%P", NULL}},
      {"HTTPS_PROXY", "https", 1, {"HTTPS_PROXY", "http://127.0.0.1:%P", NULL}},
      {"http_proxy is not for https", "https", 0, {"http_proxy", "http://127.0.0.1:%P", NULL}},
      {"https: no_proxy bypasses it", "https", 0,
       {"HTTPS_PROXY", "http://127.0.0.1:%P", "no_proxy", "127.0.0.1", NULL}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const struct proxy_case *pc = &cases[i];
    proxy_env_set(pc->env);
    char js[512];
    snprintf(js, sizeof js,
             "[{\"name\":\"m\",\"kind\":\"openai\",\"base_url\":\"%s://127.0.0.1:1/v1\","
             "\"model\":\"mock-1\",\"stream\":false,\"max_retries\":0,\"timeout_s\":5}]",
             pc->scheme);
    cJSON *j = cJSON_Parse(js);
    struct llm_client *c = NULL;
    struct err e = {0};
    CHECK_INT(llm_client_from_json(j, "test", &c, &e), 0);
    cJSON_Delete(j);
    int before = requests_logged();
    struct seen sn;
    struct llm_response r;
    int rc = call(c, &sn, &r, &e);
    proxy_env_set(NULL);
    int proxied = 0;
    if (!strcmp(pc->scheme, "http")) {
      proxied = !rc && !strcmp(r.text, "via the proxy");
      if (proxied) { /* the request line the proxy got: the absolute URI */
        char logf[512], *log;
        size_t n;
        struct err le = {0};
        snprintf(logf, sizeof logf, "%s/requests.jsonl", tmpdir);
        if (!util_read_file(logf, 1 << 24, &log, &n, &le)) {
          CHECK_CONTAINS(log, "\"path\": \"http://127.0.0.1:1/v1/chat/completions\"");
          free(log);
        }
        CHECK_INT(requests_logged(), before + 1);
      }
    } else { /* the mock answers CONNECT with an error: the tunnel fails */
      proxied = rc && (strstr(e.msg, "CONNECT") || strstr(e.msg, "tunnel") ||
                       strstr(e.msg, "proxy") || strstr(e.msg, "Proxy"));
    }
    if (proxied != pc->via_proxy)
      fprintf(stderr, "proxy case '%s': rc %d, %s\n", pc->what, rc, rc ? e.msg : r.text);
    CHECK_INT(proxied, pc->via_proxy);
    if (!pc->via_proxy) CHECK(rc != 0); /* straight to a port where nothing listens */
    llm_response_free(&r);
    free_seen(&sn);
    llm_client_free(c);
  }
}

int main(void) {
  unsetenv("LUAGENT_PROVIDER");
  unsetenv("LUAGENT_MODEL");
  unsetenv("LUAGENT_BASE_URL");
  snprintf(tmpdir, sizeof tmpdir, "/tmp/luagent_test_llm_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  test_names_and_config();
  for (int stream = 0; stream <= 1; stream++) {
    test_tool_turn("openai", stream);
    test_tool_turn("anthropic", stream);
    test_outcomes("openai", stream);
    test_outcomes("anthropic", stream);
  }
  test_retries("openai");
  test_retries("anthropic");
  test_fallback_and_timeout();
  test_proxy_env();
  if (mock_pid) {
    kill(mock_pid, SIGTERM);
    waitpid(mock_pid, NULL, 0);
  }
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd)) {
  }
  return TEST_END();
}
