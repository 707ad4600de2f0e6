/* secrets.c - see secrets.h. */
#define _GNU_SOURCE /* mkostemp */
#include "secrets.h"
#include "json.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "call.h"
#include "config.h"
#include "util.h"

/* --- key files ---------------------------------------------------------- */

/* Makes path hold a new random key of n bytes, unless another process
 * made it first: the key is written and synced in a temporary file of the
 * same folder, then linked to the name, so the name only ever holds a
 * whole key (O_CREAT|O_EXCL and a write after it let a process starting at
 * the same moment read an empty file, and a kill between the two left one
 * for good). 0 with *created = 1 (ours) or 0 (theirs: read it), or an
 * error. */
static int keyfile_make(const char *path, unsigned char *out, size_t n, int *created,
                        struct err *e) {
  char hex[2 * 64 + 2], tmp[4400];
  if (n > 64) return err_set(e, ERR_INVALID, "secrets", "%s: key too long", path);
  if (snprintf(tmp, sizeof tmp, "%s.new.XXXXXX", path) >= (int)sizeof tmp)
    return err_set(e, ERR_INVALID, "secrets", "%s: path too long", path);
  int fd = mkostemp(tmp, O_CLOEXEC); /* mode 0600 */
  if (fd < 0)
    return err_set(e, ERR_IO, "secrets", "%s: cannot create key file: %s", path, strerror(errno));
  unsigned char key[64];
  randombytes_buf(key, n);
  util_hex(key, n, hex);
  strcat(hex, "\n");
  size_t len = strlen(hex);
  int ok = write(fd, hex, len) == (ssize_t)len && fsync(fd) == 0;
  int werr = errno;
  close(fd);
  sodium_memzero(hex, sizeof hex);
  if (!ok) {
    unlink(tmp);
    sodium_memzero(key, sizeof key);
    return err_set(e, ERR_IO, "secrets", "%s: cannot write key file: %s", path, strerror(werr));
  }
  int linked = link(tmp, path) == 0, lerr = errno;
  unlink(tmp);
  if (!linked) {
    sodium_memzero(key, sizeof key);
    if (lerr == EEXIST) return secrets_keyfile_new(path, out, n, created, e); /* theirs */
    return err_set(e, ERR_IO, "secrets", "%s: cannot create key file: %s", path, strerror(lerr));
  }
  /* the name itself on disk too, not only the file */
  char dir[4400];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  memcpy(out, key, n);
  sodium_memzero(key, sizeof key);
  *created = 1;
  return 0;
}

int secrets_keyfile_new(const char *path, unsigned char *out, size_t n, int *created,
                        struct err *e) {
  int dummy;
  if (!created) created = &dummy;
  *created = 0;
  int rc = secrets_keyfile(path, out, n, 0, e);
  if (rc == ERR_NOTFOUND) return keyfile_make(path, out, n, created, e);
  return rc;
}

int secrets_keyfile(const char *path, unsigned char *out, size_t n, int create, struct err *e) {
  if (sodium_init() < 0) return err_set(e, ERR_FAIL, "secrets", "libsodium failed to initialise");
  if (create) return secrets_keyfile_new(path, out, n, NULL, e);
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK); /* a FIFO: no hang */
  if (fd < 0)
    return err_set(e, errno == ENOENT ? ERR_NOTFOUND : ERR_IO, "secrets", "%s: %s", path,
                   errno == ENOENT ? "key file does not exist" : strerror(errno));
  struct stat sbuf;
  if (fstat(fd, &sbuf) || !S_ISREG(sbuf.st_mode)) {
    close(fd);
    return err_set(e, ERR_INVALID, "secrets", "%s: not a regular file", path);
  }
  if (sbuf.st_mode & 077) {
    close(fd);
    return err_set(e, ERR_INVALID, "secrets",
                   "%s: key file is readable by others (mode %03o); run chmod 600 on it", path,
                   (unsigned)(sbuf.st_mode & 0777));
  }
  char buf[260];
  ssize_t r = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (r < 0) return err_set(e, ERR_IO, "secrets", "%s: %s", path, strerror(errno));
  buf[r] = 0;
  size_t bin = 0;
  const char *end = NULL;
  int bad = sodium_hex2bin(out, n, buf, (size_t)r, NULL, &bin, &end) || bin != n;
  if (!bad && end) {
    while (*end && isspace((unsigned char)*end)) end++;
    bad = *end != 0;
  }
  sodium_memzero(buf, sizeof buf);
  if (bad)
    return err_set(e, ERR_INVALID, "secrets", "%s: expected %zu hex digits, found %s (%zd bytes)",
                   path, 2 * n, r == 0 ? "an empty file" : "something else", r);
  return 0;
}

