#define _GNU_SOURCE 1
/* hosttools.c - tools written in C: echo, time.now, fs.*, http.request.
 *
 * fs.* is confined to <workspace>/data: paths must be relative, without
 * "..", and every component is opened with O_NOFOLLOW relative to the
 * previous one, so a symlink can't lead out (no check-then-use race).
 * fs.read and fs.write open regular files only, without blocking
 * (fs_open_file): a FIFO, socket or device in data/ is an error at once.
 * Nor do they read or write a file of more than one hard link: its other
 * name may be anywhere on the file system, the runtime's own .luagent/
 * files included (a hard link planted in data/ is a symlink that O_NOFOLLOW
 * does not see).
 * http.request only reaches origins on the config's http_allow list and
 * sends a secret only to the origins luagent.lua declares for it. It follows
 * redirects itself (never curl), checking both again before each hop, so a
 * redirect can neither reach a host that is not allowed nor carry a secret
 * anywhere else: such a hop fails the call, naming the secret and origin.
 */
#include "hosttools.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "call.h"
#include "curl_dyn.h"
#include "origin.h"
#include "secrets.h"
#include "util.h"

#define HTTP_MAX_REDIRECTS 5

/* ------------------------------------------------------------ echo, time */

static int t_echo(struct call_ctx *ctx, const struct tool *t, const cJSON *args, cJSON **result,
                  struct err *e) {
  (void)ctx, (void)t, (void)e;
  *result = cJSON_Duplicate(args, 1);
  return 0;
}

/* echo's answer borrowed from its arguments (tool_handler_lent): what
 * t_echo copies, without the copy. */
static int t_echo_lent(struct call_ctx *ctx, const struct tool *t, const cJSON *args,
                       const cJSON **result, struct err *e) {
  (void)ctx, (void)t, (void)e;
  *result = args;
  return 0;
}

static int t_time_now(struct call_ctx *ctx, const struct tool *t, const cJSON *args,
                      cJSON **result, struct err *e) {
  (void)t, (void)args, (void)e;
  const struct rt_fakes *f = ctx->rt ? ctx->rt->fakes : NULL;
  double now = f && f->now ? f->now(f->ud) : util_now(); /* fake.clock in luagent test */
  time_t secs = (time_t)now;
  struct tm tm;
  char iso[40];
  gmtime_r(&secs, &tm);
  strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "unix", now);
  cJSON_AddStringToObject(o, "iso", iso);
  *result = o;
  return 0;
}

/* -------------------------------------------------------------------- fs */

/* Checks a data-relative path: non-empty, relative, no "." or ".."
 * components, no empty components, no NUL or control characters. */
static int fs_check_path(const char *p, int allow_root, struct err *e) {
  if (!p || (!*p && !allow_root))
    return err_set(e, ERR_INVALID, "invalid_path", "path must not be empty");
  if (p[0] == '/') return err_set(e, ERR_INVALID, "invalid_path", "%s: absolute paths are not allowed", p);
  if (strlen(p) > 1024) return err_set(e, ERR_INVALID, "invalid_path", "path longer than 1024 bytes");
  const char *s = p;
  while (*s) {
    const char *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);
    if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
      return err_set(e, ERR_INVALID, "invalid_path", "%s: '.', '..' and empty path parts are not allowed", p);
    for (size_t i = 0; i < n; i++) {
      unsigned char c = (unsigned char)s[i];
      if (c < 0x20 || c == 0x7f) return err_set(e, ERR_INVALID, "invalid_path", "path has control characters");
      /* U+0000 as the host holds it (json.h): a name no file system has. */
      if (c == 0xC0 && i + 1 < n && (unsigned char)s[i + 1] == 0x80)
        return err_set(e, ERR_INVALID, "invalid_path", "path has a NUL character (\\u0000)");
    }
    s += n;
    if (*s == '/') s++;
  }
  return 0;
}

/* Opens <workspace>/data (creating it) as a directory fd. */
static int fs_root(struct call_ctx *ctx, struct err *e) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/data", ctx->rt->workspace);
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return err_set(e, ERR_IO, "io", "data/: %s", strerror(errno));
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return err_set(e, ERR_IO, "io", "data/: %s", strerror(errno));
  return fd;
}

/* Walks the directory part of path below root without following symlinks;
 * returns a dir fd and points *leaf at the last component. create: make
 * missing directories. */
