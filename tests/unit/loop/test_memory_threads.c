/* test_memory_threads.c - one runtime's store used from many threads at
 * once, as the ReAct loop's parallel read-only tools use it: the lazy open
 * in runtime_store (every thread must get the same store, opened once),
 * memory_get and memory_search against known data (every answer exactly
 * right, for a couple of seconds, while other threads write in their own
 * transactions), the statement cache (the same SQL text stepped by every
 * thread), and a connection handed back when its thread ends (a later
 * thread reuses it instead of opening another). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memory.h"
#include "runtime.h"
#include "store.h"
#include "test.h"
#include "util.h"

static char dir[] = "/tmp/luagent-test-memthreads.XXXXXX";

#define NKEYS 300
#define NREADERS 8
#define NWRITERS 2
#define SECONDS 2.0

static struct runtime *rt;
static pthread_barrier_t start;
static atomic_long checks, wrong;
static struct store *seen[NREADERS + NWRITERS];

static void rm_rf(const char *path) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", path);
}

/* The value of key i: a word only it has (uniq<i>) and words all share, so
 * a search for uniq<i> has exactly one right answer and reads the index. */
static void value_of(int i, char *out, size_t n) {
  snprintf(out, n, "uniq%03dx shared words about deployments and releases number %d", i, i * 7);
}

static void bad(const char *what, int i, const char *got) {
  long w = atomic_fetch_add(&wrong, 1);
  if (w < 10) fprintf(stderr, "wrong result: %s %d: %s\n", what, i, got ? got : "(null)");
}

/* What each thread of a phase does first: waits until all have started,
 * then asks for the runtime's store at once, recorded in seen[id]; NULL
 * (and a wrong result) when it got none. */
static struct store *thread_store(int id) {
  struct err e = {0};
  struct store *s = NULL;
  pthread_barrier_wait(&start);
  if (runtime_store(rt, &s, &e)) bad("runtime_store", id, e.msg);
  seen[id] = s;
  return s;
}

static void *reader(void *p) {
  int id = (int)(long)p;
  struct err e = {0};
  struct store *s = thread_store(id);
  if (!s) return NULL;
  double end = util_monotonic() + SECONDS;
  unsigned r = (unsigned)id * 2654435761u + 1;
  char want[256], q[32];
  while (util_monotonic() < end) {
    r = r * 1103515245u + 12345u;
    int i = (int)(r >> 8) % NKEYS;
    char key[16];
    snprintf(key, sizeof key, "k%03d", i);
    value_of(i, want, sizeof want);
    struct memory_item it = {0};
    int rc = memory_get(s, "", key, &it, &e);
    if (rc != 1 || !it.value || strcmp(it.value, want) || strcmp(it.key, key))
      bad("get", i, rc < 0 ? e.msg : it.value);
    memory_item_clear(&it);
    snprintf(q, sizeof q, "uniq%03dx", i);
    struct memory_item *items = NULL;
    size_t k = 0;
    rc = memory_search(s, "", q, 5, &items, &k, &e);
    if (rc || k != 1 || strcmp(items[0].key, key) || strcmp(items[0].value, want))
      bad("search", i, rc ? e.msg : k ? items[0].key : "no result");
    memory_items_free(items, k);
    /* The shared words: every key matches; the limit must hold. */
    rc = memory_search(s, "", "deployments releases", 10, &items, &k, &e);
    if (rc || k != 10) bad("search shared", i, rc ? e.msg : "not 10 results");
    memory_items_free(items, k);
    atomic_fetch_add(&checks, 3);
  }
  return NULL;
}

/* Writes its own namespace in transactions and reads every row back: a
 * transaction on one thread must hold only that thread's statements. */
static void *writer(void *p) {
  int id = (int)(long)p;
  struct err e = {0};
  struct store *s = thread_store(id);
  if (!s) return NULL;
  char ns[16];
  snprintf(ns, sizeof ns, "w%d", id);
  double end = util_monotonic() + SECONDS;
  for (int round = 0; util_monotonic() < end; round++) {
    if (store_begin(s, &e)) {
      bad("begin", round, e.msg);
      continue;
    }
    char key[32], val[64];
    for (int j = 0; j < 5; j++) {
      snprintf(key, sizeof key, "r%d-%d", round, j);
      snprintf(val, sizeof val, "%s round %d item %d", ns, round, j);
      if (memory_put(s, ns, key, val, strlen(val), MEMORY_TEXT, 1000, NULL, &e))
        bad("put", round, e.msg);
    }
    if (store_commit(s, &e)) {
      bad("commit", round, e.msg);
      store_rollback(s);
    }
    size_t n = 0;
    if (memory_count(s, ns, &n, &e) || n != (size_t)(round + 1) * 5) bad("count", round, ns);
    for (int j = 0; j < 5; j++) {
      snprintf(key, sizeof key, "r%d-%d", round, j);
      snprintf(val, sizeof val, "%s round %d item %d", ns, round, j);
      struct memory_item it = {0};
      if (memory_get(s, ns, key, &it, &e) != 1 || strcmp(it.value, val)) bad("read back", round, key);
      memory_item_clear(&it);
    }
    atomic_fetch_add(&checks, 7);
  }
  return NULL;
}