int secrets_load_key(const char *workspace, const char *env_name, int create,
                     unsigned char key[SECRETS_KEY_BYTES], struct err *e) {
  if (sodium_init() < 0) return err_set(e, ERR_FAIL, "secrets", "libsodium failed to initialise");
  const char *env = env_name && *env_name ? getenv(env_name) : NULL;
  if (env && *env) {
    size_t bin = 0;
    const char *end = NULL;
    if (sodium_hex2bin(key, SECRETS_KEY_BYTES, env, strlen(env), NULL, &bin, &end) ||
        bin != SECRETS_KEY_BYTES || (end && *end))
      return err_set(e, ERR_INVALID, "secrets",
                     "environment variable %s must hold %d hex digits (a 32-byte key)", env_name,
                     2 * SECRETS_KEY_BYTES);
    return 0;
  }
  char dir[4200], path[4300];
  snprintf(dir, sizeof dir, "%s/.luagent", workspace);
  if (create && util_mkdirs(dir, 0700, e)) return ERR_IO;
  snprintf(path, sizeof path, "%s/secrets.key", dir);
  int rc = secrets_keyfile(path, key, SECRETS_KEY_BYTES, create, e);
  if (rc == ERR_NOTFOUND)
    err_set(e, ERR_NOTFOUND, "secrets",
            "no secrets key: .luagent/secrets.key does not exist%s%s%s (store a secret with "
            "`luagent secrets set NAME` first)",
            env_name && *env_name ? " and " : "", env_name && *env_name ? env_name : "",
            env_name && *env_name ? " is not set" : "");
  return rc;
}

/* --- the table ---------------------------------------------------------- */

int secrets_name_valid(const char *name) {
  if (!name || !(isalpha((unsigned char)name[0]) || name[0] == '_')) return 0;
  size_t n = strlen(name);
  if (n > 64) return 0;
  for (size_t i = 1; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    if (!isalnum(c) && c != '_' && c != '.' && c != '-') return 0;
  }
  return 1;
}

static int bad_name(const char *name, struct err *e) {
  return err_set(e, ERR_INVALID, "secrets",
                 "invalid secret name '%s': use letters, digits, _ . - (at most 64, starting "
                 "with a letter or _)",
                 name ? name : "(null)");
}

/* Plaintext = name NUL value: binds the ciphertext to its name. */
int secrets_put(struct store *s, const unsigned char key[SECRETS_KEY_BYTES], const char *name,
                const char *value, size_t len, struct err *e) {
  if (!secrets_name_valid(name)) return bad_name(name, e);
  if (sodium_init() < 0) return err_set(e, ERR_FAIL, "secrets", "libsodium failed to initialise");
  size_t nl = strlen(name), pl = nl + 1 + len;
  unsigned char *plain = sodium_malloc(pl ? pl : 1);
  unsigned char *ct = xmalloc(pl + crypto_secretbox_MACBYTES);
  unsigned char nonce[crypto_secretbox_NONCEBYTES];
  if (!plain) {
    free(ct);
    return err_set(e, ERR_NOMEM, "secrets", "out of memory");
  }
  memcpy(plain, name, nl + 1);
  if (len) memcpy(plain + nl + 1, value, len);
  randombytes_buf(nonce, sizeof nonce);
  crypto_secretbox_easy(ct, plain, pl, nonce, key);
  sodium_free(plain);
  sqlite3_stmt *st = NULL;
  int rc = store_prepare(s,
                         "INSERT OR REPLACE INTO secrets (name, nonce, ciphertext, updated) "
                         "VALUES (?1, ?2, ?3, ?4)",
                         &st, e);
  if (!rc) {
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, nonce, sizeof nonce, SQLITE_STATIC);
    sqlite3_bind_blob(st, 3, ct, (int)(pl + crypto_secretbox_MACBYTES), SQLITE_STATIC);
    sqlite3_bind_double(st, 4, util_now());
    if (sqlite3_step(st) != SQLITE_DONE) rc = store_error(s, e, "secrets: store");
    sqlite3_finalize(st);
  }
  free(ct);
  return rc;
}

