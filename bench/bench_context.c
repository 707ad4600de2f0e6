/* bench_context.c - what chat context assembly costs per turn, without the
 * model: the token estimate of a long history, a compaction pass that
 * elides (no model), and saving/loading a session's history in SQLite. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"
#include "react.h"
#include "session.h"
#include "util.h"

static cJSON *history(int n) {
  cJSON *m = cJSON_CreateArray();
  char text[801];
  memset(text, 'w', 800);
  text[800] = 0;
  for (int i = 0; i < n; i++) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "role", i % 2 ? "assistant" : "user");
    cJSON_AddStringToObject(o, "content", text);
    cJSON_AddItemToArray(m, o);
  }
  return m;
}

int main(void) {
  const int N = 200, R = 50;
  cJSON *m = history(N);
  double t0 = util_monotonic();
  long tok = 0;
  for (int i = 0; i < R; i++) tok += context_estimate_tokens("system", NULL, m);
  double est = (util_monotonic() - t0) / R;
  printf("token estimate, %d messages (%ld tokens): %.3f ms\n", N, tok / R, est * 1000);

  struct context_cfg cc;
  struct err e = {0};
  context_config(NULL, &cc, &e);
  cc.window_tokens = 8000;
  cc.memory_items = 0;
  struct react_limits lim;
  react_limits_default(&lim);
  struct budget b;
  budget_init(&b, &lim, NULL);
  struct call_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  double comp = 0;
  for (int i = 0; i < R; i++) {
    cJSON *h = history(N);
    struct react_opts ro = {0};
    struct context_state cs;
    context_prepare(&cs, &cc, NULL, NULL, NULL, &ro);
    double c0 = util_monotonic();
    ro.compact(ro.compact_ud, &ctx, &b, "system", NULL, h);
    comp += util_monotonic() - c0;
    context_state_free(&cs);
    cJSON_Delete(h);
  }
  printf("compaction pass (elision, no model), %d messages: %.3f ms\n", N, comp / R * 1000);
  budget_destroy(&b);

  char dir[] = "/tmp/luagent_bench_ctx_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char path[300];
  snprintf(path, sizeof path, "%s/state.db", dir);
  struct store *s = NULL;
  if (store_open_path(path, &s, &e)) return 1;
  double sv = 0, ld = 0;
  for (int i = 0; i < 20; i++) {
    double c0 = util_monotonic();
    session_save(s, "bench", m, &e);
    sv += util_monotonic() - c0;
    cJSON *out = NULL;
    int exists = 0;
    c0 = util_monotonic();
    session_load(s, "bench", &out, &exists, &e);
    ld += util_monotonic() - c0;
    cJSON_Delete(out);
  }
  printf("session save, %d messages: %.3f ms; load: %.3f ms\n", N, sv / 20 * 1000, ld / 20 * 1000);
  store_close(s);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) return 1;
  cJSON_Delete(m);
  return 0;
}
