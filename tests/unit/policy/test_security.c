/* test_security.c - rules (glob, bounded Lua patterns, precedence), secrets
 * (sealing, key handling, redaction), the approval queue (hash binding,
 * timeouts) and the pipeline through tool_call in a temp workspace (rules vs
 * hooks, impact gate, taint, rewritten arguments, audit rows). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "approver.h"
#include "audit.h"
#include "events.h"
#include "json.h"
#include "rules.h"
#include "runtime.h"
#include "secrets.h"
#include "security.h"
#include "store.h"
#include "test.h"
#include "tool.h"
#include "util.h"

static char dir[256];

static void write_file(const char *rel, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  FILE *f = fopen(p, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

/* ---------------------------------------------------------------- patterns */

static int find(const char *pat, const char *s) {
  struct err e = {0};
  return rules_pattern_find(pat, strlen(pat), s, strlen(s), 100000, &e);
}

static void test_patterns(void) {
  /* Expected values are what Lua 5.4's string.find gives. */
  static const struct {
    const char *pat, *s;
    int want;
  } cases[] = {
      {"^secrets/", "secrets/a", 1},
      {"^secrets/", "x/secrets/a", 0},
      {"%.env$", "a/.env", 1},
      {"%.env$", "a/.envx", 0},
      {"^%d+$", "12345", 1},
      {"^%d+$", "12a45", 0},
      {"[%w_]+", "__", 1},
      {"^[^/]+$", "a/b", 0},
      {"a.-b", "axxb", 1},
      {"^a*$", "", 1},
      {"%bxy", "axbxyy", 1},
      {"%f[%w]cat", "a cat", 1},
      {"%f[%w]cat", "bobcat", 0},
      {"(a)%1", "xaay", 1},
      {"()%1", "ab", 0},
      {"[]]", "]", 1},
      {"[a-]", "-", 1},
      {"%%", "50%", 1},
      {")", "a)", 1},
      {"x?y", "y", 1},
      {"^$", "", 1},
      {"^(%a+)=(%d+)$", "ab=12", 1},
      {"[%a-]+", "-", 1},
      {"^[+-]?%d+", "-3", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int got = find(cases[i].pat, cases[i].s);
    if (got != cases[i].want)
      fprintf(stderr, "pattern '%s' on '%s': got %d want %d\n", cases[i].pat, cases[i].s, got,
              cases[i].want);
    CHECK_INT(got, cases[i].want);
  }
  /* Malformed patterns are errors that say what is wrong. */
  struct err e = {0};
  CHECK_INT(rules_pattern_find("[a", 2, "a", 1, 1000, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "missing ']'");
  CHECK_INT(rules_pattern_find("(a", 2, "a", 1, 1000, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "unfinished capture");
  CHECK_INT(rules_pattern_find("a%", 2, "a", 1, 1000, &e), ERR_INVALID);
  CHECK_INT(rules_pattern_find("%1", 2, "a", 1, 1000, &e), ERR_INVALID);
  /* A catastrophic pattern stops at the budget instead of running for ages. */
  char subj[64], pat[128] = "";
  memset(subj, 'a', 40);
  subj[40] = 0;
  for (int i = 0; i < 20; i++) strcat(pat, "a*");
  strcat(pat, "b");
  double t0 = util_monotonic();
  CHECK_INT(rules_pattern_find(pat, strlen(pat), subj, strlen(subj), 100000, &e), ERR_LIMIT);
  CHECK(util_monotonic() - t0 < 1.0);
  CHECK_STR(e.code, "limit_pattern");
  /* Deep recursion is bounded too. */
  char deep[1200] = "";
  for (int i = 0; i < 300; i++) strcat(deep, "a?");
  CHECK(rules_pattern_find(deep, strlen(deep), subj, strlen(subj), 10000000, &e) != 1 ||
        e.rc == ERR_LIMIT);
}

static void test_glob(void) {
  CHECK(rules_glob("fs.*", "fs.read"));
  CHECK(!rules_glob("fs.*", "http.request"));
  CHECK(rules_glob("*", ""));
  CHECK(rules_glob("f?.re*d", "fs.read"));
  CHECK(!rules_glob("fs.read", "fs.reads"));
  CHECK(rules_glob("*.*.x", "a.b.c.x"));
}

/* ------------------------------------------------------------------- rules */

static struct ruleset *parse(const char *json, struct err *e) {
  cJSON *j = cJSON_Parse(json);
  struct ruleset *r = NULL;
  int rc = rules_parse(j, "luagent.lua", &r, e);
  cJSON_Delete(j);
  return rc ? NULL : r;
}

static void test_rules(void) {
  struct err e = {0};
  struct ruleset *r = parse(
      "[{\"tool\":\"fs.*\",\"action\":\"allow\"},"
      " {\"tool\":\"fs.*\",\"caller\":\"model\",\"args\":{\"path\":\"^secrets/\"},"
      "  \"action\":\"deny\",\"reason\":\"no secrets for the model\"},"
      " {\"tool\":\"fs.write\",\"action\":\"escalate\",\"reason\":\"writes are reviewed\"},"
      " {\"tool\":\"fs.delete\",\"caller\":\"automation\",\"name\":\"night*\",\"action\":\"allow\"}"
      ","
      " {\"tool\":\"http.request\",\"args\":{\"headers.X-Env\":\"prod\",\"port\":\"^80$\"},"
      "  \"action\":\"deny\"}]",
      &e);
  CHECK(r != NULL);
  CHECK_INT(rules_count(r), 5);
  struct rule_match m;
  cJSON *a = cJSON_Parse("{\"path\":\"secrets/key\"}");
  CHECK_INT(rules_eval(r, "fs.read", "model", "", a, &m, &e), 0);
  CHECK_INT(m.action, RULE_DENY); /* deny beats the allow that also matched */
  CHECK_INT(m.rule, 2);
  CHECK_INT(m.matched, 2);
  CHECK_STR(m.reason, "no secrets for the model");
  CHECK_INT(rules_eval(r, "fs.read", "automation", "", a, &m, &e), 0);
  CHECK_INT(m.action, RULE_ALLOW);
  CHECK_INT(m.explicit_allow, 0); /* no caller named in rule 1 */
  CHECK_INT(rules_eval(r, "fs.write", "automation", "", a, &m, &e), 0);
  CHECK_INT(m.action, RULE_ESCALATE); /* escalate beats allow */
  CHECK_INT(rules_eval(r, "fs.write", "model", "", a, &m, &e), 0);
  CHECK_INT(m.action, RULE_DENY); /* deny beats escalate */
  CHECK_INT(rules_eval(r, "fs.delete", "automation", "nightly", a, &m, &e), 0);
  CHECK_INT(m.explicit_allow, 1);
  CHECK_INT(rules_eval(r, "fs.delete", "automation", "daily", a, &m, &e), 0);
  CHECK_INT(m.explicit_allow, 0);
  CHECK_INT(rules_eval(r, "time.now", "operator", "", a, &m, &e), 0);
  CHECK_INT(m.action, RULE_NONE);
  cJSON_Delete(a);
  /* Nested paths and numbers as text; all args entries must match. */
  a = cJSON_Parse("{\"headers\":{\"X-Env\":\"prod-1\"},\"port\":80}");
  CHECK_INT(rules_eval(r, "http.request", "model", "", a, &m, &e), 0);
  CHECK_INT(m.action, RULE_DENY);
  cJSON_Delete(a);
  a = cJSON_Parse("{\"headers\":{\"X-Env\":\"prod-1\"},\"port\":8080}");
  CHECK_INT(rules_eval(r, "http.request", "model", "", a, &m, &e), 0);
  CHECK_INT(m.action, RULE_NONE);
  cJSON_Delete(a);
  /* A missing argument does not match (and never errors). */
  a = cJSON_Parse("{}");
  CHECK_INT(rules_eval(r, "fs.read", "model", "", a, &m, &e), 0);
  CHECK_INT(m.action, RULE_ALLOW);
  cJSON_Delete(a);
  rules_free(r);

  /* A pattern over its budget fails the evaluation (the pipeline denies). */
  char big[400];
  snprintf(big, sizeof big,
           "[{\"tool\":\"*\",\"args\":{\"s\":\"a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b\"},"
           "\"action\":\"allow\"}]");
  r = parse(big, &e);
  CHECK(r != NULL);
  a = cJSON_Parse("{\"s\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}");
  CHECK_INT(rules_eval(r, "echo", "model", "", a, &m, &e), ERR_LIMIT);
  CHECK_CONTAINS(e.msg, "rules[1].args.s");
  cJSON_Delete(a);
  rules_free(r);

  /* Config errors name the rule and the problem. */
  static const struct {
    const char *json, *msg;
  } bad[] = {
      {"[{\"tool\":\"x\"}]", "rules[1]: missing action"},
      {"[{\"tool\":\"x\",\"action\":\"maybe\"}]", "action 'maybe'"},
      {"[{\"action\":\"deny\"},{\"action\":\"deny\",\"caller\":\"robot\"}]",
       "rules[2]: caller 'robot'"},
      {"[{\"action\":\"deny\",\"tol\":\"x\"}]", "unknown field 'tol'"},
      {"[{\"action\":\"deny\",\"args\":{\"p\":\"[a\"}}]", "rules[1].args.p: bad pattern"},
      {"[{\"action\":\"deny\",\"args\":{\"p\":3}}]", "must be a Lua pattern string"},
      {"[{\"action\":\"deny\",\"tool\":3}]", "rules[1].tool must be a string"},
      {"{\"a\":1}", "rules must be a list"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err_clear(&e);
    CHECK(parse(bad[i].json, &e) == NULL);
    CHECK_CONTAINS(e.msg, bad[i].msg);
    CHECK_CONTAINS(e.msg, "luagent.lua");
  }
  /* No rules at all is fine. */
  CHECK_INT(rules_parse(NULL, NULL, &r, &e), 0);
  CHECK_INT(rules_count(r), 0);
  CHECK_INT(rules_eval(r, "x", "model", NULL, NULL, &m, &e), 0);
  CHECK_INT(m.action, RULE_NONE);
  rules_free(r);
}

/* ----------------------------------------------------------------- secrets */

static void test_secrets(void) {
  struct err e = {0};
  unsigned char key[SECRETS_KEY_BYTES], key2[SECRETS_KEY_BYTES];
  CHECK_INT(secrets_load_key(dir, NULL, 0, key, &e), ERR_NOTFOUND);
  CHECK_CONTAINS(e.msg, "secrets set");
  CHECK_INT(secrets_load_key(dir, NULL, 1, key, &e), 0);
  char kp[400];
  snprintf(kp, sizeof kp, "%s/.luagent/secrets.key", dir);
  struct stat sb;
  CHECK_INT(stat(kp, &sb), 0);
  CHECK_INT(sb.st_mode & 0777, 0600);
  CHECK_INT(secrets_load_key(dir, NULL, 0, key2, &e), 0);
  CHECK(memcmp(key, key2, sizeof key) == 0);

  struct store *st = NULL;
  CHECK_INT(store_open(dir, &st, &e), 0);
  CHECK_INT(secrets_put(st, key, "API", "s3cr3t-value", 12, &e), 0);
  CHECK_INT(secrets_put(st, key, "B_2", "other", 5, &e), 0);
  CHECK_INT(secrets_put(st, key, "bad name", "x", 1, &e), ERR_INVALID);
  char *v = NULL;
  size_t n = 0;
  CHECK_INT(secrets_get(st, key, "API", &v, &n, &e), 0);
  CHECK_STR(v, "s3cr3t-value");
  CHECK_INT(n, 12);
  free(v);
  CHECK_INT(secrets_get(st, key, "NOPE", &v, NULL, &e), ERR_NOTFOUND);
  CHECK_CONTAINS(e.msg, "'NOPE' is not set");
  /* The value is not stored in clear. */
  sqlite3_stmt *q;
  CHECK_INT(store_prepare(st, "SELECT count(*) FROM secrets WHERE instr(ciphertext, 's3cr3t') > 0",
                          &q, &e),
            0);
  CHECK_INT(sqlite3_step(q), SQLITE_ROW);
  CHECK_INT(sqlite3_column_int(q, 0), 0);
  sqlite3_finalize(q);
  /* A ciphertext moved to another name does not open. */
  CHECK_INT(store_exec(st,
                       "UPDATE secrets SET nonce = (SELECT nonce FROM secrets WHERE name='API'),"
                       " ciphertext = (SELECT ciphertext FROM secrets WHERE name='API')"
                       " WHERE name = 'B_2'",
                       &e),
            0);
  CHECK_INT(secrets_get(st, key, "B_2", &v, NULL, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "cannot be decrypted");
  /* A wrong key is refused, not garbage. */
  key2[0] ^= 1;
  CHECK_INT(secrets_get(st, key2, "API", &v, NULL, &e), ERR_INVALID);
  /* The environment key wins and must be well formed. */
  setenv("TEST_SEC_KEY", "zz", 1);
  CHECK_INT(secrets_load_key(dir, "TEST_SEC_KEY", 0, key2, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "TEST_SEC_KEY must hold 64 hex digits");
  setenv("TEST_SEC_KEY", "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", 1);
  CHECK_INT(secrets_load_key(dir, "TEST_SEC_KEY", 0, key2, &e), 0);
  CHECK_INT(key2[31], 0x1f);
  unsetenv("TEST_SEC_KEY");
  /* A key file others can read is refused. */
  chmod(kp, 0644);
  CHECK_INT(secrets_load_key(dir, NULL, 0, key2, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "chmod 600");
  chmod(kp, 0600);
  /* list and rm */
  char **names = NULL;
  CHECK_INT(secrets_names(st, &names, &e), 0);
  CHECK(names && names[0] && names[1] && !names[2]);
  if (names && names[0]) CHECK_STR(names[0], "API");
  secrets_free_names(names);
  CHECK_INT(secrets_remove(st, "B_2", &e), 0);
  CHECK_INT(secrets_remove(st, "B_2", &e), ERR_NOTFOUND);
  store_close(st);

  /* Redaction: longest first, in text and in JSON (keys and values). */
  secrets_forget_all();
  char *red = secrets_redact("abc", 3, NULL);
  CHECK_STR(red, "abc");
  free(red);
  secrets_register_value("tok", 3);
  secrets_register_value("tok-long", 8);
  red = secrets_redact("a tok-long b tok c", 18, NULL);
  CHECK_STR(red, "a [secret] b [secret] c");
  free(red);
  cJSON *j = cJSON_Parse("{\"h\":{\"Authorization\":\"Bearer tok-long\"},\"tok\":[\"xtokx\"]}");
  CHECK_INT(secrets_redact_json(j), 3);
  char *txt = cJSON_PrintUnformatted(j);
  CHECK(strstr(txt, "tok") == NULL);
  CHECK_CONTAINS(txt, "Bearer [secret]");
  free(txt);
  cJSON_Delete(j);
  secrets_forget_all();
  CHECK_INT(secrets_registered(), 0);
}

/* ------------------------------------------------------------------- queue */

static void test_queue(void) {
  struct err e = {0};
  struct store *st = NULL, *other = NULL;
  CHECK_INT(store_open(dir, &st, &e), 0);
  CHECK_INT(store_open(dir, &other, &e), 0);
  cJSON *args = cJSON_Parse("{\"path\":\"a.txt\"}");
  char hash[65];
  json_hash_hex(args, hash);
  struct approval_request rq = {.run_id = "r1",
                                .tool = "fs.delete",
                                .caller_kind = "automation",
                                .caller_name = "x",
                                .impact = "high",
                                .reason = "impact",
                                .args = args,
                                .args_hash = hash};
  long long id = 0;
  CHECK_INT(approver_queue_submit(st, &rq, &id, &e), 0);
  CHECK(id > 0);
  int decided = 1;
  struct approval_result res;
  CHECK_INT(approver_queue_check(st, id, hash, &decided, &res, &e), 0);
  CHECK_INT(decided, 0);
  cJSON *list = NULL;
  CHECK_INT(approver_queue_list(other, 0, &list, &e), 0);
  CHECK_INT(cJSON_GetArraySize(list), 1);
  cJSON_Delete(list);
  /* Approved from the other connection; bound to the hash. */
  CHECK_INT(approver_queue_decide(other, id, 1, NULL, "operator:test", NULL, &e), 0);
  CHECK_INT(approver_queue_decide(other, id, 0, "late", "x", NULL, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "already approved");
  CHECK_INT(approver_queue_check(st, id, hash, &decided, &res, &e), 0);
  CHECK_INT(decided, 1);
  CHECK_INT(res.verdict, APPROVAL_APPROVED);
  /* The same approval does not cover other arguments. */
  CHECK_INT(approver_queue_check(st, id, "0000", &decided, &res, &e), 0);
  CHECK_INT(res.verdict, APPROVAL_DENIED);
  CHECK_CONTAINS(res.reason, "other arguments");

  /* Denied with a reason. */
  CHECK_INT(approver_queue_submit(st, &rq, &id, &e), 0);
  CHECK_INT(approver_queue_decide(other, id, 0, "not today", "operator:test", NULL, &e), 0);
  CHECK_INT(approver_queue_check(st, id, hash, &decided, &res, &e), 0);
  CHECK_INT(res.verdict, APPROVAL_DENIED);
  CHECK_CONTAINS(res.reason, "not today");

  /* Stored arguments edited behind the approver's back: approve refuses. */
  CHECK_INT(approver_queue_submit(st, &rq, &id, &e), 0);
  char sql[200];
  snprintf(sql, sizeof sql, "UPDATE approvals SET args = '{\"path\":\"b.txt\"}' WHERE id = %lld",
           id);
  CHECK_INT(store_exec(st, sql, &e), 0);
  CHECK_INT(approver_queue_decide(other, id, 1, NULL, "op", NULL, &e), ERR_INVALID);
  CHECK_CONTAINS(e.msg, "do not match their hash");

  /* Modified arguments come back parsed, hash-checked. */
  CHECK_INT(approver_queue_submit(st, &rq, &id, &e), 0);
  cJSON *mod = cJSON_Parse("{\"path\":\"c.txt\"}");
  CHECK_INT(approver_queue_decide(other, id, 1, NULL, "op", mod, &e), 0);
  CHECK_INT(approver_queue_check(st, id, hash, &decided, &res, &e), 0);
  CHECK_INT(res.verdict, APPROVAL_MODIFIED);
  CHECK(res.new_args && cJSON_Compare(res.new_args, mod, 1));
  cJSON_Delete(res.new_args);
  cJSON_Delete(mod);

  /* No decision: times out as a denial and the row is marked expired. */
  double t0 = util_monotonic();
  CHECK_INT(approver_queue_wait(st, &rq, 0.3, 0, NULL, &res, &e), 0);
  CHECK(util_monotonic() - t0 >= 0.3);
  CHECK_INT(res.verdict, APPROVAL_DENIED);
  CHECK_CONTAINS(res.reason, "timed out");
  CHECK_INT(approver_queue_list(other, 1, &list, &e), 0);
  cJSON *last = cJSON_GetArrayItem(list, cJSON_GetArraySize(list) - 1);
  CHECK_STR(cJSON_GetObjectItem(last, "status")->valuestring, "expired");
  cJSON_Delete(list);

  /* Terminal approver, scripted. */
  const char *answers[] = {"y\n", "n\nbecause\n", "e\n{\"path\":\"d.txt\"}\n", "maybe\n", ""};
  int want[] = {APPROVAL_APPROVED, APPROVAL_DENIED, APPROVAL_MODIFIED, APPROVAL_DENIED,
                APPROVAL_DENIED};
  for (int i = 0; i < 5; i++) {
    FILE *in = fmemopen((void *)answers[i], strlen(answers[i]) ? strlen(answers[i]) : 1, "r");
    if (!strlen(answers[i])) fgetc(in); /* empty input: EOF at once */
    char *ob = NULL;
    size_t ol = 0;
    FILE *out = open_memstream(&ob, &ol);
    CHECK_INT(approver_terminal(&rq, in, out, &res, &e), 0);
    fclose(in);
    fclose(out);
    CHECK_INT(res.verdict, want[i]);
    CHECK_CONTAINS(ob, "fs.delete (impact high)");
    CHECK_CONTAINS(ob, "{\"path\":\"a.txt\"}");
    if (i == 1) CHECK_CONTAINS(res.reason, "because");
    if (i == 2) CHECK(res.new_args && cJSON_IsString(cJSON_GetObjectItem(res.new_args, "path")));
    cJSON_Delete(res.new_args);
    free(ob);
  }
  cJSON_Delete(args);
  store_close(st);
  store_close(other);
}

/* ---------------------------------------------------------------- pipeline */

static int call(struct call_ctx *ctx, const char *tool, const char *json, cJSON **res,
                struct err *e) {
  cJSON *a = cJSON_Parse(json);
  int rc = tool_call(ctx, tool, a, res, e);
  cJSON_Delete(a);
  return rc;
}

static int audit_count(struct runtime *rt, const char *where) {
  struct store *st = NULL;
  struct err e = {0};
  if (runtime_store(rt, &st, &e)) return -1;
  char sql[300];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM audit WHERE %s", where);
  sqlite3_stmt *q;
  if (store_prepare(st, sql, &q, &e)) return -1;
  int n = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int(q, 0) : -1;
  sqlite3_finalize(q);
  return n;
}

/* Rows whose args_hash is json_hash_hex of json (and where holds). */
static int hash_count(struct runtime *rt, const char *json, const char *where) {
  cJSON *a = cJSON_Parse(json);
  char h[65], w[400];
  json_hash_hex(a, h);
  cJSON_Delete(a);
  snprintf(w, sizeof w, "args_hash = '%s' AND %s", h, where);
  return audit_count(rt, w);
}

static char seen_events[512];
static void capture(void *ud, const char *run_id, const char *type, const cJSON *data) {
  (void)ud, (void)run_id;
  const cJSON *v = cJSON_GetObjectItem(data, "verdict");
  size_t n = strlen(seen_events);
  snprintf(seen_events + n, sizeof seen_events - n, "%s%s%s;", type, v ? ":" : "",
           v ? v->valuestring : "");
}

static void test_pipeline(void) {
  char ws[300];
  snprintf(ws, sizeof ws, "%s/ws", dir);
  mkdir(ws, 0700);
  char d2[300];
  snprintf(d2, sizeof d2, "%s/ws/data", dir);
  mkdir(d2, 0700);
  write_file(
      "ws/luagent.lua",
      "return {\n"
      "  approver = 'deny',\n"
      "  rules = {\n"
      "    { tool = 'echo', args = { msg = '^deny' }, action = 'deny', reason = 'rule says no' },\n"
      "    { tool = 'echo', args = { msg = '^allow' }, action = 'allow' },\n"
      "    { tool = 'fs.delete', caller = 'automation', action = 'allow' },\n"
      "    { tool = 'fs.write', args = { path = '^locked/' }, action = 'deny' },\n"
      "  },\n"
      "}\n");
  write_file(
      "ws/hooks.lua",
      "return {\n"
      "  before_tool = function(call)\n"
      "    local m = call.args.msg\n"
      "    if m == 'deny-but-hook-allows' then return 'allow' end\n"
      "    if m == 'allow-but-hook-denies' then return 'deny', 'hook says no' end\n"
      "    if m == 'hook-errors' then error('boom') end\n"
      "    if m == 'hook-loops' then while true do end end\n"
      "    if m == 'hook-bad' then return 'yes' end\n"
      "    if m == 'rewrite' then return nil, nil, { msg = 'rewritten' } end\n"
      "    if m == 'rewrite-bad' then return nil, nil, { msg = 42 } end\n"
      "    if call.tool == 'fs.write' and call.args.path == 'sneaky.txt' then\n"
      "      return 'allow', 'ok', { path = 'locked/x.txt', content = 'x' }\n"
      "    end\n"
      "    if m == 'table-form' then return { action = 'escalate', reason = 'as a table' } end\n"
      "  end,\n"
      "  after_tool = function(call, result)\n"
      "    if call.args.msg == 'redact-me' then return { msg = 'REDACTED' } end\n"
      "  end,\n"
      "}\n");
  struct runtime *rt = NULL;
  struct err e = {0};
  CHECK_INT(runtime_open(ws, &rt, &e), 0);
  if (!rt) {
    fprintf(stderr, "runtime_open: %s\n", e.msg);
    return;
  }
  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_AUTOMATION, "unit");
  cJSON *res = NULL;

  CHECK_INT(call(&ctx, "echo", "{\"msg\":\"hello\"}", &res, &e), 0);
  CHECK_STR(cJSON_GetObjectItem(res, "msg")->valuestring, "hello");
  cJSON_Delete(res);
  /* A deny rule beats a hook's allow. */
  CHECK_INT(call(&ctx, "echo", "{\"msg\":\"deny-but-hook-allows\"}", &res, &e), ERR_DENIED);
  CHECK_STR(e.code, "denied");
  CHECK_CONTAINS(e.msg, "rule says no");
  /* A hook's deny beats an allow rule. */
  CHECK_INT(call(&ctx, "echo", "{\"msg\":\"allow-but-hook-denies\"}", &res, &e), ERR_DENIED);
  CHECK_CONTAINS(e.msg, "hook says no");
  /* Hook errors, limits and malformed answers deny. */
  CHECK_INT(call(&ctx, "echo", "{\"msg\":\"hook-errors\"}", &res, &e), ERR_DENIED);
  CHECK_CONTAINS(e.msg, "boom");
  CHECK_CONTAINS(e.msg, "hooks.lua:6");
  double t0 = util_monotonic();
  CHECK_INT(call(&ctx, "echo", "{\"msg\":\"hook-loops\"}", &res, &e), ERR_DENIED);
  CHECK(util_monotonic() - t0 < 5);
  CHECK_CONTAINS(e.msg, "hook");
  CHECK_INT(call(&ctx, "echo", "{\"msg\":\"hook-bad\"}", &res, &e), ERR_DENIED);
  CHECK_CONTAINS(e.msg, "not \"allow\"");
  /* Rewritten arguments run (and are validated). */
  CHECK_INT(call(&ctx, "echo", "{\"msg\":\"rewrite\"}", &res, &e), 0);
  CHECK_STR(cJSON_GetObjectItem(res, "msg")->valuestring, "rewritten");
  cJSON_Delete(res);
  /* echo's schema accepts anything, so use fs.write for a schema failure
   * below; a rewrite that trips a deny rule is denied. */
  CHECK_INT(call(&ctx, "fs.write", "{\"path\":\"sneaky.txt\",\"content\":\"hi\"}", &res, &e),
            ERR_DENIED);
  CHECK_CONTAINS(e.msg, "rule 4");
  /* The table form of a hook answer; escalation with approver=deny, seen
   * as events by the run's sinks. */
  struct event_sink sink = {.emit = capture};
  ctx.events = &sink;
  CHECK_INT(call(&ctx, "echo", "{\"msg\":\"table-form\"}", &res, &e), ERR_DENIED);
  CHECK_CONTAINS(e.msg, "as a table");
  CHECK_CONTAINS(e.msg, "approver is \"deny\"");
  CHECK_STR(seen_events, "approval_requested;approval_decided:denied;");
  ctx.events = NULL;
  /* after_tool redacts. */
  CHECK_INT(call(&ctx, "echo", "{\"msg\":\"redact-me\"}", &res, &e), 0);
  CHECK_STR(cJSON_GetObjectItem(res, "msg")->valuestring, "REDACTED");
  cJSON_Delete(res);
  /* Impact: fs.delete is high; allowed explicitly for automation only. */
  write_file("ws/data/gone.txt", "x");
  CHECK_INT(call(&ctx, "fs.delete", "{\"path\":\"gone.txt\"}", &res, &e), 0);
  cJSON_Delete(res);
  struct call_ctx mctx;
  call_ctx_init(&mctx, rt, CALLER_MODEL, "");
  CHECK_INT(call(&mctx, "fs.delete", "{\"path\":\"gone.txt\"}", &res, &e), ERR_DENIED);
  CHECK_CONTAINS(e.msg, "impact high");
  /* Taint: after an open_world result, the model's medium calls escalate. */
  CHECK_INT(call(&mctx, "fs.write", "{\"path\":\"t.txt\",\"content\":\"x\"}", &res, &e), 0);
  cJSON_Delete(res);
  call_ctx_taint(&mctx);
  CHECK_INT(call(&mctx, "fs.write", "{\"path\":\"t.txt\",\"content\":\"x\"}", &res, &e),
            ERR_DENIED);
  CHECK_CONTAINS(e.msg, "outside content");
  CHECK_INT(call(&mctx, "echo", "{\"msg\":\"read is fine\"}", &res, &e), 0);
  cJSON_Delete(res);
  /* An automation is not subject to taint. */
  call_ctx_taint(&ctx);
  CHECK_INT(call(&ctx, "fs.write", "{\"path\":\"t.txt\",\"content\":\"x\"}", &res, &e), 0);
  cJSON_Delete(res);

  /* A read whose arguments are too big for the decision's copy of them
   * (hashed on the calling thread) and a small one (copied, hashed by the
   * audit writer's thread). */
  static char big[3000];
  int w = snprintf(big, sizeof big, "{\"msg\":\"");
  for (int i = 0; i < 2000; i++) big[w++] = (char)('a' + i % 26);
  snprintf(big + w, sizeof big - (size_t)w, "\"}");
  CHECK_INT(call(&ctx, "echo", big, &res, &e), 0);
  cJSON_Delete(res);
  CHECK_INT(call(&ctx, "echo", "{\"msg\":\"small\",\"n\":[1,2.5,null,{\"\\u0000\":true}]}", &res, &e),
            0);
  cJSON_Delete(res);
  sec_flush(rt->sec);
  /* Each row binds the arguments it decided on: a read's one row, with its
   * hash computed from the copy; a rewrite's rows the rewritten arguments
   * (never the original); denials the arguments they refused. */
  CHECK_INT(hash_count(rt, "{\"msg\":\"hello\"}", "decision = 'allow' AND status = 'ok'"), 1);
  CHECK_INT(hash_count(rt, big, "decision = 'allow' AND status = 'ok'"), 1);
  CHECK_INT(hash_count(rt, "{\"msg\":\"small\",\"n\":[1,2.5,null,{\"\\u0000\":true}]}",
                       "decision = 'allow' AND status = 'ok'"),
            1);
  CHECK_INT(hash_count(rt, "{\"msg\":\"rewritten\"}", "decision = 'allow' AND status IS NULL"), 1);
  CHECK_INT(hash_count(rt, "{\"msg\":\"rewritten\"}", "decision = 'exec' AND status = 'ok'"), 1);
  CHECK_INT(hash_count(rt, "{\"msg\":\"rewrite\"}", "1"), 0);
  CHECK_INT(hash_count(rt, "{\"msg\":\"deny-but-hook-allows\"}",
                       "decision = 'deny' AND decided_by = 'rule 1'"),
            1);
  CHECK_INT(hash_count(rt, "{\"msg\":\"allow-but-hook-denies\"}",
                       "decision = 'deny' AND decided_by = 'hook'"),
            1);
  CHECK_INT(hash_count(rt, "{\"msg\":\"redact-me\"}", "decision = 'allow' AND status = 'ok'"), 1);
  CHECK_INT(hash_count(rt, "{\"msg\":\"read is fine\"}", "caller_kind = 'model'"), 1);

  /* Every decision and execution is in the chain, and it verifies. */
  CHECK(audit_count(rt, "decision = 'deny'") >= 8);
  CHECK_INT(audit_count(rt, "status = 'ok'"), 9);
  /* A read tool simply allowed: one row for decision and execution; a
   * medium one: the decision on record before it ran, then the execution. */
  CHECK(audit_count(rt,
                    "tool = 'echo' AND decision = 'allow' AND status = 'ok'"
                    " AND duration_ms IS NOT NULL") >= 3);
  /* ... unless a hook rewrote the arguments: then both rows. */
  CHECK_INT(audit_count(rt, "tool = 'echo' AND decision = 'exec'"), 1);
  CHECK_INT(audit_count(rt, "tool = 'fs.write' AND decision = 'allow' AND status IS NULL"), 2);
  CHECK_INT(audit_count(rt, "tool = 'fs.write' AND decision = 'exec' AND status = 'ok'"), 2);
  CHECK_INT(audit_count(rt, "decided_by = 'hook' AND decision = 'deny'"), 4);
  CHECK_INT(audit_count(rt,
                        "caller_name = 'unit' AND tool = 'fs.delete' AND decision = 'allow'"
                        " AND decided_by = 'rule 3'"),
            1);
  /* Plain allowed reads are queued: on record with the next row that
   * matters (before it), or on sec_flush. */
  int before = audit_count(rt, "1");
  CHECK_INT(call(&ctx, "echo", "{\"msg\":\"queued\"}", &res, &e), 0);
  cJSON_Delete(res);
  CHECK_INT(audit_count(rt, "1"), before);
  CHECK_INT(call(&ctx, "fs.write", "{\"path\":\"q.txt\",\"content\":\"x\"}", &res, &e), 0);
  cJSON_Delete(res);
  CHECK_INT(audit_count(rt, "1"), before + 3);
  CHECK_INT(audit_count(rt, "tool = 'echo' AND seq = (SELECT max(seq) - 2 FROM audit)"), 1);
  CHECK_INT(call(&ctx, "echo", "{\"msg\":\"queued\"}", &res, &e), 0);
  cJSON_Delete(res);
  sec_flush(rt->sec);
  CHECK_INT(audit_count(rt, "1"), before + 4);

  struct store *st = NULL;
  CHECK_INT(runtime_store(rt, &st, &e), 0);
  struct audit_report rep;
  CHECK_INT(audit_verify(st, NULL, NULL, &rep, &e), 0);
  CHECK_STR(rep.problem, "");
  runtime_free(rt);

  /* Config errors name the file, the line and the key. */
  write_file("ws/luagent.lua", "return {\n  approver = 'maybe',\n}\n");
  CHECK(runtime_open(ws, &rt, &e) != 0);
  CHECK_CONTAINS(e.msg, "luagent.lua:2");
  CHECK_CONTAINS(e.msg, "approver");
  write_file("ws/luagent.lua", "return {\n  rules = {\n { action = 'allow', tool = 5 } },\n}\n");
  CHECK(runtime_open(ws, &rt, &e) != 0);
  CHECK_CONTAINS(e.msg, "rules[1].tool");
  write_file("ws/luagent.lua", "return {}\n");
  write_file("ws/hooks.lua", "return {\n before_tool = 5 }\n");
  CHECK(runtime_open(ws, &rt, &e) != 0);
  CHECK_CONTAINS(e.msg, "before_tool must be a function");
  write_file("ws/hooks.lua", "return {\n before_tool = function( }\n");
  CHECK(runtime_open(ws, &rt, &e) != 0);
  CHECK_CONTAINS(e.msg, "hooks.lua:2");
}

/* tool_call_lent: echo's result borrowed from the caller's arguments when
 * nothing must change it, and an owned copy (the caller's arguments
 * untouched) when something does: a secret to redact, an after hook, a
 * rewrite. Every call keeps its audit row. */
static int lent_call(struct call_ctx *ctx, const char *json, const cJSON **args, cJSON **res,
                     const cJSON **lent, struct err *e) {
  cJSON *a = json ? cJSON_Parse(json) : NULL;
  *args = a;
  return tool_call_lent(ctx, "echo", a, res, lent, e);
}

static void test_lent(void) {
  char ws[300];
  snprintf(ws, sizeof ws, "%s/wsl", dir);
  mkdir(ws, 0700);
  write_file("wsl/luagent.lua", "return { approver = 'deny' }\n");
  write_file("wsl/hooks.lua",
             "return {\n"
             "  before_tool = function(call)\n"
             "    if call.args.msg == 'rewrite' then return nil, nil, { msg = 'rewritten' } end\n"
             "  end,\n"
             "}\n");
  secrets_forget_all();
  struct runtime *rt = NULL;
  struct err e = {0};
  CHECK_INT(runtime_open(ws, &rt, &e), 0);
  if (!rt) return;
  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_SCRIPT, "lent.lua");
  const cJSON *args, *lent;
  cJSON *res;
  /* borrowed: the very arguments, nothing to free */
  CHECK_INT(lent_call(&ctx, "{\"msg\":\"hello\",\"n\":[1,2]}", &args, &res, &lent, &e), 0);
  CHECK(lent == args);
  CHECK(res == NULL);
  cJSON_Delete((cJSON *)args);
  /* no arguments: the empty object made for the call is not lent */
  CHECK_INT(lent_call(&ctx, NULL, &args, &res, &lent, &e), 0);
  CHECK(lent == NULL);
  CHECK(res != NULL && cJSON_IsObject(res) && !res->child);
  cJSON_Delete(res);
  /* a rewrite is the call's own: the result is an owned copy of it */
  CHECK_INT(lent_call(&ctx, "{\"msg\":\"rewrite\"}", &args, &res, &lent, &e), 0);
  CHECK(lent == NULL);
  CHECK_STR(res ? cJSON_GetObjectItem(res, "msg")->valuestring : "", "rewritten");
  CHECK_STR(cJSON_GetObjectItem(args, "msg")->valuestring, "rewrite");
  cJSON_Delete(res);
  cJSON_Delete((cJSON *)args);
  /* a registered secret: redacted in a copy, the caller's arguments kept */
  secrets_register_value("s3cr3t-value", 12);
  CHECK_INT(lent_call(&ctx, "{\"msg\":\"a s3cr3t-value b\"}", &args, &res, &lent, &e), 0);
  CHECK(lent == NULL);
  CHECK_STR(res ? cJSON_GetObjectItem(res, "msg")->valuestring : "", "a [secret] b");
  CHECK_STR(cJSON_GetObjectItem(args, "msg")->valuestring, "a s3cr3t-value b");
  cJSON_Delete(res);
  cJSON_Delete((cJSON *)args);
  secrets_forget_all();
  /* an unknown tool: an error, nothing lent */
  lent = args;
  CHECK_INT(tool_call_lent(&ctx, "nope", NULL, &res, &lent, &e), ERR_NOTFOUND);
  CHECK(lent == NULL && res == NULL);
  sec_flush(rt->sec);
  CHECK_INT(hash_count(rt, "{\"msg\":\"hello\",\"n\":[1,2]}",
                       "decision = 'allow' AND status = 'ok' AND caller_name = 'lent.lua'"),
            1);
  CHECK_INT(hash_count(rt, "{}", "decision = 'allow' AND status = 'ok'"), 1);
  CHECK_INT(hash_count(rt, "{\"msg\":\"rewritten\"}", "decision = 'exec' AND status = 'ok'"), 1);
  CHECK_INT(
      hash_count(rt, "{\"msg\":\"a s3cr3t-value b\"}", "decision = 'allow' AND status = 'ok'"), 1);
  runtime_free(rt);

  /* an after hook sees (and may replace) the result: a copy it gets */
  write_file("wsl/hooks.lua",
             "return {\n"
             "  after_tool = function(call, result)\n"
             "    if call.args.msg == 'redact-me' then return { msg = 'REDACTED' } end\n"
             "  end,\n"
             "}\n");
  CHECK_INT(runtime_open(ws, &rt, &e), 0);
  if (!rt) return;
  call_ctx_init(&ctx, rt, CALLER_SCRIPT, "lent.lua");
  CHECK_INT(lent_call(&ctx, "{\"msg\":\"redact-me\"}", &args, &res, &lent, &e), 0);
  CHECK(lent == NULL);
  CHECK_STR(res ? cJSON_GetObjectItem(res, "msg")->valuestring : "", "REDACTED");
  CHECK_STR(cJSON_GetObjectItem(args, "msg")->valuestring, "redact-me");
  cJSON_Delete(res);
  cJSON_Delete((cJSON *)args);
  CHECK_INT(lent_call(&ctx, "{\"msg\":\"kept\"}", &args, &res, &lent, &e), 0);
  CHECK(lent == NULL);
  CHECK_STR(res ? cJSON_GetObjectItem(res, "msg")->valuestring : "", "kept");
  cJSON_Delete(res);
  cJSON_Delete((cJSON *)args);
  runtime_free(rt);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/luagent-test-security-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_patterns();
  test_glob();
  test_rules();
  test_secrets();
  test_queue();
  test_pipeline();
  test_lent();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) fprintf(stderr, "cleanup failed\n");
  return TEST_END();
}
