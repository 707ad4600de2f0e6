/* bench_speed.c - the figures of issue 20 ("speed close to the C floor"),
 * each beside its floor measured in the same process.
 *
 * Regions (each a loop of N operations after a warm-up):
 *   bare     a bare Lua-to-C call, f({ a = i }), in a luagent sandbox (the
 *            same hook, allocator and _ENV as any script): the floor of
 *   echo     tools.call("echo", { a = i }) in that same sandbox;
 *   skill    tools.call("bench.get", {}): a trivial read-only Lua skill
 *            tool, through the whole pipeline;
 *   audit    one audit row appended synchronously, one transaction each
 *            (what a medium or high impact call waits for);
 *   task     one warm 10-turn task (9 echo rounds + an answer) through
 *            react_run, the streaming OpenAI wire and the run journal,
 *            against tests/mock_llm.py; the floor of
 *   raw      the same ten request bodies replayed by a bare libcurl
 *            client that reads the streamed answers and nothing else;
 *   task_a   the same task over the Anthropic messages wire.
 *
 * Each region that queues audit rows ends with sec_flush, inside the
 * region: the rows its calls queued are written and counted there,
 * whichever thread writes them (the calling thread, or the store
 * writer's). With BENCH_FLUSH_AFTER=1 in the environment the flush comes
 * just after the region's dump instead, so that a per-thread run
 * (--separate-threads=yes) gives the calling thread's own cost: without
 * it, whatever rows the writer had not taken yet when the loop ended were
 * written by the caller's flush, 0 to 1.5k instructions per echo call
 * from run to run.
 *
 * Run under `valgrind --tool=callgrind --instr-atstart=no` (bench/run_speed.sh
 * does), each region turns instrumentation on and dumps its own counts
 * ("Trigger: Client Request: REGION N"), so instruction counts per
 * operation are exact and repeatable on a loaded machine. Without valgrind
 * the client requests are no-ops and the wall times printed here are the
 * figures. It also prints how many TCP connections the mock saw per task.
 *
 * Usage: bench_speed [N] [TASKS]   (run from the build dir; prints, never asserts)
 */
#include <curl/curl.h>
#include <lauxlib.h>
#include <lua.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <valgrind/callgrind.h>

#include "audit.h"
#include "journal.h"
#include "llm.h"
#include "react.h"
#include "runtime.h"
#include "sandbox.h"
#include "sandbox_impl.h"
#include "security.h"
#include "skills.h"
#include "util.h"

#define TURNS 10

static char dir[256];
/* The runtime whose queued audit rows each region writes before it ends
 * (sec_flush), so a region counts every row its calls made, on whichever
 * thread writes them. */
static struct runtime *bench_rt;
static bool flush_after; /* BENCH_FLUSH_AFTER=1: flush after the dump */

/* Region bracket: instrumentation only inside, one dump per region. */
static double region_t0;
static void region_begin(void) {
  CALLGRIND_START_INSTRUMENTATION;
  CALLGRIND_ZERO_STATS;
  region_t0 = util_monotonic();
}
/* flush: the region queued audit rows, written before it ends (or just
 * after, with flush_after). */
static void region_end(const char *name, long n, bool flush) {
  if (flush && !flush_after) sec_flush(bench_rt->sec);
  double dt = util_monotonic() - region_t0;
  char label[64];
  snprintf(label, sizeof label, "%s %ld", name, n);
  CALLGRIND_DUMP_STATS_AT(label);
  CALLGRIND_STOP_INSTRUMENTATION;
  if (flush && flush_after) sec_flush(bench_rt->sec);
  printf("  %-6s %10.2f us/op wall (n=%ld)\n", name, dt / (double)n * 1e6, n);
  fflush(stdout);
}

static void put(const char *rel, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  struct err e = {0};
  if (util_write_file_atomic(p, text, strlen(text), &e)) {
    fprintf(stderr, "%s\n", e.msg);
    exit(1);
  }
}

/* ---- sandbox regions ---------------------------------------------------- */

static int bare_echo(lua_State *L) {
  lua_settop(L, 1);
  return 1;
}

/* Runs code in sb's state as a chunk with its own _ENV (as the sandbox
 * runs any chunk), with `bare` added to that _ENV. Instrumented when
 * region is set. */
