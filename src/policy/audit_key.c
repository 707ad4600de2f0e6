/* audit_key.c - the audit signing key and what it signs (see audit.h):
 * where audit.key and audit.anchor live, loading or making the key (never
 * a new one for a signed chain, never one other than the pinned), head
 * signatures, and the same key over other messages (the cluster's). Kept
 * apart from the chain so the code that touches the secret key is one
 * short file to review. */
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "audit.h"
#include "audit_impl.h"
#include "secrets.h"
#include "util.h"

/* --- the signing key ---------------------------------------------------- */

/* <the database's folder>/name, or given when not NULL. */
static void beside_db(struct store *s, const char *given, const char *name, char *out, size_t n) {
  if (given) {
    snprintf(out, n, "%s", given);
    return;
  }
  const char *p = store_path(s);
  const char *slash = strrchr(p, '/');
  if (slash)
    snprintf(out, n, "%.*s/%s", (int)(slash - p), p, name);
  else
    snprintf(out, n, "%s", name);
}

static void default_key_path(struct store *s, const struct audit_opts *o, char *out, size_t n) {
  beside_db(s, o ? o->key_path : NULL, "audit.key", out, n);
}

void audit__anchor_path(struct store *s, const struct audit_opts *o, char *out, size_t n) {
  beside_db(s, o ? o->anchor_path : NULL, "audit.anchor", out, n);
}

/* Loads (or creates) the Ed25519 key pair from its 32-byte seed. */

/* The pinned public key (audit.public_key), when there is one. */
int audit__pinned_key(const struct audit_opts *o, unsigned char pk[crypto_sign_PUBLICKEYBYTES],
               struct err *e) {
  size_t got = 0;
  if (!o || !o->public_key) return 1;
  if (strlen(o->public_key) != 2 * crypto_sign_PUBLICKEYBYTES ||
      sodium_hex2bin(pk, crypto_sign_PUBLICKEYBYTES, o->public_key, strlen(o->public_key), NULL,
                     &got, NULL) ||
      got != crypto_sign_PUBLICKEYBYTES)
    return err_set(e, ERR_INVALID, "config",
                   "luagent.lua: audit.public_key must be %d hex digits (see `luagent audit key`)",
                   2 * crypto_sign_PUBLICKEYBYTES);
  return 0;
}

/* Loads (create != 0: makes on first use) the signing key. A chain that
 * already carries a signed head never gets a new key: a deleted audit.key
 * must not let the next process re-sign whatever the table now holds. A
 * key that is not the pinned one is refused. */
int audit__load_signer(struct store *s, const struct audit_opts *o, int create,
                unsigned char pk[crypto_sign_PUBLICKEYBYTES],
                unsigned char sk[crypto_sign_SECRETKEYBYTES], struct err *e) {
  char path[4200];
  unsigned char seed[crypto_sign_SEEDBYTES], pin[crypto_sign_PUBLICKEYBYTES];
  default_key_path(s, o, path, sizeof path);
  int pinned = audit__pinned_key(o, pin, e);
  if (pinned < 0) return pinned;
  if (create && access(path, F_OK) != 0) {
    struct audit_head h;
    int have = 0;
    struct err he = {0};
    if (pinned == 0 || (!audit__head_read(s, &h, &have, &he) && have && h.sig[0]))
      return err_set(e, ERR_INVALID, "audit",
                     "the audit signing key %s is missing, but %s: restore the key (luagent "
                     "never makes a new one for a signed chain)",
                     ".luagent/audit.key",
                     pinned == 0 ? "luagent.lua pins audit.public_key" : "the chain's head is signed");
  }
  int rc = secrets_keyfile(path, seed, sizeof seed, create, e);
  if (rc) return rc;
  crypto_sign_seed_keypair(pk, sk, seed);
  sodium_memzero(seed, sizeof seed);
  if (pinned == 0 && sodium_memcmp(pk, pin, sizeof pin)) {
    sodium_memzero(sk, crypto_sign_SECRETKEYBYTES);
    return err_set(e, ERR_INVALID, "audit",
                   ".luagent/audit.key is not the key luagent.lua pins (audit.public_key)");
  }
  return 0;
}

int audit_public_key(struct store *s, const struct audit_opts *o, char out[65], struct err *e) {
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  int rc = audit__load_signer(s, o, 0, pk, sk, e);
  sodium_memzero(sk, sizeof sk);
  if (!rc) util_hex(pk, sizeof pk, out);
  return rc;
}