static int fs_walk(int root, const char *path, int create, const char **leaf, struct err *e) {
  int dfd = dup(root);
  if (dfd < 0) return err_set(e, ERR_IO, "io", "dup: %s", strerror(errno));
  const char *s = path;
  for (;;) {
    const char *slash = strchr(s, '/');
    if (!slash) break;
    char comp[256];
    size_t n = (size_t)(slash - s);
    if (n >= sizeof comp) {
      close(dfd);
      return err_set(e, ERR_INVALID, "invalid_path", "%s: path component too long", path);
    }
    memcpy(comp, s, n);
    comp[n] = 0;
    if (create && mkdirat(dfd, comp, 0755) != 0 && errno != EEXIST) {
      int saved = errno;
      close(dfd);
      return err_set(e, ERR_IO, "io", "%s: %s", path, strerror(saved));
    }
    /* O_DIRECTORY refuses a FIFO before opening it; O_NONBLOCK is a second
     * guard that costs nothing on a directory. */
    int nfd = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    int saved = errno;
    close(dfd);
    if (nfd < 0)
      return err_set(e, saved == ENOENT ? ERR_NOTFOUND : ERR_DENIED,
                     saved == ENOENT ? "not_found" : "invalid_path", "%s: %s", path,
                     saved == ELOOP || saved == ENOTDIR ? "leaves the data folder or is not a directory (symlinks are not followed)"
                                                        : strerror(saved));
    dfd = nfd;
    s = slash + 1;
  }
  *leaf = s;
  return dfd;
}

/* Checks path and opens the directory that holds its last component,
 * below data/; *leaf points into path. Returns the dir fd or <0. */
static int fs_open_parent(struct call_ctx *ctx, const char *path, int create, const char **leaf,
                          struct err *e) {
  int rc = fs_check_path(path, 0, e);
  if (rc) return rc;
  int root = fs_root(ctx, e);
  if (root < 0) return root;
  int dfd = fs_walk(root, path, create, leaf, e);
  close(root);
  return dfd;
}

/* What a file that is not a regular file is, for error messages. */
static const char *fs_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISLNK(m)) return "a symlink (not followed)";
  return "a special file";
}

static int fs_not_regular(const char *path, mode_t m, struct err *e) {
  return err_set(e, ERR_INVALID, "invalid_path", "%s: is %s, not a regular file", path, fs_kind(m));
}

/* 0 when st is a regular file with no other name, else <0 with e set. */
static int fs_own_file(const char *path, const struct stat *st, struct err *e) {
  if (!S_ISREG(st->st_mode)) return fs_not_regular(path, st->st_mode, e);
  if (st->st_nlink > 1)
    return err_set(e, ERR_INVALID, "invalid_path",
                   "%s: has %ju hard links (another name of it may be outside data/), so it is "
                   "neither read nor written",
                   path, (uintmax_t)st->st_nlink);
  return 0;
}

/* Opens leaf (in directory dfd; `path` names it in errors) as a regular
 * file, never blocking and never opening anything else. A FIFO blocks
 * open(2) until the other end appears, and opening a device can act on it,
 * so the type is checked before opening (fstatat), the open itself cannot
 * block (O_NONBLOCK) nor follow a symlink (O_NOFOLLOW), and the type is
 * checked again on the descriptor (fstat), which closes the race with a
 * file swapped in between. Then O_NONBLOCK is cleared for the I/O. flags:
 * O_RDONLY, or O_WRONLY with O_CREAT/O_APPEND/O_TRUNC. Returns the fd, or
 * <0 with e set. */