static int run_in(struct sandbox *sb, const char *code, const char *region, long n) {
  lua_State *L = sb->L;
  if (luaL_loadbufferx(L, code, strlen(code), "=bench", "t") != LUA_OK) goto fail;
  sandbox__push_env(L);
  lua_pushcfunction(L, bare_echo);
  lua_setfield(L, -2, "bare");
  lua_setupvalue(L, -2, 1);
  if (region) region_begin();
  int rc = lua_pcall(L, 0, 0, 0);
  if (region) region_end(region, n, true);
  if (rc == LUA_OK) return 0;
fail:
  if (lua_istable(L, -1)) lua_getfield(L, -1, "message");
  fprintf(stderr, "bench chunk: %s\n", lua_tostring(L, -1));
  lua_settop(L, 0);
  return -1;
}

static int bench_sandbox_calls(struct runtime *rt, long n) {
  struct call_ctx ctx;
  call_ctx_init(&ctx, rt, CALLER_SCRIPT, "bench.lua");
  ctx.limits.instructions = 0; /* the loops are what is measured, not capped */
  ctx.limits.deadline_s = 3600;
  struct err e = {0};
  struct sandbox *sb = NULL;
  if (sandbox_new(&ctx.limits, &sb, &e) || runtime_install_api(rt, sb, &ctx, &e)) {
    fprintf(stderr, "sandbox: %s\n", e.msg);
    return -1;
  }
  ctx.sb = sb;
  char code[256];
  int rc = 0;
  /* warm up: the store, the skills and the statement caches open here */
  if (run_in(sb, "for i = 1, 20 do bare({ a = i }) tools.call('echo', { a = i }) "
                   "tools.call('bench.get', {}) end", NULL, 0)) {
    sandbox_free(sb);
    return -1;
  }
  sec_flush(rt->sec); /* the warm-up's rows, before any region */
  snprintf(code, sizeof code, "local f = bare for i = 1, %ld do local r = f({ a = i }) end", n);
  rc |= run_in(sb, code, "bare", n);
  snprintf(code, sizeof code,
           "local call = tools.call for i = 1, %ld do local r = call('echo', { a = i }) end", n);
  rc |= run_in(sb, code, "echo", n);
  long ns = n / 10 > 0 ? n / 10 : 1;
  snprintf(code, sizeof code,
           "local call = tools.call for i = 1, %ld do local r = call('bench.get', {}) end", ns);
  rc |= run_in(sb, code, "skill", ns);
  sandbox_free(sb);
  return rc;
}

/* One synchronous audit append per operation, as a call with side
 * effects makes before it runs. */
static int bench_audit(struct runtime *rt, long n) {
  struct err e = {0};
  struct store *st;
  if (runtime_store(rt, &st, &e)) return -1;
  struct audit_entry a = {.decision = "allow", .tool = "echo", .caller_kind = "script",
                          .args_hash = "0", .duration_ms = -1};
  for (int i = 0; i < 20; i++) /* warm up */
    if (audit_append(st, NULL, &a, NULL, &e)) goto fail;
  region_begin();
  for (long i = 0; i < n; i++)
    if (audit_append(st, NULL, &a, NULL, &e)) {
      region_end("audit", i + 1, false);
      goto fail;
    }
  region_end("audit", n, false);
  return 0;
fail:
  fprintf(stderr, "audit: %s\n", e.msg);
  return -1;
}

/* ---- the 10-turn task ---------------------------------------------------- */

