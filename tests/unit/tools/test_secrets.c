/* test_secrets.c - key files made on first use (secrets_keyfile_new):
 * processes that make one at the same moment all get one whole key, and
 * exactly one of them made it (red team 9's F3: the name used to exist
 * empty between the exclusive create and the write, and a process
 * starting then was refused "expected 64 hex digits"); a file left
 * empty, or readable by others, is refused with a message that says so;
 * no temporary file is left behind. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "secrets.h"
#include "test.h"

static char dir[64];

/* One round: n processes released together by a pipe; each writes
 * "created hex" to its own pipe. Returns how many failed. */
static int race(const char *path, int n, int *made, char keys[][65]) {
  int go[2];
  CHECK_INT(pipe(go), 0);
  int outp[16][2];
  pid_t kids[16];
  for (int k = 0; k < n; k++) {
    CHECK_INT(pipe(outp[k]), 0);
    kids[k] = fork();
    if (kids[k] == 0) {
      close(go[1]);
      char x;
      (void)!read(go[0], &x, 1); /* all start at once */
      unsigned char key[32];
      int created = -1;
      struct err e = {0};
      char line[1100];
      if (secrets_keyfile_new(path, key, sizeof key, &created, &e)) {
        snprintf(line, sizeof line, "E %s", e.msg);
      } else {
        char hex[65];
        for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", key[i]);
        snprintf(line, sizeof line, "%d %s", created, hex);
      }
      (void)!write(outp[k][1], line, strlen(line) + 1);
      _exit(0);
    }
    close(outp[k][1]);
  }
  close(go[0]);
  close(go[1]); /* EOF releases them */
  int failed = 0;
  *made = 0;
  for (int k = 0; k < n; k++) {
    char line[1100] = "";
    ssize_t r = read(outp[k][0], line, sizeof line - 1);
    close(outp[k][0]);
    waitpid(kids[k], NULL, 0);
    line[r > 0 ? r : 0] = 0;
    if (line[0] == 'E' || r <= 0) {
      fprintf(stderr, "process %d: %s\n", k, line);
      failed++;
      keys[k][0] = 0;
      continue;
    }
    *made += line[0] == '1';
    memcpy(keys[k], line + 2, 64);
    keys[k][64] = 0;
  }
  return failed;
}

static void test_race(void) {
  int failed = 0, bad_made = 0, differ = 0;
  for (int round = 0; round < 60; round++) {
    char path[128];
    snprintf(path, sizeof path, "%s/k%d.key", dir, round);
    char keys[8][65];
    int made = 0;
    failed += race(path, 8, &made, keys);
    if (made != 1) bad_made++;
    for (int k = 1; k < 8; k++)
      if (keys[k][0] && keys[0][0] && strcmp(keys[k], keys[0])) differ++;
    /* and what is on disk is that key */
    unsigned char key[32];
    struct err e = {0};
    CHECK_INT(secrets_keyfile(path, key, sizeof key, 0, &e), 0);
    char hex[65];
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", key[i]);
    CHECK_STR(hex, keys[0]);
    struct stat st;
    CHECK_INT(stat(path, &st), 0);
    CHECK_INT((int)(st.st_mode & 0777), 0600);
  }
  CHECK_INT(failed, 0);
  CHECK_INT(bad_made, 0);
  CHECK_INT(differ, 0);
  /* no temporary file is left in the folder */
  DIR *d = opendir(dir);
  struct dirent *de;
  int stray = 0;
  while ((de = readdir(d)))
    if (strstr(de->d_name, ".new.")) stray++;
  closedir(d);
  CHECK_INT(stray, 0);
}

static void test_bad_files(void) {
  char path[128];
  unsigned char key[32];
  struct err e = {0};
  int created = -1;
  snprintf(path, sizeof path, "%s/empty.key", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  close(fd);
  CHECK_INT(secrets_keyfile_new(path, key, sizeof key, &created, &e), ERR_INVALID);
  CHECK(strstr(e.msg, "empty.key: expected 64 hex digits, found an empty file") != NULL);
  CHECK_INT(created, 0);
  snprintf(path, sizeof path, "%s/open.key", dir);
  CHECK_INT(secrets_keyfile_new(path, key, sizeof key, &created, &e), 0);
  CHECK_INT(created, 1);
  chmod(path, 0644);
  CHECK_INT(secrets_keyfile_new(path, key, sizeof key, &created, &e), ERR_INVALID);
  CHECK(strstr(e.msg, "readable by others") != NULL);
  /* a FIFO at the name is refused at once, not waited on */
  snprintf(path, sizeof path, "%s/fifo.key", dir);
  CHECK_INT(mkfifo(path, 0600), 0);
  alarm(10); /* a hang fails the test instead of stalling it */
  CHECK_INT(secrets_keyfile_new(path, key, sizeof key, &created, &e), ERR_INVALID);
  alarm(0);
  CHECK(strstr(e.msg, "not a regular file") != NULL);
  snprintf(path, sizeof path, "%s/no/such/dir.key", dir);
  CHECK_INT(secrets_keyfile_new(path, key, sizeof key, &created, &e), ERR_IO);
  CHECK(strstr(e.msg, "dir.key: cannot create key file") != NULL);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/luagent-test-secrets-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_race();
  test_bad_files();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_INT(system(cmd), 0);
  return TEST_END();
}