static int fs_open_file(int dfd, const char *leaf, const char *path, int flags, mode_t mode,
                        struct err *e) {
  struct stat st;
  int rc;
  if (fstatat(dfd, leaf, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if ((rc = fs_own_file(path, &st, e))) return rc;
  } else if (errno == ENOENT && !(flags & O_CREAT)) {
    return err_set(e, ERR_NOTFOUND, "not_found", "%s: no such file", path);
  }
  int fd = openat(dfd, leaf, flags | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    int saved = errno;
    /* ENXIO (a FIFO without a reader, a socket), ELOOP (a symlink): swapped
     * in after the first check; say what it is now. */
    if (fstatat(dfd, leaf, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
      return fs_not_regular(path, st.st_mode, e);
    return err_set(e, saved == ENOENT ? ERR_NOTFOUND : ERR_IO, saved == ENOENT ? "not_found" : "io",
                   "%s: %s", path, saved == ELOOP ? "is a symlink (not followed)" : strerror(saved));
  }
  if (fstat(fd, &st) != 0) {
    int saved = errno;
    close(fd);
    return err_set(e, ERR_IO, "io", "%s: %s", path, strerror(saved));
  }
  if ((rc = fs_own_file(path, &st, e))) { /* the same checks on what was opened */
    close(fd);
    return rc;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int saved = errno;
    close(fd);
    return err_set(e, ERR_IO, "io", "%s: %s", path, strerror(saved));
  }
  return fd;
}

static const char *arg_str(const cJSON *args, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int t_fs_read(struct call_ctx *ctx, const struct tool *t, const cJSON *args, cJSON **result,
                     struct err *e) {
  (void)t;
  const char *path = arg_str(args, "path"), *leaf;
  int dfd = fs_open_parent(ctx, path, 0, &leaf, e);
  if (dfd < 0) return dfd;
  int fd = fs_open_file(dfd, leaf, path, O_RDONLY, 0, e);
  close(dfd);
  if (fd < 0) return fd;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int saved = errno;
    close(fd);
    return err_set(e, ERR_IO, "io", "%s: %s", path, strerror(saved));
  }
  size_t cap = ctx->rt->cfg->fs_max_bytes;
  if ((size_t)st.st_size > cap) {
    close(fd);
    return err_set(e, ERR_LIMIT, "too_large", "%s: %lld bytes is over the fs limit of %zu", path,
                   (long long)st.st_size, cap);
  }
  struct sbuf b = {0};
  char buf[16384];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n < 0) continue;
    if (b.len + (size_t)n > cap) {
      /* It grew while we read: say so rather than return part of it. */
      close(fd);
      sbuf_free(&b);
      return err_set(e, ERR_LIMIT, "too_large", "%s: grew past the fs limit of %zu bytes while being read", path, cap);
    }
    sbuf_append(&b, buf, (size_t)n);
  }
  close(fd);
  if (n < 0) {
    sbuf_free(&b);
    return err_set(e, ERR_IO, "io", "%s: read error", path);
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "content", b.s ? b.s : "");
  cJSON_AddNumberToObject(o, "size", (double)b.len);
  sbuf_free(&b);
  *result = o;
  return 0;
}

static int t_fs_write(struct call_ctx *ctx, const struct tool *t, const cJSON *args, cJSON **result,
                      struct err *e) {
  (void)t;
  const char *path = arg_str(args, "path"), *content = arg_str(args, "content"), *leaf;
  const cJSON *app = cJSON_GetObjectItemCaseSensitive(args, "append");
  int append = cJSON_IsTrue(app);
  size_t len = strlen(content), cap = ctx->rt->cfg->fs_max_bytes;
  if (len > cap) return err_set(e, ERR_LIMIT, "too_large", "%s: content of %zu bytes is over the fs limit of %zu", path, len, cap);
  int dfd = fs_open_parent(ctx, path, 1, &leaf, e);
  if (dfd < 0) return dfd;
  struct stat st;
  /* The target must be a regular file of one link or absent; renaming over
   * a FIFO would not block, but it would silently replace something that
   * is no file (and over a hard link, one name of a file kept elsewhere). */
  int rc = fstatat(dfd, leaf, &st, AT_SYMLINK_NOFOLLOW) == 0 ? fs_own_file(path, &st, e) : 0;
  if (rc) {
    close(dfd);
    return rc;
  }
  int fd;
  char tmp[300];
  if (append) {
    fd = fs_open_file(dfd, leaf, path, O_WRONLY | O_CREAT | O_APPEND, 0644, e);
    if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size + len > cap) {
      close(fd);
      fd = err_set(e, ERR_LIMIT, "too_large", "%s: appending would pass the fs limit of %zu", path, cap);
    }
  } else {
    /* Write a temp file and rename it over, so readers never see half. The
     * temp file is always new (O_EXCL): a leftover of that name, or a FIFO
     * planted there, is removed first, never opened. */
    snprintf(tmp, sizeof tmp, ".%s.tmp%ld", leaf, (long)getpid());
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST && unlinkat(dfd, tmp, 0) == 0)
      fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) fd = err_set(e, ERR_IO, "io", "%s: temporary file: %s", path, strerror(errno));
  }
  if (fd < 0) {
    close(dfd);
    return fd; /* e says why */
  }
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, content + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int saved = errno;
      close(fd);
      if (!append) unlinkat(dfd, tmp, 0);
      close(dfd);
      /* A full disk leaves the old file untouched. */
      return err_set(e, ERR_IO, "io", "%s: %s", path, strerror(saved));
    }
    off += (size_t)w;
  }
  if (close(fd) != 0 || (!append && renameat(dfd, tmp, dfd, leaf) != 0)) {
    int saved = errno;
    if (!append) unlinkat(dfd, tmp, 0);
    close(dfd);
    return err_set(e, ERR_IO, "io", "%s: %s", path, strerror(saved));
  }
  close(dfd);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "path", path);
  cJSON_AddNumberToObject(o, "size", (double)len);
  *result = o;
  return 0;
}

