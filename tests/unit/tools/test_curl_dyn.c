/* test_curl_dyn.c - libcurl's functions reach libcurl through the
 * forwarders of tools/curl_dyn.c with their arguments intact: a variadic
 * curl_easy_setopt passes a long, a pointer, a function pointer and a
 * curl_off_t as what they are, curl_easy_getinfo its pointer, and the URL
 * API its strings; curl_global_init alone does not load libcurl. A
 * file:// transfer needs no server: resuming from an
 * offset shows the offset arrived, whichever type carried it. */
#include <curl/curl.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "curl_dyn.h"
#include "test.h"
#include "util.h"

static size_t collect(char *p, size_t s, size_t n, void *ud) {
  sbuf_append(ud, p, s * n);
  return s * n;
}

/* The body of url fetched from offset: resumed with a long (CURLOPT_RESUME_FROM)
 * or a curl_off_t (CURLOPT_RESUME_FROM_LARGE). */
static char *fetch(const char *url, long off, int large, curl_off_t *got, long *code) {
  CURL *h = curl_easy_init();
  if (!h) return NULL;
  struct sbuf b = {0};
  sbuf_puts(&b, "");
  CHECK_INT(curl_easy_setopt(h, CURLOPT_URL, url), CURLE_OK);               /* pointer */
  CHECK_INT(curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect), CURLE_OK); /* function */
  CHECK_INT(curl_easy_setopt(h, CURLOPT_WRITEDATA, &b), CURLE_OK);
  CHECK_INT(curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L), CURLE_OK); /* long */
  if (large)
    CHECK_INT(curl_easy_setopt(h, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)off), CURLE_OK);
  else
    CHECK_INT(curl_easy_setopt(h, CURLOPT_RESUME_FROM, off), CURLE_OK);
  CURLcode rc = curl_easy_perform(h);
  CHECK_INT(rc, CURLE_OK);
  if (rc) fprintf(stderr, "  perform: %s\n", curl_easy_strerror(rc));
  CHECK_INT(curl_easy_getinfo(h, CURLINFO_SIZE_DOWNLOAD_T, got), CURLE_OK);
  CHECK_INT(curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code), CURLE_OK);
  curl_easy_cleanup(h);
  return sbuf_take(&b);
}

/* libcurl is in the process (RTLD_NOLOAD: never loads it) */
static int curl_in_process(void) {
  void *h = dlopen("libcurl.so.4", RTLD_LAZY | RTLD_NOLOAD);
  if (h) dlclose(h);
  return h != NULL;
}

int main(void) {
  struct err e = {0};
  CHECK_INT(curl_in_process(), 0);
  CHECK_INT(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK); /* as runtime_open once did */
  CHECK_INT(curl_in_process(), 0);
  CHECK_INT(curl_dyn_load(&e), 0);
  CHECK_INT(curl_in_process(), 1);
  CHECK_STR(e.msg, "");
  char path[] = "/tmp/luagent_curl_dyn_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  CHECK_INT(write(fd, "0123456789", 10), 10);
  close(fd);
  char url[128];
  snprintf(url, sizeof url, "file://%s", path);

  curl_off_t got = -1;
  long code = -1;
  char *s = fetch(url, 4, 1, &got, &code);
  CHECK_STR(s, "456789");
  CHECK_INT(got, 6);
  CHECK_INT(code, 0); /* file:// has no response code */
  free(s);
  s = fetch(url, 7, 0, &got, &code);
  CHECK_STR(s, "789");
  CHECK_INT(got, 3);
  free(s);

  /* the URL API: set, get, free */
  CURLU *u = curl_url();
  CHECK(u != NULL);
  CHECK_INT(curl_url_set(u, CURLUPART_URL, "http://example.org:8080/a?b", 0), CURLUE_OK);
  char *host = NULL, *port = NULL;
  CHECK_INT(curl_url_get(u, CURLUPART_HOST, &host, 0), CURLUE_OK);
  CHECK_INT(curl_url_get(u, CURLUPART_PORT, &port, 0), CURLUE_OK);
  CHECK_STR(host, "example.org");
  CHECK_STR(port, "8080");
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);

  /* lists, and strerror from libcurl itself */
  struct curl_slist *l = curl_slist_append(NULL, "A: 1");
  l = curl_slist_append(l, "B: 2");
  CHECK(l && l->next && !strcmp(l->next->data, "B: 2"));
  curl_slist_free_all(l);
  CHECK_STR(curl_easy_strerror(CURLE_OK), "No error");
  unlink(path);
  return TEST_END();
}
