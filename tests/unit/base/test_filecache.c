/* test_filecache.c - filecache_read: a kept copy is used only while the
 * file is what it was (an edit of the same size, an edit with its old
 * modification time put back, a file renamed over it, a removal are all
 * seen on the next read); a file written in the last two seconds is read
 * again every time; the errors of util_read_file (missing, too large). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "filecache.h"
#include "test.h"
#include "util.h"

static char dir[64];

static void put(const char *path, const char *text) {
  struct err e = {0};
  CHECK_INT(util_write_file_atomic(path, text, strlen(text), &e), 0);
}

/* Writes text into path in place (same inode), then puts back its
 * modification time as it was before. */
static void put_in_place_keep_mtime(const char *path, const char *text) {
  struct stat st;
  CHECK_INT(stat(path, &st), 0);
  FILE *f = fopen(path, "r+");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
  struct timespec ts[2] = {st.st_atim, st.st_mtim};
  CHECK_INT(utimensat(AT_FDCWD, path, ts, 0), 0);
}

/* What filecache_read gives for path, or "(error N)". */
static char got[256];
static const char *read_it(const char *path) {
  char *t = NULL;
  size_t n = 0;
  struct err e = {0};
  int rc = filecache_read(path, 1 << 20, &t, &n, &e);
  if (rc) {
    snprintf(got, sizeof got, "(error %d)", rc);
  } else {
    CHECK_INT(n, strlen(t));
    snprintf(got, sizeof got, "%s", t);
  }
  free(t);
  return got;
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/luagent_test_filecache_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  char a[128], b[128], big[128];
  snprintf(a, sizeof a, "%s/prompt.md", dir);
  snprintf(b, sizeof b, "%s/other.md", dir);
  snprintf(big, sizeof big, "%s/big.md", dir);

  /* just written: read every time, so a second write of the same size
   * in the same clock tick is seen */
  put(a, "one");
  long h0 = filecache_hits();
  CHECK_STR(read_it(a), "one");
  put_in_place_keep_mtime(a, "two");
  CHECK_STR(read_it(a), "two");
  CHECK_INT(filecache_hits(), h0);

  /* still for long enough: kept, and the copy is used */
  util_sleep(2.3);
  CHECK_STR(read_it(a), "two"); /* read and kept */
  CHECK_STR(read_it(a), "two");
  CHECK_STR(read_it(a), "two");
  CHECK_INT(filecache_hits(), h0 + 2);

  /* an edit of the same size with the old modification time put back:
   * the change time tells */
  put_in_place_keep_mtime(a, "six");
  CHECK_STR(read_it(a), "six");
  /* another file renamed over it, same size: another inode */
  util_sleep(2.3);
  CHECK_STR(read_it(a), "six"); /* kept again */
  long h1 = filecache_hits();
  CHECK_STR(read_it(a), "six");
  CHECK_INT(filecache_hits(), h1 + 1);
  put(b, "ten");
  CHECK_INT(rename(b, a), 0);
  CHECK_STR(read_it(a), "ten");
  /* removed */
  CHECK_INT(unlink(a), 0);
  char want[32];
  snprintf(want, sizeof want, "(error %d)", ERR_NOTFOUND);
  CHECK_STR(read_it(a), want);
  /* past max: ERR_LIMIT, as util_read_file says */
  put(big, "0123456789");
  char *t = (char *)"x";
  struct err e = {0};
  CHECK_INT(filecache_read(big, 4, &t, NULL, &e), ERR_LIMIT);
  CHECK(t == NULL);
  CHECK_STR(e.code, "too_large");
  unlink(big);
  rmdir(dir);
  return TEST_END();
}