static pid_t start_mock(int *port) {
  /* BENCH_CHUNK: the bytes of text and arguments per streamed piece (6
   * unless set; a real provider's pieces are 1-4 tokens) */
  const char *ck = getenv("BENCH_CHUNK");
  int chunk = ck && atoi(ck) > 0 ? atoi(ck) : 6;
  struct sbuf b = {0};
  sbuf_puts(&b, "{\"by_turn\":true,\"keep_alive\":true,\"steps\":[");
  for (int t = 0; t < TURNS; t++) {
    if (t) sbuf_puts(&b, ",");
    if (t < TURNS - 1)
      sbuf_printf(&b,
                  "{\"text\":\"Step %d: checking.\",\"chunk\":%d,\"tool_calls\":[{\"id\":\"c%d\","
                  "\"name\":\"echo\",\"arguments\":{\"step\":%d,\"note\":\"turn %d\"}}]}",
                  t, chunk, t, t, t);
    else
      sbuf_printf(&b, "{\"text\":\"All ten steps are done; the answer is 42.\",\"chunk\":%d}",
                  chunk);
  }
  sbuf_puts(&b, "]}");
  put("mock.json", b.s);
  sbuf_free(&b);
  char fx[512], pf[512], lf[512], mock[4096];
  snprintf(fx, sizeof fx, "%s/mock.json", dir);
  snprintf(pf, sizeof pf, "%s/mock.port", dir);
  snprintf(lf, sizeof lf, "%s/mock.log", dir);
  const char *src = getenv("LUAGENT_SOURCE_DIR");
  snprintf(mock, sizeof mock, "%s/tests/mock_llm.py", src ? src : LUAGENT_SOURCE_DIR);
  pid_t pid = fork();
  if (pid == 0) {
    execlp("python3", "python3", mock, "--script", fx, "--port-file", pf, "--log", lf,
           (char *)NULL);
    _exit(127);
  }
  struct err e = {0};
  for (int i = 0; i < 400; i++) {
    char *s;
    size_t len;
    if (!util_read_file(pf, 64, &s, &len, &e)) {
      *port = atoi(s);
      free(s);
      return pid;
    }
    util_sleep(0.025);
  }
  fprintf(stderr, "mock did not start\n");
  exit(1);
}

/* The mock's log from byte *off on: the request bodies (up to TURNS) and
 * the distinct connection numbers seen. */
static int read_log(size_t *off, char **bodies, int *nconn) {
  char lf[512];
  snprintf(lf, sizeof lf, "%s/mock.log", dir);
  struct err e = {0};
  char *log;
  size_t len;
  if (util_read_file(lf, 1 << 30, &log, &len, &e)) return -1;
  int nb = 0, conns[64], nc = 0;
  for (char *line = log + *off; line < log + len;) {
    char *nl = strchr(line, '\n');
    if (!nl) break;
    *nl = 0;
    cJSON *j = cJSON_Parse(line);
    if (bodies && nb < TURNS)
      bodies[nb] = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "body"));
    nb++;
    int c = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "conn"));
    int seen = 0;
    for (int k = 0; k < nc; k++) seen |= conns[k] == c;
    if (!seen && nc < 64) conns[nc++] = c;
    cJSON_Delete(j);
    line = nl + 1;
  }
  *off = len;
  free(log);
  *nconn = nc;
  return nb;
}

static size_t sink(char *p, size_t s, size_t n, void *ud) {
  (void)p, (void)ud;
  return s * n;
}

/* A task region's wire: the provider's kind and name, the region's name.
 * The audit rows its tasks queued are written inside the region
 * (sec_flush). */
struct task_wire {
  const char *kind, *provider, *region;
};
static const struct task_wire OPENAI_TASK = {"openai", "mock", "task"};
/* task_a: its stream has more event kinds (message and block starts and
 * stops, pings). Its region ended without a sec_flush before 2026-12-02,
 * so its all-threads figure left out the writing of its last task's audit
 * rows; it flushes like task now (figures before that read ~0.1M lower). */
static const struct task_wire ANTHROPIC_TASK = {"anthropic", "mock_a", "task_a"};

/* One task region: a warm-up task, then `tasks` warm 10-turn tasks
 * through react_run over w's provider against the mock on port. With
 * bodies, the warm-up's request bodies are read from the mock's log from
 * *off on (for the floor) and the connections it saw printed. */
