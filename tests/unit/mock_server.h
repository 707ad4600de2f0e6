/* mock_server.h - starts tests/mock_llm.py for the unit tests that talk to
 * a model (test_llm, test_delegate). Header-only: each test executable
 * includes it once. The test sets tmpdir before the first mock_start. */
#ifndef LUAGENT_TEST_MOCK_SERVER_H
#define LUAGENT_TEST_MOCK_SERVER_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

static char tmpdir[256];
static pid_t mock_pid;
static int mock_port;

/* Stops the running mock, if any. */
static void mock_stop(void) {
  if (!mock_pid) return;
  kill(mock_pid, SIGTERM);
  waitpid(mock_pid, NULL, 0);
  mock_pid = 0;
}

/* (Re)starts the mock with a fixture (JSON text); it logs every request to
 * <tmpdir>/requests.jsonl. Exits the test when the mock does not start. */
static void mock_start(const char *fixture) {
  char path[512], portf[512], logf[512];
  mock_stop();
  snprintf(path, sizeof path, "%s/fixture.json", tmpdir);
  snprintf(portf, sizeof portf, "%s/port", tmpdir);
  snprintf(logf, sizeof logf, "%s/requests.jsonl", tmpdir);
  unlink(portf);
  unlink(logf);
  struct err e = {0};
  util_write_file_atomic(path, fixture, strlen(fixture), &e);
  const char *src = getenv("LUAGENT_SOURCE_DIR");
  char mock[4096];
  snprintf(mock, sizeof mock, "%s/tests/mock_llm.py", src ? src : LUAGENT_SOURCE_DIR);
  mock_pid = fork();
  if (mock_pid == 0) {
    execlp("python3", "python3", mock, "--script", path, "--port-file", portf, "--log", logf,
           (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 200; i++) {
    char *s;
    size_t n;
    if (!util_read_file(portf, 64, &s, &n, &e)) {
      mock_port = atoi(s);
      free(s);
      return;
    }
    util_sleep(0.025);
  }
  fprintf(stderr, "mock did not start\n");
  exit(1);
}

#endif