static int t_fs_list(struct call_ctx *ctx, const struct tool *t, const cJSON *args, cJSON **result,
                     struct err *e) {
  (void)t;
  const char *path = arg_str(args, "path");
  if (!path) path = "";
  int rc = fs_check_path(path, 1, e);
  if (rc) return rc;
  int root = fs_root(ctx, e);
  if (root < 0) return root;
  int fd;
  if (*path) {
    char withslash[1100];
    const char *leaf;
    snprintf(withslash, sizeof withslash, "%s/", path);
    fd = fs_walk(root, withslash, 0, &leaf, e);
    close(root);
    if (fd < 0) return fd;
  } else {
    fd = root;
  }
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return err_set(e, ERR_IO, "io", "%s: %s", *path ? path : "data/", strerror(errno));
  }
  cJSON *arr = cJSON_CreateArray();
  struct dirent *de;
  int count = 0;
  while ((de = readdir(d)) && count < 10000) {
    if (de->d_name[0] == '.') continue; /* dot files include our temp files */
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", de->d_name);
    cJSON_AddStringToObject(o, "type", S_ISDIR(st.st_mode) ? "dir" : S_ISREG(st.st_mode) ? "file" : "other");
    cJSON_AddNumberToObject(o, "size", (double)st.st_size);
    cJSON_AddItemToArray(arr, o);
    count++;
  }
  closedir(d);
  *result = arr;
  return 0;
}

static int t_fs_delete(struct call_ctx *ctx, const struct tool *t, const cJSON *args,
                       cJSON **result, struct err *e) {
  (void)t;
  const char *path = arg_str(args, "path"), *leaf;
  int dfd = fs_open_parent(ctx, path, 0, &leaf, e);
  if (dfd < 0) return dfd;
  struct stat st;
  if (fstatat(dfd, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    close(dfd);
    return err_set(e, ERR_NOTFOUND, "not_found", "%s: no such file", path);
  }
  int r = unlinkat(dfd, leaf, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0);
  int saved = errno;
  close(dfd);
  if (r != 0) return err_set(e, ERR_IO, "io", "%s: %s", path, strerror(saved));
  *result = cJSON_CreateObject();
  cJSON_AddStringToObject(*result, "deleted", path);
  return 0;
}

/* ------------------------------------------------------------------ http */

struct http_body {
  struct sbuf b;
  size_t cap;
  int over;
  volatile int *stop;
};

static size_t http_write(char *ptr, size_t size, size_t nmemb, void *ud) {
  struct http_body *hb = ud;
  size_t n = size * nmemb;
  if (hb->b.len + n > hb->cap) {
    hb->over = 1;
    return 0; /* aborts the transfer */
  }
  sbuf_append(&hb->b, ptr, n);
  return n;
}

static size_t http_header(char *ptr, size_t size, size_t nmemb, void *ud) {
  cJSON *headers = ud;
  size_t n = size * nmemb;
  if (n >= 2 && !strncmp(ptr, "HTTP/", 5)) {
    /* A new response (after a redirect or 100-continue): start over. */
    cJSON *c;
    while ((c = headers->child)) cJSON_Delete(cJSON_DetachItemViaPointer(headers, c));
    return n;
  }
  const char *colon = memchr(ptr, ':', n);
  if (!colon) return n;
  char name[128], value[2048];
  size_t nl = (size_t)(colon - ptr);
  if (nl >= sizeof name) return n;
  for (size_t i = 0; i < nl; i++) name[i] = (char)((ptr[i] >= 'A' && ptr[i] <= 'Z') ? ptr[i] + 32 : ptr[i]);
  name[nl] = 0;
  const char *v = colon + 1, *end = ptr + n;
  while (v < end && (*v == ' ' || *v == '\t')) v++;
  while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) end--;
  snprintf(value, sizeof value, "%.*s", (int)(end - v), v);
  cJSON_DeleteItemFromObjectCaseSensitive(headers, name);
  cJSON_AddStringToObject(headers, name, value);
  return n;
}

