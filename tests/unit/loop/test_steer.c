/* test_steer.c - steer.c: lines from a pipe, draining as steers, end of
 * input, a partial line completed later, and the pause while a prompt owns
 * the terminal (the prompt reads the bytes, the reader does not). */
#include <stdlib.h>
#include <unistd.h>

#include "steer.h"
#include "test.h"
#include "util.h"

static void put(int fd, const char *s) {
  if (write(fd, s, strlen(s)) < 0) {
  }
}

int main(void) {
  int p[2];
  CHECK_INT(pipe(p), 0);
  struct steer *st = NULL;
  struct err e = {0};
  CHECK_INT(steer_start(p[0], &st, &e), 0);
  put(p[1], "first line\n");
  char *line = NULL;
  volatile int stop = 0;
  CHECK_INT(steer_next_line(st, &stop, &line), 1);
  CHECK_STR(line, "first line");
  free(line);

  /* steers: two lines drained at once, joined with a newline */
  put(p[1], "use miles\r\n\nand be brief\n");
  struct sbuf b = {0};
  int got = 0;
  for (int i = 0; i < 100 && got < 2; i++) { /* the reader thread may lag on a busy machine */
    util_sleep(0.05);
    int k = steer_drain(st, &b);
    if (k && got + k == 1) sbuf_puts(&b, "\n"); /* the next drain's line follows */
    got += k;
  }
  CHECK_INT(got, 2);
  CHECK_STR(b.s, "use miles\nand be brief");
  sbuf_free(&b);
  CHECK_INT(steer_drain(st, &b), 0);

  /* a line that arrives in pieces */
  put(p[1], "par");
  util_sleep(0.25);
  CHECK_INT(steer_drain(st, &b), 0);
  put(p[1], "tial\n");
  CHECK_INT(steer_next_line(st, &stop, &line), 1);
  CHECK_STR(line, "partial");
  free(line);

  /* a prompt owns the terminal: the reader leaves the bytes alone */
  steer_terminal(st, 1);
  put(p[1], "y\n");
  util_sleep(0.3);
  CHECK_INT(steer_drain(st, &b), 0);
  char buf[8] = {0};
  CHECK_INT(read(p[0], buf, 2), 2);
  CHECK_STR(buf, "y\n");
  steer_terminal(st, 0);

  /* stop while waiting */
  stop = 1;
  CHECK_INT(steer_next_line(st, &stop, &line), -1);
  stop = 0;

  /* end of input */
  put(p[1], "last");
  close(p[1]);
  CHECK_INT(steer_next_line(st, &stop, &line), 1);
  CHECK_STR(line, "last");
  free(line);
  CHECK_INT(steer_next_line(st, &stop, &line), 0);
  steer_free(st);
  close(p[0]);
  return TEST_END();
}
