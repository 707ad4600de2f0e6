/* bench_floor.c - the raw C floor of a cold `luagent ask`: one process that
 * starts, replays a task's model requests through one kept-alive libcurl
 * handle, reads each streamed answer to its end, and exits. Nothing else:
 * no runtime, no store, no Lua (it links libcurl only, the way any small
 * libcurl client would, so its start-up pays what a libcurl client pays).
 *
 * Usage: bench_floor URL BODIES     (BODIES: one JSON request body a line)
 * Exit 0 when every request got a 2xx answer, 1 otherwise.
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t sink(char *p, size_t s, size_t n, void *ud) {
  (void)p, (void)ud;
  return s * n;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: bench_floor URL BODIES\n");
    return 2;
  }
  FILE *f = fopen(argv[2], "r");
  if (!f) {
    perror(argv[2]);
    return 1;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CURL *h = curl_easy_init();
  struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
  hd = curl_slist_append(hd, "Accept: text/event-stream");
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  int rc = 0, sent = 0;
  while ((n = getline(&line, &cap, f)) > 0) {
    if (line[n - 1] == '\n') line[--n] = 0;
    if (!n) continue;
    curl_easy_setopt(h, CURLOPT_URL, argv[1]);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, line);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)n);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    long status = 0;
    CURLcode cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (cc != CURLE_OK || status / 100 != 2) {
      fprintf(stderr, "bench_floor: request %d: %s (HTTP %ld)\n", sent + 1, curl_easy_strerror(cc),
              status);
      rc = 1;
      break;
    }
    sent++;
  }
  if (!rc && !sent) {
    fprintf(stderr, "bench_floor: %s has no request bodies\n", argv[2]);
    rc = 1;
  }
  free(line);
  fclose(f);
  curl_slist_free_all(hd);
  curl_easy_cleanup(h);
  curl_global_cleanup();
  return rc;
}
