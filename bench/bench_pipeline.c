/* bench_pipeline.c - the cost of the security pipeline per allowed call.
 *
 * In one run, the same Lua loop calls tools.call("echo", ...) in three
 * workspaces: no rules and no hooks (the floor: validation, the decision,
 * two audit rows), ten rules, and ten rules plus a Lua before_tool hook
 * (one sandbox kept loaded, recycled at half its budget). Every call is allowed. Prints figures;
 * never asserts. Usage: bench_pipeline [CALLS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit.h"
#include "rules.h"
#include "runtime.h"
#include "sandbox.h"
#include "util.h"

static const char *const RULES =
    "return {\n"
    "  rules = {\n"
    "    { tool = 'fs.*', caller = 'model', args = { path = '^secrets/' }, action = 'deny' },\n"
    "    { tool = 'fs.write', args = { path = '%.env$' }, action = 'deny' },\n"
    "    { tool = 'http.request', args = { url = '^http://169%.254%.' }, action = 'deny' },\n"
    "    { tool = 'fs.delete', caller = 'automation', name = 'cleanup*', action = 'allow' },\n"
    "    { tool = 'echo', args = { msg = '^drop table' }, action = 'deny' },\n"
    "    { tool = 'echo', args = { msg = '[%w ]+' }, action = 'allow' },\n"
    "    { tool = 'echo', caller = 'model', action = 'escalate' },\n"
    "    { tool = '*', caller = 'skill', name = 'untrusted*', action = 'escalate' },\n"
    "    { tool = 'e?ho', args = { n = '^%d+$' }, action = 'allow' },\n"
    "    { tool = 'time.*', action = 'allow' },\n"
    "  },\n"
    "}\n";

static const char *const HOOK =
    "return {\n"
    "  before_tool = function(call)\n"
    "    if call.tool == 'fs.delete' and call.args.path:find('^/') then\n"
    "      return 'deny', 'absolute paths'\n"
    "    end\n"
    "  end,\n"
    "}\n";

static void put(const char *dir, const char *name, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

/* Runs the loop in a fresh workspace; returns seconds per call (<0: error). */
static double run(const char *rules, const char *hook, long n, size_t *nrules) {
  char ws[] = "/tmp/luagent-bench-pipeline.XXXXXX";
  if (!mkdtemp(ws)) return -1;
  if (rules) put(ws, "luagent.lua", rules);
  if (hook) put(ws, "hooks.lua", hook);
  struct err e = {0};
  struct runtime *rt = NULL;
  double per = -1;
  if (runtime_open(ws, &rt, &e)) {
    fprintf(stderr, "runtime_open: %s\n", e.msg);
    goto out;
  }
  (void)nrules;
  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_AUTOMATION, "bench");
  ctx.limits.instructions = 0; /* the loop itself is not what is measured */
  ctx.limits.deadline_s = 600;
  struct sandbox *sb = NULL;
  if (sandbox_new(&ctx.limits, &sb, &e) || runtime_install_api(rt, sb, &ctx, &e)) {
    fprintf(stderr, "sandbox: %s\n", e.msg);
    sandbox_free(sb);
    goto out;
  }
  /* Warm up: opens the store and runs the migrations. */
  const char *warm = "tools.call('echo', { msg = 'warm up', n = 0 })";
  if (sandbox_run_string(sb, warm, strlen(warm), "warm.lua", NULL, &e)) {
    fprintf(stderr, "warm up: %s\n", e.msg);
    sandbox_free(sb);
    goto out;
  }
  char code[256];
  snprintf(code, sizeof code,
           "local call = tools.call for i = 1, %ld do call('echo', { msg = 'hello world', n = i }) "
           "end",
           n);
  double t0 = util_monotonic();
  if (sandbox_run_string(sb, code, strlen(code), "bench.lua", NULL, &e))
    fprintf(stderr, "bench: %s\n", e.msg);
  else
    per = (util_monotonic() - t0) / (double)n;
  sandbox_free(sb);
out:
  runtime_free(rt);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", ws);
  if (system(cmd)) {
  }
  return per;
}

/* The floor under all of it: one audit row (one SQLite write transaction). */
static double audit_only(long n) {
  char ws[] = "/tmp/luagent-bench-audit.XXXXXX";
  if (!mkdtemp(ws)) return -1;
  struct store *st = NULL;
  struct err e = {0};
  double per = -1;
  if (!store_open(ws, &st, &e)) {
    struct audit_entry a = {.decision = "allow",
                            .tool = "echo",
                            .caller_kind = "automation",
                            .args_hash = "0",
                            .duration_ms = -1};
    double t0 = util_monotonic();
    long i = 0;
    for (; i < n; i++)
      if (audit_append(st, NULL, &a, NULL, &e)) break;
    if (i == n) per = (util_monotonic() - t0) / (double)n;
  }
  store_close(st);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", ws);
  if (system(cmd)) {
  }
  return per;
}

static double minf(double a, double b) {
  return a < 0 ? b : b < 0 ? a : a < b ? a : b;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 3000;
  if (n <= 0) n = 3000;
  double none = -1, rules = -1, both = -1, audit = -1;
  /* Interleaved rounds, best of three: the machine is shared and noisy. */
  for (int r = 0; r < 3; r++) {
    none = minf(none, run(NULL, NULL, n, NULL));
    rules = minf(rules, run(RULES, NULL, n, NULL));
    both = minf(both, run(RULES, HOOK, n, NULL));
    audit = minf(audit, audit_only(n));
  }
  if (none < 0 || rules < 0 || both < 0) return 1;
  printf(
      "security pipeline, tools.call('echo') allowed (read impact: one audit row per call),\n"
      "best of 3 x %ld calls:\n",
      n);
  printf("  one audit row alone (SQLite write): %8.1f us\n", audit * 1e6);
  printf("  no rules, no hooks:                 %8.1f us/call\n", none * 1e6);
  printf("  10 rules:                           %8.1f us/call (+%.1f us, %.2fx)\n", rules * 1e6,
         (rules - none) * 1e6, rules / none);
  printf(
      "  10 rules + Lua before_tool hook:    %8.1f us/call (+%.1f us, %.2fx the no-rules "
      "call)\n",
      both * 1e6, (both - none) * 1e6, both / none);
  return 0;
}