/* Phase 1: every thread asks for the store the moment the barrier opens. */
static void *opener(void *p) {
  thread_store((int)(long)p);
  return NULL;
}

/* A thread that only asks for the store and counts the connections
 * (store_connections), to see the pool reuse them. */
static void *touch(void *p) {
  struct err e = {0};
  struct store *s = p;
  struct memory_item it = {0};
  if (memory_get(s, "", "k001", &it, &e) != 1) bad("touch", 1, e.msg);
  memory_item_clear(&it);
  return NULL;
}

int main(void) {
  if (!mkdtemp(dir)) return 1;
  char ws[4200];
  snprintf(ws, sizeof ws, "%s/ws", dir);
  struct err e = {0};
  CHECK_INT(util_mkdirs(ws, 0700, &e), 0);
  /* Known data, written through a store of its own. */
  {
    struct store *s = NULL;
    CHECK_INT(store_open(ws, &s, &e), 0);
    if (!s) return 1;
    CHECK_INT(store_begin(s, &e), 0);
    char key[16], val[256];
    for (int i = 0; i < NKEYS; i++) {
      snprintf(key, sizeof key, "k%03d", i);
      value_of(i, val, sizeof val);
      CHECK_INT(memory_put(s, "", key, val, strlen(val), MEMORY_TEXT, 1000, NULL, &e), 0);
    }
    CHECK_INT(store_commit(s, &e), 0);
    store_close(s);
  }
  CHECK_INT(runtime_open(ws, &rt, &e), 0);
  if (!rt) {
    fprintf(stderr, "runtime_open: %s\n", e.msg);
    return 1;
  }
  pthread_t th[NREADERS + NWRITERS];
  pthread_barrier_init(&start, NULL, NREADERS + NWRITERS);
  /* Phase 1, the lazy open: nothing has opened the store yet; every
   * thread must get the same one, opened once (a loser's own connection
   * would be leaked, and its writes would bypass the shared one). */
  for (int round = 0; round < 20; round++) {
    store_close(rt->store);
    rt->store = NULL;
    memset(seen, 0, sizeof seen);
    for (long i = 0; i < NREADERS + NWRITERS; i++)
      CHECK_INT(pthread_create(&th[i], NULL, opener, (void *)i), 0);
    for (int i = 0; i < NREADERS + NWRITERS; i++) pthread_join(th[i], NULL);
    int same = rt->store != NULL;
    for (int i = 0; i < NREADERS + NWRITERS; i++) same &= seen[i] == rt->store;
    if (!same) bad("lazy open: threads got different stores, round", round, NULL);
  }
  CHECK_INT(atomic_load(&wrong), 0);

  /* Phase 2: one open store, shared. */
  memset(seen, 0, sizeof seen);
  for (long i = 0; i < NREADERS + NWRITERS; i++)
    CHECK_INT(pthread_create(&th[i], NULL, i < NREADERS ? reader : writer, (void *)i), 0);
  for (int i = 0; i < NREADERS + NWRITERS; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start);

  printf("%ld results checked, %ld wrong\n", (long)atomic_load(&checks), (long)atomic_load(&wrong));
  CHECK_INT(atomic_load(&wrong), 0);
  CHECK(atomic_load(&checks) > 1000); /* the threads really ran */
  /* One store, opened once, whoever came first. */
  CHECK(rt->store != NULL);
  for (int i = 0; i < NREADERS + NWRITERS; i++) CHECK(seen[i] == rt->store);

  /* Threads that come and go reuse the connections their predecessors
   * handed back: no new connection (and schema parse) per thread. */
  int before = store_connections(rt->store);
  CHECK(before >= 1 && before <= NREADERS + NWRITERS + 1);
  for (int round = 0; round < 20; round++) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++) CHECK_INT(pthread_create(&t[i], NULL, touch, rt->store), 0);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  }
  CHECK_INT(store_connections(rt->store), before);
  CHECK_INT(atomic_load(&wrong), 0);

  runtime_free(rt);
  rm_rf(dir);
  return TEST_END();
}