int secrets_get(struct store *s, const unsigned char key[SECRETS_KEY_BYTES], const char *name,
                char **value, size_t *len, struct err *e) {
  *value = NULL;
  if (!secrets_name_valid(name)) return bad_name(name, e);
  if (sodium_init() < 0) return err_set(e, ERR_FAIL, "secrets", "libsodium failed to initialise");
  sqlite3_stmt *st = NULL;
  int rc = store_prepare(s, "SELECT nonce, ciphertext FROM secrets WHERE name = ?1", &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  int step = sqlite3_step(st);
  if (step == SQLITE_DONE) {
    sqlite3_finalize(st);
    return err_set(e, ERR_NOTFOUND, "secret_not_found", "secret '%s' is not set", name);
  }
  if (step != SQLITE_ROW) {
    sqlite3_finalize(st);
    return store_error(s, e, "secrets: read");
  }
  const void *nonce = sqlite3_column_blob(st, 0);
  int nn = sqlite3_column_bytes(st, 0);
  const unsigned char *ct = sqlite3_column_blob(st, 1);
  int cn = sqlite3_column_bytes(st, 1);
  size_t nl = strlen(name);
  if (nn != crypto_secretbox_NONCEBYTES || cn < (int)(crypto_secretbox_MACBYTES + nl + 1)) {
    sqlite3_finalize(st);
    return err_set(e, ERR_INVALID, "secrets", "secret '%s': stored record is damaged", name);
  }
  size_t pl = (size_t)cn - crypto_secretbox_MACBYTES;
  unsigned char *plain = sodium_malloc(pl);
  if (!plain) {
    sqlite3_finalize(st);
    return err_set(e, ERR_NOMEM, "secrets", "out of memory");
  }
  int bad = crypto_secretbox_open_easy(plain, ct, (size_t)cn, nonce, key) != 0 ||
            memcmp(plain, name, nl + 1) != 0;
  sqlite3_finalize(st);
  if (bad) {
    sodium_free(plain);
    return err_set(e, ERR_INVALID, "secrets",
                   "secret '%s' cannot be decrypted: wrong key (secrets.key or the key "
                   "variable changed) or the record was tampered with",
                   name);
  }
  size_t vl = pl - nl - 1;
  char *v = xmalloc(vl + 1);
  memcpy(v, plain + nl + 1, vl);
  v[vl] = 0;
  sodium_free(plain);
  *value = v;
  if (len) *len = vl;
  return 0;
}

int secrets_remove(struct store *s, const char *name, struct err *e) {
  if (!secrets_name_valid(name)) return bad_name(name, e);
  sqlite3_stmt *st = NULL;
  int rc = store_prepare(s, "DELETE FROM secrets WHERE name = ?1", &st, e);
  if (rc) return rc;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  if (sqlite3_step(st) != SQLITE_DONE) rc = store_error(s, e, "secrets: remove");
  sqlite3_finalize(st);
  if (!rc && sqlite3_changes(store_db(s)) == 0)
    rc = err_set(e, ERR_NOTFOUND, "secret_not_found", "secret '%s' is not set", name);
  return rc;
}

int secrets_names(struct store *s, char ***names, struct err *e) {
  *names = NULL;
  sqlite3_stmt *st = NULL;
  if (store_prepare(s, "SELECT name FROM secrets ORDER BY name", &st, e)) return ERR_IO;
  size_t n = 0, cap = 8;
  char **v = xcalloc(cap, sizeof *v);
  int step;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    if (n + 1 >= cap) {
      cap *= 2;
      v = xrealloc(v, cap * sizeof *v);
    }
    v[n++] = xstrdup((const char *)sqlite3_column_text(st, 0));
  }
  v[n] = NULL;
  sqlite3_finalize(st);
  if (step != SQLITE_DONE) {
    secrets_free_names(v);
    return store_error(s, e, "secrets: list");
  }
  *names = v;
  return 0;
}

void secrets_free_names(char **names) {
  if (!names) return;
  for (char **p = names; *p; p++) free(*p);
  free(names);
}

