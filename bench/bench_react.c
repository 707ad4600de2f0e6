/* bench_react.c - the ReAct loop's own cost per turn, against the mock
 * model server (tests/mock_llm.py), and the peak memory of `luagent ask`.
 *
 * 1. The loop: react_run through the real provider code (streaming SSE),
 *    the tool pipeline (echo) and the run journal, 10-turn tasks
 *    (9 tool rounds + an answer), repeated.
 * 2. The floor: a raw libcurl client replays exactly the request bodies the
 *    loop sent against a second, identical mock, reading the streamed
 *    answers and doing nothing else.
 * Overhead per turn = loop time per turn - raw time per turn (same run,
 * same machine, same mock). Then the peak RSS (ru_maxrss) of a child
 * `luagent ask` doing a 10-turn task.
 *
 * Usage: bench_react [PATH/TO/luagent] [REPS]   (run from the build dir)
 *
 * With BENCH_MOCK_PORT=N and BENCH_MOCK_LOG=FILE set, all three parts use
 * that already running mock instead of starting their own; it must serve
 * the 10-turn task with "by_turn": true (bench/run_peers.sh does this, so
 * the peer frameworks it measures talk to the very same server).
 */
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "journal.h"
#include "llm.h"
#include "react.h"
#include "runtime.h"
#include "util.h"

#define TURNS 10

static char dir[256];