static int http_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
  (void)a, (void)b, (void)c, (void)d;
  struct http_body *hb = ud;
  return hb->stop && *hb->stop;
}

/* Parses url into u (the handle the transfer then uses, so the origin
 * checked is the one curl connects to) and fills *o with its origin. */
static int http_parse_url(CURLU *u, const char *url, struct origin *o, struct err *e) {
  char *scheme = NULL, *host = NULL, *port = NULL;
  int rc = 0;
  if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK) {
    rc = err_set(e, ERR_INVALID, "invalid_args", "http.request: '%s' is not a valid URL", url);
  } else if ((rc = origin_from_parts(scheme, host, atoi(port), o, e))) {
    err_prefix(e, "http.request: %s", url);
  }
  curl_free(scheme);
  curl_free(host);
  curl_free(port);
  return rc;
}

/* The checks before each request, the first and every redirect: the origin
 * is on http_allow, and every secret the request carries may go there. */
static int http_check_hop(struct call_ctx *ctx, const struct origin *o, char **secret_names,
                          size_t nsecrets, struct err *e) {
  char buf[ORIGIN_HOST_MAX + 32];
  if (!config_http_allowed(ctx->rt->cfg, o))
    return err_set(e, ERR_DENIED, "host_not_allowed",
                   "http.request: %s is not allowed by http_allow (add it to luagent.lua)",
                   origin_format(o, buf, sizeof buf));
  for (size_t i = 0; i < nsecrets; i++) {
    int rc = secrets_check_origin(ctx->rt->cfg, "http.request", secret_names[i], o, e);
    if (rc) return rc;
  }
  return 0;
}

/* http.request answered by the test runner's fake.http (rt->fakes): the
 * same checks ran up to here; headers go as given, secret references
 * unresolved. */
static int http_fake(struct call_ctx *ctx, const char *method, const char *url,
                     const cJSON *hdrs, const char *body, cJSON **result, struct err *e) {
  cJSON *rq = cJSON_CreateObject();
  cJSON_AddStringToObject(rq, "method", method);
  cJSON_AddStringToObject(rq, "url", url);
  cJSON_AddItemToObject(rq, "headers", hdrs ? cJSON_Duplicate(hdrs, 1) : cJSON_CreateObject());
  if (body) cJSON_AddStringToObject(rq, "body", body);
  cJSON *res = NULL;
  int rc = ctx->rt->fakes->http(ctx->rt->fakes->ud, ctx, rq, &res, e);
  cJSON_Delete(rq);
  if (rc) return rc;
  if (!cJSON_IsObject(res)) {
    cJSON_Delete(res);
    return err_set(e, ERR_FAIL, "http_error", "http.request: %s: the fake gave no response", url);
  }
  if (!cJSON_GetObjectItemCaseSensitive(res, "url")) cJSON_AddStringToObject(res, "url", url);
  *result = res;
  return 0;
}