/* --- redaction ---------------------------------------------------------- */

/* Values resolved in this process. Longest first, so a secret that contains
 * another is replaced whole. Guarded for the daemon's threads. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static char **reg_vals;
static size_t *reg_lens;
static size_t reg_n;
/* reg_n as secrets_registered reads it without the lock (every tool call
 * asks): stored under reg_mu after each change of reg_n. */
static _Atomic size_t reg_count;

void secrets_register_value(const char *value, size_t len) {
  if (!value || !len) return;
  pthread_mutex_lock(&reg_mu);
  for (size_t i = 0; i < reg_n; i++)
    if (reg_lens[i] == len && !memcmp(reg_vals[i], value, len)) {
      pthread_mutex_unlock(&reg_mu);
      return;
    }
  reg_vals = xrealloc(reg_vals, (reg_n + 1) * sizeof *reg_vals);
  reg_lens = xrealloc(reg_lens, (reg_n + 1) * sizeof *reg_lens);
  size_t at = reg_n;
  while (at > 0 && reg_lens[at - 1] < len) {
    reg_vals[at] = reg_vals[at - 1];
    reg_lens[at] = reg_lens[at - 1];
    at--;
  }
  reg_vals[at] = xmalloc(len);
  memcpy(reg_vals[at], value, len);
  reg_lens[at] = len;
  reg_n++;
  atomic_store_explicit(&reg_count, reg_n, memory_order_release);
  pthread_mutex_unlock(&reg_mu);
}

size_t secrets_registered(void) {
  return atomic_load_explicit(&reg_count, memory_order_acquire);
}

void secrets_forget_all(void) {
  pthread_mutex_lock(&reg_mu);
  for (size_t i = 0; i < reg_n; i++) {
    sodium_memzero(reg_vals[i], reg_lens[i]);
    free(reg_vals[i]);
  }
  free(reg_vals);
  free(reg_lens);
  reg_vals = NULL;
  reg_lens = NULL;
  reg_n = 0;
  atomic_store_explicit(&reg_count, 0, memory_order_release);
  pthread_mutex_unlock(&reg_mu);
}

static const char REDACTED[] = "[secret]";

/* Caller holds reg_mu. Returns the number of replacements. */
static int redact_locked(const char *text, size_t len, struct sbuf *b) {
  int hits = 0;
  size_t i = 0;
  while (i < len) {
    size_t k = 0;
    for (; k < reg_n; k++)
      if (reg_lens[k] <= len - i && !memcmp(text + i, reg_vals[k], reg_lens[k])) break;
    if (k < reg_n) {
      sbuf_append(b, REDACTED, sizeof REDACTED - 1);
      i += reg_lens[k];
      hits++;
    } else {
      sbuf_append(b, text + i, 1);
      i++;
    }
  }
  return hits;
}

char *secrets_redact(const char *text, size_t len, size_t *outlen) {
  struct sbuf b = {0};
  sbuf_append(&b, "", 0);
  pthread_mutex_lock(&reg_mu);
  if (reg_n == 0)
    sbuf_append(&b, text, len);
  else
    redact_locked(text, len, &b);
  pthread_mutex_unlock(&reg_mu);
  if (outlen) *outlen = b.len;
  return sbuf_take(&b);
}

static int redact_json_rec(cJSON *v, int depth) {
  int hits = 0;
  if (!v || depth > JSON_PARSE_MAX_DEPTH + 8) return 0; /* anything json_parse builds */
  if (v->string) {
    struct sbuf b = {0};
    sbuf_append(&b, "", 0);
    int h = redact_locked(v->string, strlen(v->string), &b);
    if (h && !(v->type & cJSON_StringIsConst)) {
      cJSON_free(v->string);
      v->string = cJSON_malloc(b.len + 1);
      memcpy(v->string, b.s, b.len + 1);
      hits += h;
    }
    sbuf_free(&b);
  }
  if (cJSON_IsString(v) && v->valuestring) {
    struct sbuf b = {0};
    sbuf_append(&b, "", 0);
    int h = redact_locked(v->valuestring, strlen(v->valuestring), &b);
    if (h) {
      cJSON_SetValuestring(v, b.s);
      hits += h;
    }
    sbuf_free(&b);
  }
  for (cJSON *c = v->child; c; c = c->next) hits += redact_json_rec(c, depth + 1);
  return hits;
}