/* What a head signature signs. v2 (with the row count) since the head
 * carries one; a head written before that (rows NULL) was signed as v1. */
void audit__head_message(long long seq, long long rows, const char *hash, char *out, size_t n) {
  if (rows < 0)
    snprintf(out, n, "luagent-audit-head:%lld:%s", seq, hash);
  else
    snprintf(out, n, "luagent-audit-head:v2:%lld:%lld:%s", seq, rows, hash);
}

/* 1 when sighex is a valid signature of the head by pk. */
int audit__head_sig_ok(const unsigned char pk[crypto_sign_PUBLICKEYBYTES], long long seq,
                long long rows, const char *hash, const char *sighex) {
  unsigned char sig[crypto_sign_BYTES];
  size_t bin = 0;
  char msg[160];
  audit__head_message(seq, rows, hash, msg, sizeof msg);
  return !sodium_hex2bin(sig, sizeof sig, sighex, strlen(sighex), NULL, &bin, NULL) &&
         bin == sizeof sig &&
         !crypto_sign_verify_detached(sig, (const unsigned char *)msg, strlen(msg), pk);
}

/* --- signing a head kept elsewhere --------------------------------------- */

int audit_head_sign(struct store *s, const struct audit_opts *o, struct audit_head *h,
                    struct err *e) {
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  if (sodium_init() < 0) return err_set(e, ERR_FAIL, "audit", "libsodium failed to initialise");
  int rc = audit__load_signer(s, o, 1, pk, sk, e);
  if (!rc) {
    char msg[160];
    unsigned char sig[crypto_sign_BYTES];
    audit__head_message(h->seq, h->rows, h->hash, msg, sizeof msg);
    crypto_sign_detached(sig, NULL, (const unsigned char *)msg, strlen(msg), sk);
    util_hex(sig, sizeof sig, h->sig);
  }
  sodium_memzero(sk, sizeof sk);
  return rc;
}

int audit_head_sig_check(struct store *s, const struct audit_opts *o, const struct audit_head *h,
                         struct err *e) {
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  if (sodium_init() < 0) return err_set(e, ERR_FAIL, "audit", "libsodium failed to initialise");
  int pinned = audit__pinned_key(o, pk, e);
  if (pinned < 0) return pinned;
  if (pinned != 0) {
    int rc = audit__load_signer(s, o, 0, pk, sk, e);
    sodium_memzero(sk, sizeof sk);
    if (rc) return rc;
  }
  return audit__head_sig_ok(pk, h->seq, h->rows, h->hash, h->sig);
}

static int other_message(const char *msg, struct err *e) {
  if (!strncmp(msg, "luagent-audit-head:", 19))
    return err_set(e, ERR_INVALID, "audit", "not a message to sign: it reads as a head's");
  return sodium_init() < 0 ? err_set(e, ERR_FAIL, "audit", "libsodium failed to initialise") : 0;
}

int audit_msg_sign(struct store *s, const struct audit_opts *o, const char *msg, char sig[129],
                   struct err *e) {
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  sig[0] = 0;
  int rc = other_message(msg, e);
  if (!rc) rc = audit__load_signer(s, o, 1, pk, sk, e);
  if (!rc) {
    unsigned char bin[crypto_sign_BYTES];
    crypto_sign_detached(bin, NULL, (const unsigned char *)msg, strlen(msg), sk);
    util_hex(bin, sizeof bin, sig);
  }
  sodium_memzero(sk, sizeof sk);
  return rc;
}

int audit_msg_sig_check(struct store *s, const struct audit_opts *o, const char *msg,
                        const char *sig, struct err *e) {
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  if (other_message(msg, e)) return -1;
  int pinned = audit__pinned_key(o, pk, e);
  if (pinned < 0) return pinned;
  if (pinned != 0) {
    int rc = audit__load_signer(s, o, 0, pk, sk, e);
    sodium_memzero(sk, sizeof sk);
    if (rc) return rc < 0 ? rc : -rc;
  }
  unsigned char bin[crypto_sign_BYTES];
  size_t n = 0;
  return sig && !sodium_hex2bin(bin, sizeof bin, sig, strlen(sig), NULL, &n, NULL) &&
         n == sizeof bin &&
         !crypto_sign_verify_detached(bin, (const unsigned char *)msg, strlen(msg), pk);
}