static int t_http_request(struct call_ctx *ctx, const struct tool *t, const cJSON *args,
                          cJSON **result, struct err *e) {
  (void)t;
  const char *url0 = arg_str(args, "url");
  const char *method = arg_str(args, "method");
  const char *body = arg_str(args, "body");
  double timeout = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(args, "timeout_s"))
                       ? cJSON_GetObjectItemCaseSensitive(args, "timeout_s")->valuedouble
                       : 10;
  /* Never outlive the calling run. */
  double now = util_monotonic();
  if (ctx->limits.deadline_at > 0 && ctx->limits.deadline_at - now < timeout)
    timeout = ctx->limits.deadline_at - now;
  if (timeout < 0.05) return err_set(e, ERR_LIMIT, "limit_deadline", "http.request: no time left in the run's deadline");
  const cJSON *mb = cJSON_GetObjectItemCaseSensitive(args, "max_bytes");
  size_t cap = cJSON_IsNumber(mb) ? (size_t)mb->valuedouble : (size_t)1 << 20;
  const cJSON *hdrs = cJSON_GetObjectItemCaseSensitive(args, "headers");
  char *url = xstrdup(url0);
  int rc = 0, redirects = 0;
  struct curl_slist *hl = NULL;
  cJSON *rh = cJSON_CreateObject();
  struct http_body hb = {{0}, cap, 0, ctx->stop};
  long status = 0;
  size_t nsecrets = 0;
  char **secret_names = xcalloc((size_t)cJSON_GetArraySize(hdrs) + 1, sizeof *secret_names);
  CURLU *u = NULL;
  CURL *c = NULL;
  if ((rc = curl_dyn_load(e))) { /* libcurl missing: say so, not "cannot initialise" */
    err_prefix(e, "http.request");
    goto out;
  }
  u = curl_url();
  c = curl_easy_init();
  if (!c || !u) {
    rc = err_set(e, ERR_FAIL, "http_error", "http.request: cannot initialise libcurl");
    goto out;
  }
  /* Which secrets this request carries: checked against every hop's origin
   * before their values are even read. */
  for (const cJSON *h = hdrs ? hdrs->child : NULL; h; h = h->next) {
    if (!cJSON_IsString(h) && !secrets_is_ref(h)) {
      rc = err_set(e, ERR_INVALID, "invalid_args",
                   "http.request: header '%s' must be a string or { secret = \"NAME\" }", h->string);
      goto out;
    }
    /* A header name is an RFC 9110 token and nothing else: curl reads
     * "Name;" and "Name:" as its own syntax (an empty header, a removed
     * one), which would turn "Host;evil" into a Host header of the caller's
     * and "Content-Length;x" into an unframed body. */
    if (!*h->string ||
        strspn(h->string, "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
                          "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != strlen(h->string)) {
      rc = err_set(e, ERR_INVALID, "invalid_args", "http.request: header name '%s' has forbidden characters", h->string);
      goto out;
    }
    /* The URL says where a request goes, for http_allow and for every
     * secret's origins; a Host header would send it (with its secrets) to
     * another virtual host behind the same address. Headers that steer
     * routing or framing are the host's to set, never the caller's. */
    static const char *const reserved[] = {"host", "content-length", "transfer-encoding",
                                           "connection", "te", "upgrade", "proxy-authorization",
                                           "forwarded", "x-forwarded-host", NULL};
    for (const char *const *r = reserved; *r; r++)
      if (!strcasecmp(h->string, *r)) {
        rc = err_set(e, ERR_INVALID, "invalid_args",
                     "http.request: header '%s' may not be set by the caller (the URL decides "
                     "where a request goes)",
                     h->string);
        goto out;
      }
    if (secrets_is_ref(h)) secret_names[nsecrets++] = h->child->valuestring;
  }
  for (;;) {
    struct origin o;
    if ((rc = http_parse_url(u, url, &o, e)) || (rc = http_check_hop(ctx, &o, secret_names, nsecrets, e)))
      goto out;
    if (ctx->rt->fakes && ctx->rt->fakes->http) { /* luagent test: never the network */
      rc = http_fake(ctx, method ? method : body ? "POST" : "GET", url, hdrs, body, result, e);
      goto out;
    }
    if (!hl && hdrs && hdrs->child && (rc = secrets_append_headers(ctx->rt, hdrs, "http.request", &hl, e))) goto out;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_CURLU, u);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    /* Redirects are ours to follow: each hop is checked above, with the
     * secrets it would carry, before anything is sent. */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    /* Our headers go to the server only, never to a proxy. */
    curl_easy_setopt(c, CURLOPT_HEADEROPT, CURLHEADER_SEPARATE);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(timeout * 1000));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(timeout * 1000));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &hb);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, http_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, rh);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, http_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &hb);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "luagent/" LUAGENT_VERSION);
    if (method) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
      curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
      if (!method) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "POST");
    }
    sbuf_free(&hb.b);
    CURLcode cc = curl_easy_perform(c);
    if (hb.over) {
      rc = err_set(e, ERR_LIMIT, "too_large", "http.request: %s: response larger than %zu bytes", url, cap);
      goto out;
    }
    if (cc == CURLE_ABORTED_BY_CALLBACK) {
      rc = err_set(e, ERR_STOPPED, "stopped", "http.request: stopped");
      goto out;
    }
    if (cc != CURLE_OK) {
      rc = err_set(e, ERR_IO, cc == CURLE_OPERATION_TIMEDOUT ? "timeout" : "http_error",
                   "http.request: %s: %s", url, curl_easy_strerror(cc));
      goto out;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    char *loc = NULL;
    curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc);
    if (status >= 300 && status < 400 && loc) {
      if (++redirects > HTTP_MAX_REDIRECTS) {
        rc = err_set(e, ERR_LIMIT, "too_many_redirects", "http.request: more than %d redirects",
                     HTTP_MAX_REDIRECTS);
        goto out;
      }
      char *next = xstrdup(loc);
      free(url);
      url = next;
      if (status == 303) method = "GET", body = NULL;
      continue;
    }
    break;
  }
  cJSON *res = cJSON_CreateObject();
  cJSON_AddNumberToObject(res, "status", (double)status);
  cJSON_AddItemToObject(res, "headers", rh);
  rh = NULL;
  cJSON_AddStringToObject(res, "body", hb.b.s ? hb.b.s : "");
  cJSON_AddStringToObject(res, "url", url);
  *result = res;