int secrets_redact_json(cJSON *v) {
  pthread_mutex_lock(&reg_mu);
  int hits = reg_n ? redact_json_rec(v, 0) : 0;
  pthread_mutex_unlock(&reg_mu);
  return hits;
}

/* --- resolution for host tools ------------------------------------------ */

int secrets_resolve(struct runtime *rt, const char *name, char **value, struct err *e) {
  *value = NULL;
  unsigned char key[SECRETS_KEY_BYTES];
  struct store *st = NULL;
  if (!secrets_name_valid(name)) return bad_name(name, e);
  const char *env = rt->cfg ? config_string(rt->cfg, "secrets_key_env", NULL) : NULL;
  int rc = secrets_load_key(rt->workspace, env, 0, key, e);
  if (!rc) rc = runtime_store(rt, &st, e);
  size_t len = 0;
  if (!rc) rc = secrets_get(st, key, name, value, &len, e);
  sodium_memzero(key, sizeof key);
  if (rc) return rc;
  secrets_register_value(*value, len);
  return 0;
}

int secrets_check_origin(const struct config *cfg, const char *tool, const char *name,
                         const struct origin *o, struct err *e) {
  const struct config_secret *cs = config_secret(cfg, name);
  if (!cs || cs->n_origins == 0)
    return err_set(e, ERR_DENIED, "secret_not_allowed",
                   "%s: secret %s has no origins declared, so it may not be sent anywhere; "
                   "declare where it may go in luagent.lua: secrets = { %s = { origins = { "
                   "\"https://host[:port]\" } } }",
                   tool, name, name);
  for (size_t i = 0; i < cs->n_origins; i++)
    if (origin_equal(&cs->origins[i], o)) return 0;
  struct sbuf allowed = {0};
  char buf[ORIGIN_HOST_MAX + 32];
  for (size_t i = 0; i < cs->n_origins; i++)
    sbuf_printf(&allowed, "%s%s", i ? ", " : "", origin_format(&cs->origins[i], buf, sizeof buf));
  int rc = err_set(e, ERR_DENIED, "secret_not_allowed", "%s: secret %s may not be sent to %s (allowed: %s)",
                   tool, name, origin_format(o, buf, sizeof buf), allowed.s ? allowed.s : "");
  sbuf_free(&allowed);
  return rc;
}

int secrets_is_ref(const cJSON *v) {
  if (!cJSON_IsObject(v) || !v->child || v->child->next) return 0;
  return v->child->string && !strcmp(v->child->string, "secret") && cJSON_IsString(v->child);
}

int secrets_resolve_value(struct runtime *rt, const cJSON *v, char **value, struct err *e) {
  *value = NULL;
  if (cJSON_IsString(v)) {
    *value = xstrdup(v->valuestring);
    return 0;
  }
  if (secrets_is_ref(v)) return secrets_resolve(rt, v->child->valuestring, value, e);
  return err_set(e, ERR_INVALID, "invalid_args", "expected a string or { secret = \"NAME\" }");
}

int secrets_append_headers(struct runtime *rt, const cJSON *hdrs, const char *what,
                           struct curl_slist **list, struct err *e) {
  for (const cJSON *h = hdrs ? hdrs->child : NULL; h; h = h->next) {
    char *hv = NULL;
    int rc = secrets_resolve_value(rt, h, &hv, e);
    if (!rc && strpbrk(hv, "\r\n"))
      rc = err_set(e, ERR_INVALID, "invalid_args", "%s: header '%s' has forbidden characters",
                   what, h->string);
    else if (rc)
      err_prefix(e, "%s: header '%s'", what, h->string);
    if (rc) {
      if (hv) sodium_memzero(hv, strlen(hv));
      free(hv);
      curl_slist_free_all(*list);
      *list = NULL;
      return rc;
    }
    size_t ll = strlen(h->string) + strlen(hv) + 3;
    char *line = xmalloc(ll);
    snprintf(line, ll, "%s: %s", h->string, hv);
    *list = curl_slist_append(*list, line);
    sodium_memzero(line, ll);
    sodium_memzero(hv, strlen(hv));
    free(line);
    free(hv);
  }
  return 0;
}