static int task_region(struct runtime *rt, struct event_sink *js, int port, int tasks,
                       const struct task_wire *w, size_t *off, char **bodies) {
  char pj[512];
  snprintf(pj, sizeof pj,
           "[{\"name\":\"%s\",\"kind\":\"%s\",\"base_url\":\"http://127.0.0.1:%d/v1\","
           "\"model\":\"m\",\"max_retries\":0}]",
           w->provider, w->kind, port);
  cJSON *pjs = cJSON_Parse(pj);
  struct llm_client *llm = NULL;
  struct err e = {0};
  int rc = -1;
  if (llm_client_from_json(pjs, "bench", &llm, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    goto out;
  }
  /* one task to warm up (connections, store, statements), then `tasks` */
  for (int r = 0; r <= tasks; r++) {
    struct call_ctx ctx;
    call_ctx_init(&ctx, rt, CALLER_OPERATOR, "bench");
    ctx.events = js;
    struct react_opts ro = {.message = "Do the ten steps.", .kind = "ask"};
    react_limits_default(&ro.limits);
    ro.limits.max_iterations = TURNS;
    struct react_result res;
    if (r == 1) region_begin();
    int k = react_run(&ctx, llm, &ro, &res, &e);
    if (k || res.iterations != TURNS) {
      fprintf(stderr, "%s task %d failed: %s (%d iterations)\n", w->kind, r, e.msg,
              res.iterations);
      goto out;
    }
    react_result_free(&res);
    if (r == 0 && bodies) {
      int nconn = 0, nb = read_log(off, bodies, &nconn);
      if (nb != TURNS) goto out;
      printf("  task   %d requests over %d TCP connection(s) (first task)\n", nb, nconn);
    }
  }
  region_end(w->region, tasks, true);
  rc = 0;
out:
  llm_client_free(llm);
  cJSON_Delete(pjs);
  return rc;
}

static int bench_task(struct runtime *rt, int tasks) {
  int port;
  pid_t mock = start_mock(&port);
  struct err e = {0};
  struct journal *jr = NULL;
  int rc = -1;
  size_t off = 0;
  char *bodies[TURNS] = {0};
  if (journal_open(dir, &jr, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    goto out;
  }
  struct event_sink js = {0};
  journal_sink(jr, &js);
  if (task_region(rt, &js, port, tasks, &OPENAI_TASK, &off, bodies)) goto out;
  int nconn = 0, n_all = read_log(&off, NULL, &nconn);
  printf("  task   %d requests over %d TCP connection(s) (%d warm tasks)\n", n_all, nconn, tasks);

  /* the floor: the same bodies, one kept-alive curl handle */
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions", port);
  CURL *h = curl_easy_init();
  struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
  hd = curl_slist_append(hd, "Accept: text/event-stream");
  for (int r = 0; r <= tasks; r++) {
    if (r == 1) region_begin();
    for (int t = 0; t < TURNS; t++) {
      curl_easy_setopt(h, CURLOPT_URL, url);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, bodies[t]);
      curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
      curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
      curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
      if (curl_easy_perform(h) != CURLE_OK) {
        fprintf(stderr, "raw request failed\n");
        goto out;
      }
    }
  }
  region_end("raw", tasks, false);
  curl_slist_free_all(hd);
  curl_easy_cleanup(h);
  rc = task_region(rt, &js, port, tasks, &ANTHROPIC_TASK, &off, NULL);
out:
  for (int t = 0; t < TURNS; t++) free(bodies[t]);
  journal_close(jr);
  kill(mock, SIGTERM);
  waitpid(mock, NULL, 0);
  return rc;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 2000;
  int tasks = argc > 2 ? atoi(argv[2]) : 3;
  if (n < 10) n = 10;
  if (tasks < 1) tasks = 1;
  snprintf(dir, sizeof dir, "/tmp/luagent_bench_speed_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  char sk[300];
  snprintf(sk, sizeof sk, "%s/skills/bench", dir);
  struct err me = {0};
  if (util_mkdirs(sk, 0755, &me)) {
    fprintf(stderr, "%s\n", me.msg);
    return 1;
  }
  put("skills/bench/skill.lua",
      "return {\n"
      "  name = 'bench', description = 'A trivial read-only tool for the speed bench',\n"
      "  tools = { get = { description = 'Returns a constant', impact = 'read',\n"
      "    params = { type = 'object', properties = {} },\n"
      "    run = function(args, call) return { ok = true } end } },\n"
      "}\n");
  struct err e = {0};
  struct runtime *rt = NULL;
  if (runtime_open(dir, &rt, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  bench_rt = rt;
  flush_after = getenv("BENCH_FLUSH_AFTER") && !strcmp(getenv("BENCH_FLUSH_AFTER"), "1");
  if (skills_ensure(rt, &e)) {
    fprintf(stderr, "skills: %s\n", e.msg);
    return 1;
  }
  struct store *st; /* opened here, not by the first flush inside a region */
  if (runtime_store(rt, &st, &e)) {
    fprintf(stderr, "store: %s\n", e.msg);
    return 1;
  }
  printf("speed (issue 20), wall times of this run; instructions: bench/run_speed.sh\n");
  int rc = bench_sandbox_calls(rt, n);
  if (!rc) rc = bench_audit(rt, n / 10 > 0 ? n / 10 : 1);
  if (!rc) rc = bench_task(rt, tasks);
  runtime_free(rt);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) {
  }
  return rc ? 1 : 0;
}