out:
  if (c) curl_easy_cleanup(c);
  curl_url_cleanup(u);
  curl_slist_free_all(hl);
  cJSON_Delete(rh);
  sbuf_free(&hb.b);
  free(secret_names);
  free(url);
  return rc;
}

/* -------------------------------------------------------- registration */

static const struct {
  const char *name, *description, *params;
  enum impact impact;
  bool open_world;
  tool_handler fn;
} host_tools[] = {
    {"echo", "Returns its arguments unchanged (diagnostics and tests).", "{\"type\":\"object\"}",
     IMPACT_READ, false, t_echo},
    {"time.now", "Current time as unix seconds and ISO-8601 UTC.",
     "{\"type\":\"object\",\"additionalProperties\":false}", IMPACT_READ, false, t_time_now},
    {"fs.read", "Read a text file from the workspace data/ folder.",
     "{\"type\":\"object\",\"required\":[\"path\"],\"additionalProperties\":false,"
     "\"properties\":{\"path\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":1024}}}",
     IMPACT_READ, false, t_fs_read},
    {"fs.write", "Write (or append to) a text file in the workspace data/ folder.",
     "{\"type\":\"object\",\"required\":[\"path\",\"content\"],\"additionalProperties\":false,"
     "\"properties\":{\"path\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":1024},"
     "\"content\":{\"type\":\"string\"},\"append\":{\"type\":\"boolean\"}}}",
     IMPACT_MEDIUM, false, t_fs_write},
    {"fs.list", "List the entries of a folder under the workspace data/ folder.",
     "{\"type\":\"object\",\"additionalProperties\":false,"
     "\"properties\":{\"path\":{\"type\":\"string\",\"maxLength\":1024}}}",
     IMPACT_READ, false, t_fs_list},
    {"fs.delete", "Delete a file (or an empty folder) in the workspace data/ folder.",
     "{\"type\":\"object\",\"required\":[\"path\"],\"additionalProperties\":false,"
     "\"properties\":{\"path\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":1024}}}",
     IMPACT_HIGH, false, t_fs_delete},
    {"http.request", "HTTP request to a host on the http_allow list; returns status, headers, body.",
     "{\"type\":\"object\",\"required\":[\"url\"],\"additionalProperties\":false,"
     "\"properties\":{\"url\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8192},"
     "\"method\":{\"type\":\"string\",\"enum\":[\"GET\",\"HEAD\",\"POST\",\"PUT\",\"PATCH\",\"DELETE\"]},"
     "\"headers\":{\"type\":\"object\"},\"body\":{\"type\":\"string\"},"
     "\"timeout_s\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":300},"
     "\"max_bytes\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":67108864}}}",
     IMPACT_MEDIUM, true, t_http_request},
};

int hosttools_register(struct runtime *rt, struct err *e) {
  for (size_t i = 0; i < sizeof host_tools / sizeof host_tools[0]; i++)
    if (toolreg_add(rt->tools, host_tools[i].name, host_tools[i].description, host_tools[i].params,
                    host_tools[i].impact, host_tools[i].open_world, host_tools[i].fn, NULL, NULL,
                    "host", NULL, e))
      return ERR_FAIL;
  toolreg_set_lent(rt->tools, "echo", t_echo_lent);
  return 0;
}