static pid_t start_mock(const char *name, const char *fixture, int *port) {
  char fx[512], pf[512], lf[512];
  snprintf(fx, sizeof fx, "%s/%s.json", dir, name);
  snprintf(pf, sizeof pf, "%s/%s.port", dir, name);
  snprintf(lf, sizeof lf, "%s/%s.log", dir, name);
  struct err e = {0};
  util_write_file_atomic(fx, fixture, strlen(fixture), &e);
  char mock[4096];
  const char *src = getenv("LUAGENT_SOURCE_DIR");
  snprintf(mock, sizeof mock, "%s/tests/mock_llm.py", src ? src : LUAGENT_SOURCE_DIR);
  pid_t pid = fork();
  if (pid == 0) {
    execlp("python3", "python3", mock, "--script", fx, "--port-file", pf, "--log", lf,
           (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 400; i++) {
    char *s;
    size_t n;
    if (!util_read_file(pf, 64, &s, &n, &e)) {
      *port = atoi(s);
      free(s);
      return pid;
    }
    util_sleep(0.025);
  }
  fprintf(stderr, "mock did not start\n");
  exit(1);
}

static char *fixture(int reps) {
  struct sbuf b = {0};
  sbuf_puts(&b, "{\"steps\":[");
  for (int r = 0; r < reps; r++)
    for (int t = 0; t < TURNS; t++) {
      if (r || t) sbuf_puts(&b, ",");
      if (t < TURNS - 1)
        sbuf_printf(&b,
                    "{\"text\":\"Step %d: checking.\",\"chunk\":6,\"tool_calls\":[{\"id\":\"c%d\","
                    "\"name\":\"echo\",\"arguments\":{\"step\":%d,\"note\":\"turn %d\"}}]}",
                    t, t, t, t);
      else
        sbuf_puts(&b, "{\"text\":\"All ten steps are done; the answer is 42.\",\"chunk\":6}");
    }
  sbuf_puts(&b, "]}");
  return sbuf_take(&b);
}

static size_t sink(char *p, size_t s, size_t n, void *ud) {
  (void)p, (void)ud;
  return s * n;
}

static double cpu_now(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  const char *bin = argc > 1 ? argv[1] : "./luagent";
  int reps = argc > 2 ? atoi(argv[2]) : 20;
  if (reps < 1) reps = 1;
  snprintf(dir, sizeof dir, "/tmp/luagent_bench_react_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  char *fx = fixture(reps);
  int port_a, port_b;
  const char *ext_port = getenv("BENCH_MOCK_PORT"), *ext_log = getenv("BENCH_MOCK_LOG");
  int external = ext_port && ext_log;
  pid_t ma = -1, mb = -1;
  if (external) {
    port_a = port_b = atoi(ext_port);
  } else {
    ma = start_mock("loop", fx, &port_a);
    mb = start_mock("raw", fx, &port_b);
  }

  /* --- the loop, in process */
  struct err e = {0};
  struct runtime *rt = NULL;
  if (runtime_open(dir, &rt, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  char pj[512];
  snprintf(pj, sizeof pj,
           "[{\"name\":\"mock\",\"kind\":\"openai\",\"base_url\":\"http://127.0.0.1:%d/v1\","
           "\"model\":\"m\",\"max_retries\":0}]",
           port_a);
  cJSON *pjs = cJSON_Parse(pj);
  struct llm_client *llm = NULL;
  if (llm_client_from_json(pjs, "bench", &llm, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  cJSON_Delete(pjs);
  struct journal *jr = NULL;
  if (journal_open(dir, &jr, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return 1;
  }
  struct event_sink js = {0};
  journal_sink(jr, &js);
  double *loop_t = xcalloc((size_t)reps, sizeof *loop_t);
  double *raw_t = xcalloc((size_t)reps, sizeof *raw_t);
  double *loop_cpu = xcalloc((size_t)reps, sizeof *loop_cpu);
  double *raw_cpu = xcalloc((size_t)reps, sizeof *raw_cpu);
  char lf[512], url[128];
  snprintf(lf, sizeof lf, "%s/loop.log", dir);
  size_t log_off = 0;
  if (external) {
    snprintf(lf, sizeof lf, "%s", ext_log);
    char *old;
    size_t oldlen;
    if (!util_read_file(lf, 1 << 30, &old, &oldlen, &e)) {
      log_off = oldlen; /* earlier clients' requests: not ours */
      free(old);
    }
  }
  snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions", port_b);
  CURL *h = curl_easy_init();
  struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
  hd = curl_slist_append(hd, "Accept: text/event-stream");
  /* Each rep: one 10-turn task through the loop, then the same ten request
   * bodies through the raw client, so noise on the shared machine hits
   * both alike. */
  for (int r = 0; r < reps; r++) {
    struct call_ctx ctx;
    call_ctx_init(&ctx, rt, CALLER_OPERATOR, "bench");
    ctx.events = getenv("BENCH_NO_JOURNAL") ? NULL : &js;
    struct react_opts ro = {.message = "Do the ten steps.", .kind = "ask"};
    react_limits_default(&ro.limits);
    ro.limits.max_iterations = TURNS;
    struct react_result res;
    double c0 = cpu_now(), t0 = util_monotonic();
    int rc = react_run(&ctx, llm, &ro, &res, &e);
    loop_t[r] = util_monotonic() - t0;
    loop_cpu[r] = cpu_now() - c0;
    if (rc || res.iterations != TURNS) {
      fprintf(stderr, "bench run %d failed: %s (%d iterations)\n", r, e.msg, res.iterations);
      return 1;
    }
    react_result_free(&res);

    char *log;
    size_t loglen;
    if (util_read_file(lf, 1 << 30, &log, &loglen, &e)) return 1;
    char *line = log + log_off;
    char *bodies[TURNS];
    for (int t = 0; t < TURNS; t++) {
      char *nl = strchr(line, '\n');
      *nl = 0;
      cJSON *j = cJSON_Parse(line);
      bodies[t] = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "body"));
      cJSON_Delete(j);
      log_off += (size_t)(nl + 1 - line);
      line = nl + 1;
    }
    free(log);
    c0 = cpu_now();
    t0 = util_monotonic();
    for (int t = 0; t < TURNS; t++) {
      curl_easy_setopt(h, CURLOPT_URL, url);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, bodies[t]);
      curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
      curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
      curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
      if (curl_easy_perform(h) != CURLE_OK) {
        fprintf(stderr, "raw request failed\n");
        return 1;
      }
    }
    raw_t[r] = util_monotonic() - t0;
    raw_cpu[r] = cpu_now() - c0;
    if (external) { /* the replay landed in the same log: skip it */
      char *now;
      size_t nowlen;
      if (util_read_file(lf, 1 << 30, &now, &nowlen, &e)) return 1;
      log_off = nowlen;
      free(now);
    }
    for (int t = 0; t < TURNS; t++) free(bodies[t]);
  }
  journal_close(jr);
  llm_client_free(llm);
  runtime_free(rt);
  curl_slist_free_all(hd);
  curl_easy_cleanup(h);
  if (!external) {
    kill(ma, SIGTERM);
    kill(mb, SIGTERM);
    waitpid(ma, NULL, 0);
    waitpid(mb, NULL, 0);
  }

  qsort(loop_t, (size_t)reps, sizeof *loop_t, cmp_d);
  qsort(raw_t, (size_t)reps, sizeof *raw_t, cmp_d);
  qsort(loop_cpu, (size_t)reps, sizeof *loop_cpu, cmp_d);
  qsort(raw_cpu, (size_t)reps, sizeof *raw_cpu, cmp_d);
  double lm = loop_t[reps / 2] / TURNS * 1e3, rm = raw_t[reps / 2] / TURNS * 1e3;
  double lc = loop_cpu[reps / 2] / TURNS * 1e3, rc_ = raw_cpu[reps / 2] / TURNS * 1e3;
  printf("react loop, %d-turn task x %d (median per turn, streaming OpenAI format, journal %s):\n",
         TURNS, reps, getenv("BENCH_NO_JOURNAL") ? "off" : "on");
  printf("  loop            %8.3f ms/turn\n", lm);
  printf("  raw client floor%8.3f ms/turn (same requests, same mock)\n", rm);
  printf("  loop overhead   %8.3f ms/turn wall (noise of the shared machine included)\n", lm - rm);
  printf(
      "  CPU in luagent  %8.3f ms/turn (loop) vs %.3f ms/turn (raw client): %.3f ms/turn "
      "of the loop's own work\n",
      lc, rc_, lc - rc_);
  fflush(stdout);

  /* --- peak RSS of `luagent ask` on a 10-turn task */
  char *fx1 = fixture(1);
  int port_c = port_a;
  pid_t mc = external ? -1 : start_mock("rss", fx1, &port_c);
  free(fx1);
  char base[128];
  snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", port_c);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("LUAGENT_PROVIDER", "openai", 1);
    setenv("LUAGENT_MODEL", "m", 1);
    setenv("LUAGENT_BASE_URL", base, 1);
    if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(126);
    execl(bin, bin, "--workspace", dir, "ask", "--max-iterations", "10", "Do the ten steps.",
          (char *)NULL);
    _exit(127);
  }
  int status;
  struct rusage ru;
  wait4(pid, &status, 0, &ru);
  if (mc > 0) {
    kill(mc, SIGTERM);
    waitpid(mc, NULL, 0);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    printf("luagent ask, 10-turn task: peak RSS %ld KiB\n", ru.ru_maxrss);
  else
    printf("luagent ask, 10-turn task: failed (exit %d; is %s the binary?)\n",
           WIFEXITED(status) ? WEXITSTATUS(status) : -1, bin);
  free(fx);
  free(loop_t);
  free(raw_t);
  free(loop_cpu);
  free(raw_cpu);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) {
  }
  return 0;
}
